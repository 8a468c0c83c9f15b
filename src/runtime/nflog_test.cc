// NFLOG tests: the parser on hand-built messages, and the reader against real nftables `log
// group` rules inside a network namespace the test creates (so no host state is touched).
#include "abx/runtime/nflog.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace abx::runtime {
namespace {

// ---- Hand-built messages -------------------------------------------------------------------

std::vector<std::uint8_t> ipv4_packet(std::uint8_t proto, const char* src, const char* dst,
                                      std::uint16_t sport, std::uint16_t dport,
                                      std::size_t options = 0, std::uint16_t frag = 0) {
  std::vector<std::uint8_t> p(20 + options + 8, 0);
  p[0] = static_cast<std::uint8_t>(0x40 | ((20 + options) / 4));
  p[6] = static_cast<std::uint8_t>(frag >> 8);
  p[7] = static_cast<std::uint8_t>(frag & 0xff);
  p[8] = 64;
  p[9] = proto;
  ::inet_pton(AF_INET, src, &p[12]);
  ::inet_pton(AF_INET, dst, &p[16]);
  std::size_t l4 = 20 + options;
  p[l4] = static_cast<std::uint8_t>(sport >> 8);
  p[l4 + 1] = static_cast<std::uint8_t>(sport & 0xff);
  p[l4 + 2] = static_cast<std::uint8_t>(dport >> 8);
  p[l4 + 3] = static_cast<std::uint8_t>(dport & 0xff);
  return p;
}

std::uint32_t ip(const char* s) {
  in_addr a = {};
  ::inet_pton(AF_INET, s, &a);
  return ntohl(a.s_addr);
}

// Appends one NFULNL_MSG_PACKET message to `out` (4-byte aligned, as the kernel sends them).
void append_packet(std::vector<std::uint32_t>* out, const std::string& prefix,
                   const std::vector<std::uint8_t>& payload, bool with_nul = true,
                   std::uint16_t flags = 0) {
  alignas(nlmsghdr) char buf[1024] = {};
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
  nlh->nlmsg_flags = flags;
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = AF_INET;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = htons(1000);
  nfulnl_msg_packet_hdr hdr = {};
  hdr.hw_protocol = htons(0x0800);
  hdr.hook = 3;
  mnl_attr_put(nlh, NFULA_PACKET_HDR, sizeof hdr, &hdr);
  mnl_attr_put_u32(nlh, NFULA_IFINDEX_OUTDEV, htonl(1));
  if (!payload.empty()) mnl_attr_put(nlh, NFULA_PAYLOAD, payload.size(), payload.data());
  if (with_nul) {
    mnl_attr_put_strz(nlh, NFULA_PREFIX, prefix.c_str());
  } else {
    mnl_attr_put(nlh, NFULA_PREFIX, prefix.size(), prefix.data());
  }
  std::size_t words = MNL_ALIGN(nlh->nlmsg_len) / 4;
  std::size_t at = out->size();
  out->resize(at + words);
  std::memcpy(out->data() + at, buf, words * 4);
}

void append_done(std::vector<std::uint32_t>* out) {
  alignas(nlmsghdr) char buf[64] = {};
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = NLMSG_DONE;
  nlh->nlmsg_flags = NLM_F_MULTI;
  std::size_t at = out->size();
  out->resize(at + nlh->nlmsg_len / 4);
  std::memcpy(out->data() + at, buf, nlh->nlmsg_len);
}

std::vector<FlowLogEvent> parse(const std::vector<std::uint32_t>& msgs, std::size_t* malformed,
                                std::size_t len = SIZE_MAX) {
  return parse_nflog_messages(msgs.data(), std::min(len, msgs.size() * 4), malformed);
}

TEST(NflogParse, UdpV4) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:7:deny", ipv4_packet(IPPROTO_UDP, "10.0.0.2", "1.2.3.4", 40000, 53));
  std::size_t bad = 9;
  auto ev = parse(m, &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].prefix, "abx:7:deny");
  EXPECT_EQ(ev[0].protocol, IPPROTO_UDP);
  EXPECT_EQ(ev[0].src, ip("10.0.0.2"));
  EXPECT_EQ(ev[0].dst, ip("1.2.3.4"));
  EXPECT_EQ(ev[0].sport, 40000);
  EXPECT_EQ(ev[0].dport, 53);
  EXPECT_FALSE(ev[0].ipv6);
}

