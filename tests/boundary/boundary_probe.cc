// boundary_probe: the attempts of the boundary suite (issue 11 item 6), one per subcommand.
//
// Each subcommand tries one thing a sandbox must not be able to do. The suite runs it on the
// host first (where it must succeed: the positive control that proves the probe reaches the
// kernel path it claims to) and then inside sandboxes as root and as the default user (where it
// must fail). Exit 0: the attempt succeeded. Exit 1: it failed; stdout ends with how ("errno
// EPERM", "none found"). Exit 2: usage. Exit 3: the kernel lacks the mechanism (no ia32/x32).
// The exhaust-* subcommands exhaust a limit, print "holding", keep it for N seconds and exit 0
// when a limit was hit (1 when their cap came first).
//
// Static and unsanitized so it runs in any rootfs. Nothing here writes to a file it did not
// create: open-write opens without O_TRUNC and writes nothing, so the host controls change
// nothing on the host.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/aio_abi.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "abx/runtime/int80.h"

namespace {

// errno is read after the call being checked has been evaluated (see runtime_probe.cc).
int result(bool ok, int err) {
  if (ok) {
    printf("ok\n");
    return 0;
  }
  const char* n = strerrorname_np(err);
  printf("errno %s\n", n ? n : "?");
  return 1;
}
int result(bool ok) { return result(ok, errno); }
int none(const char* what) {
  printf("none %s\n", what);
  return 1;
}

std::string self_path() {
  char buf[4096] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::vector<int> pids() {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(atoi(e->d_name));
  closedir(d);
  return out;
}

std::string read_all(const std::string& path, size_t cap = 1 << 20) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return {};
  std::string s;
  char buf[8192];
  for (ssize_t n; s.size() < cap && (n = read(fd, buf, sizeof buf)) > 0;)
    s.append(buf, static_cast<size_t>(n));
  close(fd);
  return s;
}

// Opens for writing without truncating or writing: success also on ETXTBSY (the inode would be
// writable once the process running it exits: CVE-2019-5736's window).
// A kernel file missing on the host means the kernel lacks the feature: exit 3 (not applicable).
bool kernel_path(const char* path) {
  return !strncmp(path, "/proc/sys", 9) || !strncmp(path, "/sys/", 5) ||
         !strcmp(path, "/proc/sysrq-trigger") || !strcmp(path, "/proc/kcore") ||
         !strcmp(path, "/dev/kmsg");
}
int missing_kernel_path(const char* path) {
  printf("%s: errno ENOENT (this kernel has no such file)\n", path);
  return 3;
}

int open_write(const char* path) {
  int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  int e = errno;
  if (fd >= 0) {
    close(fd);
    printf("writable\n");
    return 0;
  }
  if (e == ETXTBSY) {
    // The kernel checks "being executed" before the mount's read-only flag: look at the mount.
    struct statvfs sv;
    if (statvfs(path, &sv) == 0 && (sv.f_flag & ST_RDONLY)) {
      printf("errno ETXTBSY, on a read-only mount\n");
      return 1;
    }
    printf("writable (ETXTBSY: once the process running it exits)\n");
    return 0;
  }
  if (e == ENOENT && kernel_path(path)) return missing_kernel_path(path);
  return result(false, e);
}

int create_in(const char* dir) {
  std::string p = std::string(dir) + "/.abx-boundary-" + std::to_string(getpid());
  int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return result(false);
  close(fd);
  unlink(p.c_str());
  return result(true);
}

int read_path(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT && kernel_path(path)) return missing_kernel_path(path);
  if (fd < 0) return result(false);
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf);
  int e = errno;
  close(fd);
  if (n > 0) fwrite(buf, 1, static_cast<size_t>(n), stdout);
  if (n < 0) return result(false, e);
  if (n == 0) return none("(empty)");
  return 0;
}

int stat_path(const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) return result(false);
  printf("%llu:%llu\n", static_cast<unsigned long long>(st.st_dev),
         static_cast<unsigned long long>(st.st_ino));
  return 0;
}

