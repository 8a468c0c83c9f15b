// abx::egress transforms — E2B's `network.rules`: headers the egress proxy sets on a sandbox's
// requests to matching hosts, so a credential reaches an API without ever entering the sandbox.
//
//   {"api.example.com": [{"transform": {"headers": {"Authorization": "Bearer …"}}}],
//    "*.example.org":   [{"transform": {"headers": {"X-Key": "…"}}}]}
//
// Keys are exact names or one leading `*.` (every name under it at any depth, never the apex; a
// bare `*` is invalid), lower-cased on parse. A request's host picks one key: the exact one, else
// the longest matching wildcard; rule sets are never merged. Within a key's list, every rule's
// headers are set in order (a later one of the same name wins), each replacing a header of the
// same name the request carried. Rules grant no access: allowOut/denyOut still decide.
//
// A header value may name a secret of the sandbox's team (POST /secrets) with E2B's placeholder
// `${e2b.secrets.<name>}` (what the SDK's Secret.fill(name) returns), anywhere in the value and
// any number of times: `"Authorization": "Bearer ${e2b.secrets.openai}"`. abxd replaces it with
// the secret's current value on each request, so the value never enters the sandbox, and is
// never stored with the rules or shown by GET /sandboxes/{id} (which shows the placeholder).
// Any other `${e2b.` placeholder (E2B's workload identity tokens) is refused: abxd does not mint
// those, and passing one on as literal text would hide the mistake.
//
// Pure: parsing, limits, matching and the warnings; the proxy (abx::platform) applies them.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"
#include "abx/egress/policy.h"

namespace abx::egress {

// Limits (a request over any is a 400 naming the field).
inline constexpr std::size_t kMaxTransformHosts = 100;    // keys
inline constexpr std::size_t kMaxTransformsPerHost = 16;  // rules in one key's list
inline constexpr std::size_t kMaxTransformHeaders = 32;   // headers of one key, its rules together
inline constexpr std::size_t kMaxHeaderNameBytes = 256;
inline constexpr std::size_t kMaxHeaderValueBytes = 8192;
inline constexpr std::size_t kMaxTransformBytes = 65536;  // every name and value together

// What GET /sandboxes/{id} shows instead of a value.
inline constexpr std::string_view kMaskedValue = "[redacted]";

using Header = std::pair<std::string, std::string>;  // name as given, value

// --- secret placeholders ---
inline constexpr std::string_view kSecretPlaceholderOpen = "${e2b.secrets.";
inline constexpr std::size_t kMaxSecretNameBytes = 128;
// A secret's name as stored (E2B lower-cases names): [a-z0-9][a-z0-9._-]*, at most
// kMaxSecretNameBytes, not starting with "sec_" (E2B reserves it for secret ids).
bool valid_secret_name(std::string_view name);
// The secret names a header value refers to, lower-cased, in order (repeats kept). An error
// (invalid_argument, without a field: the caller prefixes it) for an unterminated or malformed
// placeholder, a bad name, or a `${e2b.` placeholder of another kind.
Result<std::vector<std::string>> secret_names_in(std::string_view value);
// `value` with each placeholder replaced by resolve(name) (name lower-cased); resolve's error
// is returned as is, and an expansion over `max_bytes` is invalid_argument.
Result<std::string> expand_secrets(
    std::string_view value, const std::function<Result<std::string>(std::string_view)>& resolve,
    std::size_t max_bytes = 65536);
// What GET /sandboxes/{id} shows of a value: kMaskedValue when it names no secret; else the
// value with its placeholders as written, a leading authentication scheme ("Bearer ", "Basic ":
// letters and one space) kept, and each other run of literal text replaced by kMaskedValue.
std::string masked_value(std::string_view value);

// A placeholder in the rules, with the field of the header that holds it.
struct SecretReference {
  std::string name;   // lower-cased
  std::string field;  // e.g. network.rules["api.example.com"][0].transform.headers["X-Key"]
};

struct HostTransforms {
  DomainPattern pattern;
  std::vector<std::vector<Header>> rules;  // each rule's `transform.headers`, in order
  // The headers to set, in order: every rule's, a later one of the same name (any case) winning.
  std::vector<Header> headers() const;
};

struct TransformRules {
  std::vector<HostTransforms> hosts;  // in key order

  bool empty() const { return hosts.empty(); }
  // The rule set for `host` (any case, optional trailing dot): the exact key, else the longest
  // wildcard matching it; null when none.
  const HostTransforms* match(std::string_view host) const;
  // E2B's shape; values masked (masked_value) unless `reveal` (what abxd's store keeps: the
  // placeholders, never a secret's value).
  boost::json::object to_json(bool reveal) const;
  // Every secret placeholder, in key and rule order; `field` is the rules' own field (as given
  // to parse_transforms).
  std::vector<SecretReference> secret_references(std::string_view field) const;
  // Whether any header value names secret `name` (lower-cased).
  bool references(std::string_view name) const;
};

// Parses E2B's `rules` object (null: none). invalid_argument names the field at fault under
// `field` (e.g. `network.rules["api.example.com"][0].transform.headers["X-Key"]`).
Result<TransformRules> parse_transforms(const boost::json::value& v, std::string_view field);

// A header name the rules may set: an RFC 9110 token that is not one the proxy owns (Host,
// framing and connection headers). Empty when fine, else the reason.
std::string check_header_name(std::string_view name);

// One warning per key whose hosts the sandbox's rules cannot reach at all by name (everything
// is denied and no allowed domain matches any of them): E2B accepts such a rule, abx says so.
std::vector<std::string> transform_warnings(const Rules& rules, const TransformRules& transforms);

}  // namespace abx::egress
