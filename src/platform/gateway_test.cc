// The gateway over loopback: control requests, proxying to a real command server, streaming
// without buffering, large uploads, upgrades, hop-by-hop headers and routing errors. The
// "sandbox" here is a host loopback port (the runtime's netns sockets are tested in runtime/).
#include "abx/platform/gateway.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <future>
#include <optional>
#include <thread>

#include "abx/http/client.h"
#include "abx/registry/registry.h"
#include "abx/runtime/netns.h"
#include "abx/server/server.h"
#include "abx/testing/socket.h"

namespace abx::platform {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;

// Routes every sandbox id "known..." to a loopback port; checks X-Access-Token == "tok".
class LoopbackBackend : public GatewayBackend {
 public:
  std::map<std::string, std::uint16_t> ports;  // sandbox id -> host port standing in for it
  std::atomic<int> control_calls{0};
  std::string last_forwarded_connection;

  http::Response handle_control(http::Request&& req) override {
    ++control_calls;
    return http::json_response(200, json::object{{"path", std::string(req.target())},
                                                 {"body", req.body()},
                                                 {"peer", std::string(req[kPeerAddressField])}});
  }
  Admission admit(const Route& route, const bhttp::request_header<>& headers) override {
    if (ports.find(route.sandbox_id) == ports.end()) {
      return {not_found("sandbox '" + route.sandbox_id + "' not found")};
    }
    if (headers["X-Access-Token"] != "tok") {
      return {Error(ErrorCode::kUnauthenticated, "invalid access token for the sandbox")};
    }
    return {Status{}, epoch.load()};
  }
  Result<UniqueFd> connect_sandbox(const Route& route) override {
    ++connects;
    return runtime::connect_loopback(-1, ports.at(route.sandbox_id), std::chrono::seconds(2));
  }
  // With `fast`, new connections take the I/O thread's way: a socket made here (the host's
  // netns stands in for the sandbox's), connected by the gateway to route.port.
  Result<UniqueFd> sandbox_socket(const Route& route) override {
    if (!fast) return GatewayBackend::sandbox_socket(route);
    ++sockets;
    return runtime::tcp_socket_in(-1);
  }
  bool fast = false;
  std::atomic<int> sockets{0};
  std::atomic<int> connects{0};
  std::atomic<std::uint64_t> epoch{0};
};

// A one-shot raw TCP upstream: accepts one connection and runs `fn(fd)`.
class RawUpstream {
 public:
  explicit RawUpstream(std::function<void(int)> fn) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 4);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, fn = std::move(fn)] {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        fn(c);
        ::close(c);
      }
    });
  }
  ~RawUpstream() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

std::string read_until(int fd, const std::string& needle) {
  std::string got;
  char buf[4096];
  while (got.find(needle) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

// Everything `fd` receives until its peer closes it; `closed` says whether that happened (else
// the socket's receive timeout ran out first).
std::string read_to_close(int fd, bool* closed = nullptr) {
  std::string got;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<std::size_t>(n));
  if (closed) *closed = n == 0;
  return got;
}

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GatewayOptions opt;
    opt.port = 0;
    opt.io_threads = 2;
    auto g = Gateway::start(opt, backend_);
    ASSERT_TRUE(g.ok()) << g.error().message();
    gw_ = std::move(*g);
  }
  http::Response send(http::Request req) {
    auto r = http::fetch("127.0.0.1", gw_->port(), std::move(req), std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : http::Response{};
  }
  LoopbackBackend backend_;
  std::unique_ptr<Gateway> gw_;
};

TEST_F(GatewayTest, ControlPlaneGetsCompleteRequests) {
  auto r = send(http::make_request(bhttp::verb::post, "/sandboxes", R"({"templateID":"base"})"));
  ASSERT_EQ(r.result_int(), 200);
  EXPECT_EQ(json::parse(r.body()).at("body"), R"({"templateID":"base"})");
  EXPECT_EQ(backend_.control_calls.load(), 1);
}

