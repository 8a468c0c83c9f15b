// The egress proxy's transforms (E2B network.rules) over loopback, without root: real HTTP and
// HTTPS servers on 127.0.0.1 (the HTTPS one signed by a test CA the proxy is told to trust),
// clients that trust abxd's CA, and the proxy's original destination injected.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "abx/testing/socket.h"
#include "abx/testing/temp_dir.h"
#include "cert_authority.h"
#include "egress_proxy.h"

namespace abx::platform {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A TCP server on 127.0.0.1 that runs `serve(socket)` for each connection on its own thread.
class Server {
 public:
  explicit Server(std::function<void(tcp::socket&)> serve) : serve_(std::move(serve)) {
    acceptor_.open(tcp::v4());
    acceptor_.bind({asio::ip::address_v4(INADDR_LOOPBACK), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] {
      for (;;) {
        boost::system::error_code ec;
        tcp::socket s(io_);
        acceptor_.accept(s, ec);
        if (ec) return;
        ++accepted_;
        std::lock_guard lock(mu_);
        conns_.emplace_back([this, s = std::move(s)]() mutable {
          try {
            serve_(s);
          } catch (const std::exception&) {
          }
        });
      }
    });
  }
  ~Server() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // accept() returns
    thread_.join();
    for (auto& t : conns_) t.join();
  }
  tcp::endpoint endpoint() const { return {asio::ip::address_v4(INADDR_LOOPBACK), port_}; }
  int accepted() const { return accepted_; }

 private:
  std::function<void(tcp::socket&)> serve_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

// What the upstream server saw: each request's headers.
struct Requests {
  std::mutex mu;
  std::vector<http::request<http::string_body>> got;
  void add(http::request<http::string_body> r) {
    std::lock_guard lock(mu);
    got.push_back(std::move(r));
  }
  std::vector<http::request<http::string_body>> all() {
    std::lock_guard lock(mu);
    return got;
  }
};

// Answers every request on the connection with 200 and the request's body size, keep-alive.
template <class Stream>
void answer_all(Stream& s, Requests& seen) {
  beast::flat_buffer buf;
  for (;;) {
    http::request<http::string_body> req;
    boost::system::error_code ec;
    http::read(s, buf, req, ec);
    if (ec) return;
    const bool keep = req.keep_alive();
    http::response<http::string_body> res{http::status::ok, 11};
    res.body() = "got " + std::to_string(req.body().size());
    res.keep_alive(keep);
    res.prepare_payload();
    seen.add(std::move(req));
    http::write(s, res, ec);
    if (ec || !keep) return;
  }
}

class InterceptTest : public ::testing::Test {
 protected:
  InterceptTest() : guard_(io_.get_executor()) {
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
    auto abxd = CertAuthority::load_or_create((dir_ / "abxd").string());
    auto test = CertAuthority::load_or_create((dir_ / "test").string());
    EXPECT_TRUE(abxd.ok() && test.ok());
    abxd_ca_ = std::move(*abxd);
    test_ca_ = std::move(*test);
  }
  ~InterceptTest() override {
    proxy_.reset();
    guard_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }

  // The proxy: every flow is "for" 127.0.0.1:`dst_port`, connects to `to`, is allowed, and gets
  // the headers of `rule()` when its name is `name` (read per request: a test may change it).
  void start(std::uint16_t dst_port, tcp::endpoint to, std::string name,
             bool trust_test_ca = true) {
    EgressProxyHooks hooks;
    hooks.original_destination = [dst_port](int) {
      return Result<std::pair<std::uint32_t, std::uint16_t>>(std::pair(INADDR_LOOPBACK, dst_port));
    };
    hooks.upstream = [to](const EgressFlow&) { return to; };
    hooks.allow = [](const EgressFlow&) { return true; };
    hooks.transform = [this, name](const EgressFlow&,
                                   std::string_view host) -> std::optional<EgressTransform> {
      std::lock_guard lock(mu_);
      if (host != name) return std::nullopt;
      return EgressTransform{name, headers_, {}};
    };
    hooks.on_transform = [this](const EgressFlow&, const EgressTransformEvent& ev) {
      std::lock_guard lock(mu_);
      events_.push_back(ev);
      cv_.notify_all();
    };
    hooks.on_flow = [this](const EgressFlow&, bool, std::uint64_t, std::uint64_t) {
      std::lock_guard lock(mu_);
      ++flows_done_;
      cv_.notify_all();
    };
    auto up = std::make_shared<ssl::context>(ssl::context::tls_client);
    up->set_verify_mode(ssl::verify_peer);
    if (trust_test_ca) up->load_verify_file(test_ca_->cert_path());
    hooks.upstream_tls = up;
    hooks.server_tls = [ca = abxd_ca_](const std::string& n) { return ca->server_context(n); };
    auto p = EgressProxy::start(io_, {asio::ip::address_v4(INADDR_LOOPBACK), 0}, std::move(hooks));
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    proxy_ = std::move(*p);
  }

