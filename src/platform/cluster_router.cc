#include "cluster_router.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "abx/base/json.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/http/client.h"
#include "abx/platform/gateway.h"
#include "abx/token/token.h"
#include "cluster_tls.h"

namespace abx::platform {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Response;

namespace {

// A create may pull a template's image on the owner: it gets longer than other calls.
constexpr auto kRelayTimeout = std::chrono::seconds(120);
constexpr auto kConnectTimeout = std::chrono::seconds(3);
// Shipping one sandbox and its resume on the other node.
constexpr auto kMoveTimeout = std::chrono::seconds(600);
constexpr auto kSweepPeriod = std::chrono::seconds(10);
constexpr std::size_t kMaxRemembered = 100'000;
// A drain's rounds: the sandboxes held when it began, then those that came while it ran.
constexpr int kDrainRounds = 4;
// A sandbox's placement changes only when it moves (drain) or goes, and its old node then
// answers 421 (kClusterNotOwnerField): the cache can keep it a while.
constexpr auto kPlacementTtl = std::chrono::seconds(30);
// The live node list: a node that left is reported lost at most this much later.
constexpr auto kNodesTtl = std::chrono::seconds(1);

bool is_create(const Request& req, const std::string& path) {
  return req.method() == bhttp::verb::post && (path == "/sandboxes" || path == "/v2/sandboxes");
}

bool is_list(const Request& req, const std::string& path) {
  return req.method() == bhttp::verb::get && (path == "/sandboxes" || path == "/v2/sandboxes");
}

bool is_metrics_list(const Request& req, const std::string& path) {
  return req.method() == bhttp::verb::get && path == "/sandboxes/metrics";
}

// The sandbox id a per-sandbox route names (/sandboxes/{id}/…, /v2/sandboxes/{id}/…), or null.
// GET /sandboxes/metrics is the team's list of metrics, not a sandbox.
const std::string* sandbox_of(const std::vector<std::string>& parts) {
  if (parts.size() >= 2 && parts[0] == "sandboxes" && parts[1] != "metrics") return &parts[1];
  if (parts.size() >= 3 && parts[0] == "v2" && parts[1] == "sandboxes") return &parts[2];
  return nullptr;
}

// The states a v2 list asks for (?state=running&state=paused or ?state=running,paused); empty:
// any.
std::vector<std::string> requested_states(const Request& req) {
  std::vector<std::string> out;
  std::string_view target = req.target();
  auto q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (!kv.starts_with("state=")) continue;
    std::string_view v = kv.substr(6);
    while (!v.empty()) {
      auto c = v.find_first_of(",");
      auto pct = v.find("%2C");
      std::size_t cut = std::min(c, pct);
      out.emplace_back(v.substr(0, cut));
      if (cut == std::string_view::npos) break;
      v = v.substr(cut + (cut == pct ? 3 : 1));
    }
  }
  return out;
}

}  // namespace

ClusterRouter::ClusterRouter(cluster::Membership& membership, SandboxManager& sandboxes,
                             store::Store& store, ClusterRouterOptions options)
    : membership_(membership),
      sandboxes_(sandboxes),
      store_(store),
      secret_(std::move(options.secret)),
      tls_(options.tls),
      transport_token_(std::move(options.transport_token)),
      fanout_timeout_(options.fanout_timeout) {
  sweeper_ = std::thread([this] { sweep_loop(); });
}

ClusterRouter::~ClusterRouter() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
}

std::optional<Result<std::string>> ClusterRouter::internal_team(const Request& req) const {
  auto auth = req.find(kClusterAuthField);
  if (auth == req.end()) return std::nullopt;
  if (!transport_token_.empty() &&
      !token::constant_time_equal(req[kClusterTransportField], transport_token_))
    return Result<std::string>(
        Error(ErrorCode::kUnauthenticated,
              "a node's call is accepted on the internal endpoint only (--cluster-listen, "
              "mutual TLS)"));
  if (!token::constant_time_equal(auth->value(), secret_))
    return Result<std::string>(Error(ErrorCode::kUnauthenticated, "invalid cluster credential"));
  std::string_view team = req[kClusterTeamField];
  if (team.empty())
    return Result<std::string>(Error(ErrorCode::kUnauthenticated, "a node's call without a team"));
  return Result<std::string>(std::string(team));
}

