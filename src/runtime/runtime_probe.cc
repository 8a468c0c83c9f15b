// runtime_probe: isolation probes for runtime tests. Each probe attempts one thing a sandbox
// must not be able to do; tests run it on the host (where it must succeed: the positive
// control that proves the probe exercises the path) and inside a sandbox (where it must fail).
//
// Exit 0: the attempt succeeded (or, for `syscall`, reached the kernel rather than the seccomp
// filter). Exit 1: it failed; stdout says how ("errno EPERM"). Exit 2: usage error.
// Static and unsanitized so it runs in any rootfs.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/reboot.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "abx/runtime/int80.h"

namespace {

// Reads errno here, after the argument (the call being checked) has been evaluated; a default
// argument `int err = errno` could be evaluated before the call.
int result(bool ok, int err);
int result(bool ok) { return result(ok, errno); }
int result(bool ok, int err) {
  if (ok) {
    printf("ok\n");
    return 0;
  }
  const char* n = strerrorname_np(err);
  printf("errno %s\n", n ? n : "?");
  return 1;
}

int see_pid(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid);
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return result(true);
  int e = errno;
  if (kill(pid, 0) == 0) return result(true);
  return result(false, e);
}

int write_file(const char* path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return result(false);
  bool ok = write(fd, "x", 1) == 1;
  int e = errno;
  close(fd);
  return result(ok, e);
}

int connect_port(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return result(false);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return result(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
}

int do_mount() {
  // On the host, do it in a private mount namespace so the control changes nothing.
  if (unshare(CLONE_NEWNS) == 0) mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  return result(mount("probe", "/tmp", "tmpfs", 0, "size=4k") == 0);
}

int forkbomb(int n) {
  std::vector<pid_t> kids;
  int err = 0;
  for (int i = 0; i < n; ++i) {
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
  printf("forked %zu\n", kids.size());
  for (pid_t p : kids) kill(p, SIGKILL);
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  return result(static_cast<int>(kids.size()) == n, err);
}

int alloc(long mib) {
  size_t bytes = static_cast<size_t>(mib) << 20;
  char* p = static_cast<char*>(malloc(bytes));
  if (!p) return result(false);
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;  // touch every page
  printf("touched %ld MiB\n", mib);
  return result(true);
}

int fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return result(false);
  int self = dirfd(d), leaked = 0;
  while (dirent* e = readdir(d)) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd < 3 || fd == self) continue;
    char link[256] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), link, sizeof link - 1) < 0) link[0] = '?';
    printf("fd %d -> %s\n", fd, link);
    ++leaked;
  }
  closedir(d);
  return result(leaked > 0, ENOENT);
}

int status() {
  FILE* f = fopen("/proc/self/status", "re");
  if (!f) return result(false);
  char line[512];
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Cap", 3) || !strncmp(line, "NoNewPrivs", 10) ||
        !strncmp(line, "Seccomp:", 8) || !strncmp(line, "Uid:", 4) || !strncmp(line, "Gid:", 4) ||
        !strncmp(line, "Groups:", 7))
      fputs(line, stdout);
  fclose(f);
  return 0;
}

int tiocsti(bool high) {
  int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) return result(false);
  int s = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s < 0) return result(false);
  unsigned long req = TIOCSTI;
  if (high) req |= 1ul << 32;
  char c = 'x';
  return result(syscall(SYS_ioctl, s, req, &c) == 0);
}

