// The child side of spawn: what the sandbox init runs between clone and exec.
//
// Everything the child needs is prepared by the parent in a ChildPlan (plain pointers into
// strings the parent owns; the child shares the parent's memory until its exec, or has a
// copy-on-write image of it in the sanitizer builds: sandbox.cc, clone_init). Child code only makes
// raw syscalls and writes into fixed buffers, on its own stack: the parent is multi-threaded, a
// lock held by another thread at clone time (malloc's, ASan's) would never be released in the
// child, and with shared memory any other write would land in the parent's.
//
// One file per step, each exposing `bool <step>_child(const ChildPlan&, ChildReport*)`; a step
// that fails fills the report and returns false, and child_main() sends the report over the
// CLOEXEC socket and _exits. A successful exec closes the socket, which the parent reads as EOF.
#pragma once

#include <linux/filter.h>
#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace abx::runtime {

// Sent child -> parent on failure. Plain data with a fixed size: one SEQPACKET message.
struct ChildReport {
  std::int32_t err = 0;  // errno of the failing call
  char what[240] = {};   // "mount proc on /proc", NUL-terminated
};

struct ChildBind {
  const char* target;  // relative to the new root, e.g. "usr/local/bin/abx-envd"
  bool directory;      // the source is a directory (else a file is made to mount on)
};

// Detached mounts the parent sends with "go" (SCM_RIGHTS): the root overlay (unless
// host_rootfs), then one per bind.
inline constexpr std::size_t kMaxChildMounts = 72;

struct ChildFd {
  int parent_fd;
  int child_fd;
};

// SandboxConfig::Companion as the child reads it (plain values; the parent owns the storage).
struct ChildCompanion {
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* path = nullptr;  // PATH of envp (nullptr: none) for an argv[0] without a '/'
  const char* cwd = "/";
  const ChildFd* fds = nullptr;  // parent_fd: the init's descriptor; child_fd: the companion's
  std::size_t nfds = 0;
  const int* private_fds = nullptr;
  std::size_t nprivate = 0;
  char* pid_out = nullptr;  // kCompanionPidDigits + 1 bytes inside one of argv's strings
};

// The most descriptors the init, or its companion, gets mapped.
inline constexpr std::size_t kMaxChildFds = 64;
// The companion's descriptors: at most this many, each below kMaxCompanionFd.
inline constexpr std::size_t kMaxCompanionFds = 16;
inline constexpr int kMaxCompanionFd = 19;

// Room for the companion's pid in the init's argv ("<flag>=" then this many characters).
inline constexpr std::size_t kCompanionPidDigits = 10;

struct ChildPlan {
  // SEQPACKET: the child sends one byte once close_inherited_child() is done; the parent sends
  // one byte "go" after cgroup attach; the child reports a failed step.
  int sock = -1;
  const char* hostname = nullptr;

  // With a user namespace the child becomes its root (uid/gid 0 inside, the slot's first host
  // id outside) once the parent has written its id maps.
  bool userns = false;

  // Root filesystem. `root` is an empty host directory searchable by the sandbox's ids
  // (UserNamespace::mount_point); the mounts on it exist only in the child's mount namespace.
  // The parent sends the root overlay (images) and the binds as detached mounts with "go"
  // (mounts.h) into `mounts`.
  bool host_rootfs = false;
  const char* root = nullptr;
  const char* tmpfs_size = nullptr;  // kHost: the root tmpfs's size in bytes
  const char* shm_opts = nullptr;    // "size=...,mode=1777"
  const ChildBind* binds = nullptr;
  std::size_t nbinds = 0;
  std::size_t nmounts = 0;  // expected with "go": nbinds + (host_rootfs ? 0 : 1)
  int* mounts = nullptr;    // filled by child_main when "go" arrives

  bool own_netns = true;

  std::uint64_t rlimit_nofile = 0;
  std::uint64_t rlimit_fsize = 0;  // 0 = leave unlimited

  std::uint64_t keep_caps = 0;
  int cap_last_cap = 40;

  const sock_fprog* seccomp = nullptr;

  const ChildFd* fds = nullptr;  // sorted by child_fd
  std::size_t nfds = 0;

  const char* exe = nullptr;  // absolute path inside the sandbox
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = "/";
  // The ids argv runs as (SandboxConfig::uid, gid, groups): switched to after chdir when
  // `set_ids`.
  bool set_ids = false;
  unsigned uid = 0, gid = 0;
  const unsigned* groups = nullptr;
  std::size_t ngroups = 0;
  // Set when the child was cloned sharing the parent's memory (sandbox.cc, clone_shared): the
  // cloning thread blocks every signal first, so that no handler of the parent's ever runs on
  // the child's side of that memory; the child puts this mask (the spawning thread's) back just
  // before its exec, as a forked child would have had it.
  const sigset_t* exec_sigmask = nullptr;
  // SandboxConfig::companion, started by companion_child just before the exec.
  const ChildCompanion* companion = nullptr;
};

// Fills `r` with what failed and errno (the errno is read here, so call right after the call).
bool fail(ChildReport* r, const char* what, const char* path = nullptr);

// The steps, in the order child_main runs them.
bool mnt_child(const ChildPlan& p, ChildReport* r);     // mnt.cc: new root, /proc, /dev, pivot
bool uts_child(const ChildPlan& p, ChildReport* r);     // uts.cc: hostname
bool net_child(const ChildPlan& p, ChildReport* r);     // net.cc: lo up
bool rlimit_child(const ChildPlan& p, ChildReport* r);  // rlimit.cc
// companion.cc: starts p.companion (CLONE_VFORK: back once it has exec'd or failed) and writes
// its pid, or 0 when its exec failed, into pid_out; then closes the private descriptors. False
// only when the clone itself failed.
bool companion_child(const ChildPlan& p, ChildReport* r);
bool caps_child(const ChildPlan& p, ChildReport* r);  // caps.cc: bounding, ambient, capset
bool fds_child(ChildPlan& p, ChildReport* r);  // fds.cc: map, /dev/null, close rest; moves sock
// fds.cc: each fds[i].parent_fd duplicated onto fds[i].child_fd (no FD_CLOEXEC), every source
// first moved above `top` (>= every child_fd) so that no dup2 clobbers a source still to be
// mapped; the copies above `top` are close-on-exec. At most kMaxChildFds. False with errno set.
bool map_fds(const ChildFd* fds, std::size_t n, int top);
bool seccomp_child(const ChildPlan& p, ChildReport* r);  // seccomp.cc: install the filter

// First thing in the child: close every inherited descriptor except 0..2, the report socket and
// the mapping sources. The parent's end of the report socket and its flock'ed state-dir lock
// must not stay open in the child: the first would hide the parent's death (no EOF), the
// second would make a dead owner's sandbox look alive to cleanup_stale() (an flock lives as
// long as any copy of its open file). child_main() tells the parent when they are closed, and
// spawn() waits for that before it records the init: an owner that dies after the record leaves
// no copy of its lock in the child, however late the child was scheduled.
bool close_inherited_child(const ChildPlan& p, ChildReport* r);

// Runs the steps and execs; never returns.
[[noreturn]] void child_main(const ChildPlan& p);

}  // namespace abx::runtime
