// The command server over real loopback sockets: every status code of the wire contract,
// keep-alive, slow and fast calls together, scoped tokens, draining, and the JSON/kwargs rows of
// the bad-input catalogue (§2.2).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <ctime>
#include <future>
#include <stdexcept>
#include <thread>

#include "abx/http/client.h"
#include "abx/registry/register.h"
#include "abx/server/server.h"
#include "abx/testing/socket.h"
#include "abx/token/token.h"
#include "test_command_server.h"

namespace abx::server {
namespace {

namespace json = boost::json;
using http::Connection;
using http::make_request;

class CommandServerTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    add_test_commands();
    reg_.command("secret").bind([] { return std::string("classified"); });
  }

  Response post(const std::string& name, const std::string& body,
                const std::string& token = kToken) {
    return send(make_request(bhttp::verb::post, "/commands/" + name, body), token);
  }
  static json::value body(const Response& r) { return json::parse(r.body()); }
  static void expect_error(const Response& r, int status, std::string_view type,
                           std::string_view needle = {}) {
    EXPECT_EQ(r.result_int(), status) << r.body();
    auto b = json::parse(r.body());
    ASSERT_TRUE(b.is_object()) << r.body();
    EXPECT_EQ(b.at("type").as_string(), type) << r.body();
    EXPECT_NE(std::string(b.at("error").as_string()).find(needle), std::string::npos) << r.body();
    EXPECT_EQ(r[bhttp::field::content_type], "application/json");
  }
};

TEST_F(CommandServerTest, HealthNeedsNoToken) {
  start();
  Response r = send(make_request(bhttp::verb::get, "/health"), "");
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(body(r).at("status"), "ok");
}

TEST_F(CommandServerTest, ListsEveryCommandWithItsSchema) {
  start();
  Response r = send(make_request(bhttp::verb::get, "/commands"));
  ASSERT_EQ(r.result_int(), 200);
  json::value b = body(r);
  const auto& cmds = b.at("commands").as_array();
  ASSERT_EQ(cmds.size(), 4u);
  EXPECT_EQ(cmds[1].at("name"), "echo");  // ordered by name: boom, echo, secret, slow
  EXPECT_EQ(
      json::serialize(cmds[1]),
      R"({"name":"echo","description":"Echo x and y.","args":[)"
      R"({"name":"x","type":"integer","required":true,"default":null,"description":"a number"},)"
      R"({"name":"y","type":"string","required":false,"default":"hello","description":"a word"}]})");
}

TEST_F(CommandServerTest, RunsACommand) {
  start();
  Response r = post("echo", R"({"x":42,"y":"world"})");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r.body(), R"({"result":"42: world"})");
  EXPECT_EQ(post("echo", R"({"x":7})").body(), R"({"result":"7: hello"})");
}

TEST_F(CommandServerTest, BearerTokenWorksToo) {
  start();
  Request req = make_request(bhttp::verb::post, "/commands/echo", R"({"x":1})");
  req.set(bhttp::field::authorization, std::string("Bearer ") + kToken);
  EXPECT_EQ(send(std::move(req), "").result_int(), 200);
}

TEST_F(CommandServerTest, Unauthenticated401) {
  start();
  expect_error(send(make_request(bhttp::verb::get, "/commands"), ""), 401, "Unauthenticated",
               "missing access token");
  expect_error(post("echo", R"({"x":1})", "wrong"), 401, "Unauthenticated", "invalid");
  expect_error(post("echo", R"({"x":1})", std::string(10000, 'a')), 401, "Unauthenticated");
  // Auth comes before lookup: an unauthenticated caller learns nothing about which names exist.
  expect_error(post("nope", "{}", "wrong"), 401, "Unauthenticated");
}

TEST_F(CommandServerTest, TheSameTokenInBothHeadersIsServed) {
  start();
  Request req = make_request(bhttp::verb::post, "/commands/echo", R"({"x":1})");
  req.set(bhttp::field::authorization, std::string("Bearer ") + kToken);
  EXPECT_EQ(send(std::move(req)).result_int(), 200);  // X-Access-Token: kToken as well
}

TEST_F(CommandServerTest, DifferentTokensInTheTwoHeadersAreRefused) {
  start();
  for (const std::string& other : {std::string("wrong"), std::string(kToken) + "x"}) {
    Request req = make_request(bhttp::verb::post, "/commands/echo", R"({"x":1})");
    req.set(bhttp::field::authorization, "Bearer " + other);
    expect_error(send(std::move(req)), 400, "InvalidArgument", "different access tokens");
  }
}

