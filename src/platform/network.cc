// Sandbox networking in abxd (see network.h).
#include "network.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "abx/base/fd.h"
#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/egress/ruleset.h"
#include "abx/runtime/nflog.h"
#include "cert_authority.h"
#include "dns_forwarder.h"
#include "egress_proxy.h"

namespace abx::platform {

namespace json = boost::json;
namespace asio = boost::asio;

namespace {

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// FNV-1a: stable across builds and runs, unlike std::hash.
std::uint32_t fnv1a(std::string_view s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// A sandbox link of any abxd on this machine: "ab" + 8 hex digits + the slot number.
bool is_sandbox_link(std::string_view name) {
  if (name.size() < 11 || !name.starts_with("ab")) return false;
  for (std::size_t i = 2; i < name.size(); ++i) {
    char c = name[i];
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (!hex || (i >= 10 && !(c >= '0' && c <= '9'))) return false;
  }
  return true;
}

// E2B's fields go by their camelCase name, and the JS SDK sends some in snake_case
// (allow_internet_access): the name the body uses, camelCase if it has both.
std::string_view name_in(const json::object& o, std::string_view camel, std::string_view snake) {
  return o.contains(camel) || !o.contains(snake) ? camel : snake;
}

// A list of rules (allowOut, denyOut); null or absent is empty.
Result<std::vector<std::string>> string_list(const json::object& o, std::string_view camel,
                                             std::string_view snake, std::string_view at) {
  const std::string_view key = name_in(o, camel, snake);
  ABX_ASSIGN_OR_RETURN(std::vector<std::string> out, json_optional_string_list(o, key, at));
  if (out.size() > egress::kMaxRules)
    return invalid_argument(json_path_key(at, key) + ": at most " +
                            std::to_string(egress::kMaxRules) + " rules");
  return out;
}

Result<std::optional<bool>> opt_bool(const json::object& o, std::string_view camel,
                                     std::string_view snake, std::string_view at = "") {
  return json_optional_bool(o, name_in(o, camel, snake), at);
}

// Fills the rule fields of `spec` from an E2B network object and checks them; `at` is the
// object's path ("network", or "" for an update's body).
Status read_network_object(const json::object& n, SandboxNetworkSpec& spec, std::string_view at) {
  for (const char* unsupported : {"egressProxy", "egress_proxy", "httpsPorts"}) {
    const json::value* v = n.if_contains(unsupported);
    if (v && !v->is_null() && !(v->is_array() && v->get_array().empty()) &&
        !(v->is_object() && v->get_object().empty()))
      return invalid_argument(json_path_key(at, unsupported) + " is not supported by abxd");
  }
  ABX_ASSIGN_OR_RETURN(spec.allow_out, string_list(n, "allowOut", "allow_out", at));
  ABX_ASSIGN_OR_RETURN(spec.deny_out, string_list(n, "denyOut", "deny_out", at));
  ABX_ASSIGN_OR_RETURN(auto pub, opt_bool(n, "allowPublicTraffic", "allow_public_traffic", at));
  if (pub) spec.allow_public_traffic = *pub;
  if (const json::value* m = json_find(n, name_in(n, "maskRequestHost", "mask_request_host"))) {
    // It becomes a Host header: host name characters, a port and E2B's ${PORT} only.
    if (!m->is_string() || m->get_string().empty() || m->get_string().size() > 253 ||
        std::string_view(m->get_string())
                .find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789.-_:${}") != std::string_view::npos)
      return invalid_argument(json_path_key(at, "maskRequestHost") +
                              " must be a host name (with an optional :port; "
                              "${PORT} stands for the request's port)");
    spec.mask_request_host = std::string(m->get_string());
  }
  if (const json::value* r = n.if_contains("rules")) {
    ABX_ASSIGN_OR_RETURN(spec.transforms, egress::parse_transforms(*r, json_path_key(at, "rules")));
  }
  return {};
}

// The sandbox's verdict rules, with whether its transforms send its HTTP to the proxy.
Result<egress::Rules> rules_of(const SandboxNetworkSpec& spec) {
  ABX_ASSIGN_OR_RETURN(egress::Rules rules, egress::parse_rules(spec.allow_out, spec.deny_out,
                                                                spec.allow_internet_access));
  rules.transforms = !spec.transforms.empty();
  return rules;
}

// Checks the rules and fills spec.warnings.
Status check_rules(SandboxNetworkSpec& spec) {
  auto r = rules_of(spec);
  if (!r) return r.error();
  spec.warnings = egress::transform_warnings(*r, spec.transforms);
  return {};
}

}  // namespace

json::object SandboxNetworkSpec::to_json(bool reveal) const {
  json::array allow, deny;
  for (const auto& a : allow_out) allow.emplace_back(a);
  for (const auto& d : deny_out) deny.emplace_back(d);
  json::object o{{"allowOut", std::move(allow)},
                 {"denyOut", std::move(deny)},
                 {"allowPublicTraffic", allow_public_traffic}};
  if (!mask_request_host.empty()) o["maskRequestHost"] = mask_request_host;
  if (!transforms.empty()) o["rules"] = transforms.to_json(reveal);
  return o;
}

Result<SandboxNetworkSpec> SandboxNetworkSpec::from_json(const json::value& v) {
  if (!v.is_object()) return internal_error("stored network is not an object");
  const json::object& o = v.get_object();
  SandboxNetworkSpec s;
  if (auto e = o.if_contains("enabled"); e && e->is_bool()) s.enabled = e->get_bool();
  if (auto a = o.if_contains("allowInternetAccess"); a && a->is_bool())
    s.allow_internet_access = a->get_bool();
  if (auto n = o.if_contains("network"); n && n->is_object())
    ABX_TRY(read_network_object(n->get_object(), s, "network"));
  return s;
}

Result<SandboxNetworkSpec> parse_network_request(const json::object& body, bool default_internet) {
  SandboxNetworkSpec spec;
  spec.allow_internet_access = default_internet;
  ABX_ASSIGN_OR_RETURN(auto internet,
                       opt_bool(body, "allowInternetAccess", "allow_internet_access"));
  if (internet) spec.allow_internet_access = *internet;
  ABX_ASSIGN_OR_RETURN(const json::object* n, json_optional_object(body, "network", ""));
  if (n != nullptr) ABX_TRY(read_network_object(*n, spec, "network"));
  ABX_TRY(check_rules(spec));
  return spec;
}

Result<SandboxNetworkSpec> parse_network_update(const json::object& body,
                                                const SandboxNetworkSpec& current) {
  // The new rules are the whole policy (as in E2B, where allowInternetAccess: false is stored as
  // a deny of 0.0.0.0/0): what the body does not deny is allowed.
  SandboxNetworkSpec spec = current;
  spec.allow_out.clear();
  spec.deny_out.clear();
  spec.transforms = {};  // omitted: cleared, as in E2B
  spec.allow_internet_access = true;
  const json::object* n = &body;
  if (const json::value* inner = body.if_contains("network"); inner && inner->is_object())
    n = &inner->get_object();
  ABX_TRY(read_network_object(*n, spec, ""));
  ABX_ASSIGN_OR_RETURN(auto internet,
                       opt_bool(body, "allowInternetAccess", "allow_internet_access"));
  if (internet) spec.allow_internet_access = *internet;
  // Inbound settings belong to the sandbox's creation (its traffic token is made then).
  if (spec.allow_public_traffic != current.allow_public_traffic ||
      spec.mask_request_host != current.mask_request_host)
    return invalid_argument(
        "allowPublicTraffic and maskRequestHost are set when the sandbox is created");
  ABX_TRY(check_rules(spec));
  return spec;
}

json::object AuditEvent::to_json() const {
  json::object o{{"timestamp", timestamp_ms},
                 {"protocol", protocol},
                 {"destination", destination},
                 {"verdict", verdict}};
  if (port) o["port"] = port;
  if (!domain.empty()) o["domain"] = domain;
  if (verdict == "transform") {
    o["rule"] = rule;
    json::array names;
    for (const auto& h : headers) names.emplace_back(h);
    o["headers"] = std::move(names);
    o["status"] = status;
    if (!reason.empty()) o["reason"] = reason;
  }
  return o;
}

struct SandboxNetwork::Nflog {
  runtime::NflogReader reader;
  asio::posix::stream_descriptor fd;
  Nflog(runtime::NflogReader r, asio::io_context& io) : reader(std::move(r)), fd(io) {
    fd.assign(::dup(reader.fd()));
  }
};

SandboxNetwork::SandboxNetwork(NetworkOptions options) : opt_(std::move(options)) {}

namespace {
Error stopped_error() {
  return Error(ErrorCode::kUnavailable, "sandbox networking has stopped (abxd is shutting down)");
}
}  // namespace

SandboxNetwork::~SandboxNetwork() {
  if (dns_) dns_->stop();
  if (proxy_) proxy_->stop();
  io_.stop();
  for (auto& t : threads_) t.join();
}

std::vector<std::string> abx_table_names(std::string_view list_tables) {
  std::vector<std::string> out;
  std::istringstream in{std::string(list_tables)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string kw, family, name;
    if (!(words >> kw >> family >> name) || kw != "table" || family != "inet") continue;
    if (name.size() != 12 || !name.starts_with("abx_") ||
        name.find_first_not_of("0123456789abcdef", 4) != std::string::npos)
      continue;
    out.push_back(name);
  }
  return out;
}

std::optional<std::uint64_t> table_handle_of(std::string_view listing) {
  constexpr std::string_view kMark = "# handle ";
  const auto first_line = listing.substr(0, listing.find('\n'));
  const auto at = first_line.find(kMark);
  if (at == std::string_view::npos || !first_line.starts_with("table ")) return std::nullopt;
  const auto digits = first_line.substr(at + kMark.size());
  std::uint64_t h = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), h);
  if (ec != std::errc() || end == digits.data() || end != digits.data() + digits.size())
    return std::nullopt;
  return h;
}

std::optional<std::string> abxd_home_of(std::string_view listing) {
  constexpr std::string_view kMark = "comment \"abxd ";
  auto at = listing.find(kMark);
  if (at == std::string_view::npos) return std::nullopt;
  at += kMark.size();
  auto end = listing.find('"', at);
  if (end == std::string_view::npos || end == at) return std::nullopt;
  return std::string(listing.substr(at, end - at));
}

namespace {

// Whether the abxd of `home` is known to be gone: the home is missing, or its abxd.lock names a
// process that no longer exists. A home without a readable lock file is not judged (a
// SandboxNetwork started by other code than abxd's main, which writes the lock).
bool abxd_gone(const std::string& home) {
  std::error_code ec;
  if (!std::filesystem::exists(home, ec)) return !ec;
  std::ifstream in(home + "/abxd.lock");
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Writes `text` to `path` keeping the file's inode: running sandboxes bind-mount the file, and a
// replaced file (a rename over it) leaves their mount on a deleted inode, which CRIU then fails
// to restore ("Can't re-create deleted file"). An unchanged file is not written at all.
Status keep_inode_write(const std::string& path, const std::string& text) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return os::errno_error("open " + path, errno);
  // Longer than `text` (kPayloadTooLarge) differs too.
  auto have = os::read_all(fd.get(), text.size(), path);
  if (have && *have == text) return {};
  if (!have && have.error().code() != ErrorCode::kPayloadTooLarge) return have.error();
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return os::errno_error("lseek " + path, errno);
  ABX_TRY(os::write_all(fd.get(), text, path));
  if (::ftruncate(fd.get(), static_cast<off_t>(text.size())) != 0)
    return os::errno_error("truncate " + path, errno);
  return {};
}

// Whether any network interface's name starts with `prefix` (a link of that table's sandboxes).
bool links_with_prefix(const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net", ec)) {
    if (e.path().filename().string().starts_with(prefix)) return true;
  }
  return false;
}

// The range and the host's own IPv4 addresses (sandbox links aside), which are never a
// sandbox's destination; kFailedPrecondition if the range is already on the host (ambiguous).
Result<std::vector<egress::Cidr>> range_and_host_addresses(const egress::Cidr& range) {
  std::vector<egress::Cidr> extra{range};
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      std::uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
      bool ours = is_sandbox_link(i->ifa_name);
      if (range.contains(ip) && !ours) {
        ::freeifaddrs(ifs);
        return Error(ErrorCode::kFailedPrecondition, "--sandbox-net " + range.str() + " overlaps " +
                                                         egress::ipv4_str(ip) + " on " +
                                                         i->ifa_name + ": choose another range");
      }
      if (!ours) extra.push_back(egress::Cidr{ip, 32});
    }
    ::freeifaddrs(ifs);
  }
  return extra;
}

