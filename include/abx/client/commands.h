// Processes in a sandbox through envd's process.Process Connect service (`commands.run`).
//
// run() starts `/bin/bash -l -c <cmd>` with Process/Start (a Connect server stream over
// HTTP/1.1 chunked), delivers stdout/stderr to the callbacks as they arrive, and returns when
// the process ends. A non-zero exit is not an error: it is CommandResult::exit_code (the CLI
// and most callers want the code, not an exception). Errors: kFailedPrecondition when the
// sandbox lacks the `shell` capability (message names it), kDeadlineExceeded when
// CommandOptions::timeout passes (envd kills the process then), kUnauthenticated,
// kUnavailable, and whatever envd reports in the stream's end frame.
//
// start() is the background form: it returns a CommandHandle at once (after the `start`
// event, so pid() is known) and a thread reads the stream; wait() joins it.
#pragma once

#include <chrono>
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
struct ProcessStream;
}  // namespace detail

using OutputCallback = std::function<void(std::string_view data)>;

// A terminal's size in character cells.
struct ABX_EXPORT PtySize {
  std::uint16_t cols = 80;
  std::uint16_t rows = 24;
};

struct ABX_EXPORT CommandOptions {
  std::map<std::string, std::string> envs;
  std::string cwd;   // empty: the user's home
  std::string user;  // empty: envd's default user
  // Process lifetime (sent as Connect-Timeout-Ms; envd kills the process when it passes).
  // Zero: no limit.
  std::chrono::milliseconds timeout{60'000};
  OutputCallback on_stdout;
  OutputCallback on_stderr;
  bool stdin = false;  // keep stdin open for send_stdin (background handles)
  // Run on a fresh pseudo-terminal of this size (stdin, stdout and stderr are all the terminal):
  // its output arrives on on_stdout, input goes through send_pty, resize() changes its size.
  std::optional<PtySize> pty;
};

struct ABX_EXPORT CommandResult {
  int exit_code = 0;
  std::string stdout_data;
  std::string stderr_data;
  std::string error;  // envd's end.error, e.g. "exit status 1" or "signal: killed"
};

struct ABX_EXPORT ProcessInfo {
  std::uint32_t pid = 0;
  std::string tag;
  std::string cmd;
  std::vector<std::string> args;
};

class ABX_EXPORT CommandHandle {
 public:
  CommandHandle(std::shared_ptr<detail::SandboxState> state,
                std::shared_ptr<detail::ProcessStream> stream);
  CommandHandle(CommandHandle&&) noexcept;
  CommandHandle& operator=(CommandHandle&&) noexcept;
  ~CommandHandle();  // detaches: the process keeps running in the sandbox

  std::uint32_t pid() const;
  // Blocks until the process ends (or the stream fails).
  Result<CommandResult> wait();
  // SIGKILL; false when the process is already gone.
  Result<bool> kill();
  Status send_stdin(std::string_view data);
  // Closes the process's stdin (on a pty: sends EOF, ^D, as a user at the terminal would).
  Status close_stdin();
  // Input typed at the process's terminal (CommandOptions::pty), and its new size (SIGWINCH).
  Status send_pty(std::string_view data);
  Status resize(PtySize size);

 private:
  std::shared_ptr<detail::SandboxState> state_;
  std::shared_ptr<detail::ProcessStream> stream_;
};

class ABX_EXPORT Commands {
 public:
  explicit Commands(std::shared_ptr<detail::SandboxState> state) : state_(std::move(state)) {}

  Result<CommandResult> run(std::string_view cmd, const CommandOptions& opts = {});
  Result<CommandHandle> start(std::string_view cmd, const CommandOptions& opts = {});
  // An argv run directly, no shell: argv[0] is the program (looked up on PATH without a '/'),
  // the rest its arguments. The form that works in an image with no shell at all (run and
  // start send `/bin/bash -l -c CMD`, /bin/sh where the image has no bash).
  Result<CommandResult> run_argv(const std::vector<std::string>& argv,
                                 const CommandOptions& opts = {});
  Result<CommandHandle> start_argv(const std::vector<std::string>& argv,
                                   const CommandOptions& opts = {});
  Result<std::vector<ProcessInfo>> list();
  Result<bool> kill(std::uint32_t pid);

 private:
  std::shared_ptr<detail::SandboxState> state_;
};

}  // namespace abx::client