TEST_F(CommandServerTest, UnknownCommand404) {
  start();
  expect_error(post("nope", "{}"), 404, "NotFound", "unknown command 'nope'");
  expect_error(post("..%2fadmin", "{}"), 404, "NotFound");
  expect_error(post("%2e%2e", "{}"), 404, "NotFound");
  expect_error(post(std::string(5000, 'a'), "{}"), 404, "NotFound");
  expect_error(post("\xd0\xb5\x63ho", "{}"), 404, "NotFound");  // Cyrillic look-alike of "echo"
  expect_error(send(make_request(bhttp::verb::get, "/admin")), 404, "NotFound");
}

TEST_F(CommandServerTest, WrongMethod405) {
  start();
  Response r = send(make_request(bhttp::verb::get, "/commands/echo"));
  expect_error(r, 405, "MethodNotAllowed");
  EXPECT_EQ(r[bhttp::field::allow], "POST");
  r = send(make_request(bhttp::verb::post, "/commands", "{}"));
  expect_error(r, 405, "MethodNotAllowed");
  EXPECT_EQ(r[bhttp::field::allow], "GET, HEAD");
}

TEST_F(CommandServerTest, BodyOverLimit413) {
  start();
  std::string big = R"({"x":1,"y":")" + std::string(5000, 'a') + R"("})";
  expect_error(post("echo", big), 413, "PayloadTooLarge");
}

TEST_F(CommandServerTest, NotJson415) {
  start();
  expect_error(send(make_request(bhttp::verb::post, "/commands/echo", "x=1", "text/plain")), 415,
               "UnsupportedMediaType");
  expect_error(send(make_request(bhttp::verb::post, "/commands/echo", R"({"x":1})",
                                 "application/x-www-form-urlencoded")),
               415, "UnsupportedMediaType");
  // Parameters and +json suffixes are JSON too.
  EXPECT_EQ(send(make_request(bhttp::verb::post, "/commands/echo", R"({"x":1})",
                              "application/json; charset=utf-8"))
                .result_int(),
            200);
  EXPECT_EQ(send(make_request(bhttp::verb::post, "/commands/echo", R"({"x":1})",
                              "application/vnd.abx+json"))
                .result_int(),
            200);
}

TEST_F(CommandServerTest, EmptyBodyMeansNoArguments) {
  start();
  Request req{bhttp::verb::post, "/commands/secret", 11};
  Response r = send(std::move(req));
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r.body(), R"({"result":"classified"})");
}

TEST_F(CommandServerTest, ThrowingCommand500CarriesTheExceptionClass) {
  start();
  expect_error(post("boom", "{}"), 500, "std::invalid_argument", "bad things");
}

TEST_F(CommandServerTest, DeadlineExceeded504) {
  start();
  expect_error(post("slow", R"({"ms":3000})"), 504, "DeadlineExceeded", "did not finish");
}

struct BadKwargs {
  const char* name;
  std::string body;
  const char* needle;
};

class KwargsCatalogue : public CommandServerTest,
                        public ::testing::WithParamInterface<BadKwargs> {};

TEST_P(KwargsCatalogue, Rejected400NamingTheProblem) {
  start();
  expect_error(post("echo", GetParam().body), 400, "InvalidArgument", GetParam().needle);
}

