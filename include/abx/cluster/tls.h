// abxd --cluster's TLS settings, checked together before anything starts (docs/cluster.md):
//   - to etcd: https:// endpoints, their CA bundle (--etcd-ca) and, for etcd's
//     --client-cert-auth, this node's client certificate and key (--etcd-cert, --etcd-key);
//   - between nodes: every node-to-node call goes to the other node's internal endpoint
//     (--cluster-listen HOST:PORT, mutual TLS), each node presenting a certificate the cluster CA
//     signed (--cluster-ca, --cluster-cert, --cluster-key) and verifying the other's.
// No file is read here except for the keys' modes: a private key must be a regular file of
// abxd's user that its group and others cannot read (0400 or 0600), as abxd's egress CA key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/cluster/etcd.h"

namespace abx::cluster {

struct TlsFiles {
  std::string ca;    // PEM bundle of the CA(s) the peer's certificate must chain to
  std::string cert;  // PEM certificate (chain) presented to the peer
  std::string key;   // its PEM private key
  bool empty() const { return ca.empty() && cert.empty() && key.empty(); }
};

struct TlsSettings {
  TlsFiles etcd;       // --etcd-ca, --etcd-cert, --etcd-key
  TlsFiles node;       // --cluster-ca, --cluster-cert, --cluster-key
  std::string listen;  // --cluster-listen HOST:PORT (the internal endpoint)
};

struct TlsPlan {
  bool etcd_tls = false;  // the etcd endpoints are https://
  bool node_tls = false;  // nodes talk mutual TLS on their internal endpoints
  std::string listen_host;
  std::uint16_t listen_port = 0;  // 0: any free port (tests; needs --advertise-url)
  std::string advertise_url;      // what this node registers: https://… with node TLS
};

// Checks the settings against the etcd endpoints and --advertise-url (empty: the default, from
// `listen_default`, abxd's --listen). kInvalidArgument naming the flag: TLS files given without
// https:// endpoints (or the reverse), a certificate without its key, node TLS without one of
// its three files or without --cluster-listen, an advertised URL of the wrong scheme, a key
// readable by group or others.
Result<TlsPlan> check_tls_settings(const TlsSettings& settings,
                                   const std::vector<Endpoint>& endpoints,
                                   std::string_view advertise_url, std::string_view listen_default);

// A private key file abxd may use: a regular file, owned by abxd's user, no permission for group
// or others. kInvalidArgument naming `flag` and the file otherwise (kNotFound when absent).
Status check_key_file(const std::string& path, std::string_view flag);

// HOST and PORT of "HOST:PORT" (port 0 allowed); kInvalidArgument naming `flag` otherwise.
Result<Endpoint> parse_host_port(std::string_view text, std::string_view flag);

}  // namespace abx::cluster
