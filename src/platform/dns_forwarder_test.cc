// The DNS forwarder against a fake upstream resolver on 127.0.0.1 (UDP and TCP), driven by plain
// POSIX sockets from the test; no root needed.
#include "dns_forwarder.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>

#include "abx/egress/dns.h"

namespace abx::platform {
namespace {

namespace asio = boost::asio;
namespace dns = abx::egress::dns;
using asio::ip::tcp;
using asio::ip::udp;
using Bytes = std::vector<std::uint8_t>;
using namespace std::chrono_literals;

constexpr std::uint32_t kLocalhost = 0x7f000001;
const std::vector<std::uint32_t> kChainA{0xc0000201, 0xc0000202};  // 192.0.2.1, 192.0.2.2

void add16(Bytes& m, unsigned v) {
  m.push_back(static_cast<std::uint8_t>(v >> 8));
  m.push_back(static_cast<std::uint8_t>(v & 0xff));
}
void add_name(Bytes& m, std::string_view dotted) {
  while (!dotted.empty()) {
    auto dot = dotted.find('.');
    auto label = dotted.substr(0, dot);
    m.push_back(static_cast<std::uint8_t>(label.size()));
    m.insert(m.end(), label.begin(), label.end());
    dotted = dot == std::string_view::npos ? std::string_view{} : dotted.substr(dot + 1);
  }
  m.push_back(0);
}
// An RR after its owner: type, class IN, ttl, rdata.
void add_rr(Bytes& m, unsigned type, std::uint32_t ttl, const Bytes& rdata) {
  add16(m, type);
  add16(m, dns::kClassIn);
  add16(m, ttl >> 16);
  add16(m, ttl & 0xffff);
  add16(m, static_cast<unsigned>(rdata.size()));
  m.insert(m.end(), rdata.begin(), rdata.end());
}
Bytes name_bytes(std::string_view dotted) {
  Bytes m;
  add_name(m, dotted);
  return m;
}

Bytes make_query(std::string_view name, std::uint16_t id, std::uint16_t qtype = dns::kTypeA) {
  Bytes m;
  add16(m, id);
  add16(m, dns::kFlagRd);
  add16(m, 1);
  add16(m, 0);
  add16(m, 0);
  add16(m, 0);
  add_name(m, name);
  add16(m, qtype);
  add16(m, dns::kClassIn);
  return m;
}

// The fake upstream's answer: for A, `name CNAME alias.cdn.test` (600 s), `alias CNAME
// edge.cdn.test` (120 s), `edge A 192.0.2.1` (300 s), `edge A 192.0.2.2` (60 s); for other
// types no records. `name` is the question's own wire form (a pointer to offset 12).
Bytes chain_response(const dns::Query& q, std::uint16_t id) {
  const bool a = q.question.qtype == dns::kTypeA;
  Bytes m;
  add16(m, id);
  add16(m, dns::kFlagQr | dns::kFlagRa | (q.flags & dns::kFlagRd));
  add16(m, 1);
  add16(m, a ? 4 : 0);
  add16(m, 0);
  add16(m, 0);
  m.insert(m.end(), q.question.wire_name.begin(), q.question.wire_name.end());
  add16(m, q.question.qtype);
  add16(m, q.question.qclass);
  if (!a) return m;
  m.push_back(0xc0);
  m.push_back(12);
  add_rr(m, dns::kTypeCname, 600, name_bytes("alias.cdn.test"));
  add_name(m, "alias.cdn.test");
  add_rr(m, dns::kTypeCname, 120, name_bytes("edge.cdn.test"));
  add_name(m, "edge.cdn.test");
  add_rr(m, dns::kTypeA, 300, {192, 0, 2, 1});
  add_name(m, "edge.cdn.test");
  add_rr(m, dns::kTypeA, 60, {192, 0, 2, 2});
  return m;
}

// A plain A answer for `name` with `id`, not necessarily the question that was asked.
Bytes direct_response(std::string_view name, std::uint16_t id, Bytes addr) {
  Bytes m;
  add16(m, id);
  add16(m, dns::kFlagQr | dns::kFlagRa | dns::kFlagRd);
  add16(m, 1);
  add16(m, 1);
  add16(m, 0);
  add16(m, 0);
  add_name(m, name);
  add16(m, dns::kTypeA);
  add16(m, dns::kClassIn);
  m.push_back(0xc0);
  m.push_back(12);
  add_rr(m, dns::kTypeA, 5, addr);
  return m;
}

// Answers every query with chain_response, except names starting with "hold" (never answered)
// and, over UDP, names starting with "spoof" (first a reply with the wrong id and one for
// another question, both carrying 6.6.6.6, then the real one). Records what it was asked.
class FakeUpstream {
 public:
  FakeUpstream() {
    const auto lo = asio::ip::make_address_v4("127.0.0.1");
    for (;;) {
      boost::system::error_code ec;
      udp_.open(udp::v4());
      udp_.bind({lo, 0});
      acceptor_.open(tcp::v4());
      acceptor_.bind({lo, udp_.local_endpoint().port()}, ec);
      if (!ec) break;
      udp_.close();
      acceptor_.close();
    }
    acceptor_.listen();
    udp_receive();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeUpstream() {
    io_.stop();
    thread_.join();
  }

  udp::endpoint endpoint() const { return udp_.local_endpoint(); }
  std::vector<std::string> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  bool saw(const std::string& name) {
    auto s = seen();
    return std::find(s.begin(), s.end(), name) != s.end();
  }
  std::vector<std::uint16_t> ids() {
    std::lock_guard lock(mu_);
    return ids_;
  }

 private:
  std::vector<Bytes> answer(std::span<const std::uint8_t> msg, bool over_udp) {
    auto q = dns::parse_query(msg, dns::kMaxTcpMessage);
    if (!q) return {};
    {
      std::lock_guard lock(mu_);
      seen_.push_back(q->question.name);
      ids_.push_back(q->id);
    }
    if (q->question.name.starts_with("hold")) return {};
    std::vector<Bytes> out;
    if (over_udp && q->question.name.starts_with("spoof")) {
      out.push_back(direct_response(q->question.name, q->id ^ 1, {6, 6, 6, 6}));
      out.push_back(direct_response("other.allowed.test", q->id, {6, 6, 6, 6}));
    }
    out.push_back(chain_response(*q, q->id));
    return out;
  }

  void udp_receive() {
    udp_.async_receive_from(asio::buffer(buf_), from_,
                            [this](boost::system::error_code ec, std::size_t n) {
                              if (ec) return;
                              for (auto& r : answer(std::span(buf_.data(), n), true)) {
                                udp_.send_to(asio::buffer(r), from_);
                              }
                              udp_receive();
                            });
  }

  struct Conn {
    explicit Conn(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    std::array<std::uint8_t, 2> len{};
    Bytes msg;
    Bytes out;
  };

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      serve(std::make_shared<Conn>(std::move(s)));
      accept();
    });
  }

