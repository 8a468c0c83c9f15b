// The etcd client and the membership against a real etcd (Debian's etcd-server) that the test
// starts on loopback ports with a data directory in its own temporary directory.
#include "abx/cluster/etcd.h"

#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "abx/cluster/membership.h"
#include "abx/testing/child_process.h"
#include "abx/testing/temp_dir.h"

namespace abx::cluster {
namespace {

using namespace std::chrono_literals;

// A loopback port nothing listens on right now (the kernel's pick for port 0).
std::uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::address_v4::loopback(), 0});
  return a.local_endpoint().port();
}

// One etcd member on 127.0.0.1, killed (with its process group) by the destructor.
struct Etcd {
  testing::TempDir dir{"abx-etcd"};
  std::uint16_t client_port = free_port();
  std::uint16_t peer_port = free_port();
  std::unique_ptr<testing::ChildProcess> proc;

  bool start() {
    const std::string c = "http://127.0.0.1:" + std::to_string(client_port);
    const std::string p = "http://127.0.0.1:" + std::to_string(peer_port);
    proc = std::make_unique<testing::ChildProcess>(std::vector<std::string>{
        ABX_ETCD_BIN, "--name", "m", "--data-dir", (dir / "data").string(), "--listen-client-urls",
        c, "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls",
        p, "--initial-cluster", "m=" + p, "--log-level", "error", "--logger", "zap"});
    EtcdClient probe({{"127.0.0.1", client_port}}, 500ms);
    for (int i = 0; i < 100; ++i) {
      if (probe.get("probe").ok()) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
};

TEST(EtcdEndpoints, ParsesListsAndRefusesBadOnes) {
  auto e = parse_endpoints("http://127.0.0.1:2379,10.0.0.2:22379/");
  ASSERT_TRUE(e.ok()) << e.error().message();
  ASSERT_EQ(e->size(), 2u);
  EXPECT_EQ((*e)[0].host, "127.0.0.1");
  EXPECT_EQ((*e)[0].port, 2379);
  EXPECT_EQ((*e)[1].str(), "10.0.0.2:22379");
  for (const char* bad : {"", "127.0.0.1", "h:0", "h:70000", "h:12x", ",", ":1"})
    EXPECT_FALSE(parse_endpoints(bad).ok()) << bad;
}

TEST(EtcdParsers, ReadWhatTheGatewaySends) {
  // Bodies as etcd 3.4.23's gateway sent them.
  auto r = parse_range_response(
      R"({"header":{"revision":"3"},"kvs":[{"key":"YQ==","create_revision":"2","mod_revision":"3",)"
      R"("version":"2","value":"Yg==","lease":"4111120492473603333"}],"count":"1"})");
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].key, "a");
  EXPECT_EQ((*r)[0].value, "b");
  EXPECT_EQ((*r)[0].lease, 4111120492473603333);
  EXPECT_EQ((*r)[0].mod_revision, 3);
  auto empty = parse_range_response(R"({"header":{"revision":"1"}})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto ka = parse_keepalive(R"({"result":{"header":{},"ID":"41","TTL":"5"}})"
                            "\n");
  ASSERT_TRUE(ka.ok());
  EXPECT_EQ(*ka, 5);
  auto gone = parse_keepalive(R"({"result":{"header":{},"ID":"41"}})");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
  auto err = parse_ok(
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})");
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(parse_txn_response(R"({"header":{},"succeeded":true})").value(), true);
  EXPECT_EQ(parse_txn_response(R"({"header":{}})").value(), false);
  EXPECT_EQ(parse_delete_response(R"({"header":{},"deleted":"2"})").value(), 2);
  // Not what etcd sends: internal errors, never a crash or a silent default.
  for (const char* bad : {"", "[]", "{", R"({"kvs":{}})", R"({"kvs":[{"key":"!!"}]})",
                          R"({"kvs":[{"key":"YQ==","lease":"x"}]})", R"({"a":1,"a":2})"}) {
    auto b = parse_range_response(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.error().code(), ErrorCode::kInternal) << bad;
  }
  EXPECT_FALSE(parse_lease_grant(R"({"header":{}})").ok());
}

