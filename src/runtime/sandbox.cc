// The orchestrator: spawn() prepares everything that allocates, clones, attaches the child to
// its cgroups, releases it and waits for exec; destroy() undoes it in reverse.
//
// Parent-side order (and why):
//   1. validate the config, create <state>/<id> and lock it (cleanup_stale skips locked dirs),
//      then make and mount the writable layer there (disk.h: the child only stacks the overlay);
//   2. create the cgroups and write limits (before clone: the child must never run unlimited);
//   3. build the ChildPlan (strings, argv/envp arrays, seccomp program) — all allocation is here;
//   4. clone into new pid/mnt/uts/ipc(/net) namespaces with CLONE_PIDFD (and CLONE_VM: the
//      child shares our memory until its exec, see clone_shared), then wait until the
//      child closed its copies of our descriptors (the state dir's lock among them);
//   5. record pid + start time, attach the pid to the cgroups, then send "go";
//   6. read the report socket: EOF = exec happened, a ChildReport = a step failed.
#include "abx/runtime/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

#include "abx/base/scope_exit.h"
#include "abx/base/try.h"
#include "abx/runtime/netns.h"
#include "abx/runtime/process.h"
#include "child.h"
#include "disk.h"
#include "mounts.h"
#include "sandbox_internal.h"
#include "seccomp.h"
#include "sys.h"
#include "userns_internal.h"

