// abx::runtime::Sandbox: create, run and tear down one isolated sandbox.
//
// A sandbox is a process tree whose init (the argv given in SandboxConfig; abx-envd in
// production) runs in a new user namespace (its ids 0..65535 mapped to a host range of its own,
// userns.h; unless config.userns.enabled is false) and new pid, mount, uts, ipc, cgroup and
// (unless NetworkMode::kHost) net namespaces owned by it, after pivot_root into a per-sandbox root
// with a fresh /proc (kernel knobs read-only, kcore/keys masked), read-only /sys and a minimal /dev
// (null, zero, full, random, urandom, tty, a private devpts, shm). The hostname is the sandbox id.
//
// Root filesystems:
//  - RootfsMode::kImage (the default): the root is an overlayfs of `lower_dirs` (image layers,
//    lowest first, as an image store lists them; overlay whiteouts and opaque dirs inside them
//    are honoured) under a writable layer on disk: `<state>/<id>/rw.img`, a sparse ext4 image
//    of `disk_bytes`, loop-attached (autoclear) and mounted in the *host* mount namespace at
//    `<state>/<id>/rw`, with the overlay's upper dir at `rw/upper` (upper_dir()). Writes past
//    the quota fail with ENOSPC inside the sandbox only; the layer is disk, not tmpfs memory.
//    The mount stays readable by the owner after the sandbox's processes exit (template builds
//    turn the upper dir into a layer) and is removed by destroy() and cleanup_stale(). The
//    overlay is mounted `volatile` (no syncs: the layer is not meant to survive a host crash);
//    whoever mounts the same upper again later must first remove `rw/work/incompat/volatile`.
//  - RootfsMode::kDirectory: the one-layer case of kImage, `lower_dirs = {rootfs_dir}`.
//  - RootfsMode::kHost — development only, never a default: the root is a tmpfs capped at
//    `disk_bytes`; the host's /usr, /bin, /sbin, /lib*, /etc are bind-mounted read-only,
//    nosuid, nodev (top-level symlinks such as /bin -> usr/bin are recreated as symlinks);
//    /tmp, /root, /home/user, /var are plain directories of that tmpfs. /etc/shadow and
//    /etc/gshadow are masked with /dev/null. It shares the host's binaries and libraries with
//    the sandbox, so it is weaker than an image and only for tests and local development.
// Except the writable layer, these mounts exist only in the sandbox's mount namespace: the
// host sees none of them, and they vanish with the sandbox's last process. /dev/shm is a tmpfs
// of `shm_bytes` in every mode.
//
// Image layers, the writable layer and binds are idmapped with the sandbox's mapping: on-disk
// uid 0 is sandbox root, and the writable layer stores what the sandbox writes unshifted.
//
// Before exec, the init: becomes root of its user namespace, joins its cgroups (see cgroup.h),
// brings `lo` up, sets rlimits (NOFILE, FSIZE, CORE=0), calls setsid(), drops capabilities to
// kKeptCapabilities (bounding, permitted and effective; inheritable and ambient cleared), sets
// no_new_privs, closes every fd but the mapped ones, and installs the seccomp filter (policy:
// src/runtime/seccomp.h). A failing step reports {step, errno} to spawn(), which returns e.g.
// "mount proc on /proc: EPERM".
//
// Host state lives in `<state_dir>/<id>/` (a lock held by the owner, the init's pid and start
// time, its user namespace range, the writable layer). cleanup_stale() uses it after an owner
// died without destroy().
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/base/timeline.h"
#include "abx/runtime/cgroup.h"
#include "abx/runtime/layer_pool.h"
#include "abx/runtime/userns.h"
#include "abx/runtime/veth.h"