TEST(EtcdClient, KeysTransactionsAndLeasesAgainstARealEtcd) {
  Etcd etcd;
  ASSERT_TRUE(etcd.start()) << "etcd did not come up";
  EtcdClient c({{"127.0.0.1", etcd.client_port}});
  ASSERT_TRUE(c.put("/t/a", "1").ok());
  ASSERT_TRUE(c.put("/t/b", std::string("bin\0ary", 7)).ok());
  ASSERT_TRUE(c.put("/u", "x").ok());
  auto a = c.get("/t/a");
  ASSERT_TRUE(a.ok() && *a);
  EXPECT_EQ((*a)->value, "1");
  auto none = c.get("/t/none");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  auto pre = c.get_prefix("/t/");
  ASSERT_TRUE(pre.ok()) << pre.error().message();
  ASSERT_EQ(pre->size(), 2u);
  EXPECT_EQ((*pre)[1].value, std::string("bin\0ary", 7));
  EXPECT_EQ(c.put_if_absent("/t/a", "2").value(), false);
  EXPECT_EQ(c.get("/t/a").value()->value, "1");
  EXPECT_EQ(c.put_if_absent("/t/c", "3").value(), true);
  EXPECT_EQ(c.erase("/t/c").value(), 1);
  EXPECT_EQ(c.erase("/t/c").value(), 0);
  // Compare-and-swap on the revision a read saw: a second writer with the same revision loses.
  const std::int64_t rev = c.get("/t/a").value()->mod_revision;
  ASSERT_GT(rev, 0);
  EXPECT_EQ(c.put_if_revision("/t/a", "4", rev).value(), true);
  EXPECT_EQ(c.put_if_revision("/t/a", "5", rev).value(), false);
  EXPECT_EQ(c.get("/t/a").value()->value, "4");
  EXPECT_EQ(c.put_if_revision("/t/none", "6", rev).value(), false);
  EXPECT_FALSE(c.get("/t/none").value());
  EXPECT_EQ(c.put_if_revision("/t/a", "7", 0).error().code(), ErrorCode::kInvalidArgument);

  auto lease = c.grant_lease(30);
  ASSERT_TRUE(lease.ok()) << lease.error().message();
  ASSERT_TRUE(c.put("/t/leased", "v", *lease).ok());
  EXPECT_EQ(c.get("/t/leased").value()->lease, *lease);
  auto ttl = c.keep_alive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.error().message();
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(c.revoke_lease(*lease).ok());
  EXPECT_FALSE(c.get("/t/leased").value()) << "a revoked lease's key stays";
  auto after = c.keep_alive(*lease);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(c.revoke_lease(*lease).error().code(), ErrorCode::kNotFound);
  // A key under a lease nobody renews goes when the TTL passes.
  auto short_lease = c.grant_lease(1);
  ASSERT_TRUE(short_lease.ok());
  ASSERT_TRUE(c.put("/t/short", "v", *short_lease).ok());
  bool gone = false;
  for (int i = 0; i < 60 && !gone; ++i) {
    std::this_thread::sleep_for(100ms);
    gone = !c.get("/t/short").value();
  }
  EXPECT_TRUE(gone) << "the key outlived its 1 s lease by 6 s";
}

TEST(EtcdClient, FailsOverToTheNextMemberAndReportsWhenNoneAnswers) {
  Etcd etcd;
  ASSERT_TRUE(etcd.start());
  const std::uint16_t dead = free_port();
  EtcdClient c({{"127.0.0.1", dead}, {"127.0.0.1", etcd.client_port}}, 1s);
  ASSERT_TRUE(c.put("k", "v").ok());
  EXPECT_EQ(c.current().port, etcd.client_port);
  EXPECT_EQ(c.get("k").value()->value, "v");
  EtcdClient nobody({{"127.0.0.1", dead}}, 500ms);
  auto r = nobody.get("k");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message().find(std::to_string(dead)), std::string::npos);
}

