// SandboxNetwork against the machine's real nftables (root only): the table's lifetime.

#include "network.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "abx/base/fd.h"
#include "abx/testing/child_process.h"
#include "abx/testing/socket.h"
#include "abx/testing/temp_dir.h"

namespace abx::platform {
namespace {

bool table_exists(const std::string& table) {
  testing::ChildProcess nft({"/bin/sh", "-c", "nft list table inet " + table + " >/dev/null 2>&1"});
  return nft.wait(std::chrono::seconds(10)) == 0;
}

// remove_rules() is final. A sandbox's detach that finished after it (a kill still running while
// abxd stopped) found the table gone, took that for a failed change and repaired it by writing
// the whole table again: the table outlived abxd (seen after AbxdLogE2E, whose sandbox's
// timeout kill races the test's stop).
TEST(SandboxNetwork, ALateDetachLeavesTheRemovedTableRemoved) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: it writes the machine's nftables";
  testing::TempDir home;
  NetworkOptions no;
  no.dns_upstream = "127.0.0.1:9";  // nothing answers there; no query is made
  auto net = SandboxNetwork::start(home.path().string(), no, runtime::UserNamespace{});
  ASSERT_TRUE(net.ok()) << net.error().message();
  SandboxNetwork& n = **net;
  ASSERT_TRUE(table_exists(n.table())) << n.table();
  // A link that needs no interface: the ruleset names it, nothing more.
  const runtime::VethInfo link = runtime::veth_for_slot(n.veth_config(), 7);
  ASSERT_TRUE(n.attach("late", link, SandboxNetworkSpec{}).ok());

  n.remove_rules();
  EXPECT_FALSE(table_exists(n.table()));
  n.detach("late");
  EXPECT_FALSE(table_exists(n.table())) << "the late detach put " << n.table() << " back";
  Status again =
      n.attach("later", runtime::veth_for_slot(n.veth_config(), 8), SandboxNetworkSpec{});
  ASSERT_FALSE(again.ok()) << "an attach after remove_rules went in";
  EXPECT_EQ(again.error().code(), ErrorCode::kUnavailable) << again.error().message();
  EXPECT_FALSE(table_exists(n.table()));
  // Whatever the verdict, the machine keeps no table of this test.
  testing::ChildProcess({"/bin/sh", "-c", "nft delete table inet " + n.table() + " 2>/dev/null"})
      .wait(std::chrono::seconds(10));
}

// The resolver's port, then the proxy's: the table's redirects ("redirect to :P").
std::vector<std::uint16_t> redirect_ports(const std::string& table) {
  testing::ChildProcess nft({"/bin/sh", "-c",
                             "nft list table inet " + table +
                                 " | grep -o 'redirect to :[0-9]*' | awk '!seen[$0]++' | "
                                 "sed 's/redirect to :/port /'"});
  std::vector<std::uint16_t> ports;
  while (auto line = nft.read_line_starting("port ", std::chrono::seconds(10)))
    ports.push_back(static_cast<std::uint16_t>(std::stoi(line->substr(5))));
  return ports;
}

bool loopback_connects(std::uint16_t port) { return testing::tcp_connects(INADDR_LOOPBACK, port); }

// Issue 35, finding 4: abxd's resolver and egress proxy listened on 0.0.0.0, so the host's
// loopback (and every other address of the host) reached them.
TEST(SandboxNetwork, TheResolverAndTheProxyAreNotOnTheHostsLoopback) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: it writes the machine's nftables";
  testing::TempDir home;
  NetworkOptions no;
  no.dns_upstream = "127.0.0.1:9";  // nothing answers there; no query is made
  auto net = SandboxNetwork::start(home.path().string(), no, runtime::UserNamespace{});
  ASSERT_TRUE(net.ok()) << net.error().message();
  SandboxNetwork& n = **net;
  const runtime::VethInfo link = runtime::veth_for_slot(n.veth_config(), 9);
  ASSERT_TRUE(n.attach("bound", link, SandboxNetworkSpec{}).ok());
  const std::vector<std::uint16_t> ports = redirect_ports(n.table());
  ASSERT_EQ(ports.size(), 2u) << "the resolver's and the proxy's redirects";
  for (std::uint16_t port : ports) EXPECT_FALSE(loopback_connects(port)) << port;
  n.detach("bound");
  n.remove_rules();
  testing::ChildProcess({"/bin/sh", "-c", "nft delete table inet " + n.table() + " 2>/dev/null"})
      .wait(std::chrono::seconds(10));
}

}  // namespace
}  // namespace abx::platform
