// abxd --cluster: any node is a front door (docs/cluster.md).
//
// The one place where a request for something this node does not hold goes to the node that
// does, in one hop:
//   - control plane (ControlApi::route, after authentication): POST /sandboxes places the
//     sandbox (cluster::choose_node) and, when another node is best, forwards the create there;
//     a per-sandbox call for a sandbox another node owns is relayed to it; GET /sandboxes and
//     GET /v2/sandboxes merge every live node's list (the v2 list adds the sandboxes of lost
//     nodes with state "lost"), GET /sandboxes/metrics every live node's answer; a sandbox whose
//     node left the cluster answers GET with state "lost" and every other call with 503.
//   - sandbox plane (ControlApi::admit/connect_sandbox): traffic for a remote sandbox gets a TCP
//     connection to the owner's listener instead of one into a local sandbox; the gateway relays
//     the request unchanged (Host, E2b-Sandbox-Id/-Port), and the owner checks its token.
// A relayed control request carries the cluster secret (kClusterAuthField, compared in constant
// time) and the team the front door authenticated (kClusterTeamField); the owner then serves it
// locally and relays nothing further. A request with kClusterAuthField and a wrong secret is
// refused (401), so a sandbox or client cannot pose as a node. With mutual TLS between nodes
// (cluster_tls.h) a node's call must also have come through the internal endpoint, whose
// handshake verified the caller's certificate: the secret is then a second factor.
#pragma once

#include <boost/json/value.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/base/log.h"
#include "abx/cluster/membership.h"
#include "abx/http/server.h"
#include "abx/store/store.h"
#include "sandboxes.h"

namespace abx::platform {

inline constexpr std::string_view kClusterAuthField = "Abx-Cluster-Auth";
// POST: drains this node (API key): it takes no new sandboxes, and its running and paused ones
// move to other nodes. DELETE: undrains it (placement picks it again; a drain under way stops
// after the sandbox it is moving). The drain is one resource of the node: POST starts it, DELETE
// ends it, both with the same credentials.
inline constexpr std::string_view kDrainPath = "/abx/cluster/drain";
// POST: a node's internal call (cluster secret) with a sandbox it moves here (a tar body).
inline constexpr std::string_view kMoveInPath = "/abx/cluster/move-in";
// The largest move a node accepts (its checkpoint's data: memory and written files).
inline constexpr std::uint64_t kMaxMoveBytes = std::uint64_t{16} << 30;
inline constexpr std::string_view kClusterTeamField = "Abx-Cluster-Team";
// On a merged answer (GET /sandboxes, /v2/sandboxes, /sandboxes/metrics): the live nodes that did
// not answer within the fan-out deadline or answered an error, comma-separated names. Absent
// when every node answered.
inline constexpr std::string_view kClusterMissingField = "Abx-Cluster-Missing";
// On a node's 421 answer to a relayed per-sandbox call: the sandbox is not on this node (it moved
// or went); the front door reads the cluster's map again.
inline constexpr std::string_view kClusterNotOwnerField = "Abx-Cluster-Not-Owner";

class ClusterTls;

struct ClusterRouterOptions {
  std::string secret;  // the shared cluster secret (>= 16 bytes)
  // Mutual TLS between nodes (cluster_tls.h), or null: plain HTTP with the secret. With it every
  // call to another node goes over TLS to its internal endpoint (an http:// node is refused: the
  // secret never travels in clear), and a node's call is accepted only when it came through
  // this node's internal endpoint: it carries kClusterTransportField = `transport_token`.
  ClusterTls* tls = nullptr;
  std::string transport_token;
  // Each node's share of a call that asks every node (merged lists and metrics): nodes are asked
  // at once, and one that has not answered by then is left out (kClusterMissingField).
  std::chrono::milliseconds fanout_timeout{2000};
};

class ClusterRouter {
 public:
  // All three must outlive the router.
  ClusterRouter(cluster::Membership& membership, SandboxManager& sandboxes, store::Store& store,
                ClusterRouterOptions options);
  ~ClusterRouter();

  // nullopt: the request does not claim to come from a node. Otherwise the team the front door
  // authenticated, or kUnauthenticated (wrong or missing secret, no team).
  std::optional<Result<std::string>> internal_team(const http::Request& req) const;

  // Serves an authenticated control request: through `local` (the route table) when this node
  // holds what it names, else by relaying (see above). `internal`: it came from another node.
  using LocalHandler = std::function<Result<http::Response>()>;
  Result<http::Response> handle(http::Request& req, const std::string& path,
                                const std::vector<std::string>& parts, const std::string& team,
                                bool internal, const LocalHandler& local);

  // Sandbox plane. Whether `sandbox_id` (not local) is known to live on another node (memory
  // only: for admit() on an I/O thread).
  bool known_remote(const std::string& sandbox_id) const;
  // A connected TCP socket to the listener of the node that owns `sandbox_id`; kNotFound when
  // no other live node owns it.
  Result<UniqueFd> connect_owner(const std::string& sandbox_id);

