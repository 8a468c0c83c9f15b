// The JSON-RPC core without a transport: every bad-input row (malformed JSON, wrong version,
// ids, batches, sizes, params shapes), the lifecycle and version negotiation, and tools/list
// and tools/call against a fake provider, including one that answers from another thread.
#include "abx/mcp/mcp.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <future>
#include <stdexcept>
#include <thread>

#include "test_tools.h"

namespace abx::mcp {
namespace {

namespace json = boost::json;

class FakeTools : public ToolProvider {
 public:
  std::vector<Tool> list_tools() override {
    return {Tool{.name = "echo", .description = "Echo.", .input_schema = {{"type", "object"}}}};
  }
  void call_tool(std::string_view name, const json::object& arguments, ToolDone done) override {
    if (name == "echo") {
      ToolResult r;
      r.structured = arguments;
      r.text = json::serialize(arguments);
      return done(r);
    }
    if (name == "bad_args") return done(invalid_argument("argument 'x' must be an integer"));
    if (name == "fails") {
      ToolResult r;
      r.text = "it broke";
      r.is_error = true;
      return done(r);
    }
    if (name == "later") return answer_from_thread(done, "late");
    if (name == "throws") throw std::runtime_error("provider bug");
    if (name == "answers_then_throws") {
      done(ToolResult{});
      throw std::runtime_error("after answering");
    }
    done(not_found("unknown tool '" + std::string(name) + "'"));
  }
};

class McpCoreTest : public ::testing::Test {
 protected:
  // Sends one message; returns the reply, or null when there was none.
  json::value send(std::string_view text) {
    std::promise<std::optional<json::object>> p;
    auto f = p.get_future();
    int calls = 0;
    dispatcher_.handle(text, session_, tools_, [&](std::optional<json::object> r) {
      ++calls;
      p.set_value(std::move(r));
    });
    auto r = f.get();
    EXPECT_EQ(calls, 1);
    if (!r) return nullptr;
    EXPECT_EQ(r->at("jsonrpc"), "2.0");
    return *r;
  }
  json::value request(std::string_view method, json::object params = {}, json::value id = 1) {
    json::object m{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
    m["params"] = std::move(params);
    return send(json::serialize(m));
  }
  void initialize() {
    auto r = request("initialize", init_params());
    ASSERT_TRUE(r.as_object().contains("result")) << r;
  }
  static json::object init_params(std::string_view version = kLatestProtocolVersion) {
    return json::object{{"protocolVersion", version},
                        {"capabilities", json::object{}},
                        {"clientInfo", json::object{{"name", "test"}, {"version", "1"}}}};
  }
  static void expect_error(const json::value& r, int code, const json::value& id = nullptr,
                           std::string_view needle = {}) {
    ASSERT_TRUE(r.is_object()) << "no reply";
    ASSERT_TRUE(r.as_object().contains("error")) << r;
    EXPECT_EQ(r.at("error").at("code").as_int64(), code) << r;
    EXPECT_EQ(r.at("id"), id) << r;
    EXPECT_NE(std::string(r.at("error").at("message").as_string()).find(needle), std::string::npos)
        << r;
  }

  ServerInfo info_{"abx-test", "1.2.3", ""};
  Dispatcher dispatcher_{info_, DecodeLimits{4096, {}}};
  SessionState session_;
  FakeTools tools_;
};

TEST_F(McpCoreTest, MalformedJsonIsParseError) {
  for (std::string_view bad :
       {"", "{", "{\"jsonrpc\":\"2.0\",}", "nul", "{\"a\":1}{}",
        "{\"id\":1,\"id\":2,\"jsonrpc\":\"2.0\",\"method\":\"ping\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":NaN}", "\xff\xfe"}) {
    expect_error(send(bad), kParseError, nullptr);
  }
}

TEST_F(McpCoreTest, WrongJsonrpcVersionIsInvalidRequestEchoingTheId) {
  expect_error(send(R"({"jsonrpc":"1.0","id":7,"method":"ping"})"), kInvalidRequest, 7, "2.0");
  expect_error(send(R"({"jsonrpc":2.0,"id":"a","method":"ping"})"), kInvalidRequest, "a");
  expect_error(send(R"({"id":8,"method":"ping"})"), kInvalidRequest, 8);
}

TEST_F(McpCoreTest, NonObjectsAndBatchesAreInvalidRequests) {
  expect_error(send("42"), kInvalidRequest);
  expect_error(send(R"("ping")"), kInvalidRequest);
  expect_error(send("[]"), kInvalidRequest, nullptr, "batch");
  expect_error(send(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])"), kInvalidRequest, nullptr,
               "batch");
}

TEST_F(McpCoreTest, IdsMustBeStringsOrIntegers) {
  EXPECT_EQ(send(R"({"jsonrpc":"2.0","id":"x-1","method":"ping"})").at("id"), "x-1");
  EXPECT_EQ(send(R"({"jsonrpc":"2.0","id":-3,"method":"ping"})").at("id"), -3);
  expect_error(send(R"({"jsonrpc":"2.0","id":null,"method":"ping"})"), kInvalidRequest);
  expect_error(send(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})"), kInvalidRequest);
  expect_error(send(R"({"jsonrpc":"2.0","id":{},"method":"ping"})"), kInvalidRequest);
  expect_error(send(R"({"jsonrpc":"2.0","id":[1],"method":"ping"})"), kInvalidRequest);
}

TEST_F(McpCoreTest, RequestWithoutIdIsInvalidRequest) {
  expect_error(send(R"({"jsonrpc":"2.0","method":"tools/list"})"), kInvalidRequest, nullptr,
               "no id");
}

TEST_F(McpCoreTest, MethodMustBeANonEmptyString) {
  expect_error(send(R"({"jsonrpc":"2.0","id":1,"method":5})"), kInvalidRequest, 1);
  expect_error(send(R"({"jsonrpc":"2.0","id":1,"method":""})"), kInvalidRequest, 1);
  expect_error(send(R"({"jsonrpc":"2.0","id":1})"), kInvalidRequest, 1);
}

TEST_F(McpCoreTest, ParamsMustBeAnObject) {
  expect_error(send(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})"), kInvalidParams, 1);
  expect_error(send(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":"x"})"), kInvalidRequest,
               1);
}

TEST_F(McpCoreTest, OversizedMessageIsInvalidRequest) {
  initialize();
  std::string big(5000, 'a');
  auto r = request("tools/call",
                   json::object{{"name", "echo"}, {"arguments", json::object{{"s", big}}}});
  expect_error(r, kInvalidRequest, nullptr, "over the limit");
}

TEST_F(McpCoreTest, TooDeepIsParseError) {
  std::string deep = R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":)" +
                     std::string(100, '[') + std::string(100, ']') + "}}";
  expect_error(send(deep), kParseError);
}

TEST_F(McpCoreTest, NotificationsGetNoReply) {
  EXPECT_TRUE(send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").is_null());
  EXPECT_TRUE(session_.client_ready.load());
  EXPECT_TRUE(
      send(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{}})").is_null());
  // Unknown notifications, and ones with malformed params, are ignored too.
  EXPECT_TRUE(send(R"({"jsonrpc":"2.0","method":"notifications/whatever"})").is_null());
  EXPECT_TRUE(send(R"({"jsonrpc":"2.0","method":"notifications/x","params":[1]})").is_null());
}

TEST_F(McpCoreTest, ClientResponsesGetNoReply) {
  EXPECT_TRUE(send(R"({"jsonrpc":"2.0","id":1,"result":{}})").is_null());
  EXPECT_TRUE(send(R"({"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}})").is_null());
  expect_error(send(R"({"jsonrpc":"2.0","id":1,"result":{},"error":{}})"), kInvalidRequest, 1);
  expect_error(send(R"({"jsonrpc":"2.0","result":{}})"), kInvalidRequest);
}

TEST_F(McpCoreTest, UnknownMethodIsMethodNotFound) {
  initialize();
  expect_error(request("resources/list", {}, 3), kMethodNotFound, 3, "resources/list");
  // A notification method sent as a request is not a request method either.
  expect_error(request("notifications/initialized", {}, 4), kMethodNotFound, 4);
}

TEST_F(McpCoreTest, InitializeNegotiatesTheVersion) {
  auto r = request("initialize", init_params());
  const auto& res = r.at("result");
  EXPECT_EQ(res.at("protocolVersion"), json::value(kLatestProtocolVersion));
  EXPECT_EQ(res.at("serverInfo").at("name"), "abx-test");
  EXPECT_EQ(res.at("serverInfo").at("version"), "1.2.3");
  EXPECT_EQ(res.at("capabilities").at("tools").at("listChanged"), false);
  EXPECT_FALSE(res.as_object().contains("instructions"));
  EXPECT_TRUE(session_.initialized.load());
  expect_error(request("initialize", init_params(), 2), kInvalidRequest, 2, "already");
}

TEST_F(McpCoreTest, InitializeWithAnUnknownVersionAnswersOurLatest) {
  for (std::string_view v : {"2099-01-01", "2024-11-05", ""}) {
    SessionState s;
    std::optional<json::object> reply;
    dispatcher_.handle(
        json::serialize(json::object{
            {"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"}, {"params", init_params(v)}}),
        s, tools_, [&](std::optional<json::object> r) { reply = std::move(r); });
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->at("result").at("protocolVersion"), json::value(kLatestProtocolVersion)) << v;
  }
}

TEST_F(McpCoreTest, InitializeChecksItsParams) {
  auto p = init_params();
  p.erase("protocolVersion");
  expect_error(request("initialize", p), kInvalidParams, 1, "protocolVersion");
  p = init_params();
  p["protocolVersion"] = 20250618;
  expect_error(request("initialize", p), kInvalidParams, 1, "protocolVersion");
  p = init_params();
  p.erase("capabilities");
  expect_error(request("initialize", p), kInvalidParams, 1, "capabilities");
  p = init_params();
  p["clientInfo"] = json::object{{"name", "x"}};
  expect_error(request("initialize", p), kInvalidParams, 1, "clientInfo.version");
  expect_error(send(R"({"jsonrpc":"2.0","id":1,"method":"initialize"})"), kInvalidParams, 1);
  EXPECT_FALSE(session_.initialized.load());
}

TEST_F(McpCoreTest, PingWorksBeforeInitializeOtherRequestsDoNot) {
  EXPECT_EQ(request("ping").at("result"), json::object{});
  expect_error(request("tools/list"), kInvalidRequest, 1, "before initialize");
  expect_error(request("tools/call", {{"name", "echo"}}), kInvalidRequest, 1);
}

TEST_F(McpCoreTest, ToolsList) {
  initialize();
  auto r = request("tools/list");
  const auto& tools = r.at("result").at("tools").as_array();
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0].at("name"), "echo");
  EXPECT_EQ(tools[0].at("inputSchema").at("type"), "object");
  EXPECT_FALSE(tools[0].as_object().contains("annotations"));
  EXPECT_FALSE(tools[0].as_object().contains("outputSchema"));
  EXPECT_FALSE(r.at("result").as_object().contains("nextCursor"));
  expect_error(request("tools/list", {{"cursor", "abc"}}), kInvalidParams, 1, "cursor");
  expect_error(request("tools/list", {{"cursor", 3}}), kInvalidParams, 1, "cursor");
}

