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
// restore(): checkpoint_restore.cc; CRIU itself: checkpoint_criu.cc.
#include "abx/runtime/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdio>
#include <string_view>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "checkpoint_internal.h"
#include "disk.h"
#include "sandbox_internal.h"
#include "sys.h"

namespace abx::runtime {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kDumpLog = "dump.log";
constexpr const char* kCriuPid = "criu.pid";  // "<pid> <start time>" while a dump runs

std::chrono::milliseconds since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
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
                                 const std::string& version) {
  const SandboxConfig& c = st.config;
  json::object j;
  j["format"] = kFormat;
  j["criu"] = o.criu;
  j["criu_version"] = version;
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

}  // namespace

// One function of ~170 lines on purpose: steps 2-5 (the file's opening comment) share one undo,
// resume()/with_resume() (veth back, thaw), and the state it reads (veth_removed, frozen_at),
// and their order is the contract; each step's detail is a helper above.
Result<CheckpointInfo> checkpoint(Sandbox& sb, const std::string& dir,
                                  const CheckpointOptions& options) {
  const auto t0 = Clock::now();
  auto mark = [&options](std::string_view step) {
    if (options.timeline != nullptr) options.timeline->mark(step);
  };
  Sandbox::State& st = SandboxAccess::state(sb);
  // 1. Everything that can refuse, before the sandbox is touched.
  if (options.keep_frozen && !options.leave_running)
    return invalid_argument("checkpoint: keep_frozen needs leave_running");
  if (!options.seal && (!options.leave_running || options.keep_frozen))
    return invalid_argument("checkpoint: only a snapshot (leave_running) may be left unsealed");
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
  const std::string version = criu_version(options.criu);

  mark("checks");
  // 2. Freeze, then the veth goes (its peer is outside the sandbox's user namespace).
  ABX_TRY(st.cgroups.freeze(true));
  const auto frozen_at = Clock::now();
  mark("freeze");
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
  // --network-lock nftables: CRIU blocks the netns' traffic while it works with one nftables
  // table made and removed in-process (libnftables), where its default runs iptables-restore
  // and ip6tables-restore, two programs each, to lock and again to unlock: 70-100 ms of every
  // dump here. The method is recorded in the images, and the restore unlocks the same way
  // (another ~70 ms saved); checkpoints taken before keep their iptables lock.
  args.insert(args.end(), {"--tcp-established", "--skip-in-flight", "--freeze-cgroup", freezer,
                           "--network-lock", "nftables"});
  if (options.leave_running) args.push_back("--leave-running");
  if (options.ghost_limit) {
    args.push_back("--ghost-limit");
    args.push_back(std::to_string(options.ghost_limit));
  }
  const auto dump_at = Clock::now();
  // While CRIU dumps, its pid is in the state dir: an owner that dies meanwhile leaves CRIU
  // running on the tree, and recover() must wait for it before it thaws anything.
  const std::string criu_pidfile = st.dir + "/" + kCriuPid;
  auto ran = run_criu(args, options.criu_timeout, nullptr, [&](pid_t pid) {
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

  mark("dump");
  // 4. The writable layer, consistent with the images: synced while nothing can write to it.
  const std::string rw = st.dir + "/" + kRwMount, image = st.dir + "/" + kRwImage;
  const std::string saved = dir + "/" + kRwImage;
  if (options.leave_running) {
    // keep_frozen: nothing writes to the layer until the caller commits (destroys the tree) or
    // aborts (recover(), and `dir` goes), so sharing the inode is as good as a copy.
    Status s = sync_filesystem(rw);
    if (s) s = options.keep_frozen ? link_or_copy(image, saved) : copy_sparse_file(image, saved);
    if (!s) return with_resume(s.error());
    mark("layer");
    if (!options.keep_frozen) {
      ABX_TRY(resume());
      info.frozen = since(frozen_at);
      mark("thaw");
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
    ABX_TRY(sync_filesystem(rw));
    if (::rename(image.c_str(), saved.c_str()) != 0) {
      if (errno != EXDEV) return os::errno_error("rename " + image + " -> " + saved, errno);
      ABX_TRY(copy_sparse_file(image, saved));
    }
    // The layer is the checkpoint's now; what is left of the sandbox goes.
    ABX_TRY(sb.destroy());
    wait_loop_detached(saved);
    wait_loop_detached(image);
    mark("layer");
  }
  struct stat img {};
  if (::stat(saved.c_str(), &img) == 0)
    info.layer_bytes = static_cast<std::uint64_t>(img.st_blocks) * 512;
  info.image_bytes = dir_bytes(dir, kRwImage);

  // 5. The marker, then the seal over everything (the marker included): a checkpoint is
  // complete with both. A kept-frozen sandbox without its checkpoint runs on.
  const auto seal_at = Clock::now();
  Status done = write_json(dir, describe_checkpoint(st, options, version));
  if (done) done = make_private(dir);
  // keep_frozen: the layer is still the frozen sandbox's, whose unmount writes to it;
  // release_checkpointed() seals its content.
  if (done && options.seal)
    done = seal_checkpoint(
        dir, options.mac_key,
        options.keep_frozen ? std::vector<std::string>{kRwImage} : std::vector<std::string>{});
  if (!done) return options.keep_frozen ? with_resume(done.error()) : done.error();
  info.seal = since(seal_at);
  mark("seal");
  if (options.keep_frozen) info.frozen = since(frozen_at);
  info.total = since(t0);
  return info;
}

Status release_checkpointed(Sandbox& sb, const std::string& dir, std::string_view mac_key) {
  ABX_TRY(release_layer(sb, dir + "/" + kRwImage));
  return complete_seal(dir, mac_key);
}

Status recover(Sandbox& sb, std::chrono::milliseconds criu_wait) {
  Sandbox::State& st = SandboxAccess::state(sb);
  // A CRIU dump its dead owner started may still hold the tree (seized, frozen by it): it is
  // let finish (bounded by criu_wait), as one killed mid-dump may leave its parasite in a task.
  // One that has not finished by then hangs (as one did, waiting for a trap the guest never
  // delivered): it is killed with its process group (it leads one: run_criu), and the
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

}  // namespace abx::runtime