namespace abx::runtime {
namespace {

bool valid_cgroup_parent(const std::string& p) {
  return !p.empty() && p.find("..") == std::string::npos && p.front() != '/' &&
         p.find("//") == std::string::npos;
}

// Paths spliced into overlayfs options must not contain its separators.
bool overlay_safe(const std::string& p) { return p.find_first_of(",:\\\n") == std::string::npos; }

}  // namespace

bool valid_sandbox_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  if (!std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

std::vector<std::string> layers_of(const SandboxConfig& c) {
  switch (c.rootfs) {
    case RootfsMode::kImage:
      return c.lower_dirs;
    case RootfsMode::kDirectory:
      return {c.rootfs_dir};
    case RootfsMode::kHost:
      break;
  }
  return {};
}

Status validate(const SandboxConfig& c) {
  if (!valid_sandbox_name(c.id))
    return invalid_argument("sandbox id must be 1-64 of [a-z0-9-]: '" + c.id + "'");
  if (c.state_dir.empty() || c.state_dir[0] != '/' || !overlay_safe(c.state_dir))
    return invalid_argument("state_dir must be an absolute path without , : \\");
  if (c.argv.empty() || c.argv[0].empty() || c.argv[0][0] != '/')
    return invalid_argument("argv[0] must be an absolute path inside the sandbox");
  if (c.cwd.empty() || c.cwd[0] != '/') return invalid_argument("cwd must be absolute");
  if (c.groups.size() > kMaxGroups)
    return invalid_argument("at most " + std::to_string(kMaxGroups) + " supplementary groups");
  if (c.uid == 0xffffffffu || c.gid == 0xffffffffu)
    return invalid_argument("uid and gid must not be 4294967295 (-1)");
  if (!valid_cgroup_parent(c.cgroup_parent)) return invalid_argument("bad cgroup_parent");
  if (c.rootfs == RootfsMode::kDirectory && c.rootfs_dir.empty())
    return invalid_argument("rootfs_dir is required with RootfsMode::kDirectory");
  if (c.rootfs == RootfsMode::kImage &&
      (c.lower_dirs.empty() || c.lower_dirs.size() > kMaxLowerDirs))
    return invalid_argument("an image rootfs needs 1-" + std::to_string(kMaxLowerDirs) +
                            " lower_dirs, got " + std::to_string(c.lower_dirs.size()));
  for (const auto& dir : layers_of(c)) {
    if (dir.empty() || dir[0] != '/' || !overlay_safe(dir))
      return invalid_argument("a rootfs layer must be an absolute path without , : \\: '" + dir +
                              "'");
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return invalid_argument("rootfs layer is not a directory: " + dir);
  }
  if (!c.layer_image.empty() && (c.rootfs == RootfsMode::kHost || c.layer_image[0] != '/'))
    return invalid_argument(
        "layer_image must be an absolute path, and needs an image or directory rootfs");
  if (c.rootfs != RootfsMode::kHost && c.disk_bytes < (8ull << 20))
    return invalid_argument("disk_bytes must be at least 8 MiB for an ext4 writable layer");
  if (c.shm_bytes == 0) return invalid_argument("shm_bytes must be > 0");
  for (const auto& b : c.binds) {
    if (b.source.empty() || b.source[0] != '/' || b.target.size() < 2 || b.target[0] != '/')
      return invalid_argument("bind paths must be absolute: " + b.source + " -> " + b.target);
    if (b.target.find("/../") != std::string::npos || b.target.ends_with("/.."))
      return invalid_argument("bind target must not contain '..': " + b.target);
  }
  std::set<int> targets;
  for (const auto& f : c.fds) {
    if (f.parent_fd < 0 || f.child_fd < 0 || f.child_fd > 1023)
      return invalid_argument("fd mapping out of range");
    if (!targets.insert(f.child_fd).second) return invalid_argument("fd mapped twice");
  }
  if (c.fds.size() > 64) return invalid_argument("at most 64 fd mappings");
  if (c.rlimit_nofile == 0) return invalid_argument("rlimit_nofile must be > 0");
  if (c.veth.enabled) {
    if (c.network != NetworkMode::kNone || !c.userns.enabled)
      return invalid_argument("a veth needs a network namespace and a user namespace of its own");
    const std::string& p = c.veth.name_prefix;
    if (p.empty() || p.size() + std::to_string(c.userns.slots).size() > IFNAMSIZ - 1 ||
        p.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") != std::string::npos)
      return invalid_argument(
          "veth name_prefix must be [a-z0-9], short enough for a link name "
          "with the slot number: '" +
          p + "'");
    if (c.veth.subnet_base % 4 != 0)
      return invalid_argument("veth subnet_base must be /30-aligned");
  }
  return {};
}

namespace {

int cap_last_cap() {
  auto text = read_file("/proc/sys/kernel/cap_last_cap");
  int v = text ? std::atoi(text->c_str()) : 40;
  return std::clamp(v, 0, 63);
}

}  // namespace

const CgroupLayout& cgroup_layout() {
  static const CgroupLayout layout = [] {
    auto l = CgroupLayout::detect();
    return l ? std::move(l).value() : CgroupLayout{};
  }();
  return layout;
}

namespace {

Error child_error(const ChildReport& r) {
  std::string what(r.what, strnlen(r.what, sizeof r.what));
  return Error(os::code_for_errno(r.err), what + ": " + os::errno_name(r.err));
}

pid_t clone3_sandbox(std::uint64_t flags, int* pidfd) {
  clone_args args = {};
  args.flags = flags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<std::uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

struct Cloned {
  pid_t pid = -1;
  int pidfd = -1;
};

// The init as a fork: a copy-on-write image of this process (the sanitizer builds, whose
// runtimes cannot follow a child that shares their memory, and ABX_SPAWN_FORK=1).
// The calling thread as `owner` (when set) until the result is dropped.
Result<std::optional<ScopedThreadOwner>> become_owner(std::optional<std::uint32_t> owner) {
  std::optional<ScopedThreadOwner> as_owner;
  if (owner) {
    auto became = ScopedThreadOwner::become(*owner);
    if (!became) return became.error();
    as_owner.emplace(std::move(became).value());
  }
  return as_owner;
}

Result<Cloned> clone_forked(std::uint64_t flags, const ChildPlan& plan,
                            std::optional<std::uint32_t> owner) {
  ABX_ASSIGN_OR_RETURN(auto as_owner, become_owner(owner));
  Cloned c;
  c.pid = clone3_sandbox(flags, &c.pidfd);
  if (c.pid == 0) child_main(plan);  // never returns
  if (c.pid < 0) return os::errno_error("clone3", errno);
  return c;
}

#if defined(__x86_64__)
// FUTEX_WAIT without glibc's wrapper, which would write errno: see clone_shared.
long futex_wait_raw(pid_t* addr, pid_t val, const timespec* timeout) {
  long ret;
  register long r10 asm("r10") = reinterpret_cast<long>(timeout);
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_futex)), "D"(addr), "S"(static_cast<long>(FUTEX_WAIT)),
                 "d"(static_cast<long>(val)), "r"(r10)
               : "rcx", "r11", "memory");
  return ret;
}

int shared_child_entry(void* plan) { child_main(*static_cast<const ChildPlan*>(plan)); }

constexpr std::size_t kSharedChildStack = std::size_t{1} << 20;  // child_main needs a few KiB

// The init cloned with CLONE_VM, as posix_spawn clones: it shares this process's memory until
// its exec instead of getting a copy-on-write image of it. A fork costs a copy of the page
// tables at the clone, a teardown at the exec, and afterwards a write-protect fault on the first
// write to every page this process had (bench/README.md: several us each on the development VM,
// hundreds per create). The clone is made by a thread of its own, which never runs while the
// child may: the child runs on that thread's TLS (its errno), so the thread blocks every signal,
// clones, hands over the pid and pidfd, then waits, without touching errno, until the kernel
// clears `ctid` (CLONE_CHILD_CLEARTID: the child's exec or death released the memory), and frees
// the child's stack. Child code makes raw syscalls and writes only its own stack (child.h).
Result<Cloned> clone_shared(std::uint64_t flags, const ChildPlan& plan,
                            std::optional<std::uint32_t> owner) {
  auto result = std::make_shared<std::promise<Result<Cloned>>>();
  auto cloned = result->get_future();
  try {
    std::thread([result, flags, &plan, owner] {
      sigset_t all, mask;
      ::sigfillset(&all);
      ::pthread_sigmask(SIG_SETMASK, &all, &mask);
      ChildPlan p = plan;  // read by the child until its exec: this frame outlives that
      p.exec_sigmask = &mask;
      auto as_owner = become_owner(owner);
      if (!as_owner) return result->set_value(as_owner.error());
      void* stack = ::mmap(nullptr, kSharedChildStack, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
      if (stack == MAP_FAILED) return result->set_value(os::errno_error("mmap child stack", errno));
      ::mprotect(stack, 4096, PROT_NONE);  // a guard page below it
      pid_t ctid = -1;                     // the child's tid (1) once it runs, 0 when it is gone
      int pidfd = -1;
      const int clone_flags = static_cast<int>(flags | CLONE_VM | CLONE_PIDFD | CLONE_CHILD_SETTID |
                                               CLONE_CHILD_CLEARTID) |
                              SIGCHLD;
      const pid_t pid = ::clone(shared_child_entry, static_cast<char*>(stack) + kSharedChildStack,
                                clone_flags, &p, &pidfd, nullptr, &ctid);
      if (pid < 0) {
        const int err = errno;
        ::munmap(stack, kSharedChildStack);
        return result->set_value(os::errno_error("clone", err));
      }
      // From here the child may run on this thread's TLS: no errno until it is gone.
      as_owner->reset();  // (raw syscalls that do not fail: the ids were ours before)
      result->set_value(Cloned{pid, pidfd});
      const timespec second{1, 0};
      for (pid_t v; (v = __atomic_load_n(&ctid, __ATOMIC_ACQUIRE)) != 0;)
        futex_wait_raw(&ctid, v, &second);
      ::munmap(stack, kSharedChildStack);
    }).detach();
  } catch (const std::system_error& e) {
    return Error(ErrorCode::kResourceExhausted,
                 std::string("cannot start the thread that clones the sandbox: ") + e.what());
  }
  return cloned.get();
}
#endif

bool clone_shares_memory() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
  return false;
#else
  static const bool fork = [] {
    const char* v = std::getenv("ABX_SPAWN_FORK");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return !fork;
#endif
}

// The sandbox's init, running child_main(plan), with `owner` (a user namespace's first id) as
// the cloning thread's effective id when set, so that the namespaces belong to it.
Result<Cloned> clone_init(std::uint64_t flags, const ChildPlan& plan,
                          std::optional<std::uint32_t> owner) {
#if defined(__x86_64__)
  if (clone_shares_memory()) return clone_shared(flags, plan, owner);
#endif
  return clone_forked(flags, plan, owner);
}

}  // namespace

Status write_init_record(const std::string& dir, pid_t pid, unsigned long long start,
                         const std::string& cgroup_parent) {
  return create_file(dir + "/" + kInitFile, std::to_string(pid) + " " + std::to_string(start) +
                                                " " + cgroup_parent + "\n");
}

Status write_userns_record(const Sandbox::State& st) {
  return create_file(
      st.dir + "/" + kUsernsFile,
      std::to_string(*st.slot) + " " + std::to_string(st.root_id) + " " + st.registry + "\n");
}

// Step 1: <state_dir>/<id> must be new — an existing one is a live or stale sandbox of that id.
Status make_state_dir(const SandboxConfig& config, const std::string& dir) {
  if (::mkdir(config.state_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return os::errno_error("mkdir " + config.state_dir, errno);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST)
      return Error(ErrorCode::kAlreadyExists, "sandbox " + config.id + " exists");
    return os::errno_error("mkdir " + dir, errno);
  }
  return {};
}

// Step 1 (cont.): the lock tells cleanup_stale() that an owner is alive; rw/ is the mount point
// of the writable layer. (The init mounts its root on UserNamespace::mount_point, shared by all.)
Result<UniqueFd> lock_state_dir(const std::string& dir) {
  ABX_ASSIGN_OR_RETURN(UniqueFd lock,
                       open_fd(dir + "/" + kLockFile, O_RDWR | O_CREAT | O_EXCL, 0600));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return os::errno_error("flock", errno);
  std::string rw = dir + "/" + kRwMount;
  if (::mkdir(rw.c_str(), 0755) != 0) return os::errno_error("mkdir " + rw, errno);
  return lock;
}

Status connect_veth(const SandboxConfig& config, Sandbox::State& st, Timeline* timeline) {
  VethInfo info = veth_for_slot(config.veth, *st.slot);
  ABX_TRY(setup_veth(config.veth, info, st.netns.get()));
  ABX_TRY(create_file(st.dir + "/" + kVethFile, info.host_if + " " + std::to_string(info.host_ip) +
                                                    " " + std::to_string(info.sandbox_ip) + "\n"));
  if (timeline != nullptr) timeline->mark("veth");
  if (config.link_rules) {  // a restore's (a spawn ran it before its clone)
    ABX_TRY(config.link_rules(info));
    if (timeline != nullptr) timeline->mark("link_rules");
  }
  if (config.link_ready) {
    ABX_TRY(config.link_ready(info));
    if (timeline != nullptr) timeline->mark("link_ready");
  }
  st.veth = std::move(info);
  return {};
}

namespace {

// Step 3: every string and array the child touches, allocated here, because the child must not
// allocate (child.h). Pinned in place: `plan` points into the other members.
struct PlanStorage {
  std::string tmpfs_size, shm_opts;
  std::vector<std::string> bind_targets;
  std::vector<ChildBind> binds;
  std::vector<int> mounts;  // the child's copy receives the mounts sent with "go"
  std::vector<ChildFd> fds;
  std::vector<char*> argv, envp;
  std::vector<unsigned> groups;
  sock_fprog fprog{};
  // SandboxConfig::companion: its argv, envp and descriptors, and argv's pid argument.
  std::vector<char*> companion_argv, companion_envp;
  std::vector<ChildFd> companion_fds;
  std::vector<int> companion_private;
  std::string companion_pid_arg;
  ChildCompanion companion;
  ChildPlan plan;

  PlanStorage() = default;
  PlanStorage(const PlanStorage&) = delete;
  PlanStorage& operator=(const PlanStorage&) = delete;
};

// SandboxConfig::companion into `s` (its argv gets the pid argument). Its descriptors must be
// the init's: 0..2 or a child_fd of config.fds.
Status build_companion(SandboxConfig& config, PlanStorage& s) {
  auto& c = *config.companion;
  if (c.argv.empty() || c.argv[0].empty()) return invalid_argument("companion: empty argv");
  if (c.pid_flag.empty()) return invalid_argument("companion: no pid_flag");
  auto is_init_fd = [&](int fd) {
    if (fd >= 0 && fd <= 2) return true;
    return std::any_of(config.fds.begin(), config.fds.end(),
                       [fd](const FdMapping& m) { return m.child_fd == fd; });
  };
  for (const auto& f : c.fds) {
    if (!is_init_fd(f.parent_fd) || f.child_fd < 0 || f.child_fd >= kMaxCompanionFd)
      return invalid_argument("companion: descriptor " + std::to_string(f.parent_fd) + " -> " +
                              std::to_string(f.child_fd) + " is not the init's, or too high");
    s.companion_fds.push_back({f.parent_fd, f.child_fd});
  }
  if (s.companion_fds.size() > kMaxCompanionFds)
    return invalid_argument("companion: more than " + std::to_string(kMaxCompanionFds) +
                            " descriptors");
  for (int fd : c.private_fds) {
    if (fd <= 2 || !is_init_fd(fd))
      return invalid_argument("companion: private descriptor " + std::to_string(fd) +
                              " is not one the init maps");
    s.companion_private.push_back(fd);
  }
  for (auto& a : c.argv) s.companion_argv.push_back(a.data());
  s.companion_argv.push_back(nullptr);
  const char* path = nullptr;
  for (auto& e : c.env) {
    s.companion_envp.push_back(e.data());
    if (path == nullptr && e.starts_with("PATH=")) path = e.c_str() + 5;
  }
  s.companion_envp.push_back(nullptr);
  s.companion_pid_arg = c.pid_flag + "=" + std::string(kCompanionPidDigits, '0');
  s.argv.push_back(s.companion_pid_arg.data());
  ChildCompanion& cc = s.companion;
  cc.argv = s.companion_argv.data();
  cc.envp = s.companion_envp.data();
  cc.path = path;
  cc.cwd = c.cwd.empty() ? "/" : c.cwd.c_str();
  cc.fds = s.companion_fds.data();
  cc.nfds = s.companion_fds.size();
  cc.private_fds = s.companion_private.data();
  cc.nprivate = s.companion_private.size();
  cc.pid_out = s.companion_pid_arg.data() + c.pid_flag.size() + 1;
  s.plan.companion = &cc;
  return {};
}

// `config` must outlive the child's exec: argv and envp point into its strings.
Status build_plan(SandboxConfig& config, const std::vector<sock_filter>& filter, int child_sock,
                  PlanStorage& s) {
  s.tmpfs_size = std::to_string(config.disk_bytes);
  s.shm_opts = "size=" + std::to_string(config.shm_bytes) + ",mode=1777";
  for (const auto& b : config.binds) {
    std::string t = b.target;
    while (!t.empty() && t.front() == '/') t.erase(0, 1);
    s.bind_targets.push_back(t);
  }
  for (size_t i = 0; i < config.binds.size(); ++i) {
    struct stat st;
    if (::stat(config.binds[i].source.c_str(), &st) != 0)
      return os::errno_error("bind source " + config.binds[i].source, errno);
    s.binds.push_back({s.bind_targets[i].c_str(), S_ISDIR(st.st_mode)});
  }
  const bool host_rootfs = config.rootfs == RootfsMode::kHost;
  s.mounts.assign(s.binds.size() + (host_rootfs ? 0 : 1), -1);
  if (s.mounts.size() > kMaxChildMounts)
    return invalid_argument("at most " + std::to_string(kMaxChildMounts - 1) + " binds");
  for (const auto& f : config.fds) s.fds.push_back({f.parent_fd, f.child_fd});
  std::sort(s.fds.begin(), s.fds.end(),
            [](const ChildFd& a, const ChildFd& b) { return a.child_fd < b.child_fd; });
  for (auto& a : config.argv) s.argv.push_back(a.data());
  if (config.companion) ABX_TRY(build_companion(config, s));
  s.argv.push_back(nullptr);
  for (auto& e : config.env) s.envp.push_back(e.data());
  s.envp.push_back(nullptr);
  s.fprog = {static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};

  ChildPlan& plan = s.plan;
  plan.sock = child_sock;
  plan.hostname = config.id.c_str();
  plan.userns = config.userns.enabled;
  plan.host_rootfs = host_rootfs;
  plan.root = config.userns.mount_point.c_str();
  plan.tmpfs_size = s.tmpfs_size.c_str();
  plan.shm_opts = s.shm_opts.c_str();
  plan.binds = s.binds.data();
  plan.nbinds = s.binds.size();
  plan.nmounts = s.mounts.size();
  plan.mounts = s.mounts.data();
  plan.own_netns = config.network == NetworkMode::kNone;
  plan.rlimit_nofile = config.rlimit_nofile;
  plan.rlimit_fsize = config.rlimit_fsize;
  plan.keep_caps = kKeptCapabilities;
  plan.cap_last_cap = cap_last_cap();
  plan.seccomp = &s.fprog;
  plan.fds = s.fds.data();
  plan.nfds = s.fds.size();
  plan.exe = config.argv[0].c_str();
  plan.argv = s.argv.data();
  plan.envp = s.envp.data();
  plan.cwd = config.cwd.c_str();
  s.groups.assign(config.groups.begin(), config.groups.end());
  plan.set_ids = config.uid != 0 || config.gid != 0 || !config.groups.empty();
  plan.uid = config.uid;
  plan.gid = config.gid;
  plan.groups = s.groups.data();
  plan.ngroups = s.groups.size();
  return {};
}

// Step 5, while the child waits for "go": the init record (pid + start time, for adopt() and
// cleanup_stale()), the cgroups (before the child runs anything), and the netns. Returns the
// netns fd (empty when the host netns is shared).
Result<UniqueFd> prepare_child(const SandboxConfig& config, const std::string& dir,
                               const SandboxCgroups& cgroups, pid_t pid, bool own_netns,
                               Timeline* timeline) {
  ABX_TRY(write_init_record(dir, pid, process_start_time(pid), config.cgroup_parent));
  if (timeline != nullptr) timeline->mark("init_record");
  ABX_TRY(cgroups.attach(pid));
  if (timeline != nullptr) timeline->mark("cgroup_attach");
  UniqueFd netns;
  if (own_netns) {
    // Now, while the child waits: a short-lived init may be a zombie by the time exec is
    // confirmed, and a zombie has no namespaces left. Safe by pid: the init is our unreaped
    // child, so the pid cannot have been reused.
    ABX_ASSIGN_OR_RETURN(netns, open_fd("/proc/" + std::to_string(pid) + "/ns/net", O_RDONLY));
  }
  if (config.before_start_hook) config.before_start_hook(pid);
  return netns;
}

// Step 5 (first): the user namespace's id maps, then the root's detached mounts (idmapped with
// them), in the order the child attaches them: the overlay (unless kHost), then the binds.
Result<std::vector<UniqueFd>> prepare_mounts(const SandboxConfig& config, const std::string& dir,
                                             pid_t pid, std::uint32_t first) {
  Idmap idmap;
  UniqueFd userns;
  if (config.userns.enabled) {
    ABX_TRY(write_id_maps(pid, first));
    ABX_ASSIGN_OR_RETURN(userns, open_fd("/proc/" + std::to_string(pid) + "/ns/user", O_RDONLY));
    idmap = {userns.get(), first};
  }
  std::vector<UniqueFd> mounts;
  if (config.rootfs != RootfsMode::kHost) {
    ABX_ASSIGN_OR_RETURN(UniqueFd root, make_root_overlay(config, dir, idmap));
    mounts.push_back(std::move(root));
  }
  ABX_ASSIGN_OR_RETURN(std::vector<UniqueFd> binds, make_bind_mounts(config, idmap));
  for (auto& b : binds) mounts.push_back(std::move(b));
  return mounts;
}

// Step 4 (end): the child's first message says it closed what it inherited from us. Until then
// it holds a copy of our state-dir lock, which outlives our death (cleanup_stale() would skip the
// sandbox as owned), so nothing is recorded before it.
Status wait_inherited_closed(int parent_sock, const std::string& id) {
  ChildReport report;
  ssize_t n = os::retry_eintr([&] { return ::recv(parent_sock, &report, sizeof report, 0); });
  if (n == 1) return {};
  Error e = n == static_cast<ssize_t>(sizeof report)
                ? child_error(report)
                : (n < 0 ? os::errno_error("recv from sandbox init", errno)
                         : internal_error("sandbox init exited before it started"));
  return e.with_context("sandbox " + id);
}

// Step 6: "go", then EOF on the socket means exec happened (the child's end is CLOEXEC); a
// ChildReport means a step failed.
Status release_child(int parent_sock, const std::string& id, const std::vector<UniqueFd>& mounts) {
  char go = 1;
  iovec iov{&go, 1};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * mounts.size()));
  if (!mounts.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * mounts.size());
    for (std::size_t i = 0; i < mounts.size(); ++i) {
      int fd = mounts[i].get();
      std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
    }
  }
  if (os::retry_eintr([&] { return ::sendmsg(parent_sock, &msg, MSG_NOSIGNAL); }) != 1)
    return os::errno_error("send go to sandbox init", errno);
  ChildReport report;
  ssize_t n = os::retry_eintr([&] { return ::recv(parent_sock, &report, sizeof report, 0); });
  if (n == 0) return {};
  Error e = n == static_cast<ssize_t>(sizeof report)
                ? child_error(report)
                : (n < 0 ? os::errno_error("recv from sandbox init", errno)
                         : internal_error("short report from sandbox init"));
  return e.with_context("sandbox " + id);
}

}  // namespace

