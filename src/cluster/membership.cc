#include "abx/cluster/membership.h"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <fstream>

#include "abx/base/hex.h"
#include "abx/base/json.h"
#include "abx/base/time.h"
#include "abx/base/try.h"

namespace abx::cluster {

namespace json = boost::json;

namespace {

// A record bigger than this is refused (a placement holds a few short strings).
constexpr std::size_t kMaxRecordBytes = 16 * 1024;

Result<std::string> required_string(const json::object& o, std::string_view key) {
  return json_required_string(o, key, "");
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = 0;
  in >> one;
  return in ? one : 0;
}

}  // namespace

Status check_node_name(std::string_view name) {
  auto ok_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  };
  if (name.empty() || name.size() > 63 || name.front() == '-' ||
      !std::all_of(name.begin(), name.end(), ok_char))
    return invalid_argument("node name '" + std::string(name) +
                            "': expected [a-z0-9][a-z0-9-]{0,62}");
  return {};
}

std::string encode_node(const NodeInfo& n) {
  return json::serialize(json::object{{"name", n.name},
                                      {"apiUrl", n.api_url},
                                      {"capacity", n.capacity},
                                      {"sandboxes", n.sandboxes},
                                      {"free", std::max<std::int64_t>(0, n.capacity - n.sandboxes)},
                                      {"load", n.load},
                                      {"updatedAt", n.updated_ms},
                                      {"draining", n.draining}});
}

Result<NodeInfo> decode_node(std::string_view text) {
  if (text.size() > kMaxRecordBytes) return invalid_argument("node record too large");
  ABX_ASSIGN_OR_RETURN(json::value v, parse_json_strict(text));
  ABX_ASSIGN_OR_RETURN(const json::object* o, json_as_object(v, ""));
  NodeInfo n;
  ABX_ASSIGN_OR_RETURN(n.name, required_string(*o, "name"));
  ABX_ASSIGN_OR_RETURN(n.api_url, required_string(*o, "apiUrl"));
  ABX_ASSIGN_OR_RETURN(n.capacity, json_required_int(*o, "capacity", "", 0, 1 << 30));
  ABX_ASSIGN_OR_RETURN(n.sandboxes, json_required_int(*o, "sandboxes", "", 0, 1 << 30));
  ABX_ASSIGN_OR_RETURN(auto updated, json_optional_int(*o, "updatedAt", ""));
  n.updated_ms = updated.value_or(0);
  if (const json::value* l = json_find(*o, "load")) {
    if (!l->is_number()) return invalid_argument("load: expected a number");
    n.load = l->to_number<double>();
  }
  ABX_ASSIGN_OR_RETURN(auto draining, json_optional_bool(*o, "draining", ""));
  n.draining = draining.value_or(false);
  ABX_TRY(check_node_name(n.name));
  ABX_TRY(parse_api_url(n.api_url));
  return n;
}

std::string encode_placement(const Placement& p) {
  return json::serialize(json::object{{"sandboxID", p.sandbox_id},
                                      {"node", p.node},
                                      {"team", p.team},
                                      {"templateID", p.template_id},
                                      {"alias", p.alias},
                                      {"clientID", p.client_id},
                                      {"startedAt", p.started_at},
                                      {"endAt", p.end_at}});
}

Result<Placement> decode_placement(std::string_view text) {
  if (text.size() > kMaxRecordBytes) return invalid_argument("placement record too large");
  ABX_ASSIGN_OR_RETURN(json::value v, parse_json_strict(text));
  ABX_ASSIGN_OR_RETURN(const json::object* o, json_as_object(v, ""));
  Placement p;
  ABX_ASSIGN_OR_RETURN(p.sandbox_id, required_string(*o, "sandboxID"));
  ABX_ASSIGN_OR_RETURN(p.node, required_string(*o, "node"));
  ABX_ASSIGN_OR_RETURN(p.team, required_string(*o, "team"));
  auto opt = [&](std::string_view key, std::string& into) -> Status {
    ABX_ASSIGN_OR_RETURN(auto s, json_optional_string(*o, key, ""));
    into = s.value_or("");
    return {};
  };
  ABX_TRY(opt("templateID", p.template_id));
  ABX_TRY(opt("alias", p.alias));
  ABX_TRY(opt("clientID", p.client_id));
  ABX_TRY(opt("startedAt", p.started_at));
  ABX_TRY(opt("endAt", p.end_at));
  return p;
}