// The first IPv4 nameserver of /etc/resolv.conf; "" if there is none.
std::string resolv_conf_nameserver() {
  std::ifstream rc("/etc/resolv.conf");
  std::string line;
  while (std::getline(rc, line)) {
    std::istringstream ls(line);
    std::string key, value;
    if (ls >> key >> value && key == "nameserver" && egress::parse_ipv4(value)) return value;
  }
  return "";
}

// The resolver the sandboxes' DNS questions go to: --dns-upstream (IPv4[:PORT]), else the first
// IPv4 nameserver of /etc/resolv.conf; `none` (shown as "(none)", 127.0.0.1:53) if neither.
struct UpstreamResolver {
  std::string shown;
  std::uint32_t ip = 0;
  std::uint16_t port = 53;
  bool none = false;
};

Result<UpstreamResolver> upstream_resolver(const std::string& dns_upstream) {
  UpstreamResolver r;
  std::string up = dns_upstream;
  if (up.empty()) up = resolv_conf_nameserver();
  if (auto colon = up.find(':'); colon != std::string::npos) {
    r.port = static_cast<std::uint16_t>(std::atoi(up.c_str() + colon + 1));
    up.resize(colon);
  }
  auto ip = egress::parse_ipv4(up);
  if (!ip) {
    if (!dns_upstream.empty())
      return invalid_argument("--dns-upstream " + dns_upstream + ": not IPv4[:PORT]");
    r.none = true;
    ip = 0x7f000001;
    up = "(none)";
  }
  r.ip = *ip;
  r.shown = up;
  return r;
}

