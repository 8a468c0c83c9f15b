// abx::os — the one home of the small POSIX chores every module does: retrying EINTR, writing or
// reading a whole buffer through a descriptor, and turning an errno into an Error whose code a
// caller can act on.
//
// Syscalls that set up or control sandboxes (namespaces, mounts, cgroups, netlink) stay in
// `runtime`; these helpers are for plain descriptors (files, pipes, sockets) anywhere.
#pragma once

#include <cerrno>
#include <cstddef>
#include <string>
#include <string_view>

#include "abx/base/error.h"

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
// would block is an error (EAGAIN), never a spin. `what` names the target in the error.
Status write_all(int fd, std::string_view data, std::string_view what = "write");

// Reads `fd` to its end (EOF), retrying EINTR; more than `max` bytes is kPayloadTooLarge.
Result<std::string> read_all(int fd, std::size_t max, std::string_view what = "read");

}  // namespace abx::os
