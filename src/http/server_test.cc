// The HTTP layer over real loopback sockets: framing rows of the bad-input catalogue (§2.1),
// keep-alive, pipelining, limits, and draining.
#include "abx/http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "abx/http/client.h"
#include "abx/testing/socket.h"
#include "session.h"

namespace abx::http {
namespace {

namespace bhttp = boost::beast::http;

class HttpServerTest : public ::testing::Test {
 protected:
  void start(Limits limits = {}, bool context_per_thread = false, int io_threads = 2) {
    ServerOptions opt;
    opt.limits = limits;
    opt.io_threads = io_threads;
    opt.context_per_thread = context_per_thread;
    auto s = Server::start(opt, [this](Request&& req, Responder respond) {
      ++handled_;
      if (req.target() == "/slow") {
        std::lock_guard lock(slow_mu_);
        slow_.emplace_back([respond, version = req.version()] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          respond(json_response(200, boost::json::object{{"slow", true}}, version));
        });
        return;
      }
      if (req.target() == "/drop") return;  // never answers: the Responder must send a 500
      respond(json_response(200,
                            boost::json::object{{"method", std::string(req.method_string())},
                                                {"target", std::string(req.target())},
                                                {"body", req.body()}},
                            req.version(), req.keep_alive()));
    });
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(*s);
  }

  std::string raw(std::string_view bytes) {
    auto c = open_connection();
    if (!c) return {};
    auto out = c->raw_exchange(bytes, std::chrono::seconds(3));
    EXPECT_TRUE(out.ok());
    return out.ok() ? *out : std::string();
  }