  void serve(std::shared_ptr<Conn> c) {
    asio::async_read(
        c->socket, asio::buffer(c->len), [this, c](boost::system::error_code ec, std::size_t) {
          if (ec) return;
          c->msg.resize((std::size_t{c->len[0]} << 8) | c->len[1]);
          asio::async_read(
              c->socket, asio::buffer(c->msg),
              [this, c](boost::system::error_code rec, std::size_t) {
                if (rec) return;
                auto replies = answer(c->msg, false);
                if (replies.empty()) return serve(c);  // held: keep the connection, never answer
                c->out.clear();
                add16(c->out, static_cast<unsigned>(replies.back().size()));
                c->out.insert(c->out.end(), replies.back().begin(), replies.back().end());
                asio::async_write(c->socket, asio::buffer(c->out),
                                  [this, c](boost::system::error_code wec, std::size_t) {
                                    if (!wec) serve(c);
                                  });
              });
        });
  }

  asio::io_context io_;
  udp::socket udp_{io_};
  tcp::acceptor acceptor_{io_};
  std::array<std::uint8_t, 65536> buf_{};
  udp::endpoint from_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> seen_;
  std::vector<std::uint16_t> ids_;
};

sockaddr_in loopback(std::uint16_t port, const char* ip = "127.0.0.1") {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &sa.sin_addr);
  return sa;
}

