// Lower-case hexadecimal, the one implementation (digests, random ids, signatures).
#pragma once

#include <string>
#include <string_view>

namespace abx {

std::string to_hex(std::string_view bytes);
inline std::string to_hex(const unsigned char* p, std::size_t n) {
  return to_hex(std::string_view(reinterpret_cast<const char*>(p), n));
}

}  // namespace abx