namespace abx::runtime {

enum class RootfsMode { kImage, kDirectory, kHost };

// kNone: a private netns with only loopback up (the host reaches ports through open_tcp()).
// kHost: the host netns is shared — weaker: the sandbox reaches every host loopback service
// and abstract unix socket (catalogue E10). Only for templates that explicitly ask for it.
enum class NetworkMode { kNone, kHost };

// Capabilities the sandbox init keeps (everything else leaves the bounding set, so no exec can
// regain it): CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
// NET_BIND_SERVICE, SYS_CHROOT, AUDIT_WRITE — what an init that switches users and owns files
// needs. Notably gone: SYS_ADMIN (mount, namespaces), SYS_PTRACE, SYS_MODULE, NET_ADMIN,
// NET_RAW, MKNOD, SYS_RAWIO, DAC_READ_SEARCH (open_by_handle_at), SETFCAP, BPF, PERFMON.
extern const std::uint64_t kKeptCapabilities;

struct BindMount {
  std::string source;  // absolute host path (file or directory)
  std::string target;  // absolute path inside the sandbox; parents are created
  // Read-only binds are also nosuid and nodev; writable ones (abxd's volumes) nodev only.
  bool writable = false;
};

// Passes the parent's `parent_fd` to the sandbox init as `child_fd`. Descriptors 0..2 not
// mapped are /dev/null; every other descriptor is closed before exec.
struct FdMapping {
  int parent_fd;
  int child_fd;
};

// Supplementary groups SandboxConfig::groups may hold.
inline constexpr std::size_t kMaxGroups = 64;

// Overlay layers one sandbox may stack (overlayfs's own limit is 500).
inline constexpr std::size_t kMaxLowerDirs = 128;

// A name the runtime gives a sandbox (SandboxConfig::id: its hostname, cgroup and directory):
// 1-64 of [a-z0-9-], starting alphanumeric. abxd's sandbox ids (store/sandbox_id.h) are a
// subset; template builds use the dash.
bool valid_sandbox_name(std::string_view name);

struct SandboxConfig {
  std::string id;         // valid_sandbox_name(): hostname, cgroup, dir name
  std::string state_dir;  // absolute host directory for per-sandbox state; created if missing
  RootfsMode rootfs = RootfsMode::kImage;
  // kImage: absolute host directories of the image's layers, LOWEST first (an image store's
  // order; overlayfs wants them top-first, the runtime converts). 1..kMaxLowerDirs of them.
  std::vector<std::string> lower_dirs;
  std::string rootfs_dir;  // kDirectory only: absolute path of the single lower layer
  NetworkMode network = NetworkMode::kNone;
  // With kNone: a veth to the host (veth.h), numbered by the user namespace's slot (so it needs
  // `userns.enabled`). Off: loopback only.
  VethConfig veth;
  // With a veth: runs in the parent before the clone, with the link its slot will have (name and
  // addresses; the link does not exist yet), for work that writes much memory, such as the
  // link's ruleset change. After the clone every page the parent writes until the child's exec is
  // a copy-on-write fault and a TLB shootdown across the parent's threads: an nftables change that
  // takes ~0.3 ms took 4.5-9 ms there. Restores, which clone no abxd memory, run it just before
  // link_ready. An error aborts the spawn.
  std::function<Status(const VethInfo&)> link_rules;
  // With a veth: runs in the parent once the link is up and before the sandbox runs anything
  // (so its first packet already meets its rules). An error aborts the spawn.
  std::function<Status(const VethInfo&)> link_ready;
  std::vector<std::string> argv;  // argv[0]: absolute path inside the sandbox
  std::vector<std::string> env;   // "K=V"; the host environment is never inherited
  std::string cwd = "/";
  // The ids argv runs as inside the sandbox. Root by default; otherwise the init, after every
  // other step (chdir included), sets the supplementary groups, then gid, then uid, and a
  // non-zero uid leaves it no capabilities (the kernel clears them on the switch). Template
  // builds run a RUN as the Dockerfile's USER. At most kMaxGroups groups.
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::vector<std::uint32_t> groups;
  std::vector<BindMount> binds;
  std::vector<FdMapping> fds;
  // A second process the init starts just before it executes argv: in the same namespaces,
  // with the same ids, capabilities and seccomp filter as argv gets, in a session of its own,
  // every signal at its default and none blocked. For work that would otherwise wait for
  // argv's own start (issue 37: a command server's Python worker, whose interpreter takes
  // longer to start than envd does, starts beside envd instead of after it).
  struct Companion {
    // argv[0]: absolute, or a name looked up in env's PATH (execvp's rules, without the shell
    // fallback).
    std::vector<std::string> argv;
    std::vector<std::string> env;  // "K=V": its whole environment
    std::string cwd = "/";         // "/" when this one cannot be entered
    // Descriptors of the init (child_fd of `fds`) -> the companion's; everything else is closed
    // in it but 0..2, which it shares with the init unless mapped here.
    std::vector<FdMapping> fds;
    // Descriptors of the init that argv must not get: closed once the companion has started.
    std::vector<int> private_fds;
    // argv gets one more argument, "<pid_flag>=<N>": the companion's pid inside the sandbox
    // (argv's child), or 0 when it did not start (its exec failed: argv may start it again).
    std::string pid_flag;
  };
  std::optional<Companion> companion;
  CgroupLimits limits;
  // Size of the writable layer: the ext4 image (kImage, kDirectory) or the root tmpfs (kHost).
  std::uint64_t disk_bytes = 256ull << 20;
  // kImage, kDirectory: the writable layer to run on, when not a new one — an absolute path of
  // an rw.img a sandbox before left (keep_layer(): a filesystem-only pause), taken by hard link
  // (a copy where the filesystem allows none), so the sandbox writes to that file; disk_bytes
  // does not apply. spawn() waits up to 5 s for a loop device still attached to it (the
  // previous sandbox's, detaching) and refuses (failed_precondition) one still attached then.
  std::string layer_image;
  // With layer_image: a copy of it instead (a checkpoint's layer, which must stay as it is).
  bool copy_layer = false;
  // Without layer_image: where a writable layer made ahead comes from (layer_pool.h), taken
  // instead of making one at spawn; null, or none ready: spawn() makes it. Not owned; must
  // outlive the spawn() call.
  LayerPool* layer_pool = nullptr;
  std::uint64_t shm_bytes = 64ull << 20;  // cap of the /dev/shm tmpfs (memory, not disk)
  std::uint64_t rlimit_nofile = 4096;
  std::uint64_t rlimit_fsize = 0;  // bytes; 0 = unlimited
  std::string cgroup_parent = "abx";
  // A user namespace of its own (userns.h): on by default; off only for kernels or layer
  // filesystems without idmapped mounts, and for benchmarks comparing the two.
  UserNamespace userns;
  // Tests only: runs in the parent after the init joined its cgroups and before it is released.
  std::function<void(pid_t)> before_start_hook;
};

class Sandbox {
 public:
  // Creates and starts a sandbox. Errors: invalid_argument (bad config), already_exists (id in
  // use in state_dir or cgroups), failed_precondition (a limit without its controller), or the
  // child step that failed with its errno (permission_denied for EPERM/EACCES, not_found for
  // ENOENT, resource_exhausted for EAGAIN/ENOMEM/ENOSPC, internal otherwise). A failed spawn
  // leaves nothing behind. `timeline`, when given, gets one mark per step (state_dir, rw_layer,
  // userns_slot, cgroups, link_rules, plan, clone, child_ready, mounts, hold_slot, init_record,
  // cgroup_attach, netns, veth, link_ready, release).
  static Result<Sandbox> spawn(SandboxConfig config, Timeline* timeline = nullptr);

