// A Jupyter kernel process and abx's client of it over ZeroMQ.
//
// Kernel::start() writes a connection file (ipc transport: socket files in a private 0700
// directory, a random HMAC key), spawns the kernel argv (by default Debian's
// `python3 -m ipykernel_launcher -f <file>`) in its own process group, connects shell, control
// and iopub sockets and waits until the kernel answers kernel_info and its iopub delivers (so no
// output of the first execution is lost to ZeroMQ's slow-joiner window).
//
// Each Kernel has one thread that owns its sockets (ZeroMQ sockets are not thread-safe); the
// public methods are thread-safe and hand work to it through a queue and an eventfd, and the
// kernel's exit is watched through a pidfd in the same poll. Callbacks run on that thread and
// must not block; they may call execute() again.
//
// Executions run one at a time in submission order. An execution ends when both its
// execute_reply (shell) and the kernel's `idle` status for it (iopub) have arrived, so every
// output it produced has been delivered first.
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/interp/wire.h"

namespace abx::interp {

struct KernelOptions {
  // The kernel's argv; "{connection_file}" is replaced by the connection file's path.
  std::vector<std::string> argv{"python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"};
  std::string cwd;               // working directory of the kernel ("" = inherit)
  std::vector<std::string> env;  // KEY=VALUE, the kernel's whole environment ({} = inherit)
  // Parent of the kernel's private directory (connection file, ipc sockets). "" = $TMPDIR or /tmp.
  std::string runtime_dir;
  std::chrono::milliseconds start_timeout{30'000};
  WireLimits limits;
};

// What one execution sends back.
struct ExecuteCallbacks {
  // Every iopub message whose parent is this execution (stream, execute_input, execute_result,
  // display_data, error, status, clear_output, ...), in the kernel's order.
  std::function<void(const Message&)> on_output;
  // Once, last: the execute_reply's content ({"status":"ok"|"error"|"aborted", ...}), or an Error
  // when the execution could not finish: kUnavailable "kernel exited (...)" when the process
  // died, kFailedPrecondition "cancelled: ..." when the kernel was shut down or restarted
  // meanwhile.
  std::function<void(Result<boost::json::object>)> on_done;
};

class Kernel {
 public:
  // Errors: kInvalidArgument (empty argv; a runtime_dir too long for the unix socket paths
  // "<runtime_dir>/abx-kernel-XXXXXX/k-N", about 80 bytes at most), kUnavailable (spawn failed, the
  // kernel exited or did not answer within start_timeout; the message carries the last lines of its
  // stderr).
  static Result<std::unique_ptr<Kernel>> start(KernelOptions options);
  ~Kernel();  // shutdown()
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // Queues `code` (execute_request: store_history = !silent, allow_stdin false,
  // stop_on_error false). stop_on_error is false on purpose: a request is sent only after the
  // previous one ended, so the kernel never holds a queue for it to abort; with true, ipykernel
  // (6.17) keeps aborting execute_requests for one event-loop turn after an error reply, and the
  // next execution, sent as soon as the idle status arrives, is often answered "aborted" (about
  // half the time on a loaded machine). A failed execution does not cancel the queued ones.
  // After shutdown(), on_done runs at once on the caller's thread (kFailedPrecondition).
  void execute(std::string code, bool silent, ExecuteCallbacks callbacks);
  // SIGINT to the kernel's process group: the running execution ends with a KeyboardInterrupt
  // error; queued ones still run.
  Status interrupt();
  // Kills the process group (SIGKILL), ends pending executions (kFailedPrecondition) and starts a
  // fresh kernel with the same options (a new private directory and key): all state is gone. Blocks
  // until the new kernel is ready; its error is start()'s. Also revives a kernel that died.
  // Must not be called from a callback (kFailedPrecondition).
  Status restart();
  // Kills the process group and joins the thread; pending executions end with kFailedPrecondition.
  // Idempotent. Must not be called from a callback (it would join its own thread).
  void shutdown();

  bool alive() const;
  pid_t pid() const;

  struct Impl;

 private:
  explicit Kernel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace abx::interp