INSTANTIATE_TEST_SUITE_P(
    Catalogue, KwargsCatalogue,
    ::testing::Values(
        BadKwargs{"deep", std::string(2000, '[') + std::string(2000, ']'), "nesting deeper"},
        BadKwargs{"duplicate_keys", R"({"x":1,"x":2})", "duplicate"},
        BadKwargs{"overlong_utf8", "{\"x\":1,\"y\":\"\xc0\xaf\"}", "malformed JSON"},
        BadKwargs{"encoded_surrogate", "{\"x\":1,\"y\":\"\xed\xa0\x80\"}", "malformed JSON"},
        BadKwargs{"lone_surrogate", R"({"x":1,"y":"\ud800"})", "malformed JSON"},
        BadKwargs{"nul_in_key", R"({"x":1,"\u0000":2})", "NUL"},
        BadKwargs{"nan", R"({"x":NaN})", "malformed JSON"},
        BadKwargs{"infinity", R"({"x":Infinity})", "malformed JSON"},
        BadKwargs{"comment", R"({"x":1 /* c */})", "malformed JSON"},
        BadKwargs{"trailing_comma", R"({"x":1,})", "malformed JSON"},
        BadKwargs{"trailing_garbage", R"({"x":1} x)", "malformed JSON"},
        BadKwargs{"bom", "\xef\xbb\xbf{\"x\":1}", "malformed JSON"},
        BadKwargs{"top_level_array", "[1]", "JSON object"},
        BadKwargs{"top_level_string", "\"x\"", "JSON object"},
        BadKwargs{"int_exp_overflow", R"({"x":1e400})", "out of range"},
        BadKwargs{"int_fraction", R"({"x":1.5})", "'x' must be an integer"},
        BadKwargs{"int_string", R"({"x":"5"})", "'x' must be an integer"},
        BadKwargs{"int_bool", R"({"x":true})", "'x' must be an integer"},
        BadKwargs{"int_beyond_int32", R"({"x":9007199254740993})", "'x' is out of range"},
        BadKwargs{"int_beyond_int64", R"({"x":18446744073709551615})", "'x' is out of range"},
        BadKwargs{"string_null", R"({"x":1,"y":null})", "'y' must be a string"},
        BadKwargs{"missing_required", R"({"y":"a"})", "missing required argument 'x'"},
        BadKwargs{"unknown_extra", R"({"x":1,"z":2})", "unknown argument 'z'"}),
    [](const auto& tc) { return std::string(tc.param.name); });

TEST_F(CommandServerTest, KeepAliveCarriesManyCalls) {
  start();
  auto c = Connection::open("127.0.0.1", server_->port());
  ASSERT_TRUE(c.ok());
  for (int i = 0; i < 50; ++i) {
    Request req =
        make_request(bhttp::verb::post, "/commands/echo", R"({"x":)" + std::to_string(i) + "}");
    req.set("X-Access-Token", kToken);
    auto r = (*c)->send(std::move(req));
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->body(), R"({"result":")" + std::to_string(i) + R"(: hello"})");
  }
}

TEST_F(CommandServerTest, SlowCallDoesNotBlockFastCalls) {
  start();
  std::atomic<int> order{0};
  int slow_done = 0;
  std::thread slow([&] {
    EXPECT_EQ(post("slow", R"({"ms":1000})").result_int(), 200);
    slow_done = ++order;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the slow call start
  for (int i = 0; i < 10; ++i) EXPECT_EQ(post("echo", R"({"x":1})").result_int(), 200);
  int fast_done = ++order;
  slow.join();
  EXPECT_EQ(fast_done, 1);  // ten fast calls finished while the slow one was still running
  EXPECT_EQ(slow_done, 2);
}

// An inline command runs on the I/O thread; a pool command blocked on a latch must not hold it
// up, even with a single I/O thread. No timing: the blocked command is only released after the
// inline calls have answered (or after 10 s, which then fails the test instead of hanging).
TEST_F(CommandServerTest, BlockedPoolCommandDoesNotStallAnInlineOne) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  reg_.command("gate").bind([released] {
    return released.wait_for(std::chrono::seconds(10)) == std::future_status::ready
               ? std::string("released")
               : std::string("timed out");
  });
  reg_.command("quick").arg("x").run_inline().bind([](int x) { return x + 1; });
  CommandServerOptions opt;
  opt.io_threads = 1;
  opt.workers = 1;  // the one pool worker is held by `gate`: a `quick` on the pool would wait
  start(opt);
  std::thread blocked([&] {
    Response r = post("gate", "{}");
    EXPECT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(r.body(), R"({"result":"released"})");
  });
  for (int i = 0; i < 10; ++i) {
    Response r = post("quick", R"({"x":)" + std::to_string(i) + "}");
    EXPECT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(r.body(), R"({"result":)" + std::to_string(i + 1) + "}");
  }
  release.set_value();
  blocked.join();
}

TEST_F(CommandServerTest, InlineCommandKeepsTheContract) {
  reg_.command("quick_boom").run_inline().bind([]() -> int { throw std::out_of_range("too far"); });
  reg_.command("quick").arg("x").run_inline().bind([](int x) { return x; });
  start();
  expect_error(post("quick_boom", "{}"), 500, "std::out_of_range", "too far");
  expect_error(post("quick", R"({"x":"1"})"), 400, "InvalidArgument", "must be an integer");
  expect_error(post("quick", "{}", "wrong-token"), 401, "Unauthenticated");
  EXPECT_EQ(post("quick", R"({"x":5})").body(), R"({"result":5})");
}

TEST_F(CommandServerTest, ScopedTokenSeesAndRunsOnlyItsCommands) {
  start();
  auto scoped = token::mint_scoped(kToken, {{"echo"}, std::time(nullptr) + 3600});
  ASSERT_TRUE(scoped.ok());
  Response list = send(make_request(bhttp::verb::get, "/commands"), *scoped);
  ASSERT_EQ(list.result_int(), 200);
  json::value b = body(list);
  const auto& cmds = b.at("commands").as_array();
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].at("name"), "echo");
  EXPECT_EQ(post("echo", R"({"x":1})", *scoped).result_int(), 200);
  // Out of scope is indistinguishable from absent.
  Response hidden = post("secret", "{}", *scoped);
  Response absent = post("nope", "{}", *scoped);
  expect_error(hidden, 404, "NotFound", "unknown command 'secret'");
  expect_error(absent, 404, "NotFound", "unknown command 'nope'");
}

