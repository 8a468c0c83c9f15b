// Fuzz target: WWW-Authenticate challenges and Docker auth files from arbitrary bytes never
// crash, and a parsed challenge always has a lower-case token scheme.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "registry_auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto c = abx::image::detail::parse_challenge(in);
  if (c.ok()) {
    if (c->scheme.empty()) std::abort();
    for (char ch : c->scheme) {
      if (std::isupper(static_cast<unsigned char>(ch))) std::abort();
    }
  }
  (void)abx::image::detail::credentials_from_auth_json(in, "localhost:5000");
  (void)abx::image::detail::credentials_from_auth_json(in, "docker.io");
  return 0;
}