// Calls `name` with arguments that are harmless on the host (they fail validation or act on
// nothing). Success = the call got past seccomp (anything but EPERM).
int call(const std::string& name) {
  long rc = -1;
  char zero[256] = {};
  if (name == "bpf")
    rc = syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, zero, 8);
  else if (name == "io_uring_setup")
    rc = syscall(SYS_io_uring_setup, 0, nullptr);
  else if (name == "userfaultfd")
    rc = syscall(SYS_userfaultfd, O_CLOEXEC);
  else if (name == "perf_event_open")
    rc = syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0);
  else if (name == "keyctl")
    rc = syscall(SYS_keyctl, 0x7fff, 0, 0, 0, 0);
  else if (name == "add_key")
    rc = syscall(SYS_add_key, nullptr, nullptr, nullptr, 0, 0);
  else if (name == "ptrace")
    rc = ptrace(PTRACE_CONT, getpid(), nullptr, nullptr);
  else if (name == "finit_module")
    rc = syscall(SYS_finit_module, -1, "", 0);
  else if (name == "reboot")
    rc = syscall(SYS_reboot, 0, 0, 0, nullptr);  // bad magic: EINVAL
  else if (name == "setns")
    rc = syscall(SYS_setns, -1, 0);
  else if (name == "open_tree")
    rc = syscall(SYS_open_tree, -1, "", 0);
  else if (name == "swapon")
    rc = syscall(SYS_swapon, "/nonexistent-abx", 0);
  else if (name == "umount2")
    rc = syscall(SYS_umount2, "/nonexistent-abx", 0);
  else if (name == "pivot_root")
    rc = syscall(SYS_pivot_root, "/nonexistent-abx", "/nonexistent");
  else if (name == "io_setup") {
    unsigned long ctx = 0;  // aio_context_t
    rc = syscall(SYS_io_setup, 1, &ctx);
    if (rc == 0) syscall(SYS_io_destroy, ctx);
  } else if (name == "clone_newuser") {
    rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (rc == 0) _exit(0);
    if (rc > 0) waitpid(static_cast<pid_t>(rc), nullptr, 0);
  } else if (name == "unshare_newuser_i386") {
    // i386 unshare is 310; the same request through the 32-bit entry point.
    const long ret = abx::runtime::int80(310, CLONE_NEWUSER, 0, 0);
    if (ret < 0)
      errno = static_cast<int>(-ret), rc = -1;
    else
      rc = ret;
    if (ret == -ENOSYS) {
      printf("no ia32 emulation\n");
      return 3;
    }
  } else if (name == "unshare_newuser_x32") {
    // x32 numbers are the x86_64 ones with bit 30 set.
    rc = syscall(0x40000000 | SYS_unshare, CLONE_NEWUSER);
    if (rc < 0 && errno == ENOSYS) {
      printf("no x32 ABI\n");
      return 3;
    }
  } else {
    return 2;
  }
  if (rc >= 0) return result(true);
  int e = errno;
  const char* n = strerrorname_np(e);
  printf("errno %s\n", n ? n : "?");
  // io_setup is denied with ENOSYS (seccomp.cc says why).
  return e == EPERM || (name == "io_setup" && e == ENOSYS) ? 1 : 0;
}

// Counts in memory (one tick per 10 ms) until killed; on SIGUSR1 writes "<count> <token>\n" to
// `path` (atomically, through path.tmp), where the token is random per start: a process restored
// from a checkpoint keeps both, a restarted one would start over with a new token. Writes
// "<token>\n" to `path`.started at start, and keeps one child (paused) so the tree has two
// processes. Signals: as a pid namespace's init, SIGUSR1 must have a handler to be delivered.
// `listen_port` > 0: the child also listens on 127.0.0.1:<port> and never accepts, so a client's
// connection stays in the listening socket's queue (a checkpoint's "in-flight" connection).
int count(const std::string& path, int listen_port) {
  unsigned char raw[8] = {};
  if (getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) return result(false);
  char token[17] = {};
  for (int i = 0; i < 8; ++i) snprintf(token + 2 * i, 3, "%02x", raw[i]);
  pid_t kid = fork();
  if (kid == 0) {
    if (listen_port > 0) {
      int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a = {};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(listen_port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 4) != 0)
        _exit(1);
    }
    for (;;) pause();
  }
  auto put = [&](const std::string& p, const std::string& text) {
    std::string tmp = p + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    return ok && rename(tmp.c_str(), p.c_str()) == 0;
  };
  if (!put(path + ".started", std::string(token) + "\n")) return result(false);
  struct sigaction sa = {};
  sa.sa_handler = [](int) {};
  sigaction(SIGUSR1, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  unsigned long long n = 0;
  for (;;) {
    timespec tick{0, 10 * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGUSR1) {
      put(path, std::to_string(n) + " " + token + "\n");
    } else if (sig < 0 && errno == EAGAIN) {
      ++n;
    }
  }
}

