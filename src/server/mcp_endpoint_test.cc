// /mcp on a real CommandServer over loopback: the lifecycle, tools/list schemas and annotations,
// tools/call results, thrown commands, deadlines and bad arguments, sessions (required, unknown,
// ended, evicted, bound to their credential), MCP-Protocol-Version, auth and scoped tokens,
// Origin, methods, content types and JSON-RPC errors at the HTTP level.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <ctime>
#include <stdexcept>
#include <thread>

#include "abx/http/client.h"
#include "abx/mcp/mcp.h"
#include "abx/registry/register.h"
#include "abx/server/server.h"
#include "abx/token/token.h"
#include "test_command_server.h"

namespace abx::server {
namespace {

namespace json = boost::json;
using http::make_request;

class McpEndpointTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    add_test_commands({.read_only = true, .idempotent = true}, {.destructive = true});
    reg_.command("pair").bind([] { return json::object{{"a", 1}}; });
  }

  Response post(const std::string& body, const std::string& session = {},
                const std::string& token = kToken) {
    Request req = make_request(bhttp::verb::post, "/mcp", body);
    req.set(bhttp::field::accept, "application/json, text/event-stream");
    if (!session.empty()) req.set("Mcp-Session-Id", session);
    return send(std::move(req), token);
  }
  static std::string rpc(std::string_view method, json::object params = {}, json::value id = 1) {
    json::object m{{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}};
    if (!id.is_null()) m["id"] = id;
    return json::serialize(m);
  }
  static json::object init_params() {
    return json::object{{"protocolVersion", mcp::kLatestProtocolVersion},
                        {"capabilities", json::object{}},
                        {"clientInfo", json::object{{"name", "test"}, {"version", "1"}}}};
  }
  // initialize + notifications/initialized; returns the session id.
  std::string open_session(const std::string& token = kToken) {
    Response r = post(rpc("initialize", init_params()), {}, token);
    EXPECT_EQ(r.result_int(), 200) << r.body();
    std::string sid(r["Mcp-Session-Id"]);
    EXPECT_EQ(sid.size(), 32u);
    Response n = post(rpc("notifications/initialized", {}, nullptr), sid, token);
    EXPECT_EQ(n.result_int(), 202) << n.body();
    EXPECT_TRUE(n.body().empty());
    return sid;
  }
  json::value call(const std::string& sid, std::string_view tool, json::object args,
                   const std::string& token = kToken) {
    Response r =
        post(rpc("tools/call", {{"name", tool}, {"arguments", std::move(args)}}), sid, token);
    EXPECT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(r[bhttp::field::content_type], "application/json");
    return json::parse(r.body());
  }
  static void expect_rpc_error(const json::value& b, int code, std::string_view needle = {}) {
    ASSERT_TRUE(b.as_object().contains("error")) << b;
    EXPECT_EQ(b.at("error").at("code").as_int64(), code) << b;
    EXPECT_NE(std::string(b.at("error").at("message").as_string()).find(needle), std::string::npos)
        << b;
  }
  static void expect_http_error(const Response& r, int status, int code,
                                std::string_view needle = {}) {
    EXPECT_EQ(r.result_int(), status) << r.body();
    auto b = json::parse(r.body());
    EXPECT_EQ(b.at("jsonrpc"), "2.0");
    EXPECT_TRUE(b.at("id").is_null());
    expect_rpc_error(b, code, needle);
  }
};

TEST_F(McpEndpointTest, InitializeOpensASession) {
  start();
  Response r = post(rpc("initialize", init_params(), "init-1"));
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r[bhttp::field::content_type], "application/json");
  EXPECT_FALSE(r["Mcp-Session-Id"].empty());
  auto b = json::parse(r.body());
  EXPECT_EQ(b.at("id"), "init-1");
  EXPECT_EQ(b.at("result").at("protocolVersion"), json::value(mcp::kLatestProtocolVersion));
  EXPECT_EQ(b.at("result").at("serverInfo").at("name"), "abx-server");
  EXPECT_TRUE(b.at("result").at("capabilities").as_object().contains("tools"));
  // Two initializes are two sessions.
  EXPECT_NE(open_session(), std::string(r["Mcp-Session-Id"]));
}

