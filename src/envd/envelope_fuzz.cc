// Fuzz target: Connect envelope parsing must never crash, over-read, or accept a frame whose
// length disagrees with the bytes present; a parsed request must re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "envd/connect.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto envs = abx::envd::parse_envelopes(in, 1 << 20);
  if (envs.ok()) {
    std::string again;
    for (const auto& e : *envs) again += abx::envd::encode_envelope(e.flags, e.payload);
    if (again != in) std::abort();
  }
  (void)abx::envd::parse_single_request(in);
  return 0;
}
