// The addresses a cluster node blocks for its sandboxes.
#include "cluster_block.h"

#include <gtest/gtest.h>

namespace abx::platform {
namespace {

cluster::NodeInfo node(std::string name, std::string url) {
  cluster::NodeInfo n;
  n.name = std::move(name);
  n.api_url = std::move(url);
  return n;
}

TEST(ClusterBlock, EveryOtherNodesAddressOnceAndNeverItsOwn) {
  std::vector<std::string> unresolved;
  auto got =
      peer_addresses({node("n1", "http://10.0.0.1:49999"), node("n2", "https://10.0.0.3:49443"),
                      node("n3", "http://10.0.0.2:49999"), node("n4", "http://10.0.0.3:50000")},
                     "n1", &unresolved);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].str(), "10.0.0.2");
  EXPECT_EQ(got[1].str(), "10.0.0.3");
  EXPECT_TRUE(unresolved.empty());
}

TEST(ClusterBlock, WhatIsNotAnIPv4AddressIsNamedNotBlocked) {
  std::vector<std::string> unresolved;
  auto got = peer_addresses({node("n2", "http://abx-n2:49999"), node("n3", "ftp://x"),
                             node("n4", "http://[::1]:49999"), node("n5", "http://10.0.0.5:1")},
                            "n1", &unresolved);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].str(), "10.0.0.5");
  ASSERT_EQ(unresolved.size(), 3u);
  EXPECT_EQ(unresolved[0], "n2 http://abx-n2:49999 (not an IPv4 address)");
  EXPECT_NE(unresolved[1].find("n3 ftp://x ("), std::string::npos) << unresolved[1];
  EXPECT_NE(unresolved[2].find("n4"), std::string::npos) << unresolved[2];
}

TEST(ClusterBlock, EtcdsEndpointsEachOnce) {
  auto endpoints = cluster::parse_endpoints("http://10.0.0.10:2379,10.0.0.11:2379,10.0.0.10:2380");
  ASSERT_TRUE(endpoints.ok()) << endpoints.error().message();
  std::vector<std::string> unresolved;
  auto got = etcd_addresses(*endpoints, &unresolved);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].str(), "10.0.0.10");
  EXPECT_EQ(got[1].str(), "10.0.0.11");
  EXPECT_TRUE(unresolved.empty());
}

}  // namespace
}  // namespace abx::platform