Result<Response> ClusterRouter::handle(Request& req, const std::string& path,
                                       const std::vector<std::string>& parts,
                                       const std::string& team, bool internal,
                                       const LocalHandler& local) {
  if (path == kDrainPath) {
    const bool post = req.method() == bhttp::verb::post;
    if (!post && req.method() != bhttp::verb::delete_) return local();
    if (internal)
      return Error(ErrorCode::kPermissionDenied,
                   "a node cannot drain or undrain another through a relay");
    return post ? drain(req, team) : undrain(req);
  }
  if (is_create(req, path)) return create(req, team, internal, local);
  if (is_list(req, path) && !internal) return list(req, path, team, local);
  if (is_metrics_list(req, path) && !internal) return metrics(req, team, local);
  const std::string* id = sandbox_of(parts);
  if (!id) return local();
  wait_not_moving(*id);
  // Served here: what another node relayed, and what this node holds. A sandbox that goes
  // (DELETE answered 204) leaves the cluster's map.
  auto serve_here = [&]() -> Result<Response> {
    auto r = local();
    const bool killed = r.ok() && r->result_int() == 204 && req.method() == bhttp::verb::delete_ &&
                        (parts.size() == 2 || (parts.size() == 3 && parts[0] == "v2"));
    if (killed) {
      if (Status s = membership_.forget(*id); !s.ok())
        log_.warn("sandbox " + *id +
                  " killed but still in the cluster map: " + s.error().message());
    }
    return r;
  };
  if (sandboxes_.find(*id)) {
    // A drain may move it away while this call waits for its lock (a pause, a resume, a kill
    // that came just before its move): the call then finds it gone, and is served where it went,
    // as if it had come after the move. Nothing was done here, so it is sent as it came.
    Request copy = req;  // local() may change req
    auto r = serve_here();
    const bool unknown =
        (!r.ok() && r.error().code() == ErrorCode::kNotFound) || (r.ok() && r->result_int() == 404);
    if (!unknown || sandboxes_.find(*id) || !known_remote(*id)) return r;
    log_.info("sandbox " + *id + " moved away while a call waited for it: sent where it went");
    req = std::move(copy);
    drop_placement(*id);
    if (internal) return not_owner(req, *id);
  } else if (internal) {
    // Relayed here by a node whose map (cached) names this one: a sandbox that moved away or
    // went is not answered as unknown but as misdirected, and the front door asks etcd again.
    // One paused to disk is still this node's (its record is in the store).
    auto rec = store_.get_sandbox(*id);
    if (!rec.ok() && rec.error().code() == ErrorCode::kNotFound) return not_owner(req, *id);
    return serve_here();
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto owner = owner_of(*id, attempt > 0);
    if (!owner.ok()) {
      log_.warn("cluster map unavailable, answering " + *id +
                " locally: " + owner.error().message());
      return serve_here();
    }
    // Unknown to the cluster, this node's own (paused to disk, say), or another team's (which
    // answers exactly as an unknown id does): the local route table answers.
    if (!*owner || (*owner)->placement.node == membership_.self().name ||
        (*owner)->placement.team != team)
      return serve_here();
    if (!(*owner)->node) {
      const bool detail = req.method() == bhttp::verb::get &&
                          (parts.size() == 2 || (parts.size() == 3 && parts[0] == "v2"));
      return lost(**owner, req, detail);
    }
    remember(*id, (*owner)->node->api_url);
    auto r = relay(*(*owner)->node, req, team);
    if (!r.ok()) {
      drop_placement(*id);
      return r;
    }
    if (r->result_int() == 421 && r->find(kClusterNotOwnerField) != r->end()) {
      drop_placement(*id);  // it moved (or went): the map again
      continue;
    }
    if (req.method() == bhttp::verb::delete_ && r->result_int() == 204) drop_placement(*id);
    return r;
  }
  // Named a node twice that does not have it (a record not yet swept): unknown here.
  return serve_here();
}

