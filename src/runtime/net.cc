// Network namespace step (child: bring lo up) and the host's way into a sandbox's netns.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>  // SO_ORIGINAL_DST
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "abx/base/try.h"
#include "abx/runtime/netns.h"
#include "child.h"
#include "sys.h"

namespace abx::runtime {

bool net_child(const ChildPlan& p, ChildReport* r) {
  if (!p.own_netns) return true;
  // A fresh netns has only lo, and it is down. SIOCSIFFLAGS is all `ip link set lo up` does.
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail(r, "socket for lo");
  ifreq ifr = {};
  ::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0 || fail(r, "ioctl SIOCGIFFLAGS lo");
  if (ok) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    ok = ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0 || fail(r, "ioctl SIOCSIFFLAGS lo up");
  }
  ::close(s);
  return ok;
}

// The calling thread goes into the netns and back: a socket stays in the namespace it was made
// in. Its own netns is opened first, per call (a cached one would be the parent's in a forked
// child), so the thread always returns to where it was.
Result<UniqueFd> socket_in_netns(int netns_fd, int domain, int type) {
  UniqueFd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!home.valid()) return os::errno_error("open /proc/thread-self/ns/net", errno);
  if (::setns(netns_fd, CLONE_NEWNET) != 0) return os::errno_error("setns CLONE_NEWNET", errno);
  const int fd = ::socket(domain, type | SOCK_CLOEXEC, 0);
  const int err = errno;
  // Cannot get home: never let this thread make another socket in the wrong namespace.
  if (::setns(home.get(), CLONE_NEWNET) != 0) ::abort();
  if (fd < 0) return os::errno_error("socket in sandbox netns", err);
  return UniqueFd(fd);
}

Result<UniqueFd> connect_loopback(UniqueFd sock, std::uint16_t port,
                                  std::chrono::milliseconds timeout) {
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string where = "connect 127.0.0.1:" + std::to_string(port);
  // The source port is bound first, never `port` itself. Left to connect(), the kernel may pick
  // `port` as the source while nothing listens on it yet; TCP's simultaneous open then connects
  // the socket to itself, and until it is closed it holds the port the sandbox's server is about
  // to bind (whose bind fails with EADDRINUSE: one create in ~40 of bench/python_create.sh
  // failed so, its server polled for on an even port of the ephemeral range).
  sockaddr_in local = {};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t local_len = sizeof local;
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
    return os::errno_error("bind the source of " + where, errno);
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&local), &local_len) != 0)
    return os::errno_error("getsockname", errno);
  if (local.sin_port == addr.sin_port) {
    // One chance in ~28,000: the caller's next attempt gets a new socket and another port.
    return os::errno_error(where + " (the kernel chose the same source port; try again)",
                           ECONNREFUSED);
  }
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
      errno != EINPROGRESS && errno != EINTR)
    return os::errno_error(where, errno);
  pollfd pfd{sock.get(), POLLOUT, 0};
  int n = os::retry_eintr([&] { return ::poll(&pfd, 1, static_cast<int>(timeout.count())); });
  if (n < 0) return os::errno_error("poll " + where, errno);
  if (n == 0) return Error(ErrorCode::kDeadlineExceeded, where + ": timed out");
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    return os::errno_error("getsockopt SO_ERROR", errno);
  if (err != 0) return os::errno_error(where, err);
  return sock;
}

Result<UniqueFd> tcp_socket_in(int netns_fd) {
  if (netns_fd >= 0) return socket_in_netns(netns_fd, AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return os::errno_error("socket", errno);
  return sock;
}

Result<UniqueFd> connect_loopback(int netns_fd, std::uint16_t port,
                                  std::chrono::milliseconds timeout) {
  ABX_ASSIGN_OR_RETURN(UniqueFd sock, tcp_socket_in(netns_fd));
  return connect_loopback(std::move(sock), port, timeout);
}

Result<std::pair<std::uint32_t, std::uint16_t>> original_destination(int fd) {
  sockaddr_in addr = {};
  socklen_t len = sizeof addr;
  if (::getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &addr, &len) != 0) {
    int err = errno;
    if (err == ENOENT) {
      return not_found("getsockopt SO_ORIGINAL_DST: the connection was not redirected");
    }
    return os::errno_error("getsockopt SO_ORIGINAL_DST", err);
  }
  if (addr.sin_family != AF_INET) {
    return internal_error("getsockopt SO_ORIGINAL_DST: not an IPv4 address");
  }
  return std::pair<std::uint32_t, std::uint16_t>(ntohl(addr.sin_addr.s_addr), ntohs(addr.sin_port));
}

}  // namespace abx::runtime
