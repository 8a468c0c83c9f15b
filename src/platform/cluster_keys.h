// abxd --cluster: API keys shared between the nodes through etcd (docs/cluster.md, "Keys and
// teams"). Each node's store stays where keys are checked (a request never waits for etcd); at
// each lease renewal a node publishes the keys etcd lacks (their digests, never the keys) and the
// revocations it made, and imports what the other nodes published. A key made on any node (by
// `abxd keys create`, or the first start's) therefore works on every node within a renewal
// period (--cluster-ttl/3), and a revoked one stops working everywhere within the same time.
#pragma once

#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/cluster/etcd.h"
#include "abx/store/store.h"

namespace abx::platform {

struct KeyShare {
  int published = 0;  // records written to etcd (new keys, revocations)
  int imported = 0;   // keys added to, or revoked in, this node's store
  // Records that were not used, each with why (malformed, a clash of ids or digests).
  std::vector<std::string> problems;
};

// One round. Errors: etcd or the store could not be read (nothing was changed then).
Result<KeyShare> share_api_keys(store::Store& store, cluster::EtcdClient& etcd);

}  // namespace abx::platform
