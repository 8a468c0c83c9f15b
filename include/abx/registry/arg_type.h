// abx::registry::ArgType: the one type enum of a command argument, shared by the registry (the
// command server's side) and libabx (client::ArgType is this type). Header-only and constexpr:
// libabx hides the registry library's symbols, so the SDK's API cannot call into it.
#pragma once

#include <optional>
#include <ostream>
#include <string_view>

namespace abx::registry {

enum class ArgType { kString, kInteger, kFloat, kBoolean };

// On the wire (GET /commands, template.yaml): "string" | "integer" | "float" | "boolean".
constexpr std::string_view arg_type_name(ArgType t) {
  switch (t) {
    case ArgType::kInteger:
      return "integer";
    case ArgType::kFloat:
      return "float";
    case ArgType::kBoolean:
      return "boolean";
    case ArgType::kString:
      break;
  }
  return "string";
}

constexpr std::optional<ArgType> parse_arg_type(std::string_view name) {
  for (ArgType t : {ArgType::kString, ArgType::kInteger, ArgType::kFloat, ArgType::kBoolean}) {
    if (arg_type_name(t) == name) return t;
  }
  return std::nullopt;
}

// `spec.type == "integer"`: a type compares equal to its wire name.
constexpr bool operator==(ArgType t, std::string_view name) { return arg_type_name(t) == name; }
inline std::ostream& operator<<(std::ostream& out, ArgType t) { return out << arg_type_name(t); }

}  // namespace abx::registry
