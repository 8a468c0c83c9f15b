// restore(): spawn()'s steps with CRIU in place of clone3 (see restore() below).
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "abx/base/json.h"
#include "abx/base/scope_exit.h"
#include "abx/base/try.h"
#include "abx/runtime/checkpoint.h"
#include "checkpoint_internal.h"
#include "disk.h"
#include "mounts.h"
#include "sandbox_internal.h"
#include "sys.h"
#include "userns_internal.h"

namespace abx::runtime {
namespace {

namespace json = boost::json;

constexpr const char* kRestoreLog = "restore.log";
constexpr const char* kRestorePid = "restore.pid";

// In a forked child that does not exec (or not yet): closes every descriptor but `keep`, so it
// never holds its parent's locks or another child's pipe ends (children made by concurrent
// restores would otherwise keep each other's pipes open), and dies with its parent.
// Async-signal-safe (raw syscalls only).
void child_keep_only(int keep) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (keep > 0) ::syscall(SYS_close_range, 0u, static_cast<unsigned>(keep - 1), 0u);
  ::syscall(SYS_close_range, static_cast<unsigned>(keep + 1), ~0u, 0u);
}

// SIGCONT to every task of a restored tree that CRIU left stopped (--leave-stopped): the init
// (through its pidfd) and every task in its cgroups. A task that was itself stopped when it was
// dumped runs on too: CRIU leaves them all stopped alike.
Status continue_tree(const Sandbox::State& st) {
  if (sys_pidfd_send_signal(st.pidfd.get(), SIGCONT) != 0 && errno != ESRCH)
    return os::errno_error("SIGCONT to the restored init", errno);
  for (pid_t p : st.cgroups.pids()) {
    if (::kill(p, SIGCONT) != 0 && errno != ESRCH)
      return os::errno_error("SIGCONT to restored task " + std::to_string(p), errno);
  }
  return {};
}

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

// One function of ~200 lines on purpose, as spawn(): every step from the state directory on is
// covered by the one undo guard and reads its state (st, slot_claimed, made_cgroups, stage), so
// the numbered steps stay in its scope, in order; each step's detail is a helper above or in
// checkpoint_images.cc.
Result<Sandbox> restore(const std::string& dir, SandboxConfig config,
                        const RestoreOptions& options) {
  auto mark = [&options](std::string_view step) {
    if (options.timeline != nullptr) options.timeline->mark(step);
  };
  // 0. The checkpoint and the config must agree before anything is made.
  if (dir.empty() || dir[0] != '/') return invalid_argument("checkpoint dir must be absolute");
  if (options.mac_key.size() < kCheckpointKeyBytes)
    return invalid_argument("restore: the key its checkpoint was sealed with is needed (mac_key)");
  // The seal first: nothing of a checkpoint is read before it is known to be abxd's own.
  if (struct stat js; ::lstat((dir + "/" + kJsonFile).c_str(), &js) != 0 && errno == ENOENT)
    return Error(ErrorCode::kNotFound, "no checkpoint in " + dir + " (no " + kJsonFile + ")");
  if (options.verified && options.link_layer)
    return invalid_argument("restore: a verified checkpoint is restored without link_layer");
  if (!options.verified && seal_pending(dir)) {
    // A keep_frozen checkpoint committed but not released (its owner died, or destroyed the
    // sandbox itself): its layer is final once no loop device holds it.
    if (!wait_loop_detached(dir + "/" + kRwImage))
      return Error(ErrorCode::kFailedPrecondition,
                   "restore: the writable layer of " + dir +
                       " is still in use by a sandbox (release_checkpointed() it first)");
    ABX_TRY(complete_seal(dir, options.mac_key));
  }
  if (!options.verified) ABX_TRY(verify_checkpoint(dir, options.mac_key));
  mark("verify");
  // link_layer: the checkpoint's layer becomes this restore's, and mounting it writes to it. Its
  // seal goes back to pending first, so a restore that fails or is cut short (the checkpoint is
  // kept for a retry) leaves a checkpoint the next restore seals again once the layer is free,
  // rather than one that no longer matches its seal.
  if (options.link_layer) ABX_TRY(mark_pending(dir, options.mac_key, {kRwImage}));
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

  mark("checks");
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
  ABX_TRY(take_rw_layer(layer, st->dir, options.link_layer));
  mark("layer");

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
  mark("slot");
  // Always a private copy: CRIU needs a directory it can search from inside the sandbox's user
  // namespace (the checkpoint's is root's only), and it writes its stats there.
  images = st->dir + "/images";
  ABX_TRY(images_for_restore(dir, images, saved.root_host_id, st->root_id));
  mark("images");

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

  mark("mounts");
  // 4. Cgroups with their limits; CRIU runs inside them, so the restored tree is born there.
  ABX_ASSIGN_OR_RETURN(st->cgroups, SandboxCgroups::create(cgroup_layout(), config.cgroup_parent,
                                                           config.id, config.limits));
  made_cgroups = st->cgroups;
  mark("cgroups");

  // 5. CRIU. Its log and pidfile go to the state dir: `dir` stays as it was.
  const std::string pidfile = st->dir + "/" + kRestorePid;
  std::vector<std::string> args = {
      options.criu, "restore",   "--images-dir", images,   "--work-dir",     st->dir,
      "-o",         kRestoreLog, "-v2",          "--root", stage + "/root",  "--restore-detached",
      "--pidfile",  pidfile,     "--external",   "mnt[]",  "--leave-stopped"};
  for (std::size_t i = 0; i < config.binds.size(); ++i) {
    args.push_back("--external");
    args.push_back("mnt[" + bind_key(i) + "]:" + stage + "/" + bind_key(i));
  }
  args.insert(args.end(), {"--tcp-established", "--manage-cgroups=ignore"});
  auto ran = run_criu(args, options.criu_timeout, &st->cgroups);
  if (!ran) return ran.error();
  if (ran->status != 0) {
    std::string log = read_or(st->dir + "/" + kRestoreLog, ran->out);
    return Error(ran->timed_out ? ErrorCode::kDeadlineExceeded : ErrorCode::kInternal,
                 "criu restore of sandbox " + config.id + " from " + dir + " failed (" +
                     ran->describe() + "): " + log_tail(log));
  }

  mark("criu");
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
  // 7. Only now does the restored tree run. CRIU left every task stopped (--leave-stopped), so
  // an owner killed before the init record above leaves a tree that never ran: the next owner's
  // cleanup_stale() removes it, and the checkpoint's writable layer (the restored sandbox's own
  // with link_layer) is as it was dumped for the next resume. Before this, the tasks ran from
  // CRIU's exit on: a crash in that window left a layer that no longer matched the process
  // images (CRIU: "Can't open file ... on restore"), and the sandbox could not be resumed again.
  // An owner killed after the record finds the tree again (adopt) and continue_restored()s it.
  ABX_TRY(continue_tree(*st));
  mark("init");
  // The restored mount namespace has its own copies of the staged mounts. The images' links
  // go too (they would keep a deleted checkpoint's pages on disk).
  remove_stage(stage);
  (void)remove_tree(st->dir + "/images");
  ::unlink((st->dir + "/" + kStageFile).c_str());
  ::unlink(pidfile.c_str());

  mark("cleanup");
  st->config = std::move(config);
  committed = true;
  return SandboxAccess::make(std::move(st));
}

Status continue_restored(Sandbox& sb) { return continue_tree(SandboxAccess::state(sb)); }

}  // namespace abx::runtime
