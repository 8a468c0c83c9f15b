// Tenants end to end (issue 35): two teams' keys against one real abxd. Each team lists only its
// own sandboxes; the other team's sandbox id answers 404 with the body an unknown id gets, on
// every sandbox route; a template built by one team is invisible to the other while the
// built-in ones are everyone's; signed requests and MCP are scoped the same way; the home's
// first key (the default team) works as it always did. Needs root (CI runs as root).
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "abx/auth/signing.h"
#include "abx/client/templates.h"
#include "abx/http/client.h"
#include "abx/testing/abxd.h"
#include "abx/testing/child_process.h"

namespace abx::e2e {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
namespace fs = std::filesystem;

// An id of the right shape that no sandbox has.
const std::string kUnknownId(20, 'z');

class TenantsE2E : public testing::AbxdFixture {
 protected:
  TenantsE2E() : AbxdFixture("abxd-tenants") {}

  // `abxd --home H <args>`: its stdout (trimmed) and exit code.
  std::pair<std::string, int> admin(std::vector<std::string> args) {
    std::vector<std::string> argv{testing::abxd_bin(), "--home", home().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::ChildProcess p(argv);
    std::string out = p.read_all();
    out.erase(out.find_last_not_of("\n") + 1);
    return {out, p.wait()};
  }

  http::Response api(const std::string& key, bhttp::verb verb, const std::string& target,
                     const std::string& body = {}) {
    auto req = http::make_request(verb, target, body);
    if (body.empty() && verb != bhttp::verb::post && verb != bhttp::verb::put)
      req.erase(bhttp::field::content_type);
    req.set("X-API-KEY", key);
    auto r = http::fetch("127.0.0.1", port(), std::move(req), std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : http::Response{};
  }

  std::string create(const std::string& key) {
    auto r = api(key, bhttp::verb::post, "/sandboxes", R"({"templateID":"base","timeout":300})");
    EXPECT_EQ(r.result_int(), 201) << r.body();
    if (r.result_int() != 201) return {};
    return std::string(json::parse(r.body()).at("sandboxID").as_string());
  }

  std::set<std::string> listed(const std::string& key, const std::string& path) {
    auto r = api(key, bhttp::verb::get, path);
    EXPECT_EQ(r.result_int(), 200) << r.body();
    std::set<std::string> out;
    if (r.result_int() != 200) return out;
    const json::value v = json::parse(r.body());
    for (const auto& s : v.as_array()) out.insert(std::string(s.at("sandboxID").as_string()));
    return out;
  }

  std::set<std::string> template_ids(const std::string& key) {
    auto r = api(key, bhttp::verb::get, "/templates");
    EXPECT_EQ(r.result_int(), 200) << r.body();
    std::set<std::string> out;
    if (r.result_int() != 200) return out;
    const json::value v = json::parse(r.body());
    for (const auto& t : v.as_array()) out.insert(std::string(t.at("templateID").as_string()));
    return out;
  }

  client::ConnectionConfig client_config(const std::string& key) {
    client::ConnectionConfig cfg;
    cfg.api_url = abxd().url();
    cfg.api_key = key;
    cfg.home = home();
    cfg.request_timeout = std::chrono::seconds(120);
    return cfg;
  }
};

// `what` with every occurrence of `id` replaced: the bodies for two ids compare equal when they
// differ only in the id the request named.
std::string without(std::string what, const std::string& id) {
  for (auto at = what.find(id); at != std::string::npos; at = what.find(id))
    what.replace(at, id.size(), "<id>");
  return what;
}

TEST_F(TenantsE2E, EachTeamSeesAndControlsOnlyItsOwnObjects) {
  const std::string a = key();  // the home's first key: the default team, as before teams
  auto [team, team_rc] = admin({"teams", "create", "team-b"});
  ASSERT_EQ(team_rc, 0);
  EXPECT_EQ(team, "team-b");
  EXPECT_EQ(admin({"teams", "create", "team-b"}).second, 2);  // taken
  EXPECT_EQ(admin({"teams", "create", "Bad/Name"}).second, 2);
  EXPECT_EQ(admin({"keys", "create", "--team", "nope"}).second, 2);  // no such team
  auto [b, b_rc] = admin({"keys", "create", "--name", "b", "--team", "team-b"});
  ASSERT_EQ(b_rc, 0);
  ASSERT_EQ(b.rfind("e2b_", 0), 0u) << b;
  auto [a2, a2_rc] = admin({"keys", "create", "--name", "second"});  // no --team: default
  ASSERT_EQ(a2_rc, 0);
  auto [teams, teams_rc] = admin({"teams", "list"});
  EXPECT_EQ(teams_rc, 0);
  EXPECT_NE(teams.find("default"), std::string::npos) << teams;
  EXPECT_NE(teams.find("team-b"), std::string::npos) << teams;

  const std::string sa = create(a);
  const std::string sb = create(b);
  ASSERT_FALSE(sa.empty());
  ASSERT_FALSE(sb.empty());

  // Lists: each team its own; the default team's second key sees what the first made.
  for (const char* path : {"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?state=running,paused"}) {
    EXPECT_EQ(listed(a, path), std::set<std::string>{sa}) << path;
    EXPECT_EQ(listed(a2, path), std::set<std::string>{sa}) << path;
    EXPECT_EQ(listed(b, path), std::set<std::string>{sb}) << path;
  }

  // Every sandbox route: B on A's sandbox is exactly B on an id nobody has.
  struct Op {
    bhttp::verb verb;
    std::string suffix;
    std::string body;
  };
  const std::vector<Op> ops = {
      {bhttp::verb::get, "", ""},
      {bhttp::verb::delete_, "", ""},
      {bhttp::verb::post, "/pause", "{}"},
      {bhttp::verb::post, "/resume", "{}"},
      {bhttp::verb::post, "/connect", R"({"timeout":60})"},
      {bhttp::verb::post, "/timeout", R"({"timeout":60})"},
      {bhttp::verb::get, "/metrics", ""},
      {bhttp::verb::get, "/logs", ""},
      {bhttp::verb::post, "/tokens", R"({"commands":["demo"]})"},
      {bhttp::verb::post, "/snapshots", "{}"},
      {bhttp::verb::post, "/fork", R"({"count":1})"},
      {bhttp::verb::put, "/network", R"({"allowInternetAccess":false})"},
      {bhttp::verb::get, "/network/audit", ""},
  };
  for (const auto& op : ops) {
    auto cross = api(b, op.verb, "/sandboxes/" + sa + op.suffix, op.body);
    auto unknown = api(b, op.verb, "/sandboxes/" + kUnknownId + op.suffix, op.body);
    EXPECT_EQ(cross.result_int(), 404) << op.suffix << ": " << cross.body();
    EXPECT_EQ(without(cross.body(), sa), without(unknown.body(), kUnknownId)) << op.suffix;
  }
  auto cross_connect = api(b, bhttp::verb::post, "/v2/sandboxes/" + sa + "/connect", "{}");
  EXPECT_EQ(cross_connect.result_int(), 404) << cross_connect.body();

  // A's sandbox went through all of that untouched: running, its owner reaches every route.
  auto got = api(a, bhttp::verb::get, "/sandboxes/" + sa);
  ASSERT_EQ(got.result_int(), 200) << got.body();
  EXPECT_EQ(json::parse(got.body()).at("state"), "running");
  EXPECT_EQ(api(a2, bhttp::verb::get, "/sandboxes/" + sa).result_int(), 200);
  EXPECT_EQ(api(a, bhttp::verb::get, "/sandboxes/" + sa + "/metrics").result_int(), 200);
  EXPECT_EQ(api(a, bhttp::verb::get, "/sandboxes/" + sa + "/logs").result_int(), 200);
  EXPECT_EQ(api(a, bhttp::verb::post, "/sandboxes/" + sa + "/connect", "{}").result_int(), 200);
  EXPECT_EQ(
      api(a, bhttp::verb::post, "/sandboxes/" + sa + "/timeout", R"({"timeout":300})").result_int(),
      204);
  // And A on B's is a 404 the same way.
  EXPECT_EQ(api(a, bhttp::verb::get, "/sandboxes/" + sb).result_int(), 404);
  EXPECT_EQ(api(a, bhttp::verb::delete_, "/sandboxes/" + sb).result_int(), 404);
  EXPECT_EQ(api(b, bhttp::verb::get, "/sandboxes/" + sb).result_int(), 200);

  // Signed requests act for the access key's team.
  auto [pair, ak_rc] = admin({"access-keys", "create", "--team", "team-b"});
  ASSERT_EQ(ak_rc, 0);
  auto sp = pair.find(' ');
  ASSERT_NE(sp, std::string::npos) << pair;
  auth::Credentials creds{pair.substr(0, sp), pair.substr(sp + 1)};
  auto signed_req = [&](bhttp::verb verb, const std::string& target) {
    auth::HttpRequest hr{std::string(bhttp::to_string(verb)),
                         target,
                         {{"host", "127.0.0.1:" + std::to_string(port())}}};
    auth::SignOptions so;
    so.now_unix = std::time(nullptr);
    auto headers = auth::sign(hr, "", creds, so);
    EXPECT_TRUE(headers.ok());
    auto req = http::make_request(verb, target);
    req.erase(bhttp::field::content_type);
    req.set(bhttp::field::host, "127.0.0.1:" + std::to_string(port()));
    if (headers.ok())
      for (const auto& h : *headers) req.set(h.name, h.value);
    auto r = http::fetch("127.0.0.1", port(), std::move(req));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : http::Response{};
  };
  auto slist = signed_req(bhttp::verb::get, "/v2/sandboxes");
  ASSERT_EQ(slist.result_int(), 200) << slist.body();
  auto sarr = json::parse(slist.body()).as_array();
  ASSERT_EQ(sarr.size(), 1u);
  EXPECT_EQ(sarr[0].at("sandboxID").as_string(), sb);
  EXPECT_EQ(signed_req(bhttp::verb::get, "/sandboxes/" + sa).result_int(), 404);

  // Templates: one A builds is A's alone; the built-in ones are everyone's.
  const fs::path ctx = tmp().path() / "ctx";
  fs::create_directories(ctx);
  std::ofstream(ctx / "Dockerfile") << "FROM scratch\nLABEL team=default\n";
  const std::string name = "tenants-e2e-" + std::to_string(::getpid());
  client::BuildOptions bo;
  bo.name = name;
  auto built = client::build_template(ctx.string(), bo, {}, client_config(a));
  ASSERT_TRUE(built.ok()) << built.error().message();
  EXPECT_TRUE(template_ids(a).contains(name));
  EXPECT_TRUE(template_ids(a2).contains(name));
  const auto b_templates = template_ids(b);
  EXPECT_FALSE(b_templates.contains(name));
  for (const char* builtin : {"base", "demo", "code-interpreter"}) {
    EXPECT_TRUE(template_ids(a).contains(builtin)) << builtin;
    EXPECT_TRUE(b_templates.contains(builtin)) << builtin;
    EXPECT_EQ(api(b, bhttp::verb::get, std::string("/templates/") + builtin).result_int(), 200);
  }
  EXPECT_EQ(api(a, bhttp::verb::get, "/templates/" + name).result_int(), 200);
  const std::string nobody = "tenants-nobody";
  for (const std::string prefix : {"/templates/", "/templates/aliases/"}) {
    auto cross = api(b, bhttp::verb::get, prefix + name);
    auto unknown = api(b, bhttp::verb::get, prefix + nobody);
    EXPECT_EQ(cross.result_int(), 404) << prefix << ": " << cross.body();
    EXPECT_EQ(without(cross.body(), name), without(unknown.body(), nobody)) << prefix;
  }
  auto cross_create = api(b, bhttp::verb::post, "/sandboxes", R"({"templateID":")" + name + "\"}");
  auto unknown_create =
      api(b, bhttp::verb::post, "/sandboxes", R"({"templateID":")" + nobody + "\"}");
  EXPECT_EQ(cross_create.result_int(), 404) << cross_create.body();
  EXPECT_EQ(without(cross_create.body(), name), without(unknown_create.body(), nobody));
  auto cross_delete = api(b, bhttp::verb::delete_, "/templates/" + name);
  EXPECT_EQ(cross_delete.result_int(), 404) << cross_delete.body();
  EXPECT_EQ(api(b, bhttp::verb::get, "/templates/" + name + "/image").result_int(), 404);
  // B can neither take A's name over nor build on A's template.
  auto taken = client::build_template(ctx.string(), bo, {}, client_config(b));
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.error().code(), ErrorCode::kFailedPrecondition);  // 409
  EXPECT_NE(taken.error().message().find("taken by another team"), std::string::npos)
      << taken.error().message();
  const fs::path ctx_from = tmp().path() / "ctx-from";
  fs::create_directories(ctx_from);
  std::ofstream(ctx_from / "Dockerfile") << "FROM " << name << "\nLABEL team=b\n";
  client::BuildOptions bo_from;
  bo_from.name = name + "-b";
  auto from = client::build_template(ctx_from.string(), bo_from, {}, client_config(b));
  ASSERT_FALSE(from.ok());
  EXPECT_EQ(from.error().code(), ErrorCode::kNotFound) << from.error().message();
  EXPECT_NE(from.error().message().find("no template or image"), std::string::npos)
      << from.error().message();
  EXPECT_FALSE(template_ids(b).contains(name + "-b"));
  // The owner still has it, and removes it.
  EXPECT_EQ(api(a, bhttp::verb::get, "/templates/" + name).result_int(), 200);
  EXPECT_EQ(api(a, bhttp::verb::delete_, "/templates/" + name).result_int(), 204);