TEST_F(McpEndpointTest, PingAndUnknownMethod) {
  start();
  std::string sid = open_session();
  Response r = post(rpc("ping", {}, 5), sid);
  EXPECT_EQ(json::parse(r.body()), json::parse(R"({"jsonrpc":"2.0","id":5,"result":{}})"));
  r = post(rpc("prompts/list", {}, 6), sid);
  EXPECT_EQ(r.result_int(), 200);
  expect_rpc_error(json::parse(r.body()), mcp::kMethodNotFound, "prompts/list");
}

TEST_F(McpEndpointTest, ToolsListMirrorsTheRegistry) {
  start();
  std::string sid = open_session();
  Response r = post(rpc("tools/list"), sid);
  ASSERT_EQ(r.result_int(), 200) << r.body();
  const auto b = json::parse(r.body());
  const auto& tools = b.at("result").at("tools").as_array();
  ASSERT_EQ(tools.size(), 4u);  // by name: boom, echo, pair, slow
  EXPECT_EQ(tools[1], json::parse(R"({
    "name": "echo", "description": "Echo x and y.",
    "inputSchema": {"type": "object",
      "properties": {
        "x": {"type": "integer", "minimum": -2147483648, "maximum": 2147483647,
              "description": "a number"},
        "y": {"type": "string", "description": "a word", "default": "hello"}},
      "required": ["x"], "additionalProperties": false},
    "outputSchema": {"type": "object", "properties": {"result": {}}, "required": ["result"]},
    "annotations": {"readOnlyHint": true, "idempotentHint": true}})"));
  EXPECT_EQ(tools[0].at("annotations"), json::parse(R"({"destructiveHint": true})"));
  EXPECT_FALSE(tools[2].as_object().contains("annotations"));
}

TEST_F(McpEndpointTest, ToolsCallGivesTheSameResultAsRest) {
  start();
  std::string sid = open_session();
  auto b = call(sid, "echo", {{"x", 42}, {"y", "world"}});
  const auto& res = b.at("result");
  EXPECT_EQ(res.at("isError"), false);
  EXPECT_EQ(res.at("structuredContent"), json::parse(R"({"result":"42: world"})"));
  EXPECT_EQ(res.at("content"),
            json::parse(R"([{"type":"text","text":"{\"result\":\"42: world\"}"}])"));
  Response rest =
      send(make_request(bhttp::verb::post, "/commands/echo", R"({"x":42,"y":"world"})"));
  EXPECT_EQ(json::parse(rest.body()), res.at("structuredContent"));
  // Defaults apply; object results are wrapped like every other.
  EXPECT_EQ(call(sid, "echo", {{"x", 1}}).at("result").at("structuredContent").at("result"),
            "1: hello");
  EXPECT_EQ(call(sid, "pair", {}).at("result").at("structuredContent"),
            json::parse(R"({"result":{"a":1}})"));
  // arguments may be left out for a command without required arguments.
  Response r = post(rpc("tools/call", {{"name", "pair"}}), sid);
  EXPECT_EQ(json::parse(r.body()).at("result").at("isError"), false) << r.body();
}

TEST_F(McpEndpointTest, AThrowingCommandIsAnErrorResult) {
  start();
  std::string sid = open_session();
  auto res = call(sid, "boom", {}).at("result");
  EXPECT_EQ(res.at("isError"), true);
  EXPECT_EQ(res.at("content").at(0).at("text"), "std::invalid_argument: bad things");
  EXPECT_FALSE(res.as_object().contains("structuredContent"));
}

TEST_F(McpEndpointTest, ACallPastItsDeadlineIsAnErrorResult) {
  start();
  std::string sid = open_session();
  auto res = call(sid, "slow", {{"ms", 3000}}).at("result");
  EXPECT_EQ(res.at("isError"), true);
  EXPECT_NE(std::string(res.at("content").at(0).at("text").as_string()).find("did not finish"),
            std::string::npos)
      << res;
  // A fast call on the same session is unaffected.
  EXPECT_EQ(call(sid, "slow", {{"ms", 1}}).at("result").at("isError"), false);
}

