// checkpoint() and restore(): CRIU around abx's own steps (checkpoint.h says what and why).
//
// checkpoint(), in order:
//   1. preconditions, `dir`, `criu check` — before the sandbox is touched;
//   2. freeze (the cgroup freezer: the tree stops at a point abx chose, and CRIU is told to use
//      that freezer), remove the veth (CRIU cannot restore it);
//   3. criu dump; on failure: veth back, thaw, report the dump.log tail;
//   4. syncfs of the writable layer, then either (snapshot) copy rw.img, veth back, thaw; or
//      (keep_frozen) hard-link rw.img, nothing undone; or (pause to disk) reap the init CRIU
//      killed, move rw.img into `dir`, destroy the sandbox;
//   5. checkpoint.json, last (the marker that `dir` holds a complete checkpoint).
// restore(): spawn()'s steps with CRIU in place of clone3 (see restore() below).
#include "abx/runtime/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include "abx/base/json.h"
#include "abx/base/scope_exit.h"
#include "abx/base/try.h"
#include "disk.h"
#include "mounts.h"
#include "sandbox_internal.h"
#include "sys.h"
#include "userns_internal.h"

namespace abx::runtime {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJsonFile = "checkpoint.json";
constexpr const char* kDumpLog = "dump.log";
constexpr const char* kRestoreLog = "restore.log";
constexpr const char* kRestorePid = "restore.pid";
constexpr const char* kCriuPid = "criu.pid";  // "<pid> <start time>" while a dump runs
constexpr int kFormat = 1;

std::chrono::milliseconds since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

std::string bind_key(std::size_t i) { return "bind" + std::to_string(i); }

// In a forked child that does not exec (or not yet): closes every descriptor but `keep`, so it
// never holds its parent's locks or another child's pipe ends (children made by concurrent
// restores would otherwise keep each other's pipes open), and dies with its parent.
// Async-signal-safe (raw syscalls only).
void child_keep_only(int keep) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (keep > 0) ::syscall(SYS_close_range, 0u, static_cast<unsigned>(keep - 1), 0u);
  ::syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0u, 0u);
}

// What a CRIU run left: its status, its stdout + stderr (the first 64 KiB), whether it timed out.
using Ran = os::Finished;

// How long `criu check` and `criu --version` may take.
constexpr std::chrono::seconds kQuickCriuLimit{60};

// Runs `args` (argv[0] absolute; no shell) with os::run: /dev/null as stdin, one pipe as stdout
// and stderr (the first 64 KiB kept). With `join` or `started`, the forked child waits until the
// parent has attached it to those cgroups (so the program runs in them from its first
// instruction) and has called started(pid), then execs; should the parent die before, the child
// exits and the program never runs.
// started() records the pid where a later abxd finds it: the program must not act before the
// record exists (a dump started by an abxd killed in between ran unrecorded; recover() thawed
// the tree, and CRIU, ending, froze it again for good). The program leads a session (and so a
// process group) of its own; when it has not finished within `limit`, that group is killed
// (SIGKILL) and the result says timed_out.
// A session, not only a process group: a CRIU dump outlives an abxd killed meanwhile (recover()
// waits for it). Were it only a group of abxd's session, abxd's death would orphan the group,
// and the kernel sends SIGHUP and SIGCONT to an orphaned group with a stopped member. CRIU's
// start stops a helper of its own (SIGSTOP, the compat vDSO probe of kerndat_init) and waits
// for that stop: a SIGCONT first and the helper runs on while CRIU waits for ever (seen: a
// "kill -9 of abxd" test's CRIU hung in waitpid with SIGHUP pending). The kernel sends those
// signals only within one session.
Result<Ran> run_program(const std::vector<std::string>& args, std::chrono::milliseconds limit,
                        const SandboxCgroups* join = nullptr,
                        const std::function<Status(pid_t)>& started = {}) {
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

// The file's text, or `fallback` when it cannot be read.
std::string read_or(const std::string& path, std::string fallback, std::size_t max = 16 << 20) {
  auto r = read_file(path, max);
  return r ? std::move(r).value() : std::move(fallback);
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The lines of a CRIU log worth showing: its errors (the last 6), else its last 6 lines.
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

// Whether `dir` exists and has no entries.
Result<bool> empty_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return os::errno_error("opendir " + dir, errno);
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    if (std::string_view(e->d_name) == "." || std::string_view(e->d_name) == "..") continue;
    empty = false;
    break;
  }
  ::closedir(d);
  return empty;
}

std::uint64_t dir_bytes(const std::string& dir, const std::string& except) {
  std::uint64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    struct stat st;
    if (except == e->d_name) continue;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += static_cast<std::uint64_t>(st.st_size);
  }
  ::closedir(d);
  return total;
}

Status syncfs_path(const std::string& path) {
  ABX_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(path, O_RDONLY | O_DIRECTORY));
  if (::syncfs(fd.get()) != 0) return os::errno_error("syncfs " + path, errno);
  return {};
}

const char* rootfs_name(RootfsMode m) {
  switch (m) {
    case RootfsMode::kImage:
      return "image";
    case RootfsMode::kDirectory:
      return "directory";
    case RootfsMode::kHost:
      break;
  }
  return "host";
}

