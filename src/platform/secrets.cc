// Secrets: bodies, JSON and the sealing of values (secrets.h).
#include "secrets.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>

#include "abx/base/ascii.h"
#include "abx/base/base64.h"
#include "abx/base/hex.h"
#include "abx/base/json.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/egress/transform.h"
#include "sandbox_config.h"

namespace abx::platform {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSealPrefix = "v1.";
constexpr std::size_t kKeyBytes = 32, kNonceBytes = 12, kTagBytes = 16;

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

std::string aad_of(std::string_view team, std::string_view id) {
  return std::string(team) + "\n" + std::string(id);
}

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

Result<std::map<std::string, std::string>> read_metadata(const json::object& body) {
  const json::value* m = json_find(body, "metadata");
  ABX_ASSIGN_OR_RETURN(auto out, json_optional_string_map(body, "metadata", ""));
  if (m == nullptr) return out;
  if (out.size() > kMaxSecretMetadataEntries)
    return invalid_argument("metadata: at most " + std::to_string(kMaxSecretMetadataEntries) +
                            " entries");
  std::size_t total = 0;
  for (const auto& [k, v] : out) {
    if (k.empty() || k.size() > kMaxSecretMetadataKeyBytes)
      return invalid_argument("metadata: a key has 1.." +
                              std::to_string(kMaxSecretMetadataKeyBytes) + " bytes");
    if (v.size() > kMaxSecretMetadataValueBytes)
      return invalid_argument(json_path_key("metadata", k) + ": at most " +
                              std::to_string(kMaxSecretMetadataValueBytes) + " bytes");
    total += k.size() + v.size();
  }
  if (total > kMaxSecretMetadataBytes)
    return invalid_argument("metadata: at most " + std::to_string(kMaxSecretMetadataBytes) +
                            " bytes of keys and values in all");
  return out;
}

}  // namespace

Result<SecretSpec> parse_secret_body(const json::object& body, bool create) {
  for (const auto& kv : body) {
    const std::string_view k = kv.key();
    if (k != "value" && k != "metadata" && !(create && k == "name"))
      return invalid_argument(
          std::string(k.substr(0, 64)) + " is not a field of " +
          (create ? "a new secret (name, value, metadata)" : "a secret update (value, metadata)"));
  }
  SecretSpec spec;
  if (create) {
    ABX_ASSIGN_OR_RETURN(std::string name, json_required_string(body, "name", ""));
    spec.name = ascii_lower(name);
    if (!egress::valid_secret_name(spec.name))
      return invalid_argument(
          "name: a secret name is 1.." + std::to_string(egress::kMaxSecretNameBytes) +
          " characters of a-z, 0-9, '.', '_' and '-' (lower-cased), starting with a letter or "
          "digit, and not sec_… (reserved for secret ids)");
  }
  // The value's own text is never in a message.
  const json::value* v = json_find(body, "value");
  if (v == nullptr) return invalid_argument("value is required");
  if (!v->is_string()) return invalid_argument("value must be a string");
  const std::string_view value = v->get_string();
  if (value.size() > kMaxSecretValueBytes)
    return invalid_argument("value: at most " + std::to_string(kMaxSecretValueBytes) + " bytes");
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f)
      return invalid_argument(
          "value: a control character (CR, LF, NUL, ...): a secret is put in an HTTP header");
  }
  spec.value = std::string(value);
  if (json_find(body, "metadata") != nullptr) {
    ABX_ASSIGN_OR_RETURN(auto m, read_metadata(body));
    spec.metadata = std::move(m);
  }
  return spec;
}

json::object secret_json(const store::SecretRecord& r) {
  json::object md;
  for (const auto& [k, v] : r.metadata) md[k] = v;
  return json::object{{"secretID", r.id},
                      {"name", r.name},
                      {"currentVersion", r.version},
                      {"metadata", std::move(md)},
                      {"createdAt", rfc3339_ms(r.created_at_ms)},
                      {"updatedAt", rfc3339_ms(r.updated_at_ms)}};
}

