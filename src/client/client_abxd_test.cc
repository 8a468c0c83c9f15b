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
#include "abx/testing/rootfs.h"

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
    // Images without bash (issue 38): busybox only, and musl with a program but no shell.
    std::string why;
    const fs::path bb = home / "rootfs" / "busybox", musl = home / "rootfs" / "musl";
    images_ =
        abx::testing::make_busybox_layer(bb, &why) && abx::testing::make_musl_layer(musl, &why);
    if (!images_) {
      images_skip_ = why;
      return;
    }
    std::ofstream(musl / "etc/passwd", std::ios::trunc)
        << "root:x:0:0:root:/root:/bin/hello\nuser:x:1000:1000:user:/home/user:/bin/hello\n";
    fs::create_directories(musl / "home/user");
    for (const auto& [name, dir] :
         std::initializer_list<std::pair<std::string, fs::path>>{{"busybox", bb}, {"musl", musl}}) {
      fs::create_directories(home / "templates" / name);
      std::ofstream(home / "templates" / name / "template.yaml")
          << "id: " << name << "\nrootfs: " << dir.string() << "\n";
    }
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
  bool images_ = false;
  std::string images_skip_;
};

// commands.run sends `/bin/bash -l -c CMD` as the e2b SDKs do: busybox's sh runs it where there
// is no bash; with no shell at all the error says what to do instead, and run_argv works.
TEST_F(ClientAbxd, CommandsRunInImagesWithoutBash) {
  if (!images_) GTEST_SKIP() << images_skip_;
  auto bb = create("busybox");
  auto r = bb.commands().run("test -e /bin/bash || echo no bash; echo $((6 * 7))");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->exit_code, 0) << r->stderr_data;
  EXPECT_EQ(r->stdout_data, "no bash\n42\n");
  EXPECT_TRUE(bb.kill().ok());

  auto musl = create("musl");
  auto line = musl.commands().run("hello");
  ASSERT_FALSE(line.ok());
  EXPECT_EQ(line.error().code(), ErrorCode::kFailedPrecondition) << line.error().to_string();
  EXPECT_NE(line.error().message().find("this image has no shell"), std::string::npos)
      << line.error().to_string();
  auto argv = musl.commands().run_argv({"/bin/hello"});
  ASSERT_TRUE(argv.ok()) << argv.error().to_string();
  EXPECT_EQ(argv->stdout_data, "hello from musl\n");
  EXPECT_TRUE(musl.kill().ok());
}

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