// /proc/<pid>/exe of every other visible process whose file is not the one its name resolves
// to here: a binary from another mount namespace (a host helper that entered the sandbox).
int exe_foreign() {
  int found = 0;
  for (int pid : pids()) {
    if (pid == getpid()) continue;
    std::string link = "/proc/" + std::to_string(pid) + "/exe";
    struct stat via_proc, via_name;
    if (stat(link.c_str(), &via_proc) != 0) continue;  // kernel thread, gone, or not ours
    char target[4096] = {};
    if (readlink(link.c_str(), target, sizeof target - 1) <= 0) continue;
    if (stat(target, &via_name) == 0 && same_file(via_proc, via_name)) continue;
    printf("pid %d exe %s is not reachable here\n", pid, target);
    ++found;
  }
  return found ? 0 : none("all exes resolve here");
}

int fds_self() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return result(false);
  int self = dirfd(d), leaked = 0;
  while (dirent* e = readdir(d)) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd < 3 || fd == self) continue;
    char link[512] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), link, sizeof link - 1) < 0) link[0] = '?';
    printf("fd %d -> %s\n", fd, link);
    ++leaked;
  }
  closedir(d);
  return leaked ? 0 : none("fd >= 3");
}

// Descriptors of `pid` naming a file or directory that is not the one its path resolves to in
// this mount namespace (a host file or directory, CVE-2024-21626's leaked fd).
int fds_of(const char* pid) {
  std::string dir = std::string("/proc/") + pid + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return result(false);
  int found = 0, seen = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    ++seen;
    std::string link = dir + "/" + e->d_name;
    char target[4096] = {};
    if (readlink(link.c_str(), target, sizeof target - 1) <= 0 || target[0] != '/') continue;
    if (!strncmp(target, "/memfd:", 7) || !strncmp(target, "/dev/pts/", 9)) continue;
    struct stat via_fd, via_name;
    if (stat(link.c_str(), &via_fd) != 0) continue;
    if (stat(target, &via_name) == 0 && same_file(via_fd, via_name)) continue;
    printf("fd %s -> %s is not reachable here\n", e->d_name, target);
    ++found;
  }
  closedir(d);
  printf("%d fds listed\n", seen);
  return found ? 0 : none("foreign fd");
}

int cwd_check() {
  char buf[4096];
  if (!getcwd(buf, sizeof buf)) {
    printf("getcwd failed: cwd is outside this root\n");
    return 0;
  }
  struct stat here, named;
  if (stat(".", &here) != 0) return result(false);
  if (buf[0] != '/' || stat(buf, &named) != 0 || !same_file(here, named)) {
    printf("cwd %s is not the directory its name resolves to\n", buf);
    return 0;
  }
  printf("cwd %s\n", buf);
  return none("escape");
}

// /proc/<pid>/root (or cwd) is another root than ours.
int differs(const char* pid, const char* what) {
  std::string p = std::string("/proc/") + pid + "/" + what + "/";
  struct stat theirs, ours;
  if (stat(p.c_str(), &theirs) != 0) return result(false);
  if (stat(strcmp(what, "root") == 0 ? "/" : ".", &ours) != 0) return result(false);
  if (!strcmp(what, "cwd")) {
    // The cwd of a process in our root is reachable by its name.
    char target[4096] = {};
    std::string link = std::string("/proc/") + pid + "/cwd";
    if (readlink(link.c_str(), target, sizeof target - 1) <= 0) return result(false);
    if (stat(target, &ours) == 0 && same_file(theirs, ours)) return none("cwd inside");
    printf("cwd %s is not reachable here\n", target);
    return 0;
  }
  if (same_file(theirs, ours)) return none("same root");
  printf("root of %s is another root\n", pid);
  return 0;
}

// The kernel log as a device node of our own (char 1:11): reading it is reading the host's.
int mknod_kmsg(const char* dir) {
  std::string p = std::string(dir) + "/.abx-boundary-kmsg-" + std::to_string(getpid());
  if (mknod(p.c_str(), S_IFCHR | 0600, makedev(1, 11)) != 0) return result(false);
  int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  int e = errno;
  unlink(p.c_str());
  if (fd >= 0) close(fd);
  return result(fd >= 0, e);
}

int mount_proc(const char* dir) {
  // A private mount namespace first, so the host control mounts nothing the host sees.
  if (unshare(CLONE_NEWNS) == 0) mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  return result(mount("proc", dir, "proc", 0, nullptr) == 0);
}

int kallsyms() {
  std::string s = read_all("/proc/kallsyms", 4096);
  if (s.empty()) return none("(empty or unreadable)");
  if (s.compare(0, 16, "0000000000000000") == 0) return none("(addresses hidden)");
  printf("%s\n", s.substr(0, s.find('\n')).c_str());
  return 0;
}

