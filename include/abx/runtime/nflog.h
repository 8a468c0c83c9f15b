// abx::runtime NFLOG reader: the audit feed of sandbox egress.
//
// abxd's nftables rules log the first packet of every new outbound flow of a sandbox with
// `ct state new log group <G> prefix "abx:<slot>:<verdict>"`, then accept or drop it. The kernel
// (nfnetlink_log) sends each logged packet to whichever netlink socket bound group G in that
// network namespace. NflogReader is that socket; parse_nflog_messages turns what it receives into
// FlowLogEvents (the prefix plus the addresses and ports of the packet), which abxd turns into
// audit events.
//
// One group has one reader per network namespace: a second open() of a group that a live socket
// holds fails with already_exists. Groups and their instances are per netns, so tests run in a
// netns of their own and never see the host's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::runtime {

struct FlowLogEvent {
  std::string prefix;                  // NFULA_PREFIX as sent by the rule (without its NUL)
  std::uint8_t protocol = 0;           // IPPROTO_TCP/UDP/ICMP/... (IPv6: the upper-layer header)
  std::uint32_t src = 0, dst = 0;      // IPv4, host byte order; 0 for IPv6 packets
  std::uint16_t sport = 0, dport = 0;  // 0 when not TCP/UDP (or a non-first fragment)
  // IPv6 packets are reported, not skipped, so a flow the rules logged is never silently lost
  // from the audit log: ipv6 is set, src/dst stay 0 (the struct has no room for 128-bit
  // addresses), and protocol/ports come from the header after any extension headers.
  bool ipv6 = false;
};

// Bytes of each packet the kernel copies into a log message (NFULNL_COPY_PACKET range): enough
// for an IPv4 header with options (60) and a TCP header (20), or an IPv6 header and a few
// extension headers.
inline constexpr std::uint32_t kNflogCopyRange = 128;

// Parses one recv() buffer of nfnetlink messages into events, in order. Pure: no syscalls.
// Only NFULNL_MSG_PACKET messages yield events; NLMSG_DONE/NOOP and acks are ignored. A message
// that cannot be read (truncated header or attribute, no payload, a payload that is not an IP
// header, a non-packet nfnetlink_log message) is skipped and counted in *malformed when that is
// non-null; a length field that runs past the buffer ends the walk (counted once). Never crashes
// on any input; `buf` need not be aligned.
std::vector<FlowLogEvent> parse_nflog_messages(const void* buf, std::size_t len,
                                               std::size_t* malformed = nullptr);

// A NETLINK_NETFILTER socket bound to one nflog group in the caller's network namespace (the
// calling thread's, for a thread that unshared or setns'd its netns). Move-only; destruction
// closes the socket, which releases the group.
class NflogReader {
 public:
  // Opens the socket (SOCK_CLOEXEC|SOCK_NONBLOCK), binds `group` (NFULNL_CFG_CMD_BIND) and sets
  // copy mode NFULNL_COPY_PACKET with kNflogCopyRange bytes, a 100 ms flush timeout and a queue
  // threshold of 16 packets, all in one config request whose ack it waits for (1 s at most).
  // It does not PF_BIND: `log group` rules name the nfnetlink_log logger explicitly, and binding
  // would take over the netns-wide default logger of AF_INET from plain `log` rules and ulogd.
  // Errors: already_exists when another socket holds the group; permission_denied without
  // CAP_NET_ADMIN in the netns; deadline_exceeded when no ack arrives; otherwise the errno's
  // code, with the failing call named in the message.
  static Result<NflogReader> open(std::uint16_t group);

  NflogReader(NflogReader&&) noexcept = default;
  NflogReader& operator=(NflogReader&&) noexcept = default;
  NflogReader(const NflogReader&) = delete;
  NflogReader& operator=(const NflogReader&) = delete;
  ~NflogReader() = default;

  // The socket, for poll(2) or an asio posix::stream_descriptor (wait for readability, then call
  // read()). Owned by the reader: do not close it.
  int fd() const { return fd_.get(); }
  std::uint16_t group() const { return group_; }

  // Reads what is queued without blocking: an empty vector when nothing is. Reads at most 256
  // datagrams per call so a flood cannot starve the caller's event loop; if more are queued the
  // fd stays readable. An overrun of the socket buffer (ENOBUFS: the kernel dropped log messages)
  // is counted in dropped() and reading goes on. Datagrams not sent by the kernel are ignored.
  // Errors: the recv errno, named.
  Result<std::vector<FlowLogEvent>> read();

  // How many times the kernel reported an overrun (each one lost one or more log messages).
  std::uint64_t dropped() const { return dropped_; }
  // Messages parse_nflog_messages skipped as malformed since open().
  std::uint64_t malformed() const { return malformed_; }

 private:
  NflogReader(UniqueFd fd, std::uint16_t group) : fd_(std::move(fd)), group_(group) {}

  UniqueFd fd_;
  std::uint16_t group_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t malformed_ = 0;
  // Events that arrived while open() waited for its ack; read() returns them first.
  std::vector<FlowLogEvent> pending_;
  std::vector<std::uint32_t> buf_;  // the receive buffer, 4-byte aligned for nlmsghdr
};

}  // namespace abx::runtime
