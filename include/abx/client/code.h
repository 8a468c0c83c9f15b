// Stateful code execution: the sandbox's code interpreter (abx-interp, E2B's code-interpreter
// API on port 49999; docs/code-interpreter.md), from C++.
//
//   auto code = sandbox.code();
//   code.run("x = 41");
//   auto ex = code.run("x + 1");            // ex->text() == "42"
//   auto ctx = code.create_context({.cwd = "/tmp"});
//   code.run("import os; os.getcwd()", {.context_id = ctx->id});
//
// Variables, imports and figures persist between run() calls of one context (a Jupyter kernel);
// contexts do not share state. Output is streamed: the callbacks fire as the kernel produces it,
// and the returned Execution holds all of it. A `timeout` ends the request and the interpreter
// interrupts the code (KeyboardInterrupt); the context stays usable.
//
// Requests go to port 49999 like the sandbox's other ports (abxd's proxy, with the E2b-Sandbox-*
// routing headers and X-Access-Token, or the config's sandbox dialer); /execute reads the NDJSON
// stream line by line as it arrives (a line is at most kMaxCodeLineBytes, everything an
// execution keeps at most kMaxExecutionBytes: past either, kResourceExhausted).
//
// Errors (as values): kNotFound (unknown context; the interpreter's words), kInvalidArgument
// (unsupported language, bad env var, bad cwd, both context_id and language), kResourceExhausted
// (too many contexts), kFailedPrecondition (the sandbox's template has no code interpreter),
// kDeadlineExceeded (the timeout passed), kUnavailable (the kernel would not start, the stream
// ended without end_of_execution, transport), kInternal (a malformed stream line).
// An exception raised by the code is not an Error: it is Execution::error.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/client/export.h"

namespace abx::client {

namespace detail {
struct SandboxState;
}

inline constexpr std::uint16_t kCodeInterpreterPort = 49999;
inline constexpr std::size_t kMaxCodeLineBytes = 64u << 20;    // one NDJSON line
inline constexpr std::size_t kMaxExecutionBytes = 256u << 20;  // all of one Execution

// One rich result: the kernel's MIME bundle mapped to E2B's fields. Absent formats are empty.
struct ABX_EXPORT CodeResult {
  bool is_main_result = false;  // the cell's last expression (vs display()/plt.show())
  std::string text, html, markdown, svg, png, jpeg, pdf, latex, javascript;  // png/jpeg/pdf: base64
  boost::json::value json;                                                   // null when absent
  std::map<std::string, boost::json::value> extra;                           // other MIME types
  std::vector<std::string> formats() const;  // "text", "html", "png", ... present ones
};

struct ABX_EXPORT CodeError {
  std::string name;   // e.g. "ZeroDivisionError"
  std::string value;  // e.g. "division by zero"
  std::string traceback;
};

struct ABX_EXPORT Execution {
  std::vector<CodeResult> results;
  std::vector<std::string> stdout_chunks, stderr_chunks;
  std::optional<CodeError> error;
  std::optional<std::int64_t> execution_count;
  // The main result's text, "" when there is none.
  std::string text() const;
  // All stdout (stderr) chunks, concatenated.
  std::string stdout_text() const;
  std::string stderr_text() const;
};

// E2B's JSON of an Execution (the SDKs' toJSON): {results: [{text?, html?, …, png?, json?,
// extra?, isMainResult}], logs: {stdout: [...], stderr: [...]}, error: {name, value, traceback}
// | null, executionCount: n | null}. Absent formats are left out.
ABX_EXPORT boost::json::object to_json(const CodeResult& r);
ABX_EXPORT boost::json::object to_json(const Execution& ex);

struct ABX_EXPORT RunCodeOptions {
  std::string context_id;                     // "" = the language's default context
  std::string language;                       // "" = python; exclusive with context_id
  std::map<std::string, std::string> envs;    // for this execution only
  std::chrono::milliseconds timeout{60'000};  // of the whole execution; 0 = none
  // Called on the calling thread, in stream order, as each line arrives.
  std::function<void(std::string_view)> on_stdout, on_stderr;
  std::function<void(const CodeResult&)> on_result;
  std::function<void(const CodeError&)> on_error;
};

struct ABX_EXPORT CodeContext {
  std::string id, language, cwd;
};

struct ABX_EXPORT CreateContextOptions {
  std::string language;  // "" = python
  std::string cwd;       // "" = the default user's home
};

class ABX_EXPORT CodeInterpreter {
 public:
  explicit CodeInterpreter(std::shared_ptr<detail::SandboxState> state);

  // POST /execute.
  Result<Execution> run(std::string_view code, const RunCodeOptions& opts = {});
  // POST /contexts.
  Result<CodeContext> create_context(const CreateContextOptions& opts = {});
  // GET /contexts: the default Python context included.
  Result<std::vector<CodeContext>> list_contexts();
  // POST /contexts/{id}/restart: a fresh kernel, all state gone.
  Status restart_context(std::string_view id);
  // DELETE /contexts/{id}.
  Status remove_context(std::string_view id);

 private:
  std::shared_ptr<detail::SandboxState> state_;
};

}  // namespace abx::client
