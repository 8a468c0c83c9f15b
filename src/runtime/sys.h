// Parent-side syscall helpers of the runtime: EINTR retry and errors that name the call.
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/runtime/process.h"  // process_start_time, used with the helpers below

namespace abx::runtime {

// "EPERM" for EPERM (glibc's strerrorname_np), or "errno 1234".
std::string errno_name(int err);

// Maps an errno to the canonical code a caller can act on.
ErrorCode code_for_errno(int err);

// Error "<what>: <ERRNO>" with the code for `err`.
Error sys_error(std::string_view what, int err);

// Raw pidfd calls: glibc 2.36's <sys/pidfd.h> lacks extern "C" and does not link from C++.
inline int sys_pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
inline int sys_pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// Retries `f` while it fails with EINTR.
template <class F>
auto retry_eintr(F f) {
  decltype(f()) r;
  do {
    r = f();
  } while (r == -1 && errno == EINTR);
  return r;
}

// Small file helpers used for cgroup and /proc files. Writes are one write(2) so the kernel
// sees one value.
Status write_file(const std::string& path, std::string_view data);
// Creates `path` (which must not exist) with `data`.
Status create_file(const std::string& path, std::string_view data);
Result<std::string> read_file(const std::string& path, std::size_t max = 1 << 20);
Result<UniqueFd> open_fd(const std::string& path, int flags, mode_t mode = 0);

// Removes a directory tree without following symlinks and without crossing into other
// filesystems' mount points (a mount point is left and reported as an error).
Status remove_tree(const std::string& path);

}  // namespace abx::runtime