int open_pty(int* slave) {
  int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0) return -1;
  if (grantpt(m) != 0 || unlockpt(m) != 0) {
    close(m);
    return -1;
  }
  if (slave) {
    *slave = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (*slave < 0) {
      close(m);
      return -1;
    }
  }
  return m;
}

// stdin is a terminal of the devpts instance mounted at our /dev/pts: success (bad) when it is
// one from elsewhere (an inherited pty). Exit 4 when stdin is no terminal at all.
int tty_foreign() {
  if (!isatty(0)) {
    printf("stdin is no tty\n");
    return 4;
  }
  struct stat fd0, pts;
  char name[256] = {};
  if (fstat(0, &fd0) != 0 || stat("/dev/pts", &pts) != 0) return result(false);
  if (ttyname_r(0, name, sizeof name) != 0) name[0] = '\0';
  if (fd0.st_dev != pts.st_dev) {  // the pty's node lives in another devpts instance
    printf("stdin tty %s is not from our /dev/pts\n", name[0] ? name : "(no name)");
    return 0;
  }
  printf("stdin tty %s is ours; session leader %s\n", name, getsid(0) == getpid() ? "yes" : "no");
  return none("foreign tty");
}

// Host control of tty-foreign: a pty of a private devpts instance (not the one at /dev/pts) as
// the child's stdin.
int foreign_pty_exec(const char* dir) {
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr))
    return result(false);
  if (mount("devpts", dir, "devpts", 0, "newinstance,ptmxmode=0666") != 0) return result(false);
  std::string ptmx = std::string(dir) + "/ptmx";
  int m = open(ptmx.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
  int n = 0;  // 0: unlock
  if (m < 0 || ioctl(m, TIOCSPTLCK, &n) != 0 || ioctl(m, TIOCGPTN, &n) != 0) return result(false);
  std::string slave = std::string(dir) + "/" + std::to_string(n);
  int sfd = open(slave.c_str(), O_RDWR | O_NOCTTY);
  if (sfd < 0) return result(false);
  pid_t p = fork();
  if (p == 0) {
    dup2(sfd, 0);
    std::string self = self_path();
    execl(self.c_str(), self.c_str(), "tty-foreign", static_cast<char*>(nullptr));
    _exit(99);
  }
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int tiocsti(bool high) {
  int s = -1;
  if (open_pty(&s) < 0) return result(false);
  unsigned long req = TIOCSTI;
  if (high) req |= 1ul << 32;
  char c = 'x';
  return result(syscall(SYS_ioctl, s, req, &c) == 0);
}

int tioclinux() {
  int s = -1;
  if (open_pty(&s) < 0) return result(false);
  char sub = 6;  // TIOCL_GETSHIFTSTATE: harmless; a pty answers EINVAL from the tty layer
  long rc = syscall(SYS_ioctl, s, TIOCLINUX, &sub);
  int e = errno;
  if (rc == 0 || e != EPERM) {
    printf("reached the tty layer (%s)\n", rc == 0 ? "ok" : strerrorname_np(e));
    return 0;
  }
  return result(false, e);
}

// Whether uid 0 of this user namespace is the host's (an identity map).
bool identity_uid_map() {
  std::string m = read_all("/proc/self/uid_map");
  unsigned long inside = 1, outside = 1, count = 0;
  return sscanf(m.c_str(), "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 &&
         outside == 0;
}

// Every visible thread: Seccomp 2 (and, when sandbox root is host root, NoNewPrivs 1; in a user
// namespace setuid binaries may elevate to the sandbox's root, see e8.setuid_*).
int seccomp_threads() {
  int bad = 0, seen = 0;
  for (int pid : pids()) {
    std::string tdir = "/proc/" + std::to_string(pid) + "/task";
    DIR* d = opendir(tdir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string st = read_all(tdir + "/" + e->d_name + "/status");
      if (st.empty()) continue;
      auto field = [&](const char* k) {
        auto at = st.find(k);
        return at == std::string::npos
                   ? std::string("?")
                   : st.substr(at + strlen(k), st.find('\n', at) - at - strlen(k));
      };
      std::string name = field("Name:\t"), sec = field("Seccomp:\t"), nnp = field("NoNewPrivs:\t");
      if (name.empty() || st.find("Kthread:\t1") != std::string::npos) continue;
      // Kernel threads have no mm; on kernels without Kthread: skip the ones with PPid 2 / pid 2.
      std::string ppid = field("PPid:\t");
      if (pid == 2 || ppid == "2") continue;
      ++seen;
      if (sec != "2" || (nnp != "1" && identity_uid_map())) {
        if (bad < 5)
          printf("tid %s (%s): Seccomp %s NoNewPrivs %s\n", e->d_name, name.c_str(), sec.c_str(),
                 nnp.c_str());
        ++bad;
      }
    }
    closedir(d);
  }
  printf("%d threads checked\n", seen);
  return bad ? 0 : none("unfiltered thread");
}

// Calls `name` with arguments that are harmless on the host (they fail validation or act on
// nothing). Success: the call got past seccomp (anything but EPERM).
int call(const std::string& name) {
  long rc = -1;
  char zero[256] = {};
  errno = 0;
  if (name == "bpf") {
    rc = syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, zero, 8);
  } else if (name == "io_uring_setup") {
    rc = syscall(SYS_io_uring_setup, 0, nullptr);
  } else if (name == "userfaultfd") {
    rc = syscall(SYS_userfaultfd, O_CLOEXEC);
    if (rc >= 0) close(static_cast<int>(rc));
  } else if (name == "perf_event_open") {
    rc = syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0);
  } else if (name == "keyctl") {
    rc = syscall(SYS_keyctl, 0x7fff, 0, 0, 0, 0);
  } else if (name == "add_key") {
    rc = syscall(SYS_add_key, nullptr, nullptr, nullptr, 0, 0);
  } else if (name == "finit_module") {
    rc = syscall(SYS_finit_module, -1, "", 0);
  } else if (name == "kexec_load") {
    rc = syscall(SYS_kexec_load, 0, 0, nullptr, 0xdead0000ul);  // bad flags: EINVAL
  } else if (name == "reboot") {
    rc = syscall(SYS_reboot, 0, 0, 0, nullptr);  // bad magic: EINVAL
  } else if (name == "setns") {
    rc = syscall(SYS_setns, -1, 0);
  } else if (name == "pivot_root") {
    rc = syscall(SYS_pivot_root, "/nonexistent-abx", "/nonexistent");
  } else if (name == "swapon") {
    rc = syscall(SYS_swapon, "/nonexistent-abx", 0);
  } else if (name == "clone_newuser") {
    rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (rc == 0) _exit(0);
    if (rc > 0) waitpid(static_cast<pid_t>(rc), nullptr, 0);
  } else if (name == "unshare_newuser") {
    // In a child, so the host control leaves this process as it was.
    pid_t p = fork();
    if (p == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
    int st = 0;
    waitpid(p, &st, 0);
    rc = WEXITSTATUS(st) == 0 ? 0 : -1;
    errno = WEXITSTATUS(st);
  } else if (name == "unshare_newuser_i386" || name == "mount_i386") {
    long ret = name == "mount_i386"
                   ? abx::runtime::int80(21, 0, 0, 0)  // i386 mount(NULL, NULL, NULL): EFAULT
                   : abx::runtime::int80(310, CLONE_NEWUSER, 0, 0);  // i386 unshare
    if (ret == -ENOSYS) {
      printf("no ia32 emulation\n");
      return 3;
    }
    if (ret < 0) errno = static_cast<int>(-ret);
    rc = ret < 0 ? -1 : ret;
    if (rc == 0 && name != "mount_i386") {
      printf("ok (new user namespace)\n");
      return 0;
    }
  } else if (name == "unshare_newuser_x32" || name == "keyctl_x32") {
    // x32 numbers are the x86_64 ones with bit 30 set.
    rc = name == "keyctl_x32" ? syscall(0x40000000 | SYS_keyctl, 0x7fff, 0, 0, 0, 0)
                              : syscall(0x40000000 | SYS_unshare, CLONE_NEWUSER);
    if (rc < 0 && errno == ENOSYS) {
      printf("no x32 ABI\n");
      return 3;
    }
  } else if (name == "open_by_handle_at") {
    // The "shocker" primitive: a handle of a file opened from the mount, bypassing paths.
    alignas(file_handle) unsigned char storage[sizeof(file_handle) + 128] = {};
    auto* fh = reinterpret_cast<file_handle*>(storage);
    fh->handle_bytes = 128;
    int mnt = -1;
    if (syscall(SYS_name_to_handle_at, AT_FDCWD, "/", fh, &mnt, 0) != 0) {
      rc = -1;
    } else {
      int mfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      rc = syscall(SYS_open_by_handle_at, mfd, fh, O_RDONLY | O_CLOEXEC);
      if (rc >= 0) close(static_cast<int>(rc));
      if (mfd >= 0) close(mfd);
    }
    if (rc >= 0) return result(true);
    return result(false);  // here any failure means the handle did not open
  } else if (name == "io_setup") {
    aio_context_t ctx = 0;
    rc = syscall(SYS_io_setup, 1, &ctx);
    if (rc == 0) {
      syscall(SYS_io_destroy, ctx);
      printf("ok (an AIO context from the global pool)\n");
      return 0;
    }
    return result(false);
  } else {
    return 2;
  }
  if (rc >= 0) return result(true);
  int e = errno;
  const char* n = strerrorname_np(e);
  printf("errno %s\n", n ? n : "?");
  return e == EPERM ? 1 : 0;
}

int ptrace_attach(pid_t pid) {
  if (ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) != 0) return result(false);
  ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
  return result(true);
}

