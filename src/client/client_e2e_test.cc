// libabx against the real in-sandbox binaries on loopback, in direct mode (Sandbox::attach with
// server_url / sandbox_url): abx-server with the demo module, and a standalone abx-envd.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "abx/client/sandbox.h"
#include "abx/testing/server.h"
#include "abx/testing/temp_dir.h"

namespace abx::client {
namespace {

namespace json = boost::json;
constexpr const char* kToken = "client-e2e-token-0123456789";

void write_template(const std::filesystem::path& home, const std::string& yaml) {
  std::filesystem::create_directories(home / "templates" / "tpl");
  std::ofstream(home / "templates" / "tpl" / "template.yaml") << yaml;
}

constexpr const char* kTemplateYaml = R"(id: tpl
description: test template
capabilities: [shell, files, code]
custom_commands:
  greet:
    description: Greet someone.
    command: "printf '%s|%s\n' {name} {times}"
    args:
      - {name: name, type: string, required: true, description: who}
      - {name: times, type: integer, default: 1}
)";

class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.start(kToken, {"--log-level", "warn"}));
    write_template(home_.path(), kTemplateYaml);
    cfg_.server_url = server_.url();
    cfg_.sandbox_url = "http://127.0.0.1:1";  // nothing listens: envd is not part of this fixture
    cfg_.api_url = "http://127.0.0.1:1";
    cfg_.home = home_.path();
    cfg_.max_retries = 0;
  }

  Sandbox sandbox(std::string token = kToken, std::string tpl = "tpl") {
    SandboxInfo info;
    info.sandbox_id = "sbxtest";
    info.template_id = std::move(tpl);
    info.envd_access_token = std::move(token);
    return Sandbox::attach(info, cfg_);
  }

  abx::testing::CommandServerProcess server_;
  abx::testing::TempDir home_{"abx-client"};
  ConnectionConfig cfg_;
};

TEST_F(ServerFixture, CallReturnsTheResult) {
  auto s = sandbox();
  auto r = s.server().call("demo", {{"x", 42}, {"y", "world"}});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, json::value("42: world"));
  auto raw = s.server().call_raw("add", {{"a", 40}, {"b", 2}});
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(json::serialize(*raw), R"({"result":42})");
  // The pooled connection is reused across calls; many in a row must all succeed.
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(s.server().call("is_even", {{"n", i}}).ok());
}

