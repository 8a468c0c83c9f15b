// The addresses a cluster node blocks for its sandboxes (cluster_block.h).
#include "cluster_block.h"

#include <algorithm>

namespace abx::platform {
namespace {

// `host` as a /32, or nothing (with `why` in `unresolved`, prefixed by `what`).
void add_host(std::vector<egress::Cidr>& out, const std::string& host, const std::string& what,
              std::vector<std::string>* unresolved) {
  if (auto ip = egress::parse_ipv4(host); ip.ok()) {
    out.push_back(egress::Cidr{*ip, 32});
  } else if (unresolved != nullptr) {
    unresolved->push_back(what + " (not an IPv4 address)");
  }
}

std::vector<egress::Cidr> sorted_unique(std::vector<egress::Cidr> v) {
  std::sort(v.begin(), v.end(),
            [](const egress::Cidr& a, const egress::Cidr& b) { return a.addr < b.addr; });
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

std::vector<egress::Cidr> etcd_addresses(const std::vector<cluster::Endpoint>& endpoints,
                                         std::vector<std::string>* unresolved) {
  std::vector<egress::Cidr> out;
  for (const auto& e : endpoints) add_host(out, e.host, e.str(), unresolved);
  return sorted_unique(std::move(out));
}

std::vector<egress::Cidr> peer_addresses(const std::vector<cluster::NodeInfo>& nodes,
                                         std::string_view self,
                                         std::vector<std::string>* unresolved) {
  std::vector<egress::Cidr> out;
  for (const auto& n : nodes) {
    if (n.name == self) continue;
    auto ep = cluster::parse_api_url(n.api_url);
    if (ep.ok()) {
      add_host(out, ep->host, n.name + " " + n.api_url, unresolved);
    } else if (unresolved != nullptr) {
      unresolved->push_back(n.name + " " + n.api_url + " (" + ep.error().message() + ")");
    }
  }
  return sorted_unique(std::move(out));
}

}  // namespace abx::platform