bool readable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

// A sandbox asking over UDP, from `ip` (any 127/8 address is loopback).
class UdpClient {
 public:
  explicit UdpClient(const char* ip = "127.0.0.1")
      : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    auto sa = loopback(0, ip);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  }
  ~UdpClient() { ::close(fd_); }
  UdpClient(const UdpClient&) = delete;
  UdpClient& operator=(const UdpClient&) = delete;

  void send(std::uint16_t port, const Bytes& m, const char* to_ip = "127.0.0.1") {
    auto to = loopback(port, to_ip);
    EXPECT_EQ(::sendto(fd_, m.data(), m.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(m.size()));
  }
  std::optional<Bytes> recv(std::chrono::milliseconds timeout = 3s) {
    if (!readable(fd_, timeout)) return std::nullopt;
    Bytes b(65536);
    ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
    if (n < 0) return std::nullopt;
    b.resize(static_cast<std::size_t>(n));
    return b;
  }

 private:
  int fd_;
};

// A sandbox asking over TCP.
class TcpClient {
 public:
  // From `from` (host order; 0: the kernel's choice, 127.0.0.1).
  explicit TcpClient(std::uint16_t port, std::uint32_t from = 0)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (from != 0) {
      sockaddr_in me{};
      me.sin_family = AF_INET;
      me.sin_addr.s_addr = htonl(from);
      EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
    }
    auto sa = loopback(port);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  }
  ~TcpClient() { ::close(fd_); }
  TcpClient(const TcpClient&) = delete;
  TcpClient& operator=(const TcpClient&) = delete;

  void send_raw(const Bytes& m) {
    EXPECT_EQ(::send(fd_, m.data(), m.size(), MSG_NOSIGNAL), static_cast<ssize_t>(m.size()));
  }
  void send(const Bytes& m) {
    Bytes framed;
    add16(framed, static_cast<unsigned>(m.size()));
    framed.insert(framed.end(), m.begin(), m.end());
    send_raw(framed);
  }
  std::optional<Bytes> recv(std::chrono::milliseconds timeout = 3s) {
    std::array<std::uint8_t, 2> len{};
    if (!read_exact(len.data(), 2, timeout)) return std::nullopt;
    Bytes b((std::size_t{len[0]} << 8) | len[1]);
    if (!read_exact(b.data(), b.size(), timeout)) return std::nullopt;
    return b;
  }
  // The peer closed (EOF or reset) within `timeout`.
  bool closed_within(std::chrono::milliseconds timeout) {
    if (!readable(fd_, timeout)) return false;
    std::uint8_t c = 0;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }

 private:
  bool read_exact(std::uint8_t* p, std::size_t n, std::chrono::milliseconds timeout) {
    while (n > 0) {
      if (!readable(fd_, timeout)) return false;
      ssize_t got = ::recv(fd_, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<std::size_t>(got);
    }
    return true;
  }
  int fd_;
};

struct Answered {
  std::uint32_t src;
  std::string qname;
  std::vector<std::uint32_t> a;
  std::uint32_t ttl;
};
struct Asked {
  std::uint32_t src;
  std::string qname;
  std::uint16_t qtype;
  bool forwarded;
};