TEST_F(ServerFixture, FailuresCarryTheServersErrorAndType) {
  auto s = sandbox();
  auto r = s.server().call("divide", {{"a", 1}, {"b", 0}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInternal);
  EXPECT_EQ(r.error().message(), "division by zero");
  EXPECT_EQ(r.error().type(), "std::domain_error");
  auto bad = s.server().call("demo", {{"x", "42"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().type(), "InvalidArgument");
  EXPECT_EQ(s.server().call("nope").error().code(), ErrorCode::kNotFound);
}

TEST_F(ServerFixture, ListIsTypedAndABadTokenFailsDiscoveryAndExecutionAlike) {
  auto list = sandbox().server().list();
  ASSERT_TRUE(list.ok());
  const CommandEntry* demo = nullptr;
  for (const auto& e : *list) {
    if (e.name == "demo") demo = &e;
  }
  ASSERT_NE(demo, nullptr);
  EXPECT_EQ(demo->source, CommandSource::kRemote);
  ASSERT_EQ(demo->args.size(), 2u);
  EXPECT_EQ(demo->args[0].type, "integer");
  EXPECT_TRUE(demo->args[0].required);
  EXPECT_EQ(demo->args[1].default_value, json::value("hello"));

  auto bad = sandbox("wrong-token");
  EXPECT_EQ(bad.server().list().error().code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(bad.server().call("demo", {{"x", 1}}).error().code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(bad.list_commands().error().code(), ErrorCode::kUnauthenticated);
}

TEST_F(ServerFixture, ScopedTokenSeesAndRunsOnlyItsCommands) {
  auto full = sandbox();
  auto tok = full.scoped_token({"demo"}, std::chrono::minutes(10));
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  auto scoped = full.with_access_token(*tok);
  auto list = scoped.server().list();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "demo");
  EXPECT_TRUE(scoped.server().call("demo", {{"x", 1}}).ok());
  EXPECT_EQ(scoped.server().call("add", {{"a", 1}, {"b", 2}}).error().code(), ErrorCode::kNotFound);
  // A scoped handle cannot mint itself a broader token locally; without a platform it fails.
  EXPECT_FALSE(scoped.scoped_token({"add"}, std::chrono::minutes(1)).ok());
  EXPECT_FALSE(full.scoped_token({"demo"}, std::chrono::seconds(0)).ok());
}

TEST_F(ServerFixture, DiscoveryMergesLocalYamlModuleAndRemote) {
  auto s = sandbox();
  auto all = s.list_commands({.modules = {ABX_DEMO_MODULE}});
  ASSERT_TRUE(all.ok()) << all.error().to_string();
  std::map<std::string, CommandSource> by_name;
  for (const auto& e : *all) by_name[e.name] = e.source;
  EXPECT_EQ(by_name.at("greet"), CommandSource::kYaml);
  EXPECT_EQ(by_name.at("demo"), CommandSource::kRemote);  // remote wins over the module's copy
  EXPECT_EQ(by_name.at("add"), CommandSource::kRemote);
  // (Every argument's type is one of the four: ArgSpec::type is an enum, parsed strictly.)
  // Layer 1 alone: no network at all.
  auto local = discover_local(cfg_, "tpl", {ABX_DEMO_MODULE});
  ASSERT_TRUE(local.ok()) << local.error().to_string();
  std::map<std::string, CommandEntry> l;
  for (const auto& e : *local) l[e.name] = e;
  EXPECT_EQ(l.at("greet").source, CommandSource::kYaml);
  EXPECT_EQ(l.at("greet").args.at(1).type, "integer");
  EXPECT_EQ(l.at("demo").source, CommandSource::kRegistered);
  EXPECT_EQ(l.at("demo").args.at(0).type, "integer");
  EXPECT_EQ(discover_local(cfg_, "missing", {}).error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(discover_local(cfg_, "", {"/nonexistent/lib.so"}).ok());
}

TEST_F(ServerFixture, RemoteDiscoveryFailureWithoutAuthProblemsFallsBackToLocal) {
  cfg_.server_url = "http://127.0.0.1:1";  // no command server
  auto all = sandbox().list_commands();
  ASSERT_TRUE(all.ok()) << all.error().to_string();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].name, "greet");
}

TEST_F(ServerFixture, CapabilitiesComeFromTheLocalTemplateAndGateCallsClientSide) {
  std::ofstream(home_ / "templates" / "tpl" / "template.yaml")
      << "id: tpl\ncapabilities: [shell]\n";
  auto s = sandbox();
  auto caps = s.capabilities();
  ASSERT_TRUE(caps.ok());
  EXPECT_EQ(*caps, std::set<Capability>{Capability::kShell});
  auto r = s.files().read("/etc/hostname");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(r.error().message().find("'files'"), std::string::npos) << r.error().message();
  EXPECT_NE(s.run_code("print(1)", Language::kPython).error().message().find("'code'"),
            std::string::npos);
  EXPECT_NE(s.get_host(8080).error().message().find("'ports'"), std::string::npos);
  // The built-in default set when neither the local catalogue nor the platform knows the id.
  auto unknown = sandbox(kToken, "no-such-template").capabilities();
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(*unknown, default_capabilities());
}

#ifdef ABX_ENVD_BIN
class EnvdFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    envd_ = std::make_unique<abx::testing::ChildProcess>(
        std::vector<std::string>{ABX_ENVD_BIN, "--port", "0", "--host", "127.0.0.1", "--log-level",
                                 "warn", "--default-user", "root"},
        std::vector<std::string>{std::string("ABX_ACCESS_TOKEN=") + kToken});
    ASSERT_TRUE(envd_->started());
    auto port = envd_->wait_listening();
    ASSERT_TRUE(port.has_value());
    write_template(home_.path(), kTemplateYaml);
    cfg_.sandbox_url = "http://127.0.0.1:" + std::to_string(*port);
    cfg_.server_url = "http://127.0.0.1:1";
    cfg_.api_url = "http://127.0.0.1:1";
    cfg_.home = home_.path();
    cfg_.max_retries = 0;
    SandboxInfo info;
    info.sandbox_id = "sbxenvd";
    info.template_id = "tpl";
    info.envd_access_token = kToken;
    sbx_ = std::make_unique<Sandbox>(Sandbox::attach(info, cfg_));
  }
  // commands.run uses a login shell (bash -l, as the E2B SDKs do). HOME points at the test's
  // own directory so the host user's profile (pyenv hooks and the like) stays out of the test.
  CommandOptions opts() const {
    CommandOptions o;
    o.envs["HOME"] = work_.string();
    return o;
  }
  std::unique_ptr<abx::testing::ChildProcess> envd_;
  abx::testing::TempDir home_{"abx-client"}, work_{"abx-client-work"};
  ConnectionConfig cfg_;
  std::unique_ptr<Sandbox> sbx_;
};

TEST_F(EnvdFixture, RunStreamsOutputAndReportsTheExitCode) {
  std::string streamed;
  std::mutex mu;
  CommandOptions o = opts();
  o.on_stdout = [&](std::string_view d) {
    std::lock_guard lk(mu);
    streamed.append(d);
  };
  o.envs["GREETING"] = "hi there";
  o.cwd = work_.string();
  auto r = sbx_->commands().run("echo \"$GREETING\"; pwd; echo err >&2; exit 3", o);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stdout_data, "hi there\n" + work_.string() + "\n");
  EXPECT_EQ(streamed, r->stdout_data);
  EXPECT_EQ(r->stderr_data, "err\n");
  auto ok = sbx_->commands().run("true", opts());
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->exit_code, 0);
}

