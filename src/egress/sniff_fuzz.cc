// Fuzz target: the SNI and Host sniffers never crash, never ask for more once given
// kMaxSniffBytes, never change an answer as more bytes arrive, and every name they return is
// one the policy can match (lower case, [a-z0-9.-_], 1..253 bytes, no trailing dot).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/egress/sniff.h"

namespace {

void check(const abx::egress::SniffResult& r, std::size_t size) {
  using Kind = abx::egress::SniffResult::Kind;
  if (r.kind == Kind::kNeedMore && size >= abx::egress::kMaxSniffBytes) std::abort();
  if (r.kind == Kind::kMalformed && r.reason.empty()) std::abort();
  if (r.kind != Kind::kFound) return;
  if (r.name.empty() || r.name.size() > abx::egress::kMaxSniffedName || r.name.back() == '.') {
    std::abort();
  }
  for (char c : r.name) {
    bool good =
        (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!good) std::abort();
  }
}

// A prefix either needs more or already gives the whole input's answer: bytes that arrive
// later never change a decision (the proxy acts on the first answer that is not need_more).
template <class Parse>
void check_prefix(Parse parse, std::string_view in) {
  using Kind = abx::egress::SniffResult::Kind;
  abx::egress::SniffResult full = parse(in);
  check(full, in.size());
  abx::egress::SniffResult half = parse(in.substr(0, in.size() / 2));
  check(half, in.size() / 2);
  if (half.kind == Kind::kNeedMore) return;
  if (half.kind != full.kind || half.name != full.name) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  check_prefix(abx::egress::tls_server_name, in);
  check_prefix(abx::egress::http_host, in);
  return 0;
}
