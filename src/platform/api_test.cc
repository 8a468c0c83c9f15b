// The control API's routing and request decoders, without a server: the matcher's captures and
// the canonical code (hence the status) each decoder gives a bad request.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "abx/base/json.h"
#include "api_routes.h"
#include "auth_limiter.h"
#include "console.h"
#include "network.h"

namespace abx::platform::api {
namespace {

namespace json = boost::json;

json::object obj(std::string_view text) { return parse_json_strict(text).value().as_object(); }

TEST(ApiRoutes, SplitPathDropsOneTrailingSlashOnly) {
  EXPECT_EQ(split_path("/sandboxes/"), (std::vector<std::string>{"sandboxes"}));
  EXPECT_EQ(split_path("/sandboxes//x"), (std::vector<std::string>{"sandboxes", "", "x"}));
  EXPECT_TRUE(split_path("/").empty());
}

TEST(ApiRoutes, MatchCapturesAndRejectsOtherShapes) {
  std::vector<std::string> params;
  auto parts = split_path("/sandboxes/abc/timeout");
  EXPECT_TRUE(match_pattern("/sandboxes/{id}/timeout", parts, params));
  EXPECT_EQ(params, (std::vector<std::string>{"abc"}));
  params.clear();
  EXPECT_FALSE(match_pattern("/sandboxes/{id}/pause", parts, params));
  EXPECT_FALSE(match_pattern("/sandboxes/{id}", parts, params));
  EXPECT_TRUE(params.empty());  // a failed match leaves no captures behind
}

TEST(ApiDecoders, CreateReadsEveryFieldAndRejectsBadOnesAsInvalidArgument) {
  auto cr = parse_create(obj(R"({"templateID":"demo","timeout":30,"metadata":{"k":"v"},)"
                             R"("envVars":{"A":"1"},"secure":false})"),
                         3600);
  ASSERT_TRUE(cr.ok()) << cr.error().to_string();
  EXPECT_EQ(cr->template_id, "demo");
  EXPECT_EQ(cr->timeout_seconds, 30);
  EXPECT_EQ(cr->metadata.at("k"), "v");
  EXPECT_EQ(cr->env_vars.at("A"), "1");
  EXPECT_FALSE(cr->secure);
  EXPECT_EQ(parse_create(obj("{}"), 3600)->template_id, "base");
  for (const char* bad : {R"({"templateID":1})", R"({"timeout":"x"})", R"({"timeout":3601})",
                          R"({"timeout":0})", R"({"timeout":null})", R"({"metadata":{"a":1}})",
                          R"({"envVars":[]})", R"({"secure":"yes"})"}) {
    auto r = parse_create(obj(bad), 3600);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ApiDecoders, CreateReadsE2BLifecycleFields) {
  auto none = parse_create(obj("{}"), 3600);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->pause_on_timeout);  // E2B's defaults: kill at the deadline, no auto-resume
  EXPECT_FALSE(none->auto_resume);
  // What the e2b SDK sends for lifecycle {onTimeout: 'pause', autoResume: true}.
  auto sdk = parse_create(obj(R"({"autoPause":true,"autoResume":{"enabled":true}})"), 3600);
  ASSERT_TRUE(sdk.ok()) << sdk.error().to_string();
  EXPECT_TRUE(sdk->pause_on_timeout);
  EXPECT_TRUE(sdk->auto_resume);
  auto lc = parse_create(obj(R"({"lifecycle":{"onTimeout":"pause","autoResume":false}})"), 3600);
  ASSERT_TRUE(lc.ok()) << lc.error().to_string();
  EXPECT_TRUE(lc->pause_on_timeout);
  EXPECT_FALSE(lc->auto_resume);
  auto kill = parse_create(obj(R"({"autoPause":false,"autoPauseMemory":true})"), 3600);
  ASSERT_TRUE(kill.ok());
  EXPECT_FALSE(kill->pause_on_timeout);
  EXPECT_TRUE(kill->pause_keeps_memory);
  EXPECT_TRUE(none->pause_keeps_memory);  // E2B's default: a pause keeps memory
  // What the e2b SDK sends for lifecycle {onTimeout: {action: 'pause', keepMemory: false}}: the
  // deadline's pause is filesystem-only.
  auto fs_only = parse_create(obj(R"({"autoPause":true,"autoPauseMemory":false})"), 3600);
  ASSERT_TRUE(fs_only.ok()) << fs_only.error().to_string();
  EXPECT_TRUE(fs_only->pause_on_timeout);
  EXPECT_FALSE(fs_only->pause_keeps_memory);
  EXPECT_FALSE(fs_only->auto_resume);
  // ... which traffic cannot wake: refused with autoResume, in either shape (E2B's API).
  for (const char* both :
       {R"({"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}})",
        R"({"autoPauseMemory":false,"lifecycle":{"onTimeout":"pause","autoResume":true}})"}) {
    auto r = parse_create(obj(both), 3600);
    ASSERT_FALSE(r.ok()) << both;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << both;
    EXPECT_NE(r.error().message().find("autoResume cannot be combined with autoPauseMemory false"),
              std::string::npos)
        << r.error().message();
  }
  for (const char* bad :
       {R"({"autoPause":"yes"})", R"({"autoResume":1})", R"({"autoResume":{"enabled":"on"}})",
        R"({"autoPauseMemory":0})", R"({"lifecycle":true})",
        R"({"lifecycle":{"onTimeout":"stop"}})", R"({"lifecycle":{"onTimeout":1}})",
        R"({"lifecycle":{"autoResume":"x"}})",
        // Refused, not ignored (issue 39): no MCP gateway, no egress proxy,
        // no TLS ingress.
        R"({"mcp":{"x":{}}})", R"({"network":{"egressProxy":{"address":"p:1080"}}})",
        R"({"network":{"httpsPorts":[3000]}})"}) {
    auto r = parse_create(obj(bad), 3600);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ApiDecoders, NetworkRulesAreParsedStoredWithValuesAndShownMasked) {
  auto cr = parse_create(obj(R"({"network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],
             "rules":{"API.example.com":[{"transform":{"headers":{"Authorization":"Bearer s3"}}}],
                      "other.example":[{"transform":{"headers":{"X-K":"v"}}}]}}})"),
                         3600);
  ASSERT_TRUE(cr.ok()) << cr.error().to_string();
  const SandboxNetworkSpec& net = *cr->network;
  ASSERT_EQ(net.transforms.hosts.size(), 2u);
  EXPECT_EQ(net.transforms.hosts[0].pattern.str(), "api.example.com");
  // other.example is denied: accepted, with a warning naming it.
  ASSERT_EQ(net.warnings.size(), 1u);
  EXPECT_NE(net.warnings[0].find("other.example"), std::string::npos);
  // GET shows the rules with masked values; the store keeps them, and reads them back.
  const std::string shown = json::serialize(net.to_json());
  EXPECT_EQ(shown.find("Bearer s3"), std::string::npos);
  EXPECT_NE(shown.find("Authorization"), std::string::npos);
  json::value stored{
      {"enabled", true}, {"allowInternetAccess", true}, {"network", net.to_json(true)}};
  auto back = SandboxNetworkSpec::from_json(stored);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->transforms.hosts.at(0).headers().at(0).second, "Bearer s3");

  // PUT: the rules given replace the old ones; omitted, they are cleared.
  auto upd = parse_network_update(
      obj(R"({"rules":{"*.example.org":[{"transform":{"headers":{"X":"1"}}}]}})"), net);
  ASSERT_TRUE(upd.ok()) << upd.error().to_string();
  ASSERT_EQ(upd->transforms.hosts.size(), 1u);
  EXPECT_EQ(upd->transforms.hosts[0].pattern.str(), "*.example.org");
  EXPECT_TRUE(upd->warnings.empty());
  EXPECT_TRUE(parse_network_update(obj(R"({"allowOut":[]})"), net)->transforms.empty());

  // Bad rules are a 400 naming the field, on create and on update.
  auto bad = parse_create(obj(R"({"network":{"rules":{"*":[]}}})"), 3600);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message().find(R"(network.rules["*"])"), std::string::npos);
  auto crlf = parse_network_update(
      obj(R"({"rules":{"a.com":[{"transform":{"headers":{"X":"a\r\nB: c"}}}]}})"), net);
  ASSERT_FALSE(crlf.ok());
  EXPECT_EQ(crlf.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(crlf.error().message().find(R"(rules["a.com"][0].transform.headers["X"])"),
            std::string::npos);
}

