// Reading ABX_REGISTER's stringified parameter list: names and literal defaults.
//
// The compiler has already checked the list (it is also the function's real parameter list), so
// this only needs to split it and read the literals; anything it cannot read is reported, never
// guessed.
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "abx/base/ascii.h"
#include "abx/base/try.h"
#include "abx/registry/coerce.h"
#include "abx/registry/register.h"

namespace abx::registry::detail {
namespace json = boost::json;

namespace {

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Index just past a string or character literal starting at s[i] (a quote), or npos.
std::size_t skip_quoted(std::string_view s, std::size_t i) {
  char q = s[i];
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == q) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Reads one C++ string literal body (between quotes) with its escapes.
Result<std::string> unescape(std::string_view body) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i == body.size()) return invalid_argument("dangling backslash");
    char e = body[i];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\\':
      case '"':
      case '\'':
      case '?':
        out += e;
        break;
      case 'x': {
        unsigned v = 0;
        std::size_t j = i + 1;
        while (j < body.size() && std::isxdigit(static_cast<unsigned char>(body[j]))) {
          v = v * 16 + static_cast<unsigned>(std::stoi(std::string(1, body[j]), nullptr, 16));
          ++j;
        }
        if (j == i + 1 || v > 0xff) return invalid_argument("bad \\x escape");
        out += static_cast<char>(v);
        i = j - 1;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          unsigned v = 0;
          std::size_t j = i;
          while (j < body.size() && j < i + 3 && body[j] >= '0' && body[j] <= '7') {
            v = v * 8 + static_cast<unsigned>(body[j] - '0');
            ++j;
          }
          if (v > 0xff) return invalid_argument("bad octal escape");
          out += static_cast<char>(v);
          i = j - 1;
        } else {
          return invalid_argument(std::string("unsupported escape \\") + e);
        }
    }
  }
  return out;
}

Result<json::value> parse_string_literal(std::string_view t) {
  // Optional std::string(...) / std::string{...} wrapper; "" literals may be concatenated.
  for (std::string_view prefix : {"std::string", "::std::string"}) {
    if (t.substr(0, prefix.size()) == prefix) {
      std::string_view rest = ascii_trim(t.substr(prefix.size()));
      if (rest.size() >= 2 && ((rest.front() == '(' && rest.back() == ')') ||
                               (rest.front() == '{' && rest.back() == '}'))) {
        t = ascii_trim(rest.substr(1, rest.size() - 2));
        if (t.empty()) return json::value(json::string());
      }
      break;
    }
  }
  if (t == "{}") return json::value(json::string());
  std::string out;
  std::size_t i = 0;
  bool any = false;
  while (i < t.size()) {
    if (std::isspace(static_cast<unsigned char>(t[i]))) {
      ++i;
      continue;
    }
    if (t.substr(i, 2) == "u8") i += 2;
    if (i >= t.size() || t[i] != '"') return invalid_argument("not a string literal");
    std::size_t end = skip_quoted(t, i);
    if (end == std::string_view::npos) return invalid_argument("unterminated string literal");
    ABX_ASSIGN_OR_RETURN(auto piece, unescape(t.substr(i + 1, end - i - 2)));
    out += piece;
    any = true;
    i = end;
  }
  if (!any) return invalid_argument("not a string literal");
  return json::value(json::string(out));
}

std::string strip_number(std::string_view t, std::string_view suffix_chars) {
  std::string s;
  for (char c : t) {
    if (c != '\'') s += c;
  }
  while (!s.empty() && suffix_chars.find(s.back()) != std::string_view::npos) s.pop_back();
  return s;
}

Result<json::value> parse_integer_literal(std::string_view t) {
  std::string s = strip_number(t, "uUlLzZ");
  bool neg = false;
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
    neg = s[i] == '-';
    ++i;
  }
  int base = 10;
  if (s.size() - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) {
    base = 16;
    i += 2;
  } else if (s.size() - i > 2 && s[i] == '0' && (s[i + 1] == 'b' || s[i + 1] == 'B')) {
    base = 2;
    i += 2;
  } else if (s.size() - i > 1 && s[i] == '0') {
    base = 8;
    i += 1;
  }
  if (i >= s.size()) return invalid_argument("not an integer literal");
  std::uint64_t mag = 0;
  auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), mag, base);
  if (ec != std::errc() || p != s.data() + s.size())
    return invalid_argument("not an integer literal");
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(INT64_MAX);
  if (neg) {
    if (mag > kMax + 1) return invalid_argument("integer literal out of int64 range");
    return json::value(mag == kMax + 1 ? INT64_MIN : -static_cast<std::int64_t>(mag));
  }
  if (mag > kMax) return invalid_argument("integer literal out of int64 range");
  return json::value(static_cast<std::int64_t>(mag));
}

