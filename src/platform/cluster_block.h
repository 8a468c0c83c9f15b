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

// `host`'s IPv4 addresses: itself when it is one, else what the host's resolver answers for it
// (names in /etc/hosts included); none when it has none (an IPv6 literal, a name that does not
// resolve): `why` then says so.
std::vector<egress::Cidr> ipv4_addresses_of(const std::string& host, std::string* why);

// Every address of the etcd endpoints (each /32, no duplicates); the endpoints none was found for
// are named in `unresolved`.
std::vector<egress::Cidr> etcd_addresses(const std::vector<cluster::Endpoint>& endpoints,
                                         std::vector<std::string>* unresolved);

// Every address of the nodes other than `self` (the hosts of their apiUrl, each /32, sorted, no
// duplicates); a node whose apiUrl is malformed or does not resolve is named in `unresolved`.
std::vector<egress::Cidr> peer_addresses(const std::vector<cluster::NodeInfo>& nodes,
                                         std::string_view self,
                                         std::vector<std::string>* unresolved);

}  // namespace abx::platform
