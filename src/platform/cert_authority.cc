// abxd's CA for the egress proxy's TLS interception (cert_authority.h). OpenSSL 3.
#include "cert_authority.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "abx/base/try.h"
#include "abx/http/openssl_error.h"
#include "egress_proxy.h"
#include "sandbox_config.h"

namespace abx::platform {

namespace fs = std::filesystem;
namespace ssl = boost::asio::ssl;

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Bio = std::unique_ptr<BIO, BioFree>;

Error ssl_error(std::string what) {
  const bool queued = ERR_peek_error() != 0;
  return internal_error(what + (queued ? ": " + http::openssl_error_text() : std::string()));
}

Result<Pkey> new_key() {
  Pkey k(EVP_EC_gen("P-256"));
  if (!k) return ssl_error("generate an EC key");
  return k;
}

bool add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

bool random_serial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return false;
  bytes[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(bytes, sizeof bytes, nullptr);
  if (!bn) return false;
  bool ok = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nullptr;
  BN_free(bn);
  return ok;
}

// A certificate for `cn` with `key`'s public half, signed by `issuer_key` (self-signed when
// `issuer` is null).
Result<Cert> make_cert(const std::string& cn, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key,
                       long not_before_s, long valid_s, bool ca, const std::string& san) {
  Cert c(X509_new());
  if (!c || X509_set_version(c.get(), 2) != 1 || !random_serial(c.get()))
    return ssl_error("new certificate");
  X509_gmtime_adj(X509_getm_notBefore(c.get()), not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), valid_s);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("abx"),
                             -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(c.get(), issuer ? X509_get_subject_name(issuer) : name);
  X509* iss = issuer ? issuer : c.get();
  bool ok = true;
  if (ca) {
    ok = add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
         add_ext(c.get(), iss, NID_key_usage, "critical,keyCertSign,cRLSign") &&
         add_ext(c.get(), iss, NID_subject_key_identifier, "hash");
  } else {
    ok = add_ext(c.get(), iss, NID_basic_constraints, "critical,CA:FALSE") &&
         add_ext(c.get(), iss, NID_key_usage, "critical,digitalSignature") &&
         add_ext(c.get(), iss, NID_ext_key_usage, "serverAuth") &&
         add_ext(c.get(), iss, NID_subject_alt_name, ("DNS:" + san).c_str()) &&
         add_ext(c.get(), iss, NID_authority_key_identifier, "keyid:always");
  }
  if (!ok) return ssl_error("certificate extensions");
  if (X509_sign(c.get(), issuer_key, EVP_sha256()) == 0) return ssl_error("sign a certificate");
  return c;
}

Result<std::string> pem_of(X509* c) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), c) != 1) return ssl_error("PEM of a certificate");
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

Result<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return internal_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

struct CertAuthority::Keys {
  Pkey ca_key;
  Cert ca_cert;
  Pkey leaf_key;  // shared by every leaf of this run
};

CertAuthority::CertAuthority() : keys_(std::make_unique<Keys>()) {}
CertAuthority::~CertAuthority() = default;

