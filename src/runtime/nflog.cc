// NFLOG: parsing nfnetlink_log packet messages, and the socket that receives them.
#include "abx/runtime/nflog.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>

#include "sys.h"

namespace abx::runtime {

namespace {

constexpr std::uint16_t kPacketType = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
constexpr std::uint16_t kConfigType = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
// Flush a partly filled batch after 100 ms (unit: 1/100 s); flush at once at 16 packets.
constexpr std::uint32_t kFlushTimeout = 10;
constexpr std::uint32_t kQueueThreshold = 16;
// Receive buffer: larger than any nflog batch (the kernel's default batch is NLMSG_GOODSIZE).
constexpr std::size_t kRecvBufWords = 65536 / sizeof(std::uint32_t);
constexpr int kMaxDatagramsPerRead = 256;
constexpr int kSocketRcvBuf = 1 << 20;

std::uint16_t load_be16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return ntohs(v);
}

std::uint32_t load_be32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return ntohl(v);
}

bool has_ports(std::uint8_t proto) { return proto == IPPROTO_TCP || proto == IPPROTO_UDP; }

bool parse_ipv4(const std::uint8_t* p, std::size_t n, FlowLogEvent* ev) {
  if (n < 20) return false;
  std::size_t ihl = static_cast<std::size_t>(p[0] & 0x0f) * 4;
  if (ihl < 20 || ihl > n) return false;
  ev->protocol = p[9];
  ev->src = load_be32(p + 12);
  ev->dst = load_be32(p + 16);
  bool first_fragment = (load_be16(p + 6) & 0x1fff) == 0;
  if (first_fragment && has_ports(ev->protocol) && n >= ihl + 4) {
    ev->sport = load_be16(p + ihl);
    ev->dport = load_be16(p + ihl + 2);
  }
  return true;
}

// Walks the extension headers a logged first packet may carry. When the copy range cuts a
// header short, the event keeps the last header type it could read and no ports.
bool parse_ipv6(const std::uint8_t* p, std::size_t n, FlowLogEvent* ev) {
  if (n < 40) return false;
  ev->ipv6 = true;
  std::uint8_t next = p[6];
  std::size_t off = 40;
  for (int i = 0; i < 8; ++i) {
    std::size_t hdr_len = 0;
    switch (next) {
      case IPPROTO_HOPOPTS:
      case IPPROTO_ROUTING:
      case IPPROTO_DSTOPTS:
        if (off + 2 > n) break;
        hdr_len = (static_cast<std::size_t>(p[off + 1]) + 1) * 8;
        break;
      case IPPROTO_AH:
        if (off + 2 > n) break;
        hdr_len = (static_cast<std::size_t>(p[off + 1]) + 2) * 4;
        break;
      case IPPROTO_FRAGMENT:
        if (off + 8 > n) break;
        if ((load_be16(p + off + 2) & 0xfff8) != 0) {  // not the first fragment: no L4 header
          ev->protocol = p[off];
          return true;
        }
        hdr_len = 8;
        break;
      default:
        break;
    }
    if (hdr_len == 0) break;
    next = p[off];
    off += hdr_len;
  }
  ev->protocol = next;
  if (has_ports(next) && off + 4 <= n) {
    ev->sport = load_be16(p + off);
    ev->dport = load_be16(p + off + 2);
  }
  return true;
}

// One NFULNL_MSG_PACKET message; false when it is malformed.
bool parse_packet(const nlmsghdr* nlh, FlowLogEvent* ev) {
  std::size_t attrs_at = NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg));
  if (nlh->nlmsg_len < attrs_at) return false;
  const auto* base = reinterpret_cast<const std::uint8_t*>(nlh);
  const std::uint8_t* pos = base + attrs_at;
  const std::uint8_t* end = base + nlh->nlmsg_len;
  const std::uint8_t* payload = nullptr;
  std::size_t payload_len = 0;
  // By hand rather than mnl_attr_for_each, which stops quietly at a truncated attribute.
  while (end - pos > 0) {
    const auto* attr = reinterpret_cast<const nlattr*>(pos);
    if (!mnl_attr_ok(attr, static_cast<int>(end - pos))) return false;
    const auto* data = static_cast<const std::uint8_t*>(mnl_attr_get_payload(attr));
    std::size_t data_len = mnl_attr_get_payload_len(attr);
    switch (mnl_attr_get_type(attr)) {
      case NFULA_PREFIX: {
        const void* nul = std::memchr(data, 0, data_len);
        std::size_t n =
            nul ? static_cast<std::size_t>(static_cast<const std::uint8_t*>(nul) - data) : data_len;
        ev->prefix.assign(reinterpret_cast<const char*>(data), n);
        break;
      }
      case NFULA_PAYLOAD:
        payload = data;
        payload_len = data_len;
        break;
      default:  // metadata abx does not use, and attributes newer than this code
        break;
    }
    // The last attribute may be unpadded; pos then steps past end and the loop ends.
    std::size_t step = MNL_ALIGN(attr->nla_len);
    if (step >= static_cast<std::size_t>(end - pos)) break;
    pos += step;
  }
  if (payload == nullptr || payload_len == 0) return false;
  switch (payload[0] >> 4) {
    case 4:
      return parse_ipv4(payload, payload_len, ev);
    case 6:
      return parse_ipv6(payload, payload_len, ev);
    default:
      return false;
  }
}

