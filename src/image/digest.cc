#include "abx/image/digest.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "abx/base/hex.h"

namespace abx::image {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  // Allocation failure of a few hundred bytes, or a libcrypto without sha256: nothing sensible
  // can continue (every digest check would be wrong), so this is an invariant, not an error.
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) std::abort();
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::string_view bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size());
}

std::string Sha256::finish() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_->md, out, &n);
  return "sha256:" + to_hex(out, n);
}

std::string sha256_digest(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

}  // namespace abx::image
