// Fuzz target: verifying arbitrary presented tokens never crashes and never accepts a token the
// key did not sign; minting then verifying always succeeds.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "abx/token/token.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  auto r = abx::token::verify_scoped("fuzz-key", in, 1);
  if (r.ok()) {
    // Only a token signed with "fuzz-key" may verify; re-minting must reproduce it exactly.
    auto again = abx::token::mint_scoped("fuzz-key", *r);
    if (!again.ok() || *again != in) std::abort();
  }
  auto minted = abx::token::mint_scoped("fuzz-key", {{"demo"}, 100});
  if (!minted.ok() || !abx::token::verify_scoped("fuzz-key", *minted, 1).ok()) std::abort();
  return 0;
}
