// base64 and hex (include/abx/base/base64.h, hex.h).
#include <array>

#include "abx/base/base64.h"
#include "abx/base/hex.h"

namespace abx {
namespace {

constexpr char kStd[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kUrl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string encode(std::string_view in, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  auto u = [&](std::size_t k) { return static_cast<unsigned>(static_cast<unsigned char>(in[k])); };
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    unsigned n = (u(i) << 16) | (u(i + 1) << 8) | u(i + 2);
    out += alphabet[n >> 18];
    out += alphabet[(n >> 12) & 63];
    out += alphabet[(n >> 6) & 63];
    out += alphabet[n & 63];
  }
  std::size_t rest = in.size() - i;
  if (rest == 0) return out;
  unsigned n = u(i) << 16;
  if (rest == 2) n |= u(i + 1) << 8;
  out += alphabet[n >> 18];
  out += alphabet[(n >> 12) & 63];
  if (rest == 2) out += alphabet[(n >> 6) & 63];
  if (pad) out.append(rest == 1 ? 2 : 1, '=');
  return out;
}

// -1: not in the alphabet(s) allowed.
int value_of(char c, bool url_only) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  if (!url_only && c == '+') return 62;
  if (!url_only && c == '/') return 63;
  return -1;
}

Result<std::string> decode(std::string_view in, bool url_only) {
  if (!url_only) {
    std::size_t pad = 0;
    while (!in.empty() && in.back() == '=' && pad < 2) {
      in.remove_suffix(1);
      ++pad;
    }
    if (pad > 0 && (in.size() + pad) % 4 != 0) return invalid_argument("invalid base64 padding");
  }
  if (in.size() % 4 == 1) return invalid_argument("invalid base64 length");
  std::string out;
  out.reserve(in.size() * 3 / 4);
  unsigned acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = value_of(c, url_only);
    if (v < 0) return invalid_argument("invalid base64 character");
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace

std::string base64_encode(std::string_view in) { return encode(in, kStd, true); }
std::string base64url_encode(std::string_view in) { return encode(in, kUrl, false); }
Result<std::string> base64_decode(std::string_view in) { return decode(in, false); }
Result<std::string> base64url_decode(std::string_view in) { return decode(in, true); }

std::string to_hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

}  // namespace abx
