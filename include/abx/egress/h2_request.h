// abx::egress HTTP/2 requests on an intercepted flow (E2B network.rules over h2): the checks a
// request stream's header block must pass before the egress proxy forwards it, and the rule's
// headers set on it. The proxy (abx::platform, egress_h2.cc) gets the block from nghttp2, which
// has already validated it as HTTP/2 (lower-case names, pseudo-headers first and well-formed,
// no connection-specific fields); these functions do not rely on that.
//
// Pure (no I/O); fuzzed with nghttp2's own decoding in front (egress_h2_fuzz).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/egress/transform.h"

namespace abx::egress {

// Why a request stream is answered by the proxy instead of forwarded.
struct H2Refusal {
  int status = 0;      // the response's :status (400, 405, 421)
  std::string reason;  // for the audit and the response's body; never a header's value
};

// The host of an authority or Host value: lower case, without a numeric `:port` or a trailing
// dot (`Web.Example.com.:443` -> `web.example.com`). Anything else is kept, so `user@host` or
// an IP literal never equals a DNS name.
std::string authority_host_name(std::string_view authority);

// Checks a request header block that arrived on a TLS connection opened to `tls_name` (lower
// case). The block's `:authority` and its `host`, each one present (several `host` fields: each),
// must name `tls_name` — and at least one must be present — else 421: a connection for one name
// never carries a request to another (RFC 9113 §8.3.1 lets a client send either). `:method
// CONNECT` (plain, or RFC 8441's extended CONNECT for WebSocket) is 405; a `:path` that is not
// `/...` (or `*`) is 400. Sets `*host` to the name the request gave (empty when none), for the
// audit. nullopt: forward it.
std::optional<H2Refusal> check_h2_request(const std::vector<Header>& fields,
                                          std::string_view tls_name, std::string* host);

// Sets a rule's headers on a request's fields, with HTTP/1's semantics: in order, each one
// removes every field of the same name (ASCII case-insensitive; pseudo-headers are never
// touched: a rule's name is a token, never `:`-prefixed) and is appended with its name
// lower-cased (HTTP/2 requires it), so a later rule header of the same name wins and a header
// the sandbox sent is replaced, never duplicated. Returns the index of the first field it
// appended (fields from there on are the rule's: the proxy sends them never-indexed).
std::size_t apply_h2_headers(std::vector<Header>& fields, const std::vector<Header>& rule);

}  // namespace abx::egress
