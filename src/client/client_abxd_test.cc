// libabx and the abx CLI against the real abxd with real sandboxes (namespaces, cgroups,
// abx-envd as init, the demo template's command server), all through one listener. Needs root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "abx/client/sandbox.h"
#include "abx/testing/abxd.h"

namespace abx::client {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

class ClientAbxd : public abx::testing::AbxdFixture {
 protected:
  ClientAbxd() : AbxdFixture("abx-client-abxd") {}
  // A template the client knows only through the platform (the client's own ABX_HOME is
  // empty): no `files` capability, one custom command.
  void prepare_home(const fs::path& home) override {
    fs::create_directories(home / "templates" / "slim");
    std::ofstream(home / "templates" / "slim" / "template.yaml") << R"(id: slim
capabilities: [shell]
custom_commands:
  greet:
    description: Greet.
    command: "printf 'hello %s\n' {name}"
    args: [{name: name, type: string, required: true}]
)";
    // A command server AND custom commands, known to the client only through the platform.
    fs::create_directories(home / "templates" / "both");
    std::ofstream(home / "templates" / "both" / "template.yaml") << R"(id: both
server:
  command: [/opt/abx/bin/abx-server, --module, /opt/abx/lib/libabx_demo_commands.so, --port, "49982"]
  port: 49982
custom_commands:
  greet:
    description: Greet.
    command: "printf 'hello %s\n' {name}"
    args: [{name: name, type: string, required: true}]
)";
  }
  void SetUp() override {
    AbxdFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fs::create_directories(tmp() / "client");
    cfg_.api_key = key();
    cfg_.api_url = abxd().url();
    cfg_.home = tmp() / "client";
  }
  Sandbox create(const std::string& tpl) {
    auto s = Sandbox::create(tpl, {.timeout = std::chrono::seconds(120)}, cfg_);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    if (!s.ok()) std::abort();
    return *s;
  }
  // The command server starts just after envd; discovery (a GET, retried) tells when it is up.
  void wait_for_command_server(Sandbox& s) {
    for (int i = 0; i < 100; ++i) {
      if (s.server().list().ok()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "the command server did not come up";
  }

  ConnectionConfig cfg_;
};

TEST_F(ClientAbxd, LifecycleCommandsFilesAndRegisteredCommands) {
  auto s = create("demo");
  EXPECT_FALSE(s.cached_info().envd_access_token.empty());
  auto listed = Sandbox::list({}, cfg_);
  ASSERT_TRUE(listed.ok()) << listed.error().to_string();
  bool found = false;
  for (const auto& i : *listed) found = found || i.sandbox_id == s.id();
  EXPECT_TRUE(found);
  auto info = s.info();
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  EXPECT_EQ(info->template_id, "demo");
  ASSERT_TRUE(s.set_timeout(std::chrono::seconds(300)).ok());

  auto r = s.commands().run("echo hi; echo err >&2; exit 4");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->exit_code, 4);
  EXPECT_EQ(r->stdout_data, "hi\n");
  EXPECT_EQ(r->stderr_data, "err\n");
  ASSERT_TRUE(s.files().write("/tmp/x/y.txt", "payload").ok());
  auto read = s.files().read("/tmp/x/y.txt");
  ASSERT_TRUE(read.ok()) << read.error().to_string();
  EXPECT_EQ(*read, "payload");

  wait_for_command_server(s);
  auto v = s.server().call("demo", {{"x", 42}, {"y", "world"}});
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  EXPECT_EQ(*v, json::value("42: world"));
  auto cmds = s.list_commands();
  ASSERT_TRUE(cmds.ok());
  EXPECT_FALSE(cmds->empty());
  for (const auto& c : *cmds) EXPECT_EQ(c.source, CommandSource::kRemote) << c.name;

  // A handle holding only a scoped token asks the platform (POST /sandboxes/{id}/tokens).
  auto scoped = s.scoped_token({"demo"}, std::chrono::minutes(5));
  ASSERT_TRUE(scoped.ok());
  auto narrow = s.with_access_token(*scoped);
  auto from_platform = narrow.scoped_token({"demo"}, std::chrono::minutes(5));
  ASSERT_TRUE(from_platform.ok()) << from_platform.error().to_string();
  auto via_platform = s.with_access_token(*from_platform);
  auto only = via_platform.server().list();
  ASSERT_TRUE(only.ok());
  ASSERT_EQ(only->size(), 1u);
  EXPECT_EQ(via_platform.server().call("add", {{"a", 1}, {"b", 2}}).error().code(),
            ErrorCode::kNotFound);

  auto killed = s.kill();
  ASSERT_TRUE(killed.ok());
  EXPECT_TRUE(*killed);
  EXPECT_FALSE(*Sandbox::kill(s.id(), cfg_));
  EXPECT_EQ(s.info().error().code(), ErrorCode::kNotFound);
}

