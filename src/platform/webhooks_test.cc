// The webhook pieces that need no network: URL policy, body decoding, signatures (against
// values computed independently with Python's hashlib/hmac).
#include "webhooks.h"

#include <gtest/gtest.h>

namespace abx::platform {
namespace {

TEST(WebhookUrl, SchemeUserInfoSizeAndPrivateAddresses) {
  EXPECT_TRUE(check_webhook_url("https://hooks.example.com/abx?x=1", false).ok());
  EXPECT_TRUE(check_webhook_url("http://93.184.216.34:8080/", false).ok());
  for (const char* bad : {"ftp://example.com/", "example.com/x", "https://u:p@example.com/",
                          "https://example.com/#frag", "http://:80/", "http://example.com:0/"}) {
    EXPECT_EQ(check_webhook_url(bad, true).error().code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(check_webhook_url("https://example.com/" + std::string(2100, 'a'), true).ok());
  // Loopback, private, link-local, CGNAT, unspecified, multicast, ULA, v4-mapped: refused by
  // default, allowed with --webhook-allow-private.
  for (const char* inner :
       {"http://127.0.0.1:9/", "http://localhost/", "http://a.localhost/", "http://10.1.2.3/",
        "http://172.16.0.1/", "http://172.31.255.255/", "http://192.168.1.1/",
        "http://169.254.169.254/latest", "http://100.64.0.1/", "http://0.0.0.0/",
        "http://224.0.0.1/", "http://[::1]/", "http://[fd00::1]/", "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/", "http://[::]/"}) {
    EXPECT_EQ(check_webhook_url(inner, false).error().code(), ErrorCode::kInvalidArgument) << inner;
    EXPECT_TRUE(check_webhook_url(inner, true).ok()) << inner;
  }
  EXPECT_FALSE(is_private_address("172.32.0.1"));
  EXPECT_FALSE(is_private_address("2606:4700::1"));
  EXPECT_FALSE(is_private_address("not-an-address"));
}

TEST(WebhookBody, DecodesE2bShapeAndRefusesTheRest) {
  auto w = parse_webhook_body(
      R"({"name":"n","url":"https://example.com/h","enabled":false,)"
      R"("events":["sandbox.lifecycle.killed","sandbox.lifecycle.killed"],"signatureSecret":"s"})",
      true);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(*w->name, "n");
  EXPECT_FALSE(*w->enabled);
  ASSERT_EQ(w->events->size(), 1u);  // repeats collapse
  EXPECT_EQ(*w->secret, "s");
  // A PATCH may carry any subset; a create needs url and signatureSecret.
  auto patch = parse_webhook_body(R"({"enabled":true})", false);
  ASSERT_TRUE(patch.ok());
  EXPECT_FALSE(patch->url);
  EXPECT_FALSE(parse_webhook_body(R"({"enabled":true})", true).ok());
  EXPECT_FALSE(parse_webhook_body(R"({"url":"https://e.com/"})", true).ok());
  for (const char* bad : {"[]", "{", R"({"url":1})", R"({"enabled":"yes"})",
                          R"({"events":"sandbox.lifecycle.killed"})", R"({"events":["x"]})",
                          R"({"other":1})", R"({"url":"a","url":"b"})", R"({"url":""})"}) {
    EXPECT_EQ(parse_webhook_body(bad, false).error().code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(parse_webhook_body(std::string(20000, ' '), false).ok());
}

TEST(WebhookSignature, MatchesIndependentComputation) {
  EXPECT_EQ(e2b_signature("whsec", R"({"a":1})"), "nCaxwnEyil+DXqxpp5W9U44/iV+lHRul7m1FghuMnhg");
  EXPECT_EQ(abx_signature("whsec", 1700000000, R"({"a":1})"),
            "v1=8ad37ba156048ae0e0a5533c75cdf26fee88b07f93cb57ee4c80adb053012032");
  EXPECT_NE(abx_signature("whsec", 1700000001, R"({"a":1})"),
            abx_signature("whsec", 1700000000, R"({"a":1})"));
}

}  // namespace
}  // namespace abx::platform
