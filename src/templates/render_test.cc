#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>

#include "abx/templates/template.h"
#include "abx/testing/temp_dir.h"

namespace abx::templates {
namespace {

namespace json = boost::json;

CustomCommand echo_command(std::string command = "printf '%s' {v}") {
  CustomCommand c;
  c.name = "echo";
  c.command = std::move(command);
  c.args.emplace_back("v", registry::ArgType::kString, true);
  return c;
}

// Runs a rendered command with /bin/sh -c (popen) and returns stdout and the exit status.
std::pair<std::string, int> run_sh(const std::string& cmd) {
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return {"<popen failed>", -1};
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int status = ::pclose(f);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(ShellQuote, Basics) {
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("abc"), "'abc'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

// The heart of it: hostile values go through a real /bin/sh and come out as the literal value,
// and nothing they try to run runs.
TEST(RenderCustomCommand, HostileValuesReachTheShellLiterally) {
  abx::testing::TempDir dir("abx-render");
  const std::string sentinel = (dir / "pwned").string();
  const std::vector<std::string> hostile = {
      "; rm -rf /nonexistent-abx; touch " + sentinel,
      "$(touch " + sentinel + ")",
      "`touch " + sentinel + "`",
      "'; touch " + sentinel + "; echo '",
      "\"; touch " + sentinel + "; echo \"",
      "'\\''; touch " + sentinel + " #",
      "a\nb\ntouch " + sentinel,
      "\r\n",
      "$HOME ${HOME} $((1+1)) $'\\x41'",
      "*",
      "~",
      "-n",
      "\\",
      "\\'",
      "''''",
      "{v}",
      "| touch " + sentinel + " &",
      "\xff\xfe not utf-8 \xc3\x28",
      "",
      std::string(30000, '\'')  // 120 KB once quoted,
  };
  CustomCommand c = echo_command();
  for (const auto& v : hostile) {
    auto r = render_custom_command(c, json::object{{"v", v}});
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    auto [out, status] = run_sh(*r);
    EXPECT_EQ(status, 0) << *r;
    EXPECT_EQ(out, v) << "rendered: " << r->substr(0, 200);
  }
  struct stat sb {};
  EXPECT_NE(::stat(sentinel.c_str(), &sb), 0) << "a hostile value ran a command";
}

TEST(RenderCustomCommand, TypesDefaultsAndBraces) {
  CustomCommand c;
  c.name = "mix";
  c.command = "printf '%s|' {s} {i} {f} {b} {opt} {d} {{lit}}";
  c.args.emplace_back("s", registry::ArgType::kString, true);
  c.args.emplace_back("i", registry::ArgType::kInteger, true);
  c.args.emplace_back("f", registry::ArgType::kFloat, true);
  c.args.emplace_back("b", registry::ArgType::kBoolean, true);
  c.args.emplace_back("opt", registry::ArgType::kString, false);
  c.args.emplace_back("d", registry::ArgType::kInteger, false, json::value(7));
  auto r =
      render_custom_command(c, json::object{{"s", "a b"}, {"i", -42}, {"f", 0.1}, {"b", true}});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, "printf '%s|' 'a b' -42 0.1 true '' 7 {lit}");
  EXPECT_EQ(run_sh(*r).first, "a b|-42|0.1|true||7|{lit}|");

  r = render_custom_command(c, json::object{{"s", "x"}, {"i", 1}, {"f", 3}, {"b", false}});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->find(" 3 false "), std::string::npos) << *r;  // an integer given for a float
  r = render_custom_command(c, json::object{{"s", "x"}, {"i", 1}, {"f", 1e300}, {"b", false}});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->find(" 1e+300 "), std::string::npos) << *r;
}

TEST(RenderCustomCommand, RejectsBadArguments) {
  CustomCommand c = echo_command();
  c.args.emplace_back("n", registry::ArgType::kInteger, false);
  struct Case {
    json::value args;
    std::string needle;
  } cases[] = {
      {json::object{}, "missing required argument 'v'"},
      {json::object{{"v", "x"}, {"w", 1}}, "unknown argument 'w'"},
      {json::object{{"v", 5}}, "argument 'v' must be a string"},
      {json::object{{"v", "x"}, {"n", "5"}}, "argument 'n' must be an integer"},
      {json::object{{"v", "x"}, {"n", 1.5}}, "argument 'n' must be an integer"},
      {json::object{{"v", "x"}, {"n", true}}, "argument 'n' must be an integer"},
      {json::object{{"v", nullptr}}, "argument 'v' must be a string"},
      {json::array{}, "must be a JSON object"},
      {json::object{{"v", std::string("a\0b", 3)}}, "NUL"},
  };
  for (const auto& tc : cases) {
    auto r = render_custom_command(c, tc.args);
    ASSERT_FALSE(r.ok()) << json::serialize(tc.args);
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find(tc.needle), std::string::npos) << r.error().message();
  }
  auto r = render_custom_command(c, json::object{{"v", std::string(200 * 1024, 'x')}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kPayloadTooLarge);
}

TEST(RenderCustomCommand, RefusesUnsafeTemplatesEvenWhenBuiltByHand) {
  for (const char* t : {"echo '{v}'", "echo \"{v}\"", "echo `{v}`", "# {v}", "echo \\{v}",
                        "echo ${v}", "cat <<E\n{v}\nE", "echo {w}", "(( {v} ))"}) {
    CustomCommand c = echo_command(t);
    EXPECT_FALSE(validate_custom_command(c).ok()) << t;
    EXPECT_FALSE(render_custom_command(c, json::object{{"v", "x"}}).ok()) << t;
  }
}

}  // namespace
}  // namespace abx::templates