// What sandboxes trust: the host's bundle (if it can be read) and abxd's CA (docs/networking.md).
std::string sandbox_trust_bundle(const std::string& host_ca_bundle, const std::string& ca_pem) {
  std::string bundle;
  if (std::ifstream host_bundle(host_ca_bundle); host_bundle) {
    std::ostringstream b;
    b << host_bundle.rdbuf();
    bundle = b.str();
    if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
  }
  bundle += "# abxd's egress CA (network.rules)\n" + ca_pem;
  return bundle;
}

// The proxy's TLS client context towards upstreams: the host's trust store and --egress-extra-ca.
Result<std::shared_ptr<asio::ssl::context>> upstream_tls_context(const std::string& extra_ca) {
  auto upstream = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  boost::system::error_code sec;
  upstream->set_default_verify_paths(sec);
  if (sec) return internal_error("the host's trust store: " + sec.message());
  if (!extra_ca.empty()) {
    upstream->load_verify_file(extra_ca, sec);
    if (sec) return invalid_argument("--egress-extra-ca " + extra_ca + ": " + sec.message());
  }
  upstream->set_verify_mode(asio::ssl::verify_peer);
  return upstream;
}

}  // namespace

void SandboxNetwork::remove_orphan_tables() {
  auto tables = runtime::nft_query("list tables");
  if (!tables) {
    log_.warn("cannot list nftables tables: " + tables.error().message());
    return;
  }
  for (const std::string& t : abx_table_names(*tables)) {
    if (t == table_) continue;  // ours: rewritten whole by apply_locked()
    const std::string prefix = "ab" + t.substr(4);
    if (links_with_prefix(prefix)) continue;  // it polices live links
    auto listing = runtime::nft_query("list table inet " + t, /*handles=*/true);
    if (!listing) continue;  // gone meanwhile
    auto home = abxd_home_of(*listing);
    auto handle = table_handle_of(*listing);
    if (!home || !handle) continue;  // not an abxd's table (no comment of ours)
    if (!abxd_gone(*home)) continue;
    // By handle: a table of the same name that a restarted abxd made since the listing has
    // another handle, and stays.
    if (Status s = runtime::nft_apply("delete table inet handle " + std::to_string(*handle) + "\n");
        s) {
      log_.info("removed nftables table " + t + " of a stopped abxd (home " + *home +
                "): it policed no link, and it slowed every ruleset change");
    }
  }
}

