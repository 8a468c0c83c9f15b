// Companion step: a second process the init starts just before its own exec
// (SandboxConfig::companion). The init's state is final by then (namespaces, root, ids,
// capabilities, seccomp filter, descriptors), so the companion gets exactly what argv gets.
//
// This runs in the child between clone and exec, on the parent's memory when it was cloned with
// CLONE_VM (child.h): no allocation, no locks, raw syscalls where glibc's wrappers would do more
// than the call (signal handling, ids). The companion itself is cloned CLONE_VM | CLONE_VFORK on a
// stack in this frame: the init stops until it has exec'd or exited, so they never run at once
// on one memory.
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "child.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace abx::runtime {
namespace {

constexpr std::size_t kStackBytes = 64 * 1024;  // exec_in_path's buffer and a few frames

struct CompanionArgs {
  const ChildCompanion* c;
  volatile int exec_errno;  // written by the companion when its exec failed
};

// The kernel's struct sigaction for rt_sigaction (glibc's differs in layout).
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  unsigned long mask;
};

// execvp's lookup of a name without a '/' in `path`, without its shell fallback for ENOEXEC:
// the first entry that executes wins; EACCES is kept if no entry did, as execvp does.
void exec_in_path(const ChildCompanion& c) {
  const char* name = c.argv[0];
  if (std::strchr(name, '/') != nullptr || c.path == nullptr) {
    ::execve(name, c.argv, c.envp);
    return;
  }
  const std::size_t nlen = std::strlen(name);
  char buf[4096];
  int err = ENOENT;
  for (const char* p = c.path;;) {
    const char* end = std::strchr(p, ':');
    if (end == nullptr) end = p + std::strlen(p);
    std::size_t dlen = static_cast<std::size_t>(end - p);
    const char* dir = p;
    if (dlen == 0) {  // an empty entry is the current directory
      dir = ".";
      dlen = 1;
    }
    if (dlen + 1 + nlen + 1 <= sizeof buf) {
      std::memcpy(buf, dir, dlen);
      buf[dlen] = '/';
      std::memcpy(buf + dlen + 1, name, nlen + 1);
      ::execve(buf, c.argv, c.envp);
      if (errno == EACCES) {
        err = EACCES;
      } else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV &&
                 errno != ETIMEDOUT) {
        return;  // found but not executable for another reason: that is the answer
      }
    }
    if (*end == '\0') break;
    p = end + 1;
  }
  errno = err;
}

int companion_main(void* arg) {
  auto* a = static_cast<CompanionArgs*>(arg);
  const ChildCompanion& c = *a->c;
  // Every signal at its default (the init still has its parent's dispositions), then none
  // blocked: as envd's supervisor starts its children.
  KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
  for (int s = 1; s < _NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP)
      ::syscall(SYS_rt_sigaction, s, &dfl, nullptr, sizeof(unsigned long));
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, _NSIG / 8);
  ::syscall(SYS_setsid);
  // Descriptors: mapped (map_fds), then everything above 2 that is not a target closed.
  int top = 2;
  bool target[kMaxCompanionFd] = {};
  for (std::size_t i = 0; i < c.nfds; ++i) {
    if (c.fds[i].child_fd > top) top = c.fds[i].child_fd;
    target[c.fds[i].child_fd] = true;
  }
  if (!map_fds(c.fds, c.nfds, top)) {
    a->exec_errno = errno;
    ::_exit(127);
  }
  for (int fd = 3; fd <= top; ++fd) {
    if (!target[fd]) ::close(fd);
  }
  ::syscall(SYS_close_range, static_cast<unsigned>(top + 1), ~0u, 0);
  if (::chdir(c.cwd) != 0 && ::chdir("/") != 0) {
    a->exec_errno = errno;
    ::_exit(127);
  }
  exec_in_path(c);
  a->exec_errno = errno != 0 ? errno : ENOEXEC;
  ::_exit(127);
}

void write_pid(char* out, pid_t pid) {
  char digits[kCompanionPidDigits];
  std::size_t n = 0;
  auto v = static_cast<unsigned long>(pid > 0 ? pid : 0);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && n < kCompanionPidDigits);
  for (std::size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  out[n] = '\0';
}

}  // namespace

bool companion_child(const ChildPlan& p, ChildReport* r) {
  const ChildCompanion* c = p.companion;
  if (c == nullptr) return true;
  if (c->nfds > kMaxCompanionFds) {
    errno = E2BIG;
    return fail(r, "too many companion descriptors");
  }
  for (std::size_t i = 0; i < c->nfds; ++i) {
    if (c->fds[i].child_fd < 0 || c->fds[i].child_fd >= kMaxCompanionFd) {
      errno = EBADF;
      return fail(r, "companion descriptor out of range");
    }
  }
  CompanionArgs a{c, 0};
  alignas(16) char stack[kStackBytes];
  pid_t pid = ::clone(companion_main, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
#if defined(__SANITIZE_ADDRESS__)
  // The companion's frames poisoned their redzones in this buffer's shadow, and never returned.
  __asan_unpoison_memory_region(stack, sizeof stack);
#endif
  if (pid < 0) return fail(r, "clone the companion");
  // A failed exec leaves a zombie: argv (envd, PID 1) reaps it with the other orphans.
  write_pid(c->pid_out, a.exec_errno == 0 ? pid : 0);
  for (std::size_t i = 0; i < c->nprivate; ++i) ::close(c->private_fds[i]);
  return true;
}

}  // namespace abx::runtime
