// The abx CLI: argument conversion as a unit, and the real binary as a subprocess against the
// real abx-server with the demo module (direct mode: --server-url + --access-token).
#include "cli.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <limits>

#include "abx/testing/server.h"
#include "abx/testing/temp_dir.h"

namespace abx::cli {
namespace {

namespace json = boost::json;
constexpr const char* kToken = "cli-test-token-0123456789";

client::CommandEntry demo_entry() {
  client::CommandEntry e;
  e.name = "demo";
  using client::ArgType;
  e.args = {{"x", ArgType::kInteger, true, nullptr, ""},
            {"y", ArgType::kString, false, "hello", ""},
            {"f", ArgType::kFloat, false, nullptr, ""},
            {"b", ArgType::kBoolean, false, nullptr, ""}};
  return e;
}

TEST(CliArgs, ConvertsEachValueToItsDeclaredType) {
  auto r = parse_command_args(demo_entry(), {"x=42", "y=a=b c", "f=-2.5", "b=true"});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(json::serialize(*r), R"({"x":42,"y":"a=b c","f":-2.5E0,"b":true})");
  auto s = parse_command_args(demo_entry(), {"x=-7", "y=", "b=0"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->at("y"), "");
  EXPECT_EQ(s->at("b"), false);
}

TEST(CliArgs, RejectsWithAMessageNamingTheArgument) {
  struct Case {
    std::vector<std::string> items;
    std::string needle;
  } cases[] = {
      {{"x=4.2"}, "argument 'x': expected an integer"},
      {{"x=abc"}, "argument 'x'"},
      {{"x=99999999999999999999"}, "argument 'x'"},
      {{"x=1", "f=nan"}, "argument 'f'"},
      {{"x=1", "f=1e999"}, "argument 'f'"},
      {{"x=1", "b=yes"}, "argument 'b': expected true or false"},
      {{"x=1", "z=1"}, "has no argument 'z'"},
      {{"x=1", "x=2"}, "given twice"},
      {{"x"}, "not NAME=VALUE"},
      {{"=1"}, "not NAME=VALUE"},
      {{"y=1"}, "needs argument 'x'"},
  };
  for (const auto& c : cases) {
    auto r = parse_command_args(demo_entry(), c.items);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find(c.needle), std::string::npos) << r.error().message();
  }
}

// A range the spec carries (an int32 parameter of a module introspected locally) is checked
// before anything is sent, with the server's message.
TEST(CliArgs, ChecksTheRangeTheSpecCarries) {
  client::CommandEntry e;
  e.name = "small";
  client::ArgSpec n{"n", client::ArgType::kInteger, true, nullptr, ""};
  n.minimum = -2;
  n.maximum = 10;
  e.args = {n};
  EXPECT_EQ(parse_command_args(e, {"n=10"})->at("n"), 10);
  EXPECT_EQ(parse_command_args(e, {"n=-2"})->at("n"), -2);
  for (const char* bad : {"n=11", "n=-3", "n=2147483648"}) {
    auto r = parse_command_args(e, {bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find("out of range"), std::string::npos) << r.error().message();
  }
}

TEST(CliArgs, Durations) {
  EXPECT_EQ(parse_duration("90")->count(), 90);
  EXPECT_EQ(parse_duration("5m")->count(), 300);
  EXPECT_EQ(parse_duration("1h")->count(), 3600);
  EXPECT_EQ(parse_duration("2d")->count(), 172800);
  for (const char* bad : {"", "h", "-1", "1x", "1.5h", "99999999999999999d"})
    EXPECT_FALSE(parse_duration(bad).ok()) << bad;
}

struct Run {
  int code;
  std::string out;
};

Run abx(std::vector<std::string> args) {
  args.insert(args.begin(), ABX_CLI_BIN);
  testing::ChildProcess p(args, {"ABX_API_URL=http://127.0.0.1:1", "ABX_MAX_RETRIES=0"});
  EXPECT_TRUE(p.started());
  std::string out = p.read_all();
  return {p.wait(std::chrono::seconds(60)), out};
}

class CliServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.start(kToken, {"--log-level", "warn"}));
    url_ = server_.url();
    std::filesystem::create_directories(home_ / "templates" / "tpl");
    std::ofstream(home_ / "templates" / "tpl" / "template.yaml") << R"(id: tpl
custom_commands:
  greet:
    description: Greet.
    command: "echo hello {name}"
    args: [{name: name, type: string, required: true}]
)";
  }

  std::vector<std::string> direct(std::vector<std::string> rest,
                                  const std::string& token = kToken) {
    std::vector<std::string> a = {"--server-url", url_,     "--access-token",
                                  token,          "--home", home_.string()};
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  }

  testing::CommandServerProcess server_;
  std::string url_;
  testing::TempDir home_{"abx-cli"};
};

