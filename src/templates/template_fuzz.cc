// Fuzz target: template.yaml parsing never crashes, never accepts aliases or anchors, and every
// accepted template serialises and renders (or refuses) its custom commands without crashing.
#include <boost/json.hpp>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/templates/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = abx::templates::parse_template(text, "fuzz/template.yaml");
  if (!t.ok()) {
    // Every error names the file and a position.
    if (t.error().message().rfind("fuzz/template.yaml:", 0) != 0) std::abort();
    return 0;
  }
  (void)boost::json::serialize(t->to_json());
  for (const auto& c : t->custom_commands) {
    if (!abx::templates::validate_custom_command(c).ok()) std::abort();  // parse validated it
    (void)abx::templates::render_custom_command(c, boost::json::object{});
  }
  return 0;
}