Sandbox::Sandbox(std::unique_ptr<State> state) : s_(std::move(state)) {}
Sandbox::Sandbox(Sandbox&&) noexcept = default;
Sandbox& Sandbox::operator=(Sandbox&& other) noexcept {
  if (this != &other) {
    if (s_) (void)destroy();
    s_ = std::move(other.s_);
  }
  return *this;
}
Sandbox::~Sandbox() {
  if (s_) (void)destroy();
}

const std::string& Sandbox::id() const { return s_->config.id; }
pid_t Sandbox::pid() const { return s_->pid; }
int Sandbox::pidfd() const { return s_->pidfd.get(); }

bool Sandbox::init_exited() const { return !exited_inits({this}).empty(); }

std::vector<std::size_t> exited_inits(const std::vector<const Sandbox*>& sandboxes) {
  std::vector<pollfd> fds;
  fds.reserve(sandboxes.size());
  for (const Sandbox* sb : sandboxes) fds.push_back({sb->pidfd(), POLLIN, 0});
  std::vector<std::size_t> out;
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return out;
  for (std::size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents != 0) out.push_back(i);
  return out;
}
const std::optional<VethInfo>& Sandbox::veth() const { return s_->veth; }
const SandboxCgroups& Sandbox::cgroups() const { return s_->cgroups; }
std::string Sandbox::state_path() const { return s_->dir; }
std::uint32_t Sandbox::root_host_id() const { return s_->root_id; }
std::string Sandbox::upper_dir() const {
  if (s_->config.rootfs == RootfsMode::kHost) return {};
  return s_->dir + "/" + kRwMount + "/upper";
}