TEST(NflogParse, TcpWithIpOptionsAndIcmp) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:8:allow",
                ipv4_packet(IPPROTO_TCP, "10.0.0.2", "93.184.216.34", 51000, 443, 8));
  append_packet(&m, "abx:8:allow", ipv4_packet(IPPROTO_ICMP, "10.0.0.2", "8.8.8.8", 0x0800, 7));
  std::size_t bad = 9;
  auto ev = parse(m, &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].protocol, IPPROTO_TCP);
  EXPECT_EQ(ev[0].dst, ip("93.184.216.34"));
  EXPECT_EQ(ev[0].sport, 51000);
  EXPECT_EQ(ev[0].dport, 443);
  EXPECT_EQ(ev[1].protocol, IPPROTO_ICMP);
  EXPECT_EQ(ev[1].dst, ip("8.8.8.8"));
  EXPECT_EQ(ev[1].sport, 0);  // not TCP/UDP: no ports
  EXPECT_EQ(ev[1].dport, 0);
}

TEST(NflogParse, LaterFragmentHasNoPorts) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:1:allow",
                ipv4_packet(IPPROTO_UDP, "10.0.0.2", "1.1.1.1", 1234, 5678, 0, 185));
  std::size_t bad = 9;
  auto ev = parse(m, &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].protocol, IPPROTO_UDP);
  EXPECT_EQ(ev[0].dport, 0);
}

TEST(NflogParse, Ipv6IsFlaggedWithPortsPastExtensionHeaders) {
  std::vector<std::uint8_t> p(40 + 8 + 8, 0);
  p[0] = 0x60;
  p[6] = IPPROTO_HOPOPTS;
  p[40] = IPPROTO_TCP;  // hop-by-hop: next header, length 0 (8 bytes)
  p[48] = 0x01;
  p[49] = 0xbb;  // sport 443
  p[50] = 0x1f;
  p[51] = 0x90;  // dport 8080
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:3:deny", p);
  std::size_t bad = 9;
  auto ev = parse(m, &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].ipv6);
  EXPECT_EQ(ev[0].src, 0u);
  EXPECT_EQ(ev[0].protocol, IPPROTO_TCP);
  EXPECT_EQ(ev[0].sport, 443);
  EXPECT_EQ(ev[0].dport, 8080);
  EXPECT_EQ(ev[0].prefix, "abx:3:deny");
}

TEST(NflogParse, MultipartBatchWithDoneAndUnterminatedPrefix) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:1:allow", ipv4_packet(IPPROTO_UDP, "10.0.0.2", "1.1.1.1", 1, 2), true,
                NLM_F_MULTI);
  append_packet(&m, "abx:2:deny", ipv4_packet(IPPROTO_TCP, "10.0.0.3", "1.1.1.2", 3, 4), false,
                NLM_F_MULTI);
  append_done(&m);
  std::size_t bad = 9;
  auto ev = parse(m, &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].prefix, "abx:1:allow");
  EXPECT_EQ(ev[1].prefix, "abx:2:deny");
  EXPECT_EQ(ev[1].dport, 4);
}

TEST(NflogParse, MalformedMessagesAreSkippedAndCounted) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:1:allow", {});  // no payload
  std::vector<std::uint8_t> not_ip(24, 0x55);
  append_packet(&m, "abx:1:allow", not_ip);  // version 5
  std::vector<std::uint8_t> short_ip = ipv4_packet(IPPROTO_UDP, "1.1.1.1", "2.2.2.2", 1, 2);
  short_ip.resize(12);  // shorter than an IPv4 header
  append_packet(&m, "abx:1:allow", short_ip);
  std::size_t good_at = m.size();
  append_packet(&m, "abx:9:allow", ipv4_packet(IPPROTO_UDP, "10.0.0.9", "9.9.9.9", 9, 99));
  std::size_t bad = 0;
  auto ev = parse(m, &bad);
  EXPECT_EQ(bad, 3u);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].prefix, "abx:9:allow");
  EXPECT_EQ(ev[0].dport, 99);
  EXPECT_GT(good_at, 0u);
}