namespace {

bool lower_hex(std::string_view s, std::size_t n) { return s.size() == n && is_lower_hex(s); }

}  // namespace

std::string encode_key(const SharedKey& k) {
  return json::serialize(json::object{{"id", k.id},
                                      {"team", k.team},
                                      {"name", k.name},
                                      {"prefix", k.prefix},
                                      {"digest", k.digest},
                                      {"createdAt", k.created_ms},
                                      {"revoked", k.revoked}});
}

Result<SharedKey> decode_key(std::string_view text) {
  if (text.size() > kMaxRecordBytes) return invalid_argument("key record too large");
  ABX_ASSIGN_OR_RETURN(json::value v, parse_json_strict(text));
  ABX_ASSIGN_OR_RETURN(const json::object* o, json_as_object(v, ""));
  SharedKey k;
  ABX_ASSIGN_OR_RETURN(k.id, required_string(*o, "id"));
  if (!lower_hex(k.id, 16)) return invalid_argument("id: expected 16 lowercase hex digits");
  ABX_ASSIGN_OR_RETURN(k.team, required_string(*o, "team"));
  if (Status s = check_node_name(k.team); !s)
    return invalid_argument("team: expected [a-z0-9][a-z0-9-]{0,62}");
  ABX_ASSIGN_OR_RETURN(k.name, required_string(*o, "name"));
  if (k.name.size() > 256) return invalid_argument("name: longer than 256 bytes");
  ABX_ASSIGN_OR_RETURN(k.prefix, required_string(*o, "prefix"));
  if (!k.prefix.starts_with("e2b_") || !lower_hex(std::string_view(k.prefix).substr(4), 4))
    return invalid_argument("prefix: expected e2b_ and 4 lowercase hex digits");
  ABX_ASSIGN_OR_RETURN(k.digest, required_string(*o, "digest"));
  if (!lower_hex(k.digest, 64)) return invalid_argument("digest: expected 64 lowercase hex digits");
  ABX_ASSIGN_OR_RETURN(k.created_ms, json_required_int(*o, "createdAt", "", 0));
  ABX_ASSIGN_OR_RETURN(auto revoked, json_optional_bool(*o, "revoked", ""));
  k.revoked = revoked.value_or(false);
  return k;
}

Result<Endpoint> parse_api_url(std::string_view url) {
  const bool tls = url.starts_with("https://");
  if (!tls && !url.starts_with("http://"))
    return invalid_argument("node API URL '" + std::string(url) +
                            "': expected http://HOST:PORT or https://HOST:PORT");
  std::string_view rest = url.substr(tls ? 8 : 7);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  auto colon = rest.rfind(':');
  unsigned port = 0;
  if (colon == std::string_view::npos || colon == 0)
    return invalid_argument("node API URL '" + std::string(url) +
                            "': expected http(s)://HOST:PORT");
  std::string_view p = rest.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535)
    return invalid_argument("node API URL '" + std::string(url) + "': bad port");
  std::string_view host = rest.substr(0, colon);
  if (host.find('/') != std::string_view::npos || host.find('@') != std::string_view::npos)
    return invalid_argument("node API URL '" + std::string(url) + "': expected http://HOST:PORT");
  return Endpoint{std::string(host), static_cast<std::uint16_t>(port), tls};
}