// One function: the start steps in their order, each on what the ones before set up (the blocked
// set, the resolver, the CA and the proxy, the NFLOG group, the ruleset, then the I/O threads).
Result<std::unique_ptr<SandboxNetwork>> SandboxNetwork::start(
    const std::string& home, NetworkOptions options, const runtime::UserNamespace& userns) {
  std::unique_ptr<SandboxNetwork> n(new SandboxNetwork(std::move(options)));
  if (!n->opt_.enabled) return n;
  if (!userns.enabled)
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox networking numbers each sandbox's link by its user namespace: run abxd "
                 "with user namespaces, or with --no-network");
  const egress::Cidr& range = n->opt_.range;
  std::uint64_t need = std::uint64_t{userns.slots} * 4;
  if (range.prefix < 1 || (std::uint64_t{1} << (32 - range.prefix)) < need)
    return invalid_argument("--sandbox-net " + range.str() +
                            " is too small: " + std::to_string(userns.slots) +
                            " user-namespace slots need " + std::to_string(need) + " addresses");
  char hex[12];
  std::snprintf(hex, sizeof hex, "%08x", fnv1a(home));
  n->table_ = std::string("abx_") + hex;
  n->if_prefix_ = std::string("ab") + hex;
  n->home_ = home;

  ABX_ASSIGN_OR_RETURN(std::vector<egress::Cidr> extra, range_and_host_addresses(range));
  extra.insert(extra.end(), n->opt_.extra_blocked.begin(), n->opt_.extra_blocked.end());
  n->start_blocked_ = extra;
  n->blocked_ = egress::default_blocked(std::move(extra));

  ABX_ASSIGN_OR_RETURN(const UpstreamResolver upstream, upstream_resolver(n->opt_.dns_upstream));
  const std::string& up = upstream.shown;
  const std::uint16_t up_port = upstream.port;
  const std::uint32_t up_ip = upstream.ip;
  if (upstream.none) {
    // Sandboxes still reach addresses; every name they ask gets REFUSED.
    n->log_.warn(
        "no IPv4 nameserver in /etc/resolv.conf and no --dns-upstream: sandboxes' DNS "
        "questions will be refused");
    n->no_upstream_ = true;
  }

  ABX_TRY(runtime::write_sysctl("net/ipv4/ip_forward", "1"));

  SandboxNetwork* self = n.get();
  // The resolver and the proxy listen on the sandbox links' gateway addresses only (never on
  // the host's other addresses or its loopback): slot 0's from the start (IP_FREEBIND: before
  // the host has it), which fixes their ports, and each other link's while it is attached.
  const asio::ip::address_v4 first_gateway(n->opt_.range.addr + 1);
  ABX_ASSIGN_OR_RETURN(
      n->dns_, DnsForwarder::start(n->io_, asio::ip::tcp::endpoint(first_gateway, 0),
                                   asio::ip::udp::endpoint(asio::ip::address_v4(up_ip), up_port),
                                   n->dns_hooks()));
  EgressProxyHooks ph = n->proxy_hooks();
  {
    ABX_ASSIGN_OR_RETURN(auto ca, CertAuthority::load_or_create(home + "/ca"));
    n->ca_ = std::move(ca);
    n->sandbox_bundle_ = home + "/ca/sandbox-bundle.crt";
    ABX_TRY(keep_inode_write(n->sandbox_bundle_,
                             sandbox_trust_bundle(n->opt_.host_ca_bundle, n->ca_->cert_pem())));
    ABX_ASSIGN_OR_RETURN(ph.upstream_tls, upstream_tls_context(n->opt_.upstream_extra_ca));
    ph.server_tls = [ca = n->ca_](const std::string& name) { return ca->server_context(name); };
  }
  ABX_ASSIGN_OR_RETURN(
      n->proxy_,
      EgressProxy::start(n->io_, asio::ip::tcp::endpoint(first_gateway, 0), std::move(ph)));

  ABX_TRY(n->open_nflog());

  n->remove_orphan_tables();
  {
    std::lock_guard lock(n->mu_);
    ABX_TRY(n->apply_locked());
  }
  n->read_flow_log();
  for (int i = 0; i < 2; ++i)
    n->threads_.emplace_back([self] {
      auto guard = asio::make_work_guard(self->io_);
      self->io_.run();
    });
  n->log_.info("sandbox networking on: " + range.str() + ", table inet " + n->table_ +
               ", resolver :" + std::to_string(n->dns_->port()) + " -> " + up + ":" +
               std::to_string(up_port) + ", egress proxy :" + std::to_string(n->proxy_->port()));
  return n;
}

