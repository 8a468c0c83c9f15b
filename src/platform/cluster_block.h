// What a sandbox of a cluster node must never reach besides its own host (docs/cluster.md,
// "Sandboxes cannot reach a node's internal API"): the etcd members the node speaks to and the
// cluster's other nodes. abxd blocks these addresses for every sandbox as it blocks the host's
// own: etcd's when it starts, the nodes' as they join and leave
// (SandboxNetwork::set_peers_blocked).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "abx/cluster/etcd.h"
#include "abx/cluster/membership.h"
#include "abx/egress/policy.h"

namespace abx::platform {

// Hosts are IPv4 addresses: the cluster's HTTP client connects to addresses only (no names), so
// a host that is not one is named in `unresolved` (docs/cluster.md: block it with --block-net).

// The etcd endpoints' addresses (each /32, sorted, no duplicates).
std::vector<egress::Cidr> etcd_addresses(const std::vector<cluster::Endpoint>& endpoints,
                                         std::vector<std::string>* unresolved);

// The addresses of the nodes other than `self` (the hosts of their apiUrl, each /32, sorted, no
// duplicates); a node whose apiUrl is malformed is named in `unresolved` too.
std::vector<egress::Cidr> peer_addresses(const std::vector<cluster::NodeInfo>& nodes,
                                         std::string_view self,
                                         std::vector<std::string>* unresolved);

}  // namespace abx::platform