class DnsForwarderTest : public ::testing::Test {
 protected:
  // Names under allowed.test may be resolved by anyone; nothing else.
  void start(DnsForwarderLimits limits = {}, const char* listen = "127.0.0.1") {
    DnsForwarderHooks hooks;
    hooks.may_resolve = [](std::uint32_t, const std::string& qname) {
      return qname.ends_with(".allowed.test");
    };
    hooks.on_answer = [this](std::uint32_t src, const std::string& qname,
                             const std::vector<std::uint32_t>& a, std::uint32_t ttl) {
      std::lock_guard lock(mu_);
      answered_.push_back({src, qname, a, ttl});
    };
    hooks.on_query = [this](std::uint32_t src, const std::string& qname, std::uint16_t qtype,
                            bool forwarded) {
      std::lock_guard lock(mu_);
      asked_.push_back({src, qname, qtype, forwarded});
    };
    auto f = DnsForwarder::start(io_, {asio::ip::make_address(listen), 0}, upstream_.endpoint(),
                                 std::move(hooks), limits);
    ASSERT_TRUE(f) << f.error().to_string();
    fwd_ = std::move(*f);
    ASSERT_NE(fwd_->port(), 0);
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
  }

  void TearDown() override {
    if (fwd_) fwd_->stop();
    work_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }

  std::vector<Answered> answered() {
    std::lock_guard lock(mu_);
    return answered_;
  }
  std::vector<Asked> asked() {
    std::lock_guard lock(mu_);
    return asked_;
  }
  // Waits until the upstream has seen `n` queries.
  bool upstream_saw(std::size_t n) {
    for (int i = 0; i < 300 && upstream_.seen().size() < n; ++i) std::this_thread::sleep_for(10ms);
    return upstream_.seen().size() >= n;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::vector<std::thread> threads_;
  FakeUpstream upstream_;
  std::unique_ptr<DnsForwarder> fwd_;
  std::mutex mu_;
  std::vector<Answered> answered_;
  std::vector<Asked> asked_;
};

// The answer for a www.allowed.test A query: the client's id, NOERROR, both A records.
void expect_chain_answer(const std::optional<Bytes>& reply, std::uint16_t id) {
  ASSERT_TRUE(reply) << "no reply";
  auto r = dns::parse_response(*reply);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->id, id);
  EXPECT_EQ(r->rcode(), dns::Rcode::kNoError);
  EXPECT_EQ(r->a, kChainA);
  EXPECT_EQ(r->min_ttl, 60u);
}

std::optional<dns::Rcode> rcode_of(const std::optional<Bytes>& reply, std::uint16_t id) {
  if (!reply) return std::nullopt;
  auto r = dns::parse_response(*reply);
  if (!r || r->id != id) return std::nullopt;
  return r->rcode();
}

TEST_F(DnsForwarderTest, ForwardsAllowedNamesOverUdp) {
  start();
  UdpClient c;
  c.send(fwd_->port(), make_query("WWW.Allowed.Test", 0x1234));
  expect_chain_answer(c.recv(), 0x1234);

  EXPECT_EQ(upstream_.seen(), std::vector<std::string>{"www.allowed.test"});
  auto answers = answered();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].src, kLocalhost);
  EXPECT_EQ(answers[0].qname, "www.allowed.test");
  EXPECT_EQ(answers[0].a, kChainA);
  EXPECT_EQ(answers[0].ttl, 60u);
  auto queries = asked();
  ASSERT_EQ(queries.size(), 1u);
  EXPECT_EQ(queries[0].src, kLocalhost);
  EXPECT_EQ(queries[0].qtype, dns::kTypeA);
  EXPECT_TRUE(queries[0].forwarded);

  // Other types pass too; an answer without A records is not reported.
  c.send(fwd_->port(), make_query("www.allowed.test", 7, dns::kTypeAaaa));
  EXPECT_EQ(rcode_of(c.recv(), 7), dns::Rcode::kNoError);
  EXPECT_EQ(answered().size(), 1u);
}

