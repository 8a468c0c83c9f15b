#include "abx/base/os.h"

#include <unistd.h>

#include <cstring>

namespace abx::os {

std::string errno_name(int err) {
  if (const char* n = strerrorname_np(err)) return n;
  return "errno " + std::to_string(err);
}

ErrorCode code_for_errno(int err) {
  switch (err) {
    case EPERM:
    case EACCES:
    case EROFS:
      return ErrorCode::kPermissionDenied;
    case ENOENT:
    case ENOTDIR:
      return ErrorCode::kNotFound;
    case EEXIST:
      return ErrorCode::kAlreadyExists;
    case EAGAIN:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ErrorCode::kResourceExhausted;
    case ENOSPC:
    case EDQUOT:
      return ErrorCode::kInsufficientStorage;
    case EINVAL:
      return ErrorCode::kInvalidArgument;
    case ETIMEDOUT:
      return ErrorCode::kDeadlineExceeded;
    case ECONNREFUSED:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kInternal;
  }
}

Error errno_error(std::string_view what, int err) {
  return Error(code_for_errno(err), std::string(what) + ": " + errno_name(err));
}

Status write_all(int fd, std::string_view data, std::string_view what) {
  while (!data.empty()) {
    ssize_t n = retry_eintr([&] { return ::write(fd, data.data(), data.size()); });
    if (n < 0) return errno_error(what, errno);
    if (n == 0) return internal_error(std::string(what) + ": write returned 0");
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Result<std::string> read_all(int fd, std::size_t max, std::string_view what) {
  std::string out;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n < 0) return errno_error(what, errno);
    if (n == 0) return out;
    if (out.size() + static_cast<std::size_t>(n) > max) {
      return Error(ErrorCode::kPayloadTooLarge,
                   std::string(what) + ": more than " + std::to_string(max) + " bytes");
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace abx::os