Status SandboxNetwork::open_nflog() {
  // NFLOG groups are machine-wide: start from the home's hash, step past ones in use.
  std::uint16_t group = static_cast<std::uint16_t>(0x4000 + (fnv1a(home_) % 0x3000));
  for (int i = 0; i < 32; ++i, ++group) {
    auto r = runtime::NflogReader::open(group);
    if (r) {
      nflog_ = std::make_unique<Nflog>(std::move(r).value(), io_);
      log_group_ = group;
      break;
    }
    if (r.error().code() != ErrorCode::kAlreadyExists) return r.error();
  }
  if (!nflog_) return Error(ErrorCode::kResourceExhausted, "no free NFLOG group for the audit");
  return {};
}

DnsForwarderHooks SandboxNetwork::dns_hooks() {
  DnsForwarderHooks dh;
  SandboxNetwork* self = this;
  dh.may_resolve = [self](std::uint32_t src, const std::string& q) {
    return self->may_resolve(src, q);
  };
  dh.on_answer = [self](std::uint32_t src, const std::string& q,
                        const std::vector<std::uint32_t>& a,
                        std::uint32_t ttl) { self->on_answer(src, q, a, ttl); };
  dh.on_query = [self](std::uint32_t src, const std::string& q, std::uint16_t type, bool fwd) {
    self->on_query(src, q, type, fwd);
  };
  return dh;
}

EgressProxyHooks SandboxNetwork::proxy_hooks() {
  SandboxNetwork* self = this;
  EgressProxyHooks ph;
  ph.allow = [self](const EgressFlow& f) {
    return self->allow_proxied(f.src_ip, f.dst_ip, f.dst_port, f.domain);
  };
  // Transforms (network.rules): applied per request; HTTPS through abxd's CA.
  ph.transform = [self](const EgressFlow& f,
                        std::string_view host) -> std::optional<EgressTransform> {
    auto t = self->transform_for(f.src_ip, f.dst_ip, host);
    if (!t) return std::nullopt;
    auto headers = self->resolve_secrets(*t);
    if (!headers) return EgressTransform{std::move(t->rule), {}, headers.error().message()};
    return EgressTransform{std::move(t->rule), std::move(*headers), {}};
  };
  ph.on_transform = [self](const EgressFlow& f, const EgressTransformEvent& t) {
    AuditEvent ev;
    ev.timestamp_ms = wall_ms();
    ev.protocol = f.dst_port == 443 ? "https" : "http";
    ev.destination = egress::ipv4_str(f.dst_ip);
    ev.port = f.dst_port;
    ev.domain = t.host;
    ev.verdict = "transform";
    ev.rule = t.rule;
    ev.headers = t.header_names;
    ev.status = t.upstream_status;
    ev.reason = t.refused;
    std::lock_guard lock(self->mu_);
    if (Entry* e = self->by_ip_locked(f.src_ip)) self->record_locked(*e, std::move(ev));
  };
  return ph;
}

runtime::VethConfig SandboxNetwork::veth_config() const {
  runtime::VethConfig c;
  c.enabled = opt_.enabled;
  c.subnet_base = opt_.range.addr;
  c.name_prefix = if_prefix_;
  return c;
}

std::string SandboxNetwork::ca_cert_path() const { return ca_ ? ca_->cert_path() : std::string(); }

std::string SandboxNetwork::resolv_conf() const {
  return "# abx: the sandbox's resolver (abxd), which applies its network rules\nnameserver " +
         egress::ipv4_str(opt_.range.addr + 1) + "\n";
}

egress::RulesetSandbox SandboxNetwork::ruleset_entry(const Entry& e) {
  return {e.slot, e.link.host_if, e.link.sandbox_ip, e.rules};
}