// The API's failed-auth limit is per source (issue 35, finding 4): the source the backend gets
// is the connection's peer, never what the client wrote in the field.
TEST_F(GatewayTest, ControlRequestsCarryTheConnectionsPeerNotTheClientsClaim) {
  UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7f000003);  // 127.0.0.3: loopback has all of 127/8
  ASSERT_EQ(::bind(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(gw_->port());
  ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  send_all(c.get(),
           "GET /sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nAbx-Peer-Address: 10.9.9.9\r\n"
           "abx-peer-address: 10.9.9.8\r\nConnection: close\r\n\r\n");
  std::string got = read_to_close(c.get());
  ASSERT_NE(got.find(" 200 "), std::string::npos) << got;
  const std::string body = got.substr(got.find("\r\n\r\n") + 4);
  EXPECT_EQ(json::parse(body).at("peer"), "127.0.0.3") << got;
}

TEST_F(GatewayTest, ProxiesToARealCommandServerByHostAndByHeaders) {
  registry::CommandRegistry reg;
  reg.command("demo").arg("x").arg("y", "", "hello").bind([](int x, std::string y) {
    return std::to_string(x) + ": " + y;
  });
  server::CommandServerOptions so;
  so.port = 0;
  so.access_token = "tok";
  auto cs = server::CommandServer::start(reg, so);
  ASSERT_TRUE(cs.ok());
  backend_.ports["abc123"] = (*cs)->port();

  auto by_host = http::make_request(bhttp::verb::post, "/commands/demo", R"({"x":42,"y":"world"})");
  by_host.set(bhttp::field::host, "49982-abc123.localhost");
  by_host.set("X-Access-Token", "tok");
  auto r = send(std::move(by_host));
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), R"({"result":"42: world"})");

  // Keep-alive through the proxy, routed by the SDK's headers.
  auto c = http::Connection::open("127.0.0.1", gw_->port());
  ASSERT_TRUE(c.ok());
  for (int i = 0; i < 20; ++i) {
    auto req = http::make_request(bhttp::verb::post, "/commands/demo",
                                  R"({"x":)" + std::to_string(i) + "}");
    req.set("E2b-Sandbox-Id", "abc123");
    req.set("E2b-Sandbox-Port", "49982");
    req.set("X-Access-Token", "tok");
    auto resp = (*c)->send(std::move(req));
    ASSERT_TRUE(resp.ok()) << resp.error().message();
    EXPECT_EQ(resp->body(), R"({"result":")" + std::to_string(i) + R"(: hello"})");
  }
  // One for the first request; the rest, on one client connection, reuse one upstream: the
  // first one's (idle since its client connection ended) when the kernel gave this client
  // connection to the same I/O thread, else a second.
  const int connects = backend_.connects.load();
  EXPECT_TRUE(connects == 1 || connects == 2) << connects;
  // A checkpoint of the sandbox (a new epoch): the pooled connection is not reused.
  ++backend_.epoch;
  for (int i = 0; i < 3; ++i) {
    auto req = http::make_request(bhttp::verb::post, "/commands/demo", R"({"x":7})");
    req.set("E2b-Sandbox-Id", "abc123");
    req.set("E2b-Sandbox-Port", "49982");
    req.set("X-Access-Token", "tok");
    auto resp = (*c)->send(std::move(req));
    ASSERT_TRUE(resp.ok()) << resp.error().message();
    EXPECT_EQ(resp->body(), R"({"result":"7: hello"})");
  }
  EXPECT_EQ(backend_.connects.load(), connects + 1);  // one new connection, then pooled again
  // Control plane on the same connection still works.
  auto ctl = (*c)->send(http::make_request(bhttp::verb::get, "/sandboxes"));
  ASSERT_TRUE(ctl.ok());
  EXPECT_EQ(json::parse(ctl->body()).at("path"), "/sandboxes");
}

// A real command server on loopback with one command, demo(x) = x + 1, token "tok".
class PlusOneServer {
 public:
  PlusOneServer() {
    reg_.command("demo").arg("x").bind([](int x) { return x + 1; });
    server::CommandServerOptions so;
    so.port = 0;
    so.access_token = "tok";
    if (auto s = server::CommandServer::start(reg_, so); s.ok()) server_ = std::move(*s);
  }
  bool ok() const { return server_ != nullptr; }
  std::uint16_t port() const { return server_->port(); }

