// Host routing: the proxy rows of the bad-input catalogue (§2.4).
#include "abx/platform/host_route.h"

#include <gtest/gtest.h>

#include "abx/runtime/sandbox.h"
#include "abx/store/sandbox_id.h"

namespace abx::platform {
namespace {

struct Case {
  const char* name;
  const char* host;
  const char* id_header;
  const char* port_header;
  int expect;  // 0 control, 1 sandbox, -1 error
  const char* id = "";
  int port = 0;
};

class HostRoute : public ::testing::TestWithParam<Case> {};

TEST_P(HostRoute, Row) {
  const Case& c = GetParam();
  auto r = route_request(c.host, c.id_header, c.port_header, "localhost");
  if (c.expect < 0) {
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    return;
  }
  ASSERT_TRUE(r.ok()) << c.name << ": " << r.error().message();
  EXPECT_EQ(r->kind == Route::Kind::kSandbox ? 1 : 0, c.expect) << c.name;
  if (c.expect == 1) {
    EXPECT_EQ(r->sandbox_id, c.id);
    EXPECT_EQ(r->port, c.port);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Catalogue, HostRoute,
    ::testing::Values(
        Case{"plain_control", "localhost:3000", "", "", 0},
        Case{"ip_control", "127.0.0.1:3000", "", "", 0},
        Case{"subdomain", "49983-abc123.localhost", "", "", 1, "abc123", 49983},
        Case{"subdomain_with_port", "49982-abc123.localhost:3000", "", "", 1, "abc123", 49982},
        Case{"uppercase_normalised", "49983-ABC123.LOCALHOST", "", "", 1, "abc123", 49983},
        Case{"trailing_dot", "49983-abc.localhost.", "", "", 1, "abc", 49983},
        Case{"headers_on_localhost", "localhost:3000", "abc", "49983", 1, "abc", 49983},
        Case{"headers_on_ip", "127.0.0.1", "abc", "8080", 1, "abc", 8080},
        Case{"headers_on_ipv6", "[::1]:3000", "abc", "8080", 1, "abc", 8080},
        Case{"headers_on_shared_host", "sandbox.localhost", "abc", "49983", 1, "abc", 49983},
        // Dotted digits that are no IPv4 address: an unknown host, so the headers do not route.
        Case{"headers_on_dotted_digits_not_an_ip", "127.0.0.256", "abc", "8080", 0},
        // Not the shared host: a label of the domain without <port>-<id>.
        Case{"headers_on_a_longer_shared_host", "xsandbox.localhost", "abc", "8080", -1},
        Case{"hostname_beats_headers", "49983-abc.localhost", "other", "1", 1, "abc", 49983},
        Case{"port_zero", "0-abc.localhost", "", "", -1},
        Case{"port_65536", "65536-abc.localhost", "", "", -1},
        Case{"port_99999", "99999-abc.localhost", "", "", -1},
        Case{"port_leading_zero", "080-abc.localhost", "", "", -1},
        Case{"port_plus", "+80-abc.localhost", "", "", -1},
        Case{"port_20_digits", "12345678901234567890-abc.localhost", "", "", -1},
        Case{"header_port_zero", "localhost", "abc", "0", -1},
        Case{"header_only_id", "localhost", "abc", "", -1},
        Case{"header_bad_id", "localhost", "ABC:1", "80", -1},
        Case{"id_with_colon", "80-a:b.localhost", "", "", -1},
        Case{"id_dotdot", "80-...localhost", "", "", -1},
        Case{"empty_id", "80-.localhost", "", "", -1},
        Case{"no_dash", "80abc.localhost", "", "", -1},
        Case{"suffix_attack", "8080-abc.localhost.evil.com", "", "", 0},
        Case{"inner_attack", "8080-abc.evil.localhost", "", "", 0},
        Case{"other_domain", "evil.com", "", "", 0},
        Case{"userinfo", "a@8080-abc.localhost", "", "", -1}, Case{"empty_host", "", "", "", -1}),
    [](const auto& tc) { return std::string(tc.param.name); });

TEST(HostRoute, CustomDomain) {
  auto r = route_request("49983-xyz.sbx.example.org", "", "", "sbx.example.org");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sandbox_id, "xyz");
  auto shared = route_request("sandbox.sbx.example.org", "xyz", "49983", "sbx.example.org");
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->kind, Route::Kind::kSandbox);
}

// The gateway normalises its --domain once (normalise_domain), so a domain given in upper case,
// with a port or a trailing dot, routes as the plain one does.
TEST(HostRoute, DomainIsNormalisedOnceAsAHostIs) {
  EXPECT_EQ(normalise_domain("SBX.Example.ORG.:8080"), "sbx.example.org");
  EXPECT_EQ(normalise_domain("localhost"), "localhost");
  EXPECT_EQ(normalise_domain("a..b"), "a..b");  // no valid host: kept as given
  auto r = route_request("49983-xyz.sbx.example.org", "", "", normalise_domain("SBX.example.org."));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Route::Kind::kSandbox);
  EXPECT_EQ(r->sandbox_id, "xyz");
}

// The three rules of store/sandbox_id.h nest: every id abxd makes is routed to (not refused as
// malformed) and is a name the runtime takes for the sandbox's hostname, cgroup and directory.
TEST(HostRoute, EveryGeneratedIdIsRoutedAndARuntimeName) {
  for (int i = 0; i < 200; ++i) {
    auto id = store::SandboxId::generate();
    ASSERT_TRUE(id.ok());
    EXPECT_TRUE(runtime::valid_sandbox_name(id->str())) << id->str();
    auto r = route_request("49983-" + id->str() + ".abx.test", "", "", "abx.test");
    ASSERT_TRUE(r.ok()) << id->str() << ": " << r.error().message();
    EXPECT_EQ(r->sandbox_id, id->str());
  }
  // ... and the router's looser form is still not a runtime name with a dash in it.
  EXPECT_FALSE(store::SandboxId::routable("build-abc"));
  EXPECT_TRUE(runtime::valid_sandbox_name("build-abc"));
}

}  // namespace
}  // namespace abx::platform
