// Fuzz target: the strict JSON parser must never crash, and whatever it accepts must round-trip.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/base/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto v = abx::parse_json_strict(text);
  if (v.ok()) {
    auto again = abx::parse_json_strict(abx::to_json_string(*v));
    if (!again.ok() || *again != *v) std::abort();
  }
  return 0;
}
