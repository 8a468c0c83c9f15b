// libabx internals without a network: URLs, error mapping, command
// entries and layer merging, configuration from the environment, local discovery.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "abx/client/sandbox.h"
#include "transport.h"

namespace abx::client {
namespace {

namespace json = boost::json;
using detail::parse_http_url;

TEST(ClientUrl, ParsesHostPortAndBasePath) {
  auto e = parse_http_url("http://127.0.0.1:3000");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 3000);
  EXPECT_EQ(e->base_path, "");
  EXPECT_EQ(e->authority, "127.0.0.1:3000");
  e = parse_http_url("http://localhost/api/");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 80);
  EXPECT_EQ(e->base_path, "/api");
  e = parse_http_url("http://[::1]:8080/x");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, 8080);
}

TEST(ClientUrl, RejectsWhatItCannotSpeak) {
  EXPECT_EQ(parse_http_url("https://api.e2b.app").error().code(), ErrorCode::kUnimplemented);
  for (const char* bad : {"ftp://x", "http://", "http://h:0", "http://h:65536", "http://h:12a",
                          "127.0.0.1:3000", "http://[::1"}) {
    EXPECT_EQ(parse_http_url(bad).error().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ClientCapability, IsTheTemplatesEnum) {
  static_assert(std::is_same_v<Capability, templates::Capability>);
  EXPECT_EQ(capability_name(Capability::kCode), "code");
  EXPECT_EQ(parse_capability("ports"), Capability::kPorts);
  EXPECT_EQ(default_capabilities(),
            (std::set<Capability>{Capability::kShell, Capability::kFiles, Capability::kCode}));
}

TEST(ClientErrors, CommandServerErrorsKeepTheServersWordsAndType) {
  http::Response res{boost::beast::http::status::internal_server_error, 11};
  res.body() = R"({"error":"division by zero","type":"std::domain_error"})";
  auto e = detail::error_from_response(res, detail::Plane::kCommandServer, "command divide");
  EXPECT_EQ(e.code(), ErrorCode::kInternal);
  EXPECT_EQ(e.message(), "division by zero");
  EXPECT_EQ(e.type(), "std::domain_error");
  http::Response ctl{boost::beast::http::status::not_found, 11};
  ctl.body() = R"({"code":404,"message":"sandbox x not found"})";
  auto c = detail::error_from_response(ctl, detail::Plane::kControl, "sandbox x");
  EXPECT_EQ(c.code(), ErrorCode::kNotFound);
  EXPECT_NE(c.message().find("sandbox x not found"), std::string::npos);
  http::Response rpc{boost::beast::http::status::bad_request, 11};
  rpc.body() = R"({"code":"already_exists","message":"exists"})";
  EXPECT_EQ(detail::error_from_response(rpc, detail::Plane::kEnvd, "x").code(),
            ErrorCode::kAlreadyExists);
}

TEST(ClientCommands, EntryJsonRoundTripAndTypeCheck) {
  auto e = command_entry_from_json(
      json::parse(R"({"name":"demo","description":"d","args":[{"name":"x","type":"integer",
        "required":true,"default":null,"description":"an x"},{"name":"y","type":"string",
        "required":false,"default":"hello","description":""}]})"),
      CommandSource::kRemote);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->args.size(), 2u);
  EXPECT_EQ(e->find_arg("y")->default_value, json::value("hello"));
  auto j = to_json(*e);
  EXPECT_EQ(j.at("source"), "remote");
  EXPECT_EQ(j.at("args").as_array()[0].at("type"), "integer");
  EXPECT_FALSE(
      command_entry_from_json(json::parse(R"({"name":"a","args":[{"name":"x","type":"list"}]})"),
                              CommandSource::kRemote)
          .ok());
  EXPECT_FALSE(command_entry_from_json(json::parse(R"({"args":[]})"), CommandSource::kRemote).ok());
}

TEST(ClientCommands, MergeKeepsTheFirstLayersEntryPerName) {
  CommandEntry remote{"demo", "r", CommandSource::kRemote, {}, {}};
  CommandEntry yaml{"demo", "y", CommandSource::kYaml, {}, "echo"};
  CommandEntry greet{"greet", "g", CommandSource::kYaml, {}, "echo"};
  CommandEntry reg{"add", "a", CommandSource::kRegistered, {}, {}};
  auto m = merge_commands({{remote}, {yaml, greet}, {reg}});
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].name, "add");
  EXPECT_EQ(m[1].name, "demo");
  EXPECT_EQ(m[1].source, CommandSource::kRemote);
  EXPECT_EQ(m[2].name, "greet");
}

class ScopedEnv {
 public:
  ScopedEnv(const char* k, const char* v) : k_(k) {
    if (const char* old = std::getenv(k)) old_ = old;
    ::setenv(k, v, 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(k_, old_->c_str(), 1);
    else
      ::unsetenv(k_);
  }

 private:
  const char* k_;
  std::optional<std::string> old_;
};

TEST(ClientConfig, AbxVariablesWinOverE2b) {
  ScopedEnv a("E2B_API_KEY", "e2b_00"), b("ABX_API_KEY", "abx-key"), c("E2B_DOMAIN", "example.org"),
      d("E2B_API_URL", "http://10.0.0.1:9"), e("ABX_MAX_RETRIES", "5"),
      f("E2B_SANDBOX_URL", "http://127.0.0.1:49983");
  auto cfg = ConnectionConfig::from_env();
  EXPECT_EQ(cfg.api_key, "abx-key");
  EXPECT_EQ(cfg.domain, "example.org");
  EXPECT_EQ(cfg.api_url, "http://10.0.0.1:9");
  EXPECT_EQ(cfg.max_retries, 5);
  EXPECT_EQ(cfg.sandbox_url, "http://127.0.0.1:49983");
}

TEST(ClientConfig, DomainAloneImpliesTheHostedApi) {
  ScopedEnv c("ABX_DOMAIN", "abx.example");
  ::unsetenv("ABX_API_URL");
  ::unsetenv("E2B_API_URL");
  EXPECT_EQ(ConnectionConfig::from_env().api_url, "https://api.abx.example");
}

}  // namespace
}  // namespace abx::client
