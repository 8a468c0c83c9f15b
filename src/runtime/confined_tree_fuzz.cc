// Fuzz target: normalize_tree_path (the volume content API's `path`, runtime/confined_tree.h)
// never crashes; what it accepts is absolute, has no "." or ".." component, no empty component,
// no control character, and normalises to itself.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "abx/runtime/confined_tree.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  auto r = abx::runtime::normalize_tree_path(in);
  if (!r.ok()) return 0;
  const std::string& p = *r;
  if (p.empty() || p[0] != '/') std::abort();
  if (p != "/" && p.back() == '/') std::abort();
  for (unsigned char c : p)
    if (c < 0x20 || c == 0x7f) std::abort();
  std::size_t start = 1;
  while (p != "/" && start <= p.size()) {
    std::size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    const std::string_view part(p.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") std::abort();
    start = end + 1;
  }
  auto again = abx::runtime::normalize_tree_path(p);
  if (!again.ok() || *again != p) std::abort();
  return 0;
}