Result<std::string> choose_node(const std::vector<NodeInfo>& nodes,
                                const std::vector<Placement>& placements,
                                std::string_view preferred) {
  if (nodes.empty()) return unavailable("no live node in the cluster");
  std::map<std::string, std::int64_t, std::less<>> placed;
  for (const auto& p : placements) ++placed[p.node];
  const NodeInfo* best = nullptr;
  std::int64_t best_free = 0;
  for (const auto& n : nodes) {
    if (n.draining) continue;
    // The records count sandboxes placed a moment ago that the node's value (refreshed each
    // renewal) does not show yet; the node's own count those the records miss.
    const std::int64_t used = std::max(placed[n.name], n.sandboxes);
    const std::int64_t free = n.capacity - used;
    if (free <= 0) continue;
    const bool better = !best || free > best_free ||
                        (free == best_free && n.name == preferred && best->name != preferred) ||
                        (free == best_free && best->name != preferred && n.name < best->name);
    if (better) {
      best = &n;
      best_free = free;
    }
  }
  if (!best) return Error(ErrorCode::kResourceExhausted, "no node of the cluster has a free slot");
  return best->name;
}

Result<std::unique_ptr<Membership>> Membership::start(EtcdClient& etcd, MembershipOptions opt) {
  ABX_TRY(check_node_name(opt.self.name));
  ABX_TRY(parse_api_url(opt.self.api_url));
  if (opt.ttl.count() < 1 || opt.ttl.count() > 3600)
    return invalid_argument("cluster lease TTL must be 1..3600 seconds");
  std::unique_ptr<Membership> m(new Membership(etcd, std::move(opt)));
  ABX_ASSIGN_OR_RETURN(m->lease_, etcd.grant_lease(m->opt_.ttl.count()));
  m->opt_.self.sandboxes = m->opt_.count_sandboxes ? m->opt_.count_sandboxes() : 0;
  m->opt_.self.load = load_average();
  m->opt_.self.updated_ms = now_ms();
  const std::string key = std::string(kNodesPrefix) + m->opt_.self.name;
  ABX_ASSIGN_OR_RETURN(bool made, etcd.put_if_absent(key, encode_node(m->opt_.self), m->lease_));
  if (!made) {
    (void)etcd.revoke_lease(m->lease_);
    return Error(ErrorCode::kAlreadyExists,
                 "a live node named '" + m->opt_.self.name + "' is in the cluster already");
  }
  m->thread_ = std::thread([raw = m.get()] { raw->renew_loop(); });
  return m;
}

Membership::~Membership() { stop(); }

void Membership::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lease_ != 0) (void)etcd_.revoke_lease(lease_);
}

Status Membership::register_node() {
  std::lock_guard lock(register_mu_);
  opt_.self.draining = draining_;
  opt_.self.sandboxes = opt_.count_sandboxes ? opt_.count_sandboxes() : 0;
  opt_.self.load = load_average();
  opt_.self.updated_ms = now_ms();
  return etcd_.put(std::string(kNodesPrefix) + opt_.self.name, encode_node(opt_.self), lease_);
}

void Membership::renew_loop() {
  const auto period =
      std::max<std::chrono::milliseconds>(opt_.ttl / 3, std::chrono::milliseconds(200));
  auto tell = [this] {
    if (opt_.each_renewal) opt_.each_renewal(*this);
  };
  tell();
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    auto ttl = etcd_.keep_alive(lease_);
    if (!ttl.ok() && ttl.error().code() == ErrorCode::kNotFound) {
      // Expired while etcd could not be reached (or this node stalled): a new lease, and the
      // node is back in the cluster.
      log_.warn("node lease expired; registering again under a new lease");
      if (auto l = etcd_.grant_lease(opt_.ttl.count()); l.ok()) lease_ = *l;
    } else if (!ttl.ok()) {
      log_.warn("node lease renewal failed: " + ttl.error().message());
    }
    if (Status s = register_node(); !s.ok())
      log_.warn("node registration refresh failed: " + s.error().message());
    tell();
    lock.lock();
  }
}