TEST(Placement, MostFreeSlotsThenTheFrontDoorThenByName) {
  std::vector<NodeInfo> nodes{{"n1", "http://127.0.0.1:1", 3, 0, 0, 0},
                              {"n2", "http://127.0.0.1:2", 3, 0, 0, 0},
                              {"n3", "http://127.0.0.1:3", 3, 0, 0, 0}};
  std::vector<Placement> placed;
  std::vector<std::string> order;
  for (int i = 0; i < 9; ++i) {
    auto n = choose_node(nodes, placed, "n2");
    ASSERT_TRUE(n.ok());
    order.push_back(*n);
    placed.push_back({"s" + std::to_string(i), *n, "t"});
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"n2", "n1", "n3", "n2", "n1", "n3", "n2", "n1", "n3"}));
  auto full = choose_node(nodes, placed, "n1");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(choose_node({}, {}, "n1").error().code(), ErrorCode::kUnavailable);
  // A node's own count wins over fewer records (sandboxes the records do not know).
  nodes[0].sandboxes = 3;
  EXPECT_NE(choose_node(nodes, {}, "n1").value(), "n1");
  // A draining node takes nothing, however free; with only draining nodes nothing has a slot.
  nodes[0].sandboxes = 0;
  nodes[0].draining = true;
  EXPECT_EQ(choose_node(nodes, {}, "n1").value(), "n2");
  nodes[1].draining = nodes[2].draining = true;
  EXPECT_EQ(choose_node(nodes, {}, "n1").error().code(), ErrorCode::kResourceExhausted);
}

