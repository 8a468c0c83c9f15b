// SandboxNetwork against the machine's real nftables (root only): the table's lifetime.

#include "network.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "abx/testing/child_process.h"
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

}  // namespace
}  // namespace abx::platform
