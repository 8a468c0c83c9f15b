// Fuzz target: the /files header parsers (Accept-Encoding for downloads, X-Metadata-* for
// uploads) never crash, and what they accept stays within their documented bounds.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  (void)abx::envd::download_coding(in);
  // Lines "name: value" become the header list of an upload.
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  std::string_view rest(in);
  while (!rest.empty()) {
    auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    headers.emplace_back(line.substr(0, colon), line.substr(colon + 1));
  }
  auto md = abx::envd::upload_metadata(headers);
  if (md.ok()) {
    if (md->size() > abx::envd::kMaxMetadataEntries) std::abort();
    std::size_t total = 0;
    for (const auto& [k, v] : *md) {
      if (k.empty() || k.size() > abx::envd::kMaxMetadataKeyBytes) std::abort();
      if (v.size() > abx::envd::kMaxMetadataValueBytes) std::abort();
      for (char c : k) {
        if (c >= 'A' && c <= 'Z') std::abort();  // keys are lowercased
        if (c <= 0x20 || c > 0x7e) std::abort();
      }
      for (char c : v) {
        if (c < 0x20 || c > 0x7e) std::abort();
      }
      total += k.size() + v.size();
    }
    if (total > abx::envd::kMaxMetadataTotalBytes) std::abort();
  }
  return 0;
}