TEST_F(CliServer, RunConvertsArgumentsAndPrintsTheServersResponse) {
  auto r = abx(direct({"run", "sbx", "demo", "-a", "x=42", "-a", "y=world", "--json"}));
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"result":"42: world"})"));
  auto human = abx(direct({"run", "sbx", "add", "-a", "a=40", "-a", "b=2"}));
  EXPECT_EQ(human.code, 0);
  EXPECT_EQ(human.out, "42\n");
  auto f = abx(direct({"run", "sbx", "scale", "-a", "value=2", "--json"}));
  EXPECT_EQ(f.code, 0);
  EXPECT_EQ(json::parse(f.out).at("result").to_number<double>(), 5.0);
}

// Numbers as JSON.stringify prints them: Boost.JSON's serialize wrote 0.25 as 2.5E-1.
TEST(CliJson, NumbersPrintAsJsonDoes) {
  EXPECT_EQ(json_text(json::parse(R"({"a":[0.25,5.0,-1.5,1e21,1e-7,3,-4,"x\"y",true,null]})")),
            R"({"a":[0.25,5,-1.5,1e+21,1e-7,3,-4,"x\"y",true,null]})");
  EXPECT_EQ(json_text(json::value(std::numeric_limits<double>::quiet_NaN())), "null");
}

TEST_F(CliServer, RunAndCommandsListPrintFloatsAsJsonDoes) {
  auto human = abx(direct({"run", "sbx", "divide", "-a", "a=1", "-a", "b=4"}));
  EXPECT_EQ(human.code, 0);
  EXPECT_EQ(human.out, "0.25\n");
  auto j = abx(direct({"run", "sbx", "divide", "-a", "a=1", "-a", "b=4", "--json"}));
  EXPECT_EQ(j.code, 0);
  EXPECT_EQ(j.out, "{\"result\":0.25}\n");
  auto table = abx(direct({"commands", "list", "sbx"}));
  EXPECT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("factor:float=2.5"), std::string::npos) << table.out;
}

TEST_F(CliServer, RunArgumentErrorsExitTwoBeforeReachingTheServer) {
  for (auto args : std::vector<std::vector<std::string>>{
           {"-a", "x=forty-two"}, {"-a", "x=1", "-a", "zzz=1"}, {"-a", "y=no-x"}, {"-a", "x"}}) {
    std::vector<std::string> a = {"run", "sbx", "demo", "--json"};
    a.insert(a.end(), args.begin(), args.end());
    auto r = abx(direct(a));
    EXPECT_EQ(r.code, kExitUsage) << args.back();
    auto j = json::parse(r.out);
    EXPECT_EQ(j.at("code"), "InvalidArgument");
  }
  EXPECT_EQ(abx(direct({"run", "sbx", "no_such_command"})).code, kExitNotFound);
  // The command threw: exit 1 with its error and type.
  auto d = abx(direct({"run", "sbx", "divide", "-a", "a=1", "-a", "b=0", "--json"}));
  EXPECT_EQ(d.code, kExitError);
  EXPECT_EQ(json::parse(d.out).at("type"), "std::domain_error");
  // A bad token fails discovery (and so the run) with the auth exit code.
  EXPECT_EQ(abx(direct({"run", "sbx", "demo", "-a", "x=1"}, "wrong")).code, kExitAuth);
}