// The code interpreter (template code-interpreter: abx-interp on port 49999 behind abxd's
// proxy): state, streaming, errors, rich results, contexts, timeouts.
TEST_F(ClientAbxd, CodeInterpreterRunsStatefulCode) {
  auto s = create("code-interpreter");
  auto has = s.has_code_interpreter();
  ASSERT_TRUE(has.ok()) << has.error().to_string();
  EXPECT_TRUE(*has);
  auto code = s.code();

  // State persists; stdout streams through the callback; the last expression is the main result.
  ASSERT_TRUE(code.run("x = 41").ok());
  std::string streamed;
  RunCodeOptions o;
  o.on_stdout = [&](std::string_view d) { streamed += d; };
  auto ex = code.run("print('hello')\nx + 1", o);
  ASSERT_TRUE(ex.ok()) << ex.error().to_string();
  EXPECT_EQ(streamed, "hello\n");
  EXPECT_EQ(ex->stdout_text(), "hello\n");
  EXPECT_EQ(ex->text(), "42");
  EXPECT_FALSE(ex->error);
  EXPECT_TRUE(ex->execution_count.has_value());

  // An exception is data, not an Error.
  auto err = code.run("1 / 0");
  ASSERT_TRUE(err.ok()) << err.error().to_string();
  ASSERT_TRUE(err->error);
  EXPECT_EQ(err->error->name, "ZeroDivisionError");
  EXPECT_NE(err->error->traceback.find("ZeroDivisionError"), std::string::npos);

  // Env vars for one execution only.
  auto env = code.run("import os; os.environ.get('ABX_T', 'unset')", {.envs = {{"ABX_T", "set"}}});
  ASSERT_TRUE(env.ok()) << env.error().to_string();
  EXPECT_EQ(env->text(), "set");
  EXPECT_EQ(code.run("import os; os.environ.get('ABX_T', 'unset')")->text(), "unset");

  // A matplotlib figure arrives as a PNG result.
  auto fig = code.run("import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()");
  ASSERT_TRUE(fig.ok()) << fig.error().to_string();
  bool png = false;
  for (const auto& r : fig->results) png = png || r.png.rfind("iVBORw0KGgo", 0) == 0;
  EXPECT_TRUE(png) << json::serialize(to_json(*fig)).substr(0, 2000);

  // Unknown context: kNotFound with the interpreter's words.
  auto nf = code.run("1", {.context_id = "nosuchcontext"});
  ASSERT_FALSE(nf.ok());
  EXPECT_EQ(nf.error().code(), ErrorCode::kNotFound) << nf.error().to_string();
  auto both = code.run("1", {.context_id = "a", .language = "python"});
  EXPECT_EQ(both.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code.run("1", {.language = "cobol"}).error().code(), ErrorCode::kInvalidArgument);

  // Contexts: separate state, a cwd, restart clears, remove forgets.
  auto ctx = code.create_context({.cwd = "/tmp"});
  ASSERT_TRUE(ctx.ok()) << ctx.error().to_string();
  EXPECT_EQ(ctx->cwd, "/tmp");
  auto cwd = code.run("import os; os.getcwd()", {.context_id = ctx->id});
  ASSERT_TRUE(cwd.ok()) << cwd.error().to_string();
  EXPECT_EQ(cwd->text(), "/tmp");
  auto isolated = code.run("x", {.context_id = ctx->id});
  ASSERT_TRUE(isolated.ok());
  ASSERT_TRUE(isolated->error);
  EXPECT_EQ(isolated->error->name, "NameError");
  auto listed = code.list_contexts();
  ASSERT_TRUE(listed.ok()) << listed.error().to_string();
  bool found = false;
  for (const auto& c : *listed) found = found || c.id == ctx->id;
  EXPECT_TRUE(found);
  EXPECT_GE(listed->size(), 2u);  // the default context too
  ASSERT_TRUE(code.run("y = 1", {.context_id = ctx->id}).ok());
  ASSERT_TRUE(code.restart_context(ctx->id).ok());
  auto gone = code.run("y", {.context_id = ctx->id});
  ASSERT_TRUE(gone.ok());
  ASSERT_TRUE(gone->error);
  EXPECT_EQ(gone->error->name, "NameError");
  ASSERT_TRUE(code.remove_context(ctx->id).ok());
  EXPECT_EQ(code.run("1", {.context_id = ctx->id}).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(code.remove_context(ctx->id).error().code(), ErrorCode::kNotFound);

  // A timeout interrupts the code; the context keeps working and keeps its state.
  auto t0 = std::chrono::steady_clock::now();
  auto spin = code.run("while True: pass", {.timeout = std::chrono::seconds(2)});
  ASSERT_FALSE(spin.ok());
  EXPECT_EQ(spin.error().code(), ErrorCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  auto after = code.run("x + 2", {.timeout = std::chrono::seconds(30)});
  ASSERT_TRUE(after.ok()) << after.error().to_string();
  EXPECT_EQ(after->text(), "43");

  // run_code (Python) uses the default context: the same state, an error as exit code 1.
  auto rc = s.run_code("print(x)", Language::kPython);
  ASSERT_TRUE(rc.ok()) << rc.error().to_string();
  EXPECT_EQ(rc->exit_code, 0);
  EXPECT_EQ(rc->stdout_data, "41\n");
  auto rv = s.run_code("x * 2", Language::kPython);
  ASSERT_TRUE(rv.ok());
  EXPECT_EQ(rv->stdout_data, "82\n");
  auto rerr = s.run_code("raise ValueError('boom')", Language::kPython);
  ASSERT_TRUE(rerr.ok());
  EXPECT_EQ(rerr->exit_code, 1);
  EXPECT_EQ(rerr->error, "ValueError: boom");
  EXPECT_NE(rerr->stderr_data.find("boom"), std::string::npos);
  auto sh = s.run_code("echo $((6*7))", Language::kBash);
  ASSERT_TRUE(sh.ok()) << sh.error().to_string();
  EXPECT_EQ(sh->stdout_data, "42\n");
  EXPECT_TRUE(*s.kill());
}

TEST_F(ClientAbxd, RunCodeWithoutInterpreterIsOneShot) {
  auto s = create("base");
  auto has = s.has_code_interpreter();
  ASSERT_TRUE(has.ok()) << has.error().to_string();
  EXPECT_FALSE(*has);
  auto a = s.run_code("x = 1\nprint(x)", Language::kPython);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->stdout_data, "1\n");
  auto b = s.run_code("print(x)", Language::kPython);  // a fresh python3 -c: no state
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_NE(b->exit_code, 0);
  EXPECT_NE(b->stderr_data.find("NameError"), std::string::npos);
  // The interpreter API itself says the template has none.
  auto none = s.code().run("1");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code(), ErrorCode::kFailedPrecondition) << none.error().to_string();
  EXPECT_NE(none.error().message().find("code-interpreter"), std::string::npos);
  EXPECT_EQ(s.code().list_contexts().error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(*s.kill());
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

TEST_F(ClientAbxd, CliCode) {
  auto abx = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {ABX_CLI_BIN, "--api-url", cfg_.api_url, "--api-key", cfg_.api_key,
                               "--home", cfg_.home.string()});
    abx::testing::ChildProcess p(args);
    std::string out = p.read_all();
    return CliRun{p.wait(std::chrono::seconds(120)), out};
  };
  auto c = abx({"sandbox", "create", "code-interpreter", "--timeout", "3m", "--json"});
  ASSERT_EQ(c.code, 0) << c.out;
  std::string id(json::parse(c.out).at("sandboxID").as_string());

  EXPECT_EQ(abx({"code", id, "x = 20"}).code, 0);
  auto r = abx({"code", id, "print('out')\nx * 2 + 2"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "out\n42\n");  // stdout as it streams, the main result last
  auto err = abx({"code", id, "1 / 0"});
  EXPECT_EQ(err.code, 1);  // the code raised
  auto j = abx({"code", id, "x", "--json"});
  ASSERT_EQ(j.code, 0) << j.out;
  auto jv = json::parse(j.out);
  EXPECT_EQ(jv.at("results").at(0).at("text"), "20");
  EXPECT_TRUE(jv.at("error").is_null());
  auto env = abx({"code", id, "--env", "A=b", "import os; os.environ['A']"});
  EXPECT_EQ(env.out, "b\n");
  // Code from stdin.
  abx::testing::ChildProcess piped({"/bin/sh", "-c",
                                    "printf 'print(x + 1)\\n' | \"$0\" --api-url \"$1\" --api-key "
                                    "\"$2\" --home \"$3\" code \"$4\" -",
                                    ABX_CLI_BIN, cfg_.api_url, cfg_.api_key, cfg_.home.string(),
                                    id});
  std::string piped_out = piped.read_all();
  EXPECT_EQ(piped.wait(std::chrono::seconds(60)), 0);
  EXPECT_EQ(piped_out, "21\n");
  // PNG results saved as files.
  auto img_dir = tmp() / "imgs";
  auto fig = abx({"code", id, "--save-images", img_dir.string(),
                  "import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()"});
  EXPECT_EQ(fig.code, 0);
  std::ifstream png(img_dir / "result-1.png", std::ios::binary);
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  EXPECT_EQ(magic, "\x89PNG\r\n\x1a\n");

  // Contexts.
  auto nc = abx({"code", id, "--new-context", "--cwd", "/tmp", "--json"});
  ASSERT_EQ(nc.code, 0) << nc.out;
  std::string ctx(json::parse(nc.out).at("id").as_string());
  EXPECT_EQ(abx({"code", id, "--context", ctx, "import os; os.getcwd()"}).out, "/tmp\n");
  auto ls = abx({"code", id, "--contexts", "--json"});
  ASSERT_EQ(ls.code, 0);
  EXPECT_NE(ls.out.find(ctx), std::string::npos);
  EXPECT_EQ(abx({"code", id, "--restart-context", ctx}).code, 0);
  EXPECT_EQ(abx({"code", id, "--remove-context", ctx}).code, 0);
  EXPECT_EQ(abx({"code", id, "--context", ctx, "1"}).code, 4);  // not found
  EXPECT_EQ(abx({"code", id, "--contexts", "--new-context"}).code, 2);
  // Timeout: exit 5, and the default context still answers.
  EXPECT_EQ(abx({"code", id, "--timeout", "2s", "while True: pass"}).code, 5);
  EXPECT_EQ(abx({"code", id, "x"}).out, "20\n");
  EXPECT_EQ(abx({"sandbox", "kill", id}).code, 0);

  // A template without an interpreter: exit 6.
  auto b = abx({"sandbox", "create", "base", "--timeout", "2m", "--json"});
  ASSERT_EQ(b.code, 0) << b.out;
  std::string bid(json::parse(b.out).at("sandboxID").as_string());
  EXPECT_EQ(abx({"code", bid, "1"}).code, 6);
  EXPECT_EQ(abx({"sandbox", "kill", bid}).code, 0);
}
#endif

}  // namespace
}  // namespace abx::client