TEST_F(McpCoreTest, ToolsCallResultsAndErrors) {
  initialize();
  auto r = request("tools/call", {{"name", "echo"}, {"arguments", {{"a", 1}}}}, "c1");
  EXPECT_EQ(r.at("id"), "c1");
  EXPECT_EQ(r.at("result").at("structuredContent"), (json::object{{"a", 1}}));
  EXPECT_EQ(r.at("result").at("content").at(0).at("type"), "text");
  EXPECT_EQ(r.at("result").at("content").at(0).at("text"), R"({"a":1})");
  EXPECT_EQ(r.at("result").at("isError"), false);

  r = request("tools/call", {{"name", "fails"}});
  EXPECT_EQ(r.at("result").at("isError"), true);
  EXPECT_EQ(r.at("result").at("content").at(0).at("text"), "it broke");

  expect_error(request("tools/call", {{"name", "nope"}}), kInvalidParams, 1, "unknown tool");
  expect_error(request("tools/call", {{"name", "bad_args"}}), kInvalidParams, 1, "'x'");
  expect_error(request("tools/call", {}), kInvalidParams, 1, "name");
  expect_error(request("tools/call", {{"name", 3}}), kInvalidParams, 1, "name");
  expect_error(request("tools/call", {{"name", "echo"}, {"arguments", json::array{1}}}),
               kInvalidParams, 1, "arguments");
}

