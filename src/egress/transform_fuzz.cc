// Fuzz target: E2B's network.rules parser never crashes on hostile JSON, and every rule set it
// accepts keeps its limits, never holds a header name or value the proxy could not send as one
// header line, and survives its own revealed JSON unchanged.
#include <boost/json.hpp>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/base/json.h"
#include "abx/egress/transform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace egress = abx::egress;
  auto v = abx::parse_json_strict(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!v) return 0;
  auto r = egress::parse_transforms(*v, "network.rules");
  if (!r) {
    if (r.error().message().find("network.rules") == std::string::npos) std::abort();
    return 0;
  }
  if (r->hosts.size() > egress::kMaxTransformHosts) std::abort();
  for (const auto& h : r->hosts) {
    if (h.rules.size() > egress::kMaxTransformsPerHost) std::abort();
    for (const auto& [name, value] : h.headers()) {
      if (!egress::check_header_name(name).empty()) std::abort();
      if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) std::abort();
    }
    if (r->match(h.pattern.wildcard ? "x." + h.pattern.name : h.pattern.name) == nullptr)
      std::abort();
  }
  auto again = egress::parse_transforms(r->to_json(true), "network.rules");
  if (!again || again->hosts.size() != r->hosts.size()) std::abort();
  for (std::size_t i = 0; i < r->hosts.size(); ++i)
    if (!(again->hosts[i].pattern == r->hosts[i].pattern) ||
        again->hosts[i].headers() != r->hosts[i].headers())
      std::abort();
  return 0;
}
