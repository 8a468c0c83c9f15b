// A raw loopback TCP connection, for tests that write HTTP bytes by hand (half-sent requests,
// chunked bodies, upgrades) where a client library would hide what is being tested.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstdint>

#include "abx/base/fd.h"

namespace abx::testing {

// A blocking connection to 127.0.0.1:port whose reads give up after `recv_timeout` (so a test
// that waits for bytes that never come fails instead of hanging); invalid when connect fails.
inline UniqueFd connect_raw(std::uint16_t port, std::chrono::seconds recv_timeout) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return {};
  timeval tv{static_cast<time_t>(recv_timeout.count()), 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Whether a TCP connection to `ip` (host byte order):`port` is made within `timeout` (refused,
// or its SYN dropped by a firewall rule: not). For the tests of what the rules let through.
inline bool tcp_connects(std::uint32_t ip, std::uint16_t port,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(1000)) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return true;
  if (errno != EINPROGRESS) return false;
  pollfd p{fd.get(), POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
  int err = 0;
  socklen_t len = sizeof err;
  return ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

}  // namespace abx::testing