TEST(NflogParse, TruncatedAttributeSkipsOnlyThatMessage) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:1:allow", ipv4_packet(IPPROTO_UDP, "10.0.0.2", "1.1.1.1", 1, 2));
  // Make the first message's last attribute (the prefix) claim more bytes than the message has.
  auto* bytes = reinterpret_cast<std::uint8_t*>(m.data());
  auto* nlh = reinterpret_cast<nlmsghdr*>(bytes);
  std::size_t last_attr = 0;
  for (std::size_t off = NLMSG_HDRLEN + MNL_ALIGN(sizeof(nfgenmsg)); off < nlh->nlmsg_len;) {
    last_attr = off;
    off += MNL_ALIGN(reinterpret_cast<nlattr*>(bytes + off)->nla_len);
  }
  reinterpret_cast<nlattr*>(bytes + last_attr)->nla_len = 200;
  append_packet(&m, "abx:2:deny", ipv4_packet(IPPROTO_UDP, "10.0.0.2", "2.2.2.2", 3, 4));
  std::size_t bad = 0;
  auto ev = parse(m, &bad);
  EXPECT_EQ(bad, 1u);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].prefix, "abx:2:deny");
}

TEST(NflogParse, TruncatedBufferEndsTheWalk) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:1:allow", ipv4_packet(IPPROTO_UDP, "10.0.0.2", "1.1.1.1", 1, 2));
  std::size_t first = m.size() * 4;
  append_packet(&m, "abx:2:deny", ipv4_packet(IPPROTO_UDP, "10.0.0.2", "2.2.2.2", 3, 4));
  for (std::size_t cut : {first + 3, first + 20, m.size() * 4 - 1}) {
    std::size_t bad = 0;
    auto ev = parse(m, &bad, cut);
    EXPECT_EQ(bad, 1u) << cut;
    ASSERT_EQ(ev.size(), 1u) << cut;
    EXPECT_EQ(ev[0].prefix, "abx:1:allow");
  }
  // A length of 2^31 or more must not pass as a negative int (libmnl's mnl_nlmsg_ok does that).
  for (std::uint32_t huge : {0x80000000u, 0xfffffffeu}) {
    std::vector<std::uint32_t> big = m;
    reinterpret_cast<nlmsghdr*>(big.data() + first / 4)->nlmsg_len = huge;
    std::size_t bad = 0;
    auto ev = parse(big, &bad);
    EXPECT_EQ(bad, 1u) << huge;
    EXPECT_EQ(ev.size(), 1u) << huge;
  }
  std::size_t bad = 9;
  EXPECT_TRUE(parse_nflog_messages(nullptr, 0, &bad).empty());
  EXPECT_EQ(bad, 0u);
  EXPECT_TRUE(parse_nflog_messages(m.data(), 0, &bad).empty());
  EXPECT_EQ(bad, 0u);
}

TEST(NflogParse, UnalignedBufferParsesTheSame) {
  std::vector<std::uint32_t> m;
  append_packet(&m, "abx:7:deny", ipv4_packet(IPPROTO_UDP, "10.0.0.2", "1.2.3.4", 40000, 53));
  std::vector<std::uint8_t> shifted(m.size() * 4 + 1);
  std::memcpy(shifted.data() + 1, m.data(), m.size() * 4);
  std::size_t bad = 9;
  auto ev = parse_nflog_messages(shifted.data() + 1, m.size() * 4, &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].dst, ip("1.2.3.4"));
  EXPECT_EQ(ev[0].dport, 53);
}

// ---- Real kernel messages, captured once into the fuzz seed corpus -----------------------------

// The corpus files are datagrams a NETLINK_NETFILTER socket received from kernel 6.18 for the
// rules of LogsNewFlowsFromNftablesRules (plus ICMP and IPv6 rules), copy range 128.
std::vector<FlowLogEvent> parse_seed(const char* name, std::size_t* malformed) {
  std::string path = std::string(ABX_RUNTIME_SOURCE_DIR) + "/corpus/nflog/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::uint32_t> aligned((bytes.size() + 3) / 4);
  std::memcpy(aligned.data(), bytes.data(), bytes.size());
  return parse_nflog_messages(aligned.data(), bytes.size(), malformed);
}