TEST_F(ClientAbxd, PlatformTemplateGivesCapabilitiesAndCustomCommands) {
  auto s = create("slim");
  auto caps = s.capabilities();
  ASSERT_TRUE(caps.ok()) << caps.error().to_string();
  EXPECT_EQ(*caps, std::set<Capability>{Capability::kShell});
  auto f = s.files().read("/etc/hostname");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(f.error().message().find("'files'"), std::string::npos);
  // No command server in this template: discovery falls back to the platform's metadata.
  auto cmds = s.list_commands();
  ASSERT_TRUE(cmds.ok()) << cmds.error().to_string();
  ASSERT_EQ(cmds->size(), 1u);
  EXPECT_EQ((*cmds)[0].name, "greet");
  EXPECT_EQ((*cmds)[0].source, CommandSource::kYaml);
  auto r = s.run("greet", {{"name", "$(id) 'x'"}});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->stdout_data, "hello $(id) 'x'\n");
}

// One discovery answer: the live command server's commands AND the template's custom commands,
// as abxd's /mcp lists them, even when the client has no copy of the template.yaml.
TEST_F(ClientAbxd, DiscoveryMergesTheServerAndThePlatformTemplate) {
  auto s = create("both");
  wait_for_command_server(s);
  auto cmds = s.list_commands();
  ASSERT_TRUE(cmds.ok()) << cmds.error().to_string();
  std::map<std::string, CommandSource> by_name;
  for (const auto& c : *cmds) by_name[c.name] = c.source;
  EXPECT_EQ(by_name["demo"], CommandSource::kRemote);
  ASSERT_TRUE(by_name.count("greet")) << "the template's custom command is missing";
  EXPECT_EQ(by_name["greet"], CommandSource::kYaml);
  auto r = s.run("greet", {{"name", "both"}});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->stdout_data, "hello both\n");
}

TEST_F(ClientAbxd, BadKeyFailsEverything) {
  auto bad = cfg_;
  bad.api_key = "e2b_0000";
  EXPECT_EQ(Sandbox::list({}, bad).error().code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(Sandbox::create("demo", {}, bad).error().code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(Sandbox::connect("nosuchsandbox0000000", cfg_).error().code(), ErrorCode::kNotFound);
}

#ifdef ABX_CLI_BIN
struct CliRun {
  int code;
  std::string out;
};

TEST_F(ClientAbxd, CliAgainstAbxd) {
  auto abx = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {ABX_CLI_BIN, "--api-url", cfg_.api_url, "--api-key", cfg_.api_key,
                               "--home", cfg_.home.string()});
    abx::testing::ChildProcess p(args);
    std::string out = p.read_all();
    return CliRun{p.wait(std::chrono::seconds(60)), out};
  };
  auto c = abx({"sandbox", "create", "demo", "--timeout", "2m", "--json"});
  ASSERT_EQ(c.code, 0) << c.out;
  std::string id(json::parse(c.out).at("sandboxID").as_string());
  EXPECT_EQ(abx({"exec", id, "--", "sh", "-c", "echo out; exit 7"}).code, 7);
  auto e = abx({"exec", id, "--", "echo", "a b", "$HOME"});
  EXPECT_EQ(e.code, 0);
  EXPECT_EQ(e.out, "a b $HOME\n");
  auto ls = abx({"sandbox", "list", "--json"});
  ASSERT_EQ(ls.code, 0);
  EXPECT_NE(ls.out.find(id), std::string::npos);
  CliRun run{};
  for (int i = 0; i < 100; ++i) {  // until the command server is up
    run = abx({"run", id, "demo", "-a", "x=42", "-a", "y=world", "--json"});
    if (run.code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_EQ(json::parse(run.out), json::parse(R"({"result":"42: world"})"));
  EXPECT_EQ(abx({"run", id, "demo", "-a", "x=nope"}).code, 2);
  auto tok = abx({"token", "create", id, "--command", "demo", "--ttl", "1h"});
  EXPECT_EQ(tok.code, 0);
  EXPECT_EQ(tok.out.rfind("abxs1.", 0), 0u);
  auto w = abx({"files", "write", id, "/tmp/f.txt", "/etc/hostname"});
  EXPECT_EQ(w.code, 0) << w.out;
  EXPECT_EQ(abx({"files", "read", id, "/tmp/nope"}).code, 4);
  EXPECT_EQ(abx({"template", "info", "demo", "--json"}).code, 0);
  EXPECT_EQ(abx({"sandbox", "kill", id}).code, 0);
  EXPECT_EQ(abx({"sandbox", "info", id}).code, 4);
}
#endif

}  // namespace
}  // namespace abx::client