egress::RulesetPlan SandboxNetwork::plan_locked(bool all) const {
  egress::RulesetPlan p;
  p.table = table_;
  p.comment = "abxd " + home_;
  p.if_prefix = if_prefix_;
  p.sandbox_range = opt_.range;
  p.blocked = blocked_.nets;
  p.dns_port = dns_ ? dns_->port() : 0;
  p.proxy_port = proxy_ ? proxy_->port() : 0;
  p.log_group = log_group_;
  if (all)
    for (const auto& [id, e] : sandboxes_) p.sandboxes.push_back(ruleset_entry(e));
  return p;
}

Status SandboxNetwork::apply_locked() {
  return runtime::nft_apply(egress::render_ruleset(plan_locked(true)));
}

Status SandboxNetwork::apply_change_locked(const std::string& id, const std::string& script) {
  Status s = runtime::nft_apply(script);
  if (s) return s;
  // The table is not what this abxd made (removed or changed by hand, a transaction lost):
  // make it whole again.
  log_.warn("ruleset change for " + id + " failed (" + s.error().message() +
            "); replacing the whole table");
  return apply_locked();
}

Status SandboxNetwork::attach(const std::string& id, const runtime::VethInfo& link,
                              const SandboxNetworkSpec& spec) {
  ABX_TRY(attach_rules(id, link, spec));
  if (Status s = listen(id, link); !s) {
    detach(id);
    return s;
  }
  return {};
}

Status SandboxNetwork::listen(const std::string& id, const runtime::VethInfo& link) {
  std::lock_guard lock(mu_);
  if (removed_) return stopped_error();
  if (!dns_ || !proxy_) return Error(ErrorCode::kFailedPrecondition, "sandbox networking is off");
  // The link's gateway address gets the resolver and the proxy (idempotent: a slot's address
  // may be listened on already, by a sandbox of that slot not detached yet).
  ABX_TRY(dns_->listen_on(link.host_ip));
  if (Status s = proxy_->listen_on(link.host_ip); !s) {
    unlisten_locked(link.host_ip, id);
    return s;
  }
  return {};
}

Status SandboxNetwork::attach_rules(const std::string& id, const runtime::VethInfo& link,
                                    const SandboxNetworkSpec& spec) {
  ABX_ASSIGN_OR_RETURN(egress::Rules rules, rules_of(spec));
  std::lock_guard lock(mu_);
  if (removed_) return stopped_error();
  if (!dns_ || !proxy_) return Error(ErrorCode::kFailedPrecondition, "sandbox networking is off");
  Entry e;
  e.id = id;
  e.link = link;
  e.slot = (link.host_ip - opt_.range.addr) / 4;
  e.rules = std::move(rules);
  e.transforms = spec.transforms;
  // A sandbox whose link this one now has (its slot was freed before its own detach ran: a
  // kill, a template build's RUN step) is gone: forget it here, or its late detach would remove
  // this sandbox's entries, which share its link's name and chain number. Its own entries may
  // differ from this one's (the proxied set): the table is then written whole.
  bool evicted = false;
  for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
    const bool stale =
        it->first != id && (it->second.slot == e.slot || it->second.link.host_if == e.link.host_if);
    evicted = evicted || stale;
    it = stale ? sandboxes_.erase(it) : std::next(it);
  }
  const std::string script = egress::render_attach(plan_locked(false), ruleset_entry(e));
  sandboxes_[id] = std::move(e);
  if (evicted) {
    if (Status s = apply_locked(); !s) {
      sandboxes_.erase(id);
      return s;
    }
    return {};
  }
  if (Status s = apply_change_locked(id, script); !s) {
    sandboxes_.erase(id);
    (void)apply_locked();  // without it (the change may have gone in before the re-render failed)
    return s;
  }
  return {};
}

Status SandboxNetwork::update(const std::string& id, const SandboxNetworkSpec& spec) {
  ABX_ASSIGN_OR_RETURN(egress::Rules rules, rules_of(spec));
  std::lock_guard lock(mu_);
  if (removed_) return stopped_error();
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end())
    return Error(ErrorCode::kFailedPrecondition, "sandbox " + id + " has no network link");
  const egress::RulesetSandbox before = ruleset_entry(it->second);
  std::swap(it->second.rules, rules);
  const std::string script =
      egress::render_update(plan_locked(false), before, ruleset_entry(it->second));
  if (Status s = apply_change_locked(id, script); !s) {
    std::swap(it->second.rules, rules);  // the old rules stay (no transaction went in)
    return s;
  }
  it->second.transforms = spec.transforms;
  return {};
}

std::optional<SandboxNetwork::Transform> SandboxNetwork::transform_for(
    std::uint32_t src_ip, std::uint32_t dst_ip, std::string_view host) const {
  std::lock_guard lock(mu_);
  for (const auto& [id, e] : sandboxes_) {
    if (e.link.sandbox_ip != src_ip) continue;
    const egress::HostTransforms* h = e.transforms.match(host);
    if (!h) return std::nullopt;
    // Bound by the resolver at some point (an expired binding still counts: a kept-alive
    // connection outlives a short TTL, and the address was the name's).
    auto bound = e.answers.find(std::string(host));
    if (bound == e.answers.end() || !bound->second.count(dst_ip)) return std::nullopt;
    return Transform{h->pattern.str(), h->headers(), id};
  }
  return std::nullopt;
}

