// Mount namespace step: builds the sandbox root under <state>/root and pivots into it.
//
// Runs in the child after clone(CLONE_NEWNS), so every mount here is private to the sandbox
// and disappears with it. The child chdirs into the new root and uses paths relative to it;
// before mounting on a target it checks that the target is not a symlink (a directory-mode
// rootfs could otherwise point /proc or /dev at a host path, catalogue E3). Nothing else runs
// in the sandbox yet, so the check cannot be raced from inside.
#include <errno.h>
#include <fcntl.h>
#include <linux/limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <initializer_list>

#include "child.h"

namespace abx::runtime {
namespace {

constexpr unsigned long kRoFlags = MS_RDONLY | MS_NOSUID | MS_NODEV;

// Joins "a" "/" "b" into `out` (PATH_MAX); false if it does not fit.
bool join(char* out, const char* a, const char* b) {
  std::size_t n = 0;
  for (const char* s = a; *s; ++s) {
    if (n + 2 >= PATH_MAX) return false;
    out[n++] = *s;
  }
  out[n++] = '/';
  for (const char* s = b; *s; ++s) {
    if (n + 1 >= PATH_MAX) return false;
    out[n++] = *s;
  }
  out[n] = '\0';
  return true;
}

// Creates every component of the relative path `rel` as a directory (the last one as a
// directory or, if `file`, an empty regular file), refusing symlinks anywhere on the way.
bool ensure_path(const char* rel, bool file, mode_t mode, ChildReport* r) {
  char buf[PATH_MAX];
  std::size_t n = 0;
  for (const char* s = rel;; ++s) {
    if (*s == '/' || *s == '\0') {
      if (n > 0) {
        buf[n] = '\0';
        bool last = *s == '\0';
        if (last && file) {
          int fd = ::openat(AT_FDCWD, buf, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
          if (fd < 0) return fail(r, "create mount point", buf);
          ::close(fd);
        } else if (::mkdirat(AT_FDCWD, buf, mode) != 0 && errno != EEXIST) {
          return fail(r, "mkdir", buf);
        }
        struct stat st;
        if (::fstatat(AT_FDCWD, buf, &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(r, "stat", buf);
        if (S_ISLNK(st.st_mode)) {
          errno = ELOOP;
          return fail(r, "refusing symlinked mount point", buf);
        }
      }
      if (*s == '\0') break;
    }
    if (n + 1 >= PATH_MAX) {
      errno = ENAMETOOLONG;
      return fail(r, "path", rel);
    }
    buf[n++] = *s;
  }
  return true;
}

// Makes the mount at `target` read-only, nosuid, nodev — recursively with mount_setattr where
// the kernel has it (>= 5.12), else only the top mount via a bind remount.
bool make_readonly(const char* target, ChildReport* r) {
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (::syscall(SYS_mount_setattr, AT_FDCWD, target, AT_RECURSIVE, &attr, sizeof attr) == 0)
    return true;
  if (errno != ENOSYS) return fail(r, "mount_setattr readonly", target);
  if (::mount(nullptr, target, nullptr, MS_REMOUNT | MS_BIND | kRoFlags, nullptr) != 0)
    return fail(r, "remount readonly", target);
  return true;
}

bool bind(const char* source, const char* target, bool writable, ChildReport* r) {
  if (::mount(source, target, nullptr, MS_BIND | MS_REC, nullptr) != 0)
    return fail(r, "bind mount onto", target);
  if (!writable) return make_readonly(target, r);
  return true;
}

// Host-mode directories bound read-only from the host. Top-level symlinks (merged /usr:
// /bin -> usr/bin) are recreated as the same symlinks.
constexpr const char* kHostDirs[] = {"usr",   "bin",   "sbin",   "lib",
                                     "lib32", "lib64", "libx32", "etc"};

bool host_root(ChildReport* r) {
  for (const char* name : kHostDirs) {
    char host[PATH_MAX];
    join(host, "", name);
    struct stat st;
    if (::lstat(host, &st) != 0) {
      if (errno == ENOENT) continue;
      return fail(r, "stat", host);
    }
    if (S_ISLNK(st.st_mode)) {
      char link[PATH_MAX];
      ssize_t n = ::readlink(host, link, sizeof link - 1);
      if (n < 0) return fail(r, "readlink", host);
      link[n] = '\0';
      if (::symlink(link, name) != 0) return fail(r, "symlink", name);
      continue;
    }
    if (!S_ISDIR(st.st_mode)) continue;
    if (!ensure_path(name, false, 0755, r)) return false;
    if (!bind(host, name, false, r)) return false;
  }
  // The writable layer: plain directories of the root tmpfs.
  struct {
    const char* path;
    mode_t mode;
  } const dirs[] = {{"tmp", 01777}, {"root", 0700},     {"home", 0755}, {"home/user", 0755},
                    {"var", 0755},  {"var/tmp", 01777}, {"run", 0755}};
  for (const auto& d : dirs) {
    if (!ensure_path(d.path, false, d.mode, r)) return false;
    // mkdir applies the umask; set the exact mode (the sticky bit included).
    if (::chmod(d.path, d.mode) != 0) return fail(r, "chmod", d.path);
  }
  if (::chown("home/user", 1000, 1000) != 0) return fail(r, "chown", "home/user");
  // The host's password hashes have no business in a sandbox.
  for (const char* secret : {"etc/shadow", "etc/gshadow"}) {
    if (::access(secret, F_OK) != 0) continue;
    if (::mount("/dev/null", secret, nullptr, MS_BIND, nullptr) != 0)
      return fail(r, "mask", secret);
  }
  return true;
}

bool setup_dev(const ChildPlan& p, ChildReport* r) {
  if (!ensure_path("dev", false, 0755, r)) return false;
  if (::mount("abx-dev", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") != 0)
    return fail(r, "mount tmpfs on", "/dev");
  // Bind the host's nodes rather than mknod: works the same when a user namespace is added.
  for (const char* node : {"null", "zero", "full", "random", "urandom", "tty"}) {
    char host[PATH_MAX], inside[PATH_MAX];
    join(host, "/dev", node);
    join(inside, "dev", node);
    if (!ensure_path(inside, true, 0, r)) return false;
    if (::mount(host, inside, nullptr, MS_BIND, nullptr) != 0) return fail(r, "bind", host);
  }
  if (!ensure_path("dev/pts", false, 0755, r)) return false;
  // newinstance: a private pty namespace, so the sandbox cannot open the host's ptys. max: ptys
  // come from one machine-wide pool (kernel.pty.max, 4096 by default, of which kernel.pty.reserve
  // = 1024 only the host's own devpts may use); without a cap per instance, one sandbox could
  // take every pty the other sandboxes would get.
  if (::mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620,gid=5,max=256") != 0)
    return fail(r, "mount devpts on", "/dev/pts");
  if (::symlink("pts/ptmx", "dev/ptmx") != 0) return fail(r, "symlink", "/dev/ptmx");
  if (!ensure_path("dev/shm", false, 01777, r)) return false;
  if (::mount("abx-shm", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, p.shm_opts) != 0)
    return fail(r, "mount tmpfs on", "/dev/shm");
  const struct {
    const char* target;
    const char* link;
  } links[] = {{"/proc/self/fd", "dev/fd"},
               {"/proc/self/fd/0", "dev/stdin"},
               {"/proc/self/fd/1", "dev/stdout"},
               {"/proc/self/fd/2", "dev/stderr"}};
  for (const auto& l : links)
    if (::symlink(l.target, l.link) != 0) return fail(r, "symlink", l.link);
  // The nodes are in place; nothing inside may add more.
  if (::mount(nullptr, "dev", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
              "size=64k,mode=0755") != 0)
    return fail(r, "remount readonly", "/dev");
  return true;
}

bool setup_proc(ChildReport* r) {
  if (!ensure_path("proc", false, 0555, r)) return false;
  // We are pid 1 of the new pid namespace, so this proc shows only the sandbox's processes.
  if (::mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return fail(r, "mount proc on", "/proc");
  // Kernel knobs read-only and kernel memory/keys masked (catalogue E4), as runc does.
  for (const char* ro : {"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus", "proc/fs"}) {
    if (::access(ro, F_OK) != 0) continue;
    if (!bind(ro, ro, false, r)) return false;
  }
  for (const char* masked :
       {"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug", "proc/kallsyms"}) {
    if (::access(masked, F_OK) != 0) continue;
    if (::mount("dev/null", masked, nullptr, MS_BIND, nullptr) != 0) return fail(r, "mask", masked);
  }
  return true;
}

bool setup_sys(const ChildPlan& p, ChildReport* r) {
  if (!ensure_path("sys", false, 0555, r)) return false;
  if (!p.own_netns) {
    // The host's netns: a new sysfs needs a netns our user namespace owns, so the host's is
    // bound instead, read-only.
    return bind("/sys", "sys", false, r);
  }
  // A sysfs mounted from our netns shows our interfaces only; read-only regardless.
  if (::mount("sysfs", "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return fail(r, "mount sysfs on", "/sys");
  return true;
}

// Attaches the detached mount `mnt` on the root mount point and enters it.
bool attach_root(const ChildPlan& p, int mnt, ChildReport* r) {
  if (::move_mount(mnt, "", AT_FDCWD, p.root, MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return fail(r, "move_mount the root onto", p.root);
  ::close(mnt);
  if (::chdir(p.root) != 0) return fail(r, "chdir", p.root);
  return true;
}

// kHost: a tmpfs of its own as the root, made here (inside the user namespace, if any, which
// then owns it).
bool host_tmpfs_root(const ChildPlan& p, ChildReport* r) {
  int fs = ::fsopen("tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0) return fail(r, "fsopen tmpfs");
  bool ok = ::fsconfig(fs, FSCONFIG_SET_STRING, "size", p.tmpfs_size, 0) == 0 &&
            ::fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0755", 0) == 0 &&
            ::fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0;
  if (!ok) {
    fail(r, "create the root tmpfs");
    ::close(fs);
    return false;
  }
  int mnt = ::fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  ::close(fs);
  if (mnt < 0) return fail(r, "fsmount the root tmpfs");
  return attach_root(p, mnt, r);
}

}  // namespace

bool mnt_child(const ChildPlan& p, ChildReport* r) {
  // Stop mount events from propagating back to the host (and from the host into us).
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return fail(r, "make / rprivate");
  std::size_t next = 0;  // into p.mounts
  if (p.host_rootfs) {
    if (!host_tmpfs_root(p, r)) return false;
  } else if (!attach_root(p, p.mounts[next++], r)) {
    return false;
  }
  if (p.host_rootfs && !host_root(r)) return false;
  if (!setup_dev(p, r)) return false;
  // The binds, made (read-only, idmapped) by the parent; only their mount points are made here.
  for (std::size_t i = 0; i < p.nbinds; ++i) {
    const ChildBind& b = p.binds[i];
    int mnt = p.mounts[next++];
    if (!ensure_path(b.target, !b.directory, 0755, r)) return false;
    if (::move_mount(mnt, "", AT_FDCWD, b.target, MOVE_MOUNT_F_EMPTY_PATH) != 0)
      return fail(r, "move_mount bind onto", b.target);
    ::close(mnt);
  }
  if (!setup_proc(r)) return false;
  if (!setup_sys(p, r)) return false;

  // pivot_root(".", "."): the old root ends up stacked under the new one; detaching it leaves
  // no path back to the host tree (a bare chroot would, catalogue E4).
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return fail(r, "pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return fail(r, "detach old root");
  if (::chdir("/") != 0) return fail(r, "chdir", "/");
  return true;
}

}  // namespace abx::runtime
