#include "abx/egress/ruleset.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

namespace abx::egress {
namespace {

RulesetPlan plan() {
  RulesetPlan p;
  p.table = "abx_test";
  p.if_prefix = "abxt";
  p.sandbox_range = *parse_cidr("10.213.0.0/19");
  p.blocked = default_blocked({p.sandbox_range, *parse_cidr("192.168.1.5")}).nets;
  p.dns_port = 40053;
  p.proxy_port = 40080;
  p.log_group = 4242;
  p.sandboxes.push_back(
      {3, "abxt3", 0x0ad5000e,
       *parse_rules({"8.8.8.0/24", "*.example.com", "8.8.0.0/16"}, {"0.0.0.0/0"}, true)});
  p.sandboxes.push_back({4, "abxt4", 0x0ad50012, *parse_rules({}, {}, true)});
  return p;
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

TEST(Ruleset, ChainsForEachSandboxAndTheSharedHooks) {
  std::string s = render_ruleset(plan());
  EXPECT_TRUE(s.starts_with("table inet abx_test {}\ndelete table inet abx_test\n"));
  EXPECT_TRUE(contains(s, "iifname \"abxt3\" jump sb_3"));
  EXPECT_TRUE(contains(s, "iifname \"abxt4\" jump sb_4"));
  EXPECT_TRUE(contains(s, "iifname \"abxt3\" ip saddr != 10.213.0.14 drop"));
  EXPECT_TRUE(contains(s, "elements = { 8.8.8.0/24, 8.8.0.0/16 }"));
  // Only the sandbox that names domains goes through the proxy.
  EXPECT_TRUE(contains(
      s, "iifname { \"abxt3\" } meta nfproto ipv4 tcp dport { 80, 443 } redirect to :40080"));
  EXPECT_FALSE(contains(s, "\"abxt4\" } meta nfproto"));
  EXPECT_TRUE(contains(s, "redirect to :40053"));
  EXPECT_TRUE(contains(s, "log group 4242 prefix \"abx:3:deny\""));
  EXPECT_TRUE(contains(s, "169.254.0.0/16"));
  // The blocked set is consulted before the sandbox's allow list.
  std::string sb3 = s.substr(s.find("chain sb_3"));
  EXPECT_LT(sb3.find("@blocked"), sb3.find("@allow_3"));
  EXPECT_LT(sb3.find("@allow_3"), sb3.find("@deny_3"));
}

// `nft -c` parses and checks the script against the kernel without changing anything.
TEST(Ruleset, TheKernelAcceptsIt) {
  if (::geteuid() != 0 || ::access("/usr/sbin/nft", X_OK) != 0)
    GTEST_SKIP() << "needs root and nft";
  for (const std::string& script : {render_ruleset(plan()), render_delete("abx_test")}) {
    FILE* f = ::popen("/usr/sbin/nft -c -f - 2>&1", "w");
    ASSERT_NE(f, nullptr);
    ::fwrite(script.data(), 1, script.size(), f);
    int status = ::pclose(f);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << script;
  }
}

}  // namespace
}  // namespace abx::egress