TEST(NflogParse, CapturedKernelMessages) {
  std::size_t bad = 9;
  auto udp = parse_seed("udp_deny", &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(udp.size(), 1u);
  EXPECT_EQ(udp[0].prefix, "abx:7:deny");
  EXPECT_EQ(udp[0].protocol, IPPROTO_UDP);
  EXPECT_EQ(udp[0].src, ip("127.0.0.1"));
  EXPECT_EQ(udp[0].dst, ip("127.0.0.77"));
  EXPECT_EQ(udp[0].dport, 9);

  auto tcp = parse_seed("tcp_allow", &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(tcp.size(), 1u);
  EXPECT_EQ(tcp[0].prefix, "abx:8:allow");
  EXPECT_EQ(tcp[0].protocol, IPPROTO_TCP);
  EXPECT_EQ(tcp[0].dst, ip("127.0.0.78"));
  EXPECT_EQ(tcp[0].dport, 80);
  EXPECT_NE(tcp[0].sport, 0);

  auto icmp = parse_seed("icmp_allow", &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(icmp.size(), 1u);
  EXPECT_EQ(icmp[0].prefix, "abx:9:allow");
  EXPECT_EQ(icmp[0].protocol, IPPROTO_ICMP);
  EXPECT_EQ(icmp[0].dst, ip("127.0.0.79"));
  EXPECT_EQ(icmp[0].dport, 0);

  auto v6 = parse_seed("udp6_deny", &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0].prefix, "abx:6:deny");
  EXPECT_TRUE(v6[0].ipv6);
  EXPECT_EQ(v6[0].protocol, IPPROTO_UDP);
  EXPECT_EQ(v6[0].dport, 53);
  EXPECT_EQ(v6[0].dst, 0u);

  // Four packets flushed together, ended by NLMSG_DONE.
  auto batch = parse_seed("batch", &bad);
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(batch.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(batch[i].dport, 80) << i;
  EXPECT_EQ(batch[3].prefix, "abx:7:deny");

  auto cut = parse_seed("batch_truncated", &bad);
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(cut.size(), 2u);

  auto bad_attr = parse_seed("tcp_bad_attr_len", &bad);
  EXPECT_EQ(bad, 1u);
  EXPECT_TRUE(bad_attr.empty());
}

// ---- The reader against real rules, in a network namespace of its own ----------------------

// Runs `nft -f -` with `script` on stdin, in the calling thread's network namespace (a spawned
// child takes the netns of the thread that spawns it). Returns the exit status, -1 on failure.
int run_nft(const std::string& script) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[0], 0);
  char arg0[] = "nft", arg1[] = "-f", arg2[] = "-";
  char* argv[] = {arg0, arg1, arg2, nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, "nft", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[0]);
  if (rc != 0) {
    ::close(pipefd[1]);
    return -1;
  }
  (void)!::write(pipefd[1], script.data(), script.size());
  ::close(pipefd[1]);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool nft_available() {
  for (const char* dir : {"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"})
    if (::access(dir, X_OK) == 0) return true;
  return false;
}

// Deletes the test's table when the scenario ends, however it ends.
class TableGuard {
 public:
  explicit TableGuard(std::string name) : name_(std::move(name)) {}
  TableGuard(const TableGuard&) = delete;
  TableGuard& operator=(const TableGuard&) = delete;
  ~TableGuard() { (void)run_nft("delete table inet " + name_ + "\n"); }

 private:
  std::string name_;
};

// Gives the calling thread a fresh network namespace with lo up. Only this thread moves.
bool enter_fresh_netns() {
  if (::unshare(CLONE_NEWNET) != 0) return false;
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  ifreq ifr = {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  ok = ok && ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
  ::close(s);
  return ok;
}

std::uint16_t test_group() { return static_cast<std::uint16_t>(1000 + ::getpid() % 30000); }

// Polls the reader until `want` events arrived or 3 s passed (the flush timeout is 100 ms).
std::vector<FlowLogEvent> collect(NflogReader& reader, std::size_t want) {
  std::vector<FlowLogEvent> got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd = {reader.fd(), POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    auto r = reader.read();
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    if (!r.ok()) break;
    got.insert(got.end(), r->begin(), r->end());
  }
  return got;
}

// Runs `body` on a thread of its own that first moved into a fresh netns.
template <class F>
void in_fresh_netns(F body) {
  std::thread t([&] {
    if (!enter_fresh_netns()) {
      ADD_FAILURE() << "unshare(CLONE_NEWNET) or lo up failed: " << std::strerror(errno);
      return;
    }
    body();
  });
  t.join();
}

class NflogReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_NET_ADMIN) for nftables and nflog";
    if (!nft_available()) GTEST_SKIP() << "the nft tool is not installed";
  }
};

