// abx::templates::Capability: what a sandbox's template lets callers use (template.yaml's
// `capabilities:`). The one enum: the SDK re-exports it as abx::client::Capability.
//
// Header-only on purpose: libabx's public headers include it, and libabx hides the templates
// library's symbols, so nothing here may need linking.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace abx::templates {

enum class Capability { kShell, kFiles, kCode, kPorts };

inline constexpr std::array<Capability, 4> kAllCapabilities{Capability::kShell, Capability::kFiles,
                                                            Capability::kCode, Capability::kPorts};
// What a template without a `capabilities:` key gets.
inline constexpr std::array<Capability, 3> kDefaultCapabilities{
    Capability::kShell, Capability::kFiles, Capability::kCode};

// The wire and template.yaml name: "shell", "files", "code", "ports".
constexpr std::string_view capability_name(Capability c) {
  switch (c) {
    case Capability::kShell:
      return "shell";
    case Capability::kFiles:
      return "files";
    case Capability::kCode:
      return "code";
    case Capability::kPorts:
      return "ports";
  }
  return "shell";
}

// The capability named `name` (exact, lower-case), or nullopt.
constexpr std::optional<Capability> parse_capability(std::string_view name) {
  for (Capability c : kAllCapabilities) {
    if (capability_name(c) == name) return c;
  }
  return std::nullopt;
}

}  // namespace abx::templates
