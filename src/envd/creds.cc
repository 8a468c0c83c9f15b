// The raw system calls behind FsCreds. glibc's setgroups() (and setuid, setgid, …) apply to
// every thread of the process (the nptl "setxid" broadcast); the system calls themselves change
// only the caller's credentials, which is the point here. setfsuid/setfsgid report the previous
// value whatever happens, so each switch is checked by reading the value back (an invalid id,
// -1, changes nothing and returns the current one).
#include "creds.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace abx::envd {

namespace {

uid_t set_fsuid(uid_t uid) { return static_cast<uid_t>(::syscall(SYS_setfsuid, uid)); }
gid_t set_fsgid(gid_t gid) { return static_cast<gid_t>(::syscall(SYS_setfsgid, gid)); }
int set_groups(const std::vector<gid_t>& groups) {
  return static_cast<int>(::syscall(SYS_setgroups, groups.size(), groups.data()));
}

// This thread's supplementary groups (getgroups reads the calling thread's credentials).
Result<std::vector<gid_t>> thread_groups() {
  int n = ::getgroups(0, nullptr);
  if (n < 0) return internal_error(std::string("getgroups: ") + std::strerror(errno));
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  n = ::getgroups(n, groups.data());
  if (n < 0) return internal_error(std::string("getgroups: ") + std::strerror(errno));
  groups.resize(static_cast<std::size_t>(n));
  return groups;
}

}  // namespace

uid_t current_fsuid() { return set_fsuid(static_cast<uid_t>(-1)); }

Result<FsCreds> FsCreds::switch_to(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  FsCreds g;
  auto saved_groups = thread_groups();
  if (!saved_groups.ok()) return saved_groups.error();
  g.saved_groups_ = std::move(*saved_groups);
  g.saved_uid_ = current_fsuid();
  g.saved_gid_ = set_fsgid(static_cast<gid_t>(-1));
  // From here on the destructor restores whatever was changed.
  g.active_ = true;
  // Groups and fsgid first: they need CAP_SETGID, which a fsuid change keeps, but this order
  // also mirrors the restore (fsuid back first) so a half-done switch never outlives the guard.
  if (set_groups(groups) != 0) {
    return internal_error(std::string("setgroups: ") + std::strerror(errno));
  }
  set_fsgid(gid);
  if (set_fsgid(static_cast<gid_t>(-1)) != gid) {
    return internal_error("setfsgid(" + std::to_string(gid) + ") was refused");
  }
  set_fsuid(uid);
  if (current_fsuid() != uid) {
    return internal_error("setfsuid(" + std::to_string(uid) + ") was refused");
  }
  return g;
}

Result<FsCreds> FsCreds::act_as(const User& user) {
  if (::geteuid() != 0) return FsCreds();
  return switch_to(user.uid, user.gid, {user.gid});  // the groups a started process gets too
}

Result<FsCreds> FsCreds::act_as_envd() {
  if (::geteuid() != 0) return FsCreds();
  // No supplementary groups: envd is root here, and root passes permission checks on its
  // filesystem capabilities, which come back with fsuid 0.
  return switch_to(::geteuid(), ::getegid(), {});
}

FsCreds::FsCreds(FsCreds&& other) noexcept
    : active_(std::exchange(other.active_, false)),
      saved_uid_(other.saved_uid_),
      saved_gid_(other.saved_gid_),
      saved_groups_(std::move(other.saved_groups_)) {}

FsCreds::~FsCreds() {
  if (!active_) return;
  // fsuid first: back to root, the filesystem capabilities return before anything else.
  set_fsuid(saved_uid_);
  set_fsgid(saved_gid_);
  (void)set_groups(saved_groups_);
}

}  // namespace abx::envd