// A mistyped field is a 400 whose message names the field's path; a null is "not given" where
// the field is optional (E2B's nullable fields), but refused for templateID, secure and timeout,
// as it always was.
TEST(ApiDecoders, FieldErrorsNameTheirPath) {
  struct Case {
    const char* body;
    const char* says;
  };
  for (const Case& c : std::initializer_list<Case>{
           {R"({"metadata":{"x":1}})", "metadata.x: expected a string, got number"},
           {R"({"envVars":[]})", "envVars: expected an object, got array"},
           {R"({"templateID":7})", "templateID: expected a string, got number"},
           {R"({"templateID":null})", "templateID: expected a string, got null"},
           {R"({"timeout":"60"})", "timeout: expected an integer, got string"},
           {R"({"timeout":1.5})", "timeout: expected an integer, got number"},
           {R"({"timeout":99999})", "timeout: must be between 0 and 3600"},
           {R"({"timeout":null})", "timeout: expected an integer, got null"},
           {R"({"secure":null})", "secure: expected a boolean, got null"},
           {R"({"autoPause":"yes"})", "autoPause: expected a boolean, got string"},
           {R"({"autoResume":{"enabled":"yes"}})",
            "autoResume.enabled: expected a boolean, got string"},
           {R"({"lifecycle":[]})", "lifecycle: expected an object, got array"},
           {R"({"lifecycle":{"autoResume":1}})",
            "lifecycle.autoResume: expected a boolean, got number"},
           {R"({"network":"none"})", "network: expected an object, got string"},
           {R"({"network":{"allowOut":["10.0.0.1",5]}})",
            "network.allowOut[1]: expected a string, got number"},
           {R"({"network":{"deny_out":{}}})", "network.deny_out: expected an array, got object"},
           {R"({"network":{"allowPublicTraffic":"no"}})",
            "network.allowPublicTraffic: expected a boolean, got string"},
           {R"({"allow_internet_access":1})",
            "allow_internet_access: expected a boolean, got number"},
       }) {
    auto r = parse_create(obj(c.body), 3600);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << c.body;
    EXPECT_EQ(r.error().message(), c.says) << c.body;
  }
  auto nulls =
      parse_create(obj(R"({"metadata":null,"envVars":null,"autoPause":null,"autoPauseMemory":null,)"
                       R"("autoResume":null,"lifecycle":null,"network":null})"),
                   3600);
  EXPECT_TRUE(nulls.ok()) << nulls.error().to_string();
}