  void set_headers(std::vector<std::pair<std::string, std::string>> h) {
    std::lock_guard lock(mu_);
    headers_ = std::move(h);
  }
  std::vector<EgressTransformEvent> wait_events(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 10s, [&] { return events_.size() >= n; });
    return events_;
  }
  bool wait_flows(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return flows_done_ >= n; });
  }

  // A client socket connected to the proxy.
  tcp::socket connect(asio::io_context& io) {
    tcp::socket s(io);
    s.connect({asio::ip::address_v4(INADDR_LOOPBACK), proxy_->port()});
    return s;
  }
  // A TLS client context trusting abxd's CA only.
  ssl::context client_ctx() {
    ssl::context c(ssl::context::tls_client);
    c.load_verify_file(abxd_ca_->cert_path());
    c.set_verify_mode(ssl::verify_peer);
    return c;
  }
  // A TLS server context for the upstream, from the test CA.
  std::shared_ptr<ssl::context> upstream_ctx(const std::string& name) {
    return *test_ca_->server_context(name);
  }

  abx::testing::TempDir tmp_{"abx-intercept"};
  fs::path dir_ = tmp_.path();
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::vector<std::thread> threads_;
  std::shared_ptr<CertAuthority> abxd_ca_, test_ca_;
  std::unique_ptr<EgressProxy> proxy_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, std::string>> headers_{{"Authorization", "Bearer first"}};
  std::vector<EgressTransformEvent> events_;
  int flows_done_ = 0;
};

http::response<http::string_body> roundtrip(auto& stream, beast::flat_buffer& buf,
                                            http::request<http::string_body> req) {
  req.prepare_payload();
  http::write(stream, req);
  http::response<http::string_body> res;
  http::read(stream, buf, res);
  return res;
}

http::request<http::string_body> get(std::string host, std::string target = "/v1") {
  http::request<http::string_body> r{http::verb::get, target, 11};
  r.set(http::field::host, host);
  return r;
}

TEST_F(InterceptTest, PlainHttpGetsTheHeadersReplacedPerRequestAndKeepsAlive) {
  Requests seen;
  Server up([&](tcp::socket& s) { answer_all(s, seen); });
  start(80, up.endpoint(), "api.test");

  asio::io_context io;
  tcp::socket c = connect(io);
  beast::flat_buffer buf;
  auto r1 = get("API.test:80");
  r1.set(http::field::authorization, "Bearer from-the-sandbox");  // replaced, not added
  EXPECT_EQ(roundtrip(c, buf, r1).result_int(), 200);
  // A POST with a chunked body, then a live update, on the same connection.
  http::request<http::string_body> post{http::verb::post, "/up", 11};
  post.set(http::field::host, "api.test");
  post.body() = std::string(100000, 'x');
  post.chunked(true);
  auto res2 = roundtrip(c, buf, post);
  EXPECT_EQ(res2.body(), "got 100000");
  set_headers({{"Authorization", "Bearer second"}, {"X-Extra", "e"}});
  EXPECT_EQ(roundtrip(c, buf, get("api.test")).result_int(), 200);

  auto got = seen.all();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(up.accepted(), 1);  // one upstream connection for the three requests
  EXPECT_EQ(got[0].count(http::field::authorization), 1u);
  EXPECT_EQ(got[0][http::field::authorization], "Bearer first");
  EXPECT_EQ(got[1][http::field::authorization], "Bearer first");
  EXPECT_EQ(got[1].body().size(), 100000u);
  EXPECT_EQ(got[2][http::field::authorization], "Bearer second");
  EXPECT_EQ(got[2]["X-Extra"], "e");

  auto ev = wait_events(3);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].host, "api.test");
  EXPECT_EQ(ev[0].rule, "api.test");
  EXPECT_EQ(ev[0].header_names, std::vector<std::string>{"Authorization"});
  EXPECT_EQ(ev[0].upstream_status, 200);
  EXPECT_EQ(ev[2].header_names, (std::vector<std::string>{"Authorization", "X-Extra"}));
}