int proc_mem(const char* pid) {
  std::string p = std::string("/proc/") + pid + "/mem";
  int fd = open(p.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return result(false);
  close(fd);
  return result(true);
}

int pidfd_getfd(pid_t pid) {
  int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pfd < 0) return result(false);
  int err = EBADF;
  for (int target = 0; target < 64; ++target) {
    int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pfd, target, 0));
    if (fd >= 0) {
      printf("took fd %d of pid %d\n", target, pid);
      return 0;
    }
    err = errno;
    if (err == EPERM || err == EACCES) break;
  }
  return result(false, err);
}

unsigned long long cap_field(const char* key) {
  std::string st = read_all("/proc/self/status");
  auto at = st.find(key);
  if (at == std::string::npos) return ~0ull;
  return strtoull(st.c_str() + at + strlen(key), nullptr, 16);
}

int caps_inheritable() {
  unsigned long long inh = cap_field("CapInh:\t"), amb = cap_field("CapAmb:\t");
  printf("CapInh %016llx CapAmb %016llx\n", inh, amb);
  return inh != 0 || amb != 0 ? 0 : 1;
}

// What abx keeps (src/runtime/caps.cc): anything else in the bounding set is a leak.
int caps_bounding() {
  const unsigned long long allowed =
      (1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) |
      (1ull << CAP_FSETID) | (1ull << CAP_KILL) | (1ull << CAP_SETGID) | (1ull << CAP_SETUID) |
      (1ull << CAP_SETPCAP) | (1ull << CAP_NET_BIND_SERVICE) | (1ull << CAP_SYS_CHROOT) |
      (1ull << CAP_AUDIT_WRITE);
  unsigned long long bnd = cap_field("CapBnd:\t");
  printf("CapBnd %016llx extra %016llx\n", bnd, bnd & ~allowed);
  return bnd & ~allowed ? 0 : 1;
}