  // Takes ownership of a sandbox that a previous owner (a killed abxd) left running in
  // `state_dir`: locks its state directory, re-opens its init by pid *and* start time through a
  // pidfd (a reused pid is never taken), and its netns and cgroups. wait() then reports 0 when
  // the init exits (its status belongs to its original parent). `config`, when the owner kept
  // the one it spawned the sandbox with, becomes the sandbox's (its cgroup_parent and state_dir
  // are taken from the state directory's records): what checkpoint() and recover() need
  // (checkpoint.h); without it, the sandbox can be run, signalled and destroyed only.
  // Errors: not_found (the init is gone: use cleanup_stale), already_exists (a live owner holds
  // it), invalid_argument (`config` is for another id), failed_precondition.
  static Result<Sandbox> adopt(const std::string& state_dir, const std::string& id,
                               const SandboxConfig* config = nullptr);

  Sandbox(Sandbox&&) noexcept;
  Sandbox& operator=(Sandbox&&) noexcept;
  ~Sandbox();  // destroy(), errors ignored

  const std::string& id() const;
  pid_t pid() const;         // host pid of the sandbox init
  int pidfd() const;         // pidfd of the init (poll it: readable once the init exited)
  bool init_exited() const;  // exited_inits() of this one sandbox
  const SandboxCgroups& cgroups() const;
  std::string state_path() const;  // <state_dir>/<id>
  // Host uid (= gid) of the sandbox's root: the first id of its user namespace's range, or 0
  // without a user namespace. Sandbox uid N is host uid root_host_id() + N.
  std::uint32_t root_host_id() const;
  // Host path of the overlay's upper dir (`<state_dir>/<id>/rw/upper`): what the sandbox wrote,
  // with overlay whiteouts for deletions. Readable after the sandbox's processes exited; valid
  // until destroy(). Empty for RootfsMode::kHost (its writes live in a tmpfs of its own).
  std::string upper_dir() const;
  // The sandbox's link to the host, when SandboxConfig::veth asked for one.
  const std::optional<VethInfo>& veth() const;