void SandboxNetwork::set_secret_resolver(SecretResolver resolver) {
  std::lock_guard lock(mu_);
  secret_resolver_ = std::move(resolver);
}

Result<std::vector<egress::Header>> SandboxNetwork::resolve_secrets(const Transform& t) const {
  SecretResolver resolver;
  std::vector<egress::Header> out;
  for (const auto& [name, value] : t.headers) {
    if (value.find(egress::kSecretPlaceholderOpen) == std::string::npos) {
      out.emplace_back(name, value);
      continue;
    }
    if (!resolver) {
      std::lock_guard lock(mu_);
      resolver = secret_resolver_;
    }
    if (!resolver)
      return Error(ErrorCode::kUnavailable, name + ": names a secret, and abxd has no secrets");
    // The errors name the header and the secret, never a value.
    auto v = egress::expand_secrets(value,
                                    [&](std::string_view s) { return resolver(t.sandbox_id, s); });
    if (!v) return Error(v.error().code(), name + ": " + v.error().message());
    out.emplace_back(name, std::move(*v));
  }
  return out;
}

void SandboxNetwork::detach(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return;
  if (removed_) {  // the table is gone, and its entries with it
    const std::uint32_t gateway = it->second.link.host_ip;
    sandboxes_.erase(it);
    unlisten_locked(gateway, id);
    return;
  }
  const std::string script = egress::render_detach(plan_locked(false), ruleset_entry(it->second));
  const std::uint32_t gateway = it->second.link.host_ip;
  sandboxes_.erase(it);
  unlisten_locked(gateway, id);
  if (Status s = apply_change_locked(id, script); !s)
    log_.warn("ruleset after " + id + ": " + s.error().message());
}

std::vector<AuditEvent> SandboxNetwork::audit(const std::string& id, std::int64_t since_ms) const {
  std::lock_guard lock(mu_);
  std::vector<AuditEvent> out;
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return out;
  for (const auto& ev : it->second.audit)
    if (ev.timestamp_ms >= since_ms) out.push_back(ev);
  return out;
}

Status SandboxNetwork::set_peers_blocked(std::vector<egress::Cidr> peers) {
  if (!opt_.enabled) return {};
  std::vector<egress::Cidr> extra = start_blocked_;
  extra.insert(extra.end(), peers.begin(), peers.end());
  egress::Blocked next = egress::default_blocked(std::move(extra));
  std::lock_guard lock(mu_);
  if (removed_) return {};  // abxd is stopping: no table to change (and none to put back)
  if (next.nets == blocked_.nets) return {};
  blocked_ = std::move(next);
  std::string shown;
  for (const auto& c : peers) shown += (shown.empty() ? "" : ", ") + c.str();
  log_.info("blocking the cluster's other nodes for every sandbox: " +
            (shown.empty() ? std::string("none") : shown));
  return apply_change_locked("the cluster's nodes", egress::render_blocked(table_, blocked_.nets));
}

void SandboxNetwork::remove_rules() {
  if (!opt_.enabled) return;
  std::lock_guard lock(mu_);
  removed_ = true;
  if (Status s = runtime::nft_apply(egress::render_delete(table_)); !s)
    log_.warn("removing table " + table_ + ": " + s.error().message());
}

void SandboxNetwork::unlisten_locked(std::uint32_t gateway, const std::string& id) {
  if (!dns_ || !proxy_ || gateway == opt_.range.addr + 1) return;  // slot 0's: always
  for (const auto& [other, e] : sandboxes_)
    if (other != id && e.link.host_ip == gateway) return;  // still that slot's sandbox's
  dns_->stop_listening(gateway);
  proxy_->stop_listening(gateway);
}

SandboxNetwork::Entry* SandboxNetwork::by_ip_locked(std::uint32_t ip) {
  for (auto& [id, e] : sandboxes_)
    if (e.link.sandbox_ip == ip) return &e;
  return nullptr;
}

void SandboxNetwork::record_locked(Entry& e, AuditEvent ev) {
  if (e.audit.size() >= kAuditEvents) e.audit.pop_front();
  e.audit.push_back(std::move(ev));
}

