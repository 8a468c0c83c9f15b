// Thread-scoped filesystem credentials: the files API acts as the requested user.
//
// envd is root and serves every user from one process, so it cannot setuid(2) (that changes
// every thread, through glibc's setxid broadcast). Linux keeps the identity the kernel checks
// on filesystem access — fsuid, fsgid and the supplementary groups — per thread, and the raw
// setfsuid/setfsgid/setgroups system calls change only the calling thread's. While a FsCreds
// guard lives, path lookups, opens, creates, renames and removals on this thread are checked
// as the user (a fsuid other than 0 also drops the filesystem capabilities, CAP_DAC_OVERRIDE
// among them), and what is created is owned by the user. The guard restores the previous
// identity when it ends, errors included.
//
// Hold a guard only around synchronous filesystem calls, never across a wait that lets the
// thread run other requests' handlers (an Asio io thread serves every connection).
#pragma once

#include <sys/types.h>

#include <vector>

#include "abx/base/error.h"
#include "users.h"

namespace abx::envd {

class FsCreds {
 public:
  // Acts as `user` on this thread until the guard ends. When envd is not root it cannot and
  // need not switch (Users::resolve only hands out envd's own identity then): a no-op guard.
  // Errors: internal when the kernel refuses a switch (nothing is left switched then).
  static Result<FsCreds> act_as(const User& user);
  // Acts as envd's own process identity again (for envd's private files, e.g. its upload
  // staging directories) until the guard ends; the enclosing identity comes back afterwards.
  static Result<FsCreds> act_as_envd();

  FsCreds(FsCreds&& other) noexcept;
  FsCreds& operator=(FsCreds&&) = delete;
  FsCreds(const FsCreds&) = delete;
  FsCreds& operator=(const FsCreds&) = delete;
  ~FsCreds();

 private:
  FsCreds() = default;
  static Result<FsCreds> switch_to(uid_t uid, gid_t gid, const std::vector<gid_t>& groups);
  bool active_ = false;
  uid_t saved_uid_ = 0;
  gid_t saved_gid_ = 0;
  std::vector<gid_t> saved_groups_;
};

// The calling thread's filesystem uid (whom files created now would belong to).
uid_t current_fsuid();

}  // namespace abx::envd
