// A raw loopback TCP connection, for tests that write HTTP bytes by hand (half-sent requests,
// chunked bodies, upgrades) where a client library would hide what is being tested.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

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

}  // namespace abx::testing