void SandboxNetwork::read_flow_log() {
  nflog_->fd.async_wait(
      asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
        if (ec) return;  // stopped
        auto events = nflog_->reader.read();
        if (events) {
          std::lock_guard lock(mu_);
          for (const auto& f : *events) {
            // "abx:<slot>:<verdict>"
            unsigned slot = 0;
            char verdict[16] = {0};
            if (std::sscanf(f.prefix.c_str(), "abx:%u:%15s", &slot, verdict) != 2) continue;
            for (auto& [id, e] : sandboxes_) {
              if (e.slot != slot) continue;
              AuditEvent ev;
              ev.timestamp_ms = wall_ms();
              ev.protocol = f.protocol == IPPROTO_TCP    ? "tcp"
                            : f.protocol == IPPROTO_UDP  ? "udp"
                            : f.protocol == IPPROTO_ICMP ? "icmp"
                                                         : std::to_string(f.protocol);
              ev.destination = egress::ipv4_str(f.dst);
              ev.port = f.dport;
              ev.verdict = verdict;
              record_locked(e, std::move(ev));
            }
          }
        } else {
          log_.warn("audit log: " + events.error().message());
        }
        read_flow_log();
      });
}

bool SandboxNetwork::may_resolve(std::uint32_t src, const std::string& qname) {
  if (no_upstream_) return false;
  std::lock_guard lock(mu_);
  Entry* e = by_ip_locked(src);
  return e && egress::may_resolve(e->rules, qname);
}

bool SandboxNetwork::host_or_blocked(std::uint32_t ip) const {
  {
    std::lock_guard lock(mu_);
    if (blocked_.contains(ip)) return true;
  }
  auto local = runtime::is_host_address(ip);
  if (!local) {
    log_.warn("is " + egress::ipv4_str(ip) + " the host's? " + local.error().message() +
              " (taken as yes)");
    return true;  // fail closed
  }
  return *local;
}

void SandboxNetwork::on_answer(std::uint32_t src, const std::string& qname,
                               const std::vector<std::uint32_t>& answered, std::uint32_t ttl) {
  // A name is never bound to an address of the host (as it is now, not as it was at start) or a
  // blocked one: rebinding an allowed name to one opens nothing. Asked outside the lock (one
  // rtnetlink round trip per address).
  std::vector<std::uint32_t> a;
  for (std::uint32_t ip : answered)
    if (!host_or_blocked(ip)) a.push_back(ip);
  std::lock_guard lock(mu_);
  Entry* e = by_ip_locked(src);
  if (!e || a.empty()) return;
  std::int64_t now = wall_ms();
  // A name stays bound for at least a minute (resolvers and clients cache past short TTLs) and
  // at most a day.
  std::int64_t until = now + std::clamp<std::int64_t>(ttl, 60, 86400) * 1000;
  if (e->answers.size() >= 4096) {
    for (auto it = e->answers.begin(); it != e->answers.end();) {
      std::erase_if(it->second, [&](const auto& kv) { return kv.second < now; });
      it = it->second.empty() ? e->answers.erase(it) : std::next(it);
    }
    if (e->answers.size() >= 4096) return;
  }
  auto& addrs = e->answers[qname];
  for (std::uint32_t ip : a)
    if (addrs.size() < 64 || addrs.count(ip)) addrs[ip] = std::max(addrs[ip], until);
}

void SandboxNetwork::on_query(std::uint32_t src, const std::string& qname, std::uint16_t qtype,
                              bool forwarded) {
  std::lock_guard lock(mu_);
  Entry* e = by_ip_locked(src);
  if (!e) return;
  AuditEvent ev;
  ev.timestamp_ms = wall_ms();
  ev.protocol = "dns";
  ev.port = 53;
  ev.domain = qname;
  ev.destination = qtype == 1 ? "A" : qtype == 28 ? "AAAA" : "type " + std::to_string(qtype);
  ev.verdict = forwarded ? "allow" : "deny";
  record_locked(*e, std::move(ev));
}

bool SandboxNetwork::allow_proxied(std::uint32_t src, std::uint32_t dst, std::uint16_t port,
                                   const std::optional<std::string>& domain) {
  // The proxy connects from the host, where no forward chain sees the flow: whether `dst` is the
  // host's own is asked of the kernel for this very flow (an address added since abxd started
  // counts), as the input chain that drops a sandbox's direct traffic to the host decides it.
  const bool host = host_or_blocked(dst);
  std::lock_guard lock(mu_);
  Entry* e = by_ip_locked(src);
  if (!e) return false;
  AuditEvent ev;
  ev.timestamp_ms = wall_ms();
  ev.protocol = "tcp";
  ev.destination = egress::ipv4_str(dst);
  ev.port = port;
  if (domain) ev.domain = *domain;
  bool allowed = false;
  if (host) {
    ev.verdict = "blocked";
  } else {
    // The name counts only if this sandbox's resolver answered it with this very address: naming
    // an allowed domain does not open a connection to an address of the sandbox's choosing.
    std::optional<std::string_view> bound;
    if (domain) {
      auto it = e->answers.find(*domain);
      if (it != e->answers.end()) {
        auto a = it->second.find(dst);
        if (a != it->second.end() && a->second >= ev.timestamp_ms) bound = *domain;
      }
    }
    allowed = egress::decide(e->rules, dst, bound) == egress::Verdict::kAllow;
    ev.verdict = allowed ? "allow" : "deny";
  }
  record_locked(*e, std::move(ev));
  return allowed;
}

}  // namespace abx::platform
