#include "child.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "abx/base/os.h"

namespace abx::runtime {
namespace {

void append(char* dst, std::size_t cap, std::size_t* len, const char* src) {
  while (src && *src && *len + 1 < cap) dst[(*len)++] = *src++;
  dst[*len] = '\0';
}

[[noreturn]] void report_and_exit(int sock, const ChildReport& r) {
  // Best effort: if the parent is gone there is nobody to tell.
  (void)!::send(sock, &r, sizeof r, MSG_NOSIGNAL);
  _exit(127);
}

// "go" from the parent, with the detached mounts (SCM_RIGHTS) into p.mounts. EOF (the parent
// died) exits quietly.
bool receive_go(const ChildPlan& p, ChildReport* r) {
  char go = 0;
  iovec iov{&go, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxChildMounts)];
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = os::retry_eintr([&] { return ::recvmsg(p.sock, &msg, MSG_CMSG_CLOEXEC); });
  if (n != 1) _exit(126);
  std::size_t got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (got < p.nmounts) p.mounts[got] = fd;
      ++got;
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) || got != p.nmounts) {
    errno = EPROTO;
    return fail(r, "receive the root's mounts from the parent");
  }
  return true;
}

}  // namespace

bool fail(ChildReport* r, const char* what, const char* path) {
  r->err = errno;
  std::size_t len = 0;
  append(r->what, sizeof r->what, &len, what);
  if (path) {
    append(r->what, sizeof r->what, &len, " ");
    append(r->what, sizeof r->what, &len, path);
  }
  return false;
}

void child_main(const ChildPlan& plan) {
  ChildPlan p = plan;  // fds_child may move the report socket
  ChildReport r;

  if (!close_inherited_child(p, &r)) report_and_exit(p.sock, r);
  char closed = 1;  // the parent waits for this (child.h, close_inherited_child)
  if (::send(p.sock, &closed, 1, MSG_NOSIGNAL) != 1) _exit(126);  // the parent died meanwhile
  // Wait until the parent has put us into our cgroups; EOF means it died meanwhile.
  if (!receive_go(p, &r)) report_and_exit(p.sock, r);
  // With a user namespace: become its root, now that the parent wrote the id maps. Raw
  // syscalls: glibc's wrappers would try to signal the parent's threads, which we do not have.
  if (p.userns) {
    if (::syscall(SYS_setresgid, 0, 0, 0) != 0)
      report_and_exit(p.sock, (fail(&r, "setresgid 0"), r));
    if (::syscall(SYS_setgroups, 0, nullptr) != 0)
      report_and_exit(p.sock, (fail(&r, "setgroups"), r));
    if (::syscall(SYS_setresuid, 0, 0, 0) != 0)
      report_and_exit(p.sock, (fail(&r, "setresuid 0"), r));
  }

  // Unshared only now, after the cgroup attach, so the namespace's root is our own group.
  if (::unshare(CLONE_NEWCGROUP) != 0) report_and_exit(p.sock, (fail(&r, "unshare cgroup ns"), r));
  if (!uts_child(p, &r)) report_and_exit(p.sock, r);
  if (!mnt_child(p, &r)) report_and_exit(p.sock, r);
  if (!net_child(p, &r)) report_and_exit(p.sock, r);
  // A new session without a controlling terminal: TIOCSTI into a host tty needs one (E5).
  if (::setsid() < 0) report_and_exit(p.sock, (fail(&r, "setsid"), r));
  if (!rlimit_child(p, &r)) report_and_exit(p.sock, r);
  if (!fds_child(p, &r)) report_and_exit(p.sock, r);
  // no_new_privs only without a user namespace, where sandbox root is host root and a setuid
  // binary must not regain what caps_child drops. In a user namespace a setuid binary (the
  // image's sudo, as in E2B's sandboxes) elevates to the sandbox's root and no further: the
  // namespace confines it, the bounding set below caps it, the filter stays on it, and the API
  // hands that root out anyway.
  if (!p.userns && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    report_and_exit(p.sock, (fail(&r, "prctl PR_SET_NO_NEW_PRIVS"), r));
  // The filter after the steps it would deny (mount and friends), and before caps_child: without
  // no_new_privs, installing it needs CAP_SYS_ADMIN (in our namespace), which we still hold.
  if (!seccomp_child(p, &r)) report_and_exit(p.sock, r);
  if (!caps_child(p, &r)) report_and_exit(p.sock, r);
  if (::chdir(p.cwd) != 0) report_and_exit(p.sock, (fail(&r, "chdir", p.cwd), r));
  // Last, the ids argv runs as: caps_child kept CAP_SETGID and CAP_SETUID for this, and a
  // non-zero uid then loses every capability. Groups before gid before uid: each needs the
  // privilege the next one gives up.
  if (p.set_ids) {
    if (::syscall(SYS_setgroups, p.ngroups, p.groups) != 0)
      report_and_exit(p.sock, (fail(&r, "setgroups"), r));
    if (::syscall(SYS_setresgid, p.gid, p.gid, p.gid) != 0)
      report_and_exit(p.sock, (fail(&r, "setresgid"), r));
    if (::syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0)
      report_and_exit(p.sock, (fail(&r, "setresuid"), r));
  }
  // The companion last: it gets the state argv gets (ids included).
  if (!companion_child(p, &r)) report_and_exit(p.sock, r);
  if (p.exec_sigmask != nullptr &&
      ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, p.exec_sigmask, nullptr, _NSIG / 8) != 0)
    report_and_exit(p.sock, (fail(&r, "restore the signal mask"), r));
  ::execve(p.exe, p.argv, p.envp);
  report_and_exit(p.sock, (fail(&r, "execve", p.exe), r));
}

}  // namespace abx::runtime