// The message is parsed into an arena on the request's stack frame; a command on the worker pool
// answers after that frame is gone, with the id copied out of it (a long string id, past a
// json::string's inline buffer, lived in the arena), while other calls run. A check of the
// behaviour, not a guard of the copy: with the copy removed this still passed in one try, as the
// stale frame kept its bytes and GCC 12's ASan cannot see a use of a returned stack frame.
TEST_F(McpEndpointTest, APoolCommandAnswersWithTheRequestsIdAfterTheRequestFrameIsGone) {
  start();
  std::string sid = open_session();
  const std::string slow_id = "slow-" + std::string(200, 's');
  Response slow_reply;
  std::thread slow([&] {
    slow_reply =
        post(rpc("tools/call", {{"name", "slow"}, {"arguments", json::object{{"ms", 400}}}},
                 json::value(slow_id)),
             sid);
  });
  for (int i = 0; i < 20; ++i) {
    const std::string id = "echo-" + std::to_string(i) + std::string(200, 'e');
    auto b = json::parse(
        post(rpc("tools/call", {{"name", "echo"}, {"arguments", json::object{{"x", i}}}},
                 json::value(id)),
             sid)
            .body());
    EXPECT_EQ(b.at("id"), json::value(id));
  }
  slow.join();
  ASSERT_EQ(slow_reply.result_int(), 200) << slow_reply.body();
  auto b = json::parse(slow_reply.body());
  EXPECT_EQ(b.at("id"), json::value(slow_id));
  EXPECT_EQ(b.at("result").at("structuredContent").at("result"), 400) << b;
}

TEST_F(McpEndpointTest, BadArgumentsAndUnknownToolsAreInvalidParams) {
  start();
  std::string sid = open_session();
  expect_rpc_error(call(sid, "echo", {{"x", "42"}}), mcp::kInvalidParams, "'x'");
  expect_rpc_error(call(sid, "echo", {}), mcp::kInvalidParams, "'x'");
  expect_rpc_error(call(sid, "echo", {{"x", 1}, {"z", 2}}), mcp::kInvalidParams, "'z'");
  expect_rpc_error(call(sid, "echo", {{"x", 1.5}}), mcp::kInvalidParams, "'x'");
  expect_rpc_error(call(sid, "echo", {{"x", 4294967296LL}}), mcp::kInvalidParams, "'x'");
  expect_rpc_error(call(sid, "nope", {}), mcp::kInvalidParams, "unknown tool 'nope'");
  expect_rpc_error(call(sid, "../echo", {}), mcp::kInvalidParams, "unknown tool");
  Response r = post(rpc("tools/call", {{"name", "echo"}, {"arguments", json::array{1}}}), sid);
  expect_rpc_error(json::parse(r.body()), mcp::kInvalidParams, "arguments");
}

TEST_F(McpEndpointTest, SessionIsRequiredAndMustBeKnown) {
  start();
  expect_http_error(post(rpc("tools/list")), 400, mcp::kInvalidRequest, "Mcp-Session-Id");
  expect_http_error(post(rpc("tools/list"), "0123456789abcdef0123456789abcdef"), 404,
                    mcp::kSessionNotFound);
  // Notifications need one too.
  expect_http_error(post(rpc("notifications/initialized", {}, nullptr)), 400, mcp::kInvalidRequest);
  std::string sid = open_session();
  expect_http_error(post(rpc("initialize", init_params()), sid), 400, mcp::kInvalidRequest,
                    "new session");
}

TEST_F(McpEndpointTest, DeleteEndsASession) {
  start();
  std::string sid = open_session();
  Request del = make_request(bhttp::verb::delete_, "/mcp");
  del.set("Mcp-Session-Id", sid);
  EXPECT_EQ(send(del).result_int(), 204);
  expect_http_error(post(rpc("tools/list"), sid), 404, mcp::kSessionNotFound);
  expect_http_error(send(del), 404, mcp::kSessionNotFound);
  expect_http_error(send(make_request(bhttp::verb::delete_, "/mcp")), 400, mcp::kInvalidRequest);
}

