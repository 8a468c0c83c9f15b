#include "abx/registry/coerce.h"

#include <boost/json/monotonic_resource.hpp>
#include <cmath>
#include <string>

#include "abx/base/json.h"
#include "abx/base/try.h"

namespace abx::registry {
namespace json = boost::json;

namespace {

// The registry's names for a JSON value's kind: base's, with numbers told apart as its types are.
std::string_view kind_name(const json::value& v) {
  if (v.is_int64() || v.is_uint64()) return "integer";
  if (v.is_double()) return "float";
  return json_kind_name(v);
}

Error type_error(const CommandArg& arg, std::string_view want, const json::value& got) {
  return invalid_argument("argument '" + arg.name + "' must be " + std::string(want) + ", got " +
                          std::string(kind_name(got)));
}

}  // namespace

Result<json::value> coerce_value(const CommandArg& arg, const json::value& v) {
  switch (arg.type) {
    case ArgType::kInteger: {
      if (v.is_uint64()) {  // Boost.JSON only uses uint64 above INT64_MAX
        return invalid_argument("argument '" + arg.name + "' is out of range: " +
                                std::to_string(v.as_uint64()) + " exceeds int64");
      }
      if (!v.is_int64()) return type_error(arg, "an integer", v);
      std::int64_t i = v.as_int64();
      if ((arg.minimum && i < *arg.minimum) || (arg.maximum && i > *arg.maximum)) {
        return invalid_argument(
            "argument '" + arg.name + "' is out of range: " + std::to_string(i) + " not in [" +
            (arg.minimum ? std::to_string(*arg.minimum) : std::string("-inf")) + ", " +
            (arg.maximum ? std::to_string(*arg.maximum) : std::string("inf")) + "]");
      }
      return json::value(i);
    }
    case ArgType::kFloat: {
      double d;
      if (v.is_int64()) {
        d = static_cast<double>(v.as_int64());
      } else if (v.is_uint64()) {
        d = static_cast<double>(v.as_uint64());
      } else if (v.is_double()) {
        d = v.as_double();
      } else {
        return type_error(arg, "a number", v);
      }
      if (!std::isfinite(d) || (arg.max_magnitude && std::fabs(d) > *arg.max_magnitude)) {
        return invalid_argument("argument '" + arg.name + "' is out of range for a float");
      }
      return json::value(d);
    }
    case ArgType::kBoolean:
      if (!v.is_bool()) return type_error(arg, "true or false", v);
      return v;
    case ArgType::kString:
      if (!v.is_string()) return type_error(arg, "a string", v);
      return v;
  }
  return internal_error("unknown argument type");
}

Result<json::object> coerce_kwargs(const RegisteredCommand& cmd, const json::value& kwargs) {
  if (!kwargs.is_object()) {
    return invalid_argument("request body must be a JSON object of keyword arguments, got " +
                            std::string(kind_name(kwargs)));
  }
  return coerce_kwargs(cmd, kwargs.get_object());
}

Result<json::object> coerce_kwargs(const RegisteredCommand& cmd, const json::object& in) {
  // Unknown names first: a typo should be reported as such, not as a missing argument. The
  // message names a few of them, each cut short, so its size does not follow the body's.
  constexpr std::size_t kNamed = 8, kNameChars = 64;
  std::string unknown;
  std::size_t n_unknown = 0;
  for (const auto& kv : in) {
    if (cmd.find_arg(kv.key()) != nullptr) continue;
    if (++n_unknown > kNamed) continue;
    const std::string_view k = kv.key();
    unknown += (unknown.empty() ? "'" : ", '") + std::string(k.substr(0, kNameChars)) +
               (k.size() > kNameChars ? "...'" : "'");
  }
  if (n_unknown > 0) {
    if (n_unknown > kNamed) unknown += " and " + std::to_string(n_unknown - kNamed) + " more";
    std::string takes;
    for (const auto& a : cmd.args) takes += (takes.empty() ? "" : ", ") + a.name;
    return invalid_argument("unknown argument" + std::string(n_unknown == 1 ? "" : "s") + " " +
                            unknown + " for command '" + cmd.name + "' (it takes: " +
                            (takes.empty() ? std::string("no arguments") : takes) + ")");
  }
  json::object out;
  out.reserve(cmd.args.size());
  std::string missing;
  for (const auto& arg : cmd.args) {
    auto it = in.find(arg.name);
    if (it == in.end()) {
      if (arg.required) {
        missing += (missing.empty() ? "'" : ", '") + arg.name + "'";
      } else if (!arg.default_value.is_null()) {
        out.emplace(arg.name, arg.default_value);
      }
      continue;
    }
    ABX_ASSIGN_OR_RETURN(auto v, coerce_value(arg, it->value()));
    out.emplace(arg.name, std::move(v));
  }
  if (!missing.empty()) {
    return invalid_argument("missing required argument" +
                            std::string(missing.find(',') == std::string::npos ? "" : "s") + " " +
                            missing + " for command '" + cmd.name + "'");
  }
  return out;
}

Result<json::object> parse_kwargs(const RegisteredCommand& cmd, std::string_view body,
                                  const JsonLimits& limits) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return coerce_kwargs(cmd, json::object());
  }
  // The parsed body lives only until it is coerced (which copies what it keeps): it is made in
  // a monotonic arena on the stack, which a small body does not outgrow.
  unsigned char first_block[2048];
  json::monotonic_resource arena(first_block, sizeof first_block);
  ABX_ASSIGN_OR_RETURN(auto v, parse_json_strict(body, limits, &arena));
  return coerce_kwargs(cmd, v);
}

}  // namespace abx::registry
