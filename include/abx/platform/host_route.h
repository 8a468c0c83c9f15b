// Which plane a request to abxd belongs to: the control API, or a port inside a sandbox.
//
// abxd serves both planes on one listener. A request goes to port P of sandbox S when
//   - its Host is `P-S.<domain>` (the hostname is authoritative: routing headers are ignored), or
//   - its Host is `localhost`, an IP literal or `sandbox.<domain>`, and it carries
//     `E2b-Sandbox-Id: S` and `E2b-Sandbox-Port: P` (how the e2b SDKs talk to one shared
//     E2B_SANDBOX_URL).
// Everything else is the control API. The Host is normalised (lower-cased, one trailing dot and
// a `:port` suffix dropped) before matching; the domain match is label-exact, so
// `49983-abc.localhost.evil.com` is not ours. P must be 1–65535 without sign or leading zeros;
// S must be 1–64 of [a-z0-9]. Forwarding headers (X-Forwarded-Host, Forwarded, …) never route.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "abx/base/error.h"

namespace abx::platform {

struct Route {
  enum class Kind { kControl, kSandbox };
  Kind kind = Kind::kControl;
  std::string sandbox_id;
  std::uint16_t port = 0;
};

// `host`: the Host header (must be present, exactly once: the HTTP layer checks that);
// `id_header` / `port_header`: E2b-Sandbox-Id / E2b-Sandbox-Port, empty when absent;
// `domain`: normalised once by normalise_domain (route_request runs per request).
// Errors: kInvalidArgument naming what is wrong (bad port, bad id, only one routing header).
Result<Route> route_request(std::string_view host, std::string_view id_header,
                            std::string_view port_header, std::string_view domain);

// `domain` normalised as a Host is (lower-cased, a `:port` and one trailing dot dropped); as
// given when it is no valid host name.
std::string normalise_domain(std::string_view domain);

// "1".."65535", no sign, no leading zero.
Result<std::uint16_t> parse_port(std::string_view s);

}  // namespace abx::platform
