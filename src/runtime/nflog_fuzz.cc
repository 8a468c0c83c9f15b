// Fuzz target: parse_nflog_messages never crashes on any buffer, at any alignment, and every
// event it returns is consistent with what the parser promises.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "abx/runtime/nflog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::size_t malformed = 0;
  auto events = abx::runtime::parse_nflog_messages(data, size, &malformed);
  // Each event needs at least a 16-byte nlmsghdr, the nfgenmsg and a 20-byte payload attribute.
  if (events.size() > size / 40) std::abort();
  for (const auto& ev : events) {
    if (ev.ipv6 && (ev.src != 0 || ev.dst != 0)) std::abort();
    if (ev.prefix.find('\0') != std::string::npos) std::abort();
  }
  // The same bytes one byte off alignment parse the same way.
  std::vector<uint8_t> shifted(size + 1);
  if (size > 0) std::memcpy(shifted.data() + 1, data, size);
  std::size_t malformed2 = 0;
  auto again = abx::runtime::parse_nflog_messages(shifted.data() + 1, size, &malformed2);
  if (again.size() != events.size() || malformed2 != malformed) std::abort();
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (again[i].prefix != events[i].prefix || again[i].dst != events[i].dst ||
        again[i].dport != events[i].dport || again[i].protocol != events[i].protocol)
      std::abort();
  }
  return 0;
}
