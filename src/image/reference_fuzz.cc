// Fuzz target: parse_reference never crashes, and what it accepts is canonical: str() parses
// back to the same reference.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/image/reference.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = abx::image::parse_reference(text);
  if (!r.ok()) {
    if (r.error().code() != abx::ErrorCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (r->transport == abx::image::Transport::kRegistry) {
    if (r->tag.empty() && r->digest.empty()) std::abort();
    if (!r->digest.empty() && !abx::image::valid_digest(r->digest)) std::abort();
  }
  auto again = abx::image::parse_reference(r->str());
  if (!again.ok() || again->str() != r->str() || again->registry != r->registry ||
      again->repository != r->repository || again->path != r->path || again->tag != r->tag ||
      again->digest != r->digest)
    std::abort();
  return 0;
}