TEST_F(CliServer, CommandsListLocalAndRemote) {
  auto local = abx({"--home", home_.string(), "commands", "list", "--template", "tpl", "--module",
                    ABX_DEMO_MODULE, "--json"});
  ASSERT_EQ(local.code, 0) << local.out;
  std::map<std::string, std::string> src;
  json::value local_json = json::parse(local.out);  // outlives the loop over its array
  for (const auto& c : local_json.at("commands").as_array())
    src[std::string(c.at("name").as_string())] = c.at("source").as_string();
  EXPECT_EQ(src["greet"], "yaml") << local.out;
  EXPECT_EQ(src["demo"], "registered");

  auto remote = abx(direct({"--template", "tpl", "commands", "list", "sbx", "--json"}));
  ASSERT_EQ(remote.code, 0) << remote.out;
  src.clear();
  json::value remote_json = json::parse(remote.out);
  for (const auto& c : remote_json.at("commands").as_array()) {
    src[std::string(c.at("name").as_string())] = c.at("source").as_string();
    for (const auto& a : c.at("args").as_array()) EXPECT_TRUE(a.at("type").is_string());
  }
  EXPECT_EQ(src["greet"], "yaml") << remote.out;
  EXPECT_EQ(src["demo"], "remote");

  auto table = abx(direct({"commands", "list", "sbx"}));
  EXPECT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("NAME"), std::string::npos);
  EXPECT_NE(table.out.find("x:integer y:string=\"hello\""), std::string::npos) << table.out;
  EXPECT_EQ(abx({"--home", home_.string(), "commands", "list", "--template", "nope"}).code,
            kExitNotFound);
  EXPECT_EQ(abx({"commands", "list"}).code, kExitUsage);
}

TEST_F(CliServer, TokenCreateMintsAScopedToken) {
  auto t = abx(direct({"token", "create", "sbx", "--command", "demo", "--ttl", "10m", "--json"}));
  ASSERT_EQ(t.code, 0);
  std::string tok(json::parse(t.out).at("token").as_string());
  EXPECT_EQ(abx(direct({"run", "sbx", "demo", "-a", "x=1"}, tok)).code, 0);
  // The scoped token does not even see `add`: discovery fails it as an unknown command.
  EXPECT_EQ(abx(direct({"run", "sbx", "add", "-a", "a=1", "-a", "b=2"}, tok)).code, kExitNotFound);
  auto list = abx(direct({"commands", "list", "sbx", "--json"}, tok));
  ASSERT_EQ(list.code, 0);
  EXPECT_EQ(json::parse(list.out).at("commands").as_array().size(), 1u);
  EXPECT_EQ(abx(direct({"token", "create", "sbx", "--command", "demo", "--ttl", "soon"})).code,
            kExitUsage);
}

