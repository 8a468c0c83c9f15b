#include "proto_json.h"

#include "abx/base/json.h"

namespace abx::envd {

namespace json = boost::json;

Result<json::object> parse_message(std::string_view text) {
  auto v = parse_json_strict(text);
  if (!v.ok()) return invalid_argument("malformed JSON message: " + v.error().message());
  if (!v->is_object()) return invalid_argument("the request message must be a JSON object");
  return std::move(v->as_object());
}

const json::value* field(const json::object& o, std::string_view camel, std::string_view snake) {
  const json::value* v = o.if_contains(camel);
  if ((!v || v->is_null()) && !snake.empty()) v = o.if_contains(snake);
  if (v && v->is_null()) return nullptr;
  return v;
}

namespace {
Error type_error(std::string_view name, std::string_view want) {
  return invalid_argument("field '" + std::string(name) + "' must be " + std::string(want));
}
}  // namespace

Result<std::optional<std::string>> get_string(const json::object& o, std::string_view camel,
                                              std::string_view snake) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return type_error(camel, "a string");
  return std::optional<std::string>(std::string(v->as_string()));
}

Result<std::optional<bool>> get_bool(const json::object& o, std::string_view camel,
                                     std::string_view snake) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<bool>();
  if (!v->is_bool()) return type_error(camel, "true or false");
  return std::optional<bool>(v->as_bool());
}

Result<std::optional<std::uint32_t>> get_u32(const json::object& o, std::string_view camel,
                                             std::string_view snake) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<std::uint32_t>();
  std::int64_t n = -1;
  if (v->is_int64()) {
    n = v->as_int64();
  } else if (v->is_uint64()) {
    n = v->as_uint64() > 0xffffffffULL ? -1 : static_cast<std::int64_t>(v->as_uint64());
  } else if (v->is_double()) {
    double d = v->as_double();
    if (d >= 0 && d <= 4294967295.0 && d == static_cast<double>(static_cast<std::int64_t>(d))) {
      n = static_cast<std::int64_t>(d);
    }
  } else if (v->is_string()) {
    const auto& s = v->as_string();
    if (!s.empty() && s.size() <= 10 && s.find_first_not_of("0123456789") == json::string::npos) {
      n = std::stoll(std::string(s));
    }
  } else {
    return type_error(camel, "an unsigned 32-bit integer");
  }
  if (n < 0 || n > 0xffffffffLL) return type_error(camel, "an unsigned 32-bit integer");
  return std::optional<std::uint32_t>(static_cast<std::uint32_t>(n));
}

Result<std::optional<const json::object*>> get_object(const json::object& o, std::string_view camel,
                                                      std::string_view snake) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<const json::object*>();
  if (!v->is_object()) return type_error(camel, "an object");
  return std::optional<const json::object*>(&v->as_object());
}

Result<std::vector<std::string>> get_string_list(const json::object& o, std::string_view camel,
                                                 std::string_view snake) {
  std::vector<std::string> out;
  const auto* v = field(o, camel, snake);
  if (!v) return out;
  if (!v->is_array()) return type_error(camel, "an array of strings");
  for (const auto& e : v->as_array()) {
    if (!e.is_string()) return type_error(camel, "an array of strings");
    out.emplace_back(e.as_string());
  }
  return out;
}

Result<std::map<std::string, std::string>> get_string_map(const json::object& o,
                                                          std::string_view camel,
                                                          std::string_view snake) {
  std::map<std::string, std::string> out;
  const auto* v = field(o, camel, snake);
  if (!v) return out;
  if (!v->is_object()) return type_error(camel, "an object of strings");
  for (const auto& [k, e] : v->as_object()) {
    if (!e.is_string()) return type_error(camel, "an object of strings");
    out.emplace(std::string(k), std::string(e.as_string()));
  }
  return out;
}

Result<std::optional<std::string>> get_bytes(const json::object& o, std::string_view camel,
                                             std::string_view snake) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return type_error(camel, "base64 bytes");
  auto d = base64_decode(v->as_string());
  if (!d.ok()) return type_error(camel, "base64 bytes");
  return std::optional<std::string>(std::move(*d));
}

Result<std::optional<int>> get_enum(const json::object& o, std::string_view camel,
                                    std::string_view snake,
                                    const std::map<std::string, int, std::less<>>& names) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<int>();
  if (v->is_string()) {
    auto it = names.find(std::string_view(v->as_string()));
    if (it == names.end()) {
      return invalid_argument("field '" + std::string(camel) + "': unknown value '" +
                              std::string(v->as_string()) + "'");
    }
    return std::optional<int>(it->second);
  }
  if (v->is_int64() && v->as_int64() >= 0 && v->as_int64() < 1 << 20) {
    return std::optional<int>(static_cast<int>(v->as_int64()));
  }
  return type_error(camel, "an enum name or number");
}

}  // namespace abx::envd
