// Fuzz target: manifest, index and image config parsing never crash; what parse_manifest
// accepts has only valid digests, and a re-serialised OCI manifest parses back the same.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/image/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace abx::image;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  (void)manifest_kind(body);
  if (auto m = parse_manifest(body); m.ok()) {
    if (!valid_digest(m->config.digest)) std::abort();
    for (const auto& l : m->layers) {
      if (!valid_digest(l.digest) || l.size < 0) std::abort();
      (void)layer_compression(l.media_type);
    }
    auto again = parse_manifest(oci_manifest_json(m->config, m->layers));
    if (!again.ok() || again->layers.size() != m->layers.size()) std::abort();
  }
  if (auto idx = parse_index(body); idx.ok()) {
    (void)select_platform(*idx);
    (void)select_platform(*idx, "linux", "arm64");
  }
  (void)parse_image_config(body);
  return 0;
}