Response ClusterRouter::not_owner(const Request& req, const std::string& sandbox_id) const {
  auto res =
      http::json_response(421,
                          json::object{{"code", 421},
                                       {"message", "sandbox '" + sandbox_id + "' is not on node '" +
                                                       membership_.self().name + "'"}},
                          req.version());
  res.set(kClusterNotOwnerField, "1");
  return res;
}

Result<std::vector<cluster::NodeInfo>> ClusterRouter::live_nodes() {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (nodes_at_ != std::chrono::steady_clock::time_point{} && now - nodes_at_ < kNodesTtl)
      return nodes_;
  }
  ABX_ASSIGN_OR_RETURN(auto nodes, membership_.nodes());
  std::lock_guard lock(mu_);
  nodes_ = nodes;
  nodes_at_ = now;
  return nodes;
}

void ClusterRouter::drop_placement(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  placements_.erase(sandbox_id);
}

Result<std::optional<ClusterRouter::Owner>> ClusterRouter::owner_of(const std::string& id,
                                                                    bool fresh) {
  const auto now = std::chrono::steady_clock::now();
  std::optional<cluster::Placement> placement;
  if (!fresh) {
    std::lock_guard lock(mu_);
    if (auto it = placements_.find(id);
        it != placements_.end() && now - it->second.at < kPlacementTtl)
      placement = it->second.placement;
  }
  if (!placement) {
    ABX_ASSIGN_OR_RETURN(placement, membership_.placement(id));
    if (!placement) {
      drop_placement(id);
      return std::optional<Owner>();
    }
    std::lock_guard lock(mu_);
    if (placements_.size() >= kMaxRemembered) placements_.clear();
    placements_[id] = CachedPlacement{*placement, now};
  }
  Owner o{std::move(*placement), std::nullopt};
  ABX_ASSIGN_OR_RETURN(auto nodes, live_nodes());
  for (auto& n : nodes)
    if (n.name == o.placement.node) o.node = std::move(n);
  return std::optional<Owner>(std::move(o));
}

Result<cluster::Endpoint> ClusterRouter::node_endpoint(const std::string& api_url) const {
  ABX_ASSIGN_OR_RETURN(cluster::Endpoint ep, cluster::parse_api_url(api_url));
  if (ep.tls && !tls_)
    return Error(
        ErrorCode::kFailedPrecondition,
        "node " + api_url +
            " speaks mutual TLS and this node has none (--cluster-cert, --cluster-listen)");
  if (!ep.tls && tls_)
    return Error(ErrorCode::kFailedPrecondition,
                 "node " + api_url +
                     " is plain http:// and this cluster uses mutual TLS: not sent the secret");
  return ep;
}

Result<Response> ClusterRouter::fetch_node(const std::string& api_url, Request req,
                                           std::chrono::milliseconds timeout) {
  ABX_ASSIGN_OR_RETURN(cluster::Endpoint ep, node_endpoint(api_url));
  req.set(bhttp::field::host, ep.str());
  return http::fetch(ep.host, ep.port, std::move(req), timeout, tls_ ? &tls_->client() : nullptr);
}

Result<Response> ClusterRouter::relay(const cluster::NodeInfo& node, const Request& req,
                                      const std::string& team, std::chrono::milliseconds timeout) {
  Request out = req;
  // The client's credentials end here: the owner trusts the cluster secret and the team.
  out.erase("X-API-KEY");
  out.erase(bhttp::field::authorization);
  out.erase(kPeerAddressField);
  out.erase(kClusterAuthField);
  out.erase(kClusterTeamField);
  out.erase(kClusterTransportField);
  out.erase(bhttp::field::connection);
  out.set(kClusterAuthField, secret_);
  out.set(kClusterTeamField, team);
  out.prepare_payload();
  auto res = fetch_node(node.api_url, std::move(out), timeout);
  if (!res.ok())
    return unavailable("node '" + node.name + "' (" + node.api_url +
                       ") did not answer: " + res.error().message());
  res->erase(bhttp::field::transfer_encoding);
  res->erase(bhttp::field::connection);
  res->erase(bhttp::field::keep_alive);
  res->prepare_payload();
  return std::move(*res);
}

