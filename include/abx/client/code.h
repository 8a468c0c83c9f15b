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
// Errors (as values): kNotFound (unknown context), kInvalidArgument (unsupported language, bad
// env var, bad cwd), kFailedPrecondition (the sandbox's template has no code interpreter),
// kDeadlineExceeded (the timeout passed), kUnavailable (the kernel would not start, transport).
// An exception raised by the code is not an Error: it is Execution::error.
#pragma once

#include <boost/json/value.hpp>
#include <chrono>
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
};

struct ABX_EXPORT RunCodeOptions {
  std::string context_id;                     // "" = the language's default context
  std::string language;                       // "" = python; exclusive with context_id
  std::map<std::string, std::string> envs;    // for this execution only
  std::chrono::milliseconds timeout{60'000};  // of the whole execution; 0 = none
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

  Result<Execution> run(std::string_view code, const RunCodeOptions& opts = {});
  Result<CodeContext> create_context(const CreateContextOptions& opts = {});
  Result<std::vector<CodeContext>> list_contexts();
  Status restart_context(std::string_view id);
  Status remove_context(std::string_view id);

 private:
  std::shared_ptr<detail::SandboxState> state_;
};

}  // namespace abx::client
