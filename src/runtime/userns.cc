#include "abx/runtime/userns.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "abx/base/try.h"
#include "sys.h"
#include "userns_internal.h"

namespace abx::runtime {
namespace {

constexpr std::uint64_t kIdLimit = 0xffffffffull;  // (uid_t)-1 is "no id"

std::string slot_path(const std::string& registry, std::uint32_t slot) {
  return registry + "/" + std::to_string(slot);
}

// "<pid> <start>\n", the content of a claim held by the process `pid` started at `start`.
std::string claim_record(pid_t pid, unsigned long long start) {
  return std::to_string(pid) + " " + std::to_string(start) + "\n";
}

// The claim of a live process.
std::string holder_record(pid_t pid) { return claim_record(pid, process_start_time(pid)); }

// A claim is live while the process it names (pid + start time) exists.
bool claim_live(const std::string& path) {
  auto text = read_file(path, 256);
  if (!text) return false;
  long long pid = 0;
  unsigned long long start = 0;
  if (std::sscanf(text->c_str(), "%lld %llu", &pid, &start) != 2 || pid <= 0) return false;
  return start != 0 && process_start_time(static_cast<pid_t>(pid)) == start;
}

// Replaces `path` with `data` atomically (tmp + rename in the same directory).
Status replace_file(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  ABX_TRY(create_file(tmp, data));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return os::errno_error("rename " + tmp, err);
  }
  return {};
}

// mkdir -p: parents 0755 (/run/abx may not exist yet), the last one `mode`.
Status make_dirs(const std::string& path, mode_t mode) {
  if (path.empty() || path[0] != '/') return invalid_argument("not an absolute path: " + path);
  for (std::size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    std::string part = path.substr(0, pos);
    if (::mkdir(part.c_str(), pos == std::string::npos ? mode : 0755) != 0 && errno != EEXIST)
      return os::errno_error("mkdir " + part, errno);
  }
  return {};
}

// The registry's lock, held while a claim is checked and written.
Result<UniqueFd> lock_registry(const std::string& registry) {
  ABX_TRY(make_dirs(registry, 0700));
  ABX_ASSIGN_OR_RETURN(UniqueFd lock,
                       open_fd(registry + "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (os::retry_eintr([&] { return ::flock(lock.get(), LOCK_EX); }) != 0)
    return os::errno_error("flock " + registry + "/.lock", errno);
  return lock;
}

struct IdRange {
  std::uint64_t first, count;
  bool overlaps(std::uint64_t f, std::uint64_t c) const {
    return f < first + count && first < f + c;
  }
};

// Every "name:x:id:..." (passwd, group) or "name:first:count" (subuid, subgid) line of `path`
// that overlaps `r`, as "path: line".
std::string first_overlap(const std::string& path, const IdRange& r, bool subordinate) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string part; std::getline(ss, part, ':');) f.push_back(part);
    char* end = nullptr;
    if (subordinate) {
      if (f.size() < 3) continue;
      std::uint64_t first = std::strtoull(f[1].c_str(), &end, 10);
      if (*end) continue;
      std::uint64_t count = std::strtoull(f[2].c_str(), &end, 10);
      if (*end) continue;
      if (r.overlaps(first, count)) return path + ": " + line;
    } else {
      if (f.size() < 3) continue;
      std::uint64_t id = std::strtoull(f[2].c_str(), &end, 10);
      if (*end || f[2].empty()) continue;
      if (r.overlaps(id, 1)) return path + ": " + f[0] + " has id " + f[2];
    }
  }
  return {};
}

}  // namespace

Status check_id_range(const UserNamespace& u, const std::string& etc) {
  if (u.slots == 0) return invalid_argument("user namespace slots must be > 0");
  if (u.base == 0) return invalid_argument("user namespace base must be above 0 (host root)");
  IdRange r{u.base, std::uint64_t{u.slots} * kIdsPerSandbox};
  if (r.first + r.count > kIdLimit)
    return invalid_argument("user namespace range " + std::to_string(r.first) + "+" +
                            std::to_string(r.count) + " passes 2^32-1");
  const std::string range = std::to_string(r.first) + "-" + std::to_string(r.first + r.count - 1);
  for (auto [file, sub] : {std::pair{"passwd", false}, std::pair{"group", false},
                           std::pair{"subuid", true}, std::pair{"subgid", true}}) {
    std::string hit = first_overlap(etc + "/" + file, r, sub);
    if (!hit.empty())
      return Error(ErrorCode::kFailedPrecondition,
                   "sandbox id range " + range + " overlaps " + hit +
                       "; choose another range (abxd --userns-base / --userns-slots)");
  }
  return {};
}

Status prepare_mount_point(const std::string& path) {
  ABX_TRY(make_dirs(path, 0755));
  // Every component must be searchable by the sandbox's (unprivileged) root.
  for (std::size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    std::string part = pos == std::string::npos ? path : path.substr(0, pos);
    struct stat st;
    if (::lstat(part.c_str(), &st) != 0) return os::errno_error("stat " + part, errno);
    if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & S_IXOTH) == 0)
      return Error(ErrorCode::kFailedPrecondition,
                   "the sandbox root mount point " + path + " needs " + part +
                       " to be a root-owned directory searchable by every user (chmod o+x)");
  }
  return {};
}

