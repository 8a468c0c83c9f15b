// Parent-side syscall helpers of the runtime: raw pidfd calls and small file helpers (EINTR
// retry and errors that name the call are abx::os, base/os.h).
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/base/os.h"  // retry_eintr, errno_error: the runtime's syscalls use them throughout
#include "abx/runtime/process.h"  // process_start_time, used with the helpers below

namespace abx::runtime {

// Raw pidfd calls: glibc 2.36's <sys/pidfd.h> lacks extern "C" and does not link from C++.
inline int sys_pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
inline int sys_pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
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
