// A node's membership of an abx cluster, and the cluster state abxd keeps in etcd.
//
// Keys (values are JSON):
//   /abx/nodes/<name>       NodeInfo, under the node's lease: it disappears TTL seconds after
//                           the node stops renewing it (crash, partition, kill -9).
//   /abx/sandboxes/<id>     Placement, written by the owning node when its create succeeds (a
//                           transaction: only if absent) and removed when the sandbox goes. Not
//                           under the lease, on purpose: when the owner's node key is gone the
//                           record stays and tells every other node the sandbox is lost, and
//                           where it was.
//
// Membership::start grants the lease, registers the node and runs one thread that renews the
// lease every TTL/3 (re-registering under a new lease if etcd let it expire, e.g. after a long
// partition) and refreshes the node's value (sandboxes, free slots, load). Placement is a pure
// function over the node list and the placement records (choose_node).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/log.h"
#include "abx/cluster/etcd.h"

namespace abx::cluster {

inline constexpr std::string_view kNodesPrefix = "/abx/nodes/";
inline constexpr std::string_view kSandboxesPrefix = "/abx/sandboxes/";
inline constexpr std::string_view kKeysPrefix = "/abx/keys/";

// A node name: [a-z0-9][a-z0-9-]{0,62}. Errors: kInvalidArgument.
Status check_node_name(std::string_view name);

struct NodeInfo {
  std::string name;
  // http://HOST:PORT: this node's API and proxy, as other nodes reach it; https://HOST:PORT: its
  // internal endpoint (--cluster-listen, mutual TLS), which serves the same.
  std::string api_url;
  std::int64_t capacity = 0;   // sandboxes it may run
  std::int64_t sandboxes = 0;  // sandboxes it runs now
  double load = 0;             // 1-minute load average
  std::int64_t updated_ms = 0;
  bool draining = false;  // placement puts no new sandbox on it (Membership::set_draining)
};
// {name, apiUrl, capacity, sandboxes, free, load, updatedAt, draining}; `free` is derived
// (capacity - sandboxes) for people reading etcd, and ignored by decode_node; `draining` may be
// absent (false).
std::string encode_node(const NodeInfo& n);
Result<NodeInfo> decode_node(std::string_view json);

struct Placement {
  std::string sandbox_id;
  std::string node;
  std::string team;
  std::string template_id;
  std::string alias;
  std::string client_id;
  std::string started_at;  // RFC 3339, as the create answered
  std::string end_at;
};
std::string encode_placement(const Placement& p);
Result<Placement> decode_placement(std::string_view json);

// An API key as the cluster shares it (/abx/keys/<id>; docs/cluster.md, "Keys and teams"): what
// a node's store keeps of it, with the SHA-256 digest of the key and never the key itself. Any
// node accepts a key once it has read its record; a revoked one stays revoked everywhere.
struct SharedKey {
  std::string id;      // 16 lowercase hex digits
  std::string team;    // the key's team: [a-z0-9][a-z0-9-]{0,62}
  std::string name;    // at most 256 bytes
  std::string prefix;  // "e2b_" and 4 lowercase hex digits
  std::string digest;  // 64 lowercase hex digits
  std::int64_t created_ms = 0;
  bool revoked = false;
};
// {id, team, name, prefix, digest, createdAt, revoked}.
std::string encode_key(const SharedKey& k);
// kInvalidArgument naming the field that is malformed.
Result<SharedKey> decode_key(std::string_view json);

// HOST and PORT of an api_url "http://HOST:PORT" or "https://HOST:PORT" (Endpoint::tls: the
// node's internal endpoint, mutual TLS; kInvalidArgument otherwise).
Result<Endpoint> parse_api_url(std::string_view url);

// Where a new sandbox goes (not a reservation: creates through two front doors at the same
// moment may pick the same node): the live node with the most free slots (capacity minus the
// placement records naming it) that is not draining; on a tie `preferred` (the front door) if it
// is among them, else the first by name. kResourceExhausted when no node has a free slot,
// kUnavailable when there is no node.
Result<std::string> choose_node(const std::vector<NodeInfo>& nodes,
                                const std::vector<Placement>& placements,
                                std::string_view preferred);

class Membership;

struct MembershipOptions {
  NodeInfo self;                                  // name, api_url, capacity
  std::chrono::seconds ttl{10};                   // the node key's lease
  std::function<std::int64_t()> count_sandboxes;  // sampled at each renewal
  // Work done on the renewal thread as soon as it starts and after each renewal (abxd: blocking
  // the other nodes' addresses for its sandboxes, sharing its API keys).
  std::function<void(Membership&)> each_renewal;
};

class Membership {
 public:
  // Grants the lease and registers the node (kAlreadyExists if a live node has that name).
  static Result<std::unique_ptr<Membership>> start(EtcdClient& etcd, MembershipOptions opt);
  // Stops renewing and revokes the lease (the node key goes at once).
  ~Membership();
  void stop();

  const NodeInfo& self() const { return opt_.self; }
  EtcdClient& etcd() { return etcd_; }

  Result<std::vector<NodeInfo>> nodes();
  Result<std::vector<Placement>> placements();
  // The same, from a copy kept since the last read: one cheap etcd call (the keys changed since
  // that read's revision, and the count) checks it, and only a change reads every record again.
  // What placement and the lost scan of a list use: with many sandboxes, reading and decoding
  // every record each time costs tens of milliseconds.
  Result<std::vector<Placement>> placements_cached();
  Result<std::optional<Placement>> placement(std::string_view sandbox_id);
  // Writes a placement (only if there is none for that id): kAlreadyExists otherwise.
  Status record(const Placement& p);
  Status forget(std::string_view sandbox_id);
  // Moves a placement from node `from` to node `to` in one compare-and-swap: only if the record
  // still names `from` and nobody changed it between the read and the write. kNotFound: no
  // record; kFailedPrecondition: it names another node, or it changed meanwhile.
  Status move(std::string_view sandbox_id, std::string_view from, std::string_view to);
  // Marks this node draining (or not) in its node record, at once and at every renewal.
  Status set_draining(bool draining);
  bool draining() const { return draining_; }

 private:
  Membership(EtcdClient& etcd, MembershipOptions opt) : etcd_(etcd), opt_(std::move(opt)) {}
  Status register_node();
  void renew_loop();

  EtcdClient& etcd_;
  MembershipOptions opt_;
  std::int64_t lease_ = 0;
  std::atomic<bool> draining_{false};
  std::mutex register_mu_;  // register_node: the renewal thread and set_draining
  Logger log_{"cluster"};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
  std::mutex snapshot_mu_;  // placements_cached
  std::vector<Placement> snapshot_;
  std::int64_t snapshot_revision_ = 0;  // 0: none yet
  std::int64_t snapshot_count_ = 0;
};

}  // namespace abx::cluster