TEST_F(CommandServerTest, ScopedTokenExpiredOrForeignIs401) {
  start();
  auto expired = token::mint_scoped(kToken, {{"echo"}, std::time(nullptr) - 1});
  expect_error(post("echo", R"({"x":1})", *expired), 401, "Unauthenticated", "expired");
  auto foreign = token::mint_scoped("another-sandbox", {{"echo"}, std::time(nullptr) + 60});
  expect_error(post("echo", R"({"x":1})", *foreign), 401, "Unauthenticated", "bad signature");
}

TEST_F(CommandServerTest, RegistryIsFrozenOnceServing) {
  start();
  EXPECT_TRUE(reg_.frozen());
  EXPECT_THROW(reg_.command("late").bind([] { return 1; }), registry::RegistryError);
}

TEST_F(CommandServerTest, RefusesToStartWithoutATokenUnlessNoAuth) {
  CommandServerOptions opt;
  opt.port = 0;
  auto s = CommandServer::start(reg_, opt);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(s.error().message().find("--no-auth"), std::string::npos);
  opt.no_auth = true;
  start(opt);
  EXPECT_EQ(post("echo", R"({"x":1})", "").result_int(), 200);
}

TEST_F(CommandServerTest, RefusesToStartWithRegistrationErrors) {
  reg_.record_error("ABX_REGISTER(f): the default of 'v' (kX) is not a integer literal");
  CommandServerOptions opt;
  opt.port = 0;
  opt.access_token = kToken;
  auto s = CommandServer::start(reg_, opt);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("ABX_REGISTER(f)"), std::string::npos);
}

TEST_F(CommandServerTest, ShutdownFinishesCallsInProgress) {
  start();
  Response slow_resp;
  std::thread slow([&] { slow_resp = post("slow", R"({"ms":500})"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the call start
  server_->shutdown(std::chrono::seconds(5));
  slow.join();
  EXPECT_EQ(slow_resp.result_int(), 200) << slow_resp.body();
  EXPECT_EQ(slow_resp.body(), R"({"result":500})");
}

TEST_F(CommandServerTest, RequestCompletedDuringShutdownGets503) {
  start();
  // A plain socket: the header goes before shutdown begins, the body after it.
  UniqueFd conn = abx::testing::connect_raw(server_->port(), std::chrono::seconds(5));
  ASSERT_TRUE(conn.valid());
  int fd = conn.get();
  std::string head = std::string("POST /commands/echo HTTP/1.1\r\nHost: x\r\nX-Access-Token: ") +
                     kToken + "\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server reads the header
  std::thread stopper([&] { server_->shutdown(std::chrono::seconds(5)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // shutdown is under way
  std::string rest = R"({"x":1})";
  ASSERT_EQ(::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL), 7);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  conn.reset();
  stopper.join();
  EXPECT_NE(out.find("HTTP/1.1 503"), std::string::npos) << out;
  EXPECT_NE(out.find("shutting down"), std::string::npos) << out;
}

}  // namespace
}  // namespace abx::server