TEST_F(InterceptTest, AnotherHostOnTheConnectionIsRefusedAndNeverForwarded) {
  Requests seen;
  Server up([&](tcp::socket& s) { answer_all(s, seen); });
  start(80, up.endpoint(), "api.test");

  asio::io_context io;
  tcp::socket c = connect(io);
  beast::flat_buffer buf;
  EXPECT_EQ(roundtrip(c, buf, get("api.test")).result_int(), 200);
  auto forged = roundtrip(c, buf, get("other.test"));
  EXPECT_EQ(forged.result_int(), 421);
  EXPECT_NE(forged.body().find("api.test"), std::string::npos);
  // An absolute URL naming another host is refused too, on an intercepted connection.
  tcp::socket c2 = connect(io);
  beast::flat_buffer buf2;
  EXPECT_EQ(roundtrip(c2, buf2, get("api.test")).result_int(), 200);
  EXPECT_EQ(roundtrip(c2, buf2, get("api.test", "http://other.test/")).result_int(), 400);
  ASSERT_EQ(seen.all().size(), 2u);
  auto ev = wait_events(4);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_NE(ev[3].refused.find("not a path"), std::string::npos);
  EXPECT_EQ(ev[1].host, "other.test");
  EXPECT_EQ(ev[1].upstream_status, 0);
  EXPECT_FALSE(ev[1].refused.empty());
  EXPECT_TRUE(ev[1].header_names.empty());
}

TEST_F(InterceptTest, HttpsIsTerminatedWithALeafForTheNameAndTheUpstreamVerified) {
  Requests seen;
  auto up_ctx = upstream_ctx("api.test");
  Server up([&](tcp::socket& s) {
    ssl::stream<tcp::socket&> tls(s, *up_ctx);
    tls.handshake(ssl::stream_base::server);
    answer_all(tls, seen);
  });
  start(443, up.endpoint(), "api.test");

  asio::io_context io;
  ssl::context cctx = client_ctx();
  for (int round = 0; round < 2; ++round) {
    tcp::socket c = connect(io);
    ssl::stream<tcp::socket&> tls(c, cctx);
    SSL_set_tlsext_host_name(tls.native_handle(), "api.test");
    tls.set_verify_callback(ssl::host_name_verification("api.test"));
    tls.handshake(ssl::stream_base::client);  // throws unless abxd's leaf for api.test verifies
    beast::flat_buffer buf;
    auto r = get("api.test");
    r.set("authorization", "Bearer sandbox");
    EXPECT_EQ(roundtrip(tls, buf, r).body(), "got 0");
    EXPECT_EQ(roundtrip(tls, buf, get("other.test")).result_int(), 421);
  }
  auto got = seen.all();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0][http::field::authorization], "Bearer first");
  EXPECT_EQ(got[0].count(http::field::authorization), 1u);
  EXPECT_EQ(abxd_ca_->minted(), 1u);  // the leaf was cached for the second connection
}

// ALPN: the upstream is offered h2 only when the sandbox offered it, and the sandbox gets h2 only
// when the upstream chose it; otherwise both legs speak HTTP/1.1. (The HTTP/2 relay itself is
// tests/e2e/network/rules_h2.sh's, against a real h2 server.)
std::atomic<bool> g_upstream_takes_h2{false};
std::atomic<int> g_upstream_offered_h2{-1};  // the last ClientHello the upstream saw: 1 offered h2

