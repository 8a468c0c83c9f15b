// Internal: the code interpreter's /execute stream (NDJSON, one JSON object a line) decoded into
// an Execution, piece by piece as the body arrives. Pure (no I/O), so it is unit-tested alone.
#pragma once

#include <boost/json/value.hpp>
#include <cstddef>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/client/code.h"

namespace abx::client::detail {

// CodeResult from a `result` line (type and is_main_result included). Unknown keys go to extra.
CodeResult code_result_from_json(const boost::json::object& o);

class ExecutionReader {
 public:
  // Fills `ex` and fires opts' callbacks; both must outlive the reader.
  ExecutionReader(const RunCodeOptions& opts, Execution& ex,
                  std::size_t max_line = kMaxCodeLineBytes,
                  std::size_t max_total = kMaxExecutionBytes)
      : opts_(opts), ex_(ex), max_line_(max_line), max_total_(max_total) {}

  // Consumes a piece of the body; complete lines are decoded at once. Errors: kInternal (a line
  // that is not a JSON object), kResourceExhausted (a line or the execution over its cap).
  // After an error the reader takes nothing more.
  Status feed(std::string_view piece);
  // The body ended: a last line without its newline is decoded; kUnavailable when
  // end_of_execution never came.
  Status finish();
  bool ended() const { return ended_; }

 private:
  Status line(std::string_view l);

  const RunCodeOptions& opts_;
  Execution& ex_;
  std::size_t max_line_, max_total_;
  std::size_t total_ = 0;
  std::string partial_;
  bool ended_ = false;
  bool failed_ = false;
};

// The interpreter's (or abxd's proxy's) answer other than 200 as an Error: 404 kNotFound, 400
// kInvalidArgument, 429 kResourceExhausted, 503 kUnavailable with the body's text; abxd's 403
// "port … is private" and 502 "nothing listens on port …" are kFailedPrecondition (the template
// has no interpreter).
Error code_http_error(unsigned status, std::string_view body, std::string_view sandbox_id);
// The same for a failed dial through a sandbox dialer (abxd's own clients).
Error code_dial_error(const Error& e, std::string_view sandbox_id);

}  // namespace abx::client::detail