TEST_F(DnsForwarderTest, ForwardsAllowedNamesOverTcp) {
  start();
  TcpClient c(fwd_->port());
  c.send(make_query("www.allowed.test", 0x0101));
  expect_chain_answer(c.recv(), 0x0101);
  // A second query on the same connection.
  c.send(make_query("api.allowed.test", 0x0202));
  expect_chain_answer(c.recv(), 0x0202);
  auto answers = answered();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].qname, "api.allowed.test");
  EXPECT_EQ(answers[1].a, kChainA);
  EXPECT_EQ(answers[1].ttl, 60u);
}

TEST_F(DnsForwarderTest, PicksItsOwnUpstreamIds) {
  start();
  UdpClient c;
  std::set<std::uint16_t> ids;
  for (std::uint16_t i = 0; i < 8; ++i) {
    c.send(fwd_->port(), make_query("www.allowed.test", 42));
    expect_chain_answer(c.recv(), 42);
  }
  auto up = upstream_.ids();
  ASSERT_EQ(up.size(), 8u);
  ids.insert(up.begin(), up.end());
  EXPECT_GT(ids.size(), 1u);  // not the client's 42 every time
}

TEST_F(DnsForwarderTest, RefusedNamesNeverReachUpstream) {
  start();
  UdpClient c;
  c.send(fwd_->port(), make_query("evil.test", 0x5555));
  auto reply = c.recv();
  ASSERT_TRUE(reply);
  auto r = dns::parse_response(*reply);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->id, 0x5555);
  EXPECT_EQ(r->rcode(), dns::Rcode::kRefused);
  EXPECT_EQ(r->question.name, "evil.test");

  TcpClient t(fwd_->port());
  t.send(make_query("allowed.test", 0x6666));  // the apex is not under allowed.test
  EXPECT_EQ(rcode_of(t.recv(), 0x6666), dns::Rcode::kRefused);

  // Zone transfers and other classes are refused even for allowed names.
  t.send(make_query("www.allowed.test", 0x7777, dns::kTypeAxfr));
  EXPECT_EQ(rcode_of(t.recv(), 0x7777), dns::Rcode::kRefused);

  EXPECT_TRUE(upstream_.seen().empty());
  EXPECT_TRUE(answered().empty());
  auto queries = asked();
  ASSERT_EQ(queries.size(), 3u);
  for (auto& q : queries) EXPECT_FALSE(q.forwarded) << q.qname;
  EXPECT_EQ(queries[0].qname, "evil.test");
}

TEST_F(DnsForwarderTest, SurvivesMalformedInput) {
  start();
  UdpClient c;
  const Bytes loop = {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0xc0, 12, 0, 1, 0, 1};
  auto response = make_query("www.allowed.test", 9);
  response[2] |= 0x80;
  Bytes oversized = make_query("www.allowed.test", 10);
  oversized.resize(dns::kMaxUdpMessage + 100);
  for (const Bytes& bad : {Bytes{}, Bytes{1, 2, 3}, loop, response, oversized}) {
    c.send(fwd_->port(), bad);
  }
  EXPECT_FALSE(c.recv(300ms));  // dropped, no answer
  c.send(fwd_->port(), make_query("www.allowed.test", 11));
  expect_chain_answer(c.recv(), 11);

  {
    TcpClient t(fwd_->port());
    t.send(loop);
    EXPECT_TRUE(t.closed_within(2s));
  }
  {
    TcpClient t(fwd_->port());
    t.send_raw({0, 3, 1, 2, 3});  // shorter than a header
    EXPECT_TRUE(t.closed_within(2s));
  }
  TcpClient t(fwd_->port());
  t.send(make_query("www.allowed.test", 12));
  expect_chain_answer(t.recv(), 12);
  EXPECT_TRUE(upstream_.seen().size() == 2);
}

TEST_F(DnsForwarderTest, IgnoresRepliesThatDoNotMatch) {
  start();
  UdpClient c;
  c.send(fwd_->port(), make_query("spoof.allowed.test", 0x0bad));
  expect_chain_answer(c.recv(), 0x0bad);
  EXPECT_FALSE(c.recv(200ms));  // only one answer
  auto answers = answered();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].a, kChainA);  // never 6.6.6.6
}