TEST_F(NflogReaderTest, LogsNewFlowsFromNftablesRules) {
  in_fresh_netns([] {
    std::uint16_t group = test_group();
    auto reader = NflogReader::open(group);
    ASSERT_TRUE(reader.ok()) << reader.error().to_string();
    EXPECT_EQ(reader->group(), group);
    auto empty = reader->read();
    ASSERT_TRUE(empty.ok());
    EXPECT_TRUE(empty->empty());

    std::string table = "abxtest_nflog_" + std::to_string(::getpid());
    std::string g = std::to_string(group);
    TableGuard guard(table);
    ASSERT_EQ(run_nft("table inet " + table +
                      " {\n chain out {\n  type filter hook output priority 0;\n" +
                      "  ct state new ip daddr 127.0.0.77 udp dport 9 log group " + g +
                      " prefix \"abx:7:deny\" drop\n" +
                      "  ct state new ip daddr 127.0.0.78 tcp dport 80 log group " + g +
                      " prefix \"abx:8:allow\" accept\n }\n}\n"),
              0);

    // The UDP datagram is dropped (sendto reports EPERM); the SYN is accepted and, with no
    // listener, answered by a reset. Both are new flows, so both are logged.
    int u = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(u, 0);
    sockaddr_in to = {};
    to.sin_family = AF_INET;
    to.sin_port = htons(9);
    to.sin_addr.s_addr = htonl(ip("127.0.0.77"));
    (void)::sendto(u, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    ::close(u);
    int t = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ASSERT_GE(t, 0);
    to.sin_port = htons(80);
    to.sin_addr.s_addr = htonl(ip("127.0.0.78"));
    (void)::connect(t, reinterpret_cast<sockaddr*>(&to), sizeof to);

    auto events = collect(*reader, 2);
    ::close(t);
    ASSERT_EQ(events.size(), 2u);
    const FlowLogEvent* udp = nullptr;
    const FlowLogEvent* tcp = nullptr;
    for (const auto& ev : events) (ev.protocol == IPPROTO_UDP ? udp : tcp) = &ev;
    ASSERT_NE(udp, nullptr);
    ASSERT_NE(tcp, nullptr);
    EXPECT_EQ(udp->prefix, "abx:7:deny");
    EXPECT_EQ(udp->dst, ip("127.0.0.77"));
    EXPECT_EQ(udp->dport, 9);
    EXPECT_NE(udp->sport, 0);
    EXPECT_EQ(tcp->prefix, "abx:8:allow");
    EXPECT_EQ(tcp->protocol, IPPROTO_TCP);
    EXPECT_EQ(tcp->dst, ip("127.0.0.78"));
    EXPECT_EQ(tcp->dport, 80);
    EXPECT_EQ(tcp->src >> 24, 127u);
    EXPECT_FALSE(tcp->ipv6);
    EXPECT_EQ(reader->dropped(), 0u);
    EXPECT_EQ(reader->malformed(), 0u);
  });
}

TEST_F(NflogReaderTest, GroupHasOneReader) {
  in_fresh_netns([] {
    std::uint16_t group = test_group();
    auto first = NflogReader::open(group);
    ASSERT_TRUE(first.ok()) << first.error().to_string();
    auto second = NflogReader::open(group);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.error().code(), ErrorCode::kAlreadyExists) << second.error().to_string();

    // Moving keeps the binding; closing the holder frees the group.
    NflogReader moved = std::move(*first);
    EXPECT_GE(moved.fd(), 0);
    { NflogReader gone = std::move(moved); }
    auto third = NflogReader::open(group);
    EXPECT_TRUE(third.ok()) << third.error().to_string();
  });
}

}  // namespace
}  // namespace abx::runtime