Status write_json(const std::string& dir, const json::object& o) {
  std::string path = dir + "/" + kJsonFile, tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  ABX_TRY(create_file(tmp, to_json_string(o) + "\n"));
  {
    ABX_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(tmp, O_RDONLY));
    if (::fsync(fd.get()) != 0) return os::errno_error("fsync " + tmp, errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return os::errno_error("rename " + tmp, errno);
  return {};
}

// What checkpoint.json records (checkpoint.h; docs/design/criu-spike.md §4.1 step 5).
json::object describe_checkpoint(const Sandbox::State& st, const CheckpointOptions& o,
                                 const std::string& criu_version) {
  const SandboxConfig& c = st.config;
  json::object j;
  j["format"] = kFormat;
  j["criu"] = o.criu;
  j["criu_version"] = criu_version;
  std::string patches = trim(read_or(o.criu + ".patches", ""));
  if (patches.empty()) {
    auto slash = o.criu.rfind('/');
    patches = trim(read_or(o.criu.substr(0, slash) + "/criu.patches", ""));
  }
  j["criu_patches"] = patches;
  utsname u{};
  ::uname(&u);
  j["kernel"] = u.release;
  j["id"] = c.id;
  j["hostname"] = c.id;
  j["rootfs"] = rootfs_name(c.rootfs);
  json::array layers;
  for (const auto& l : layers_of(c)) layers.emplace_back(l);
  j["layers"] = std::move(layers);
  j["disk_bytes"] = c.disk_bytes;
  j["shm_bytes"] = c.shm_bytes;
  j["slot"] = *st.slot;
  j["root_host_id"] = st.root_id;
  j["userns_registry"] = st.registry;
  j["cgroup_parent"] = c.cgroup_parent;
  j["limits"] = json::object{{"memory_bytes", c.limits.memory_bytes},
                             {"pids_max", c.limits.pids_max},
                             {"cpu_millicores", c.limits.cpu_millicores}};
  if (st.veth)
    j["veth"] = json::object{{"host_if", st.veth->host_if},
                             {"host_ip", st.veth->host_ip},
                             {"sandbox_ip", st.veth->sandbox_ip}};
  else
    j["veth"] = nullptr;
  json::array binds;
  for (std::size_t i = 0; i < c.binds.size(); ++i)
    binds.emplace_back(json::object{{"key", bind_key(i)},
                                    {"target", c.binds[i].target},
                                    {"source", c.binds[i].source},
                                    {"writable", c.binds[i].writable}});
  j["binds"] = std::move(binds);
  json::array argv;
  for (const auto& a : c.argv) argv.emplace_back(a);
  j["argv"] = std::move(argv);
  j["leave_running"] = o.leave_running;
  j["keep_frozen"] = o.keep_frozen;
  j["pid"] = st.pid;
  j["time"] = static_cast<std::int64_t>(::time(nullptr));
  return j;
}

// Waits (bounded) until no loop device is attached to `image` any more, by its name or (a
// hard link: the keep_frozen layer) its inode: the kernel detaches an autoclear device
// asynchronously once the last mount of its filesystem is gone. False if one still is.
bool wait_loop_detached(const std::string& image) {
  auto attached = [&] { return loop_backed_by(image) || loop_backed_by_inode(image); };
  return os::poll_until(Clock::now() + std::chrono::seconds(5),
                        os::Backoff{std::chrono::milliseconds(5), std::chrono::milliseconds(5)},
                        [&] { return !attached(); });
}

// `to` as a hard link of `from` (the same inode), or a copy where the filesystem does not allow
// the link (another filesystem, or no hard links there).
Status link_or_copy(const std::string& from, const std::string& to) {
  if (::link(from.c_str(), to.c_str()) == 0) return {};
  if (errno != EXDEV && errno != EPERM) return os::errno_error("link " + from + " -> " + to, errno);
  return copy_sparse_file(from, to);
}

}  // namespace

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
  auto ran = run_program({criu, "check"}, kQuickCriuLimit);
  if (!ran) return Error(ErrorCode::kFailedPrecondition, "criu check: " + ran.error().message());
  if (ran->status != 0)
    return Error(ErrorCode::kFailedPrecondition,
                 "criu check failed (" + ran->describe() + "): " + log_tail(ran->out));
  std::lock_guard lock(mu);
  checked.insert(criu);
  return {};
}

