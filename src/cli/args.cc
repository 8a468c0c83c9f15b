// `-a name=value` → a typed kwargs object. The text after '=' is taken literally (no JSON, no
// shell): integers must be plain decimal within int64 (and the argument's range), floats finite
// decimals, booleans true/false (or 1/0), strings anything. The converted value then passes
// client::ArgSpec::check, the same check (type and range) the command server applies.
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <set>

#include "abx/base/try.h"
#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

std::string arg_list(const client::CommandEntry& e) {
  std::string s;
  for (const auto& a : e.args) {
    s += (s.empty() ? "" : ", ") + a.name + ":" + std::string(client::arg_type_name(a.type));
  }
  return s.empty() ? "none" : s;
}

Result<json::value> convert(const client::ArgSpec& a, const std::string& text) {
  auto bad = [&](std::string_view want) {
    return invalid_argument("argument '" + a.name + "': expected " + std::string(want) + ", got '" +
                            text + "'");
  };
  // from_chars takes no leading '+'; a command line often has one.
  auto number = [&](auto& v) {
    const char* b = text.data();
    const char* e = b + text.size();
    if (b != e && *b == '+') ++b;
    auto [p, ec] = std::from_chars(b, e, v);
    return !text.empty() && ec == std::errc() && p == e;
  };
  switch (a.type) {
    case client::ArgType::kString:
      return json::value(text);
    case client::ArgType::kInteger: {
      std::int64_t v = 0;
      if (!number(v)) return bad("an integer");
      return json::value(v);
    }
    case client::ArgType::kFloat: {
      double v = 0;
      if (!number(v) || !std::isfinite(v)) return bad("a number");
      return json::value(v);
    }
    case client::ArgType::kBoolean:
      if (text == "true" || text == "1") return json::value(true);
      if (text == "false" || text == "0") return json::value(false);
      return bad("true or false");
  }
  return invalid_argument("argument '" + a.name + "' has an unknown type");
}

}  // namespace

Result<json::object> parse_command_args(const client::CommandEntry& entry,
                                        const std::vector<std::string>& items) {
  json::object out;
  for (const auto& it : items) {
    auto eq = it.find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument("'-a " + it + "' is not NAME=VALUE");
    }
    std::string name = it.substr(0, eq);
    const auto* a = entry.find_arg(name);
    if (a == nullptr) {
      return invalid_argument("command '" + entry.name + "' has no argument '" + name +
                              "' (arguments: " + arg_list(entry) + ")");
    }
    if (out.contains(name)) return invalid_argument("argument '" + name + "' given twice");
    auto v = convert(*a, it.substr(eq + 1));
    if (!v.ok()) return v.error();
    // The same type and range check as the server (e.g. an int32 parameter's range).
    if (auto checked = a->check(*v); !checked.ok()) return checked.error();
    out[name] = std::move(*v);
  }
  for (const auto& a : entry.args) {
    if (a.required && !out.contains(a.name)) {
      return invalid_argument("command '" + entry.name + "' needs argument '" + a.name + "' (" +
                              std::string(client::arg_type_name(a.type)) + "): add -a " + a.name +
                              "=…");
    }
  }
  return out;
}

}  // namespace abx::cli