  // POST /abx/cluster/move-in, after internal_team() accepted the caller: `tar_path` (the
  // spooled body) becomes a sandbox of this node, running or paused as it was on the sender
  // (SandboxManager::move_in).
  Result<http::Response> move_in(const std::string& tar_path, unsigned version);

  // Removes this node's records of sandboxes it no longer has (ended at their deadline, killed
  // while etcd was unreachable, killed at shutdown). The sweeper runs it every 10 s.
  void forget_gone();

 private:
  struct Owner {
    cluster::Placement placement;
    std::optional<cluster::NodeInfo> node;  // nullopt: the node is not live (lost)
  };
  // The sandbox's placement and its node (if live). Both are cached: the placement for
  // kPlacementTtl (dropped at once when its node answers 421, a relay fails, or it is killed),
  // the node list for kNodesTtl. `fresh`: read the placement from etcd.
  Result<std::optional<Owner>> owner_of(const std::string& sandbox_id, bool fresh = false);
  Result<std::vector<cluster::NodeInfo>> live_nodes();
  void drop_placement(const std::string& sandbox_id);
  // Sends `req` to the node at `api_url` (TLS to its internal endpoint when this node has TLS).
  Result<http::Response> fetch_node(const std::string& api_url, http::Request req,
                                    std::chrono::milliseconds timeout);
  // The node at `api_url` speaks what this node does: https:// with TLS, http:// without.
  Result<cluster::Endpoint> node_endpoint(const std::string& api_url) const;
  Result<http::Response> relay(const cluster::NodeInfo& node, const http::Request& req,
                               const std::string& team,
                               std::chrono::milliseconds timeout = std::chrono::seconds(120));
  // Relays `req` to every other live node at once, each bounded by the fan-out deadline:
  // their 200 answers' parsed bodies, in node order; the names of those that did not answer
  // (or answered otherwise) go to `missing`.
  std::vector<boost::json::value> fan_out(const http::Request& req, const std::string& team,
                                          const std::vector<cluster::NodeInfo>& nodes,
                                          std::vector<std::string>& missing, const char* what);
  Result<http::Response> create(http::Request& req, const std::string& team, bool internal,
                                const LocalHandler& local);
  Result<http::Response> list(http::Request& req, const std::string& path, const std::string& team,
                              const LocalHandler& local);
  Result<http::Response> metrics(http::Request& req, const std::string& team,
                                 const LocalHandler& local);
  Result<http::Response> lost(const Owner& owner, const http::Request& req, bool detail);
  // POST /abx/cluster/drain: marks this node draining and moves each sandbox (running, or paused
  // to disk or filesystem-only) to the node placement picks, one at a time, then those that
  // came meanwhile; answers per sandbox of the caller's team its state, where it went or why
  // not, and counts the others. One drain at a time: a second waits for the one under way.
  Result<http::Response> drain(const http::Request& req, const std::string& caller);
  // DELETE /abx/cluster/drain: this node is placeable again; a drain under way stops after the
  // sandbox it is moving. Idempotent.
  Result<http::Response> undrain(const http::Request& req);
  // The 421 a node answers a relayed call for a sandbox it does not hold.
  http::Response not_owner(const http::Request& req, const std::string& sandbox_id) const;
  // Ships one sandbox's tar to `node` and switches the cluster's map to it.
  Status ship(const std::string& sandbox_id, const std::string& team, const cluster::NodeInfo& node,
              const std::string& tar_path);
  // A call for a sandbox being moved waits until the move ends (clients see a pause).
  void wait_not_moving(const std::string& sandbox_id);
  void record_created(const http::Response& res, const std::string& team);
  void remember(const std::string& sandbox_id, const std::string& api_url);
  void sweep_loop();

  cluster::Membership& membership_;
  SandboxManager& sandboxes_;
  store::Store& store_;
  std::string secret_;
  ClusterTls* tls_ = nullptr;
  std::string transport_token_;
  std::chrono::milliseconds fanout_timeout_;
  Logger log_{"cluster"};
  mutable std::mutex mu_;
  std::map<std::string, std::string, std::less<>> owners_;  // sandbox id → owner's api_url
  struct CachedPlacement {
    cluster::Placement placement;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, CachedPlacement, std::less<>> placements_;  // under mu_
  std::vector<cluster::NodeInfo> nodes_;                            // under mu_
  std::chrono::steady_clock::time_point nodes_at_{};
  std::condition_variable cv_;
  std::set<std::string, std::less<>> moving_;  // sandboxes drain() is moving (under mu_)
  std::condition_variable moved_cv_;
  std::mutex drain_mu_;  // held by drain(): one at a time
  // The draining flag's changes (drain() setting it, undrain() clearing it) and drain_epoch_, one
  // at a time: an undrain is never overtaken by the flag of a drain that started before it.
  std::mutex drain_flag_mu_;
  std::uint64_t drain_epoch_ = 0;  // bumped by undrain() (under drain_flag_mu_ and mu_)
  bool stopping_ = false;
  std::thread sweeper_;
};

}  // namespace abx::platform
