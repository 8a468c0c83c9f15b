#include "users.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "abx/base/os.h"

namespace abx::envd {

Users::Users(std::string default_user, std::map<std::string, User> overrides)
    : default_user_(std::move(default_user)), overrides_(std::move(overrides)) {}

Result<User> Users::lookup(std::string_view name) const {
  if (auto it = overrides_.find(std::string(name)); it != overrides_.end()) return it->second;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  std::string n(name);
  if (::getpwnam_r(n.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found) {
    return User{n, pw.pw_uid, pw.pw_gid, pw.pw_dir ? pw.pw_dir : "/"};
  }
  // A template rootfs may lack the entries; the E2B users have fixed identities.
  if (name == "root") return User{"root", 0, 0, "/root"};
  if (name == "user") return User{"user", 1000, 1000, "/home/user"};
  return Error(ErrorCode::kUnauthenticated, "unknown user '" + n + "'");
}

Result<User> Users::resolve(std::string_view requested) const {
  std::string_view name = requested.empty() ? std::string_view(default_user_) : requested;
  if (name.size() > 64 || name.find('\0') != std::string_view::npos) {
    return Error(ErrorCode::kUnauthenticated, "invalid user name");
  }
  if (can_switch()) return lookup(name);
  // Not root: only envd's own identity is possible.
  uid_t me = ::geteuid();
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  std::string home = "/";
  std::string my_name = std::to_string(me);
  if (::getpwuid_r(me, &pw, buf.data(), buf.size(), &found) == 0 && found) {
    my_name = pw.pw_name;
    if (pw.pw_dir) home = pw.pw_dir;
  }
  if (const char* h = ::getenv("HOME"); h && *h) home = h;
  if (auto it = overrides_.find(std::string(name));
      it != overrides_.end() && it->second.uid == me) {
    return it->second;
  }
  if (name == default_user_ || name == my_name) {
    return User{std::string(name), me, ::getegid(), home};
  }
  return Error(ErrorCode::kPermissionDenied, "envd is not running as root (uid " +
                                                 std::to_string(me) + ") and cannot act as user '" +
                                                 std::string(name) + "'");
}

Result<std::string> resolve_path(std::string_view path, const User& user) {
  if (path.find('\0') != std::string_view::npos) {
    return invalid_argument("path contains a NUL byte");
  }
  if (path.empty()) return invalid_argument("path is empty");
  if (path.size() > 4096) return invalid_argument("path is longer than 4096 bytes");
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end - start > 255) return invalid_argument("a path component is longer than 255 bytes");
    start = end + 1;
  }
  std::string out;
  if (path == "~") {
    out = user.home;
  } else if (path.substr(0, 2) == "~/") {
    out = user.home + std::string(path.substr(1));
  } else if (path[0] == '/') {
    out = std::string(path);
  } else {
    out = user.home + (user.home.ends_with('/') ? "" : "/") + std::string(path);
  }
  // Lexically drop trailing slashes (but keep "/"): "dir/" and "dir" name the same entry.
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// os::code_for_errno, with the errnos a request provokes with its own path or data: those are
// the client's mistake (4xx). (The one map says "not found" for ENOTDIR, a host-side lookup; a
// request's path through a file is an invalid argument here.) The rest, what nobody asked for,
// is as the one map has it (internal: a 5xx then means an abx bug worth a report).
ErrorCode request_code_for_errno(int err) {
  switch (err) {
    case ENOTEMPTY:
      return ErrorCode::kAlreadyExists;
    case ELOOP:
    case ENOTDIR:
    case EISDIR:
    case ENAMETOOLONG:
    case EXDEV:
    case ENXIO:  // opening a socket, or a FIFO without a reader
    case ENODEV:
    case EOVERFLOW:
      return ErrorCode::kInvalidArgument;
    case EBUSY:
    case ETXTBSY:
      return ErrorCode::kFailedPrecondition;
    case EFBIG:
      return ErrorCode::kPayloadTooLarge;
    case EMLINK:
      return ErrorCode::kResourceExhausted;
    default:
      return os::code_for_errno(err);
  }
}

Error errno_error(int err, std::string_view what) {
  std::string msg = std::string(what) + ": " + std::strerror(err);
  switch (err) {
    case ELOOP:
      msg = std::string(what) + ": symbolic link loop (too many levels of symbolic links)";
      break;
    case EACCES:
    case EPERM:
      msg += " (permission denied for this user)";
      break;
    case EROFS:
      msg += " (the path is on a read-only mount)";
      break;
    case EBUSY:
    case ETXTBSY:
      // A mount point (e.g. a file abx binds into the sandbox) or a running executable.
      msg += " (the path is in use)";
      break;
    default:
      break;
  }
  return Error(request_code_for_errno(err), std::move(msg));
}

}  // namespace abx::envd
