// Fuzz target: Connect envelope decoding must never crash, over-read, or accept a frame whose
// length disagrees with the bytes present; parsed envelopes must re-encode to the same bytes, and
// the incremental reader must agree with the whole-body parser.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/connect/connect.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abx::connect;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto envs = parse_envelopes(in, 1 << 20);
  if (envs.ok()) {
    std::string again;
    for (const auto& e : *envs) again += encode_envelope(e.flags, e.payload);
    if (again != in) std::abort();
  }
  EnvelopeReader reader(1 << 20);
  reader.feed(in);
  std::size_t frames = 0;
  for (;;) {
    auto f = reader.next();
    if (!f.ok()) {
      if (envs.ok()) std::abort();  // the reader refused what the parser accepted
      break;
    }
    if (!*f) break;
    ++frames;
  }
  if (envs.ok() && (frames != envs->size() || !reader.empty())) std::abort();
  (void)parse_single_request(in);
  return 0;
}