TEST_F(DnsForwarderTest, UpstreamTimeoutIsServfail) {
  start({.upstream_timeout = 300ms});
  UdpClient c;
  const auto t0 = std::chrono::steady_clock::now();
  c.send(fwd_->port(), make_query("hold.allowed.test", 0x1111));
  EXPECT_EQ(rcode_of(c.recv(), 0x1111), dns::Rcode::kServFail);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);

  TcpClient t(fwd_->port());
  t.send(make_query("hold.allowed.test", 0x2222));
  EXPECT_EQ(rcode_of(t.recv(), 0x2222), dns::Rcode::kServFail);
  EXPECT_TRUE(answered().empty());
}

TEST_F(DnsForwarderTest, CapsInFlightQueriesPerSource) {
  start({.upstream_timeout = 3s});  // default caps: 32 per source
  UdpClient c;
  for (std::uint16_t i = 0; i < 32; ++i) {
    c.send(fwd_->port(), make_query("hold" + std::to_string(i) + ".allowed.test", i));
  }
  ASSERT_TRUE(upstream_saw(32));
  c.send(fwd_->port(), make_query("hold32.allowed.test", 32));
  EXPECT_EQ(rcode_of(c.recv(1s), 32), dns::Rcode::kRefused);  // at once, not after 3 s
  {
    TcpClient t(fwd_->port());  // the cap counts TCP queries from the same source too
    t.send(make_query("hold33.allowed.test", 33));
    EXPECT_EQ(rcode_of(t.recv(1s), 33), dns::Rcode::kRefused);
  }
  EXPECT_FALSE(upstream_.saw("hold32.allowed.test"));
  EXPECT_FALSE(upstream_.saw("hold33.allowed.test"));

  // The held ones time out; their places are free again.
  for (int i = 0; i < 32; ++i) {
    auto reply = c.recv(5s);
    ASSERT_TRUE(reply) << i;
    auto r = dns::parse_response(*reply);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->rcode(), dns::Rcode::kServFail);
  }
  c.send(fwd_->port(), make_query("www.allowed.test", 99));
  expect_chain_answer(c.recv(), 99);
}

TEST_F(DnsForwarderTest, CapsInFlightQueriesInAll) {
  start({.upstream_timeout = 2s, .max_in_flight = 3, .max_in_flight_per_source = 2});
  UdpClient one;               // 127.0.0.1
  UdpClient two("127.0.0.2");  // another "sandbox"
  one.send(fwd_->port(), make_query("hold1.allowed.test", 1));
  one.send(fwd_->port(), make_query("hold2.allowed.test", 2));
  ASSERT_TRUE(upstream_saw(2));
  one.send(fwd_->port(), make_query("hold3.allowed.test", 3));
  EXPECT_EQ(rcode_of(one.recv(1s), 3), dns::Rcode::kRefused);  // its own cap
  two.send(fwd_->port(), make_query("hold4.allowed.test", 4));
  ASSERT_TRUE(upstream_saw(3));
  two.send(fwd_->port(), make_query("hold5.allowed.test", 5));
  EXPECT_EQ(rcode_of(two.recv(1s), 5), dns::Rcode::kRefused);  // the global cap
  EXPECT_EQ(upstream_.seen().size(), 3u);

  bool saw_two = false;
  for (auto& q : asked()) {
    if (q.src == 0x7f000002) saw_two = true;
    EXPECT_EQ(q.forwarded, q.qname != "hold3.allowed.test" && q.qname != "hold5.allowed.test")
        << q.qname;
  }
  EXPECT_TRUE(saw_two);
}