int upstream_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                  unsigned int inlen, void*) {
  static const unsigned char kH2Http11[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  bool offered = false;
  for (unsigned int i = 0; i < inlen; i += 1 + in[i])
    if (in[i] == 2 && i + 2 < inlen && in[i + 1] == 'h' && in[i + 2] == '2') offered = true;
  g_upstream_offered_h2 = offered ? 1 : 0;
  const bool h2 = g_upstream_takes_h2.load();
  unsigned char* sel = nullptr;
  if (SSL_select_next_proto(&sel, outlen, h2 ? kH2Http11 : kHttp11,
                            h2 ? sizeof kH2Http11 : sizeof kHttp11, in,
                            inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

std::string selected_alpn(SSL* s) {
  const unsigned char* p = nullptr;
  unsigned int n = 0;
  SSL_get0_alpn_selected(s, &p, &n);
  return std::string(reinterpret_cast<const char*>(p), n);
}

TEST_F(InterceptTest, AlpnIsHttp11OnBothLegsUnlessBothOfferH2) {
  Requests seen;
  auto up_ctx = upstream_ctx("api.test");
  SSL_CTX_set_alpn_select_cb(up_ctx->native_handle(), upstream_alpn, nullptr);
  Server up([&](tcp::socket& s) {
    ssl::stream<tcp::socket&> tls(s, *up_ctx);
    tls.handshake(ssl::stream_base::server);
    if (selected_alpn(tls.native_handle()) == "http/1.1") answer_all(tls, seen);
  });
  start(443, up.endpoint(), "api.test");
  asio::io_context io;
  ssl::context cctx = client_ctx();
  auto request = [&](bool offer_h2) {
    tcp::socket c = connect(io);
    ssl::stream<tcp::socket&> tls(c, cctx);
    SSL_set_tlsext_host_name(tls.native_handle(), "api.test");
    static const unsigned char kH2Http11[] = {2,   'h', '2', 8,   'h', 't',
                                              't', 'p', '/', '1', '.', '1'};
    static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    if (offer_h2) {
      SSL_set_alpn_protos(tls.native_handle(), kH2Http11, sizeof kH2Http11);
    } else {
      SSL_set_alpn_protos(tls.native_handle(), kHttp11, sizeof kHttp11);
    }
    tls.handshake(ssl::stream_base::client);
    const std::string alpn = selected_alpn(tls.native_handle());
    beast::flat_buffer buf;
    EXPECT_EQ(roundtrip(tls, buf, get("api.test")).body(), "got 0");
    return alpn;
  };
  // An upstream that would take h2: never offered it by a sandbox that did not offer it.
  g_upstream_takes_h2 = true;
  EXPECT_EQ(request(false), "http/1.1");
  EXPECT_EQ(g_upstream_offered_h2.load(), 0);
  // An upstream that speaks HTTP/1.1 only: offered h2 (the sandbox did), it chooses HTTP/1.1,
  // and so does the sandbox, whose h2 offer is declined.
  g_upstream_takes_h2 = false;
  EXPECT_EQ(request(true), "http/1.1");
  EXPECT_EQ(g_upstream_offered_h2.load(), 1);
  auto got = seen.all();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1][http::field::authorization], "Bearer first");
}

// A sandbox that opens a connection per request: the proxy's upstream handshakes after the first
// resume its TLS session (no full handshake, no chain verification again), and still carry the
// rule's header.
TEST_F(InterceptTest, TheNextFlowToTheSameUpstreamResumesItsTlsSession) {
  Requests seen;
  std::mutex rmu;
  std::vector<bool> resumed;
  auto up_ctx = upstream_ctx("api.test");
  Server up([&](tcp::socket& s) {
    ssl::stream<tcp::socket&> tls(s, *up_ctx);
    tls.handshake(ssl::stream_base::server);
    {
      std::lock_guard lock(rmu);
      resumed.push_back(SSL_session_reused(tls.native_handle()) == 1);
    }
    answer_all(tls, seen);
  });
  start(443, up.endpoint(), "api.test");

  asio::io_context io;
  ssl::context cctx = client_ctx();
  for (int round = 0; round < 3; ++round) {
    tcp::socket c = connect(io);
    ssl::stream<tcp::socket&> tls(c, cctx);
    SSL_set_tlsext_host_name(tls.native_handle(), "api.test");
    tls.handshake(ssl::stream_base::client);
    beast::flat_buffer buf;
    auto r = get("api.test");
    r.keep_alive(false);
    EXPECT_EQ(roundtrip(tls, buf, r).body(), "got 0");
  }
  {
    std::lock_guard lock(rmu);
    ASSERT_EQ(resumed.size(), 3u);
    EXPECT_FALSE(resumed[0]);
    EXPECT_TRUE(resumed[1]);
    EXPECT_TRUE(resumed[2]);  // the resumed connection's own new ticket was kept
  }
  auto got = seen.all();
  ASSERT_EQ(got.size(), 3u);
  for (const auto& r : got) EXPECT_EQ(r[http::field::authorization], "Bearer first");
}

TEST_F(InterceptTest, AResponseFramedByTheConnectionsEndEndsWithCloseNotify) {
  auto up_ctx = upstream_ctx("api.test");
  Server up([&](tcp::socket& s) {
    ssl::stream<tcp::socket&> tls(s, *up_ctx);
    tls.handshake(ssl::stream_base::server);
    beast::flat_buffer buf;
    http::request<http::string_body> req;
    http::read(tls, buf, req);
    asio::write(tls, asio::buffer(std::string_view(
                         "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")));
    boost::system::error_code ec;
    tls.shutdown(ec);
  });
  start(443, up.endpoint(), "api.test");

  asio::io_context io;
  ssl::context cctx = client_ctx();
  tcp::socket c = connect(io);
  ssl::stream<tcp::socket&> tls(c, cctx);
  SSL_set_tlsext_host_name(tls.native_handle(), "api.test");
  tls.handshake(ssl::stream_base::client);
  beast::flat_buffer buf;
  auto r = get("api.test");
  r.prepare_payload();
  http::write(tls, r);
  http::response<http::string_body> res;
  boost::system::error_code ec;
  http::read(tls, buf, res, ec);
  EXPECT_FALSE(ec) << ec.message();  // stream_truncated without the proxy's close_notify
  EXPECT_EQ(res.body(), "until the end");
}

TEST_F(InterceptTest, AnUntrustedUpstreamIsATlsFailureForTheSandbox) {
  Requests seen;
  auto up_ctx = upstream_ctx("api.test");
  Server up([&](tcp::socket& s) {
    ssl::stream<tcp::socket&> tls(s, *up_ctx);
    boost::system::error_code ec;
    tls.handshake(ssl::stream_base::server, ec);
    if (!ec) answer_all(tls, seen);
  });
  start(443, up.endpoint(), "api.test", /*trust_test_ca=*/false);

  asio::io_context io;
  ssl::context cctx = client_ctx();
  tcp::socket c = connect(io);
  ssl::stream<tcp::socket&> tls(c, cctx);
  SSL_set_tlsext_host_name(tls.native_handle(), "api.test");
  boost::system::error_code ec;
  tls.handshake(ssl::stream_base::client, ec);
  EXPECT_TRUE(ec) << "the sandbox's handshake succeeded against an unverified upstream";
  EXPECT_TRUE(seen.all().empty());
  auto ev = wait_events(1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].refused.find("upstream TLS"), std::string::npos) << ev[0].refused;
  EXPECT_EQ(abxd_ca_->minted(), 0u);  // no certificate for the name was ever presented
}

TEST_F(InterceptTest, UnmatchedHttpsStaysAByteRelay) {
  // The upstream presents the test CA's certificate directly: the client, trusting that CA and
  // not abxd's, verifies it, so nothing was terminated in between.
  Requests seen;
  auto up_ctx = upstream_ctx("other.test");
  Server up([&](tcp::socket& s) {
    ssl::stream<tcp::socket&> tls(s, *up_ctx);
    tls.handshake(ssl::stream_base::server);
    answer_all(tls, seen);
  });
  start(443, up.endpoint(), "api.test");

  asio::io_context io;
  ssl::context cctx(ssl::context::tls_client);
  cctx.load_verify_file(test_ca_->cert_path());
  cctx.set_verify_mode(ssl::verify_peer);
  tcp::socket c = connect(io);
  ssl::stream<tcp::socket&> tls(c, cctx);
  SSL_set_tlsext_host_name(tls.native_handle(), "other.test");
  tls.handshake(ssl::stream_base::client);
  beast::flat_buffer buf;
  EXPECT_EQ(roundtrip(tls, buf, get("other.test")).result_int(), 200);
  ASSERT_EQ(seen.all().size(), 1u);
  EXPECT_EQ(seen.all()[0].count(http::field::authorization), 0u);
  EXPECT_EQ(abxd_ca_->minted(), 0u);
}

TEST(CertAuthority, KeyIsPrivateAndReloaded) {
  abx::testing::TempDir tmp("abx-ca");
  const fs::path dir = tmp / "ca";
  auto a = CertAuthority::load_or_create(dir.string());
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  struct stat st {};
  ASSERT_EQ(::stat((dir / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
  auto b = CertAuthority::load_or_create(dir.string());
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_EQ((*a)->cert_pem(), (*b)->cert_pem());  // the same CA, not a new one
  // A key others may read is refused.
  ::chmod((dir / "ca.key").c_str(), 0644);
  EXPECT_FALSE(CertAuthority::load_or_create(dir.string()).ok());
  ::chmod((dir / "ca.key").c_str(), 0400);
  fs::remove(dir / "ca.crt");
  EXPECT_FALSE(CertAuthority::load_or_create(dir.string()).ok());
}

}  // namespace
}  // namespace abx::platform