TEST(ApiDecoders, ListQueryKeepsV1RunningAndChecksEachParameter) {
  auto q = [](std::string_view target, bool v1) {
    return parse_list_query(boost::urls::parse_origin_form(target)->params(), v1);
  };
  auto v1 = q("/sandboxes?state=paused&limit=5&order=desc&metadata=a%3Db", true);
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->states.size(), 2u);  // v1's running, plus the paused asked for
  EXPECT_EQ(v1->limit, 5u);
  EXPECT_TRUE(v1->descending);
  EXPECT_EQ(v1->metadata.at("a"), "b");
  EXPECT_EQ(q("/v2/sandboxes", false)->states.size(), 2u);
  // v2 is newest first unless asked otherwise (E2B); v1 keeps oldest first.
  EXPECT_TRUE(q("/v2/sandboxes", false)->descending);
  EXPECT_FALSE(q("/v2/sandboxes?order=asc", false)->descending);
  EXPECT_FALSE(q("/sandboxes", true)->descending);
  // state as a comma list or repeated.
  EXPECT_EQ(q("/v2/sandboxes?state=paused", false)->states.size(), 1u);
  EXPECT_EQ(q("/v2/sandboxes?state=paused&state=running", false)->states.size(), 2u);
  EXPECT_EQ(q("/v2/sandboxes?state=running%2Cpaused", false)->states.size(), 2u);
  // metadata as the JS SDK sends {a: "1", "b c": "x y&z=%"}: each key and value
  // encodeURIComponent'ed, joined by URLSearchParams, the whole URL-encoded as a query value.
  auto md = q("/v2/sandboxes?metadata=a%3D1%26b%252520c%3Dx%252520y%252526z%25253D%252525", false);
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->metadata.at("a"), "1");
  EXPECT_EQ(md->metadata.at("b c"), "x y&z=%");
  EXPECT_FALSE(q("/v2/sandboxes?metadata=a%3D%2525zz", false).ok());
  EXPECT_EQ(q("/v2/sandboxes?startedAfter=2026-11-30T14:39:30.123Z", false)->started_after_ms,
            1796049570123);
  EXPECT_EQ(q("/v2/sandboxes?startedAfter=1970-01-01T01:00:00%2B01:00", false)->started_after_ms,
            0);
  EXPECT_EQ(q("/v2/sandboxes?startedAfter=2000-03-01T00:00:00.5Z", false)->started_after_ms,
            951868800500);
  for (const char* bad :
       {"/s?state=killed", "/s?state=bogus", "/s?limit=0", "/s?limit=101", "/s?limit=5x",
        "/s?order=up", "/s?startedAfter=yesterday", "/s?startedAfter=2026-11-30",
        "/s?startedAfter=2026-11-30T14:39:30", "/s?startedAfter=2026-13-30T14:39:30Z"}) {
    auto r = q(bad, false);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ApiDecoders, TokenRequestNeedsCommandsAndABoundedTtl) {
  auto tr = parse_token_request(obj(R"({"commands":["ls","echo"],"ttlSeconds":60})"));
  ASSERT_TRUE(tr.ok());
  EXPECT_EQ(tr->commands, (std::vector<std::string>{"ls", "echo"}));
  EXPECT_EQ(tr->ttl_seconds, 60);
  EXPECT_EQ(parse_token_request(obj(R"({"commands":["ls"]})"))->ttl_seconds, 3600);
  for (const char* bad : {"{}", R"({"commands":[]})", R"({"commands":[1]})",
                          R"({"commands":["ls"],"ttlSeconds":0})"}) {
    auto r = parse_token_request(obj(bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace abx::platform::api

namespace abx::platform {
namespace {

// Issue 35, finding 4: the failed-auth limit was one global count, checked after the key (a
// correct key still worked during a flood, and a flood from one source locked out everyone).
TEST(AuthLimiter, LocksOutTheFloodingSourceOnlyUntilTheLockoutEnds) {
  AuthLimits limits;
  limits.max_failures = 5;
  limits.window = std::chrono::milliseconds(1000);
  limits.lockout = std::chrono::milliseconds(10'000);
  AuthLimiter l(limits);
  const std::int64_t t0 = 1'000'000;
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(l.locked_out("10.0.0.1", t0 + i)) << i;
    l.failed("10.0.0.1", t0 + i);
  }
  EXPECT_FALSE(l.locked_out("10.0.0.1", t0 + 10));
  l.failed("10.0.0.1", t0 + 10);  // the 5th within the window
  EXPECT_TRUE(l.locked_out("10.0.0.1", t0 + 11));
  EXPECT_FALSE(l.locked_out("10.0.0.2", t0 + 11)) << "another source was locked out too";
  EXPECT_FALSE(l.locked_out("", t0 + 11));
  EXPECT_TRUE(l.locked_out("10.0.0.1", t0 + 10'009));
  EXPECT_FALSE(l.locked_out("10.0.0.1", t0 + 10'010)) << "the lockout did not end";
}

TEST(AuthLimiter, FailuresSpreadOverWindowsDoNotLockOut) {
  AuthLimits limits;
  limits.max_failures = 3;
  AuthLimiter l(limits);
  for (std::int64_t t = 0; t < 20'000; t += 600) l.failed("a", t);  // 2 per 1 s window at most
  EXPECT_FALSE(l.locked_out("a", 20'000));
}

TEST(AuthLimiter, SourcesBeyondTheTableCountTogether) {
  AuthLimits limits;
  limits.max_failures = 2;
  limits.max_sources = 2;
  AuthLimiter l(limits);
  l.failed("a", 0);
  l.failed("b", 0);
  l.failed("c", 1);  // no room: counts as the newcomers' together
  EXPECT_FALSE(l.locked_out("c", 2));
  l.failed("d", 2);
  EXPECT_TRUE(l.locked_out("c", 3));
  EXPECT_TRUE(l.locked_out("e", 3));
  EXPECT_FALSE(l.locked_out("a", 3));
  // Once the remembered sources' windows are over, a newcomer gets a place of its own.
  l.failed("f", 5000);
  EXPECT_FALSE(l.locked_out("f", 5001));
}

}  // namespace
}  // namespace abx::platform

namespace abx::platform::console {
namespace {

http::Request console_request(boost::beast::http::verb method, std::string target) {
  http::Request req(method, target, 11);
  return req;
}

TEST(Console, ServesThePageAndEveryFileWithTheStrictPolicy) {
  ASSERT_FALSE(assets().empty());
  for (const Asset& a : assets()) {
    auto res = serve(console_request(boost::beast::http::verb::get, std::string(a.path)), a.path);
    ASSERT_TRUE(res.ok()) << a.path;
    EXPECT_EQ(res->result_int(), 200);
    EXPECT_EQ(res->body(), a.body);
    EXPECT_FALSE(a.body.empty()) << a.path;
    EXPECT_EQ((*res)[boost::beast::http::field::content_type], a.content_type);
    EXPECT_EQ((*res)["Content-Security-Policy"], kContentSecurityPolicy);
    EXPECT_EQ((*res)["X-Content-Type-Options"], "nosniff");
    EXPECT_EQ((*res)[boost::beast::http::field::cache_control], "no-store");
  }
  EXPECT_EQ(kContentSecurityPolicy.find("unsafe"), std::string_view::npos);
  auto page = serve(console_request(boost::beast::http::verb::get, "/console"), "/console");
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->body().find(R"(<script type="module" src="/console/app.js">)"),
            std::string::npos);
  EXPECT_NE(page->body().find(R"(<link rel="stylesheet" href="/console/console.css">)"),
            std::string::npos);
}

TEST(Console, UnknownFilesAndOtherMethodsAreErrors) {
  auto missing =
      serve(console_request(boost::beast::http::verb::get, "/console/x.js"), "/console/x.js");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  auto post = serve(console_request(boost::beast::http::verb::post, "/console/"), "/console/");
  ASSERT_FALSE(post.ok());
  EXPECT_EQ(post.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(is_console_path("/console"));
  EXPECT_TRUE(is_console_path("/console/app.js"));
  EXPECT_FALSE(is_console_path("/consoles"));
  EXPECT_FALSE(is_console_path("/sandboxes"));
}

}  // namespace
}  // namespace abx::platform::console
