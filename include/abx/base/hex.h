// Lower-case hexadecimal, the one implementation (digests, random ids, signatures).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace abx {

std::string to_hex(std::string_view bytes);
inline std::string to_hex(const unsigned char* p, std::size_t n) {
  return to_hex(std::string_view(reinterpret_cast<const char*>(p), n));
}

// The bytes of lower-case hexadecimal text; nullopt for an odd length or any other character.
std::optional<std::string> from_hex(std::string_view hex);

// Whether every character of `s` is 0-9 or a-f (to_hex's alphabet; true for "").
constexpr bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace abx