Status Sandbox::signal(int sig) const {
  if (s_->status) return Error(ErrorCode::kFailedPrecondition, "sandbox init already exited");
  if (sys_pidfd_send_signal(s_->pidfd.get(), sig) != 0)
    return os::errno_error("pidfd_send_signal", errno);
  return {};
}

Result<int> Sandbox::wait() {
  if (s_->status) return *s_->status;
  if (s_->adopted) {
    // Not our child (our predecessor started it): its exit status is not ours to collect, but
    // its pidfd still turns readable when it exits.
    pollfd p{s_->pidfd.get(), POLLIN, 0};
    int rc = os::retry_eintr([&] { return ::poll(&p, 1, -1); });
    if (rc < 0) return os::errno_error("poll pidfd", errno);
    s_->status = 0;
    return 0;
  }
  siginfo_t info = {};
  int rc = os::retry_eintr(
      [&] { return ::waitid(P_PIDFD, static_cast<id_t>(s_->pidfd.get()), &info, WEXITED); });
  if (rc != 0) return os::errno_error("waitid P_PIDFD", errno);
  int status = info.si_code == CLD_EXITED ? W_EXITCODE(info.si_status, 0) : info.si_status & 0x7f;
  s_->status = status;
  return status;
}

Result<UniqueFd> Sandbox::tcp_socket() const {
  std::lock_guard lock(s_->netns_mu);
  if (s_->netns_closed)
    return Error(ErrorCode::kFailedPrecondition, "sandbox " + s_->config.id + " is gone");
  return tcp_socket_in(s_->netns.valid() ? s_->netns.get() : -1);
}