Result<CheckpointInfo> checkpoint(Sandbox& sb, const std::string& dir,
                                  const CheckpointOptions& options) {
  const auto t0 = Clock::now();
  Sandbox::State& st = SandboxAccess::state(sb);
  // 1. Everything that can refuse, before the sandbox is touched.
  if (options.keep_frozen && !options.leave_running)
    return invalid_argument("checkpoint: keep_frozen needs leave_running");
  if (st.destroyed || st.status)
    return Error(ErrorCode::kFailedPrecondition, "checkpoint: the sandbox is not running");
  const SandboxConfig& c = st.config;
  if (c.rootfs == RootfsMode::kHost || !st.slot || c.network != NetworkMode::kNone)
    return Error(ErrorCode::kFailedPrecondition,
                 "checkpoint needs an image or directory rootfs, a user namespace and a network "
                 "namespace of the sandbox's own");
  if (st.adopted && c.lower_dirs.empty() && c.rootfs_dir.empty())
    return Error(ErrorCode::kFailedPrecondition,
                 "checkpoint of a sandbox adopted without its config (adopt() it with one)");
  if (dir.empty() || dir[0] != '/') return invalid_argument("checkpoint dir must be absolute");
  if (options.mac_key.size() < kCheckpointKeyBytes)
    return invalid_argument("checkpoint: a key to seal it with is needed (mac_key)");
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno != EEXIST) return os::errno_error("mkdir " + dir, errno);
    ABX_ASSIGN_OR_RETURN(bool empty, empty_dir(dir));
    if (!empty)
      return Error(ErrorCode::kFailedPrecondition, "checkpoint dir " + dir + " is not empty");
  }
  // Root's only: the images hold the sandbox's memory and credentials. (restore() gives CRIU a
  // private 0711 copy of the image list: see images_for_restore.)
  if (::chmod(dir.c_str(), 0700) != 0) return os::errno_error("chmod " + dir, errno);
  ABX_TRY(criu_available(options.criu));
  const std::string freezer = st.cgroups.freezer_dir();
  if (freezer.empty())
    return Error(ErrorCode::kFailedPrecondition, "checkpoint needs a cgroup freezer");
  std::string criu_version;
  if (auto v = run_program({options.criu, "--version"}, kQuickCriuLimit); v && v->status == 0) {
    criu_version = v->out.substr(0, v->out.find('\n'));
    if (criu_version.starts_with("Version: ")) criu_version.erase(0, 9);
  }

  // 2. Freeze, then the veth goes (its peer is outside the sandbox's user namespace).
  ABX_TRY(st.cgroups.freeze(true));
  const auto frozen_at = Clock::now();
  bool veth_removed = false;
  // Undoes step 2: what a failed dump (or a snapshot) leaves running.
  auto resume = [&]() -> Status {
    Status result;
    if (veth_removed) {
      result = setup_veth(c.veth, *st.veth, st.netns.get());
      if (result) veth_removed = false;
    }
    Status thaw = st.cgroups.freeze(false);
    return result ? thaw : result;
  };
  auto with_resume = [&](Error e) -> Error {
    if (Status r = resume(); !r)
      return Error(e.code(),
                   e.message() + "; then resuming the sandbox failed: " + r.error().message());
    return e;
  };
  if (st.veth) {
    if (Status s = remove_veth(*st.veth); !s) return with_resume(s.error());
    veth_removed = true;
  }

  // 3. The dump.
  std::vector<std::string> args = {options.criu,   "dump",       "--tree", std::to_string(st.pid),
                                   "--images-dir", dir,          "-o",     kDumpLog,
                                   "-v2",          "--external", "mnt[]"};
  for (std::size_t i = 0; i < c.binds.size(); ++i) {
    args.push_back("--external");
    args.push_back("mnt[" + c.binds[i].target + "]:" + bind_key(i));
  }
  // --skip-in-flight: a connection still in a listening socket's queue (not accepted yet: a
  // client connecting just as the pause comes) is left out, and lost to its client, rather than
  // failing the whole dump ("In-flight connection"; seen in abxd_js_sdk_e2e's autoResume test).
  args.insert(args.end(), {"--tcp-established", "--skip-in-flight", "--freeze-cgroup", freezer});
  if (options.leave_running) args.push_back("--leave-running");
  if (options.ghost_limit) {
    args.push_back("--ghost-limit");
    args.push_back(std::to_string(options.ghost_limit));
  }
  const auto dump_at = Clock::now();
  // While CRIU dumps, its pid is in the state dir: an owner that dies meanwhile leaves CRIU
  // running on the tree, and recover() must wait for it before it thaws anything.
  const std::string criu_pidfile = st.dir + "/" + kCriuPid;
  auto ran = run_program(args, options.criu_timeout, nullptr, [&](pid_t pid) {
    return create_file(criu_pidfile,
                       std::to_string(pid) + " " + std::to_string(process_start_time(pid)) + "\n");
  });
  ::unlink(criu_pidfile.c_str());
  CheckpointInfo info;
  info.dir = dir;
  info.leave_running = options.leave_running;
  info.dump = since(dump_at);
  if (!ran) return with_resume(ran.error());
  if (ran->status != 0) {
    std::string log = read_or(dir + "/" + kDumpLog, "");
    std::string tail = log_tail(log.empty() ? ran->out : log);
    // A full disk: CRIU's write errors say ENOSPC (its log may itself be cut short by it).
    struct statvfs vfs {};
    bool full = log.find("No space left on device") != std::string::npos ||
                ran->out.find("No space left on device") != std::string::npos ||
                (::statvfs(dir.c_str(), &vfs) == 0 &&
                 static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize < (64u << 10));
    const ErrorCode code = ran->timed_out ? ErrorCode::kDeadlineExceeded
                           : full         ? ErrorCode::kInsufficientStorage
                                          : ErrorCode::kInternal;
    // A watch CRIU cannot save (on a filesystem whose file handles cannot be opened again:
    // mounts.cc) is the sandbox's doing, not abx's: say what it is.
    const bool watch = (log.empty() ? ran->out : log).find("fsnotify: ") != std::string::npos;
    return with_resume(Error(
        code, "criu dump of sandbox " + c.id + " failed (" + ran->describe() +
                  (full ? ", no space left in " + dir : "") +
                  (watch ? ", a process in the sandbox holds an inotify or fanotify watch that "
                           "cannot be saved; end that watch and retry"
                         : "") +
                  "): " + tail));
  }

  // 4. The writable layer, consistent with the images: synced while nothing can write to it.
  const std::string rw = st.dir + "/" + kRwMount, image = st.dir + "/" + kRwImage;
  const std::string saved = dir + "/" + kRwImage;
  if (options.leave_running) {
    // keep_frozen: nothing writes to the layer until the caller commits (destroys the tree) or
    // aborts (recover(), and `dir` goes), so sharing the inode is as good as a copy.
    Status s = syncfs_path(rw);
    if (s) s = options.keep_frozen ? link_or_copy(image, saved) : copy_sparse_file(image, saved);
    if (!s) return with_resume(s.error());
    if (!options.keep_frozen) {
      ABX_TRY(resume());
      info.frozen = since(frozen_at);
    }
  } else {
    // CRIU killed the tree once the dump was complete (bounded: never hang on a CRIU that
    // reported success without doing so).
    pollfd p{st.pidfd.get(), POLLIN, 0};
    if (os::retry_eintr([&] { return ::poll(&p, 1, 10000); }) != 1)
      return internal_error("criu dump of sandbox " + c.id +
                            " succeeded but its init is still running");
    auto status = sb.wait();
    if (!status) return status.error();
    info.frozen = since(frozen_at);
    ABX_TRY(syncfs_path(rw));
    if (::rename(image.c_str(), saved.c_str()) != 0) {
      if (errno != EXDEV) return os::errno_error("rename " + image + " -> " + saved, errno);
      ABX_TRY(copy_sparse_file(image, saved));
    }
    // The layer is the checkpoint's now; what is left of the sandbox goes.
    ABX_TRY(sb.destroy());
    wait_loop_detached(saved);
    wait_loop_detached(image);
  }
  struct stat img {};
  if (::stat(saved.c_str(), &img) == 0)
    info.layer_bytes = static_cast<std::uint64_t>(img.st_blocks) * 512;
  info.image_bytes = dir_bytes(dir, kRwImage);

  // 5. The marker, then the seal over everything (the marker included): a checkpoint is
  // complete with both. A kept-frozen sandbox without its checkpoint runs on.
  const auto seal_at = Clock::now();
  Status done = write_json(dir, describe_checkpoint(st, options, criu_version));
  if (done) done = make_private(dir);
  // keep_frozen: the layer is still the frozen sandbox's, whose unmount writes to it;
  // release_checkpointed() seals its content.
  if (done)
    done = seal_checkpoint(
        dir, options.mac_key,
        options.keep_frozen ? std::vector<std::string>{kRwImage} : std::vector<std::string>{});
  if (!done) return options.keep_frozen ? with_resume(done.error()) : done.error();
  info.seal = since(seal_at);
  if (options.keep_frozen) info.frozen = since(frozen_at);
  info.total = since(t0);
  return info;
}

