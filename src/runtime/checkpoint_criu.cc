// Running CRIU (run_criu, log_tail, criu_available) and the checkpoint-directory helpers
// both checkpoint() and restore() use (checkpoint_internal.h).
#include <errno.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "abx/base/try.h"
#include "abx/runtime/checkpoint.h"
#include "checkpoint_internal.h"
#include "disk.h"
#include "sys.h"

namespace abx::runtime {
std::string bind_key(std::size_t i) { return "bind" + std::to_string(i); }

Result<Ran> run_criu(const std::vector<std::string>& args, std::chrono::milliseconds limit,
                     const SandboxCgroups* join, const std::function<Status(pid_t)>& started) {
  os::RunOptions o;
  o.env = {
      // CRIU runs iptables-save, ip, tar: they need a PATH, and nothing else of ours.
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      // CRIU_FAULT=130 is CRIU's FI_NO_BREAKPOINTS: after its parasite code (dump) or restorer
      // (restore) it stops each task on the rt_sigreturn syscall (PTRACE_SYSCALL) instead of on
      // a hardware breakpoint. Some guests never deliver that breakpoint (a PVM guest, where
      // int $0x80 faults too): the task ran on, and criu waited for its trap for ever, every
      // dump and restore. The syscall stop works everywhere; it costs a few ptrace stops per
      // task.
      "CRIU_FAULT=130"};
  o.merge_output = true;
  o.capture_limit = 64 << 10;
  o.timeout = limit;
  o.new_session = true;
  if (join || started) {
    o.started = [&](pid_t pid) -> Status {
      if (join) ABX_TRY(join->attach(pid));
      if (started) ABX_TRY(started(pid));
      return {};
    };
  }
  return os::run(args, o);
}

std::string criu_version(const std::string& criu) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  {
    std::lock_guard lock(mu);
    if (auto it = known.find(criu); it != known.end()) return it->second;
  }
  std::string version;
  auto v = run_criu({criu, "--version"}, kQuickCriuLimit);
  if (!v || v->status != 0) return version;  // not remembered: asked again next time
  version = v->out.substr(0, v->out.find('\n'));
  if (version.starts_with("Version: ")) version.erase(0, 9);
  std::lock_guard lock(mu);
  known[criu] = version;
  return version;
}

std::string read_or(const std::string& path, std::string fallback, std::size_t max) {
  auto r = read_file(path, max);
  return r ? std::move(r).value() : std::move(fallback);
}

std::string log_tail(const std::string& text) {
  std::vector<std::string> lines, errors;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty()) {
      // Not errors of this run's outcome: seen on every run here (criu-spike.md 2.1, 2.2).
      bool harmless = line.find("Can't setup RLIMIT_NOFILE for self") != std::string::npos ||
                      line.find("Address already assigned") != std::string::npos;
      if (line.find("Error") != std::string::npos && !harmless) errors.push_back(line);
      lines.push_back(line);
    }
    start = end + 1;
  }
  const auto& pick = errors.empty() ? lines : errors;
  std::string out;
  for (std::size_t i = pick.size() > 6 ? pick.size() - 6 : 0; i < pick.size(); ++i)
    out += (out.empty() ? "" : " | ") + pick[i].substr(0, 300);
  return out;
}

Status criu_available(const std::string& criu) {
  static std::mutex mu;
  static std::set<std::string> checked;
  {
    std::lock_guard lock(mu);
    if (checked.count(criu)) return {};
  }
  if (criu.empty() || criu[0] != '/')
    return Error(ErrorCode::kFailedPrecondition, "criu path must be absolute: '" + criu + "'");
  if (::access(criu.c_str(), X_OK) != 0)
    return Error(ErrorCode::kFailedPrecondition, "criu is not installed at " + criu + " (" +
                                                     os::errno_name(errno) +
                                                     "; scripts/install-criu.sh installs it)");
  auto ran = run_criu({criu, "check"}, kQuickCriuLimit);
  if (!ran) return Error(ErrorCode::kFailedPrecondition, "criu check: " + ran.error().message());
  if (ran->status != 0)
    return Error(ErrorCode::kFailedPrecondition,
                 "criu check failed (" + ran->describe() + "): " + log_tail(ran->out));
  std::lock_guard lock(mu);
  checked.insert(criu);
  return {};
}

namespace {
// `dir` is the root of a tmpfs that only root can reach: its own mount (another device than its
// parent's), tmpfs, owned by 0:0, mode 0700.
bool is_private_tmpfs(const std::string& dir) {
  struct stat st, up;
  struct statfs fs;
  if (::lstat(dir.c_str(), &st) != 0 || ::lstat((dir + "/..").c_str(), &up) != 0 ||
      ::statfs(dir.c_str(), &fs) != 0)
    return false;
  return S_ISDIR(st.st_mode) && st.st_dev != up.st_dev &&
         static_cast<unsigned long>(fs.f_type) == TMPFS_MAGIC && st.st_uid == 0 && st.st_gid == 0 &&
         (st.st_mode & 07777) == 0700;
}
}  // namespace

Status prepare_criu_rundir(const std::string& dir) {
  if (dir.size() < 2 || dir[0] != '/' || dir.back() == '/')
    return invalid_argument("criu run dir must be an absolute path: '" + dir + "'");
  // mkdir -p (parents 0755, the last 0700). Every parent must be a root-owned directory that
  // only root may change; `dir` itself a directory (not a symlink, which mount would follow):
  // its owner and mode do not matter, a tmpfs goes over it unless it is one of root's already.
  for (std::size_t pos = 0; pos != std::string::npos;) {
    pos = dir.find('/', pos + 1);
    const std::string part = dir.substr(0, pos);
    const bool last = pos == std::string::npos;
    if (::mkdir(part.c_str(), last ? 0700 : 0755) != 0 && errno != EEXIST)
      return os::errno_error("mkdir " + part, errno);
    struct stat st;
    if (::lstat(part.c_str(), &st) != 0) return os::errno_error("stat " + part, errno);
    if (last && !S_ISDIR(st.st_mode))
      return Error(ErrorCode::kFailedPrecondition,
                   "criu run dir " + dir + " must be a directory (not a symlink)");
    if (!last &&
        (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0))
      return Error(ErrorCode::kFailedPrecondition,
                   "criu run dir " + dir + ": " + part +
                       " must be a root-owned directory writable by root only");
  }
  if (is_private_tmpfs(dir)) return {};
  if (::mount("abx-criu", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "mode=0700,uid=0,gid=0,size=1m,nr_inodes=64") != 0)
    return os::errno_error("mount tmpfs on " + dir, errno);
  if (!is_private_tmpfs(dir))
    return Error(ErrorCode::kInternal,
                 "criu run dir " + dir + ": the tmpfs mounted there is not root-only");
  return {};
}

}  // namespace abx::runtime