Result<json::value> parse_float_literal(std::string_view t) {
  auto as_int = parse_integer_literal(t);
  if (as_int.ok()) return json::value(static_cast<double>(as_int->as_int64()));
  std::string s = strip_number(t, "fFlL");
  if (!s.empty() && s[0] == '+') s.erase(0, 1);
  double d = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(d)) {
    return invalid_argument("not a floating literal");
  }
  return json::value(d);
}

}  // namespace

Result<std::vector<ParamText>> parse_param_list(std::string_view text) {
  text = ascii_trim(text);
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') {
    return invalid_argument("parameter list must be written in parentheses");
  }
  text = ascii_trim(text.substr(1, text.size() - 2));
  std::vector<ParamText> out;
  if (text.empty() || text == "void") return out;
  // Split at top-level commas; skip over literals and bracketed parts.
  std::vector<std::string_view> pieces;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"' || c == '\'') {
      // A ' between digits is a digit separator, not a character literal.
      if (c == '\'' && i > 0 && std::isxdigit(static_cast<unsigned char>(text[i - 1]))) continue;
      std::size_t end = skip_quoted(text, i);
      if (end == std::string_view::npos) return invalid_argument("unterminated literal");
      i = end - 1;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}' || c == '>') {
      --depth;
    } else if (c == ',' && depth == 0) {
      pieces.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  pieces.push_back(text.substr(start));
  for (std::string_view piece : pieces) {
    piece = ascii_trim(piece);
    // The first top-level '=' starts the default.
    std::size_t eq = std::string_view::npos;
    int d = 0;
    for (std::size_t i = 0; i < piece.size(); ++i) {
      char c = piece[i];
      if (c == '"' ||
          (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(piece[i - 1]))))) {
        std::size_t end = skip_quoted(piece, i);
        if (end == std::string_view::npos) break;
        i = end - 1;
      } else if (c == '(' || c == '[' || c == '{' || c == '<') {
        ++d;
      } else if (c == ')' || c == ']' || c == '}' || c == '>') {
        --d;
      } else if (c == '=' && d == 0) {
        eq = i;
        break;
      }
    }
    std::string_view decl = ascii_trim(piece.substr(0, eq));
    std::size_t n = decl.size();
    while (n > 0 && is_ident_char(decl[n - 1])) --n;
    std::string_view name = decl.substr(n);
    std::string_view type = ascii_trim(decl.substr(0, n));
    if (name.empty() || type.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
      return invalid_argument("parameter '" + std::string(piece) +
                              "' needs a name (it becomes the argument's name)");
    }
    ParamText p;
    p.name = std::string(name);
    if (eq != std::string_view::npos)
      p.default_text = std::string(ascii_trim(piece.substr(eq + 1)));
    out.push_back(std::move(p));
  }
  return out;
}

Result<json::value> parse_default_literal(std::string_view text, ArgType type) {
  text = ascii_trim(text);
  switch (type) {
    case ArgType::kString:
      return parse_string_literal(text);
    case ArgType::kInteger:
      return parse_integer_literal(text);
    case ArgType::kFloat:
      return parse_float_literal(text);
    case ArgType::kBoolean:
      if (text == "true") return json::value(true);
      if (text == "false") return json::value(false);
      return invalid_argument("not true or false");
  }
  return invalid_argument("unknown type");
}

void set_default(CommandArg& arg, json::value v) {
  auto checked = coerce_value(arg, v);
  if (!checked.ok()) {
    throw RegistryError("default of argument '" + arg.name + "': " + checked.error().message());
  }
  arg.default_value = std::move(*checked);
  arg.required = false;
}

void finish_macro_registration(RegisteredCommand cmd, std::string_view params_text,
                               std::size_t required) {
  CommandRegistry& reg = default_registry();
  std::string where = "ABX_REGISTER(" + cmd.name + "): ";
  auto params = parse_param_list(params_text);
  if (!params.ok()) {
    reg.record_error(where + params.error().message());
    return;
  }
  if (params->size() != cmd.args.size()) {
    reg.record_error(where + "could not read the parameter list " + std::string(params_text));
    return;
  }
  try {
    for (std::size_t i = 0; i < cmd.args.size(); ++i) {
      CommandArg& arg = cmd.args[i];
      const ParamText& p = (*params)[i];
      if (i < required) {
        arg.required = true;
        continue;
      }
      auto v = parse_default_literal(p.default_text, arg.type);
      if (!v.ok()) {
        reg.record_error(where + "the default of '" + arg.name + "' (" + p.default_text +
                         ") is not a " + std::string(arg_type_name(arg.type)) +
                         " literal; the schema can only publish literal defaults");
        return;
      }
      set_default(arg, std::move(*v));
    }
    reg.register_command(std::move(cmd));
  } catch (const RegistryError& e) {
    reg.record_error(where + e.what());
  }
}

}  // namespace abx::registry::detail
