// libabx internals without a network: URLs, error mapping, command
// entries and layer merging, configuration from the environment, local discovery.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "abx/client/sandbox.h"
#include "abx/client/templates.h"
#include "abx/http/server.h"
#include "abx/testing/temp_dir.h"
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

SandboxInfo info_of(std::string id, std::string template_id = {}) {
  SandboxInfo i;
  i.sandbox_id = std::move(id);
  i.template_id = std::move(template_id);
  return i;
}

// A control plane that answers the persistence routes as abxd does (docs/abxd.md).
class FakePersistencePlane : public ::testing::Test {
 protected:
  void SetUp() override {
    http::ServerOptions so;
    so.io_threads = 1;
    auto s = http::Server::start(
        so, [this](http::Request&& req, http::Responder respond) { respond(handle(req)); });
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(*s);
    config_.api_url = "http://127.0.0.1:" + std::to_string(server_->port());
    config_.api_key = "key";
    config_.max_retries = 0;
  }
  void TearDown() override {
    if (server_) server_->shutdown(std::chrono::milliseconds(0));
  }
  http::Response handle(const http::Request& req) {
    std::string target(req.target());
    std::lock_guard lock(mu_);
    targets_.push_back(std::string(req.method_string()) + " " + target);
    if (target == "/sandboxes/sb1/fork") {
      last_body_ = req.body();
      json::array out;
      out.push_back(json::object{{"sandbox", json::object{{"sandboxID", "child1"},
                                                          {"templateID", "base"},
                                                          {"clientID", "c"},
                                                          {"envdVersion", "0.2.0"},
                                                          {"domain", "abx.local"},
                                                          {"envdAccessToken", "tok1"},
                                                          {"trafficAccessToken", "traffic1"}}}});
      out.push_back(
          json::object{{"error", json::object{{"code", 409}, {"message", "no room for child"}}}});
      return http::json_response(201, out);
    }
    if (target == "/sandboxes/paused/fork")
      return http::json_response(409, json::object{{"code", 409}, {"message", "paused"}});
    if (target == "/sandboxes/sb1/snapshots") {
      last_body_ = req.body();
      return http::json_response(
          201, json::object{{"snapshotID", "snapshot-1"}, {"names", json::array{"mine"}}});
    }
    if (target.rfind("/snapshots", 0) == 0) {
      auto entry = [](const char* id) {
        return json::object{{"snapshotID", id},
                            {"names", json::array{}},
                            {"sandboxID", "sb1"},
                            {"templateID", "base"},
                            {"createdAt", "2026-12-01T12:00:00.000Z"}};
      };
      if (target.find("nextToken=1") != std::string::npos)
        return http::json_response(200, json::array{entry("snapshot-b")});
      auto res = http::json_response(200, json::array{entry("snapshot-a")});
      res.set("X-Next-Token", "1");
      return res;
    }
    if (target == "/templates/snapshot-1" && req.method() == boost::beast::http::verb::delete_) {
      http::Response res{boost::beast::http::status::no_content, req.version()};
      return res;
    }
    return http::json_response(404, json::object{{"code", 404}, {"message", "not found"}});
  }

  std::unique_ptr<http::Server> server_;
  ConnectionConfig config_;
  std::mutex mu_;
  std::vector<std::string> targets_;
  std::string last_body_;
};

TEST_F(FakePersistencePlane, ForkGivesAHandlePerChildAndEachChildsError) {
  auto parent = Sandbox::attach(info_of("sb1", "base"), config_);
  auto kids = parent.fork(2, std::chrono::seconds(60));
  ASSERT_TRUE(kids.ok()) << kids.error().message();
  EXPECT_EQ(json::parse(last_body_), json::parse(R"({"count":2,"timeout":60})"));
  ASSERT_EQ(kids->size(), 2u);
  ASSERT_TRUE((*kids)[0].ok());
  EXPECT_EQ((*kids)[0]->id(), "child1");
  EXPECT_EQ((*kids)[0]->cached_info().envd_access_token, "tok1");
  EXPECT_EQ((*kids)[0]->cached_info().template_id, "base");
  ASSERT_FALSE((*kids)[1].ok());
  EXPECT_EQ((*kids)[1].error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE((*kids)[1].error().message().find("no room for child"), std::string::npos);
  // Without a timeout the body has none: the platform's default applies.
  ASSERT_TRUE(parent.fork().ok());
  EXPECT_EQ(json::parse(last_body_), json::parse(R"({"count":1})"));
  // The call's own failure is the call's error.
  auto paused = Sandbox::attach(info_of("paused"), config_).fork();
  ASSERT_FALSE(paused.ok());
  EXPECT_EQ(paused.error().code(), ErrorCode::kFailedPrecondition);
}

TEST_F(FakePersistencePlane, SnapshotsCreateListAcrossPagesAndDelete) {
  auto sbx = Sandbox::attach(info_of("sb1", "base"), config_);
  auto snap = sbx.create_snapshot("mine");
  ASSERT_TRUE(snap.ok()) << snap.error().message();
  EXPECT_EQ(json::parse(last_body_), json::parse(R"({"name":"mine"})"));
  EXPECT_EQ(snap->id, "snapshot-1");
  EXPECT_EQ(snap->names, std::vector<std::string>{"mine"});
  EXPECT_EQ(snap->sandbox_id, "sb1");
  auto all = Sandbox::list_snapshots(config_, "sb1", "a b");
  ASSERT_TRUE(all.ok()) << all.error().message();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "snapshot-a");
  EXPECT_EQ((*all)[1].id, "snapshot-b");
  EXPECT_EQ((*all)[1].created_at, "2026-12-01T12:00:00.000Z");
  {
    std::lock_guard lock(mu_);
    EXPECT_NE(
        std::find(targets_.begin(), targets_.end(), "GET /snapshots?sandboxID=sb1&name=a%20b"),
        targets_.end());
  }
  auto del = Sandbox::delete_snapshot("snapshot-1", config_);
  ASSERT_TRUE(del.ok());
  EXPECT_TRUE(*del);
  auto gone = Sandbox::delete_snapshot("snapshot-2", config_);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(*gone);
}
// libarchive is loaded on first use (not linked): the context of a template build still comes out
// as a tar that GNU tar reads, with the extra file, a symlink and the size limit.
TEST(ClientTemplates, TarContextLoadsLibarchiveAndWritesATar) {
  namespace fs = std::filesystem;
  abx::testing::TempDir tmp("abx-tar-test");
  const fs::path& dir = tmp.path();
  fs::create_directories(dir / "ctx/sub");
  std::ofstream(dir / "ctx/sub/a.txt") << "hello";
  fs::create_symlink("sub/a.txt", dir / "ctx/link");
  auto tar = tar_context((dir / "ctx").string(), 1 << 20, "extra.Dockerfile", "FROM base\n");
  ASSERT_TRUE(tar.ok()) << tar.error().to_string();
  std::ofstream(dir / "out.tar", std::ios::binary) << *tar;
  std::string listing;
  if (FILE* p = ::popen(("tar -tvf " + (dir / "out.tar").string() + " 2>&1").c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) listing += buf;
    EXPECT_EQ(::pclose(p), 0) << listing;
  }
  EXPECT_NE(listing.find("sub/a.txt"), std::string::npos) << listing;
  EXPECT_NE(listing.find("link -> sub/a.txt"), std::string::npos) << listing;
  EXPECT_NE(listing.find("extra.Dockerfile"), std::string::npos) << listing;
  auto small = tar_context((dir / "ctx").string(), 100);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().code(), ErrorCode::kResourceExhausted);
}
}  // namespace
}  // namespace abx::client
