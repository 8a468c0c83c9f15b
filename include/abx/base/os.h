// abx::os — the one home of the small POSIX chores every module does: retrying EINTR, writing or
// reading a whole buffer through a descriptor, turning an errno into an Error whose code a caller
// can act on (one errno→code map; a module that answers differently overrides a few errnos on
// top of it, e.g. envd's request errors and the HTTP spool), polling a condition with backoff
// until a deadline, and running a helper program (mkfs, criu, …) to completion.
//
// "Syscalls only in runtime" (style.md) is about the calls that set up or control sandboxes:
// namespaces, clone, mounts, cgroups, netlink stay in `runtime`. This layer is the thin, generic
// part every module needs — read/write/poll on plain descriptors (files, pipes, sockets) and
// spawning a program — so that it is written once, with EINTR and short writes handled.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::os {

// Calls `f` again while it returns -1 with errno EINTR; returns its last result (errno intact).
template <class F>
auto retry_eintr(F f) {
  decltype(f()) r;
  do {
    r = f();
  } while (r == -1 && errno == EINTR);
  return r;
}

// "EPERM" for EPERM (glibc's strerrorname_np), or "errno 1234".
std::string errno_name(int err);

// The canonical code for an errno of a host-side operation: ENOENT/ENOTDIR → not found,
// EPERM/EACCES/EROFS → permission denied, EEXIST → already exists, ENOSPC/EDQUOT → insufficient
// storage, EAGAIN/ENOMEM/EMFILE/ENFILE → resource exhausted, EINVAL → invalid argument,
// ETIMEDOUT → deadline exceeded, ECONNREFUSED → unavailable, anything else internal.
// (envd maps a request's errno its own way: there the client's own path decides.)
ErrorCode code_for_errno(int err);

// Error "<what>: <ERRNO>" with code_for_errno(err).
Error errno_error(std::string_view what, int err);

// Writes all of `data` to `fd`, retrying EINTR and short writes. A non-blocking descriptor that
// would block is an error (EAGAIN), never a spin. `what` names the target in the error. Empty
// `data` writes nothing (no syscall) and succeeds.
Status write_all(int fd, std::string_view data, std::string_view what = "write");

// write_all for a caller with its own errno map: 0, or the errno of the write that failed (EIO
// should write(2) ever report 0 bytes written for a non-empty buffer).
int write_all_errno(int fd, std::string_view data);

// Reads `fd` to its end (EOF), retrying EINTR; more than `max` bytes is kPayloadTooLarge.
Result<std::string> read_all(int fd, std::size_t max, std::string_view what = "read");

// Delays between the attempts of poll_until: `initial`, then each one `factor` times the last, at
// most `max`.
struct Backoff {
  std::chrono::nanoseconds initial;
  std::chrono::nanoseconds max;
  double factor = 2;

  std::chrono::nanoseconds after(std::chrono::nanoseconds delay) const {
    auto next = std::chrono::duration_cast<std::chrono::nanoseconds>(delay * factor);
    return std::min(max, std::max(initial, next));
  }
};

// Calls `done` until it returns true (→ true) or `deadline` has passed (→ false). `done` is called
// at least once, and a last time at the deadline: a sleep never runs past it. `now` and `sleep`
// are the clock (tests pass a fake one). A caller that stops early for a reason of its own (a
// child that exited) records it in `done`'s capture and returns true.
template <class TimePoint, class Done, class Now, class Sleep>
bool poll_until(TimePoint deadline, Backoff backoff, Done&& done, Now&& now, Sleep&& sleep) {
  for (auto delay = backoff.initial;; delay = backoff.after(delay)) {
    if (done()) return true;
    const auto t = now();
    if (t >= deadline) return false;
    sleep(std::min<std::chrono::nanoseconds>(
        delay, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - t)));
  }
}

template <class Done>
bool poll_until(std::chrono::steady_clock::time_point deadline, Backoff backoff, Done&& done) {
  return poll_until(
      deadline, backoff, done, [] { return std::chrono::steady_clock::now(); },
      [](std::chrono::nanoseconds d) { std::this_thread::sleep_for(d); });
}

// How run_program runs a helper. Its stdin is /dev/null; no descriptor of ours but its stdout and
// stderr pipes reaches it.
struct RunOptions {
  std::string what;                      // names the program in errors; default: argv[0]
  std::vector<std::string> env;          // its whole environment ("K=V"); default: empty
  std::size_t capture_limit = 64 << 10;  // bytes kept of stdout and of stderr each (exact);
                                         // the rest is read and dropped
  bool merge_output = false;  // stderr into the stdout pipe: one interleaved text in `out`
  // A time limit: past it the program (and its process group, with new_session) is killed
  // (SIGKILL) and the result says timed_out.
  std::optional<std::chrono::milliseconds> timeout;
  bool new_session = false;  // setsid(): it leads a session and a process group of its own
  // When set, the program is forked and waits (between fork and exec only a read and an exec,
  // nothing that allocates) until started(pid) returned; an error there kills it and is returned.
  // For a caller that must attach the pid somewhere (a cgroup, a record) before it runs.
  std::function<Status(pid_t)> started;
};

// What a program that ran left.
struct Finished {
  int status = -1;  // as waitpid reports it
  std::string out;  // stdout (and stderr, with merge_output), at most capture_limit bytes
  std::string err;  // stderr, at most capture_limit bytes
  bool out_truncated = false;
  bool err_truncated = false;
  bool timed_out = false;  // killed at the time limit

  bool exited_ok() const;
  // "exit 1", "killed by signal 9", "did not finish in time, killed".
  std::string describe() const;
};

// Runs `argv` (argv[0] an absolute path; no shell, no PATH search) to its end. An error only when
// it could not be run: the spawn's errno (a missing program is kNotFound), or started()'s error.
// Its exit status, whatever it is, is in the result.
Result<Finished> run(const std::vector<std::string>& argv, const RunOptions& options = {});

// run(), and an error unless the program exited 0: "<what> failed (exit 1): <its stderr's last
// lines>" (kDeadlineExceeded when it timed out, else kInternal).
Result<Finished> run_program(const std::vector<std::string>& argv, const RunOptions& options = {});

// A pipe (first: the read end, second: the write end), both close-on-exec.
Result<std::pair<UniqueFd, UniqueFd>> make_pipe();
// A connected pair of AF_UNIX stream sockets, both close-on-exec.
Result<std::pair<UniqueFd, UniqueFd>> make_socketpair();

}  // namespace abx::os
