// API keys shared between the nodes of a cluster (cluster_keys.h).
#include "cluster_keys.h"

#include <map>

#include "abx/base/try.h"
#include "abx/cluster/membership.h"

namespace abx::platform {
namespace {

cluster::SharedKey to_cluster(const store::SharedApiKey& k) {
  return {k.info.id, k.info.team_id,       k.info.name,   k.info.prefix,
          k.digest,  k.info.created_at_ms, k.info.revoked};
}

store::SharedApiKey to_store(const cluster::SharedKey& k) {
  store::SharedApiKey s;
  s.info.id = k.id;
  s.info.team_id = k.team;
  s.info.name = k.name;
  s.info.prefix = k.prefix;
  s.info.created_at_ms = k.created_ms;
  s.info.revoked = k.revoked;
  s.digest = k.digest;
  return s;
}

}  // namespace

Result<KeyShare> share_api_keys(store::Store& store, cluster::EtcdClient& etcd) {
  ABX_ASSIGN_OR_RETURN(auto local, store.export_api_keys());
  ABX_ASSIGN_OR_RETURN(auto kvs, etcd.get_prefix(cluster::kKeysPrefix));
  KeyShare out;
  std::map<std::string, cluster::SharedKey> remote;
  for (const auto& kv : kvs) {
    auto k = cluster::decode_key(kv.value);
    if (!k.ok()) {
      out.problems.push_back(kv.key + ": " + k.error().message());
      continue;
    }
    if (kv.key != std::string(cluster::kKeysPrefix) + k->id) {
      out.problems.push_back(kv.key + ": names key " + k->id);
      continue;
    }
    remote.emplace(k->id, std::move(*k));
  }
  // Ours that etcd lacks, and our revocations of keys etcd has active. A record in etcd is only
  // ever added (if absent) or turned revoked: an active copy never overwrites a revocation.
  std::map<std::string, bool> ours;  // id -> revoked here
  for (const auto& l : local) {
    ours.emplace(l.info.id, l.info.revoked);
    const std::string key = std::string(cluster::kKeysPrefix) + l.info.id;
    auto r = remote.find(l.info.id);
    if (r == remote.end()) {
      ABX_ASSIGN_OR_RETURN(bool made, etcd.put_if_absent(key, cluster::encode_key(to_cluster(l))));
      out.published += made ? 1 : 0;
      continue;
    }
    if (r->second.digest != l.digest) {
      out.problems.push_back(key + ": another key of that id is in etcd (not shared)");
      continue;
    }
    if (l.info.revoked && !r->second.revoked) {
      cluster::SharedKey revoked = r->second;
      revoked.revoked = true;
      ABX_TRY(etcd.put(key, cluster::encode_key(revoked)));
      ++out.published;
    }
  }
  // Theirs: new keys and revocations (a key this store has as etcd has it costs no write).
  for (const auto& [id, r] : remote) {
    if (auto o = ours.find(id); o != ours.end() && (o->second || !r.revoked)) continue;
    auto changed = store.import_api_key(to_store(r));
    if (!changed.ok()) {
      out.problems.push_back(std::string(cluster::kKeysPrefix) + id + ": " +
                             changed.error().message());
      continue;
    }
    out.imported += *changed ? 1 : 0;
  }
  return out;
}

}  // namespace abx::platform
