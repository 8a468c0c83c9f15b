// Fuzz target: every parser of etcd's gateway answers and of the cluster's records, on arbitrary
// bytes: never a crash, and an answer is either parsed or an error (no silent default).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/cluster/etcd.h"
#include "abx/cluster/membership.h"
#include "abx/cluster/tls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto r = abx::cluster::parse_range_response(in); r.ok()) {
    for (const auto& kv : *r)
      if (kv.key.size() > size) std::abort();  // decoded base64 is never longer than its text
  }
  if (auto r = abx::cluster::parse_range(in); r.ok() && r->count < 0) std::abort();
  (void)abx::cluster::parse_txn_response(in);
  (void)abx::cluster::parse_delete_response(in);
  if (auto id = abx::cluster::parse_lease_grant(in); id.ok() && *id == 0) std::abort();
  if (auto ttl = abx::cluster::parse_keepalive(in); ttl.ok() && *ttl <= 0) std::abort();
  (void)abx::cluster::parse_ok(in);
  if (auto eps = abx::cluster::parse_endpoints(in); eps.ok()) {
    // https:// for all or none (a mix is refused), never more than 16, never an empty host.
    if (eps->empty() || eps->size() > 16) std::abort();
    for (const auto& e : *eps)
      if (e.tls != eps->front().tls || e.host.empty() || e.port == 0) std::abort();
  }
  if (auto hp = abx::cluster::parse_host_port(in, "--cluster-listen"); hp.ok() && hp->host.empty())
    std::abort();
  (void)abx::cluster::decode_node(in);
  (void)abx::cluster::decode_placement(in);
  if (auto k = abx::cluster::decode_key(in); k.ok()) {
    // What decodes encodes to a record that decodes the same.
    auto again = abx::cluster::decode_key(abx::cluster::encode_key(*k));
    if (!again.ok() || again->digest != k->digest || again->revoked != k->revoked) std::abort();
  }
  (void)abx::cluster::parse_api_url(in);
  return 0;
}
