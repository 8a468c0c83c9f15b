// SandboxNetwork against the machine's real nftables (root only): the table's lifetime.

#include "network.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

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

TEST(SandboxNetwork, AbxdTablesAndTheirHomesAreReadFromNftsListings) {
  EXPECT_EQ(abx_table_names("table inet abx_0123abcd\ntable ip nat\ntable inet abx_XYZ\n"
                            "table inet abx_0123abcd9\ntable ip abx_00000000\n"
                            "table inet abx_deadbeef"),
            (std::vector<std::string>{"abx_0123abcd", "abx_deadbeef"}));
  EXPECT_TRUE(abx_table_names("").empty());
  EXPECT_EQ(abxd_home_of("table inet abx_0123abcd {\n\tcomment \"abxd /var/lib/abx home\"\n"),
            "/var/lib/abx home");
  EXPECT_EQ(abxd_home_of("table inet t {\n\tcomment \"someone else\"\n"), std::nullopt);
  EXPECT_EQ(abxd_home_of("comment \"abxd \""), std::nullopt);
  EXPECT_EQ(abxd_home_of("comment \"abxd /unterminated"), std::nullopt);
  EXPECT_EQ(table_handle_of("table inet abx_0123abcd { # handle 17\n\tset s { # handle 3\n"), 17u);
  EXPECT_EQ(table_handle_of("table inet abx_0123abcd {\n\tset s { # handle 3\n"), std::nullopt);
  EXPECT_EQ(table_handle_of("table inet t { # handle 9x\n"), std::nullopt);
  EXPECT_EQ(table_handle_of("table inet t { # handle \n"), std::nullopt);
}

// A table left by an abxd that is gone (killed, its home removed) slowed every nftables change
// on the machine; the next abxd to start removes it, and never one of a live abxd.
TEST(SandboxNetwork, StartRemovesTablesOfGoneAbxdsOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: it writes the machine's nftables";
  testing::TempDir dir;
  // A live abxd's home: its abxd.lock names a live process (this test).
  const std::string live_home = (dir.path() / "live").string();
  std::filesystem::create_directories(live_home);
  std::ofstream(live_home + "/abxd.lock") << ::getpid() << "\n";
  const std::string gone_home = (dir.path() / "gone").string();  // never made
  // A home whose abxd died: its lock names a process that has exited.
  const std::string dead_home = (dir.path() / "dead").string();
  std::filesystem::create_directories(dead_home);
  {
    testing::ChildProcess exited({"/bin/sh", "-c", "echo $$"});
    const std::string pid = exited.read_all();
    ASSERT_EQ(exited.wait(std::chrono::seconds(10)), 0);
    ASSERT_FALSE(pid.empty());
    std::ofstream(dead_home + "/abxd.lock") << pid;
  }
  // A home without a lock file (a SandboxNetwork of another test): not judged.
  const std::string unknown_home = (dir.path() / "unknown").string();
  std::filesystem::create_directories(unknown_home);
  // Names no abxd would have (fnv1a of a real home is as likely as any other, so check).
  const std::string gone_table = "abx_0b5e1e7e", live_table = "abx_0b5e1e7f",
                    dead_table = "abx_0b5e1e80", unknown_table = "abx_0b5e1e81";
  for (const auto& t : {gone_table, live_table, dead_table, unknown_table})
    ASSERT_FALSE(table_exists(t)) << t;
  auto make = [](const std::string& table, const std::string& home) {
    testing::ChildProcess nft(
        {"/usr/sbin/nft", "add table inet " + table + " { comment \"abxd " + home + "\"; }"});
    return nft.wait(std::chrono::seconds(10)) == 0;
  };
  ASSERT_TRUE(make(gone_table, gone_home));
  ASSERT_TRUE(make(live_table, live_home));
  ASSERT_TRUE(make(dead_table, dead_home));
  ASSERT_TRUE(make(unknown_table, unknown_home));

  testing::TempDir home;
  NetworkOptions no;
  no.dns_upstream = "127.0.0.1:9";
  auto net = SandboxNetwork::start(home.path().string(), no, runtime::UserNamespace{});
  ASSERT_TRUE(net.ok()) << net.error().message();
  EXPECT_FALSE(table_exists(gone_table)) << "the table of a removed home is still there";
  EXPECT_FALSE(table_exists(dead_table)) << "the table of a dead abxd is still there";
  EXPECT_TRUE(table_exists(live_table)) << "the table of a live abxd was removed";
  EXPECT_TRUE(table_exists(unknown_table)) << "a table of an unknown owner was removed";
  EXPECT_TRUE(table_exists((*net)->table()));
  (*net)->remove_rules();
  for (const auto& t : {gone_table, live_table, dead_table, unknown_table})
    testing::ChildProcess({"/bin/sh", "-c", "nft delete table inet " + t + " 2>/dev/null"})
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

// Running sandboxes bind-mount the CA bundle. A restarted abxd replaced it (rename over it), so
// their mounts were left on a deleted inode, and CRIU failed to restore such a sandbox once
// paused ("Can't re-create deleted file", the JS persistence test's kill -9 cases).
TEST(SandboxNetwork, ARestartKeepsTheSandboxCaBundlesInode) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: it writes the machine's nftables";
  testing::TempDir home;
  const std::string host_bundle = (home.path() / "host-bundle.crt").string();
  std::ofstream(host_bundle) << "# host bundle 1\n";
  NetworkOptions no;
  no.dns_upstream = "127.0.0.1:9";  // nothing answers there; no query is made
  no.host_ca_bundle = host_bundle;
  auto inode_and_text = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return std::pair{st.st_ino, text.str()};
  };
  std::string bundle;
  ino_t first = 0;
  for (int round = 0; round < 3; ++round) {
    if (round == 2) std::ofstream(host_bundle) << "# host bundle 2\n";
    auto net = SandboxNetwork::start(home.path().string(), no, runtime::UserNamespace{});
    ASSERT_TRUE(net.ok()) << net.error().message();
    bundle = (*net)->sandbox_ca_bundle();
    auto [ino, text] = inode_and_text(bundle);
    if (round == 0) first = ino;
    EXPECT_EQ(ino, first) << "round " << round << ": " << bundle << " was replaced";
    EXPECT_NE(text.find(round == 2 ? "# host bundle 2" : "# host bundle 1"), std::string::npos)
        << text;
    EXPECT_NE(text.find("-----BEGIN CERTIFICATE-----"), std::string::npos) << text;
    if (round == 2) {
      EXPECT_EQ(text.find("# host bundle 1"), std::string::npos) << text;
    }
    const std::string table = (*net)->table();
    (*net)->remove_rules();
    net->reset();
    testing::ChildProcess({"/bin/sh", "-c", "nft delete table inet " + table + " 2>/dev/null"})
        .wait(std::chrono::seconds(10));
  }
}

}  // namespace
}  // namespace abx::platform