Result<Response> ClusterRouter::create(Request& req, const std::string& team, bool internal,
                                       const LocalHandler& local) {
  auto here = [&]() -> Result<Response> {
    auto r = local();
    if (r.ok()) record_created(*r, team);
    return r;
  };
  if (internal) return here();
  auto nodes = membership_.nodes();
  auto placements = nodes.ok() ? membership_.placements_cached()
                               : Result<std::vector<cluster::Placement>>(nodes.error());
  if (!placements.ok())
    return unavailable("cluster state unavailable: " + placements.error().message());
  ABX_ASSIGN_OR_RETURN(std::string chosen,
                       cluster::choose_node(*nodes, *placements, membership_.self().name));
  if (chosen == membership_.self().name) return here();
  const cluster::NodeInfo* node = nullptr;
  for (const auto& n : *nodes)
    if (n.name == chosen) node = &n;
  auto r = relay(*node, req, team);
  if (!r.ok() && r.error().code() == ErrorCode::kUnavailable) {
    // Placed on a node that died a moment ago (its key not yet expired): here instead.
    log_.warn("create placed on " + chosen + " failed (" + r.error().message() +
              "); creating here");
    return here();
  }
  if (r.ok() && r->result_int() == 404) {
    // Templates are each node's own (a built one is on the node that built it): one the chosen
    // node lacks may be here.
    log_.info("create placed on " + chosen + " answered 404 (template not there); trying here");
    return here();
  }
  if (r.ok() && r->result_int() / 100 == 2) {
    auto v = parse_json_strict(r->body());
    if (v.ok() && v->is_object()) {
      if (auto id = json_optional_string(v->get_object(), "sandboxID", ""); id.ok() && *id)
        remember(**id, node->api_url);
    }
  }
  return r;
}

void ClusterRouter::record_created(const Response& res, const std::string& team) {
  if (res.result_int() / 100 != 2) return;
  auto v = parse_json_strict(res.body());
  if (!v.ok() || !v->is_object()) return;
  const json::object& o = v->get_object();
  auto str = [&](std::string_view key) {
    auto s = json_optional_string(o, key, "");
    return s.ok() && *s ? **s : std::string();
  };
  cluster::Placement p;
  p.sandbox_id = str("sandboxID");
  if (p.sandbox_id.empty()) return;
  p.node = membership_.self().name;
  p.team = team;
  p.template_id = str("templateID");
  p.alias = str("alias");
  p.client_id = str("clientID");
  p.started_at = rfc3339_ms(now_ms());
  if (Status s = membership_.record(p); !s.ok())
    log_.error("sandbox " + p.sandbox_id + " created but not in the cluster map (other nodes " +
               "will not find it): " + s.error().message());
}

std::vector<json::value> ClusterRouter::fan_out(const Request& req, const std::string& team,
                                                const std::vector<cluster::NodeInfo>& nodes,
                                                std::vector<std::string>& missing,
                                                const char* what) {
  std::vector<const cluster::NodeInfo*> others;
  for (const auto& n : nodes)
    if (n.name != membership_.self().name) others.push_back(&n);
  // One thread per node: a hung node (stopped, partitioned with its lease still valid) costs
  // the call the deadline, not the sum of the nodes' answers.
  std::vector<Result<Response>> answers(others.size(), Result<Response>(internal_error("")));
  std::vector<std::thread> threads;
  threads.reserve(others.size());
  for (std::size_t i = 0; i < others.size(); ++i)
    threads.emplace_back([&, i] { answers[i] = relay(*others[i], req, team, fanout_timeout_); });
  for (auto& t : threads) t.join();
  std::vector<json::value> out;
  for (std::size_t i = 0; i < others.size(); ++i) {
    Result<Response>& theirs = answers[i];
    std::optional<json::value> v;
    if (theirs.ok() && theirs->result_int() == 200) {
      if (auto parsed = parse_json_strict(theirs->body()); parsed.ok()) v = std::move(*parsed);
    }
    if (!v) {
      log_.warn(std::string(what) + ": node " + others[i]->name + " left out: " +
                (!theirs.ok()                  ? theirs.error().message()
                 : theirs->result_int() == 200 ? std::string("an answer that is not JSON")
                                               : "HTTP " + std::to_string(theirs->result_int())));
      missing.push_back(others[i]->name);
      continue;
    }
    out.push_back(std::move(*v));
  }
  return out;
}

