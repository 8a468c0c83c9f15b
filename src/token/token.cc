// SHA256_Init and friends (sha256() below) are deprecated in OpenSSL 3.0; not removed.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "abx/token/token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "abx/base/base64.h"
#include "abx/base/hex.h"
#include "abx/base/json.h"

namespace abx::token {
namespace json = boost::json;

namespace {

std::array<unsigned char, SHA256_DIGEST_LENGTH> sha256(std::string_view s) {
  // OpenSSL's SHA-256 functions on a context on the stack: no allocation and no provider
  // dispatch. Every proxied request and command call hashes its token here, and through EVP
  // (even with the algorithm fetched once and the context kept per thread) OpenSSL 3.0 freed and
  // made the provider's state at each init: a malloc, a cleanse and a free per check.
  std::array<unsigned char, SHA256_DIGEST_LENGTH> out{};
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, s.data(), s.size());
  SHA256_Final(out.data(), &ctx);
  OPENSSL_cleanse(&ctx, sizeof ctx);
  return out;
}

std::string hmac_sha256(std::string_view key, std::string_view msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

Error unauth(std::string why) {
  return Error(ErrorCode::kUnauthenticated, "invalid scoped token: " + std::move(why));
}

bool valid_command(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  auto da = sha256(a);
  auto db = sha256(b);
  return CRYPTO_memcmp(da.data(), db.data(), da.size()) == 0;
}

SecretMatcher::SecretMatcher(std::string_view secret) : digest_(sha256(secret)) {}

bool SecretMatcher::matches(std::string_view presented) const {
  auto d = sha256(presented);
  return CRYPTO_memcmp(d.data(), digest_.data(), d.size()) == 0;
}

bool looks_scoped(std::string_view presented) {
  return presented.substr(0, kScopedPrefix.size()) == kScopedPrefix;
}

Result<std::string> mint_scoped(std::string_view full_token, const ScopedClaims& claims) {
  if (full_token.empty()) return invalid_argument("cannot mint a scoped token without a key");
  if (claims.commands.empty()) return invalid_argument("a scoped token needs at least one command");
  if (claims.expires_at <= 0) return invalid_argument("a scoped token needs an expiry");
  json::array cmds;
  for (const auto& c : claims.commands) {
    if (!valid_command(c)) return invalid_argument("invalid command name in scope: '" + c + "'");
    cmds.push_back(json::value(c));
  }
  json::object o{{"cmd", std::move(cmds)}, {"exp", claims.expires_at}};
  std::string signed_part = std::string(kScopedPrefix) + base64url_encode(json::serialize(o));
  std::string tok = signed_part + "." + base64url_encode(hmac_sha256(full_token, signed_part));
  if (tok.size() > kMaxTokenBytes) return invalid_argument("too many commands for one token");
  return tok;
}

Result<ScopedClaims> verify_scoped(std::string_view full_token, std::string_view presented,
                                   std::int64_t now) {
  if (presented.size() > kMaxTokenBytes || !looks_scoped(presented)) return unauth("malformed");
  std::size_t dot = presented.rfind('.');
  if (dot == std::string_view::npos || dot < kScopedPrefix.size()) return unauth("malformed");
  std::string_view signed_part = presented.substr(0, dot);
  auto sig = base64url_decode(presented.substr(dot + 1));
  if (!sig.ok()) return unauth("malformed");
  // Check the signature before looking at the claims: unsigned input is never parsed.
  std::string want = hmac_sha256(full_token, signed_part);
  if (sig->size() != want.size() || CRYPTO_memcmp(sig->data(), want.data(), want.size()) != 0) {
    return unauth("bad signature");
  }
  auto raw = base64url_decode(signed_part.substr(kScopedPrefix.size()));
  if (!raw.ok()) return unauth("malformed");
  auto v = parse_json_strict(*raw);
  if (!v.ok() || !v->is_object()) return unauth("malformed claims");
  const json::object& o = v->get_object();
  const json::value* cmd = o.if_contains("cmd");
  const json::value* exp = o.if_contains("exp");
  if (cmd == nullptr || !cmd->is_array() || exp == nullptr || !exp->is_int64()) {
    return unauth("malformed claims");
  }
  ScopedClaims claims;
  claims.expires_at = exp->as_int64();
  for (const auto& c : cmd->get_array()) {
    if (!c.is_string()) return unauth("malformed claims");
    claims.commands.emplace_back(c.get_string());
  }
  if (now >= claims.expires_at) return unauth("expired");
  return claims;
}

Result<std::string> random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    return internal_error("RAND_bytes failed");
  }
  return to_hex(raw);
}

std::string random_uuid() {
  std::array<unsigned char, 16> b{};
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) {
    // OpenSSL's generator failing is not expected (see token.h).
    std::random_device rd;
    for (auto& c : b) c = static_cast<unsigned char>(rd());
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  std::string h = to_hex(b.data(), b.size());
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20);
}

Status reseed_random() {
  // RAND_poll reseeds the primary DRBG; each thread's public and private DRBGs see its reseed
  // counter change and reseed from it before their next output.
  if (RAND_poll() != 1) return internal_error("RAND_poll failed");
  return {};
}

Result<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument("cannot read token file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return invalid_argument("token file " + path + " is empty");
  return t;
}

}  // namespace abx::token