  // A new keep-alive connection to the server; null (and the test failed) when it cannot open.
  std::unique_ptr<Connection> open_connection() {
    auto c = Connection::open("127.0.0.1", server_->port());
    EXPECT_TRUE(c.ok()) << c.error().message();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // True once the server has no open connection (bounded wait: 5 s).
  bool wait_for_no_connections() {
    for (int i = 0; i < 500 && server_->open_connections() != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return server_->open_connections() == 0;
  }

  // Sends `bytes` on the raw connection `fd` and waits up to 3 s for the server to close it while
  // our side stays open (EOF or a reset): what arrived before, or nullopt when it stayed open. A
  // closing client would end the connection too, so deadlines are tested this way.
  static std::optional<std::string> closed_by_server(int fd, std::string_view bytes) {
    if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
      return std::nullopt;
    std::string out;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < until) {
      if (::poll(&p, 1, 100) != 1) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return std::nullopt;
  }

  static int status_of(const std::string& response) {
    if (response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return -1;
    return std::stoi(response.substr(9, 3));
  }

  // Four keep-alive connections served for three rounds (two answered from another thread in
  // the second), then a request in flight drained by shutdown.
  void serves_every_connection_and_drains();

  // The /slow answers come from threads of the test's own, each holding its Responder (and with
  // it the session and its timers) until the thread ends, which may be after the client has its
  // answer: they end before the server is destroyed (a detached one outlived it: ASan saw the
  // session's timer destroyed after its io_context).
  void TearDown() override {
    std::vector<std::thread> slow;
    {
      std::lock_guard lock(slow_mu_);
      slow.swap(slow_);
    }
    for (auto& t : slow) t.join();
  }

  std::atomic<int> handled_{0};
  std::mutex slow_mu_;
  std::vector<std::thread> slow_;
  std::unique_ptr<Server> server_;
};

TEST_F(HttpServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  start();
  auto c = open_connection();
  ASSERT_TRUE(c);
  for (int i = 0; i < 5; ++i) {
    auto r = c->send(make_request(bhttp::verb::post, "/x" + std::to_string(i), "{}"));
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->result_int(), 200);
    EXPECT_EQ(boost::json::parse(r->body()).at("target").as_string(), "/x" + std::to_string(i));
    EXPECT_EQ((*r)[bhttp::field::content_type], "application/json");
  }
  EXPECT_EQ(server_->open_connections(), 1u);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  std::string two =
      "GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string out = raw(two);
  auto a = out.find("/first");
  auto b = out.find("/second");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_LT(a, b);
}

// A long pipeline in one write: the header reader parses request after request from what one
// socket read brought (several reads' worth here), in every layout (a strand of a shared
// io_context, an io_context per thread, the one io_context of one thread), and answers every one
// in order.
TEST_F(HttpServerTest, ALongPipelineIsAnsweredWhole) {
  using Layout = std::pair<bool, int>;  // context_per_thread, I/O threads
  for (auto [per_thread, threads] : {Layout{false, 2}, Layout{true, 2}, Layout{false, 1}}) {
    start({}, per_thread, threads);
    constexpr int kRequests = 3000;
    std::string pipeline;
    for (int i = 0; i < kRequests; ++i)
      pipeline += "GET /p" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n";
    pipeline += "GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    std::string out = raw(pipeline);
    std::size_t answers = 0;
    for (auto at = out.find("HTTP/1.1 200"); at != std::string::npos;
         at = out.find("HTTP/1.1 200", at + 1)) {
      ++answers;
    }
    EXPECT_EQ(answers, kRequests + 1u)
        << "context_per_thread " << per_thread << ", " << threads << " thread(s)";
    std::size_t at = 0;
    for (int i = 0; i < kRequests && at != std::string::npos; ++i) {
      at = out.find("\"/p" + std::to_string(i) + "\"", at);
      EXPECT_NE(at, std::string::npos) << "answer " << i << " missing or out of order";
    }
    EXPECT_NE(out.find("\"/last\"", at), std::string::npos);
    server_.reset();
  }
}

// A body that arrives with its header is parsed from the read buffer at once (no async_read);
// exactly its bytes are taken, and a pipelined request behind it is served next.
TEST_F(HttpServerTest, BodyInTheSamePacketAsTheHeaderIsTakenExactly) {
  start();
  std::string out =
      raw("POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd"
          "POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nef");
  auto a = out.find(R"("body":"abcd")");
  auto b = out.find(R"("body":"ef")");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_EQ(out.find("/first", b), std::string::npos);
}

// A body that follows its header later still arrives whole (the async_read path).
TEST_F(HttpServerTest, BodyAfterTheHeaderIsReadToo) {
  start();
  auto c = open_connection();
  ASSERT_TRUE(c);
  auto r = c->send(make_request(bhttp::verb::post, "/big", std::string(200 * 1024, 'z')));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(boost::json::parse(r->body()).at("body").as_string().size(), 200u * 1024);
}

// Sized responses (and the gateway's whole messages) are written from serialize_head + the body:
// the same bytes as Beast's serializer.
TEST(HttpWire, HeaderBlockIsWhatBeastWrites) {
  // `msg` (a Request or a Response), header block and body, as we write it and as Beast does.
  auto expect_beasts_bytes = [](auto& msg) {
    msg.prepare_payload();
    std::ostringstream beast;
    beast << msg;
    std::string ours;
    serialize_head(msg.base(), ours);
    ours += msg.body();
    EXPECT_EQ(ours, beast.str());
  };
  std::vector<Response> cases;
  cases.push_back(json_response(200, boost::json::object{{"result", "42: world"}}));
  cases.push_back(error_response(Error(ErrorCode::kNotFound, "nope"), 10, false));
  Response custom{bhttp::status::ok, 11};
  custom.reason("Fine");
  custom.set(bhttp::field::allow, "GET, HEAD");
  custom.insert("X-Twice", "1");
  custom.insert("X-Twice", "2");
  cases.push_back(std::move(custom));
  cases.push_back(empty_response(bhttp::status::no_content));
  cases.push_back(Response{static_cast<bhttp::status>(599), 11});  // no standard reason
  for (auto& res : cases) {
    res.set(bhttp::field::server, "abx");
    expect_beasts_bytes(res);
  }
  std::vector<Request> requests;
  requests.emplace_back(bhttp::verb::post, "/commands/demo?x=1", 11, R"({"x":1})");
  requests.emplace_back(bhttp::verb::get, "/", 10);
  Request propfind{bhttp::verb::unknown, "*", 11};
  propfind.method_string("PROPFIND");
  propfind.insert("X-Twice", "1");
  propfind.insert("X-Twice", "2");
  requests.push_back(std::move(propfind));
  for (auto& req : requests) {
    req.set(bhttp::field::host, "sandbox");
    expect_beasts_bytes(req);
  }
}

struct FramingCase {
  const char* name;
  std::string request;
  int status;
};

class Framing : public HttpServerTest, public ::testing::WithParamInterface<FramingCase> {};

TEST_P(Framing, RejectedWithoutReachingTheHandler) {
  start({.max_body_bytes = 1024});
  std::string out = raw(GetParam().request);
  EXPECT_EQ(status_of(out), GetParam().status) << out;
  EXPECT_NE(out.find("\"error\""), std::string::npos) << out;
  EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
  EXPECT_EQ(handled_.load(), 0);
}

const std::string kPost = "POST /commands/demo HTTP/1.1\r\nHost: x\r\n";

INSTANTIATE_TEST_SUITE_P(
    Catalogue, Framing,
    ::testing::Values(
        FramingCase{"cl_and_te",
                    kPost + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                    400},
        FramingCase{"te_and_cl",
                    kPost + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
                    400},
        FramingCase{"two_different_cl", kPost + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x",
                    400},
        FramingCase{"cl_plus", kPost + "Content-Length: +5\r\n\r\n{}{}{", 400},
        FramingCase{"cl_space", kPost + "Content-Length: 5 5\r\n\r\n", 400},
        FramingCase{"cl_hex", kPost + "Content-Length: 0x10\r\n\r\n", 400},
        FramingCase{"cl_negative", kPost + "Content-Length: -1\r\n\r\n", 400},
        FramingCase{"cl_2_64", kPost + "Content-Length: 18446744073709551616\r\n\r\n", 400},
        FramingCase{"te_chunkedx", kPost + "Transfer-Encoding: chunkedx\r\n\r\n", 400},
        FramingCase{"te_chunked_identity", kPost + "Transfer-Encoding: chunked, identity\r\n\r\n",
                    400},
        FramingCase{"te_xchunked", kPost + "Transfer-Encoding: xchunked\r\n\r\n", 400},
        FramingCase{"chunk_size_overflow",
                    kPost + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffff1\r\n", 400},
        FramingCase{"chunk_missing_crlf",
                    kPost + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}0\r\n\r\n", 400},
        FramingCase{"space_before_colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
        FramingCase{"nul_in_value", std::string("GET / HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n", 35),
                    400},
        FramingCase{"bad_method", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        FramingCase{"absolute_form", "GET http://evil/ HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        FramingCase{"two_hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        FramingCase{"no_host_11", "GET / HTTP/1.1\r\n\r\n", 400},
        FramingCase{"long_target",
                    "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
        FramingCase{"huge_header",
                    "GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(17000, 'a') + "\r\n\r\n", 431},
        FramingCase{"many_fields",
                    [] {
                      std::string r = "GET / HTTP/1.1\r\nHost: x\r\n";
                      for (int i = 0; i < 101; ++i) r += "X-" + std::to_string(i) + ": v\r\n";
                      return r + "\r\n";
                    }(),
                    431},
        FramingCase{"body_over_limit", kPost + "Content-Length: 2048\r\n\r\n", 413},
        FramingCase{"expect_continue_over_limit",
                    kPost + "Content-Length: 1000000\r\nExpect: 100-continue\r\n\r\n", 413},
        FramingCase{"chunked_over_limit",
                    kPost + "Transfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(2048, 'a') +
                        "\r\n0\r\n\r\n",
                    413}),
    [](const auto& tc) { return std::string(tc.param.name); });

TEST_F(HttpServerTest, ChunkedBodyWithinLimitIsAccepted) {
  start();
  std::string out =
      raw(kPost + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(out), 200) << out;
  EXPECT_NE(out.find(R"("body":"{}")"), std::string::npos) << out;
}

TEST_F(HttpServerTest, ExpectContinueWithinLimitGets100ThenTheAnswer) {
  start();
  std::string out =
      raw(kPost + "Content-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n{}");
  EXPECT_EQ(out.rfind("HTTP/1.1 100 Continue", 0), 0u) << out;
  EXPECT_NE(out.find("HTTP/1.1 200"), std::string::npos) << out;
}

// An error answered before the body is read (here a Content-Length over the limit) must reach a
// client that goes on sending the body, as a proxy relaying an upload does: the server shuts its
// sending side, discards what follows (bounded), and does not close into an RST that fails the
// client's writes and can take the answer with it. A client that then stays is closed anyway.
TEST_F(HttpServerTest, EarlyErrorReachesAClientStillSendingTheBody) {
  start({.max_body_bytes = 1024});
  UniqueFd conn = abx::testing::connect_raw(server_->port(), std::chrono::seconds(5));
  ASSERT_TRUE(conn.valid());
  const int fd = conn.get();
  std::string body(512 * 1024, 'b');  // within what the server discards
  std::string head = kPost + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);  // the answer is there before any body byte was sent
  // By now a server that closed at once has reset the connection at our first body bytes; in
  // pieces, so that a reset shows as a failed send rather than vanishing in one big buffer.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  constexpr std::size_t kPiece = 16 * 1024;
  for (std::size_t off = 0; off < body.size(); off += kPiece) {
    ssize_t n = ::send(fd, body.data() + off, kPiece, MSG_NOSIGNAL);
    ASSERT_EQ(n, static_cast<ssize_t>(kPiece))
        << "sending the body after the answer, at " << off << ": " << std::strerror(errno);
    if (off == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GE(n, 0) << "reading the answer: " << std::strerror(errno);
    if (n == 0) break;  // the server's FIN, after the whole answer
    out.append(buf, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(status_of(out), 413) << out;
  EXPECT_TRUE(wait_for_no_connections());  // the socket is still open on our side
}

TEST_F(HttpServerTest, SlowHeaderIsCutOffAtTheDeadline) {
  start({.header_timeout = std::chrono::milliseconds(300)});
  UniqueFd conn = abx::testing::connect_raw(server_->port(), std::chrono::seconds(5));
  ASSERT_TRUE(conn.valid());
  // Only part of a header, then silence: the server must close (it cannot answer: the deadline
  // closes the socket), not wait forever.
  auto out = closed_by_server(conn.get(), "GET / HTTP/1.1\r\nHost: x\r\n");
  ASSERT_TRUE(out.has_value()) << "still open 3 s after a 300 ms header deadline";
  EXPECT_TRUE(out->empty()) << *out;
  EXPECT_TRUE(wait_for_no_connections());
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionIsClosed) {
  start({.idle_timeout = std::chrono::milliseconds(200)});
  auto c = open_connection();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(make_request(bhttp::verb::get, "/")).ok());
  // The session object goes away just after the socket closes; give it a moment.
  EXPECT_TRUE(wait_for_no_connections());
}

// The idle deadline is kept lazily (one timer per idle period, moved by each request): a
// connection whose requests keep coming, each well inside the deadline, lives on past it, and
// one that then goes quiet, or stops half-way through a header, is still closed.
TEST_F(HttpServerTest, IdleDeadlineMovesWithEachRequest) {
  start({.idle_timeout = std::chrono::milliseconds(300)});
  auto c = open_connection();
  ASSERT_TRUE(c);
  for (int i = 0; i < 8; ++i) {  // 8 requests 100 ms apart: 800 ms on one connection
    auto res = c->send(make_request(bhttp::verb::get, "/n" + std::to_string(i)));
    ASSERT_TRUE(res.ok()) << "request " << i << ": " << res.error().message();
    EXPECT_EQ(res->result_int(), 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(server_->open_connections(), 1u);
  EXPECT_TRUE(wait_for_no_connections());  // quiet now: closed at the deadline
}

// The first request's header deadline (10 s by default) is armed first; the shorter idle
// deadline after the answer must still cut the half-sent second header.
TEST_F(HttpServerTest, IdleDeadlineCutsAHalfSentSecondHeader) {
  start({.idle_timeout = std::chrono::milliseconds(300)});
  UniqueFd conn = abx::testing::connect_raw(server_->port(), std::chrono::seconds(5));
  ASSERT_TRUE(conn.valid());
  const std::string first = "GET /first HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(conn.get(), first.data(), first.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(first.size()));
  // Its whole answer first (parsed as it arrives), so that the server waits under the idle
  // deadline, with nothing buffered, when the second header starts.
  bhttp::response_parser<bhttp::string_body> answer;
  answer.eager(true);  // header and body in one put when both are there
  std::string got;
  char buf[4096];
  pollfd p{conn.get(), POLLIN, 0};
  while (!answer.is_done()) {
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    const ssize_t n = ::recv(conn.get(), buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << "the first answer was cut";
    got.append(buf, static_cast<std::size_t>(n));
    boost::beast::error_code ec;
    const std::size_t used = answer.put(boost::asio::buffer(got), ec);
    got.erase(0, used);
    ASSERT_TRUE(!ec || ec == bhttp::error::need_more) << ec.message();
  }
  EXPECT_EQ(answer.get().result_int(), 200);
  auto out = closed_by_server(conn.get(), "GET /second HTTP/1.1\r\nHost: x\r\n");
  ASSERT_TRUE(out.has_value()) << "still open 3 s after a 300 ms idle deadline";
  EXPECT_TRUE(out->empty()) << *out;
  EXPECT_TRUE(wait_for_no_connections());
}

TEST_F(HttpServerTest, ConnectionCapAnswers503) {
  start({.max_connections = 1});
  auto first = open_connection();
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->send(make_request(bhttp::verb::get, "/")).ok());
  auto second = open_connection();
  ASSERT_TRUE(second);
  auto out = second->raw_exchange("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(status_of(*out), 503) << *out;
}

TEST_F(HttpServerTest, UnansweredRequestGets500NotAHang) {
  start();
  auto r = fetch("127.0.0.1", server_->port(), make_request(bhttp::verb::get, "/drop"),
                 std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->result_int(), 500);
}

TEST_F(HttpServerTest, ShutdownDrainsInFlightRequests) {
  start();
  Result<Response> slow = Error(ErrorCode::kInternal, "not run");
  std::thread t(
      [&] { slow = fetch("127.0.0.1", server_->port(), make_request(bhttp::verb::get, "/slow")); });
  while (handled_.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server_->shutdown(std::chrono::seconds(5));
  t.join();
  ASSERT_TRUE(slow.ok()) << slow.error().message();
  EXPECT_EQ(slow->result_int(), 200);
  EXPECT_EQ((*slow)[bhttp::field::connection], "close");
  EXPECT_TRUE(server_->draining());
  EXPECT_FALSE(Connection::open("127.0.0.1", server_->port(), std::chrono::seconds(1)).ok());
}

// ServerOptions::context_per_thread: connections go to the threads' own io_contexts in turn,
// keep-alive requests and answers given from another thread reach each of them, and shutdown
// still drains a request in flight and stops every thread.
TEST_F(HttpServerTest, ContextPerThreadServesEveryConnectionAndDrains) {
  start({}, true);
  serves_every_connection_and_drains();
}

// One I/O thread: the connections run on its io_context itself, with no strand; answers given
// from other threads (/slow) still reach them in turn, and shutdown drains as with the others.
TEST_F(HttpServerTest, OneIoThreadServesEveryConnectionAndDrains) {
  start({}, false, 1);
  serves_every_connection_and_drains();
}

void HttpServerTest::serves_every_connection_and_drains() {
  std::vector<std::unique_ptr<Connection>> conns;
  for (int i = 0; i < 4; ++i) {
    conns.push_back(open_connection());
    ASSERT_TRUE(conns.back());
  }
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < conns.size(); ++i) {
      std::string target = round == 1 && i < 2 ? "/slow" : "/x" + std::to_string(i);
      auto r = conns[i]->send(make_request(bhttp::verb::get, target));
      ASSERT_TRUE(r.ok()) << r.error().message();
      EXPECT_EQ(r->result_int(), 200);
    }
  }
  EXPECT_EQ(server_->open_connections(), 4u);
  conns.clear();
  Result<Response> slow = Error(ErrorCode::kInternal, "not run");
  const int before = handled_.load();
  std::thread t(
      [&] { slow = fetch("127.0.0.1", server_->port(), make_request(bhttp::verb::get, "/slow")); });
  while (handled_.load() == before) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server_->shutdown(std::chrono::seconds(5));
  t.join();
  ASSERT_TRUE(slow.ok()) << slow.error().message();
  EXPECT_EQ(slow->result_int(), 200);
  EXPECT_EQ(server_->open_connections(), 0u);
}

// With context_per_thread the threads' listening sockets share the address through
// SO_REUSEPORT, which would let a second server (of the same user) join them and take part of
// the connections: it must be refused as without SO_REUSEPORT, whichever way it listens.
TEST_F(HttpServerTest, ContextPerThreadListenersShareTheAddressWithNoOtherServer) {
  start({}, true);
  for (bool per_thread : {true, false}) {
    ServerOptions opt;
    opt.port = server_->port();
    opt.io_threads = 2;
    opt.context_per_thread = per_thread;
    auto second = Server::start(opt, [](Request&&, Responder respond) {
      respond(json_response(200, boost::json::object{}));
    });
    ASSERT_FALSE(second.ok()) << "a second server listens on the same port";
    EXPECT_NE(second.error().message().find("cannot listen on"), std::string::npos)
        << second.error().message();
  }
  // Every connection is served, whichever thread's socket the kernel gives it to.
  for (int i = 0; i < 16; ++i) {
    auto r = fetch("127.0.0.1", server_->port(), make_request(bhttp::verb::get, "/x"));
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->result_int(), 200);
  }
}

TEST(HttpErrors, OneMappingToTheWire) {
  EXPECT_EQ(http_status(ErrorCode::kInvalidArgument), 400u);
  EXPECT_EQ(http_status(ErrorCode::kUnauthenticated), 401u);
  EXPECT_EQ(http_status(ErrorCode::kNotFound), 404u);
  EXPECT_EQ(http_status(ErrorCode::kMethodNotAllowed), 405u);
  EXPECT_EQ(http_status(ErrorCode::kPayloadTooLarge), 413u);
  EXPECT_EQ(http_status(ErrorCode::kUnsupportedMediaType), 415u);
  EXPECT_EQ(http_status(ErrorCode::kInternal), 500u);
  EXPECT_EQ(http_status(ErrorCode::kUnavailable), 503u);
  EXPECT_EQ(http_status(ErrorCode::kDeadlineExceeded), 504u);
  Response r = error_response(Error(ErrorCode::kInternal, "boom", "std::runtime_error"));
  EXPECT_EQ(r.result_int(), 500);
  EXPECT_EQ(r.body(), R"({"error":"boom","type":"std::runtime_error"})");
}

}  // namespace
}  // namespace abx::http