  // Kill: B's DELETE of A's sandbox did nothing; each team kills its own.
  EXPECT_EQ(api(a, bhttp::verb::delete_, "/sandboxes/" + sa).result_int(), 204);
  EXPECT_EQ(api(b, bhttp::verb::delete_, "/sandboxes/" + sb).result_int(), 204);
  EXPECT_TRUE(listed(a, "/v2/sandboxes").empty());
  EXPECT_TRUE(listed(b, "/v2/sandboxes").empty());
}

// MCP on abxd acts for the key's team: list_sandboxes shows the team's own, and another team's
// sandbox is "not found" to kill_sandbox and run_shell.
TEST_F(TenantsE2E, McpToolsAreScopedToTheKeysTeam) {
  ASSERT_EQ(admin({"teams", "create", "team-b"}).second, 0);
  const auto made = admin({"keys", "create", "--team", "team-b"});
  ASSERT_EQ(made.second, 0);
  const std::string b = made.first;  // a lambda below uses it
  const std::string sa = create(key());
  const std::string sb = create(b);
  ASSERT_FALSE(sa.empty());
  ASSERT_FALSE(sb.empty());

  std::string session;
  int id = 0;
  auto rpc = [&](const std::string& method, json::object params) {
    auto req = http::make_request(
        bhttp::verb::post, "/mcp",
        json::serialize(json::object{
            {"jsonrpc", "2.0"}, {"id", ++id}, {"method", method}, {"params", params}}));
    req.set("X-API-KEY", b);
    if (!session.empty()) req.set("Mcp-Session-Id", session);
    auto r = http::fetch("127.0.0.1", port(), std::move(req), std::chrono::seconds(60));
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return json::object{};
    EXPECT_EQ(r->result_int(), 200) << r->body();
    if (session.empty()) session = std::string((*r)["Mcp-Session-Id"]);
    auto v = json::parse(r->body()).as_object();
    return v.contains("result") ? v.at("result").as_object() : v;
  };
  rpc("initialize", {{"protocolVersion", "2025-06-18"},
                     {"capabilities", json::object{}},
                     {"clientInfo", json::object{{"name", "t"}, {"version", "1"}}}});
  ASSERT_FALSE(session.empty());
  auto list = rpc("tools/call", {{"name", "list_sandboxes"}, {"arguments", json::object{}}});
  const auto& items = list.at("structuredContent").at("sandboxes").as_array();
  ASSERT_EQ(items.size(), 1u) << json::serialize(list);
  EXPECT_EQ(items[0].at("sandboxId").as_string(), sb);
  auto kill =
      rpc("tools/call", {{"name", "kill_sandbox"}, {"arguments", json::object{{"sandboxId", sa}}}});
  EXPECT_EQ(kill.at("isError"), true) << json::serialize(kill);
  auto shell = rpc(
      "tools/call",
      {{"name", "run_shell"}, {"arguments", json::object{{"sandboxId", sa}, {"command", "id"}}}});
  EXPECT_EQ(shell.at("isError"), true) << json::serialize(shell);
  EXPECT_NE(json::serialize(shell).find("not found"), std::string::npos) << json::serialize(shell);
  // A's sandbox is still there for A.
  EXPECT_EQ(api(key(), bhttp::verb::get, "/sandboxes/" + sa).result_int(), 200);
  // The fixture's teardown kills through the default team's key: B kills its own.
  EXPECT_EQ(api(b, bhttp::verb::delete_, "/sandboxes/" + sb).result_int(), 204);
}

}  // namespace
}  // namespace abx::e2e