 private:
  registry::CommandRegistry reg_;
  std::unique_ptr<server::CommandServer> server_;
};

// A backend that can make the sandbox's socket on the I/O thread: every new client connection's
// upstream is connected there, and connect_sandbox (the worker pool) is not called. A connect
// refused there goes to connect_sandbox, whose error the client gets.
TEST_F(GatewayTest, NewUpstreamsAreConnectedOnTheIoThreadWhenTheBackendMakesTheSocket) {
  backend_.fast = true;
  PlusOneServer cs;
  ASSERT_TRUE(cs.ok());
  for (int i = 0; i < 3; ++i) {  // a new client connection each time (http::fetch)
    // Three sandboxes (one server): none takes an idle connection another one left.
    const std::string id = "fast" + std::to_string(i);
    backend_.ports[id] = cs.port();
    auto req = http::make_request(bhttp::verb::post, "/commands/demo", R"({"x":41})");
    req.set("E2b-Sandbox-Id", id);
    req.set("E2b-Sandbox-Port", std::to_string(cs.port()));
    req.set("X-Access-Token", "tok");
    auto r = send(std::move(req));
    EXPECT_EQ(r.result_int(), 200);
    EXPECT_EQ(r.body(), R"({"result":42})");
  }
  EXPECT_EQ(backend_.sockets.load(), 3);
  EXPECT_EQ(backend_.connects.load(), 0);

  // A port nothing listens on: refused on the I/O thread, then by connect_sandbox.
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(l);  // bound, never listened: the port is free and refuses
  const std::uint16_t dead = ntohs(a.sin_port);
  backend_.ports["dead"] = dead;
  auto req = http::make_request(bhttp::verb::get, "/health");
  req.set("E2b-Sandbox-Id", "dead");
  req.set("E2b-Sandbox-Port", std::to_string(dead));
  req.set("X-Access-Token", "tok");
  auto r = send(std::move(req));
  EXPECT_EQ(r.result_int(), 502);
  EXPECT_EQ(backend_.sockets.load(), 4);
  EXPECT_EQ(backend_.connects.load(), 1);
  EXPECT_NE(r.body().find("127.0.0.1:" + std::to_string(dead)), std::string::npos) << r.body();
}

// An upstream connection outlives its client connection: the next client connection of the
// same I/O thread takes it instead of connecting (as nginx's upstream keepalive). One the sandbox
// closed while idle is never reused: a new one is made, and the call goes through.
TEST(GatewayIdleUpstreams, AnEndedClientConnectionsUpstreamServesTheNextOne) {
  LoopbackBackend backend;
  GatewayOptions opt;
  opt.port = 0;
  opt.io_threads = 1;  // every client connection on the one I/O thread
  auto gw = Gateway::start(opt, backend);
  ASSERT_TRUE(gw.ok()) << gw.error().message();
  PlusOneServer cs;
  ASSERT_TRUE(cs.ok());
  backend.ports["pooled"] = cs.port();
  auto call = [&](const std::string& sandbox) {
    auto req = http::make_request(bhttp::verb::post, "/commands/demo", R"({"x":1})");
    req.set("E2b-Sandbox-Id", sandbox);
    req.set("E2b-Sandbox-Port", "49982");
    req.set("X-Access-Token", "tok");
    req.keep_alive(false);
    auto r = http::fetch("127.0.0.1", (*gw)->port(), std::move(req), std::chrono::seconds(10));
    return r.ok() ? r->result_int() : 0u;
  };
  for (int i = 0; i < 4; ++i) EXPECT_EQ(call("pooled"), 200u) << i;
  EXPECT_EQ(backend.connects.load(), 1);

  // An upstream that answers once and closes: the idle connection it leaves is not taken.
  for (int round = 0; round < 2; ++round) {
    RawUpstream once([](int fd) {
      read_until(fd, "\r\n\r\n");
      send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    });
    backend.ports["once"] = once.port();
    EXPECT_EQ(call("once"), 200u) << round;
  }
  EXPECT_EQ(backend.connects.load(), 3);
}

