// Who an envd request acts as, and where its relative paths point.
//
// E2B has two users in a sandbox: `root` and `user` (uid 1000), chosen per request by the Basic
// auth username or a `username` query parameter, defaulting to `user`. When envd runs as root it
// becomes that user in the child before exec and chowns what it creates. When it does not (a
// standalone envd on a host), it can only act as itself: the default user then maps to envd's
// own identity, and asking for anyone else is a permission_denied error, never a silent
// substitution.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <map>
#include <string>
#include <string_view>

#include "abx/base/error.h"

namespace abx::envd {

struct User {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
};

class Users {
 public:
  // `overrides` replace the password database for the names they hold (tests use them).
  Users(std::string default_user, std::map<std::string, User> overrides);

  // Resolves a requested name (empty: the default user). Errors: kUnauthenticated for an
  // unknown name; kPermissionDenied when envd is not root and the name is not envd's own.
  Result<User> resolve(std::string_view requested) const;
  const std::string& default_user() const { return default_user_; }
  // Whether envd switches users (it is root).
  bool can_switch() const { return ::geteuid() == 0; }

 private:
  Result<User> lookup(std::string_view name) const;
  std::string default_user_;
  std::map<std::string, User> overrides_;
};

// Resolves a request path for `user`: rejects NUL, empty, over-long paths and components;
// expands `~`; relative paths are taken from the user's home. Errors: kInvalidArgument.
Result<std::string> resolve_path(std::string_view path, const User& user);

// envd's code for a failed syscall of a request: abx::os::code_for_errno (ENOENT → not_found,
// EEXIST → already_exists, EACCES/EPERM/EROFS → permission_denied, ENOSPC/EDQUOT → insufficient
// storage, …) with a few errnos a request's own path or data provokes made 4xx on top (ENOTDIR,
// ELOOP, EISDIR, ENAMETOOLONG, … → invalid_argument, ENOTEMPTY → already_exists, EBUSY/ETXTBSY →
// failed_precondition, EFBIG → payload_too_large, EMLINK → resource_exhausted).
ErrorCode request_code_for_errno(int err);

// An Error for a failed syscall of a request, with request_code_for_errno's code and strerror's
// text (plus a hint for ELOOP, EACCES/EPERM, EROFS, EBUSY/ETXTBSY). `what` says what was
// attempted, e.g. "stat /tmp/x".
Error errno_error(int err, std::string_view what);

}  // namespace abx::envd