TEST_F(McpEndpointTest, SessionsAreBoundToTheirCredential) {
  start();
  auto scoped = token::mint_scoped(kToken, {{"echo"}, std::time(nullptr) + 3600});
  ASSERT_TRUE(scoped.ok());
  std::string sid = open_session(*scoped);
  // The full token is valid, but it did not open this session.
  expect_http_error(post(rpc("tools/list"), sid, kToken), 404, mcp::kSessionNotFound);
  EXPECT_EQ(post(rpc("tools/list"), sid, *scoped).result_int(), 200);
}

TEST_F(McpEndpointTest, OldestSessionIsEvictedAtTheCap) {
  CommandServerOptions opt;
  opt.mcp_max_sessions = 2;
  start(opt);
  std::string a = open_session();
  std::string b = open_session();
  EXPECT_EQ(post(rpc("ping"), a).result_int(), 200);  // a is now the most recently used
  std::string c = open_session();
  expect_http_error(post(rpc("ping"), b), 404, mcp::kSessionNotFound);
  EXPECT_EQ(post(rpc("ping"), a).result_int(), 200);
  EXPECT_EQ(post(rpc("ping"), c).result_int(), 200);
}

TEST_F(McpEndpointTest, ProtocolVersionHeaderMustMatchTheSession) {
  start();
  std::string sid = open_session();
  Request req = make_request(bhttp::verb::post, "/mcp", rpc("ping"));
  req.set("Mcp-Session-Id", sid);
  req.set("MCP-Protocol-Version", std::string(mcp::kLatestProtocolVersion));
  EXPECT_EQ(send(req).result_int(), 200);
  req.set("MCP-Protocol-Version", "2024-11-05");
  expect_http_error(send(req), 400, mcp::kInvalidRequest, "MCP-Protocol-Version");
  req.set("MCP-Protocol-Version", "nonsense");
  expect_http_error(send(req), 400, mcp::kInvalidRequest, "MCP-Protocol-Version");
}

TEST_F(McpEndpointTest, AuthAsOnTheRestRoutes) {
  start();
  expect_http_error(post(rpc("initialize", init_params()), {}, ""), 401, mcp::kServerError,
                    "missing access token");
  expect_http_error(post(rpc("initialize", init_params()), {}, "wrong"), 401, mcp::kServerError);
  std::string sid = open_session();
  expect_http_error(post(rpc("tools/list"), sid, "wrong"), 401, mcp::kServerError);
  Request req = make_request(bhttp::verb::post, "/mcp", rpc("initialize", init_params()));
  req.set(bhttp::field::authorization, std::string("Bearer ") + kToken);
  EXPECT_EQ(send(req, "").result_int(), 200);
  // The MCP TypeScript SDK sends both headers when a user configures both: the same token in
  // each is served, different tokens are a 400.
  EXPECT_EQ(send(req).result_int(), 200);
  req.set(bhttp::field::authorization, "Bearer wrong");
  expect_http_error(send(req), 400, mcp::kInvalidParams, "different access tokens");
}

TEST_F(McpEndpointTest, ScopedTokenListsAndCallsOnlyItsCommands) {
  start();
  auto scoped = token::mint_scoped(kToken, {{"echo"}, std::time(nullptr) + 3600});
  std::string sid = open_session(*scoped);
  auto b = json::parse(post(rpc("tools/list"), sid, *scoped).body());
  const auto& tools = b.at("result").at("tools").as_array();
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0].at("name"), "echo");
  EXPECT_EQ(call(sid, "echo", {{"x", 1}}, *scoped).at("result").at("isError"), false);
  // Out of scope reads exactly like absent.
  auto hidden = call(sid, "boom", {}, *scoped);
  auto absent = call(sid, "nope", {}, *scoped);
  expect_rpc_error(hidden, mcp::kInvalidParams, "unknown tool 'boom'");
  expect_rpc_error(absent, mcp::kInvalidParams, "unknown tool 'nope'");
  auto expired = token::mint_scoped(kToken, {{"echo"}, std::time(nullptr) - 1});
  expect_http_error(post(rpc("tools/list"), sid, *expired), 401, mcp::kServerError, "expired");
}