TEST_F(McpCoreTest, ToolsCallAnsweredFromAnotherThread) {
  initialize();
  auto r = request("tools/call", {{"name", "later"}}, 9);
  EXPECT_EQ(r.at("id"), 9);
  EXPECT_EQ(r.at("result").at("content").at(0).at("text"), "late");
}

TEST_F(McpCoreTest, AThrowingProviderIsAnInternalErrorAnsweredOnce) {
  initialize();
  expect_error(request("tools/call", {{"name", "throws"}}), kInternalError, 1, "provider bug");
  // send() checks the reply came exactly once.
  EXPECT_TRUE(request("tools/call", {{"name", "answers_then_throws"}}).at("result").is_object());
}

TEST(McpErrors, OneMappingFromErrorToCode) {
  EXPECT_EQ(rpc_code(parse_error("x")), kParseError);
  EXPECT_EQ(rpc_code(invalid_request("x")), kInvalidRequest);
  EXPECT_EQ(rpc_code(method_not_found("x")), kMethodNotFound);
  EXPECT_EQ(rpc_code(invalid_params("x")), kInvalidParams);
  EXPECT_EQ(rpc_code(session_not_found("x")), kSessionNotFound);
  EXPECT_EQ(rpc_code(invalid_argument("x")), kInvalidParams);
  EXPECT_EQ(rpc_code(not_found("x")), kInvalidParams);
  EXPECT_EQ(rpc_code(internal_error("x")), kInternalError);
  EXPECT_EQ(rpc_code(Error(ErrorCode::kUnimplemented, "x")), kMethodNotFound);
  EXPECT_EQ(rpc_code(Error(ErrorCode::kUnauthenticated, "x")), kServerError);
  EXPECT_EQ(rpc_code(unavailable("x")), kServerError);
  auto e = rpc_error(Error(ErrorCode::kPayloadTooLarge, "too big"));
  EXPECT_EQ(e.at("message"), "too big");
  EXPECT_EQ(e.at("data").at("type"), "PayloadTooLarge");
}

}  // namespace
}  // namespace abx::mcp
