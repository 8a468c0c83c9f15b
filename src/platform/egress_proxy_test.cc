// The egress proxy over loopback, without root: real upstream servers on 127.0.0.1, the
// proxy's "original destination" injected (port 80, 443 or another, as each case needs) and
// its connection pointed at the test's server.
#include "egress_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "abx/runtime/netns.h"
#include "abx/testing/socket.h"

namespace abx::platform {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A TCP server on 127.0.0.1 that runs `serve(fd)` for each connection on its own thread.
class Upstream {
 public:
  explicit Upstream(std::function<void(int)> serve) : serve_(std::move(serve)) {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_.get(), 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      for (;;) {
        int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        ++accepted_;
        std::lock_guard lock(mu_);
        conns_.emplace_back([this, c] {
          serve_(c);
          ::close(c);
        });
      }
    });
  }
  ~Upstream() {
    ::shutdown(fd_.get(), SHUT_RDWR);
    acceptor_.join();
    for (auto& t : conns_) t.join();
  }
  tcp::endpoint endpoint() const { return {asio::ip::address_v4(INADDR_LOOPBACK), port_}; }
  int accepted() const { return accepted_; }

 private:
  std::function<void(int)> serve_;
  UniqueFd fd_;
  std::uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads until EOF or an error; `err` is 0 for EOF, else the errno (ECONNRESET for an RST).
struct ReadAll {
  std::string data;
  int err = 0;
};
ReadAll read_all(int fd) {
  ReadAll r;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      r.data.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    r.err = n == 0 ? 0 : errno;
    return r;
  }
}

// Reads until `end` has been seen (or EOF/error).
std::string read_until(int fd, std::string_view end) {
  std::string got;
  char buf[4096];
  while (got.find(end) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What the hooks saw.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<EgressFlow> asked;
  struct Report {
    EgressFlow flow;
    bool allowed;
    std::uint64_t out, in;
  };
  std::vector<Report> reports;

  bool wait_reports(std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 5s, [&] { return reports.size() >= n; });
  }
};