// A process with an inotify watch, as a dev server's file watcher has one: watches `dir` (made
// if missing) for created entries and keeps `log` (outside `dir`) as "watching" and then the
// names its watch reported, one a line. On SIGUSR1 a child creates the next entry, "<n>-<pid>"
// (the child's pid tells a restored tree's entries apart from a fork's). The init of a sandbox.
// Each of `more` is watched too (for the same events); on SIGUSR2 a child creates the next entry
// in each of them.
int watch(const std::string& dir, const std::string& log, const std::vector<std::string>& more) {
  mkdir(dir.c_str(), 0755);
  int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, dir.c_str(), IN_CREATE | IN_MOVED_TO) < 0)
    return result(false);
  for (const auto& m : more)
    if (inotify_add_watch(in, m.c_str(), IN_CREATE | IN_MOVED_TO) < 0) return result(false);
  std::string seen = "watching\n";
  auto put = [&] {
    std::string tmp = log + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    bool ok = write(fd, seen.data(), seen.size()) == static_cast<ssize_t>(seen.size());
    close(fd);
    if (ok) rename(tmp.c_str(), log.c_str());
  };
  put();
  struct sigaction sa = {};
  sa.sa_handler = [](int) {};
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  unsigned n = 0;
  alignas(inotify_event) char buf[4096];
  for (;;) {
    timespec tick{0, 10 * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      ++n;
      if (fork() == 0) {
        bool ok = true;
        for (const auto& d : sig == SIGUSR1 ? std::vector<std::string>{dir} : more) {
          std::string name = d + "/" + std::to_string(n) + "-" + std::to_string(getpid());
          int fd = open(name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
          ok = ok && fd >= 0;
        }
        _exit(ok ? 0 : 1);
      }
    } else if (sig == SIGCHLD) {
      while (waitpid(-1, nullptr, WNOHANG) > 0) {
      }
    }
    pollfd p{in, POLLIN, 0};
    if (poll(&p, 1, 0) != 1) continue;
    ssize_t got = read(in, buf, sizeof buf);
    for (char* at = buf; got > 0 && at < buf + got;) {
      auto* ev = reinterpret_cast<inotify_event*>(at);
      at += sizeof(inotify_event) + ev->len;
      if (ev->len) seen += std::string(ev->name) + "\n";
    }
    put();
  }
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (argc < 2) return 2;
  std::string cmd = argv[1];
  const char* arg = argc > 2 ? argv[2] : "";
  if (cmd == "see-pid") return see_pid(atoi(arg));
  if (cmd == "write") return write_file(arg);
  if (cmd == "connect") return connect_port(atoi(arg));
  if (cmd == "userns") return result(unshare(CLONE_NEWUSER) == 0);
  if (cmd == "mount") return do_mount();
  if (cmd == "forkbomb") return forkbomb(atoi(arg));
  if (cmd == "alloc") return alloc(atol(arg));
  if (cmd == "fds") return fds();
  if (cmd == "status") return status();
  if (cmd == "tiocsti") return tiocsti(std::string(arg) == "high");
  if (cmd == "syscall") return call(arg);
  if (cmd == "hostname") {
    char h[256] = {};
    gethostname(h, sizeof h - 1);
    printf("%s\n", h);
    return 0;
  }
  if (cmd == "ls") {  // entries of a directory, one per line
    DIR* d = opendir(arg);
    if (!d) return result(false);
    while (dirent* e = readdir(d)) printf("%s\n", e->d_name);
    closedir(d);
    return 0;
  }
  if (cmd == "cat") {
    FILE* f = fopen(arg, "re");
    if (!f) return result(false);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
    fclose(f);
    return 0;
  }
  if (cmd == "listen") {  // serve one connection on 127.0.0.1:<port>: write "hi" and exit
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(atoi(arg)));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 4) != 0)
      return result(false);
    printf("listening\n");
    int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return result(false);
    return result(write(c, "hi", 2) == 2);
  }
  if (cmd == "sh") {  // run a shell command (host rootfs has /bin/sh)
    execl("/bin/sh", "sh", "-c", arg, static_cast<char*>(nullptr));
    return result(false);
  }
  if (cmd == "inotify-hold") {  // take inotify instances until refused, report, keep them
    int held = 0;
    while (held < 100000 && inotify_init1(IN_CLOEXEC) >= 0) ++held;
    const char* n = strerrorname_np(errno);
    printf("held %d errno %s\n", held, n ? n : "?");
    sleep(static_cast<unsigned>(atoi(arg)));
    return 0;
  }
  if (cmd == "count") return count(arg, argc > 3 ? atoi(argv[3]) : 0);
  if (cmd == "watch" && argc > 3) return watch(arg, argv[3], {argv + 4, argv + argc});
  if (cmd == "sleep") {
    sleep(static_cast<unsigned>(atoi(arg)));
    return 0;
  }
  return 2;
}
