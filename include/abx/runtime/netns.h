// abx::runtime network-namespace sockets: how the host reaches a port inside a sandbox.
//
// A socket belongs to the network namespace it was created in, whatever thread later uses it.
// So the host needs no veth or routing: the calling thread switches into a sandbox's netns
// (setns), creates the socket, and switches back (opening its own netns, two setns and a close:
// about 4 µs more than socket() alone here, where handing the work to a thread of its own cost
// two wake-ups); the connection it then makes goes to 127.0.0.1 *inside* that namespace.
// No thread ever stays in a sandbox's netns: one that cannot switch back aborts the process.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::runtime {

// socket(domain, type | SOCK_CLOEXEC, 0) created inside the netns `netns_fd` refers to, on the
// calling thread. Errors name setns or socket with errno. Thread-safe.
Result<UniqueFd> socket_in_netns(int netns_fd, int domain, int type);

// A non-blocking TCP socket (AF_INET, O_CLOEXEC) made in `netns_fd` (-1: the caller's own netns),
// not connected yet.
Result<UniqueFd> tcp_socket_in(int netns_fd);

// Connects a non-blocking TCP socket made in `netns_fd` (-1: the caller's own netns) to
// 127.0.0.1:`port`. unavailable on ECONNREFUSED, deadline_exceeded after `timeout`. A socket that
// connected to itself (nothing listens and the kernel chose `port` as its source port, which
// happens for a port in the ephemeral range) counts as refused.
Result<UniqueFd> connect_loopback(int netns_fd, std::uint16_t port,
                                  std::chrono::milliseconds timeout);
// The same with a socket made already (tcp_socket_in).
Result<UniqueFd> connect_loopback(UniqueFd sock, std::uint16_t port,
                                  std::chrono::milliseconds timeout);

// Where a connection accepted by a transparent proxy was going before an nftables/iptables
// `redirect` (or DNAT) rewrote it: getsockopt(SOL_IP, SO_ORIGINAL_DST) on the accepted socket.
// IPv4 address and port in host byte order. not_found when the kernel has no NAT record of the
// connection (ENOENT: it was not redirected, or conntrack is not loaded). Note that a connection
// that conntrack tracks but did not rewrite reports its own destination: a proxy must refuse a
// flow whose "original" destination is itself.
Result<std::pair<std::uint32_t, std::uint16_t>> original_destination(int fd);

}  // namespace abx::runtime
