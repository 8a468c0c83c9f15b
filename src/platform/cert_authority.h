// abxd's certificate authority for the egress proxy's TLS interception (E2B network.rules).
//
// The proxy decrypts a sandbox's TLS only for names a transform rule matches: it answers the
// sandbox's handshake with a leaf certificate for that very name, minted on the fly and signed by
// this CA, which every sandbox trusts (abxd installs the CA's certificate at create). Everything
// else stays an SNI-routed byte relay, never decrypted.
//
// The CA lives in abxd's home, `<home>/ca/`: `ca.key` (EC P-256, PEM, mode 0400, abxd's user
// only; never bound into a sandbox, never in a checkpoint, snapshot or fork: those hold sandbox
// state only) and `ca.crt` (the public certificate, 10 years). Made on first start; rotate by
// stopping abxd, removing the directory and starting abxd: new sandboxes get the new
// certificate, running ones keep trusting the old one until they are recreated.
//
// Leaves: one EC P-256 key per abxd run, certificates for one DNS name each (SAN), valid from an
// hour ago for 7 days, cached per name (at most kMaxCachedLeaves; re-minted after a day).
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "abx/base/error.h"

namespace abx::platform {

class CertAuthority {
 public:
  static constexpr std::size_t kMaxCachedLeaves = 4096;

  // Loads `<dir>/ca.key` and `<dir>/ca.crt`, or makes them when neither exists. A key without a
  // certificate (or the reverse), a key that is not abxd's user's alone, or an unreadable file is
  // an error (abxd does not start over someone's CA).
  static Result<std::unique_ptr<CertAuthority>> load_or_create(const std::string& dir);
  ~CertAuthority();

  const std::string& cert_pem() const { return cert_pem_; }
  const std::string& cert_path() const { return cert_path_; }

  // A TLS server context presenting a leaf for `name` (lower case), from the cache or minted now.
  // ALPN: h2 when the connection's SSL is marked at egress_alpn_h2_slot() (egress_proxy.h) and
  // the client offers it, else http/1.1 when the client offers it.
  Result<std::shared_ptr<boost::asio::ssl::context>> server_context(const std::string& name);
  std::size_t minted() const;  // leaves minted since start (tests: the cache is used)

 private:
  struct Keys;
  CertAuthority();
  std::unique_ptr<Keys> keys_;
  std::string cert_pem_, cert_path_;
  mutable std::mutex mu_;
  struct Leaf {
    std::shared_ptr<boost::asio::ssl::context> ctx;
    std::chrono::steady_clock::time_point made;
  };
  std::map<std::string, Leaf, std::less<>> leaves_;  // guarded by mu_
  std::size_t minted_ = 0;                           // guarded by mu_
};

}  // namespace abx::platform