TEST(Membership, RegistersRenewsRecordsAndLeaves) {
  Etcd etcd;
  ASSERT_TRUE(etcd.start());
  EtcdClient c({{"127.0.0.1", etcd.client_port}});
  MembershipOptions o1{
      {"n1", "http://127.0.0.1:3001", 4}, std::chrono::seconds(2), [] { return std::int64_t{1}; }};
  auto m1 = Membership::start(c, o1);
  ASSERT_TRUE(m1.ok()) << m1.error().message();
  auto dup = Membership::start(c, o1);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code(), ErrorCode::kAlreadyExists);
  MembershipOptions o2{{"n2", "http://127.0.0.1:3002", 4}, std::chrono::seconds(2), {}};
  auto m2 = Membership::start(c, o2);
  ASSERT_TRUE(m2.ok()) << m2.error().message();
  // Renewed past several TTLs.
  std::this_thread::sleep_for(5s);
  auto nodes = (*m1)->nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "n1");
  EXPECT_EQ((*nodes)[0].sandboxes, 1);
  EXPECT_EQ((*nodes)[1].api_url, "http://127.0.0.1:3002");

  Placement p{"sb1", "n2", "team", "base", "", "c", "2026-01-01T00:00:00Z", ""};
  ASSERT_TRUE((*m1)->record(p).ok());
  EXPECT_EQ((*m1)->record(p).error().code(), ErrorCode::kAlreadyExists);
  auto got = (*m2)->placement("sb1");
  ASSERT_TRUE(got.ok() && *got);
  EXPECT_EQ((*got)->node, "n2");
  EXPECT_EQ((*m2)->placements().value().size(), 1u);
  // A move is a compare-and-swap from the node the record names.
  ASSERT_TRUE((*m2)->move("sb1", "n2", "n1").ok());
  EXPECT_EQ((*m2)->placement("sb1").value()->node, "n1");
  EXPECT_EQ((*m2)->placement("sb1").value()->team, "team");
  EXPECT_EQ((*m2)->move("sb1", "n2", "n1").error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ((*m2)->move("nope", "n2", "n1").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ((*m2)->move("sb1", "n1", "Bad").error().code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE((*m2)->forget("sb1").ok());
  EXPECT_FALSE((*m2)->placement("sb1").value());

  // Draining shows in the node's record at once, and placement skips it.
  ASSERT_TRUE((*m1)->set_draining(true).ok());
  EXPECT_TRUE((*m1)->draining());
  nodes = (*m2)->nodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE((*nodes)[0].draining);
  EXPECT_FALSE((*nodes)[1].draining);
  EXPECT_EQ(choose_node(*nodes, {}, "n1").value(), "n2");
  std::this_thread::sleep_for(1s);  // a renewal keeps it
  EXPECT_TRUE((*m2)->nodes().value()[0].draining);
  ASSERT_TRUE((*m1)->set_draining(false).ok());
  EXPECT_FALSE((*m2)->nodes().value()[0].draining);
  // A record without the field (an older node's) is not draining.
  auto old_node = decode_node(R"({"name":"n","apiUrl":"http://h:1","capacity":1,"sandboxes":0})");
  ASSERT_TRUE(old_node.ok());
  EXPECT_FALSE(old_node->draining);
  EXPECT_FALSE(
      decode_node(R"({"name":"n","apiUrl":"http://h:1","capacity":1,"sandboxes":0,"draining":1})")
          .ok());

  // A stopped node's key goes at once (revoked); a stalled one's when its lease runs out.
  (*m2)->stop();
  EXPECT_EQ((*m1)->nodes().value().size(), 1u);
  EXPECT_FALSE(check_node_name("N1").ok());
  EXPECT_FALSE(check_node_name("-a").ok());
  EXPECT_FALSE(decode_node(R"({"name":"n","apiUrl":"ftp://x","capacity":1,"sandboxes":0})").ok());
}

// placements_cached: the copy answers while nothing changed, and any put, change or removal by
// anyone (here another node's client) is seen at the next call.
TEST(Membership, CachedPlacementsSeeEveryChange) {
  Etcd etcd;
  ASSERT_TRUE(etcd.start());
  EtcdClient c({{"127.0.0.1", etcd.client_port}});
  EtcdClient other({{"127.0.0.1", etcd.client_port}});
  MembershipOptions o{{"n1", "http://127.0.0.1:3001", 4}, std::chrono::seconds(5), {}};
  auto m = Membership::start(c, o);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_TRUE((*m)->placements_cached().value().empty());
  auto rec = [](std::string id, std::string node) {
    return encode_placement({id, node, "team", "base", "", "c", "2026-01-01T00:00:00Z", ""});
  };
  ASSERT_TRUE(other.put("/abx/sandboxes/a", rec("a", "n1")).ok());
  ASSERT_TRUE(other.put("/abx/sandboxes/b", rec("b", "n1")).ok());
  auto names = [&] {
    std::string out;
    auto all = (*m)->placements_cached();
    EXPECT_TRUE(all.ok());
    if (all.ok())
      for (const auto& p : *all) out += p.sandbox_id + "@" + p.node + " ";
    return out;
  };
  EXPECT_EQ(names(), "a@n1 b@n1 ");
  EXPECT_EQ(names(), "a@n1 b@n1 ");  // unchanged: from the copy
  ASSERT_TRUE(other.put("/abx/sandboxes/b", rec("b", "n2")).ok());
  EXPECT_EQ(names(), "a@n1 b@n2 ");
  ASSERT_TRUE(other.erase("/abx/sandboxes/a").ok());
  EXPECT_EQ(names(), "b@n2 ");
  // A removal and a new record at once (the count stays the same).
  ASSERT_TRUE(other.erase("/abx/sandboxes/b").ok());
  ASSERT_TRUE(other.put("/abx/sandboxes/c", rec("c", "n1")).ok());
  EXPECT_EQ(names(), "c@n1 ");
  // The check itself: nothing modified since the read's revision, and the count.
  auto all = c.range_prefix("/abx/sandboxes/", 0, false);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->count, 1);
  EXPECT_GT(all->revision, 0);
  auto since = c.range_prefix("/abx/sandboxes/", all->revision + 1, true);
  ASSERT_TRUE(since.ok());
  EXPECT_TRUE(since->kvs.empty());
  EXPECT_EQ(since->count, 1);
}

}  // namespace
}  // namespace abx::cluster
