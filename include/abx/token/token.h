// Access tokens: constant-time comparison and scoped tokens.
//
// A sandbox has one full access token. From it anyone who holds it — the platform, which minted
// it — can derive a *scoped token*: claims (the commands it may run, an expiry) signed with
// HMAC-SHA256 keyed by the full token. The command server verifies scoped tokens without any
// call home, so the platform can mint them without touching the sandbox.
//
// Wire format:  abxs1.<base64url(claims JSON)>.<base64url(HMAC-SHA256(full, "abxs1." + claims64))>
// claims JSON:  {"cmd":["demo",...],"exp":<unix seconds>}
// Shared by the server, the platform and the client.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::token {

inline constexpr std::size_t kMaxTokenBytes = 4096;
inline constexpr std::string_view kScopedPrefix = "abxs1.";

// Compares two secrets in time independent of where they differ (and of their lengths, by
// comparing SHA-256 digests with CRYPTO_memcmp).
bool constant_time_equal(std::string_view a, std::string_view b);

// One secret checked against many presented ones, as constant_time_equal does, with the secret's
// digest taken once: each check hashes only the presented token (the command server's hot path).
class SecretMatcher {
 public:
  explicit SecretMatcher(std::string_view secret);
  bool matches(std::string_view presented) const;

 private:
  std::array<unsigned char, 32> digest_;
};

struct ScopedClaims {
  std::vector<std::string> commands;  // the commands the bearer may discover and run
  std::int64_t expires_at = 0;        // unix seconds
};

// Mints a scoped token. Errors: kInvalidArgument for an empty key, no commands, a bad command
// name or a non-positive expiry.
Result<std::string> mint_scoped(std::string_view full_token, const ScopedClaims& claims);

// Verifies a scoped token against the full token at time `now` (unix seconds). Errors:
// kUnauthenticated ("malformed", "bad signature", "expired"), never revealing more.
Result<ScopedClaims> verify_scoped(std::string_view full_token, std::string_view presented,
                                   std::int64_t now);

bool looks_scoped(std::string_view presented);

// A random token of `bytes` bytes, hex-encoded (OpenSSL RAND_bytes).
Result<std::string> random_hex(std::size_t bytes);

// 16 random bytes as a version-4 UUID ("8-4-4-4-12" lowercase hex): Jupyter's msg_id form,
// abx-interp's context ids and E2B's volume ids. Falls back on std::random_device should
// OpenSSL's generator fail (these need uniqueness, not secrecy).
std::string random_uuid();

// Reseeds OpenSSL's generators (random_hex's source) from the kernel. A process restored more
// than once from one checkpoint (a CRIU fork) resumes with the same generator state in every
// copy, and OpenSSL's fork detection does not see it (the pid is the checkpoint's); such a
// process calls this once restored. Errors: kInternal.
Status reseed_random();

// The token in the file at `path`, trailing newlines, CRs and spaces dropped. Errors:
// kInvalidArgument when the file cannot be read or holds no token.
Result<std::string> read_token_file(const std::string& path);

}  // namespace abx::token