int caps_effective() {
  unsigned long long eff = cap_field("CapEff:\t"), prm = cap_field("CapPrm:\t");
  printf("CapEff %016llx CapPrm %016llx\n", eff, prm);
  return eff != 0 || prm != 0 ? 0 : 1;
}

// Host control only: raise CAP_NET_RAW into the inheritable and ambient sets, then run the
// rest of argv (this binary's subcommand) with them.
int with_ambient(int argc, char** argv) {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2] = {};
  if (syscall(SYS_capget, &h, d) != 0) return result(false);
  d[0].inheritable |= 1u << CAP_NET_RAW;
  if (syscall(SYS_capset, &h, d) != 0) return result(false);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0) != 0) return result(false);
  std::string self = self_path();
  std::vector<char*> args{argv[0]};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(self.c_str(), args.data());
  return result(false);
}

int drop_to(uid_t uid) {
  gid_t g = uid;
  return setgroups(0, nullptr) == 0 && setresgid(g, g, g) == 0 && setresuid(uid, uid, uid) == 0
             ? 0
             : -1;
}

// A setuid-root copy of this binary, run by an unprivileged uid: success when it runs as the
// host's root (euid 0 under an identity uid map; see host-root). As root the copy is made (in dir)
// and a child drops to `uid` first; otherwise the copy an earlier root run left is executed as we
// are.
int setuid_gain(const char* dir, uid_t uid) {
  std::string copy = std::string(dir) + "/suid-probe";
  if (geteuid() == 0) {
    std::string self = read_all("/proc/self/exe", 64 << 20);
    unlink(copy.c_str());
    int fd = open(copy.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (fd < 0 || write(fd, self.data(), self.size()) != static_cast<ssize_t>(self.size()))
      return result(false);
    close(fd);
    if (chown(copy.c_str(), 0, 0) != 0 || chmod(copy.c_str(), 04755) != 0) return result(false);
    chmod(dir, 0755);
  }
  pid_t p = fork();
  if (p == 0) {
    if (geteuid() == 0 && drop_to(uid) != 0) _exit(4);
    execl(copy.c_str(), copy.c_str(), "host-root", static_cast<char*>(nullptr));
    _exit(5);
  }
  int st = 0;
  waitpid(p, &st, 0);
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  printf("setuid copy exited %d\n", code);
  return code == 0 ? 0 : 1;
}

// 0 when uid 0 of this user namespace is uid 0 of the host (an identity map).
int uid_map() {
  printf("%s", read_all("/proc/self/uid_map").c_str());
  return identity_uid_map() ? 0 : 1;
}

int connect_tcp(const char* ip, int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return result(false);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  // A bounded connect: a dropped SYN must not hang the probe.
  timeval tv{3, 0};
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return result(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
}

int connect_abstract(const char* name, const char* ns) {
  if (*ns) {
    int fd = open(ns, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return result(false);
  }
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  size_t n = strnlen(name, sizeof a.sun_path - 2);
  memcpy(a.sun_path + 1, name, n);
  return result(connect(s, reinterpret_cast<sockaddr*>(&a),
                        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n)) == 0);
}

int netns_connect(const char* ns, int port) {
  int fd = open(ns, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return result(false);
  return connect_tcp("127.0.0.1", port);
}

int unix_listed(const char* name) {
  std::string s = read_all("/proc/net/unix");
  if (s.find(name) == std::string::npos) return none("listed");
  printf("listed\n");
  return 0;
}

int see_pid(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid);
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return result(true);
  int e = errno;
  if (kill(pid, 0) == 0) return result(true);
  return result(false, e);
}

// --- Exhaustion: hit a limit, say so, hold it for `secs`, release. ---

void hold(const char* what, int count, int err, int secs) {
  printf("exhausted %s after %d: errno %s\n", what, count, strerrorname_np(err));
  printf("holding\n");
  sleep(static_cast<unsigned>(secs));
}

int exhaust_inotify(int secs) {
  std::vector<int> fds;
  int err = 0;
  for (int i = 0; i < 100000; ++i) {
    int fd = inotify_init1(IN_CLOEXEC);
    if (fd < 0) {
      err = errno;
      break;
    }
    fds.push_back(fd);
  }
  if (!err) return none("limit before the cap");
  hold("inotify instances", static_cast<int>(fds.size()), err, secs);
  return 0;
}

// Queues real-time signals to ourselves (blocked) until the per-user RLIMIT_SIGPENDING count
// says no.
int exhaust_rtsig(int secs) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGRTMIN);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  int n = 0, err = 0;
  for (; n < 10'000'000; ++n) {
    siginfo_t si{};
    si.si_code = SI_QUEUE;
    si.si_pid = getpid();
    si.si_uid = getuid();
    if (syscall(SYS_rt_sigqueueinfo, getpid(), SIGRTMIN, &si) != 0) {
      err = errno;
      break;
    }
  }
  if (!err) return none("limit before the cap");
  hold("queued RT signals", n, err, secs);
  return 0;
}