// Calls f(nlh) for each complete message in buf; returns false when a length field runs past
// the buffer or trailing bytes are left (the rest of the buffer cannot be walked). Not
// mnl_nlmsg_ok/next: they compare nlmsg_len as an int, so a length of 2^31 or more passes the
// check and the walk jumps out of the buffer (found by the fuzz target).
template <class F>
bool for_each_message(const void* buf, std::size_t len, F f) {
  const auto* pos = static_cast<const std::uint8_t*>(buf);
  std::size_t left = len;
  while (left >= sizeof(nlmsghdr)) {
    const auto* nlh = reinterpret_cast<const nlmsghdr*>(pos);
    if (nlh->nlmsg_len < sizeof(nlmsghdr) || nlh->nlmsg_len > left) return false;
    f(nlh);
    // The last message may be unpadded.
    std::size_t step = MNL_ALIGN(static_cast<std::size_t>(nlh->nlmsg_len));
    if (step >= left) return true;
    pos += step;
    left -= step;
  }
  return left == 0;
}

// Error and ack: the errno of the NLMSG_ERROR answering `seq` in buf (0 for an ack).
std::optional<int> find_ack(const void* buf, std::size_t len, std::uint32_t seq) {
  std::optional<int> result;
  (void)for_each_message(buf, len, [&](const nlmsghdr* nlh) {
    if (nlh->nlmsg_type != NLMSG_ERROR || nlh->nlmsg_seq != seq) return;
    if (nlh->nlmsg_len < NLMSG_HDRLEN + sizeof(nlmsgerr)) return;
    const auto* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
    result = -err->error;
  });
  return result;
}

// EPERM from BIND means either no CAP_NET_ADMIN or a group another socket holds; the kernel's
// instance table (per netns, so the calling thread's view) tells them apart.
bool group_is_held(std::uint16_t group) {
  auto table = read_file("/proc/thread-self/net/netfilter/nfnetlink_log");
  if (!table.ok()) return false;
  std::size_t pos = 0;
  while (pos < table->size()) {
    std::size_t eol = table->find('\n', pos);
    if (eol == std::string::npos) eol = table->size();
    unsigned long g = 0;
    if (std::sscanf(table->c_str() + pos, "%lu", &g) == 1 && g == group) return true;
    pos = eol + 1;
  }
  return false;
}

Error bind_error(std::uint16_t group, int err) {
  std::string what = "nflog bind group " + std::to_string(group);
  if (err == EBUSY || (err == EPERM && group_is_held(group)))
    return Error(ErrorCode::kAlreadyExists, what + ": held by another socket");
  return os::errno_error(what, err);
}

// BIND and the mode in one request: the instance never exists with the kernel's defaults
// (whole packets, 1 s batches) as far as our socket can observe. Written into `req`.
constexpr std::size_t kConfigRequestBytes = 256;  // the request is about 64 bytes
nlmsghdr* put_config_request(char* req, std::uint16_t group) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(req);
  nlh->nlmsg_type = kConfigType;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = static_cast<std::uint32_t>(::time(nullptr));
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = AF_UNSPEC;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = htons(group);
  nfulnl_msg_config_cmd cmd = {};
  cmd.command = NFULNL_CFG_CMD_BIND;
  mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof cmd, &cmd);
  nfulnl_msg_config_mode mode = {};
  mode.copy_range = htonl(kNflogCopyRange);
  mode.copy_mode = NFULNL_COPY_PACKET;
  mnl_attr_put(nlh, NFULA_CFG_MODE, sizeof mode, &mode);
  mnl_attr_put_u32(nlh, NFULA_CFG_TIMEOUT, htonl(kFlushTimeout));
  mnl_attr_put_u32(nlh, NFULA_CFG_QTHRESH, htonl(kQueueThreshold));
  return nlh;
}

}  // namespace