Result<std::vector<NodeInfo>> Membership::nodes() {
  ABX_ASSIGN_OR_RETURN(auto kvs, etcd_.get_prefix(kNodesPrefix));
  std::vector<NodeInfo> out;
  for (const auto& kv : kvs) {
    auto n = decode_node(kv.value);
    if (!n.ok()) {
      log_.warn("ignoring node record " + kv.key + ": " + n.error().message());
      continue;
    }
    out.push_back(std::move(*n));
  }
  return out;
}

Result<std::vector<Placement>> Membership::placements() {
  ABX_ASSIGN_OR_RETURN(auto kvs, etcd_.get_prefix(kSandboxesPrefix));
  std::vector<Placement> out;
  for (const auto& kv : kvs) {
    auto p = decode_placement(kv.value);
    if (!p.ok()) {
      log_.warn("ignoring placement record " + kv.key + ": " + p.error().message());
      continue;
    }
    out.push_back(std::move(*p));
  }
  return out;
}

Result<std::vector<Placement>> Membership::placements_cached() {
  std::lock_guard lock(snapshot_mu_);
  if (snapshot_revision_ > 0) {
    ABX_ASSIGN_OR_RETURN(auto changed,
                         etcd_.range_prefix(kSandboxesPrefix, snapshot_revision_ + 1, true));
    if (changed.kvs.empty() && changed.count == snapshot_count_) return snapshot_;
  }
  ABX_ASSIGN_OR_RETURN(auto all, etcd_.range_prefix(kSandboxesPrefix, 0, false));
  std::vector<Placement> out;
  out.reserve(all.kvs.size());
  for (const auto& kv : all.kvs) {
    auto p = decode_placement(kv.value);
    if (!p.ok()) {
      log_.warn("ignoring placement record " + kv.key + ": " + p.error().message());
      continue;
    }
    out.push_back(std::move(*p));
  }
  snapshot_ = out;
  snapshot_revision_ = all.revision;
  snapshot_count_ = all.count;
  return out;
}

Result<std::optional<Placement>> Membership::placement(std::string_view sandbox_id) {
  ABX_ASSIGN_OR_RETURN(auto kv, etcd_.get(std::string(kSandboxesPrefix) + std::string(sandbox_id)));
  if (!kv) return std::optional<Placement>();
  ABX_ASSIGN_OR_RETURN(auto p, decode_placement(kv->value));
  return std::optional<Placement>(std::move(p));
}

Status Membership::record(const Placement& p) {
  ABX_ASSIGN_OR_RETURN(bool made, etcd_.put_if_absent(std::string(kSandboxesPrefix) + p.sandbox_id,
                                                      encode_placement(p)));
  if (!made)
    return Error(ErrorCode::kAlreadyExists, "sandbox '" + p.sandbox_id + "' is placed already");
  return {};
}

Status Membership::forget(std::string_view sandbox_id) {
  ABX_ASSIGN_OR_RETURN(auto n,
                       etcd_.erase(std::string(kSandboxesPrefix) + std::string(sandbox_id)));
  (void)n;
  return {};
}

Status Membership::move(std::string_view sandbox_id, std::string_view from, std::string_view to) {
  ABX_TRY(check_node_name(to));
  const std::string key = std::string(kSandboxesPrefix) + std::string(sandbox_id);
  ABX_ASSIGN_OR_RETURN(auto kv, etcd_.get(key));
  if (!kv) return not_found("sandbox '" + std::string(sandbox_id) + "' has no placement");
  ABX_ASSIGN_OR_RETURN(Placement p, decode_placement(kv->value));
  if (p.node != from)
    return Error(ErrorCode::kFailedPrecondition, "sandbox '" + std::string(sandbox_id) +
                                                     "' is placed on '" + p.node + "', not '" +
                                                     std::string(from) + "'");
  p.node = std::string(to);
  ABX_ASSIGN_OR_RETURN(bool moved,
                       etcd_.put_if_revision(key, encode_placement(p), kv->mod_revision));
  if (!moved)
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox '" + std::string(sandbox_id) + "''s placement changed while moving it");
  return {};
}

Status Membership::set_draining(bool draining) {
  draining_ = draining;
  return register_node();
}

}  // namespace abx::cluster