// ptys from /dev/ptmx, in children so RLIMIT_NOFILE is no cap: until the devpts instance (or
// the kernel's pty/max) says no.
int exhaust_ptys(int secs, const char* private_dir) {
  if (*private_dir) {
    // Host control: a private devpts instance with max=16 in a private mount namespace, so the
    // probe's own limit detection is exercised without touching the host's ptys.
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr))
      return result(false);
    if (mount("devpts", private_dir, "devpts", 0, "newinstance,ptmxmode=0666,max=16") != 0)
      return result(false);
    std::string ptmx = std::string(private_dir) + "/ptmx";
    if (mount(ptmx.c_str(), "/dev/ptmx", nullptr, MS_BIND, nullptr) != 0 ||
        mount(private_dir, "/dev/pts", nullptr, MS_BIND, nullptr) != 0)
      return result(false);
  }
  int total = 0, err = 0;
  std::vector<pid_t> kids;
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) return result(false);
  for (int k = 0; k < 8 && !err; ++k) {
    int ready[2];
    if (pipe2(ready, 0) != 0) break;
    pid_t p = fork();
    if (p == 0) {
      close(ready[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int n = 0, e = 0;
      for (; n < 1000; ++n)
        if (open_pty(nullptr) < 0) {
          e = errno;
          break;
        }
      int msg[2] = {n, e};
      if (write(ready[1], msg, sizeof msg) != sizeof msg) _exit(1);
      pause();
      _exit(0);
    }
    close(ready[1]);
    int msg[2] = {0, 0};
    if (read(ready[0], msg, sizeof msg) != sizeof msg) msg[1] = EIO;
    close(ready[0]);
    kids.push_back(p);
    total += msg[0];
    if (msg[1] != 0 && msg[1] != EMFILE) err = msg[1];
  }
  int rc = 0;
  if (err)
    hold("ptys", total, err, secs);
  else
    rc = none("limit before the cap (8000 ptys)");
  for (pid_t p : kids) kill(p, SIGKILL);
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  return rc;
}

int exhaust_pids(int secs) {
  std::vector<pid_t> kids;
  int err = 0;
  for (int i = 0; i < 5000; ++i) {
    pid_t p = fork();
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      pause();
      _exit(0);
    }
    if (p < 0) {
      err = errno;
      break;
    }
    kids.push_back(p);
  }
  int rc = 0;
  if (err)
    hold("pids", static_cast<int>(kids.size()), err, secs);
  else
    rc = none("limit before the cap");
  for (pid_t p : kids) kill(p, SIGKILL);
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  return rc;
}