Result<SecretVault> SecretVault::with_key(std::string_view key) {
  if (key.size() != kKeyBytes) return invalid_argument("a secrets key has 32 bytes");
  SecretVault v;
  v.key_ = std::string(key);
  return v;
}

Result<SecretVault> SecretVault::open(const fs::path& key_file) {
  struct stat st {};
  if (::lstat(key_file.c_str(), &st) != 0) {
    if (errno != ENOENT) return internal_error("stat " + key_file.string() + " failed");
    unsigned char key[kKeyBytes];
    if (RAND_bytes(key, sizeof key) != 1) return internal_error("RAND_bytes failed");
    // Written whole under another name, then renamed: a crash leaves no half key.
    const std::string tmp = key_file.string() + ".tmp";
    std::error_code ec;
    fs::remove(tmp, ec);
    ABX_TRY(write_run_secret(tmp, to_hex(key, sizeof key) + "\n"));
    fs::rename(tmp, key_file, ec);
    if (ec) return internal_error("rename " + tmp + ": " + ec.message());
    return with_key(std::string_view(reinterpret_cast<const char*>(key), sizeof key));
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return Error(ErrorCode::kFailedPrecondition,
                 key_file.string() +
                     " must be a regular file of abxd's user, not readable by group or others");
  std::ifstream in(key_file);
  std::string text;
  std::getline(in, text);
  auto key = from_hex(text);
  if (!in || !key || key->size() != kKeyBytes)
    return Error(ErrorCode::kFailedPrecondition,
                 key_file.string() + " does not hold a secrets key (64 hex digits)");
  return with_key(*key);
}

Result<std::string> SecretVault::seal(std::string_view team, std::string_view id,
                                      std::string_view value) const {
  unsigned char nonce[kNonceBytes];
  if (RAND_bytes(nonce, sizeof nonce) != 1) return internal_error("RAND_bytes failed");
  Ctx ctx(EVP_CIPHER_CTX_new());
  const std::string aad = aad_of(team, id);
  std::string out(reinterpret_cast<const char*>(nonce), sizeof nonce);
  out.resize(kNonceBytes + value.size() + kTagBytes);
  auto* ct = reinterpret_cast<unsigned char*>(out.data()) + kNonceBytes;
  int n = 0, fin = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, bytes(key_), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), ct, &n, bytes(value), static_cast<int>(value.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), ct + n, &fin) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, ct + value.size()) != 1)
    return internal_error("sealing a secret failed (OpenSSL)");
  return std::string(kSealPrefix) + base64_encode(out);
}

Result<std::string> SecretVault::open_value(const store::SecretRecord& r) const {
  auto bad = [&] {
    return Error(ErrorCode::kFailedPrecondition,
                 "secret '" + r.name +
                     "' does not open with this abxd's secrets.key (written with another "
                     "key?): write its value again");
  };
  if (!std::string_view(r.sealed).starts_with(kSealPrefix)) return bad();
  auto raw = base64_decode(std::string_view(r.sealed).substr(kSealPrefix.size()));
  if (!raw || raw->size() < kNonceBytes + kTagBytes) return bad();
  const std::size_t len = raw->size() - kNonceBytes - kTagBytes;
  const auto* nonce = bytes(*raw);
  const auto* ct = nonce + kNonceBytes;
  std::string tag = raw->substr(kNonceBytes + len);
  const std::string aad = aad_of(r.team_id, r.id);
  std::string out(len, '\0');
  Ctx ctx(EVP_CIPHER_CTX_new());
  int n = 0, fin = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, bytes(key_), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &n, ct,
                        static_cast<int>(len)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + n, &fin) != 1)
    return bad();
  return out;
}

Result<std::string> SecretVault::resolve(store::Store& store, std::string_view team,
                                         std::string_view name) const {
  if (std::string_view(name).starts_with("sec_"))
    return not_found("secret '" + std::string(name) + "' not found");
  ABX_ASSIGN_OR_RETURN(store::SecretRecord r, store.get_secret(team, name));
  return open_value(r);
}

}  // namespace abx::platform
