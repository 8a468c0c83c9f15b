// Fuzz target: .dockerignore parsing and matching never crash. The input's first line is the
// path matched against the patterns of the rest.
#include <cstdint>
#include <string_view>

#include "abx/image/dockerignore.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto nl = text.find('\n');
  std::string_view path = text.substr(0, nl == std::string_view::npos ? text.size() : nl);
  abx::image::DockerIgnore::Limits limits;
  limits.max_bytes = 16 * 1024;
  limits.max_pattern_bytes = 256;
  auto r = abx::image::DockerIgnore::parse(
      nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1), ".dockerignore",
      limits);
  if (r.ok()) (void)r->excluded(path.substr(0, 1024));
  return 0;
}