TEST_F(McpEndpointTest, ForeignOriginsAreRefused) {
  CommandServerOptions opt;
  opt.mcp_allowed_origins = {"https://app.example.com"};
  start(opt);
  auto with_origin = [&](const std::string& origin) {
    Request req = make_request(bhttp::verb::post, "/mcp", rpc("initialize", init_params()));
    req.set(bhttp::field::origin, origin);
    return send(std::move(req));
  };
  expect_http_error(with_origin("http://evil.example"), 403, mcp::kServerError, "Origin");
  expect_http_error(with_origin("null"), 403, mcp::kServerError);
  expect_http_error(with_origin("http://localhost.evil.example"), 403, mcp::kServerError);
  expect_http_error(with_origin("http://127.0.0.1.nip.io:80"), 403, mcp::kServerError);
  // Before the token: a foreign page cannot probe tokens.
  Request req = make_request(bhttp::verb::post, "/mcp", rpc("ping"));
  req.set(bhttp::field::origin, "http://evil.example");
  expect_http_error(send(std::move(req), "wrong"), 403, mcp::kServerError);
  for (std::string ok : {"http://localhost:3000", "http://127.0.0.1", "https://[::1]:8443",
                         "https://app.example.com", "HTTP://LOCALHOST"}) {
    EXPECT_EQ(with_origin(ok).result_int(), 200) << ok;
  }
}

TEST_F(McpEndpointTest, MethodsAndContentTypes) {
  start();
  Response r = send(make_request(bhttp::verb::get, "/mcp"));
  expect_http_error(r, 405, mcp::kServerError);
  EXPECT_EQ(r[bhttp::field::allow], "POST, DELETE");
  expect_http_error(send(make_request(bhttp::verb::put, "/mcp", "{}")), 405, mcp::kServerError);
  expect_http_error(
      send(make_request(bhttp::verb::post, "/mcp", rpc("initialize", init_params()), "text/plain")),
      415, mcp::kServerError);
  // A path under /mcp is not /mcp.
  EXPECT_EQ(send(make_request(bhttp::verb::post, "/mcp/x", "{}")).result_int(), 404);
}

TEST_F(McpEndpointTest, JsonRpcErrorsAtTheTransport) {
  start();
  expect_http_error(post("{not json"), 400, mcp::kParseError);
  expect_http_error(post(R"({"a":1,"a":2})"), 400, mcp::kParseError);
  expect_http_error(post("[" + rpc("initialize", init_params()) + "]"), 400, mcp::kInvalidRequest,
                    "batch");
  Response r = post(R"({"jsonrpc":"1.0","id":3,"method":"ping"})");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(json::parse(r.body()).at("id"), 3);
  expect_http_error(post(R"({"jsonrpc":"2.0","method":"tools/list"})"), 400, mcp::kInvalidRequest,
                    "no id");
  // Over the body limit: refused by the HTTP layer before the body is read.
  EXPECT_EQ(post(rpc("ping", {{"pad", std::string(5000, 'x')}})).result_int(), 413);
}

TEST_F(McpEndpointTest, NoAuthServesMcpToo) {
  CommandServerOptions opt;
  opt.no_auth = true;
  start(opt);
  std::string sid = open_session("");
  EXPECT_EQ(call(sid, "echo", {{"x", 2}}, "").at("result").at("isError"), false);
}

TEST_F(McpEndpointTest, ConcurrentCallsOnOneSession) {
  start();
  std::string sid = open_session();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto b = call(sid, "echo", {{"x", i}});
      if (b.at("result").at("structuredContent").at("result") ==
          json::value(std::to_string(i) + ": hello")) {
        ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
}

}  // namespace
}  // namespace abx::server