namespace {

void set_missing(Response& res, const std::vector<std::string>& missing) {
  if (missing.empty()) return;
  std::string names;
  for (const auto& m : missing) names += (names.empty() ? "" : ",") + m;
  res.set(kClusterMissingField, names);
}

}  // namespace

Result<Response> ClusterRouter::list(Request& req, const std::string& path, const std::string& team,
                                     const LocalHandler& local) {
  // The other nodes are asked while this one answers.
  auto nodes = membership_.nodes();
  std::vector<std::string> missing;
  std::vector<json::value> theirs;
  std::thread asker;
  const Request copy = req;  // local() may change req
  if (nodes.ok())
    asker = std::thread([&] { theirs = fan_out(copy, team, *nodes, missing, "list"); });
  auto local_res = local();
  if (asker.joinable()) asker.join();
  ABX_ASSIGN_OR_RETURN(Response res, std::move(local_res));
  if (res.result_int() != 200) return res;
  auto mine = parse_json_strict(res.body());
  if (!mine.ok() || !mine->is_array()) return res;
  json::array merged = std::move(mine->get_array());
  if (!nodes.ok()) {
    log_.warn("listing this node's sandboxes only: " + nodes.error().message());
    res.set(kClusterMissingField, "*");
    return res;
  }
  for (auto& v : theirs) {
    if (!v.is_array()) continue;
    for (auto& item : v.get_array()) merged.push_back(std::move(item));
  }
  // v2 lists every state: the sandboxes of nodes that left the cluster are there as "lost"
  // (unless the query asks for other states only). v1 lists running sandboxes only.
  const auto states = requested_states(req);
  const bool want_lost =
      path == "/v2/sandboxes" &&
      (states.empty() || std::find(states.begin(), states.end(), "lost") != states.end());
  if (want_lost) {
    if (auto placements = membership_.placements_cached(); placements.ok()) {
      for (const auto& p : *placements) {
        if (p.team != team) continue;
        bool live = false;
        for (const auto& n : *nodes) live = live || n.name == p.node;
        if (live) continue;
        auto item = lost(Owner{p, std::nullopt}, req, true);
        if (item.ok()) merged.push_back(json::parse(item->body()));
      }
    }
  }
  // Newest first across nodes, as one node lists (RFC 3339 in UTC sorts as text).
  auto started = [](const json::value& v) -> std::string_view {
    if (!v.is_object()) return {};
    const json::value* s = v.get_object().if_contains("startedAt");
    return s && s->is_string() ? std::string_view(s->get_string()) : std::string_view();
  };
  std::stable_sort(merged.begin(), merged.end(), [&](const json::value& a, const json::value& b) {
    return started(a) > started(b);
  });
  res.erase("X-Next-Token");  // paging across nodes is not implemented: one merged page
  set_missing(res, missing);
  res.body() = json::serialize(merged);
  res.prepare_payload();
  return res;
}

Result<Response> ClusterRouter::metrics(Request& req, const std::string& team,
                                        const LocalHandler& local) {
  ABX_ASSIGN_OR_RETURN(Response res, local());
  if (res.result_int() != 200) return res;  // a bad query (no ids, too many) answers here
  auto mine = parse_json_strict(res.body());
  if (!mine.ok() || !mine->is_object()) return res;
  json::value* own = mine->get_object().if_contains("sandboxes");
  if (!own || !own->is_object()) return res;
  json::object merged = std::move(own->get_object());
  auto nodes = membership_.nodes();
  if (!nodes.ok()) {
    log_.warn("metrics of this node's sandboxes only: " + nodes.error().message());
    res.set(kClusterMissingField, "*");
    return res;
  }
  std::vector<std::string> missing;
  for (auto& v : fan_out(req, team, *nodes, missing, "metrics")) {
    if (!v.is_object()) continue;
    json::value* sbs = v.get_object().if_contains("sandboxes");
    if (!sbs || !sbs->is_object()) continue;
    // A sandbox lives on one node; should two answer for one id (a node that adopted a sandbox
    // another still reports), the first answer stays.
    for (auto& [id, m] : sbs->get_object())
      if (!merged.contains(id)) merged[id] = std::move(m);
  }
  set_missing(res, missing);
  res.body() = json::serialize(json::object{{"sandboxes", std::move(merged)}});
  res.prepare_payload();
  return res;
}