Result<std::unique_ptr<CertAuthority>> CertAuthority::load_or_create(const std::string& dir) {
  std::unique_ptr<CertAuthority> ca(new CertAuthority());
  const fs::path key_path = fs::path(dir) / "ca.key", cert_path = fs::path(dir) / "ca.crt";
  std::error_code ec;
  const bool has_key = fs::exists(key_path, ec), has_cert = fs::exists(cert_path, ec);
  if (has_key != has_cert)
    return Error(ErrorCode::kFailedPrecondition,
                 "abxd's CA in " + dir + " has " +
                     (has_key ? "a key but no ca.crt" : "ca.crt but no key") +
                     ": remove the directory to make a new CA");
  if (!has_key) {
    ABX_ASSIGN_OR_RETURN(ca->keys_->ca_key, new_key());
    ABX_ASSIGN_OR_RETURN(ca->keys_->ca_cert,
                         make_cert("abx egress CA", ca->keys_->ca_key.get(), nullptr,
                                   ca->keys_->ca_key.get(), -3600, 10L * 365 * 86400, true, ""));
    Bio b(BIO_new(BIO_s_mem()));
    if (!b || PEM_write_bio_PrivateKey(b.get(), ca->keys_->ca_key.get(), nullptr, nullptr, 0,
                                       nullptr, nullptr) != 1)
      return ssl_error("PEM of the CA key");
    char* data = nullptr;
    long n = BIO_get_mem_data(b.get(), &data);
    fs::create_directories(dir, ec);
    fs::permissions(dir, fs::perms::owner_all, ec);
    ABX_TRY(write_run_secret(key_path.string(), std::string(data, static_cast<std::size_t>(n))));
    ABX_ASSIGN_OR_RETURN(std::string pem, pem_of(ca->keys_->ca_cert.get()));
    std::ofstream(cert_path) << pem;
  } else {
    struct stat st {};
    if (::stat(key_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & 077) != 0)
      return Error(ErrorCode::kFailedPrecondition,
                   key_path.string() +
                       " must be a regular file of abxd's user, not readable by "
                       "group or others");
    ABX_ASSIGN_OR_RETURN(std::string key_pem, read_file(key_path));
    ABX_ASSIGN_OR_RETURN(std::string cert_pem, read_file(cert_path));
    Bio kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
    ca->keys_->ca_key.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
    Bio cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
    ca->keys_->ca_cert.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
    if (!ca->keys_->ca_key || !ca->keys_->ca_cert) return ssl_error("reading abxd's CA in " + dir);
    if (X509_check_private_key(ca->keys_->ca_cert.get(), ca->keys_->ca_key.get()) != 1)
      return ssl_error(cert_path.string() + " is not " + key_path.string() + "'s certificate");
  }
  ABX_ASSIGN_OR_RETURN(ca->cert_pem_, pem_of(ca->keys_->ca_cert.get()));
  ca->cert_path_ = cert_path.string();
  ABX_ASSIGN_OR_RETURN(ca->keys_->leaf_key, new_key());
  return ca;
}

std::size_t CertAuthority::minted() const {
  std::lock_guard lock(mu_);
  return minted_;
}

Result<std::shared_ptr<ssl::context>> CertAuthority::server_context(const std::string& name) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    auto it = leaves_.find(name);
    if (it != leaves_.end() && now - it->second.made < std::chrono::hours(24))
      return it->second.ctx;
  }
  ABX_ASSIGN_OR_RETURN(Cert leaf, make_cert(name.size() <= 64 ? name : "abx leaf",
                                            keys_->leaf_key.get(), keys_->ca_cert.get(),
                                            keys_->ca_key.get(), -3600, 7L * 86400, false, name));
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  SSL_CTX* raw = ctx->native_handle();
  if (SSL_CTX_use_certificate(raw, leaf.get()) != 1 ||
      SSL_CTX_add1_chain_cert(raw, keys_->ca_cert.get()) != 1 ||
      SSL_CTX_use_PrivateKey(raw, keys_->leaf_key.get()) != 1)
    return ssl_error("TLS context for " + name);
  // h2 only on a connection the proxy marked (its upstream chose h2), else HTTP/1.1 (a client
  // offering h2 falls back).
  SSL_CTX_set_alpn_select_cb(
      raw,
      [](SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
         unsigned int inlen, void*) -> int {
        static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
        static const unsigned char kH2Http11[] = {2,   'h', '2', 8,   'h', 't',
                                                  't', 'p', '/', '1', '.', '1'};
        const bool h2 = SSL_get_ex_data(ssl, egress_alpn_h2_slot()) != nullptr;
        unsigned char* sel = nullptr;
        if (SSL_select_next_proto(&sel, outlen, h2 ? kH2Http11 : kHttp11,
                                  h2 ? sizeof kH2Http11 : sizeof kHttp11, in,
                                  inlen) != OPENSSL_NPN_NEGOTIATED)
          return SSL_TLSEXT_ERR_NOACK;
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
      },
      nullptr);
  std::lock_guard lock(mu_);
  if (leaves_.size() >= kMaxCachedLeaves) leaves_.clear();
  leaves_[name] = Leaf{ctx, now};
  ++minted_;
  return ctx;
}

}  // namespace abx::platform
