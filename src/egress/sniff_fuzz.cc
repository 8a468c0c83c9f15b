// Fuzz target: the SNI and Host sniffers never crash, never ask for more once given
// kMaxSniffBytes, and every name they return is one the policy can match (lower case,
// [a-z0-9.-_], 1..253 bytes, no trailing dot).
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  check(abx::egress::tls_server_name(in), size);
  check(abx::egress::http_host(in), size);
  return 0;
}