Result<Response> ClusterRouter::lost(const Owner& owner, const Request& req, bool detail) {
  const cluster::Placement& p = owner.placement;
  const std::string reason = "node '" + p.node + "' left the cluster (its lease expired)";
  if (!detail) return unavailable("sandbox '" + p.sandbox_id + "' is lost: " + reason);
  json::object o{{"sandboxID", p.sandbox_id},
                 {"templateID", p.template_id},
                 {"clientID", p.client_id},
                 {"startedAt", p.started_at},
                 {"endAt", p.end_at.empty() ? p.started_at : p.end_at},
                 {"state", "lost"},
                 {"cpuCount", 0},
                 {"memoryMB", 0},
                 {"diskSizeMB", 0},
                 {"envdVersion", ""},
                 {"metadata", json::object{}},
                 {"abxNode", p.node},
                 {"abxLostReason", reason}};
  if (!p.alias.empty()) o["alias"] = p.alias;
  return http::json_response(200, o, req.version());
}

void ClusterRouter::wait_not_moving(const std::string& sandbox_id) {
  std::unique_lock lock(mu_);
  moved_cv_.wait_for(lock, kRelayTimeout,
                     [&] { return moving_.find(sandbox_id) == moving_.end(); });
}

Result<Response> ClusterRouter::move_in(const std::string& tar_path, unsigned version) {
  ABX_ASSIGN_OR_RETURN(std::string id, sandboxes_.move_in(tar_path));
  {
    // It is this node's now (it may have been another's before: moved back).
    std::lock_guard lock(mu_);
    owners_.erase(id);
    placements_.erase(id);
  }
  auto sb = sandboxes_.find(id);
  const bool paused = sb && sb->paused;
  log_.info("sandbox " + id + " moved in" + (paused ? " (paused)" : ""));
  return http::json_response(
      200, json::object{{"sandboxID", id}, {"state", paused ? "paused" : "running"}}, version);
}

Status ClusterRouter::ship(const std::string& sandbox_id, const std::string& team,
                           const cluster::NodeInfo& node, const std::string& tar_path) {
  ABX_TRY(node_endpoint(node.api_url));
  std::ifstream in(tar_path, std::ios::binary);
  std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) return internal_error("read " + tar_path);
  Request out(bhttp::verb::post, std::string(kMoveInPath), 11);
  out.set(bhttp::field::content_type, "application/x-tar");
  out.set(kClusterAuthField, secret_);
  out.set(kClusterTeamField, team);
  out.body() = std::move(body);
  out.prepare_payload();
  auto res = fetch_node(node.api_url, std::move(out), kMoveTimeout);
  if (!res.ok())
    return unavailable("node '" + node.name +
                       "' did not answer the move: " + res.error().message());
  if (res->result_int() != 200)
    return Error(
        res->result_int() == 409 ? ErrorCode::kFailedPrecondition : ErrorCode::kUnavailable,
        "node '" + node.name + "' refused the move (" + std::to_string(res->result_int()) +
            "): " + res->body());
  // It runs there: the cluster's map names that node (a compare-and-swap from this one).
  Status m = membership_.move(sandbox_id, membership_.self().name, node.name);
  if (!m.ok() && m.error().code() == ErrorCode::kNotFound) {
    cluster::Placement p;
    p.sandbox_id = sandbox_id;
    p.node = node.name;
    p.team = team;
    p.started_at = rfc3339_ms(now_ms());
    m = membership_.record(p);
  }
  if (!m.ok()) {
    // The map still names this node: the copy there goes, and the sandbox stays here. That
    // node's kill removes the map's record too: it is written back if it went.
    auto kept = membership_.placement(sandbox_id);
    Request del(bhttp::verb::delete_, "/sandboxes/" + sandbox_id, 11);
    del.set(kClusterAuthField, secret_);
    del.set(kClusterTeamField, team);
    del.prepare_payload();
    (void)fetch_node(node.api_url, std::move(del), kRelayTimeout);
    if (kept.ok() && *kept && (*kept)->node == membership_.self().name) {
      if (auto now = membership_.placement(sandbox_id); now.ok() && !*now)
        (void)membership_.record(**kept);
    }
    return Error(m.error().code(), "the cluster's map could not name node '" + node.name +
                                       "': " + m.error().message());
  }
  remember(sandbox_id, node.api_url);
  drop_placement(sandbox_id);
  return {};
}