Status release_checkpointed(Sandbox& sb, const std::string& dir, std::string_view mac_key) {
  ABX_TRY(sb.destroy());
  if (!wait_loop_detached(dir + "/" + kRwImage))
    return Error(ErrorCode::kDeadlineExceeded,
                 "the writable layer of checkpoint " + dir + " is still loop-attached after 5 s");
  return complete_seal(dir, mac_key);
}

Status recover(Sandbox& sb, std::chrono::milliseconds criu_wait) {
  Sandbox::State& st = SandboxAccess::state(sb);
  // A CRIU dump its dead owner started may still hold the tree (seized, frozen by it): it is
  // let finish (bounded by criu_wait), as one killed mid-dump may leave its parasite in a task.
  // One that has not finished by then hangs (as one did, waiting for a trap the guest never
  // delivered): it is killed with its process group (it leads one: run_program), and the
  // sandbox, which was running before the dump, is kept (its tasks are detached when CRIU dies).
  const std::string criu_pidfile = st.dir + "/" + kCriuPid;
  if (auto rec = read_file(criu_pidfile, 64)) {
    long long pid = 0;
    unsigned long long start = 0;
    if (std::sscanf(rec->c_str(), "%lld %llu", &pid, &start) == 2 && pid > 0) {
      int fd = sys_pidfd_open(static_cast<pid_t>(pid));
      if (fd >= 0) {
        UniqueFd criu(fd);
        if (process_start_time(static_cast<pid_t>(pid)) == start) {
          pollfd done{criu.get(), POLLIN, 0};
          const int wait_ms = static_cast<int>(std::max<std::int64_t>(0, criu_wait.count()));
          if (os::retry_eintr([&] { return ::poll(&done, 1, wait_ms); }) != 1) {
            ::kill(-static_cast<pid_t>(pid), SIGKILL);
            sys_pidfd_send_signal(criu.get(), SIGKILL);
            if (os::retry_eintr([&] { return ::poll(&done, 1, 10'000); }) != 1)
              return Error(ErrorCode::kDeadlineExceeded,
                           "recover: the CRIU dump (pid " + std::to_string(pid) + ") of sandbox " +
                               st.config.id + " did not end when killed");
          }
        }
      }
    }
    ::unlink(criu_pidfile.c_str());
  }
  pollfd p{st.pidfd.get(), POLLIN, 0};
  if (st.destroyed || st.status || !st.pidfd || ::poll(&p, 1, 0) != 0)
    return Error(ErrorCode::kFailedPrecondition, "recover: the sandbox is not running");
  // The link first, thawed last: the sandbox never runs without its link when it had one.
  Status link;
  if (st.veth && ::if_nametoindex(st.veth->host_if.c_str()) == 0) {
    if (st.config.veth.enabled)
      link = setup_veth(st.config.veth, *st.veth, st.netns.get());
    else
      link = Error(ErrorCode::kFailedPrecondition,
                   "recover: the veth of sandbox " + st.config.id +
                       " is gone and its config is unknown (adopt it with its config)");
  } else if (!st.veth && st.config.veth.enabled && st.slot) {
    // Restored, but its owner died before it had made the link and its record: made now, from
    // the slot (config.link_ready is empty in an adopted config).
    link = connect_veth(st.config, st);
  }
  Status thaw = st.cgroups.freeze(false);
  return link ? thaw : link;
}

namespace {

// A checkpoint.json read back, with what restore() checks and uses.
struct Saved {
  std::string id;
  std::uint32_t slot = 0;
  std::uint32_t root_host_id = 0;
  std::vector<std::string> layers;
  std::vector<std::string> bind_targets;
};

Result<Saved> read_checkpoint(const std::string& dir) {
  const std::string path = dir + "/" + kJsonFile;
  auto text = read_file(path, 1 << 20);
  if (!text) {
    if (text.error().code() == ErrorCode::kNotFound)
      return Error(ErrorCode::kNotFound, "no checkpoint in " + dir + " (no " + kJsonFile + ")");
    return text.error();
  }
  auto corrupt = [&](const std::string& why) {
    return Error(ErrorCode::kFailedPrecondition, "corrupt checkpoint " + path + ": " + why);
  };
  auto v = parse_json_strict(*text);
  if (!v) return corrupt(v.error().message());
  const json::object* o = v->if_object();
  if (!o) return corrupt("not an object");
  auto str = [&](const char* k) -> const json::string* {
    auto* x = o->if_contains(k);
    return x ? x->if_string() : nullptr;
  };
  auto num = [&](const char* k) -> std::optional<std::uint64_t> {
    auto* x = o->if_contains(k);
    if (!x) return std::nullopt;
    if (auto* u = x->if_uint64()) return *u;
    if (auto* i = x->if_int64(); i && *i >= 0) return static_cast<std::uint64_t>(*i);
    return std::nullopt;
  };
  auto format = num("format");
  if (!format || *format != kFormat) return corrupt("unknown format");
  Saved s;
  auto* id = str("id");
  auto slot = num("slot");
  auto root = num("root_host_id");
  auto* layers = o->if_contains("layers");
  auto* binds = o->if_contains("binds");
  if (!id || !slot || !root || !layers || !layers->is_array() || !binds || !binds->is_array())
    return corrupt("missing id, slot, root_host_id, layers or binds");
  s.id = std::string(*id);
  s.slot = static_cast<std::uint32_t>(*slot);
  s.root_host_id = static_cast<std::uint32_t>(*root);
  for (const auto& l : layers->get_array()) {
    if (!l.is_string()) return corrupt("a layer is not a string");
    s.layers.emplace_back(l.get_string());
  }
  for (const auto& b : binds->get_array()) {
    const json::value* t = b.is_object() ? b.get_object().if_contains("target") : nullptr;
    if (!t || !t->is_string()) return corrupt("a bind without a target");
    s.bind_targets.emplace_back(t->get_string());
  }
  for (const char* needed : {kRwImage, "inventory.img"}) {
    struct stat st;
    if (::stat((dir + "/" + needed).c_str(), &st) != 0)
      return corrupt(std::string("missing ") + needed);
  }
  return s;
}

// A process in a new user namespace with the sandbox's id mapping, kept until the mounts are
// idmapped with it (the mapping is what counts, not which namespace carries it).
class IdmapHolder {
 public:
  static Result<IdmapHolder> make(std::uint32_t first) {
    IdmapHolder h;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return os::errno_error("pipe2", errno);
    UniqueFd rd(p[0]);
    h.release_.reset(p[1]);
    clone_args args = {};
    args.flags = CLONE_NEWUSER;
    args.exit_signal = SIGCHLD;
    pid_t pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
    if (pid < 0) return os::errno_error("clone3 CLONE_NEWUSER", errno);
    if (pid == 0) {
      child_keep_only(rd.get());  // also our own copy of the write end, else it keeps the pipe
      char c;
      (void)!::read(rd.get(), &c, 1);  // returns at EOF: the parent is done
      ::_exit(0);
    }
    h.pid_ = pid;
    rd.reset();
    ABX_TRY(write_id_maps(pid, first));
    ABX_ASSIGN_OR_RETURN(h.userns_, open_fd("/proc/" + std::to_string(pid) + "/ns/user", O_RDONLY));
    return h;
  }
  IdmapHolder() = default;
  IdmapHolder(IdmapHolder&& o) noexcept
      : release_(std::move(o.release_)), userns_(std::move(o.userns_)), pid_(o.pid_) {
    o.pid_ = -1;
  }
  IdmapHolder& operator=(IdmapHolder&&) = delete;
  ~IdmapHolder() {
    release_.reset();
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  int userns() const { return userns_.get(); }

 private:
  UniqueFd release_;
  UniqueFd userns_;
  pid_t pid_ = -1;
};

Status attach_at(int mnt, const std::string& path) {
  if (::move_mount(mnt, "", AT_FDCWD, path.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return os::errno_error("move_mount onto " + path, errno);
  return {};
}

// --- A restore into another uid range (a fork) ---------------------------------------------
//
// CRIU writes the sandbox's id maps into userns-<id>.img and restores exactly those, so a
// restore into another slot rewrites them (criu-spike.md 2.3 did it with crit). An image is two
// u32 magics, then entries of <u32 length><protobuf>; userns_entry is
//   repeated uid_gid_extent uid_map = 1; repeated uid_gid_extent gid_map = 2;
// with uid_gid_extent { uint32 first = 1; uint32 lower_first = 2; uint32 count = 3; }.

bool get_varint(std::string_view& in, std::uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    *v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

void put_varint(std::string& out, std::uint64_t v) {
  do {
    auto b = static_cast<unsigned char>(v & 0x7f);
    v >>= 7;
    out.push_back(static_cast<char>(v ? b | 0x80 : b));
  } while (v);
}

// One uid_gid_extent with lower_first `from` turned into `to` (other extents as they are).
Result<std::string> rewrite_extent(std::string_view in, std::uint32_t from, std::uint32_t to,
                                   int* changed) {
  std::string out;
  while (!in.empty()) {
    std::uint64_t key = 0, value = 0;
    if (!get_varint(in, &key) || (key & 7) != 0 || !get_varint(in, &value))
      return internal_error("userns image: unexpected field in an id extent");
    if (key >> 3 == 2 && value == from) {
      value = to;
      ++*changed;
    }
    put_varint(out, key);
    put_varint(out, value);
  }
  return out;
}

Result<std::string> rewrite_userns_image(const std::string& image, std::uint32_t from,
                                         std::uint32_t to) {
  if (image.size() < 8) return internal_error("userns image: too short");
  std::string out = image.substr(0, 8);  // the magics
  std::string_view rest = std::string_view(image).substr(8);
  int changed = 0;
  while (rest.size() >= 4) {
    std::uint32_t len = 0;
    std::memcpy(&len, rest.data(), 4);
    rest.remove_prefix(4);
    if (len > rest.size()) return internal_error("userns image: truncated entry");
    std::string_view entry = rest.substr(0, len);
    rest.remove_prefix(len);
    std::string body;
    while (!entry.empty()) {
      std::uint64_t key = 0, size = 0;
      if (!get_varint(entry, &key) || (key & 7) != 2 || !get_varint(entry, &size) ||
          size > entry.size())
        return internal_error("userns image: unexpected field");
      ABX_ASSIGN_OR_RETURN(std::string ext,
                           rewrite_extent(entry.substr(0, size), from, to, &changed));
      entry.remove_prefix(size);
      put_varint(body, key);
      put_varint(body, ext.size());
      body += ext;
    }
    auto n = static_cast<std::uint32_t>(body.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += body;
  }
  if (!rest.empty() || changed == 0)
    return internal_error("userns image: no id map with host id " + std::to_string(from));
  return out;
}

// A private copy of the images in `dir` (hard links where the filesystem allows, copies
// otherwise) at `to`, with every userns-*.img rewritten from `from` to `to_first` when they
// differ. The original files are never written: the rewritten ones are new files (0600, as
// every file of a checkpoint). restore() hands it to CRIU idmapped (the restored tasks read
// their images themselves, from inside the sandbox's user namespace).
Status images_for_restore(const std::string& dir, const std::string& to, std::uint32_t from,
                          std::uint32_t to_first) {
  if (::mkdir(to.c_str(), 0711) != 0) return os::errno_error("mkdir " + to, errno);
  if (::chmod(to.c_str(), 0711) != 0) return os::errno_error("chmod " + to, errno);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return os::errno_error("opendir " + dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (e->d_type == DT_REG && n != kRwImage && n != kJsonFile && n != kSealFile)
      names.push_back(n);
  }
  ::closedir(d);
  for (const auto& n : names) {
    const std::string src = dir + "/" + n, dst = to + "/" + n;
    if (from != to_first && n.starts_with("userns-") && n.ends_with(".img")) {
      ABX_ASSIGN_OR_RETURN(const std::string image, read_file(src, 1 << 20));
      ABX_ASSIGN_OR_RETURN(const std::string rewritten,
                           rewrite_userns_image(image, from, to_first));
      ABX_TRY(create_file(dst, rewritten));
      if (::chmod(dst.c_str(), 0644) != 0) return os::errno_error("chmod " + dst, errno);
      continue;
    }
    if (n.starts_with("pages-")) {
      ABX_TRY(link_or_copy(src, dst));
      continue;
    }
    ABX_ASSIGN_OR_RETURN(const std::string data, read_file(src, 64 << 20));
    ABX_TRY(create_file(dst, data));
    if (::chmod(dst.c_str(), 0644) != 0) return os::errno_error("chmod " + dst, errno);
  }
  return {};
}

// The mount points in CRIU's mountpoints-*.img images (mnt_entry: mnt_id = 2,
// parent_mnt_id = 4, mountpoint = 7) that sit directly on the root mount: the ones CRIU mounts
// onto paths of the restored root itself. Mounts below other mounts (a tmpfs /dev's pts) are
// made inside filesystems CRIU restores from the images, which the seal covers.
Result<std::vector<std::string>> root_mount_targets(const std::string& images) {
  struct Entry {
    std::uint64_t id = 0, parent = 0;
    std::string at;
  };
  std::vector<Entry> entries;
  DIR* d = ::opendir(images.c_str());
  if (!d) return os::errno_error("opendir " + images, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.starts_with("mountpoints-") && n.ends_with(".img")) names.push_back(n);
  }
  ::closedir(d);
  auto bad = [](const std::string& n, const char* why) {
    return Error(ErrorCode::kFailedPrecondition, "checkpoint image " + n + ": " + why);
  };
  for (const auto& n : names) {
    ABX_ASSIGN_OR_RETURN(const std::string image, read_file(images + "/" + n, 16 << 20));
    if (image.size() < 8) return bad(n, "too short");
    std::string_view rest = std::string_view(image).substr(8);  // the magics
    while (rest.size() >= 4) {
      std::uint32_t len = 0;
      std::memcpy(&len, rest.data(), 4);
      rest.remove_prefix(4);
      if (len > rest.size()) return bad(n, "truncated entry");
      std::string_view entry = rest.substr(0, len);
      rest.remove_prefix(len);
      Entry m;
      while (!entry.empty()) {
        std::uint64_t key = 0, v = 0;
        if (!get_varint(entry, &key)) return bad(n, "bad field");
        switch (key & 7) {
          case 0:
            if (!get_varint(entry, &v)) return bad(n, "bad varint");
            if (key >> 3 == 2) m.id = v;
            if (key >> 3 == 4) m.parent = v;
            break;
          case 1:
          case 5: {
            const std::size_t w = (key & 7) == 1 ? 8 : 4;
            if (entry.size() < w) return bad(n, "truncated field");
            entry.remove_prefix(w);
            break;
          }
          case 2:
            if (!get_varint(entry, &v) || v > entry.size()) return bad(n, "bad string");
            if (key >> 3 == 7) m.at = std::string(entry.substr(0, v));
            entry.remove_prefix(v);
            break;
          default:
            return bad(n, "unknown wire type");
        }
      }
      entries.push_back(std::move(m));
    }
  }
  auto norm = [](std::string p) {
    if (p.starts_with(".")) p.erase(0, 1);
    return p;
  };
  std::vector<std::string> out;
  for (const auto& root : entries) {
    if (norm(root.at) != "/") continue;
    for (const auto& m : entries)
      if (m.parent == root.id && &m != &root && norm(m.at) != "/") out.push_back(norm(m.at));
  }
  return out;
}

// Refuses a restore when a mount target — every mount CRIU puts directly on the root, and every
// bind of `config` — has a symlink (or `..` out of the root) anywhere on its way in the root
// overlay `root`: CRIU would mount onto wherever the link points. A target that does not exist
// yet is fine (what exists of its path has no symlink).
Status check_mount_targets(int root, const std::string& images, const SandboxConfig& config) {
  ABX_ASSIGN_OR_RETURN(std::vector<std::string> targets, root_mount_targets(images));
  for (const auto& b : config.binds) targets.push_back(b.target);
  for (const auto& t : targets) {
    std::string rel = t;
    while (rel.starts_with("/")) rel.erase(0, 1);
    if (rel.empty()) continue;
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;  // not O_NOFOLLOW: a final symlink is then ELOOP too
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH;
    const long fd = ::syscall(SYS_openat2, root, rel.c_str(), &how, sizeof how);
    if (fd >= 0) {
      ::close(static_cast<int>(fd));
      continue;
    }
    const int err = errno;
    if (err == ENOENT) continue;
    return Error(ErrorCode::kFailedPrecondition,
                 "restore refused: the mount target " + t + " in the sandbox's saved root " +
                     (err == ELOOP   ? "is or passes through a symlink"
                      : err == EXDEV ? "leads out of the root"
                                     : "cannot be resolved (" + os::errno_name(err) + ")") +
                     "; CRIU would mount onto wherever it leads");
  }
  return {};
}

// The restored uts namespace still has the checkpointed sandbox's hostname.
Status set_hostname(pid_t pid, const std::string& name) {
  ABX_ASSIGN_OR_RETURN(UniqueFd uts, open_fd("/proc/" + std::to_string(pid) + "/ns/uts", O_RDONLY));
  pid_t child = ::fork();  // setns affects the calling thread: do it in a throwaway process
  if (child < 0) return os::errno_error("fork", errno);
  if (child == 0) {
    if (::setns(uts.get(), CLONE_NEWUTS) != 0) ::_exit(1);
    ::_exit(::sethostname(name.data(), name.size()) == 0 ? 0 : 2);
  }
  int status = 0;
  if (os::retry_eintr([&] { return ::waitpid(child, &status, 0); }) < 0)
    return os::errno_error("waitpid", errno);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return internal_error("setting the restored sandbox's hostname failed (" +
                          std::string(WEXITSTATUS(status) == 1 ? "setns" : "sethostname") + ")");
  return {};
}

}  // namespace

Result<Sandbox> restore(const std::string& dir, SandboxConfig config,
                        const RestoreOptions& options) {
  // 0. The checkpoint and the config must agree before anything is made.
  if (dir.empty() || dir[0] != '/') return invalid_argument("checkpoint dir must be absolute");
  if (options.mac_key.size() < kCheckpointKeyBytes)
    return invalid_argument("restore: the key its checkpoint was sealed with is needed (mac_key)");
  // The seal first: nothing of a checkpoint is read before it is known to be abxd's own.
  if (struct stat js; ::lstat((dir + "/" + kJsonFile).c_str(), &js) != 0 && errno == ENOENT)
    return Error(ErrorCode::kNotFound, "no checkpoint in " + dir + " (no " + kJsonFile + ")");
  if (seal_pending(dir)) {
    // A keep_frozen checkpoint committed but not released (its owner died, or destroyed the
    // sandbox itself): its layer is final once no loop device holds it.
    if (!wait_loop_detached(dir + "/" + kRwImage))
      return Error(ErrorCode::kFailedPrecondition,
                   "restore: the writable layer of " + dir +
                       " is still in use by a sandbox (release_checkpointed() it first)");
    ABX_TRY(complete_seal(dir, options.mac_key));
  }
  ABX_TRY(verify_checkpoint(dir, options.mac_key));
  // link_layer: the checkpoint's layer becomes this restore's, and mounting it writes to it. Its
  // seal goes back to pending first, so a restore that fails or is cut short (the checkpoint is
  // kept for a retry) leaves a checkpoint the next restore seals again once the layer is free,
  // rather than one that no longer matches its seal.
  if (options.link_layer) ABX_TRY(seal_checkpoint(dir, options.mac_key, {kRwImage}));
  ABX_ASSIGN_OR_RETURN(const Saved saved, read_checkpoint(dir));
  ABX_TRY(validate(config));
  if (config.rootfs == RootfsMode::kHost || !config.userns.enabled ||
      config.network != NetworkMode::kNone)
    return Error(ErrorCode::kFailedPrecondition,
                 "restore needs an image or directory rootfs, a user namespace and a network "
                 "namespace of the sandbox's own");
  if (layers_of(config) != saved.layers)
    return Error(ErrorCode::kFailedPrecondition,
                 "restore: the config's rootfs layers are not the checkpoint's");
  std::vector<std::string> targets;
  for (const auto& b : config.binds) targets.push_back(b.target);
  if (targets != saved.bind_targets)
    return Error(ErrorCode::kFailedPrecondition,
                 "restore: the config's bind targets are not the checkpoint's");
  if (slot_first_id(config.userns, saved.slot) != saved.root_host_id)
    return Error(ErrorCode::kFailedPrecondition,
                 "restore: the user namespace base differs from the checkpoint's");
  ABX_TRY(criu_available(options.criu));
  ABX_TRY(prepare_mount_point(options.stage_dir));
  // A restore of this id cut short (its owner killed while CRIU ran) leaves its staged root and
  // binds mounted, and with them the layer's loop device: they go first.
  remove_stage(options.stage_dir + "/" + config.id);
  // A keep_frozen checkpoint shares its layer with the sandbox it came from: mounting it while
  // that one's loop device is still attached would mount one filesystem twice.
  const std::string layer = dir + "/" + kRwImage;
  if (!wait_loop_detached(layer) && options.link_layer)
    return Error(ErrorCode::kFailedPrecondition,
                 "restore: the writable layer of " + dir +
                     " is still in use by a sandbox (release_checkpointed() it first)");

  // 1. State directory, locked; the writable layer, a copy of the checkpoint's (so `dir` is
  // never written and may be restored again; with link_layer, the checkpoint's own), its
  // overlay's stale volatile work dir removed.
  auto st = std::make_unique<Sandbox::State>();
  st->dir = config.state_dir + "/" + config.id;
  const std::string stage = options.stage_dir + "/" + config.id;
  ABX_TRY(make_state_dir(config, st->dir));
  bool committed = false, slot_claimed = false;
  std::optional<SandboxCgroups> made_cgroups;
  ScopeExit undo{[&] {
    if (committed) return;
    if (st->pidfd) sys_pidfd_send_signal(st->pidfd.get(), SIGKILL);
    if (made_cgroups) {
      (void)made_cgroups->kill();
      (void)made_cgroups->remove();
    }
    remove_stage(stage);
    (void)remove_rw_layer(st->dir);
    (void)remove_tree(st->dir);
    if (slot_claimed) {
      release_slot(st->registry, *st->slot, ::getpid(), process_start_time(::getpid()));
      if (st->pid > 0) st->release_slot_of_init();
    }
  }};
  ABX_ASSIGN_OR_RETURN(st->lock, lock_state_dir(st->dir));
  if (options.link_layer)
    ABX_TRY(link_or_copy(layer, st->dir + "/" + kRwImage));
  else
    ABX_TRY(copy_sparse_file(layer, st->dir + "/" + kRwImage));
  ABX_TRY(mount_rw_image(st->dir + "/" + kRwImage, st->dir + "/" + kRwMount));
  // The old overlay was mounted `volatile`: overlayfs refuses (mounts read-only) a work dir
  // that still has its incompat/volatile marker.
  ABX_TRY(remove_tree(st->dir + "/" + kRwMount + "/work/work"));

  // 2. The checkpoint's slot if it is free (its uid range is in CRIU's userns image); else
  // (a fork: the checkpointed sandbox still runs) another, with that image rewritten.
  std::string images;
  if (auto exact = claim_slot_exact(config.userns, saved.slot); exact) {
    st->slot = saved.slot;
  } else if (exact.error().code() == ErrorCode::kResourceExhausted) {
    ABX_ASSIGN_OR_RETURN(st->slot, claim_slot(config.userns));
  } else {
    return exact.error();
  }
  slot_claimed = true;
  st->registry = config.userns.registry;
  st->root_id = slot_first_id(config.userns, *st->slot);
  ABX_TRY(write_userns_record(*st));
  // Always a private copy: CRIU needs a directory it can search from inside the sandbox's user
  // namespace (the checkpoint's is root's only), and it writes its stats there.
  images = st->dir + "/images";
  ABX_TRY(images_for_restore(dir, images, saved.root_host_id, st->root_id));

  // 3. Root and binds, idmapped as spawn() makes them, attached under the stage for CRIU. The
  // state dir names the stage first: if this owner dies from here on, cleanup_stale() finds the
  // staged mounts (they hold the layer's loop device) through it.
  remove_stage(stage);  // a crashed restore's leftovers
  ABX_TRY(create_file(st->dir + "/" + kStageFile, stage + "\n"));
  if (::mkdir(stage.c_str(), 0755) != 0) return os::errno_error("mkdir " + stage, errno);
  {
    ABX_ASSIGN_OR_RETURN(IdmapHolder holder, IdmapHolder::make(st->root_id));
    const Idmap idmap{holder.userns(), st->root_id};
    ABX_ASSIGN_OR_RETURN(UniqueFd root, make_root_overlay(config, st->dir, idmap));
    // CRIU mounts onto paths in this root and would follow a symlink there out of it (a
    // writable layer's /opt/abx -> /etc made a host path the bind's target).
    ABX_TRY(check_mount_targets(root.get(), images, config));
    ABX_ASSIGN_OR_RETURN(std::vector<UniqueFd> binds, make_bind_mounts(config, idmap));
    const std::string root_at = stage + "/root";
    if (::mkdir(root_at.c_str(), 0755) != 0) return os::errno_error("mkdir " + root_at, errno);
    ABX_TRY(attach_at(root.get(), root_at));
    // The images, idmapped as the root is: the restored tasks, in the sandbox's user namespace,
    // open their own images, and through this mount root's 0600 files are their owner's.
    // Read-only: nothing in the tree may change what the other tasks read.
    ABX_ASSIGN_OR_RETURN(UniqueFd imgs, clone_tree(images,
                                                   MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                                       MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                                                   idmap));
    const std::string images_at = stage + "/images";
    if (::mkdir(images_at.c_str(), 0700) != 0) return os::errno_error("mkdir " + images_at, errno);
    ABX_TRY(attach_at(imgs.get(), images_at));
    images = images_at;
    for (std::size_t i = 0; i < binds.size(); ++i) {
      const std::string at = stage + "/" + bind_key(i);
      struct stat src;
      if (::stat(config.binds[i].source.c_str(), &src) != 0)
        return os::errno_error("bind source " + config.binds[i].source, errno);
      if (S_ISDIR(src.st_mode)) {
        if (::mkdir(at.c_str(), 0755) != 0) return os::errno_error("mkdir " + at, errno);
      } else {
        ABX_TRY(create_file(at, ""));
      }
      ABX_TRY(attach_at(binds[i].get(), at));
    }
  }

  // 4. Cgroups with their limits; CRIU runs inside them, so the restored tree is born there.
  ABX_ASSIGN_OR_RETURN(st->cgroups, SandboxCgroups::create(cgroup_layout(), config.cgroup_parent,
                                                           config.id, config.limits));
  made_cgroups = st->cgroups;

  // 5. CRIU. Its log and pidfile go to the state dir: `dir` stays as it was.
  const std::string pidfile = st->dir + "/" + kRestorePid;
  std::vector<std::string> args = {
      options.criu, "restore",   "--images-dir", images,   "--work-dir",    st->dir,
      "-o",         kRestoreLog, "-v2",          "--root", stage + "/root", "--restore-detached",
      "--pidfile",  pidfile,     "--external",   "mnt[]"};
  for (std::size_t i = 0; i < config.binds.size(); ++i) {
    args.push_back("--external");
    args.push_back("mnt[" + bind_key(i) + "]:" + stage + "/" + bind_key(i));
  }
  args.insert(args.end(), {"--tcp-established", "--manage-cgroups=ignore"});
  auto ran = run_program(args, options.criu_timeout, &st->cgroups);
  if (!ran) return ran.error();
  if (ran->status != 0) {
    std::string log = read_or(st->dir + "/" + kRestoreLog, ran->out);
    return Error(ran->timed_out ? ErrorCode::kDeadlineExceeded : ErrorCode::kInternal,
                 "criu restore of sandbox " + config.id + " from " + dir + " failed (" +
                     ran->describe() + "): " + log_tail(log));
  }

  // 6. The restored init: pidfd, start time, records, netns, veth — as spawn() has them.
  ABX_ASSIGN_OR_RETURN(const std::string pid_text, read_file(pidfile, 64));
  const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  if (pid <= 0) return internal_error("criu restore: bad pidfile " + pidfile);
  int pidfd = sys_pidfd_open(static_cast<pid_t>(pid));
  if (pidfd < 0) return os::errno_error("pidfd_open restored init", errno);
  st->pidfd.reset(pidfd);
  st->pid = static_cast<pid_t>(pid);
  st->start = process_start_time(st->pid);
  st->adopted = true;  // CRIU's child, reparented when CRIU exited: not ours to reap
  ABX_TRY(write_init_record(st->dir, st->pid, st->start, config.cgroup_parent));
  ABX_TRY(hold_slot(config.userns, *st->slot, st->pid));
  ABX_ASSIGN_OR_RETURN(st->netns, open_fd("/proc/" + std::to_string(pid) + "/ns/net", O_RDONLY));
  if (config.id != saved.id) ABX_TRY(set_hostname(st->pid, config.id));
  if (config.veth.enabled) ABX_TRY(connect_veth(config, *st));
  // The restored mount namespace has its own copies of the staged mounts. The images' links
  // go too (they would keep a deleted checkpoint's pages on disk).
  remove_stage(stage);
  (void)remove_tree(st->dir + "/images");
  ::unlink((st->dir + "/" + kStageFile).c_str());
  ::unlink(pidfile.c_str());

  st->config = std::move(config);
  committed = true;
  return SandboxAccess::make(std::move(st));
}

}  // namespace abx::runtime
