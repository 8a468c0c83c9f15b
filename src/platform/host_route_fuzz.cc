// Fuzz target: Host routing never crashes; a sandbox route always has a valid id and port, and
// formatting it back as a Host routes to the same place (round trip).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "abx/platform/host_route.h"
#include "abx/store/sandbox_id.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  // Split the input into Host / id header / port header at NUL bytes.
  std::string parts[3];
  int i = 0;
  for (char c : in) {
    if (c == '\0' && i < 2) {
      ++i;
    } else {
      parts[i] += c;
    }
  }
  auto r = abx::platform::route_request(parts[0], parts[1], parts[2], "localhost");
  if (r.ok() && r->kind == abx::platform::Route::Kind::kSandbox) {
    if (!abx::store::SandboxId::routable(r->sandbox_id) || r->port == 0) std::abort();
    auto again = abx::platform::route_request(
        std::to_string(r->port) + "-" + r->sandbox_id + ".localhost", "", "", "localhost");
    if (!again.ok() || again->sandbox_id != r->sandbox_id || again->port != r->port) std::abort();
  }
  return 0;
}