// A client connection keeps its upstream connection from request to request. When the sandbox
// closes that one in between (its server's idle timeout, a restart), the next request does not
// go down the closed connection (a 502): it is connected again, and the call goes through.
TEST_F(GatewayTest, AnUpstreamClosedBetweenTwoRequestsOfAClientConnectionIsReplaced) {
  auto answer_once_and_close = [](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  };
  auto first = std::make_unique<RawUpstream>(answer_once_and_close);
  RawUpstream second(answer_once_and_close);
  backend_.ports["closing"] = first->port();
  auto client = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(client);
  const std::string req =
      "GET /x HTTP/1.1\r\nHost: 49983-closing.localhost\r\nX-Access-Token: tok\r\n\r\n";
  for (int call = 0; call < 2; ++call) {
    send_all(client.get(), req);
    const std::string got = read_until(client.get(), "\r\n\r\nok");
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << call << ": " << got;
    if (call == 1) break;
    first.reset();  // its connection is closed (joined); a new one goes to `second`
    backend_.ports["closing"] = second.port();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the FIN reaches abxd
  }
  EXPECT_EQ(backend_.connects.load(), 2);
}

// A kept upstream connection's answer is awaited on the wait armed while the connection was idle
// (await_answer in gateway.cc): an answer that takes its time and quick ones are each relayed
// whole, on one upstream connection. The backend makes the socket, so the gateway connects it on
// its I/O thread and registers it afresh for reads only (the connect's EPOLLOUT dropped).
TEST_F(GatewayTest, AnswersOnAKeptUpstreamAreAwaitedQuickOrSlow) {
  backend_.fast = true;
  RawUpstream up([](int fd) {
    for (int call = 0; call < 4; ++call) {
      if (read_until(fd, "\r\n\r\n").empty()) return;
      if (call == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok" + std::to_string(call));
    }
  });
  backend_.ports["kept"] = up.port();
  auto client = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(client);
  const std::string req =
      "GET /x HTTP/1.1\r\nHost: localhost\r\nE2b-Sandbox-Id: kept\r\n"
      "E2b-Sandbox-Port: " +
      std::to_string(up.port()) + "\r\nX-Access-Token: tok\r\n\r\n";
  for (int call = 0; call < 4; ++call) {
    send_all(client.get(), req);
    const std::string want = "ok" + std::to_string(call);
    const std::string got = read_until(client.get(), want);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << call << ": " << got;
    EXPECT_NE(got.find(want), std::string::npos) << call << ": " << got;
  }
  EXPECT_EQ(backend_.sockets.load(), 1);
  EXPECT_EQ(backend_.connects.load(), 0);
}

// The sandbox takes a request on a kept connection and closes it without answering: the awaited
// read sees the end, and the client gets a 502 rather than a hang.
TEST_F(GatewayTest, AKeptUpstreamClosedInsteadOfAnsweringGives502) {
  RawUpstream up([](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    read_until(fd, "\r\n\r\n");  // the second request; closed unanswered on return
  });
  backend_.ports["mute"] = up.port();
  auto client = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(client);
  const std::string req =
      "GET /x HTTP/1.1\r\nHost: 49983-mute.localhost\r\nX-Access-Token: tok\r\n\r\n";
  send_all(client.get(), req);
  const std::string first = read_until(client.get(), "\r\n\r\nok");
  EXPECT_EQ(first.rfind("HTTP/1.1 200", 0), 0u) << first;
  send_all(client.get(), req);
  const std::string second = read_to_close(client.get());
  EXPECT_EQ(second.rfind("HTTP/1.1 502", 0), 0u) << second;
  EXPECT_NE(second.find("no response from the sandbox"), std::string::npos) << second;
}

// The gateway stops while a request waits for its answer on a kept upstream connection: the
// wait, and the coroutine it would resume, go with the I/O threads (ASan and LSan check that
// nothing is used after or left behind), and the client's connection is closed.
TEST_F(GatewayTest, StoppingWhileAnAnswerIsAwaitedOnAKeptUpstreamFreesItAll) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> second_arrived;
  auto arrived = second_arrived.get_future();
  RawUpstream up([&second_arrived, released](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    read_until(fd, "\r\n\r\n");
    second_arrived.set_value();
    released.wait_for(std::chrono::seconds(10));  // the second is never answered
  });
  backend_.ports["silent"] = up.port();
  auto client = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(client);
  const std::string req =
      "GET /x HTTP/1.1\r\nHost: 49983-silent.localhost\r\nX-Access-Token: tok\r\n\r\n";
  send_all(client.get(), req);
  const std::string first = read_until(client.get(), "\r\n\r\nok");
  EXPECT_EQ(first.rfind("HTTP/1.1 200", 0), 0u) << first;
  send_all(client.get(), req);
  ASSERT_EQ(arrived.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  gw_->shutdown(std::chrono::milliseconds(0));
  bool closed = false;
  EXPECT_EQ(read_to_close(client.get(), &closed), "");
  EXPECT_TRUE(closed);
  release.set_value();
}

TEST_F(GatewayTest, UnknownSandboxIs502InE2bShape) {
  auto req = http::make_request(bhttp::verb::get, "/health");
  req.set(bhttp::field::host, "49983-nosuch.localhost");
  req.set("X-Access-Token", "tok");
  auto r = send(std::move(req));
  EXPECT_EQ(r.result_int(), 502);
  auto b = json::parse(r.body());
  EXPECT_EQ(b.at("code"), 502);
  EXPECT_NE(std::string(b.at("message").as_string()).find("nosuch"), std::string::npos);
}

TEST_F(GatewayTest, WrongTokenIs401AndNothingReachesTheSandbox) {
  std::atomic<bool> reached{false};
  RawUpstream up([&](int) { reached = true; });
  backend_.ports["abc"] = up.port();
  auto req = http::make_request(bhttp::verb::get, "/health");
  req.set(bhttp::field::host, "49983-abc.localhost");
  req.set("X-Access-Token", "another-sandboxes-token");
  auto r = send(std::move(req));
  EXPECT_EQ(r.result_int(), 401);
  EXPECT_EQ(json::parse(r.body()).at("code"), 401);
  EXPECT_FALSE(reached.load());
  backend_.ports.erase("abc");
  // Unblock the upstream's accept so it can be torn down.
  (void)runtime::connect_loopback(-1, up.port(), std::chrono::seconds(1));
}

TEST_F(GatewayTest, BadRoutingIs400) {
  for (const char* host :
       {"0-abc.localhost", "65536-abc.localhost", "080-abc.localhost", "80-ABC:x.localhost"}) {
    auto req = http::make_request(bhttp::verb::get, "/");
    req.set(bhttp::field::host, host);
    EXPECT_EQ(send(std::move(req)).result_int(), 400) << host;
  }
}

TEST_F(GatewayTest, StreamsAreRelayedAsTheyArrive) {
  std::promise<void> client_saw_first;
  auto saw = client_saw_first.get_future();
  RawUpstream up([&](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(fd,
             "HTTP/1.1 200 OK\r\nContent-Type: application/connect+json\r\n"
             "Transfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n");
    // Only once the client has the first chunk does the upstream finish: a buffering proxy
    // would deadlock here (and the test would fail on its timeout).
    saw.wait_for(std::chrono::seconds(10));
    send_all(fd, "6\r\nsecond\r\n0\r\n\r\n");
  });
  backend_.ports["stream"] = up.port();
  UniqueFd conn = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(conn.valid());
  int fd = conn.get();
  send_all(fd,
           "POST /process.Process/Start HTTP/1.1\r\nHost: 49983-stream.localhost\r\n"
           "X-Access-Token: tok\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  std::string got = read_until(fd, "first");
  EXPECT_NE(got.find("first"), std::string::npos) << got;
  EXPECT_EQ(got.find("second"), std::string::npos);
  client_saw_first.set_value();
  got += read_until(fd, "0\r\n\r\n");
  conn.reset();
  EXPECT_NE(got.find("second"), std::string::npos) << got;
}

std::size_t count_of(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
  return n;
}

// Found by the E2B JS SDK, whose multipart uploads are chunked: the relay used to end every
// chunked body with two last-chunks, and the second one was parsed as the start of the next
// request on the kept-alive upstream connection ("malformed HTTP request: bad method").
TEST_F(GatewayTest, ChunkedBodiesEndWithOneLastChunkBothWays) {
  std::string upstream_saw;
  std::optional<RawUpstream> up;
  up.emplace([&](int fd) {
    upstream_saw = read_until(fd, "\r\n0\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    // Everything else the proxy sends: it keeps the connection for its next client connection
    // (idle, waiting), so what came within half a second.
    timeval tv{0, 500'000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    upstream_saw += read_to_close(fd);
  });
  backend_.ports["chunky"] = up->port();
  UniqueFd conn = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(conn.valid());
  int fd = conn.get();
  send_all(fd,
           "POST /files?path=%2Ftmp%2Fa HTTP/1.1\r\nHost: 49983-chunky.localhost\r\n"
           "X-Access-Token: tok\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
           "3\r\nabc\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the last chunk on its own
  send_all(fd, "0\r\n\r\n");
  std::string got = read_to_close(fd);
  conn.reset();
  EXPECT_EQ(count_of(got, "0\r\n\r\n"), 1u) << got;
  EXPECT_TRUE(got.ends_with("5\r\nhello\r\n0\r\n\r\n")) << got;
  up.reset();  // joins the upstream thread: it has seen all the proxy sent
  EXPECT_EQ(count_of(upstream_saw, "0\r\n\r\n"), 1u) << upstream_saw;
  EXPECT_TRUE(upstream_saw.ends_with("\r\n\r\n3\r\nabc\r\n0\r\n\r\n")) << upstream_saw;
}

// An answer with neither Content-Length nor chunked framing runs until the sandbox closes its
// connection (RFC 9112 §6.3): it is relayed as it arrives, and the client's connection is closed
// after it (with Connection: close), since the client too can see its end only as the close.
// Kept alive, the client would wait for the end of a body that never comes.
TEST_F(GatewayTest, AnAnswerThatRunsToTheCloseClosesTheClientConnection) {
  RawUpstream up([&](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello ");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    send_all(fd, "world");
  });
  backend_.ports["unframed"] = up.port();
  UniqueFd conn = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(conn.valid());
  int fd = conn.get();
  send_all(fd,
           "GET /stream HTTP/1.1\r\nHost: 49983-unframed.localhost\r\n"
           "X-Access-Token: tok\r\n\r\n");
  bool closed = false;
  std::string got = read_to_close(fd, &closed);
  EXPECT_TRUE(closed) << "the connection was not closed after the body: " << got;
  EXPECT_TRUE(got.ends_with("\r\n\r\nhello world")) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
}

// A client that gives up on a stream the sandbox is silent on (a runCode past its timeout: the
// cell computes and prints nothing) closes its connection; the proxy closes the sandbox's side
// too, at once, so that the server there sees its client go (abx-interp then interrupts the
// cell) rather than at its next write, or never.
TEST_F(GatewayTest, AClientLeavingASilentStreamClosesTheUpstreamConnection) {
  std::atomic<int> upstream_saw{0};  // 1: the close; 2: nothing within 10 s
  RawUpstream up([&](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nstart\n\r\n");
    timeval tv{10, 0};  // bounded: without the watch, the close never comes
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    upstream_saw = ::recv(fd, &c, 1, 0) == 0 ? 1 : 2;
  });
  backend_.ports["silent"] = up.port();
  {
    UniqueFd conn = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
    ASSERT_TRUE(conn.valid());
    send_all(conn.get(),
             "POST /execute HTTP/1.1\r\nHost: 49999-silent.localhost\r\n"
             "X-Access-Token: tok\r\nContent-Length: 2\r\n\r\n{}");
    std::string got = read_until(conn.get(), "start\n");
    ASSERT_NE(got.find("start"), std::string::npos) << got;
  }  // the client leaves
  for (int i = 0; i < 1500 && upstream_saw == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(upstream_saw, 1) << "the sandbox's side was not closed";
}

TEST_F(GatewayTest, LargeUploadIsStreamedThrough) {
  constexpr std::size_t kSize = 8u << 20;  // bigger than any buffer on the way
  std::atomic<std::size_t> received{0};
  RawUpstream up([&](int fd) {
    std::string head = read_until(fd, "\r\n\r\n");
    std::size_t body_start = head.find("\r\n\r\n") + 4;
    std::size_t n = head.size() - body_start;
    char buf[65536];
    while (n < kSize) {
      ssize_t k = ::recv(fd, buf, sizeof buf, 0);
      if (k <= 0) break;
      n += static_cast<std::size_t>(k);
    }
    received = n;
    std::string body = std::to_string(n);
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
                     body);
  });
  backend_.ports["big"] = up.port();
  auto req = http::make_request(bhttp::verb::post, "/files?path=/tmp/x", std::string(kSize, 'z'),
                                "application/octet-stream");
  req.set(bhttp::field::host, "49983-big.localhost");
  req.set("X-Access-Token", "tok");
  auto r = send(std::move(req));
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), std::to_string(kSize));
  EXPECT_EQ(received.load(), kSize);
}

// envd refuses an upload from its header (an expired signature), answers and closes with the
// body unread; the gateway's next body write then fails on the reset. The client must get
// envd's answer, not a 502 "sandbox connection failed".
TEST_F(GatewayTest, EarlyAnswerOfAnUpstreamThatStopsReadingIsRelayed) {
  RawUpstream up([&](int fd) {
    read_until(fd, "\r\n\r\n");
    std::string body = R"({"code":401,"message":"signature is already expired"})";
    send_all(fd,
             "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
             "Content-Length: " +
                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    // Closing with the body unread resets the connection (RawUpstream closes `fd`).
  });
  backend_.ports["early"] = up.port();
  UniqueFd conn = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(conn.valid());
  const std::string body(8u << 20, 'u');  // far more than the socket buffers on the way hold
  send_all(conn.get(),
           "POST /files?path=up.txt HTTP/1.1\r\nHost: localhost\r\nE2b-Sandbox-Id: early\r\n"
           "E2b-Sandbox-Port: 49983\r\nX-Access-Token: tok\r\n"
           "Content-Type: application/octet-stream\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n\r\n");
  // The body goes out beside the read, as a client's would; it is cut short by the close.
  std::thread writer([fd = conn.get(), &body] { send_all(fd, body); });
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(conn.get(), buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::shutdown(conn.get(), SHUT_RDWR);  // ends a writer still blocked
  writer.join();
  EXPECT_EQ(got.rfind("HTTP/1.1 401", 0), 0u) << got.substr(0, 300);
  EXPECT_NE(got.find("signature is already expired"), std::string::npos) << got.substr(0, 300);
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got.substr(0, 300);
}

TEST_F(GatewayTest, HopByHopHeadersStopAtTheProxy) {
  std::string seen;
  RawUpstream up([&](int fd) {
    seen = read_until(fd, "\r\n\r\n");
    send_all(fd,
             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\n"
             "X-Upstream: yes\r\n\r\nok");
  });
  backend_.ports["hop"] = up.port();
  auto req = http::make_request(bhttp::verb::get, "/x");
  req.set(bhttp::field::host, "49983-hop.localhost");
  req.set("X-Access-Token", "tok");
  req.set(bhttp::field::connection, "keep-alive, X-Secret-Hop");
  req.set("X-Secret-Hop", "drop me");
  req.set(bhttp::field::te, "trailers");
  req.set("X-End-To-End", "keep me");
  auto r = send(std::move(req));
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), "ok");
  EXPECT_EQ(r["X-Upstream"], "yes");
  EXPECT_EQ(r.find(bhttp::field::keep_alive), r.end());
  EXPECT_EQ(seen.find("X-Secret-Hop"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("TE:"), std::string::npos) << seen;
  EXPECT_NE(seen.find("X-End-To-End: keep me"), std::string::npos) << seen;
}

TEST_F(GatewayTest, UpgradeBecomesATunnel) {
  RawUpstream up([&](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(
        fd,
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    std::string got = read_until(fd, "ping");
    send_all(fd, "pong");
  });
  backend_.ports["ws"] = up.port();
  UniqueFd conn = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(conn.valid());
  int fd = conn.get();
  send_all(fd,
           "GET /ws HTTP/1.1\r\nHost: 8080-ws.localhost\r\nX-Access-Token: tok\r\n"
           "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
  std::string got = read_until(fd, "\r\n\r\n");
  EXPECT_NE(got.find("101"), std::string::npos) << got;
  EXPECT_NE(got.find("Upgrade: websocket"), std::string::npos) << got;
  send_all(fd, "ping");
  got = read_until(fd, "pong");
  EXPECT_NE(got.find("pong"), std::string::npos);
  conn.reset();
}

// Issue 11: the API key and an abx signature never reach the sandbox; the sandbox's own
// credentials (X-Access-Token, a Basic username for envd) do.
TEST_F(GatewayTest, PlatformCredentialsStopAtTheProxy) {
  std::string seen_key, seen_sig, seen_basic;
  RawUpstream key_up([&](int fd) {
    seen_key = read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  RawUpstream sig_up([&](int fd) {
    seen_sig = read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  RawUpstream basic_up([&](int fd) {
    seen_basic = read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  backend_.ports["key"] = key_up.port();
  backend_.ports["sig"] = sig_up.port();
  backend_.ports["basic"] = basic_up.port();
  auto request = [](const std::string& host, const std::string& authorization) {
    auto req = http::make_request(bhttp::verb::get, "/x");
    req.set(bhttp::field::host, host);
    req.set("X-Access-Token", "tok");
    req.set("X-API-KEY", "e2b_0123456789abcdef");
    req.set(bhttp::field::authorization, authorization);
    return req;
  };
  EXPECT_EQ(send(request("49983-key.localhost", "bearer e2b_0123456789abcdef")).result_int(), 200);
  EXPECT_EQ(send(request("49983-sig.localhost",
                         "ABX-HMAC-SHA256 Credential=ak,SignedHeaders=host,Signature=00"))
                .result_int(),
            200);
  EXPECT_EQ(send(request("49983-basic.localhost", "Basic dXNlcjo=")).result_int(), 200);
  for (const std::string* seen : {&seen_key, &seen_sig, &seen_basic}) {
    EXPECT_NE(seen->find("X-Access-Token: tok"), std::string::npos) << *seen;
    EXPECT_EQ(seen->find("e2b_0123456789abcdef"), std::string::npos) << *seen;
    EXPECT_EQ(seen->find("X-API-KEY"), std::string::npos) << *seen;
  }
  EXPECT_EQ(seen_key.find("Authorization"), std::string::npos) << seen_key;
  EXPECT_EQ(seen_sig.find("ABX-HMAC-SHA256"), std::string::npos) << seen_sig;
  EXPECT_NE(seen_basic.find("Authorization: Basic dXNlcjo="), std::string::npos) << seen_basic;
}

// Issue 11: a 101 to a request that asked for no upgrade is refused and the client's
// connection is closed, never turned into a tunnel.
TEST_F(GatewayTest, UnsolicitedSwitchingProtocolsIsRefused) {
  RawUpstream up([&](int fd) {
    read_until(fd, "\r\n\r\n");
    send_all(fd, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n");
    send_all(fd, "tunnel bytes");
  });
  backend_.ports["sneaky"] = up.port();
  UniqueFd conn = abx::testing::connect_raw(gw_->port(), std::chrono::seconds(10));
  ASSERT_TRUE(conn.valid());
  send_all(conn.get(),
           "GET /x HTTP/1.1\r\nHost: 49983-sneaky.localhost\r\nX-Access-Token: tok\r\n\r\n");
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(conn.get(), buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<std::size_t>(n));
  }
  // The whole reply is a 502, then EOF: nothing of the upstream's tunnel reaches the client.
  EXPECT_EQ(got.rfind("HTTP/1.1 502", 0), 0u) << got;
  EXPECT_EQ(got.find("101"), got.find("101 Switching Protocols to a request")) << got;
  EXPECT_EQ(got.find("tunnel bytes"), std::string::npos) << got;
}

}  // namespace
}  // namespace abx::platform
