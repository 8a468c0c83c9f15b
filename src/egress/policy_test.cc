#include "abx/egress/policy.h"

#include <gtest/gtest.h>

namespace abx::egress {
namespace {

std::uint32_t ip(std::string_view s) { return *parse_ipv4(s); }

TEST(Cidr, ParsesAddressesAndNetworks) {
  EXPECT_EQ(parse_cidr("1.2.3.4")->str(), "1.2.3.4");
  EXPECT_EQ(parse_cidr("10.0.0.0/8")->str(), "10.0.0.0/8");
  EXPECT_EQ(parse_cidr("0.0.0.0/0")->prefix, 0);
  EXPECT_TRUE(parse_cidr("10.0.0.0/8")->contains(ip("10.255.1.2")));
  EXPECT_FALSE(parse_cidr("10.0.0.0/8")->contains(ip("11.0.0.1")));
  EXPECT_TRUE(parse_cidr("0.0.0.0/0")->contains(ip("255.255.255.255")));
}

TEST(Cidr, RejectsMalformedWithAReason) {
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.4/33", "1.2.3.4/",
                          "01.2.3.4", "1.2.3.4/8x", "a.b.c.d", "1..2.3", " 1.2.3.4"})
    EXPECT_FALSE(parse_cidr(bad)) << bad;
  EXPECT_NE(parse_cidr("10.0.0.1/8").error().message().find("10.0.0.0/8"), std::string::npos);
  EXPECT_NE(parse_cidr("::1").error().message().find("IPv6"), std::string::npos);
}

TEST(Domain, ExactAndWildcard) {
  auto d = *parse_domain("Example.COM.");
  EXPECT_TRUE(d.matches("example.com"));
  EXPECT_TRUE(d.matches("EXAMPLE.com."));
  EXPECT_FALSE(d.matches("www.example.com"));
  auto w = *parse_domain("*.example.com");
  EXPECT_TRUE(w.matches("a.b.example.com"));
  EXPECT_FALSE(w.matches("example.com"));
  EXPECT_FALSE(w.matches("badexample.com"));
  EXPECT_EQ(w.str(), "*.example.com");
  const std::string long_name(300, 'a');
  for (std::string_view bad :
       {std::string_view(""), std::string_view("com"), std::string_view("exa mple.com"),
        std::string_view("*example.com"), std::string_view("a.*.com"), std::string_view("-a.com"),
        std::string_view("a..com"), std::string_view("*."), std::string_view(long_name)})
    EXPECT_FALSE(parse_domain(bad)) << bad;
}

TEST(Rules, E2bOrderAllowWinsOverDeny) {
  auto r = *parse_rules({"8.8.8.0/24", "*.example.com"}, {"0.0.0.0/0"}, true);
  EXPECT_EQ(decide(r, ip("8.8.8.8"), std::nullopt), Verdict::kAllow);
  EXPECT_EQ(decide(r, ip("1.1.1.1"), std::nullopt), Verdict::kDeny);
  EXPECT_EQ(decide(r, ip("1.1.1.1"), "api.example.com"), Verdict::kAllow);
  EXPECT_EQ(decide(r, ip("1.1.1.1"), "example.org"), Verdict::kDeny);
  EXPECT_TRUE(r.filters_domains());
  auto open = *parse_rules({}, {}, true);
  EXPECT_EQ(decide(open, ip("1.1.1.1"), std::nullopt), Verdict::kAllow);
  auto some = *parse_rules({}, {"1.1.1.0/24"}, true);
  EXPECT_EQ(decide(some, ip("1.1.1.1"), std::nullopt), Verdict::kDeny);
  EXPECT_EQ(decide(some, ip("1.1.2.1"), std::nullopt), Verdict::kAllow);
}

TEST(Rules, NoInternetIsDenyAll) {
  auto r = *parse_rules({}, {}, false);
  EXPECT_EQ(r.deny_out(), std::vector<std::string>{"0.0.0.0/0"});
  EXPECT_EQ(decide(r, ip("198.18.0.10"), std::nullopt), Verdict::kDeny);
  EXPECT_FALSE(may_resolve(r, "example.com"));
}

TEST(Rules, DnsAnsweredOnlyForAllowedNamesUnderDenyAll) {
  auto r = *parse_rules({"example.com"}, {"0.0.0.0/0"}, true);
  EXPECT_TRUE(may_resolve(r, "example.com"));
  EXPECT_FALSE(may_resolve(r, "secret-data.attacker.net"));
  auto partial = *parse_rules({}, {"10.0.0.0/8"}, true);
  EXPECT_TRUE(may_resolve(partial, "anything.net"));
}

TEST(Rules, BadEntriesNameListIndexAndReason) {
  auto r = parse_rules({"1.2.3.4", "10.0.0.0/33"}, {}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("allowOut[1]"), std::string::npos) << r.error().message();
  auto d = parse_rules({}, {"example.com"}, true);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("denyOut[0]"), std::string::npos);
  EXPECT_NE(d.error().message().find("not domains"), std::string::npos);
  std::vector<std::string> many(kMaxRules + 1, "1.2.3.4");
  EXPECT_FALSE(parse_rules(many, {}, true));
  EXPECT_FALSE(parse_rules({"exa mple.com"}, {}, true));
  EXPECT_FALSE(parse_rules({"fe80::1"}, {}, true));
}

TEST(Blocked, DefaultsHoldLinkLocalAndLoopback) {
  auto b = default_blocked({*parse_cidr("10.200.0.0/19")});
  EXPECT_TRUE(b.contains(ip("169.254.169.254")));
  EXPECT_TRUE(b.contains(ip("127.0.0.1")));
  EXPECT_TRUE(b.contains(ip("10.200.3.4")));
  EXPECT_FALSE(b.contains(ip("198.18.0.10")));
}

}  // namespace
}  // namespace abx::egress
