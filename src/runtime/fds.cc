// File descriptor step: the init gets exactly the mapped descriptors plus 0..2 (catalogue E2).
//
// The child inherited a copy of every parent descriptor, CLOEXEC or not (another thread may have
// opened one without it). Mapped sources are first moved above every target so a dup2 onto a
// target never clobbers a source still to be mapped; then everything but the targets and the
// report socket is closed, and the report socket is CLOEXEC so exec closes it too.
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "child.h"

namespace abx::runtime {
namespace {

constexpr std::size_t kMaxFds = kMaxChildFds;

bool close_range_(unsigned first, unsigned last, ChildReport* r) {
  if (first > last) return true;
  if (::syscall(SYS_close_range, first, last, 0) != 0) return fail(r, "close_range");
  return true;
}

}  // namespace

bool close_inherited_child(const ChildPlan& p, ChildReport* r) {
  if (p.nfds > kMaxFds) {
    errno = E2BIG;
    return fail(r, "too many mapped descriptors");
  }
  // Keep 0..2, the report socket and the mapping sources; insertion sort, no allocation.
  unsigned keep[kMaxFds + 1];
  std::size_t n = 0;
  auto add = [&](int fd) {
    if (fd < 3) return;
    std::size_t i = n++;
    while (i > 0 && keep[i - 1] > static_cast<unsigned>(fd)) {
      keep[i] = keep[i - 1];
      --i;
    }
    keep[i] = static_cast<unsigned>(fd);
  };
  add(p.sock);
  for (std::size_t i = 0; i < p.nfds; ++i) add(p.fds[i].parent_fd);
  unsigned next = 3;
  for (std::size_t i = 0; i < n; ++i) {
    if (keep[i] > next && !close_range_(next, keep[i] - 1, r)) return false;
    if (keep[i] + 1 > next) next = keep[i] + 1;
  }
  return close_range_(next, ~0u, r);
}

bool map_fds(const ChildFd* fds, std::size_t n, int top) {
  if (n > kMaxFds) {
    errno = E2BIG;
    return false;
  }
  int high[kMaxFds];
  for (std::size_t i = 0; i < n; ++i) {
    high[i] = ::fcntl(fds[i].parent_fd, F_DUPFD_CLOEXEC, top + 1);
    if (high[i] < 0) return false;
  }
  // dup2 leaves the new descriptor without FD_CLOEXEC: it survives the exec.
  for (std::size_t i = 0; i < n; ++i) {
    if (::dup2(high[i], fds[i].child_fd) < 0) return false;
  }
  return true;
}

bool fds_child(ChildPlan& p, ChildReport* r) {
  if (p.nfds > kMaxFds) {
    errno = E2BIG;
    return fail(r, "too many mapped descriptors");
  }
  int top = 2;
  for (std::size_t i = 0; i < p.nfds; ++i)
    if (p.fds[i].child_fd > top) top = p.fds[i].child_fd;
  // The report socket first, above every target, so that no mapping lands on it.
  int sock = ::fcntl(p.sock, F_DUPFD_CLOEXEC, top + 1);
  if (sock < 0) return fail(r, "dup report socket");
  p.sock = sock;
  if (!map_fds(p.fds, p.nfds, top)) return fail(r, "map descriptors");
  bool mapped[3] = {false, false, false};
  for (std::size_t i = 0; i < p.nfds; ++i) {
    if (p.fds[i].child_fd < 3) mapped[p.fds[i].child_fd] = true;
  }
  for (int fd = 0; fd < 3; ++fd) {
    if (mapped[fd]) continue;
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) return fail(r, "open", "/dev/null");
    if (null != fd && ::dup2(null, fd) < 0) return fail(r, "dup2 /dev/null");
    if (null != fd)
      ::close(null);
    else
      ::fcntl(fd, F_SETFD, 0);
  }
  // Close the gaps between the kept descriptors (targets are sorted by the parent).
  unsigned next = 3;
  for (std::size_t i = 0; i < p.nfds; ++i) {
    auto fd = static_cast<unsigned>(p.fds[i].child_fd);
    if (fd < 3) continue;
    if (fd > next && !close_range_(next, fd - 1, r)) return false;
    next = fd + 1;
  }
  auto s = static_cast<unsigned>(sock);
  if (!close_range_(next, s - 1, r)) return false;
  if (!close_range_(s + 1, ~0u, r)) return false;
  return true;
}

}  // namespace abx::runtime
