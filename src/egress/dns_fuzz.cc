// Fuzz target: DNS parsing never crashes on hostile bytes, and every query it accepts yields a
// reply that parses back as a response to the same question with the same id (round trip).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "abx/egress/dns.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dns = abx::egress::dns;
  std::span<const std::uint8_t> msg(data, size);
  (void)dns::parse_response(msg);
  auto q = dns::parse_query(msg, dns::kMaxTcpMessage);
  if (q.ok()) {
    if (q->question.wire_name.size() > dns::kMaxNameWire) std::abort();
    auto reply = dns::build_reply(*q, dns::Rcode::kRefused);
    auto r = dns::parse_response(reply);
    if (!r.ok() || r->id != q->id || !r->question.same(q->question) ||
        r->rcode() != dns::Rcode::kRefused || !r->a.empty()) {
      std::abort();
    }
  }
  return 0;
}