Result<Response> ClusterRouter::drain(const Request& req, const std::string& caller) {
  std::lock_guard one(drain_mu_);
  std::uint64_t epoch = 0;
  {
    std::lock_guard flag(drain_flag_mu_);
    {
      std::lock_guard lock(mu_);
      epoch = drain_epoch_;
    }
    ABX_TRY(membership_.set_draining(true));
  }
  // An undrain (DELETE) since this drain began: the moves stop.
  auto undrained = [&] {
    std::lock_guard lock(mu_);
    return drain_epoch_ != epoch;
  };
  const std::string self = membership_.self().name;
  log_.info("draining: moving this node's sandboxes to other nodes");
  json::array out;
  int moved = 0, failed = 0, others_moved = 0, others_failed = 0;
  std::set<std::string> seen;
  bool stopped = false;
  // Each sandbox once: those held when the drain began, then those that came while it ran (an
  // adoption, a create from a front door that had not seen the flag yet), a few rounds at most.
  for (int round = 0; round < kDrainRounds && !stopped; ++round) {
    std::vector<std::shared_ptr<LiveSandbox>> todo;
    for (auto& sb : sandboxes_.all())
      if (seen.insert(sb->record.id).second) todo.push_back(sb);
    if (todo.empty()) break;
    for (const auto& sb : todo) {
      const std::string id = sb->record.id;
      const std::string team = sb->record.team_id;
      bool paused = sb->paused;
      json::object item{{"sandboxID", id}};
      // The answer names the caller's team's sandboxes; other teams' are only counted.
      auto report = [&](bool ok) {
        if (team == caller) {
          item["state"] = paused ? "paused" : "running";
          out.push_back(std::move(item));
        } else {
          ++(ok ? others_moved : others_failed);
        }
        ++(ok ? moved : failed);
      };
      if (!stopped) stopped = undrained();
      if (stopped) {
        item["error"] = "not moved: the node was undrained (DELETE /abx/cluster/drain)";
        report(false);
        continue;
      }
      auto nodes = membership_.nodes();
      auto placements = nodes.ok() ? membership_.placements_cached()
                                   : Result<std::vector<cluster::Placement>>(nodes.error());
      Result<std::string> chosen = placements.ok() ? cluster::choose_node(*nodes, *placements, "")
                                                   : Result<std::string>(placements.error());
      if (chosen.ok() && *chosen == self)
        chosen = Error(ErrorCode::kResourceExhausted, "no other node has a free slot");
      if (!chosen.ok()) {
        item["error"] = chosen.error().message();
        report(false);
        continue;
      }
      cluster::NodeInfo target;
      for (const auto& n : *nodes)
        if (n.name == *chosen) target = n;
      {
        std::lock_guard lock(mu_);
        moving_.insert(id);
      }
      const std::string tar = sandboxes_.options().home + "/uploads/.move-" + id + ".tar";
      std::error_code ec;
      std::filesystem::create_directories(sandboxes_.options().home + "/uploads", ec);
      Status s = sandboxes_.move_out(
          id, tar, [&](const std::string& path) { return ship(id, team, target, path); }, &paused);
      {
        std::lock_guard lock(mu_);
        moving_.erase(id);
      }
      moved_cv_.notify_all();
      // Killed while the drain ran: neither moved nor left here.
      if (!s.ok() && s.error().code() == ErrorCode::kNotFound && !sandboxes_.find(id)) continue;
      if (s.ok()) {
        item["node"] = target.name;
      } else {
        item["error"] = s.error().message();
        log_.warn("drain: sandbox " + id + " stays here: " + s.error().message());
      }
      report(s.ok());
    }
  }
  log_.info(std::string(stopped ? "drain stopped by an undrain: " : "drained: ") +
            std::to_string(moved) + " moved, " + std::to_string(failed) + " not moved");
  return http::json_response(
      200,
      json::object{
          {"node", self},
          {"draining", membership_.draining()},
          {"moved", moved},
          {"notMoved", failed},
          {"sandboxes", std::move(out)},
          {"otherTeams", json::object{{"moved", others_moved}, {"notMoved", others_failed}}}},
      req.version());
}

