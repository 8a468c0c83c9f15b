#include "proto_json.h"

#include "abx/base/json.h"
#include "abx/base/try.h"

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
// `at`.camel, the field's path in its errors.
std::string path(std::string_view at, std::string_view camel) { return json_path_key(at, camel); }

Error type_error(std::string_view at, std::string_view name, std::string_view want,
                 const json::value& got) {
  return invalid_argument(path(at, name) + ": expected " + std::string(want) + ", got " +
                          std::string(json_kind_name(got)));
}
}  // namespace

Result<std::optional<std::string>> get_string(const json::object& o, std::string_view camel,
                                              std::string_view snake, std::string_view at) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<std::string>();
  ABX_ASSIGN_OR_RETURN(std::string s, json_as_string(*v, path(at, camel)));
  return std::optional<std::string>(std::move(s));
}

Result<std::optional<bool>> get_bool(const json::object& o, std::string_view camel,
                                     std::string_view snake, std::string_view at) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<bool>();
  ABX_ASSIGN_OR_RETURN(bool b, json_as_bool(*v, path(at, camel)));
  return std::optional<bool>(b);
}

// proto3 JSON also takes a 32-bit integer as a decimal string, or as a number with a zero
// fraction (1.0): this one is the protocol's own.
Result<std::optional<std::uint32_t>> get_u32(const json::object& o, std::string_view camel,
                                             std::string_view snake, std::string_view at) {
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
    return type_error(at, camel, "an unsigned 32-bit integer", *v);
  }
  if (n < 0 || n > 0xffffffffLL) {
    return invalid_argument(path(at, camel) + ": must be an unsigned 32-bit integer");
  }
  return std::optional<std::uint32_t>(static_cast<std::uint32_t>(n));
}

Result<std::optional<const json::object*>> get_object(const json::object& o, std::string_view camel,
                                                      std::string_view snake, std::string_view at) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<const json::object*>();
  ABX_ASSIGN_OR_RETURN(const json::object* obj, json_as_object(*v, path(at, camel)));
  return std::optional<const json::object*>(obj);
}

Result<std::vector<std::string>> get_string_list(const json::object& o, std::string_view camel,
                                                 std::string_view snake, std::string_view at) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::vector<std::string>();
  return json_as_string_list(*v, path(at, camel));
}

Result<std::map<std::string, std::string>> get_string_map(const json::object& o,
                                                          std::string_view camel,
                                                          std::string_view snake,
                                                          std::string_view at) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::map<std::string, std::string>();
  return json_as_string_map(*v, path(at, camel));
}

Result<std::optional<std::string>> get_bytes(const json::object& o, std::string_view camel,
                                             std::string_view snake, std::string_view at) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return type_error(at, camel, "base64 bytes", *v);
  auto d = base64_decode(v->as_string());
  if (!d.ok()) return invalid_argument(path(at, camel) + ": not base64 bytes");
  return std::optional<std::string>(std::move(*d));
}

Result<std::optional<int>> get_enum(const json::object& o, std::string_view camel,
                                    std::string_view snake,
                                    const std::map<std::string, int, std::less<>>& names,
                                    std::string_view at) {
  const auto* v = field(o, camel, snake);
  if (!v) return std::optional<int>();
  if (v->is_string()) {
    auto it = names.find(std::string_view(v->as_string()));
    if (it == names.end()) {
      return invalid_argument(path(at, camel) + ": unknown value '" + std::string(v->as_string()) +
                              "'");
    }
    return std::optional<int>(it->second);
  }
  if (v->is_int64() && v->as_int64() >= 0 && v->as_int64() < 1 << 20) {
    return std::optional<int>(static_cast<int>(v->as_int64()));
  }
  return type_error(at, camel, "an enum name or number", *v);
}

}  // namespace abx::envd