// Touches memory in a child until the cgroup's OOM killer takes it: success = the child was
// killed by SIGKILL before touching `mib` MiB.
int exhaust_mem(long mib, int secs) {
  pid_t p = fork();
  if (p == 0) {
    size_t bytes = static_cast<size_t>(mib) << 20;
    char* m = static_cast<char*>(malloc(bytes));
    if (!m) _exit(3);
    printf("holding\n");
    for (size_t i = 0; i < bytes; i += 4096) m[i] = 1;
    sleep(static_cast<unsigned>(secs));
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
    printf("exhausted memory: child OOM-killed\n");
    return 0;
  }
  return none("OOM kill before the cap");
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (argc < 2) return 2;
  std::string cmd = argv[1];
  const char* a = argc > 2 ? argv[2] : "";
  const char* b = argc > 3 ? argv[3] : "";
  if (cmd == "euid") return geteuid() == 0 ? 0 : 1;
  // Host root: euid 0 where uid 0 is the host's. In a user namespace euid 0 is the sandbox's
  // root only (what sudo in the base image gives, as the API's root does).
  if (cmd == "host-root") {
    bool euid0 = geteuid() == 0, host = identity_uid_map();
    printf("euid %u, uid map %s\n", geteuid(), host ? "identity (host root)" : "the sandbox's");
    return euid0 && host ? 0 : 1;
  }
  if (cmd == "open-write") return open_write(a);
  if (cmd == "create-in") return create_in(a);
  if (cmd == "read") return read_path(a);
  if (cmd == "stat") return stat_path(a);
  if (cmd == "exe-write") {
    std::string p = std::string("/proc/") + a + "/exe";
    return open_write(p.c_str());
  }
  if (cmd == "exe-reopen") {  // O_PATH to /proc/<pid>/exe, then reopened for writing
    std::string p = std::string("/proc/") + a + "/exe";
    int fd = open(p.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) return result(false);
    std::string again = "/proc/self/fd/" + std::to_string(fd);
    return open_write(again.c_str());
  }
  if (cmd == "exe-foreign") return exe_foreign();
  if (cmd == "fds") return fds_self();
  if (cmd == "fds-of") return fds_of(a);
  if (cmd == "cwd-check") return cwd_check();
  if (cmd == "root-differs") return differs(a, "root");
  if (cmd == "cwd-differs") return differs(a, "cwd");
  if (cmd == "mknod-kmsg") return mknod_kmsg(a);
  if (cmd == "mount-proc") return mount_proc(a);
  if (cmd == "kallsyms") return kallsyms();
  if (cmd == "tiocsti") return tiocsti(std::string(a) == "high");
  if (cmd == "tioclinux") return tioclinux();
  if (cmd == "tty-foreign") return tty_foreign();
  if (cmd == "foreign-pty-exec") return foreign_pty_exec(a);
  if (cmd == "seccomp-threads") return seccomp_threads();
  if (cmd == "syscall") return call(a);
  if (cmd == "ptrace-attach") return ptrace_attach(atoi(a));
  if (cmd == "proc-mem") return proc_mem(a);
  if (cmd == "pidfd-getfd") return pidfd_getfd(atoi(a));
  if (cmd == "caps-inheritable") return caps_inheritable();
  if (cmd == "caps-bounding") return caps_bounding();
  if (cmd == "caps-effective") return caps_effective();
  if (cmd == "with-ambient") return with_ambient(argc, argv);
  if (cmd == "setuid-gain") return setuid_gain(a, static_cast<uid_t>(atoi(b)));
  if (cmd == "uid-map") return uid_map();
  if (cmd == "connect") return connect_tcp(*b ? b : "127.0.0.1", atoi(a));
  if (cmd == "connect-abstract") return connect_abstract(a, b);
  if (cmd == "netns-connect") return netns_connect(a, atoi(b));
  if (cmd == "unix-listed") return unix_listed(a);
  if (cmd == "see-pid") return see_pid(atoi(a));
  if (cmd == "kill-pid") return result(kill(atoi(a), SIGCONT) == 0);
  if (cmd == "inotify") {
    int fd = inotify_init1(IN_CLOEXEC);
    return result(fd >= 0);
  }
  if (cmd == "open-pty") return result(open_pty(nullptr) >= 0);
  if (cmd == "devpts-max") {  // 0 when /dev/pts is a devpts instance with a max= of its own
    std::string mi = read_all("/proc/self/mountinfo");
    std::istringstream lines(mi);
    for (std::string l; std::getline(lines, l);) {
      if (l.find(" /dev/pts ") == std::string::npos || l.find(" devpts ") == std::string::npos)
        continue;
      auto at = l.find("max=");
      printf("%s\n", l.c_str());
      if (at != std::string::npos && atol(l.c_str() + at + 4) <= 1024) return 0;
      return none("bounded max=");
    }
    return none("devpts on /dev/pts");
  }
  if (cmd == "rtsig-one") {  // one queued RT signal (blocked): the per-user count has room
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    siginfo_t si{};
    si.si_code = SI_QUEUE;
    si.si_pid = getpid();
    si.si_uid = getuid();
    return result(syscall(SYS_rt_sigqueueinfo, getpid(), SIGRTMIN, &si) == 0);
  }
  if (cmd == "open-write-any") {  // the first of the paths that opens for writing
    int rc = 1;
    for (int i = 2; i < argc && rc != 0; ++i) {
      printf("%s: ", argv[i]);
      rc = open_write(argv[i]);
    }
    return rc;
  }
  if (cmd == "hold-unlinked") {  // a process holding an unlinked file (host control of fds-of)
    std::string p = std::string(a) + "/.abx-boundary-unlinked";
    int fd = open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);  // inherited on purpose
    unlink(p.c_str());
    printf("%s\n", fd >= 0 ? "ready" : "failed");
    sleep(static_cast<unsigned>(atoi(b)));
    return 0;
  }
  if (cmd == "sleep") {
    sleep(static_cast<unsigned>(atoi(a)));
    return 0;
  }
  if (cmd == "drop-to") {  // drop-to UID SUBCOMMAND ARGS...: the rest as that uid
    if (drop_to(static_cast<uid_t>(atoi(a))) != 0) return result(false);
    std::string self = self_path();
    std::vector<char*> args{argv[0]};
    for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv(self.c_str(), args.data());
    return result(false);
  }
  int secs = atoi(a) > 0 ? atoi(a) : 2;
  if (cmd == "exhaust-inotify") return exhaust_inotify(secs);
  if (cmd == "exhaust-rtsig") return exhaust_rtsig(secs);
  if (cmd == "exhaust-ptys") return exhaust_ptys(secs, b);
  if (cmd == "exhaust-pids") return exhaust_pids(secs);
  if (cmd == "exhaust-mem") return exhaust_mem(atol(b) > 0 ? atol(b) : 1024, secs);
  return 2;
}