  // Sends `sig` to the init only (SIGKILL there kills the whole pid namespace).
  Status signal(int sig) const;
  // Blocks until the init exits and reaps it; returns its wait status (as waitpid's). Repeated
  // calls return the same status.
  Result<int> wait();

  // A non-blocking TCP socket (O_CLOEXEC) made in the sandbox's netns on the calling thread, not
  // connected yet: connecting it to 127.0.0.1:<port> reaches the sandbox's port. Takes a few
  // syscalls and no waiting, so an event loop may call it. kFailedPrecondition once the sandbox
  // was destroyed or detached (its netns fd is closed). Thread-safe against destroy().
  Result<UniqueFd> tcp_socket() const;
  // A TCP socket created in the sandbox's netns and connected to 127.0.0.1:`port` there,
  // returned non-blocking and O_CLOEXEC. unavailable on ECONNREFUSED, deadline_exceeded on
  // timeout.
  Result<UniqueFd> open_tcp(std::uint16_t port,
                            std::chrono::milliseconds timeout = std::chrono::seconds(2)) const;

  // Gives up ownership without stopping anything: the sandbox keeps running, its state directory
  // is unlocked for a later adopt(). Used by an owner that exits but wants its sandboxes kept.
  void detach();

  // The part of destroy() an owner waits for before it answers, the rest left for later
  // (abxd's DELETE: the teardown then runs on a background thread): sends SIGKILL to the whole
  // tree (cgroup.kill, then the init through its pidfd) and closes the netns fd (tcp_socket()
  // fails from here on). With `exit_wait` > 0 it then waits up to that long (at most 60 s) for
  // the init to exit, which a pid namespace's init does only after every other process in it
  // exited: the tree is then gone, the init a zombie until destroy() reaps it. Before the
  // signal it takes the user namespace's slot over from the init (userns.h): held by the
  // calling process, not the dying init, so the id range and the link's name and /30 go to no
  // new sandbox until destroy() released them (a crash of the caller frees the claim; the next
  // owner's cleanup_stale() removes the rest). Errors: the kill's (the cgroup's, the pidfd's);
  // a timed-out wait is none. Idempotent; nothing after destroy() or detach().
  Status kill(std::chrono::milliseconds exit_wait = std::chrono::milliseconds(0));

  // Kills the whole tree (kill(), when the owner did not call it), reaps the init, removes the
  // cgroups, unmounts the writable layer, removes the state directory (the layer's image
  // included) and frees the user namespace's slot. Idempotent.
  Status destroy();

  // Defined in src/runtime/sandbox_internal.h: what spawn(), adopt() and restore() fill.
  struct State;

 private:
  friend struct SandboxAccess;  // runtime-internal (checkpoint.cc)
  explicit Sandbox(std::unique_ptr<State> state);
  void close_netns();
  std::unique_ptr<State> s_;
};

// The indexes of `sandboxes` whose init has exited: its pidfd is readable (or reports an error),
// from one poll(2) over all their pidfds that never waits. The one definition of "exited" that
// Sandbox::init_exited() uses too.
std::vector<std::size_t> exited_inits(const std::vector<const Sandbox*>& sandboxes);

// --- Filesystem-only pause: the writable layer outlives the processes -----------------------
//
// keep_layer() freezes `sb` (its cgroup: nothing runs, nothing writes), syncs its writable layer
// and hard-links its rw.img to `image` (a new file; a copy where the filesystem allows no link):
// the files as they are. The sandbox stays frozen. Its owner then records the kept layer and
// commits with release_layer() — the sandbox destroyed and its layer's loop device detached, so
// a later spawn() with SandboxConfig::layer_image = `image` (new processes on the same files)
// may mount it — or aborts: thaws it (cgroups().freeze(false); recover() for an adopted one) and
// removes `image`. Errors: failed_precondition (a rootfs: host sandbox, whose files live in a
// tmpfs of its own mount namespace; a sandbox not running); on any error the sandbox runs on,
// thawed, and `image` does not exist.
Status keep_layer(Sandbox& sb, const std::string& image);
// Errors: destroy()'s, or deadline_exceeded when a loop device is still attached to `image`
// after 5 s.
Status release_layer(Sandbox& sb, const std::string& image);

// Removes what sandboxes in `state_dir` left behind when their owner died without destroy():
// kills their process trees (matched by pid and start time through a pidfd, so a reused pid
// is never hit), removes their cgroups, writable layers and state directories. Directories still
// locked by a live owner are skipped. Returns how many sandboxes were cleaned.
Result<int> cleanup_stale(const std::string& state_dir);

}  // namespace abx::runtime
