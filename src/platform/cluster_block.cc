// The addresses a cluster node blocks for its sandboxes (cluster_block.h).
#include "cluster_block.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

namespace abx::platform {
namespace {

void add_unique(std::vector<egress::Cidr>& out, const std::vector<egress::Cidr>& more) {
  for (const auto& c : more)
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
}

}  // namespace

std::vector<egress::Cidr> ipv4_addresses_of(const std::string& host, std::string* why) {
  if (auto ip = egress::parse_ipv4(host); ip.ok()) return {egress::Cidr{*ip, 32}};
  if (host.empty() || host.find(':') != std::string::npos || host.front() == '[') {
    // An IPv6 literal (sandboxes have no IPv6 route at all): nothing to ask a resolver.
    if (why != nullptr) *why = "not an IPv4 address or a name";
    return {};
  }
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(boost::asio::ip::tcp::v4(), host, "", ec);
  std::vector<egress::Cidr> out;
  if (!ec) {
    for (const auto& r : results) {
      const auto a = r.endpoint().address();
      if (a.is_v4()) add_unique(out, {egress::Cidr{a.to_v4().to_uint(), 32}});
    }
  }
  if (out.empty() && why != nullptr) *why = ec ? ec.message() : std::string("no IPv4 address");
  return out;
}

std::vector<egress::Cidr> etcd_addresses(const std::vector<cluster::Endpoint>& endpoints,
                                         std::vector<std::string>* unresolved) {
  std::vector<egress::Cidr> out;
  for (const auto& e : endpoints) {
    std::string why;
    auto found = ipv4_addresses_of(e.host, &why);
    if (found.empty() && unresolved != nullptr) unresolved->push_back(e.str() + " (" + why + ")");
    add_unique(out, found);
  }
  return out;
}

std::vector<egress::Cidr> peer_addresses(const std::vector<cluster::NodeInfo>& nodes,
                                         std::string_view self,
                                         std::vector<std::string>* unresolved) {
  std::vector<egress::Cidr> out;
  for (const auto& n : nodes) {
    if (n.name == self) continue;
    auto ep = cluster::parse_api_url(n.api_url);
    std::string why;
    std::vector<egress::Cidr> found;
    if (ep.ok()) {
      found = ipv4_addresses_of(ep->host, &why);
    } else {
      why = ep.error().message();
    }
    if (found.empty() && unresolved != nullptr)
      unresolved->push_back(n.name + " " + n.api_url + " (" + why + ")");
    add_unique(out, found);
  }
  std::sort(out.begin(), out.end(),
            [](const egress::Cidr& a, const egress::Cidr& b) { return a.addr < b.addr; });
  return out;
}

}  // namespace abx::platform