TEST_F(EnvdFixture, BackgroundHandleTakesStdinAndCanBeKilled) {
  CommandOptions o = opts();
  o.stdin = true;
  auto h = sbx_->commands().start("cat", o);
  ASSERT_TRUE(h.ok()) << h.error().to_string();
  EXPECT_GT(h->pid(), 0u);
  ASSERT_TRUE(h->send_stdin("line one\n").ok());
  ASSERT_TRUE(h->close_stdin().ok());
  auto r = h->wait();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->stdout_data, "line one\n");

  auto sleeper = sbx_->commands().start("sleep 600", opts());
  ASSERT_TRUE(sleeper.ok());
  auto k = sleeper->kill();
  ASSERT_TRUE(k.ok()) << k.error().to_string();
  EXPECT_TRUE(*k);
  auto done = sleeper->wait();
  ASSERT_TRUE(done.ok()) << done.error().to_string();
  EXPECT_NE(done->exit_code, 0);
}

TEST_F(EnvdFixture, TimeoutEndsTheProcessWithDeadlineExceeded) {
  CommandOptions o = opts();
  o.timeout = std::chrono::milliseconds(300);
  auto r = sbx_->commands().run("sleep 600", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kDeadlineExceeded) << r.error().to_string();
}

TEST_F(EnvdFixture, FilesRoundTrip) {
  auto f = sbx_->files();
  std::string dir = (work_ / "d").string();
  auto made = f.make_dir(dir);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  EXPECT_TRUE(*made);
  EXPECT_FALSE(*f.make_dir(dir));
  std::string data("bytes\0with nul\n", 15);
  auto w = f.write(dir + "/a.bin", data);
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  auto r = f.read(dir + "/a.bin");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, data);
  auto st = f.stat(dir + "/a.bin");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, "file");
  EXPECT_EQ(st->size, 15);
  auto mv = f.rename(dir + "/a.bin", dir + "/b.bin");
  ASSERT_TRUE(mv.ok()) << mv.error().to_string();
  auto ls = f.list(dir);
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls->size(), 1u);
  EXPECT_EQ((*ls)[0].name, "b.bin");
  ASSERT_TRUE(f.remove(dir + "/b.bin").ok());
  EXPECT_FALSE(*f.exists(dir + "/b.bin"));
  EXPECT_EQ(f.read(dir + "/b.bin").error().code(), ErrorCode::kNotFound);
}

TEST_F(EnvdFixture, WatchReportsChanges) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<FilesystemEvent> events;
  auto h = sbx_->files().watch(work_.string(), [&](const FilesystemEvent& e) {
    std::lock_guard lk(mu);
    events.push_back(e);
    cv.notify_all();
  });
  ASSERT_TRUE(h.ok()) << h.error().to_string();
  ASSERT_TRUE(sbx_->files().write((work_ / "new.txt").string(), "x").ok());
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] {
    for (const auto& e : events) {
      if (e.name == "new.txt") return true;
    }
    return false;
  }));
}

TEST_F(EnvdFixture, CustomCommandsQuoteHostileValues) {
  std::string marker = (work_ / "pwned").string();
  for (const std::string& hostile : std::vector<std::string>{
           std::string("$(touch ") + marker + ")", "`touch " + marker + "`",
           "'; touch " + marker + "; '", "a\nb", "x\"y", "--help", "*", "${IFS}"}) {
    auto r = sbx_->run("greet", {{"name", hostile}, {"times", 2}}, opts());
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->exit_code, 0);
    EXPECT_EQ(r->stdout_data, hostile + "|2\n");
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_EQ(sbx_->run("greet", {{"times", 1}}).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(sbx_->run("greet", {{"name", "a"}, {"times", "2"}}).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(sbx_->run("greet", {{"name", "a"}, {"extra", 1}}).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(sbx_->run("nope", {}).error().code(), ErrorCode::kNotFound);
}

TEST_F(EnvdFixture, RunCodeUsesTheInterpreter) {
  auto r = sbx_->run_code("echo $((6*7))", Language::kBash);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->stdout_data, "42\n");
  if (std::filesystem::exists("/usr/bin/python3")) {
    auto p = sbx_->run_code("print(6*7)", Language::kPython);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    EXPECT_EQ(p->stdout_data, "42\n");
  }
}

TEST_F(EnvdFixture, WrongTokenIsUnauthenticated) {
  auto bad = sbx_->with_access_token("wrong");
  EXPECT_EQ(bad.commands().run("true", opts()).error().code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(bad.files().list("/").error().code(), ErrorCode::kUnauthenticated);
}
#endif

}  // namespace
}  // namespace abx::client
