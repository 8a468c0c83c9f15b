// Fuzz target: decode() never crashes on hostile frames, and what it accepts survives a round
// trip through encode().
//
// Input: the frames, separated by '\n' (so seeds are readable text). Each input is decoded twice:
// as is with no key (the signature frame is then ignored, so the JSON parser is reached), and
// re-signed with a fixed key so the signature check passes and the same parse runs behind it.
#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "abx/interp/wire.h"

namespace {
namespace json = boost::json;

// Equality, except that doubles may differ in their last bits: Boost.JSON 1.81 parses numbers
// imprecisely (number_precision::precise came in 1.83), so serialize-then-parse can move a double
// by an ulp (base's json_fuzz aborts on {"a":14444444444001722586675415205661} for that reason).
bool same(const json::value& a, const json::value& b) {
  if (a.is_double() && b.is_double()) {
    double x = a.get_double(), y = b.get_double();
    return x == y || std::fabs(x - y) <= 1e-12 * std::max(std::fabs(x), std::fabs(y));
  }
  if (a.is_object() && b.is_object()) {
    const auto& o = a.get_object();
    const auto& p = b.get_object();
    if (o.size() != p.size()) return false;
    for (const auto& kv : o) {
      const json::value* w = p.if_contains(kv.key());
      if (w == nullptr || !same(kv.value(), *w)) return false;
    }
    return true;
  }
  if (a.is_array() && b.is_array()) {
    const auto& o = a.get_array();
    const auto& p = b.get_array();
    if (o.size() != p.size()) return false;
    for (std::size_t i = 0; i < o.size(); ++i) {
      if (!same(o[i], p[i])) return false;
    }
    return true;
  }
  return a == b;
}

bool same(const json::object& a, const json::object& b) {
  return same(json::value(a), json::value(b));
}

void check_round_trip(const abx::interp::Message& m, std::string_view key) {
  auto again = abx::interp::decode(abx::interp::encode(m, key), key);
  if (!again.ok() || again->identities != m.identities || !same(again->header, m.header) ||
      !same(again->parent_header, m.parent_header) || !same(again->metadata, m.metadata) ||
      !same(again->content, m.content) || again->buffers != m.buffers) {
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