TEST(CliBinary, EverySubcommandHasHelpAndBadFlagsExitTwo) {
  for (auto args : std::vector<std::vector<std::string>>{{"--help"},
                                                         {"sandbox", "--help"},
                                                         {"sandbox", "create", "--help"},
                                                         {"sandbox", "list", "--help"},
                                                         {"sandbox", "info", "--help"},
                                                         {"sandbox", "kill", "--help"},
                                                         {"sandbox", "timeout", "--help"},
                                                         {"sandbox", "connect", "--help"},
                                                         {"sandbox", "pause", "--help"},
                                                         {"sandbox", "resume", "--help"},
                                                         {"sandbox", "fork", "--help"},
                                                         {"sandbox", "snapshot", "--help"},
                                                         {"snapshot", "list", "--help"},
                                                         {"snapshot", "rm", "--help"},
                                                         {"exec", "--help"},
                                                         {"code", "--help"},
                                                         {"files", "cp", "--help"},
                                                         {"files", "read", "--help"},
                                                         {"files", "write", "--help"},
                                                         {"files", "ls", "--help"},
                                                         {"files", "rm", "--help"},
                                                         {"files", "mkdir", "--help"},
                                                         {"template", "list", "--help"},
                                                         {"template", "info", "--help"},
                                                         {"template", "build", "--help"},
                                                         {"template", "inspect", "--help"},
                                                         {"template", "rm", "--help"},
                                                         {"template", "push", "--help"},
                                                         {"commands", "list", "--help"},
                                                         {"run", "--help"},
                                                         {"token", "create", "--help"},
                                                         {"up", "--help"},
                                                         {"env", "--help"},
                                                         {"completion", "--help"}}) {
    auto r = abx(args);
    EXPECT_EQ(r.code, 0) << args[0];
    EXPECT_FALSE(r.out.empty()) << args[0];
  }
  EXPECT_EQ(abx({"--no-such-flag"}).code, kExitUsage);
  EXPECT_EQ(abx({"sandbox"}).code, kExitUsage);
  EXPECT_EQ(abx({"run", "only-id"}).code, kExitUsage);
  auto comp = abx({"completion", "bash"});
  EXPECT_EQ(comp.code, 0);
  EXPECT_NE(comp.out.find("complete -o default -F _abx abx"), std::string::npos);
}

// Only the command that argv names is built (app.cc); the others are a name, an alias and a help
// line. The top-level help still lists them all, a command is found after global options and
// their values and by its alias, and a misspelt one still gets its suggestion.
TEST(CliBinary, EveryCommandIsListedAndBuiltWhereverArgvNamesIt) {
  auto help = abx({"--help"});
  ASSERT_EQ(help.code, 0);
  ASSERT_EQ(top_commands().size(), 14u);
  for (const TopCommand* c : top_commands()) {
    EXPECT_NE(help.out.find(std::string("\n  ") + c->name), std::string::npos) << c->name;
    EXPECT_NE(help.out.find(std::string(c->help).substr(0, 30)), std::string::npos) << c->name;
  }
  // The value of --api-url is "run", not the command; --json takes none.
  auto list = abx({"--api-url", "run", "--json", "sbx", "list", "--help"});
  EXPECT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("Usage: abx sandbox list"), std::string::npos) << list.out;
  auto templates = abx({"--template=x", "templates", "ls", "--help"});
  EXPECT_EQ(templates.code, 0);
  EXPECT_NE(templates.out.find("--local"), std::string::npos) << templates.out;
  auto typo = abx({"--json", "sandbx", "list"});  // --json: the error is on stdout too
  EXPECT_EQ(typo.code, kExitUsage);
  EXPECT_NE(typo.out.find("did you mean 'sandbox'"), std::string::npos) << typo.out;
  // A command's own arguments are there when it is named: a missing one is a usage error.
  EXPECT_EQ(abx({"--json", "token", "create", "sbx"}).code, kExitUsage);
}

TEST(CliBinary, UnreachablePlatformExitsFive) {
  EXPECT_EQ(abx({"sandbox", "list"}).code, kExitUnavailable);
  EXPECT_EQ(abx({"exec", "sbx", "--", "true"}).code, kExitExecFailed);
  EXPECT_EQ(abx({"code", "sbx", "1"}).code, kExitUnavailable);
  // Flag combinations are checked before anything is sent.
  EXPECT_EQ(abx({"code", "sbx", "--contexts", "--new-context"}).code, kExitUsage);
  EXPECT_EQ(abx({"code", "sbx", "--context", "c", "--language", "python", "1"}).code, kExitUsage);
  EXPECT_EQ(abx({"code", "sbx", "--timeout", "soon", "1"}).code, kExitUsage);
}

TEST(CliBinary, PrintsItsVersion) {
  auto r = abx({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("abx 0.", 0), 0u) << r.out;
}

// A zero lifetime is refused before any request (the platform would reap the sandbox at once).
TEST(CliBinary, CreateWithZeroTimeoutIsAUsageError) {
  auto r = abx({"--json", "sandbox", "create", "--timeout", "0"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.out.find("--timeout must be at least 1s"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace abx::cli
