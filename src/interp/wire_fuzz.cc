// Fuzz target: decode() never crashes on hostile frames, and what it accepts survives a round
// trip through encode().
//
// Input: the frames, separated by '\n' (so seeds are readable text). Each input is decoded twice:
// as is with no key (the signature frame is then ignored, so the JSON parser is reached), and
// re-signed with a fixed key so the signature check passes and the same parse runs behind it.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "abx/interp/wire.h"

namespace {

void check_round_trip(const abx::interp::Message& m, std::string_view key) {
  auto again = abx::interp::decode(abx::interp::encode(m, key), key);
  if (!again.ok() || again->identities != m.identities || again->header != m.header ||
      again->parent_header != m.parent_header || again->metadata != m.metadata ||
      again->content != m.content || again->buffers != m.buffers) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace interp = abx::interp;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> frames;
  for (std::size_t start = 0;;) {
    std::size_t nl = in.find('\n', start);
    frames.emplace_back(in.substr(start, nl == std::string_view::npos ? nl : nl - start));
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  interp::WireLimits limits{.max_frames = 32, .max_total_bytes = 1 << 20, .max_json_depth = 32};

  auto unsigned_msg = interp::decode(frames, "", limits);
  if (unsigned_msg.ok()) check_round_trip(*unsigned_msg, "fuzz-key");

  std::size_t delim = 0;
  while (delim < frames.size() && frames[delim] != interp::kDelimiter) ++delim;
  if (delim + 5 < frames.size()) {
    constexpr std::string_view kKey = "fuzz-key";
    frames[delim + 1] = interp::sign(
        kKey, {frames[delim + 2], frames[delim + 3], frames[delim + 4], frames[delim + 5]});
    auto signed_msg = interp::decode(frames, kKey, limits);
    // Re-signing can only change the size of the signature frame (checked against the limit).
    if (size + 64 < limits.max_total_bytes && signed_msg.ok() != unsigned_msg.ok()) std::abort();
    // One flipped signature digit must be rejected.
    frames[delim + 1][0] = frames[delim + 1][0] == '0' ? '1' : '0';
    if (interp::decode(frames, kKey, limits).ok()) std::abort();
  }
  return 0;
}
