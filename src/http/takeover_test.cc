// ServerOptions::on_header: a proxy takes a connection over after the header, and gives it back.
#include <gtest/gtest.h>

#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <memory>
#include <string>
#include <thread>

#include "abx/http/client.h"
#include "abx/http/server.h"

namespace abx::http {
namespace {

namespace bhttp = boost::beast::http;
namespace asio = boost::asio;

// Takes /raw/* over: answers with hand-written bytes (which the server never sees) and gives the
// connection back; counts the takeovers of each connection in its user data. Refuses /deny in
// the hook. Everything else goes to the handler.
class TakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions opt;
    opt.io_threads = 2;
    opt.error_renderer = [](const Error& e, unsigned status, unsigned version) {
      return json_response(status, boost::json::object{{"code", status}, {"m", e.message()}},
                           version, false);
    };
    opt.on_header = [](Takeover& conn) -> Status {
      auto target = conn.parser().get().target();
      if (target == "/deny") return Error(ErrorCode::kPermissionDenied, "no");
      if (!target.starts_with("/raw")) return {};
      if (!conn.user_data()) conn.user_data() = std::make_shared<int>(0);
      int n = ++*static_cast<int*>(conn.user_data().get());
      auto body = std::make_shared<std::string>(std::to_string(n));
      auto bytes = std::make_shared<std::string>(
          "HTTP/1.1 200 OK\r\nX-Taken: yes\r\nContent-Length: " + std::to_string(body->size()) +
          "\r\n\r\n" + *body);
      auto* t = new Takeover(std::move(conn));
      bool close = target == "/raw/close";
      asio::async_write(t->stream(), asio::buffer(*bytes),
                        [t, bytes, close](boost::beast::error_code ec, std::size_t) {
                          std::unique_ptr<Takeover> owned(t);
                          if (ec || close) return;  // dropping it closes the connection
                          std::move(*owned).resume();
                        });
      return {};
    };
    auto s = Server::start(opt, [](Request&& req, Responder respond) {
      respond(json_response(200, boost::json::object{{"body", req.body()}}, req.version()));
    });
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(*s);
  }
  std::unique_ptr<Server> server_;
};

TEST_F(TakeoverTest, TakenRequestsAndServedRequestsShareAConnection) {
  auto c = Connection::open("127.0.0.1", server_->port());
  ASSERT_TRUE(c.ok());
  for (int i = 1; i <= 3; ++i) {
    auto taken = (*c)->send(make_request(bhttp::verb::get, "/raw"));
    ASSERT_TRUE(taken.ok()) << taken.error().message();
    EXPECT_EQ(taken->result_int(), 200);
    EXPECT_EQ((*taken)["X-Taken"], "yes");
    EXPECT_EQ(taken->body(), std::to_string(i));  // the user data lives with the connection
    auto served = (*c)->send(make_request(bhttp::verb::post, "/echo", "hi"));
    ASSERT_TRUE(served.ok()) << served.error().message();
    EXPECT_EQ(served->body(), R"({"body":"hi"})");
  }
  EXPECT_EQ(server_->open_connections(), 1u);
}

TEST_F(TakeoverTest, BytesBufferedBehindTheHeaderStayWithTheConnection) {
  // Two pipelined requests: the second is already in the server's buffer when the first is
  // taken over, and must be served after the connection comes back.
  auto c = Connection::open("127.0.0.1", server_->port());
  ASSERT_TRUE(c.ok());
  auto out = (*c)->raw_exchange(
      "GET /raw HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
  ASSERT_TRUE(out.ok());
  EXPECT_NE(out->find("X-Taken: yes"), std::string::npos) << *out;
  EXPECT_NE(out->find(R"({"body":"ok"})"), std::string::npos) << *out;
}

TEST_F(TakeoverTest, ATakerThatDropsTheConnectionClosesIt) {
  auto c = Connection::open("127.0.0.1", server_->port());
  ASSERT_TRUE(c.ok());
  auto out = (*c)->raw_exchange("GET /raw/close HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(out.ok());  // read until the peer closed: no timeout
  EXPECT_NE(out->find("X-Taken: yes"), std::string::npos) << *out;
  for (int i = 0; i < 500 && server_->open_connections() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->open_connections(), 0u);
}

TEST_F(TakeoverTest, HookErrorsAndFramingErrorsUseTheRendererWithTheirStatus) {
  auto c = Connection::open("127.0.0.1", server_->port());
  ASSERT_TRUE(c.ok());
  auto out = (*c)->raw_exchange("GET /deny HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->rfind("HTTP/1.1 403", 0), 0u) << *out;
  EXPECT_NE(out->find(R"({"code":403,"m":"no"})"), std::string::npos) << *out;
  // A framing error never reaches the hook; the renderer sees the 414 it is sent with.
  auto c2 = Connection::open("127.0.0.1", server_->port());
  ASSERT_TRUE(c2.ok());
  out = (*c2)->raw_exchange("GET /raw" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->rfind("HTTP/1.1 414", 0), 0u) << *out;
  EXPECT_NE(out->find(R"("code":414)"), std::string::npos) << *out;
}

}  // namespace
}  // namespace abx::http
