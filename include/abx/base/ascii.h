// ASCII case and HTTP token characters, the one implementation: host names, header names, DNS
// labels and media types are ASCII and compared without case, whatever the process's locale.
#pragma once

#include <string>
#include <string_view>

namespace abx {

constexpr char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

constexpr bool ascii_iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

// The C locale's isspace: space, \t, \n, \v, \f, \r.
constexpr bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// `s` without leading and trailing ascii_space.
constexpr std::string_view ascii_trim(std::string_view s) {
  while (!s.empty() && ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

// RFC 9110 `tchar`: a character of a token (a header name, a method).
constexpr bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace abx