std::vector<FlowLogEvent> parse_nflog_messages(const void* buf, std::size_t len,
                                               std::size_t* malformed) {
  std::vector<FlowLogEvent> events;
  std::size_t bad = 0;
  if (buf == nullptr) len = 0;
  // One recv() is at most a few MiB (the socket's buffer); anything larger is not a batch.
  constexpr std::size_t kMaxBatch = std::size_t{1} << 26;
  if (len > kMaxBatch) {
    if (malformed != nullptr) *malformed = 1;
    return events;
  }
  // nlmsghdr and nlattr are read in place, so an unaligned buffer is copied first.
  std::vector<std::uint32_t> aligned;
  if (len > 0 && reinterpret_cast<std::uintptr_t>(buf) % alignof(nlmsghdr) != 0) {
    aligned.resize((len + sizeof(std::uint32_t) - 1) / sizeof(std::uint32_t));
    std::memcpy(aligned.data(), buf, len);
    buf = aligned.data();
  }
  bool whole = for_each_message(buf, len, [&](const nlmsghdr* nlh) {
    if (nlh->nlmsg_type < NLMSG_MIN_TYPE) return;  // NOOP, DONE, an ack or error, OVERRUN
    FlowLogEvent ev;
    if (nlh->nlmsg_type == kPacketType && parse_packet(nlh, &ev)) {
      events.push_back(std::move(ev));
    } else {
      ++bad;
    }
  });
  if (!whole) ++bad;
  if (malformed != nullptr) *malformed = bad;
  return events;
}

Result<NflogReader> NflogReader::open(std::uint16_t group) {
  int raw = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_NETFILTER);
  if (raw < 0) return os::errno_error("socket NETLINK_NETFILTER", errno);
  NflogReader reader(UniqueFd(raw), group);
  int fd = reader.fd();

  sockaddr_nl local = {};
  local.nl_family = AF_NETLINK;  // nl_pid 0: the kernel assigns the port id
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) < 0)
    return os::errno_error("bind netlink", errno);
  // A bigger buffer than the default rides out bursts of new flows while abxd is busy. FORCE
  // passes rmem_max when privileged; otherwise the plain option is capped by it.
  int rcvbuf = kSocketRcvBuf;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);

  alignas(nlmsghdr) char req[kConfigRequestBytes];
  nlmsghdr* nlh = put_config_request(req, group);

  sockaddr_nl kernel = {};
  kernel.nl_family = AF_NETLINK;
  ssize_t sent = os::retry_eintr([&] {
    return ::sendto(fd, nlh, nlh->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
                    sizeof kernel);
  });
  if (sent < 0) return os::errno_error("send nflog config", errno);

  // The kernel answers during sendto, so the ack is normally queued already. Log messages for
  // the freshly bound group may come first; they are kept for the first read().
  reader.buf_.resize(kRecvBufWords);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Error(ErrorCode::kDeadlineExceeded, "nflog config: no ack");
    pollfd pfd = {fd, POLLIN, 0};
    int ready = os::retry_eintr([&] { return ::poll(&pfd, 1, static_cast<int>(left.count())); });
    if (ready < 0) return os::errno_error("poll nflog", errno);
    if (ready == 0) continue;
    sockaddr_nl from = {};
    socklen_t from_len = sizeof from;
    std::size_t cap = reader.buf_.size() * sizeof(std::uint32_t);
    ssize_t n = os::retry_eintr([&] {
      return ::recvfrom(fd, reader.buf_.data(), cap, 0, reinterpret_cast<sockaddr*>(&from),
                        &from_len);
    });
    if (n < 0) {
      if (errno == EAGAIN) continue;
      if (errno == ENOBUFS) {
        ++reader.dropped_;
        continue;
      }
      return os::errno_error("recv nflog", errno);
    }
    if (from.nl_pid != 0) continue;
    auto len = std::min(static_cast<std::size_t>(n), cap);
    if (auto err = find_ack(reader.buf_.data(), len, nlh->nlmsg_seq)) {
      if (*err != 0) return bind_error(group, *err);
      return reader;
    }
    std::size_t bad = 0;
    auto events = parse_nflog_messages(reader.buf_.data(), len, &bad);
    reader.malformed_ += bad;
    reader.pending_.insert(reader.pending_.end(), std::make_move_iterator(events.begin()),
                           std::make_move_iterator(events.end()));
  }
}

Result<std::vector<FlowLogEvent>> NflogReader::read() {
  std::vector<FlowLogEvent> out = std::move(pending_);
  pending_.clear();
  std::size_t cap = buf_.size() * sizeof(std::uint32_t);
  for (int i = 0; i < kMaxDatagramsPerRead; ++i) {
    sockaddr_nl from = {};
    socklen_t from_len = sizeof from;
    ssize_t n = os::retry_eintr([&] {
      return ::recvfrom(fd_.get(), buf_.data(), cap, MSG_DONTWAIT,
                        reinterpret_cast<sockaddr*>(&from), &from_len);
    });
    if (n < 0) {
      if (errno == EAGAIN) break;
      if (errno == ENOBUFS) {  // the kernel dropped messages; what is queued is still good
        ++dropped_;
        continue;
      }
      int err = errno;
      pending_ = std::move(out);  // not lost: the next read() returns them
      return os::errno_error("recv nflog", err);
    }
    if (from.nl_pid != 0) continue;  // only the kernel logs packets
    std::size_t bad = 0;
    auto events = parse_nflog_messages(buf_.data(), static_cast<std::size_t>(n), &bad);
    malformed_ += bad;
    out.insert(out.end(), std::make_move_iterator(events.begin()),
               std::make_move_iterator(events.end()));
  }
  return out;
}

}  // namespace abx::runtime