Result<std::uint32_t> claim_slot(const UserNamespace& u) {
  ABX_ASSIGN_OR_RETURN(UniqueFd lock, lock_registry(u.registry));
  const std::string next_path = u.registry + "/next";
  std::uint32_t start = 0;
  if (auto text = read_file(next_path, 64)) {  // missing or malformed: from slot 0
    unsigned long v = 0;
    if (std::sscanf(text->c_str(), "%lu", &v) == 1 && v < u.slots)
      start = static_cast<std::uint32_t>(v);
  }
  for (std::uint32_t i = 0; i < u.slots; ++i) {
    const std::uint32_t slot = (start + i) % u.slots;
    std::string path = slot_path(u.registry, slot);
    if (::access(path.c_str(), F_OK) == 0 && claim_live(path)) continue;
    ABX_TRY(replace_file(path, holder_record(::getpid())));
    // Only where the next search starts: a failed write costs a reuse, never a claim.
    (void)replace_file(next_path, std::to_string((slot + 1) % u.slots) + "\n");
    return slot;
  }
  return Error(ErrorCode::kResourceExhausted,
               "all " + std::to_string(u.slots) + " user namespace slots (id ranges) are in use");
}

Status claim_slot_exact(const UserNamespace& u, std::uint32_t slot) {
  if (slot >= u.slots)
    return invalid_argument("user namespace slot " + std::to_string(slot) + " is out of range");
  ABX_ASSIGN_OR_RETURN(UniqueFd lock, lock_registry(u.registry));
  std::string path = slot_path(u.registry, slot);
  if (::access(path.c_str(), F_OK) == 0 && claim_live(path))
    return Error(ErrorCode::kResourceExhausted,
                 "user namespace slot " + std::to_string(slot) + " (its id range) is in use");
  return replace_file(path, holder_record(::getpid()));
}

Status hold_slot(const UserNamespace& u, std::uint32_t slot, pid_t pid) {
  ABX_ASSIGN_OR_RETURN(UniqueFd lock, lock_registry(u.registry));
  return replace_file(slot_path(u.registry, slot), holder_record(pid));
}

bool take_over_slot(const std::string& registry, std::uint32_t slot, pid_t from_pid,
                    unsigned long long from_start) {
  auto lock = lock_registry(registry);
  if (!lock) return false;
  const std::string path = slot_path(registry, slot);
  auto text = read_file(path, 256);
  if (!text || *text != claim_record(from_pid, from_start)) return false;
  return replace_file(path, holder_record(::getpid())).ok();
}

void release_slot(const std::string& registry, std::uint32_t slot, pid_t pid,
                  unsigned long long start) {
  auto lock = lock_registry(registry);
  if (!lock) return;
  std::string path = slot_path(registry, slot);
  auto text = read_file(path, 256);
  if (text && *text == claim_record(pid, start)) ::unlink(path.c_str());
}

Result<ScopedThreadOwner> ScopedThreadOwner::become(std::uint32_t id) {
  // gid first: changing it needs CAP_SETGID, which the uid change takes away.
  if (::syscall(SYS_setresgid, -1, id, -1) != 0)
    return os::errno_error("setresgid (thread)", errno);
  if (::syscall(SYS_setresuid, -1, id, -1) != 0) {
    int err = errno;
    ::syscall(SYS_setresgid, -1, 0, -1);
    return os::errno_error("setresuid (thread)", err);
  }
  ScopedThreadOwner s;
  s.active_ = true;
  return s;
}

ScopedThreadOwner::~ScopedThreadOwner() {
  if (!active_) return;
  // euid back to 0 restores the effective capabilities (from the permitted set), CAP_SETGID
  // included, which the gid needs. Both were allowed before: the real and saved ids stayed 0.
  (void)::syscall(SYS_setresuid, -1, 0, -1);
  (void)::syscall(SYS_setresgid, -1, 0, -1);
}

Result<ScopedThreadFsIds> ScopedThreadFsIds::become(std::uint32_t id) {
  ::syscall(SYS_setfsgid, id);
  ::syscall(SYS_setfsuid, id);
  ScopedThreadFsIds s;
  s.active_ = true;
  // setfsuid reports the previous id, never an error: check that it took.
  if (static_cast<std::uint32_t>(::syscall(SYS_setfsuid, -1)) != id)
    return Error(ErrorCode::kPermissionDenied, "setfsuid did not take");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return os::errno_error("capget", errno);
  for (auto& d : data) d.effective = d.permitted;
  if (::syscall(SYS_capset, &hdr, data) != 0) return os::errno_error("capset (thread)", errno);
  return s;
}

ScopedThreadFsIds::~ScopedThreadFsIds() {
  if (!active_) return;
  // fsuid back to 0 puts the filesystem capabilities back into the effective set.
  (void)::syscall(SYS_setfsuid, 0);
  (void)::syscall(SYS_setfsgid, 0);
}

Status write_id_maps(pid_t pid, std::uint32_t first) {
  const std::string map =
      "0 " + std::to_string(first) + " " + std::to_string(kIdsPerSandbox) + "\n";
  const std::string proc = "/proc/" + std::to_string(pid) + "/";
  ABX_TRY(write_file(proc + "uid_map", map));
  ABX_TRY(write_file(proc + "gid_map", map));
  return {};
}

}  // namespace abx::runtime
