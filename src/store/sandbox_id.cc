#include "abx/store/sandbox_id.h"

#include <openssl/rand.h>

#include <algorithm>

namespace abx::store {
namespace {

constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";

bool in_alphabet(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
}

}  // namespace

Result<SandboxId> SandboxId::generate() {
  // Bytes at or past the last multiple of 36 are dropped, so every character is uniform.
  constexpr unsigned kLimit = 256 - (256 % kAlphabet.size());
  std::string out;
  while (out.size() < kLength) {
    unsigned char buf[32];
    if (RAND_bytes(buf, sizeof buf) != 1) return internal_error("RAND_bytes failed");
    for (unsigned char b : buf) {
      if (b < kLimit && out.size() < kLength) out += kAlphabet[b % kAlphabet.size()];
    }
  }
  return SandboxId(std::move(out));
}

Result<SandboxId> SandboxId::parse(std::string_view text) {
  if (!valid(text))
    return invalid_argument("invalid sandbox id '" + std::string(text.substr(0, 64)) + "'");
  return SandboxId(std::string(text));
}

bool SandboxId::valid(std::string_view text) { return text.size() == kLength && in_alphabet(text); }

bool SandboxId::routable(std::string_view text) {
  return !text.empty() && text.size() <= kMaxRoutable && in_alphabet(text);
}

}  // namespace abx::store
