// Fuzz target: the Authorization parser never crashes and accepts only canonical forms; a
// fuzzed Authorization header never verifies against a fixed request.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "abx/auth/signing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  auto p = abx::auth::parse_authorization(in);
  if (p.ok()) {
    if (p->signature_hex.size() != 64 || p->access_key_id.empty() || p->signed_headers.empty()) {
      std::abort();
    }
    for (std::size_t i = 1; i < p->signed_headers.size(); ++i) {
      if (!(p->signed_headers[i - 1] < p->signed_headers[i])) std::abort();
    }
  }
  abx::auth::HttpRequest req{"GET",
                             "/sandboxes",
                             {{"Host", "localhost"},
                              {"x-abx-date", "20270115T080000Z"},
                              {"x-abx-nonce", std::string(32, 'a')},
                              {"x-abx-content-sha256", abx::auth::sha256_hex("")},
                              {"Authorization", in}}};
  abx::auth::VerifyOptions o;
  o.now_unix = *abx::auth::parse_date("20270115T080000Z");
  o.lookup_secret = [](std::string_view) -> abx::Result<std::optional<std::string>> {
    return std::optional<std::string>("fuzz-secret");
  };
  o.remember_nonce = [](std::string_view, std::int64_t) -> abx::Result<bool> { return false; };
  if (abx::auth::verify(req, "", o).ok()) std::abort();
  return 0;
}
