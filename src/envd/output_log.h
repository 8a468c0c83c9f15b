// What the sandbox's own programs said: the output of the template's start command and command
// server, line by line with timestamps, and the supervisor's events (started, exited, restarting
// in N ms), in one bounded ring (1 MiB of text or 10 000 lines, the oldest dropped first).
//
// abx-envd keeps one (OutputLog::instance()), filled by the Supervisor (supervisor.h) from the
// pipes it gives each child as stdout and stderr, and serves it as `GET /logs?start=<ms>&limit=N`
// (an abx extension; token required):
//   {"logs":[{"timestampMs":…,"source":"command server","stream":"stderr","level":"warn",
//             "line":"…"}], "dropped": <lines lost to the bound so far>}
// abxd turns that into E2B's GET /sandboxes/{id}/logs.
#pragma once

#include <boost/json/object.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::envd {

struct LogLine {
  std::int64_t timestamp_ms = 0;  // Unix time
  std::string source;             // "start command", "command server"
  std::string stream;             // "stdout", "stderr", or "event" (the supervisor's own)
  std::string level;              // "info" (stdout, start), "warn" (stderr, exit, restart)
  std::string line;               // without the newline
};

class OutputLog {
 public:
  static constexpr std::size_t kMaxBytes = 1 << 20;
  static constexpr std::size_t kMaxLines = 10'000;
  static constexpr std::size_t kMaxLineBytes = 16 * 1024;  // longer lines are cut in pieces

  static OutputLog& instance();
  explicit OutputLog(std::size_t max_bytes = kMaxBytes, std::size_t max_lines = kMaxLines);

  void add(std::string_view source, std::string_view stream, std::string_view level,
           std::string_view line);
  // Lines with timestamp_ms >= start_ms, oldest first, at most `limit`.
  std::vector<LogLine> since(std::int64_t start_ms, std::size_t limit) const;
  std::uint64_t dropped() const;
  // The /logs response body.
  boost::json::object to_json(std::int64_t start_ms, std::size_t limit) const;

 private:
  mutable std::mutex mu_;
  std::deque<LogLine> lines_;
  std::size_t bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::size_t max_bytes_, max_lines_;
};

// GET /logs: `start` (Unix ms, default 0) and `limit` (default 1000, at most 10 000) from the
// query. Errors: kInvalidArgument for a malformed number.
Result<boost::json::object> logs_query_json(const OutputLog& log,
                                            const std::map<std::string, std::string>& query);

// Reads a child's stdout and stderr pipes into `log`, line by line, on its own thread, until
// both reach EOF — or, once finish() was called (the child exited), until they have been quiet
// for `linger` (a grandchild may hold them open for ever). finish() returns after the last line
// was added.
class OutputPump {
 public:
  OutputPump(OutputLog& log, std::string source, int stdout_fd, int stderr_fd);
  ~OutputPump();  // finish()
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;
  void finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace abx::envd