Result<UniqueFd> Sandbox::open_tcp(std::uint16_t port, std::chrono::milliseconds timeout) const {
  ABX_ASSIGN_OR_RETURN(UniqueFd sock, tcp_socket());
  return connect_loopback(std::move(sock), port, timeout);
}

void Sandbox::close_netns() {
  std::lock_guard lock(s_->netns_mu);
  s_->netns.reset();
  s_->netns_closed = true;
}

void Sandbox::detach() {
  if (!s_ || s_->destroyed) return;
  s_->destroyed = true;  // the destructor leaves it alone from now on
  close_netns();
  s_->pidfd.reset();
  s_->lock.reset();  // unlocked: the next owner may adopt() it (or cleanup_stale() remove it)
}

Status Sandbox::kill(std::chrono::milliseconds exit_wait) {
  if (!s_ || s_->destroyed || s_->killed) return {};
  s_->killed = true;
  close_netns();  // no new socket into it; a held netns fd would also keep the namespace alive
  if (s_->status) return {};  // reaped already: nothing of it runs
  // The slot before the signal: once the init is gone its claim would be free for any create,
  // while this sandbox's link (named after the slot) and layer still exist.
  if (s_->slot) s_->slot_taken_over = take_over_slot(s_->registry, *s_->slot, s_->pid, s_->start);
  // Killing the init of a pid namespace kills everything in it; the cgroup kill also catches
  // anything that got out of the namespace but not out of the cgroup (nothing should).
  Status result = s_->cgroups.send_kill();
  if (sys_pidfd_send_signal(s_->pidfd.get(), SIGKILL) != 0 && errno != ESRCH && result)
    result = os::errno_error("pidfd_send_signal SIGKILL", errno);
  if (exit_wait.count() > 0) {
    // The init exits last: the kernel ends a pid namespace's init only once every other process
    // in it has exited, so a readable pidfd means the whole tree is gone (the init a zombie).
    pollfd p{s_->pidfd.get(), POLLIN, 0};
    (void)os::retry_eintr([&] {
      return ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(exit_wait.count(), 60'000)));
    });
  }
  return result;
}

Status Sandbox::destroy() {
  if (!s_ || s_->destroyed) return {};
  Status result;
  auto keep = [&](Status s) {
    if (result && !s) result = s;
  };
  keep(kill());  // (a no-op when the owner called it already)
  s_->destroyed = true;
  if (!s_->status) {
    auto st = wait();
    if (!st) keep(st.error());
  }
  keep(s_->cgroups.kill());  // the init is gone; make sure its tree is too
  keep(s_->cgroups.remove());
  keep(remove_rw_layer(s_->dir));  // before remove_tree, which does not cross mount points
  keep(remove_tree(s_->dir));
  s_->release_slot_of_init();  // the init is gone: its id range is free
  s_->lock.reset();
  return result;
}

Result<Sandbox> Sandbox::adopt(const std::string& state_dir, const std::string& id,
                               const SandboxConfig* config) {
  if (config && config->id != id)
    return invalid_argument("adopt: the config is for sandbox '" + config->id + "', not '" + id +
                            "'");
  auto st = std::make_unique<State>();
  if (config) st->config = *config;
  st->config.id = id;
  st->config.state_dir = state_dir;
  st->dir = state_dir + "/" + id;
  ABX_ASSIGN_OR_RETURN(st->lock, open_fd(st->dir + "/" + kLockFile, O_RDWR));
  if (::flock(st->lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Error(ErrorCode::kAlreadyExists, "sandbox " + id + " is owned by a live process");
    return os::errno_error("flock", errno);
  }
  ABX_ASSIGN_OR_RETURN(const std::string init, read_file(st->dir + "/" + kInitFile, 4096));
  long long pid = 0;
  unsigned long long start = 0;
  char parent[256] = {0};
  if (std::sscanf(init.c_str(), "%lld %llu %255s", &pid, &start, parent) != 3 || pid <= 0)
    return Error(ErrorCode::kFailedPrecondition, "sandbox " + id + ": malformed init record");
  // pidfd first, then the start time: if they match, the pidfd names the original init even if
  // the pid is reused later.
  int pidfd = sys_pidfd_open(static_cast<pid_t>(pid));
  if (pidfd < 0) return Error(ErrorCode::kNotFound, "sandbox " + id + ": its init has exited");
  st->pidfd.reset(pidfd);
  if (process_start_time(static_cast<pid_t>(pid)) != start)
    return Error(ErrorCode::kNotFound, "sandbox " + id + ": its init has exited");
  st->pid = static_cast<pid_t>(pid);
  st->start = start;
  // A restore whose owner died after CRIU had restored the init but before it took down the
  // stage: the restored sandbox lives on, the staged mounts (holding its layer's loop device)
  // are no longer needed by anyone.
  remove_recorded_stage(st->dir, id);
  if (auto userns = read_file(st->dir + "/" + kUsernsFile, 4096)) {
    unsigned slot = 0, first = 0;
    char registry[4096] = {0};
    if (std::sscanf(userns->c_str(), "%u %u %4095s", &slot, &first, registry) != 3)
      return Error(ErrorCode::kFailedPrecondition, "sandbox " + id + ": malformed userns record");
    st->slot = slot;
    st->root_id = first;
    st->registry = registry;
  }
  ABX_ASSIGN_OR_RETURN(st->netns, open_fd("/proc/" + std::to_string(pid) + "/ns/net", O_RDONLY));
  if (auto veth = read_file(st->dir + "/" + kVethFile, 4096)) {
    char name[IFNAMSIZ + 1] = {0};
    unsigned host_ip = 0, sandbox_ip = 0;
    if (std::sscanf(veth->c_str(), "%16s %u %u", name, &host_ip, &sandbox_ip) != 3)
      return Error(ErrorCode::kFailedPrecondition, "sandbox " + id + ": malformed veth record");
    st->veth = VethInfo{name, host_ip, sandbox_ip};
  }
  ABX_ASSIGN_OR_RETURN(const CgroupLayout layout, CgroupLayout::detect());
  st->config.cgroup_parent = parent;
  st->cgroups = SandboxCgroups::existing(layout, parent, id);
  // What upper_dir() reports: an image sandbox has its writable layer in the state dir.
  struct stat img;
  if (!config)
    st->config.rootfs = ::stat((st->dir + "/" + kRwImage).c_str(), &img) == 0 ? RootfsMode::kImage
                                                                              : RootfsMode::kHost;
  st->adopted = true;
  return Sandbox(std::move(st));
}

// One function of ~115 lines on purpose: every step after the state directory is covered by the
// one undo guard and reads its state (st, made_cgroups), and the order is the isolation
// contract (cgroups before clone, the child waits for "go" until it is recorded and attached).
Result<Sandbox> Sandbox::spawn(SandboxConfig config, Timeline* timeline) {
  auto mark = [timeline](std::string_view step) {
    if (timeline != nullptr) timeline->mark(step);
  };
  ABX_TRY(validate(config));
  ABX_ASSIGN_OR_RETURN(const std::vector<sock_filter>* filter, seccomp_program());
  // A kept layer is mounted once: the sandbox that left it may still be letting go of it (its
  // loop device detaches asynchronously after the unmount).
  if (!config.layer_image.empty() && !wait_loop_detached(config.layer_image))
    return Error(ErrorCode::kFailedPrecondition,
                 "the writable layer " + config.layer_image + " is still in use by a sandbox");

  // 1. state directory, locked.
  auto st = std::make_unique<State>();
  st->dir = config.state_dir + "/" + config.id;
  ABX_TRY(make_state_dir(config, st->dir));
  // From here on, failures undo what was made.
  bool committed = false;
  std::optional<SandboxCgroups> made_cgroups;
  ScopeExit undo{[&] {
    if (committed) return;
    if (made_cgroups) {
      (void)made_cgroups->kill();
      (void)made_cgroups->remove();
    }
    (void)remove_rw_layer(st->dir);
    (void)remove_tree(st->dir);
    if (st->slot) {  // claimed by us, or already handed to the (now dead) init
      release_slot(st->registry, *st->slot, ::getpid(), process_start_time(::getpid()));
      st->release_slot_of_init();
    }
  }};
  ABX_ASSIGN_OR_RETURN(st->lock, lock_state_dir(st->dir));
  mark("state_dir");
  // 1b. the writable layer, mounted on the host (so the owner can read it after exit): a new
  // one, or the kept one it is given.
  if (config.rootfs != RootfsMode::kHost) {
    if (config.layer_image.empty()) {
      std::optional<ReadyLayer> ready;
      if (config.layer_pool != nullptr) ready = config.layer_pool->take(config.disk_bytes);
      // A ready layer that cannot be installed (its image left behind is removed first) is no
      // reason to fail: the create makes its own, as without a pool.
      if (!ready || !install_ready_layer(std::move(*ready), st->dir)) {
        if (ready) ABX_TRY(remove_rw_layer(st->dir));
        ABX_TRY(make_rw_layer(config.state_dir, st->dir, config.disk_bytes));
      }
    } else
      ABX_TRY(take_rw_layer(config.layer_image, st->dir, /*link=*/!config.copy_layer));
  }
  mark("rw_layer");

  // 1c. a host id range of its own for the user namespace.
  if (config.userns.enabled) {
    ABX_ASSIGN_OR_RETURN(std::uint32_t slot, claim_slot(config.userns));
    st->slot = slot;
    st->registry = config.userns.registry;
    st->root_id = slot_first_id(config.userns, slot);
    ABX_TRY(write_userns_record(*st));
  }
  mark("userns_slot");

  // 2. cgroups with their limits, before clone: the child must never run unlimited.
  ABX_ASSIGN_OR_RETURN(st->cgroups, SandboxCgroups::create(cgroup_layout(), config.cgroup_parent,
                                                           config.id, config.limits));
  made_cgroups = st->cgroups;
  mark("cgroups");

  // 2b. the link's rules, while this process's memory is still its own (see link_rules).
  if (config.veth.enabled && config.link_rules && st->slot) {
    ABX_TRY(config.link_rules(veth_for_slot(config.veth, *st->slot)));
    config.link_rules = nullptr;  // done: connect_veth runs link_ready only
    mark("link_rules");
  }

  // 3. the plan: all allocation for the child happens here.
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return os::errno_error("socketpair", errno);
  UniqueFd parent_sock(pair[0]), child_sock(pair[1]);
  PlanStorage storage;
  ABX_TRY(prepare_mount_point(config.userns.mount_point));
  ABX_TRY(build_plan(config, *filter, child_sock.get(), storage));
  mark("plan");

  // 4. clone into the new namespaces; the child waits for "go". With a user namespace, the
  // cloning thread has the range's first id as its effective id, so the namespace (and every
  // namespace created with it) is owned by that uid rather than host root: the kernel charges
  // the namespace's per-user counters to its owner in the parent namespace.
  std::uint64_t flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC;
  if (storage.plan.own_netns) flags |= CLONE_NEWNET;
  std::optional<std::uint32_t> owner;
  if (config.userns.enabled) {
    flags |= CLONE_NEWUSER;
    owner = st->root_id;
  }
  ABX_ASSIGN_OR_RETURN(Cloned cloned, clone_init(flags, storage.plan, owner));
  const pid_t pid = cloned.pid;
  st->pidfd.reset(cloned.pidfd);
  st->pid = pid;
  st->start = process_start_time(pid);
  child_sock.reset();
  // Before the init starts anything: every process of the sandbox inherits its nice value.
  match_daemon_priority(pid);
  mark("clone");

  // 5.-6. record, attach, release; until "go" the child only waits, so killing it is safe.
  auto abort_child = [&](Error e) -> Error {
    sys_pidfd_send_signal(st->pidfd.get(), SIGKILL);
    siginfo_t info;
    ::waitid(P_PIDFD, static_cast<id_t>(st->pidfd.get()), &info, WEXITED);
    return e;
  };
  if (Status s = wait_inherited_closed(parent_sock.get(), config.id); !s)
    return abort_child(s.error());
  mark("child_ready");
  auto mounts = prepare_mounts(config, st->dir, pid, st->root_id);
  if (!mounts) return abort_child(mounts.error());
  mark("mounts");
  if (st->slot) {
    if (Status s = hold_slot(config.userns, *st->slot, pid); !s) return abort_child(s.error());
  }
  mark("hold_slot");
  auto netns = prepare_child(config, st->dir, st->cgroups, pid, storage.plan.own_netns, timeline);
  if (!netns) return abort_child(netns.error());
  st->netns = std::move(netns).value();
  mark("netns");
  if (config.veth.enabled) {
    if (Status s = connect_veth(config, *st, timeline); !s) return abort_child(s.error());
  }
  if (Status s = release_child(parent_sock.get(), config.id, *mounts); !s)
    return abort_child(s.error());
  mark("release");

  st->config = std::move(config);
  committed = true;
  return Sandbox(std::move(st));
}

}  // namespace abx::runtime
