#include "abx/egress/h2_request.h"

#include <gtest/gtest.h>

namespace abx::egress {
namespace {

std::vector<Header> request(std::string authority, std::vector<Header> more = {}) {
  std::vector<Header> f = {{":method", "GET"}, {":scheme", "https"}, {":path", "/x"}};
  if (!authority.empty()) f.emplace_back(":authority", authority);
  for (auto& h : more) f.push_back(std::move(h));
  return f;
}

TEST(H2Request, AuthorityHostName) {
  EXPECT_EQ(authority_host_name("Web.Example.COM"), "web.example.com");
  EXPECT_EQ(authority_host_name("web.example.com:443"), "web.example.com");
  EXPECT_EQ(authority_host_name("web.example.com.:8443"), "web.example.com");
  EXPECT_EQ(authority_host_name("web.example.com:"), "web.example.com:");
  EXPECT_EQ(authority_host_name("web.example.com:44x"), "web.example.com:44x");
  EXPECT_EQ(authority_host_name("user@web.example.com"), "user@web.example.com");
  EXPECT_EQ(authority_host_name("[::1]:443"), "[::1]:443");
}

TEST(H2Request, TheConnectionsNameIsForwarded) {
  std::string host;
  EXPECT_FALSE(check_h2_request(request("web.abx.test"), "web.abx.test", &host));
  EXPECT_EQ(host, "web.abx.test");
  EXPECT_FALSE(check_h2_request(request("WEB.abx.test:443"), "web.abx.test", &host));
  // `host` instead of :authority (RFC 9113 §8.3.1), or both agreeing.
  EXPECT_FALSE(check_h2_request(request("", {{"host", "web.abx.test"}}), "web.abx.test", &host));
  EXPECT_EQ(host, "web.abx.test");
  EXPECT_FALSE(check_h2_request(request("web.abx.test", {{"host", "web.abx.test:443"}}),
                                "web.abx.test", &host));
  auto star = request("web.abx.test");
  star[0].second = "OPTIONS";
  star[2].second = "*";
  EXPECT_FALSE(check_h2_request(star, "web.abx.test", &host));
}

TEST(H2Request, AnotherNameIs421) {
  std::string host;
  auto r = check_h2_request(request("other.abx.test"), "web.abx.test", &host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 421);
  EXPECT_NE(r->reason.find("Host differs"), std::string::npos);
  EXPECT_EQ(host, "other.abx.test");
  // A forged host beside the right :authority, or a second host field: each is checked.
  r = check_h2_request(request("web.abx.test", {{"host", "other.abx.test"}}), "web.abx.test",
                       &host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 421);
  EXPECT_EQ(host, "other.abx.test");
  r = check_h2_request(request("", {{"host", "web.abx.test"}, {"Host", "evil.test"}}),
                       "web.abx.test", &host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 421);
  // The apex or a sibling of a wildcard's name is another name; so is userinfo.
  EXPECT_TRUE(check_h2_request(request("abx.test"), "web.abx.test", &host));
  EXPECT_TRUE(check_h2_request(request("u@web.abx.test"), "web.abx.test", &host));
  // No name at all.
  r = check_h2_request(request(""), "web.abx.test", &host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 421);
  EXPECT_EQ(host, "");
}

TEST(H2Request, ConnectAndBadPathsAreRefused) {
  std::string host;
  std::vector<Header> connect = {{":method", "CONNECT"}, {":authority", "web.abx.test:443"}};
  auto r = check_h2_request(connect, "web.abx.test", &host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  std::vector<Header> ws = {{":method", "CONNECT"},
                            {":protocol", "websocket"},
                            {":scheme", "https"},
                            {":path", "/chat"},
                            {":authority", "web.abx.test"}};
  r = check_h2_request(ws, "web.abx.test", &host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  auto abs = request("web.abx.test");
  abs[2].second = "https://other.test/";
  r = check_h2_request(abs, "web.abx.test", &host);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  abs[2].second = "";
  EXPECT_EQ(check_h2_request(abs, "web.abx.test", &host)->status, 400);
}

TEST(H2Request, RuleHeadersReplaceCaseInsensitively) {
  auto f = request("web.abx.test", {{"authorization", "Bearer from-sandbox"},
                                    {"accept", "*/*"},
                                    {"x-key", "a"},
                                    {"x-key", "b"}});
  const std::size_t before = f.size();
  std::size_t first =
      apply_h2_headers(f, {{"Authorization", "Bearer rule"}, {"X-Key", "1"}, {"X-Key", "2"}});
  // The sandbox's authorization and both x-key fields went; the rule's two fields are last.
  ASSERT_EQ(f.size(), before - 3 + 2);
  EXPECT_EQ(first, f.size() - 2);
  EXPECT_EQ(f[first], (Header{"authorization", "Bearer rule"}));
  EXPECT_EQ(f[first + 1], (Header{"x-key", "2"}));  // a later one of the same name wins
  int auth = 0;
  for (const auto& [k, v] : f) {
    if (k == "authorization") ++auth;
    EXPECT_NE(v, "Bearer from-sandbox");
  }
  EXPECT_EQ(auth, 1);
  EXPECT_EQ(f[0].first, ":method");  // pseudo-headers stay first
  // No rule headers: nothing changes.
  auto g = request("web.abx.test");
  EXPECT_EQ(apply_h2_headers(g, {}), g.size());
  EXPECT_EQ(g, request("web.abx.test"));
}

}  // namespace
}  // namespace abx::egress