Result<Response> ClusterRouter::undrain(const Request& req) {
  {
    std::lock_guard flag(drain_flag_mu_);
    {
      std::lock_guard lock(mu_);
      ++drain_epoch_;
    }
    ABX_TRY(membership_.set_draining(false));
  }
  log_.info("undrained: placement puts sandboxes on this node again");
  return http::json_response(
      200, json::object{{"node", membership_.self().name}, {"draining", false}}, req.version());
}

void ClusterRouter::remember(const std::string& sandbox_id, const std::string& api_url) {
  std::lock_guard lock(mu_);
  if (owners_.size() >= kMaxRemembered) owners_.clear();
  owners_[sandbox_id] = api_url;
}

bool ClusterRouter::known_remote(const std::string& sandbox_id) const {
  std::lock_guard lock(mu_);
  return owners_.find(sandbox_id) != owners_.end();
}

Result<UniqueFd> ClusterRouter::connect_owner(const std::string& sandbox_id) {
  std::string url;
  {
    std::lock_guard lock(mu_);
    if (auto it = owners_.find(sandbox_id); it != owners_.end()) url = it->second;
  }
  if (url.empty()) {
    ABX_ASSIGN_OR_RETURN(auto owner, owner_of(sandbox_id));
    if (!owner || owner->placement.node == membership_.self().name)
      return not_found("sandbox '" + sandbox_id + "' not found");
    if (!owner->node)
      return unavailable("sandbox '" + sandbox_id + "' is lost: node '" + owner->placement.node +
                         "' left the cluster");
    url = owner->node->api_url;
    remember(sandbox_id, url);
  }
  ABX_ASSIGN_OR_RETURN(cluster::Endpoint ep, node_endpoint(url));
  if (tls_) {
    // Sandbox traffic to the owner's internal endpoint through a TLS tunnel (cluster_tls.h).
    auto fd = tls_->tunnel(ep.host, ep.port, kConnectTimeout);
    if (!fd.ok()) {
      std::lock_guard lock(mu_);
      owners_.erase(sandbox_id);
      return unavailable("the node of sandbox '" + sandbox_id + "' (" + url +
                         ") cannot be reached: " + fd.error().message());
    }
    return fd;
  }
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  asio::ip::tcp::socket sock(io);
  boost::system::error_code ec = asio::error::would_block;
  resolver.async_resolve(
      ep.host, std::to_string(ep.port), [&](const boost::system::error_code& e, auto results) {
        if (e) {
          ec = e;
          return;
        }
        asio::async_connect(sock, results,
                            [&](const boost::system::error_code& e2, const auto&) { ec = e2; });
      });
  io.run_for(kConnectTimeout);
  if (ec) {
    std::lock_guard lock(mu_);
    owners_.erase(sandbox_id);
    return unavailable("the node of sandbox '" + sandbox_id + "' (" + url +
                       ") cannot be reached: " +
                       (ec == asio::error::would_block ? std::string("timed out") : ec.message()));
  }
  sock.set_option(asio::ip::tcp::no_delay(true), ec);
  return UniqueFd(sock.release());
}

void ClusterRouter::sweep_loop() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, kSweepPeriod, [this] { return stopping_; })) {
    lock.unlock();
    forget_gone();
    lock.lock();
  }
}

void ClusterRouter::forget_gone() {
  auto placements = membership_.placements();
  if (!placements.ok()) return;
  for (const auto& p : *placements) {
    if (p.node != membership_.self().name || sandboxes_.find(p.sandbox_id)) continue;
    // Paused to disk: not live, but still this node's (its record stays in the store).
    auto rec = store_.get_sandbox(p.sandbox_id);
    if (!rec.ok() && rec.error().code() == ErrorCode::kNotFound)
      (void)membership_.forget(p.sandbox_id);
  }
}

}  // namespace abx::platform