class EgressProxyTest : public ::testing::Test {
 protected:
  EgressProxyTest() : guard_(io_.get_executor()) {
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  ~EgressProxyTest() override {
    proxy_.reset();
    guard_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }

  // Starts the proxy: every flow is "for" 127.0.0.1:`dst_port` and connects to `to`; `allow`
  // decides.
  void start(std::uint16_t dst_port, tcp::endpoint to, std::function<bool(const EgressFlow&)> allow,
             EgressProxyOptions options = {}) {
    EgressProxyHooks hooks;
    hooks.original_destination = [dst_port](int) {
      return Result<std::pair<std::uint32_t, std::uint16_t>>(std::pair(INADDR_LOOPBACK, dst_port));
    };
    hooks.upstream = [to](const EgressFlow&) { return to; };
    start_with(std::move(hooks), std::move(allow), options);
  }
  void start_with(EgressProxyHooks hooks, std::function<bool(const EgressFlow&)> allow,
                  EgressProxyOptions options = {}, std::uint32_t listen_ip = INADDR_LOOPBACK) {
    hooks.allow = [this, allow = std::move(allow)](const EgressFlow& f) {
      {
        std::lock_guard lock(seen_.mu);
        seen_.asked.push_back(f);
      }
      return allow(f);
    };
    hooks.on_flow = [this](const EgressFlow& f, bool allowed, std::uint64_t out, std::uint64_t in) {
      std::lock_guard lock(seen_.mu);
      seen_.reports.push_back({f, allowed, out, in});
      seen_.cv.notify_all();
    };
    auto p =
        EgressProxy::start(io_, {asio::ip::address_v4(listen_ip), 0}, std::move(hooks), options);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    proxy_ = std::move(*p);
  }

  UniqueFd connect() {
    UniqueFd fd = testing::connect_raw(proxy_->port(), 5s);
    EXPECT_TRUE(fd.valid());
    return fd;
  }

  std::vector<EgressFlow> asked() {
    std::lock_guard lock(seen_.mu);
    return seen_.asked;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::vector<std::thread> threads_;
  std::unique_ptr<EgressProxy> proxy_;
  Seen seen_;
};

// A tiny HTTP server: reads one request head, answers 200 "ok" and closes.
struct HttpResponder {
  std::mutex mu;
  std::string request;
  static constexpr std::string_view kResponse =
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
  void operator()(int fd) {
    std::string got = read_until(fd, "\r\n\r\n");
    {
      std::lock_guard lock(mu);
      request = got;
    }
    send_all(fd, kResponse);
  }
};

TEST_F(EgressProxyTest, AllowedHttpHostRoundTrips) {
  HttpResponder http;
  Upstream up([&](int fd) { http(fd); });
  start(80, up.endpoint(), [](const EgressFlow& f) { return f.domain == "allowed.test"; });

  const std::string req = "GET /x HTTP/1.1\r\nHost: Allowed.test:80\r\nUser-Agent: t\r\n\r\n";
  UniqueFd c = connect();
  ASSERT_TRUE(send_all(c.get(), req));
  ReadAll resp = read_all(c.get());
  EXPECT_EQ(resp.err, 0);
  EXPECT_EQ(resp.data, HttpResponder::kResponse);
  c.reset();  // the client's EOF ends the flow
  ASSERT_TRUE(seen_.wait_reports(1));
  {
    std::lock_guard lock(http.mu);
    EXPECT_EQ(http.request, req);  // byte for byte, Host untouched
  }
  std::lock_guard lock(seen_.mu);
  ASSERT_EQ(seen_.asked.size(), 1u);
  EXPECT_EQ(seen_.asked[0].domain, "allowed.test");
  EXPECT_EQ(seen_.asked[0].src_ip, INADDR_LOOPBACK);
  EXPECT_EQ(seen_.asked[0].dst_ip, INADDR_LOOPBACK);
  EXPECT_EQ(seen_.asked[0].dst_port, 80);
  const auto& r = seen_.reports.at(0);
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.out, req.size());
  EXPECT_EQ(r.in, HttpResponder::kResponse.size());
}

TEST_F(EgressProxyTest, DeniedHostIsResetAndNeverReachesUpstream) {
  HttpResponder http;
  Upstream up([&](int fd) { http(fd); });
  start(80, up.endpoint(), [](const EgressFlow& f) { return f.domain == "allowed.test"; });

  UniqueFd c = connect();
  ASSERT_TRUE(send_all(c.get(), "GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n"));
  ReadAll resp = read_all(c.get());
  EXPECT_EQ(resp.err, ECONNRESET);
  EXPECT_EQ(resp.data, "");
  ASSERT_TRUE(seen_.wait_reports(1));
  std::lock_guard lock(seen_.mu);
  EXPECT_FALSE(seen_.reports[0].allowed);
  EXPECT_EQ(seen_.reports[0].flow.domain, "denied.test");
  EXPECT_EQ(seen_.reports[0].out, 0u);
  EXPECT_EQ(up.accepted(), 0);
}

TEST_F(EgressProxyTest, TlsServerNameIsSniffedAndTheBytesPassUnchanged) {
  // The ClientHello `openssl s_client -servername x.test` sent (abx::egress's sniff fixture).
  const std::string hello = read_file(ABX_SNIFF_CORPUS_DIR "/tls_openssl_x_test.bin");
  ASSERT_EQ(hello.size(), 312u);
  Upstream echo([](int fd) {
    ReadAll all = read_all(fd);
    send_all(fd, all.data);
  });
  start(443, echo.endpoint(), [](const EgressFlow&) { return true; });

  UniqueFd c = connect();
  // In two pieces, the second after a pause: the proxy must wait for the whole ClientHello.
  ASSERT_TRUE(send_all(c.get(), std::string_view(hello).substr(0, 100)));
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(asked().empty());
  ASSERT_TRUE(send_all(c.get(), std::string_view(hello).substr(100)));
  ::shutdown(c.get(), SHUT_WR);
  ReadAll back = read_all(c.get());
  EXPECT_EQ(back.err, 0);
  EXPECT_EQ(back.data, hello);
  ASSERT_TRUE(seen_.wait_reports(1));
  std::lock_guard lock(seen_.mu);
  EXPECT_EQ(seen_.asked.at(0).domain, "x.test");
  EXPECT_EQ(seen_.asked.at(0).dst_port, 443);
  EXPECT_EQ(seen_.reports[0].out, hello.size());
  EXPECT_EQ(seen_.reports[0].in, hello.size());
}

TEST_F(EgressProxyTest, HalfClosePassesThrough) {
  // The upstream reads to EOF, then still answers: the client's shutdown(SHUT_WR) must reach
  // it as EOF while the other direction stays open.
  Upstream up([](int fd) {
    ReadAll all = read_all(fd);
    send_all(fd, "got " + std::to_string(all.data.size()) + (all.err == 0 ? " eof" : " err"));
  });
  start(5432, up.endpoint(), [](const EgressFlow&) { return true; });

  UniqueFd c = connect();
  ASSERT_TRUE(send_all(c.get(), "hello"));
  ASSERT_EQ(::shutdown(c.get(), SHUT_WR), 0);
  ReadAll back = read_all(c.get());
  EXPECT_EQ(back.err, 0);
  EXPECT_EQ(back.data, "got 5 eof");
  ASSERT_TRUE(seen_.wait_reports(1));
  std::lock_guard lock(seen_.mu);
  EXPECT_TRUE(seen_.reports[0].allowed);
  EXPECT_EQ(seen_.reports[0].flow.domain, std::nullopt);
  EXPECT_EQ(seen_.reports[0].out, 5u);
  EXPECT_EQ(seen_.reports[0].in, 9u);
}

TEST_F(EgressProxyTest, SilentClientOnAnotherPortIsDecidedAtOnceWithoutDomain) {
  // A server-speaks-first protocol: the client waits for the banner.
  Upstream up([](int fd) {
    send_all(fd, "SSH-2.0-test\r\n");
    read_all(fd);
  });
  start(22, up.endpoint(), [](const EgressFlow&) { return true; });

  auto t0 = std::chrono::steady_clock::now();
  UniqueFd c = connect();
  EXPECT_EQ(read_until(c.get(), "\r\n"), "SSH-2.0-test\r\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  auto flows = asked();
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_EQ(flows[0].dst_port, 22);
  EXPECT_EQ(flows[0].domain, std::nullopt);
}

TEST_F(EgressProxyTest, SilentClientOn443IsDecidedWithoutDomainAfterTheSniffTimeout) {
  Upstream up([](int fd) {
    send_all(fd, "banner\n");
    read_all(fd);
  });
  EgressProxyOptions opt;
  opt.sniff_timeout = 300ms;
  start(
      443, up.endpoint(), [](const EgressFlow&) { return true; }, opt);

  auto t0 = std::chrono::steady_clock::now();
  UniqueFd c = connect();
  EXPECT_EQ(read_until(c.get(), "\n"), "banner\n");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
  auto flows = asked();
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_EQ(flows[0].domain, std::nullopt);
}

TEST_F(EgressProxyTest, NotHttpOnPort80IsDecidedWithoutDomainAndRelayed) {
  Upstream echo([](int fd) {
    ReadAll all = read_all(fd);
    send_all(fd, all.data);
  });
  start(80, echo.endpoint(), [](const EgressFlow&) { return true; });
  UniqueFd c = connect();
  ASSERT_TRUE(send_all(c.get(), std::string("\x16\x03\x01\x00\x05hello", 10)));
  ::shutdown(c.get(), SHUT_WR);
  EXPECT_EQ(read_all(c.get()).data, std::string("\x16\x03\x01\x00\x05hello", 10));
  auto flows = asked();
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_EQ(flows[0].domain, std::nullopt);
}

TEST_F(EgressProxyTest, ConnectFailureResetsTheClientAndIsReported) {
  // A port nothing listens on.
  tcp::endpoint closed;
  {
    Upstream gone([](int) {});
    closed = gone.endpoint();
  }
  start(80, closed, [](const EgressFlow&) { return true; });
  UniqueFd c = connect();
  ASSERT_TRUE(send_all(c.get(), "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  EXPECT_EQ(read_all(c.get()).err, ECONNRESET);
  ASSERT_TRUE(seen_.wait_reports(1));
  std::lock_guard lock(seen_.mu);
  EXPECT_TRUE(seen_.reports[0].allowed);
  EXPECT_EQ(seen_.reports[0].out, 0u);
  EXPECT_EQ(seen_.reports[0].in, 0u);
}

TEST_F(EgressProxyTest, FlowsOverTheLimitAreReset) {
  Upstream up([](int fd) { read_all(fd); });
  EgressProxyOptions opt;
  opt.max_flows = 1;
  start(
      443, up.endpoint(), [](const EgressFlow&) { return true; }, opt);
  UniqueFd first = connect();  // silent: stays in the sniff phase (10 s)
  for (int i = 0; i < 200 && proxy_->active_flows() < 1; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(proxy_->active_flows(), 1u);
  UniqueFd second = connect();
  EXPECT_EQ(read_all(second.get()).err, ECONNRESET);
  EXPECT_EQ(proxy_->active_flows(), 1u);
  // stop() resets the flows that are left.
  proxy_->stop();
  EXPECT_EQ(read_all(first.get()).err, ECONNRESET);
  EXPECT_TRUE(asked().empty());
}

// A connection to the proxy from `src` (an address of 127/8: loopback has them all), as a
// sandbox other than 127.0.0.1 would make it.
UniqueFd connect_from(std::uint32_t src, std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(src);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << errno;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << errno;
  return fd;
}

// Finding 3 of issue 35: one sandbox holding every flow reset every other sandbox's 80/443.
TEST_F(EgressProxyTest, OneSourceAtItsLimitLeavesOtherSourcesTheirFlows) {
  HttpResponder http;
  Upstream up([&http](int fd) { http(fd); });
  EgressProxyOptions opt;
  opt.max_flows = 8;
  opt.max_flows_per_source = 2;
  start(
      80, up.endpoint(), [](const EgressFlow&) { return true; }, opt);
  constexpr std::uint32_t kHog = 0x7f000001, kOther = 0x7f000002;
  // The hog's flows stay silent in the sniff phase (10 s).
  std::vector<UniqueFd> held;
  for (int i = 0; i < 2; ++i) held.push_back(connect_from(kHog, proxy_->port()));
  for (int i = 0; i < 200 && proxy_->active_flows_from(kHog) < 2; ++i)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(proxy_->active_flows_from(kHog), 2u);
  UniqueFd over = connect_from(kHog, proxy_->port());
  EXPECT_EQ(read_all(over.get()).err, ECONNRESET) << "a third flow of the hog was admitted";
  EXPECT_EQ(proxy_->active_flows_from(kHog), 2u);

  UniqueFd other = connect_from(kOther, proxy_->port());
  ASSERT_TRUE(send_all(other.get(), "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"));
  ReadAll r = read_all(other.get());
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(r.data, HttpResponder::kResponse);
  held.clear();  // the hog's flows end: its count goes with them
  for (int i = 0; i < 400 && proxy_->active_flows() > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(proxy_->active_flows_from(kHog), 0u);
}

// An idle relayed flow lived an hour; one whose client had half-closed stayed as long.
TEST_F(EgressProxyTest, HalfOpenFlowIsResetAfterTheShorterIdleTimeout) {
  EXPECT_LE(EgressProxyOptions{}.idle_timeout, std::chrono::minutes(10));
  EXPECT_LE(EgressProxyOptions{}.half_closed_idle_timeout, std::chrono::minutes(1));
  // The upstream reads the request to EOF, then neither answers nor closes.
  Upstream up([](int fd) {
    read_all(fd);                     // to the client's half-close
    std::this_thread::sleep_for(3s);  // then silent, the connection open
  });
  EgressProxyOptions opt;
  opt.idle_timeout = 30s;
  opt.half_closed_idle_timeout = 300ms;
  start(
      5432, up.endpoint(), [](const EgressFlow&) { return true; }, opt);
  UniqueFd c = connect();
  ASSERT_TRUE(send_all(c.get(), "hello"));
  ASSERT_EQ(::shutdown(c.get(), SHUT_WR), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_all(c.get()).err, ECONNRESET);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 5s) << "the half-open flow waited for the full idle timeout";
}

// A flow quiet both ways is reset after idle_timeout.
TEST_F(EgressProxyTest, IdleFlowIsReset) {
  Upstream up([](int fd) { read_all(fd); });
  EgressProxyOptions opt;
  opt.idle_timeout = 300ms;
  start(
      5432, up.endpoint(), [](const EgressFlow&) { return true; }, opt);
  UniqueFd c = connect();
  ASSERT_TRUE(send_all(c.get(), "hello"));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_all(c.get()).err, ECONNRESET);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A TCP connect to ip:port; 0 when it connected, else its errno.
int connect_errno(std::uint32_t ip, std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(port);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
}

// Issue 35, finding 4: the proxy listened on 0.0.0.0. It listens where it is told: abxd gives
// it the sandbox links' gateway addresses, one by one, as links come and go.
TEST_F(EgressProxyTest, ListensOnlyOnTheAddressesItIsGiven) {
  Upstream up([](int fd) { read_all(fd); });
  EgressProxyHooks hooks;
  hooks.original_destination = [](int) {
    return Result<std::pair<std::uint32_t, std::uint16_t>>(std::pair(INADDR_LOOPBACK, 5432));
  };
  hooks.upstream = [ep = up.endpoint()](const EgressFlow&) { return ep; };
  start_with(
      std::move(hooks), [](const EgressFlow&) { return true; }, {}, 0x7f000002);
  const std::uint16_t port = proxy_->port();
  EXPECT_EQ(connect_errno(0x7f000002, port), 0);
  EXPECT_EQ(connect_errno(0x7f000001, port), ECONNREFUSED) << "the proxy listens on 127.0.0.1";
  EXPECT_EQ(connect_errno(0x7f000003, port), ECONNREFUSED);
  ASSERT_TRUE(proxy_->listen_on(0x7f000003).ok());
  ASSERT_TRUE(proxy_->listen_on(0x7f000003).ok());  // idempotent
  EXPECT_EQ(connect_errno(0x7f000003, port), 0);
  proxy_->stop_listening(0x7f000003);
  // The listener closes on the proxy's strand: until then a connect still succeeds, or is reset
  // by the closing socket (ECONNRESET); once it is closed it is refused.
  int after = 0;
  for (int i = 0; i < 200 && (after = connect_errno(0x7f000003, port)) != ECONNREFUSED; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(after, ECONNREFUSED);
  EXPECT_EQ(connect_errno(0x7f000002, port), 0);  // the others stay
  proxy_->stop();
  EXPECT_FALSE(proxy_->listen_on(0x7f000004).ok());
}

// A gateway address the host does not have yet (slot 0's link may come later): IP_FREEBIND.
TEST(EgressProxyStart, ListensOnAnAddressTheHostDoesNotHaveYet) {
  asio::io_context io;
  EgressProxyHooks hooks;
  hooks.allow = [](const EgressFlow&) { return false; };
  auto p = EgressProxy::start(io, {asio::ip::make_address_v4("192.0.2.61"), 0}, std::move(hooks));
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_NE((*p)->port(), 0);
  EXPECT_TRUE((*p)->listen_on(0xc000023e).ok());  // 192.0.2.62
}

TEST_F(EgressProxyTest, UnredirectedConnectionIsRefused) {
  // The default hook (SO_ORIGINAL_DST): a plain connection to the proxy has no NAT record
  // (not_found), or conntrack reports the proxy itself; either way, reset before any verdict.
  Upstream up([](int fd) { read_all(fd); });
  EgressProxyHooks hooks;
  hooks.upstream = [ep = up.endpoint()](const EgressFlow&) { return ep; };
  start_with(std::move(hooks), [](const EgressFlow&) { return true; });
  UniqueFd c = connect();  // reset as soon as accepted, before any byte is read
  EXPECT_EQ(read_all(c.get()).err, ECONNRESET);
  EXPECT_TRUE(asked().empty());
  EXPECT_EQ(up.accepted(), 0);
}

TEST(OriginalDestination, OfAnUnredirectedSocket) {
  Upstream up([](int fd) { read_all(fd); });
  UniqueFd c = testing::connect_raw(up.endpoint().port(), 5s);
  ASSERT_TRUE(c.valid());
  auto dst = runtime::original_destination(c.get());
  if (dst.ok()) {  // conntrack tracks loopback: the destination as is
    EXPECT_EQ(dst->first, INADDR_LOOPBACK);
    EXPECT_EQ(dst->second, up.endpoint().port());
  } else {
    EXPECT_EQ(dst.error().code(), ErrorCode::kNotFound) << dst.error().to_string();
  }
  EXPECT_FALSE(runtime::original_destination(-1).ok());
}

TEST(EgressProxyStart, RequiresAllow) {
  asio::io_context io;
  auto p = EgressProxy::start(io, {asio::ip::address_v4(INADDR_LOOPBACK), 0}, {});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace abx::platform
