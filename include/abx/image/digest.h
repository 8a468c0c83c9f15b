// Streaming sha256 (OpenSSL EVP) and "sha256:<hex>" digest strings: blob and layer digests,
// and the content digests template builds key their cache with.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace abx::image {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(std::string_view bytes);
  // "sha256:<64 lowercase hex>"; the hasher is spent afterwards.
  std::string finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// "sha256:<hex>" of `bytes`.
std::string sha256_digest(std::string_view bytes);

// The hex part of a valid digest ("sha256:<hex>" -> "<hex>"); callers check valid_digest first.
inline std::string_view digest_hex(std::string_view digest) { return digest.substr(7); }

}  // namespace abx::image