TEST_F(DnsForwarderTest, CapsAndTimesOutTcpConnections) {
  start({.tcp_timeout = 300ms, .max_tcp_connections = 2});
  TcpClient a(fwd_->port());
  TcpClient b(fwd_->port());
  std::this_thread::sleep_for(50ms);  // both accepted
  TcpClient over(fwd_->port());
  EXPECT_TRUE(over.closed_within(1s));
  // An idle connection is closed at the read deadline, which frees a place.
  EXPECT_TRUE(a.closed_within(2s));
  EXPECT_TRUE(b.closed_within(2s));
  TcpClient c(fwd_->port());
  c.send(make_query("www.allowed.test", 5));
  expect_chain_answer(c.recv(), 5);
}

// Issue 35, finding 3: one sandbox holding every TCP connection left the others none.
TEST_F(DnsForwarderTest, CapsTcpConnectionsPerSource) {
  start({.tcp_timeout = 10s, .max_tcp_connections = 8, .max_tcp_connections_per_source = 2});
  TcpClient a(fwd_->port(), 0x7f000001);
  TcpClient b(fwd_->port(), 0x7f000001);
  std::this_thread::sleep_for(50ms);  // both accepted
  TcpClient over(fwd_->port(), 0x7f000001);
  EXPECT_TRUE(over.closed_within(1s)) << "a third connection of one source was kept";
  TcpClient other(fwd_->port(), 0x7f000002);
  other.send(make_query("www.allowed.test", 7));
  expect_chain_answer(other.recv(), 7);
}

// A TCP connect to ip:port; 0 when it connected, else its errno.
int connect_errno(const char* ip, std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto sa = loopback(port, ip);
  int r = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 ? 0 : errno;
  ::close(fd);
  return r;
}

// Issue 35, finding 4: the resolver listened on 0.0.0.0. It listens where it is told: abxd gives
// it the sandbox links' gateway addresses, one by one, as links come and go.
TEST_F(DnsForwarderTest, ListensOnlyOnTheAddressesItIsGiven) {
  start({}, "127.0.0.2");
  const std::uint16_t port = fwd_->port();
  UdpClient c;
  c.send(port, make_query("www.allowed.test", 1), "127.0.0.2");
  expect_chain_answer(c.recv(), 1);
  c.send(port, make_query("www.allowed.test", 2), "127.0.0.1");
  EXPECT_FALSE(rcode_of(c.recv(300ms), 2)) << "the resolver answers on 127.0.0.1";
  EXPECT_EQ(connect_errno("127.0.0.1", port), ECONNREFUSED);
  EXPECT_EQ(connect_errno("127.0.0.2", port), 0);

  ASSERT_TRUE(fwd_->listen_on(0x7f000003).ok());
  ASSERT_TRUE(fwd_->listen_on(0x7f000003).ok());  // idempotent
  UdpClient d;
  d.send(port, make_query("www.allowed.test", 3), "127.0.0.3");
  expect_chain_answer(d.recv(), 3);
  EXPECT_EQ(connect_errno("127.0.0.3", port), 0);
  fwd_->stop_listening(0x7f000003);
  // The listener closes on the forwarder's thread: until then a connect is accepted, or reset
  // by the closing socket (ECONNRESET); once it is closed it is refused.
  int after = 0;
  for (int i = 0; i < 200 && (after = connect_errno("127.0.0.3", port)) != ECONNREFUSED; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(after, ECONNREFUSED);
  UdpClient e;
  e.send(port, make_query("www.allowed.test", 4), "127.0.0.3");
  EXPECT_FALSE(rcode_of(e.recv(300ms), 4));
  c.send(port, make_query("www.allowed.test", 5), "127.0.0.2");  // the others stay
  expect_chain_answer(c.recv(), 5);
}

TEST_F(DnsForwarderTest, StopsAnswering) {
  start();
  fwd_->stop();
  UdpClient c;
  c.send(fwd_->port(), make_query("www.allowed.test", 1));
  EXPECT_FALSE(c.recv(300ms));
  fwd_->stop();  // idempotent
}

}  // namespace
}  // namespace abx::platform
