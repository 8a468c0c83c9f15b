// abx::auth — AK/SK request signing for abxd's control API (ABX-HMAC-SHA256).
//
// Modelled on Alibaba ACS3-HMAC-SHA256 (one HMAC, explicit nonce) with AWS SigV4's
// canonicalisation, so the canonical request is byte-for-byte SigV4's and is tested against the
// published SigV4 vectors:
//
//   CanonicalRequest = Method "\n" CanonicalURI "\n" CanonicalQuery "\n"
//                      CanonicalHeaders "\n" SignedHeaders "\n" hex(SHA256(body))
//     CanonicalURI:    each path segment percent-decoded then RFC 3986-encoded (unreserved
//                      A-Za-z0-9-._~ kept, everything else %XX upper-case); "/" if empty. Dot
//                      segments and "//" are NOT normalised: the signature covers the path
//                      the server routes, and %2F stays distinct from "/".
//     CanonicalQuery:  pairs split on "&", decoded ("+" means space, as URL query parsers read
//                      it), re-encoded as above, sorted by name then value, "name=value" joined
//                      by "&"; repeated names kept; a name without "=" gets an empty value.
//     CanonicalHeaders: "name:value\n" per signed header, names lower-case and sorted; values
//                      trimmed with inner runs of spaces/tabs collapsed; repeated headers joined
//                      by ",".
//   StringToSign = "ABX-HMAC-SHA256\n" hex(SHA256(CanonicalRequest))
//   Signature    = hex(HMAC-SHA256(secret, StringToSign))
//   Authorization: ABX-HMAC-SHA256 Credential=<ak>,SignedHeaders=<a;b;c>,Signature=<64 hex>
//   with headers x-abx-date (ISO 8601 basic, 20260102T030405Z), x-abx-nonce (32-128 lower-case
//   hex) and x-abx-content-sha256 (hex SHA-256 of the body).
//
// verify() requires host, x-abx-date, x-abx-nonce and x-abx-content-sha256 (and content-type
// when present) to be signed — a request that signs less is a downgrade and is refused — checks
// the date against a window (default ±300 s), recomputes the body hash itself, does the same
// HMAC work for an unknown access key (with a dummy secret) as for a known one, compares in
// constant time, and only then records the nonce through the caller's callback (wired to
// abx::store::Store::remember_nonce, so replays are caught across restarts).
//
// Errors: kUnauthenticated with a wire type — "IncompleteSignature" (malformed or missing
// Authorization / headers, required header not signed), "RequestTimeTooSkewed",
// "SignatureDoesNotMatch" (bad signature, unknown or revoked access key, body hash mismatch),
// "NonceReused"; kInvalidArgument from sign() for a request it cannot sign; whatever the
// callbacks return (e.g. kUnavailable when the store is busy) is passed through.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::auth {

inline constexpr std::string_view kAlgorithm = "ABX-HMAC-SHA256";
inline constexpr std::string_view kDateHeader = "x-abx-date";
inline constexpr std::string_view kNonceHeader = "x-abx-nonce";
inline constexpr std::string_view kContentHashHeader = "x-abx-content-sha256";
inline constexpr std::size_t kMaxAuthorizationBytes = 4096;
inline constexpr std::int64_t kDefaultWindowSeconds = 300;

struct Header {
  std::string name;  // any case
  std::string value;
};

struct HttpRequest {
  std::string method;           // "GET", "POST", …
  std::string target;           // request-target as on the wire: "/path?query"
  std::vector<Header> headers;  // as received (repeats allowed); includes Authorization
};

// Pieces of the canonical request, exposed for tests and for clients in other languages.
Result<std::string> canonical_uri(std::string_view raw_path);
Result<std::string> canonical_query(std::string_view raw_query);
// `signed_headers` are lower-case names; every one must be present in the request.
Result<std::string> canonical_request(const HttpRequest& req,
                                      const std::vector<std::string>& signed_headers,
                                      std::string_view payload_sha256_hex);
std::string string_to_sign(std::string_view canonical_request);
std::string sha256_hex(std::string_view data);

// "20260102T030405Z" <-> unix seconds.
std::string format_date(std::int64_t unix_seconds);
std::optional<std::int64_t> parse_date(std::string_view basic_iso8601);

struct Credentials {
  std::string access_key_id;
  std::string secret;
};

struct SignOptions {
  std::int64_t now_unix = 0;
  std::string nonce;  // empty: 16 random bytes, hex
  // Signed besides host, content-type (if present) and every x-abx-* header.
  std::vector<std::string> extra_signed_headers;
};

// Client side: returns the headers to add to `req` (x-abx-date, x-abx-nonce,
// x-abx-content-sha256, authorization). `req` must carry a Host header and none of those.
Result<std::vector<Header>> sign(const HttpRequest& req, std::string_view body,
                                 const Credentials& creds, const SignOptions& options);

struct ParsedAuthorization {
  std::string access_key_id;
  std::vector<std::string> signed_headers;  // sorted, lower-case, unique
  std::string signature_hex;                // 64 lower-case hex
};

// Strict parse of an Authorization value; kUnauthenticated "IncompleteSignature" otherwise.
Result<ParsedAuthorization> parse_authorization(std::string_view value);

struct VerifyOptions {
  std::int64_t now_unix = 0;
  std::int64_t window_seconds = kDefaultWindowSeconds;
  // The secret of an active access key, nullopt if unknown or revoked.
  std::function<Result<std::optional<std::string>>(std::string_view access_key_id)> lookup_secret;
  // Records `key` ("<ak>/<nonce>") until expires_at_unix; returns true if it was already there.
  std::function<Result<bool>(std::string_view key, std::int64_t expires_at_unix)> remember_nonce;
};

// Server side: returns the access key id of a correctly signed, fresh, first-seen request.
Result<std::string> verify(const HttpRequest& req, std::string_view body,
                           const VerifyOptions& options);

}  // namespace abx::auth
