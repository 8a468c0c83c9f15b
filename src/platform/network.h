// Sandbox networking in abxd: each sandbox's link, its outbound rules, the resolver and egress
// proxy that enforce domain rules, and the per-sandbox audit of outbound flows.
//
// One SandboxNetwork per abxd. It owns
//   - the addressing: slot i's /30 in `range` (runtime/veth.h), links named `ab<hash><slot>`
//     where <hash> (8 hex digits of the home's path) keeps daemons on one machine apart;
//   - the nftables table `abx_<hash>` (egress/ruleset.h), rebuilt atomically on every change;
//   - a DNS forwarder (every sandbox's port 53 is redirected to it) that answers a sandbox only
//     names its rules let it reach, and remembers what it answered for the egress proxy;
//   - an egress proxy for sandboxes whose rules name domains (TCP 80/443), which matches the
//     Host/SNI against the allowed domains *and* the addresses the resolver gave that sandbox
//     for that name;
//   - an NFLOG reader turning the ruleset's per-flow log lines into audit events.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/log.h"
#include "abx/egress/policy.h"
#include "abx/egress/ruleset.h"
#include "abx/egress/transform.h"
#include "abx/runtime/userns.h"
#include "abx/runtime/veth.h"

namespace abx::platform {

class CertAuthority;
class DnsForwarder;
class EgressProxy;
struct DnsForwarderHooks;
struct EgressProxyHooks;

struct NetworkOptions {
  bool enabled = true;  // abxd --no-network: every sandbox gets loopback only
  // Every sandbox address of the machine: 4 addresses per user-namespace slot.
  egress::Cidr range{0x0ad50000, 19};       // 10.213.0.0/19
  std::vector<egress::Cidr> extra_blocked;  // abxd --block-net
  // Where the resolver forwards; empty: the first IPv4 nameserver of /etc/resolv.conf.
  std::string dns_upstream;
  bool default_internet = true;  // abxd --no-internet-by-default flips E2B's default
  // Transforms (network.rules) over HTTPS: upstream servers are verified against the host's
  // trust store plus this PEM bundle (abxd --egress-extra-ca; tests sign their servers with it).
  std::string upstream_extra_ca;
  // The host's CA bundle sandboxes get (with abxd's CA added) at the distro path.
  std::string host_ca_bundle = "/etc/ssl/certs/ca-certificates.crt";
};

// Where a sandbox finds the CAs it trusts (abxd's egress CA included), and the environment
// pointing there. See docs/networking.md.
inline constexpr const char* kSandboxCaBundle = "/etc/ssl/certs/ca-certificates.crt";
inline constexpr const char* kSandboxEgressCa =
    "/usr/local/share/ca-certificates/abx-egress-ca.crt";

// A sandbox's network as E2B's API shows it (GET /sandboxes/{id} `network`).
struct SandboxNetworkSpec {
  bool enabled = true;  // false: loopback only (template network: none)
  bool allow_internet_access = true;
  std::vector<std::string> allow_out, deny_out;
  bool allow_public_traffic = true;
  std::string mask_request_host;
  // E2B's `rules`: headers the egress proxy sets on requests to matching hosts.
  egress::TransformRules transforms;
  // What the request set that cannot take effect (a rule for a host the sandbox may not reach).
  // Not stored: the create or update response carries them.
  std::vector<std::string> warnings;

  // E2B's field names. Rule values are masked (GET /sandboxes/{id}) unless `reveal` (what the
  // store keeps, in abxd's home).
  boost::json::object to_json(bool reveal = false) const;
  static Result<SandboxNetworkSpec> from_json(const boost::json::value& v);
};

// Parses create's `allow_internet_access`/`allowInternetAccess` and `network` (either may be
// absent: `default_internet` applies). invalid_argument with the field at fault.
Result<SandboxNetworkSpec> parse_network_request(const boost::json::object& body,
                                                 bool default_internet);
// The same for PUT /sandboxes/{id}/network: the body *is* the network object (plus an optional
// allowInternetAccess); the rules it gives replace the old ones entirely (no deny in the body and
// no allowInternetAccess: false means everything is allowed again).
Result<SandboxNetworkSpec> parse_network_update(const boost::json::object& body,
                                                const SandboxNetworkSpec& current);

struct AuditEvent {
  std::int64_t timestamp_ms = 0;
  std::string protocol;     // tcp | udp | icmp | dns | ...
  std::string destination;  // a.b.c.d (dns: the resolver's upstream is not shown)
  std::uint16_t port = 0;
  std::string domain;   // SNI / Host / the DNS question, when known
  std::string verdict;  // allow | deny | blocked | transform (a network.rules injection)
  // transform events: the rule's key, the header names set (never their values), the
  // upstream's status (0: none), and why the proxy refused the request, if it did.
  std::string rule;
  std::vector<std::string> headers;
  int status = 0;
  std::string reason;
  boost::json::object to_json() const;
};
inline constexpr std::size_t kAuditEvents = 2000;  // kept per sandbox

// The abxd tables (`abx_<8 hex>`, family inet) in nft's `list tables` output.
std::vector<std::string> abx_table_names(std::string_view list_tables);
// The home in an abxd table's comment ("abxd <home>") in nft's `list table` output.
std::optional<std::string> abxd_home_of(std::string_view listing);
// The table's handle in `nft -a list table` output (its first line: "table inet t { # handle 5").
std::optional<std::uint64_t> table_handle_of(std::string_view listing);

class SandboxNetwork {
 public:
  static Result<std::unique_ptr<SandboxNetwork>> start(const std::string& home,
                                                       NetworkOptions options,
                                                       const runtime::UserNamespace& userns);
  ~SandboxNetwork();

  bool enabled() const { return opt_.enabled; }
  bool default_internet() const { return opt_.default_internet; }
  const std::string& table() const { return table_; }  // its nftables table (inet family)
  // What runtime::SandboxConfig::veth should be for a networked sandbox.
  runtime::VethConfig veth_config() const;
  // /etc/resolv.conf for every sandbox: the first address of the range. Whatever resolver a
  // sandbox names, its port 53 traffic reaches abxd's resolver (the ruleset redirects it).
  std::string resolv_conf() const;
  // abxd's egress CA (TLS interception for network.rules): its certificate's path, and the
  // bundle sandboxes get at kSandboxCaBundle (the host's bundle plus that certificate). Empty
  // with networking off.
  std::string ca_cert_path() const;
  std::string sandbox_ca_bundle() const { return sandbox_bundle_; }

  // Starts enforcing `spec` for the sandbox on `link` (create and adopt). Until this returns the
  // link is dropped by the ruleset (fail closed). attach_rules then listen; on an error neither
  // is left in place.
  Status attach(const std::string& sandbox_id, const runtime::VethInfo& link,
                const SandboxNetworkSpec& spec);
  // attach in two steps, for a spawn (runtime's link_rules and link_ready): the link's entries
  // in the ruleset, which need only its name and addresses (the link may not exist yet), then
  // the resolver and the proxy on its gateway address, which must be on the link. The caller
  // detaches the sandbox when the second fails or the spawn does.
  Status attach_rules(const std::string& sandbox_id, const runtime::VethInfo& link,
                      const SandboxNetworkSpec& spec);
  Status listen(const std::string& sandbox_id, const runtime::VethInfo& link);
  // Replaces the rules; on failure the old rules stay in force.
  Status update(const std::string& sandbox_id, const SandboxNetworkSpec& spec);
  void detach(const std::string& sandbox_id);
  // The headers to set on a request from `src_ip` (a sandbox's address) to `host` at `dst_ip`
  // under its transform rules (the exact key, else the longest wildcard), and the key that
  // matched; none when no rule matches, or when this sandbox's resolver never answered `host`
  // with `dst_ip` (a sandbox naming the host but choosing the address — `curl --resolve` — must
  // not have the credential sent to a server of its choosing over plain HTTP). Thread-safe; the
  // proxy asks per request, so an update applies to the next request of a kept-alive connection.
  struct Transform {
    std::string rule;                     // the matching key, e.g. "*.example.com"
    std::vector<egress::Header> headers;  // as the rules have them (placeholders unresolved)
    std::string sandbox_id;
  };
  std::optional<Transform> transform_for(std::uint32_t src_ip, std::uint32_t dst_ip,
                                         std::string_view host) const;
  std::vector<AuditEvent> audit(const std::string& sandbox_id, std::int64_t since_ms) const;
  // How the proxy gets the value of a ${e2b.secrets.<name>} in a sandbox's rules (the sandbox's
  // team's secret), at each request. Without one such a request is refused (502).
  using SecretResolver =
      std::function<Result<std::string>(const std::string& sandbox_id, std::string_view name)>;
  void set_secret_resolver(SecretResolver resolver);
  // The headers of `t` with their secrets put in; EgressTransform::refused when one cannot be.
  Result<std::vector<egress::Header>> resolve_secrets(const Transform& t) const;
  // Removes the table (abxd stops with no sandbox left running). Final: later attaches and
  // updates are refused, and a late detach leaves the table removed.
  void remove_rules();
  // abxd --cluster: the other nodes' addresses, blocked for every sandbox as the always-blocked
  // addresses are (direct flows, the proxy, the resolver's answers), in place of what an earlier
  // call gave. A change rewrites the ruleset's `blocked` set alone, in one transaction (the whole
  // table if that fails); the same addresses again change nothing.
  Status set_peers_blocked(std::vector<egress::Cidr> peers);

 private:
  struct Entry {
    std::string id;
    runtime::VethInfo link;
    std::uint32_t slot = 0;
    egress::Rules rules;
    egress::TransformRules transforms;
    // name -> address -> expiry (ms): what the resolver answered this sandbox.
    std::map<std::string, std::map<std::uint32_t, std::int64_t>> answers;
    std::deque<AuditEvent> audit;
  };
  explicit SandboxNetwork(NetworkOptions options);
  // The table's plan; with every sandbox's part when `all`.
  egress::RulesetPlan plan_locked(bool all) const;
  static egress::RulesetSandbox ruleset_entry(const Entry& e);
  // The whole table, replaced in one transaction (start, and when a sandbox's own change fails).
  Status apply_locked();
  // `script` (one sandbox's change); if it fails, the whole table instead.
  Status apply_change_locked(const std::string& id, const std::string& script);
  Entry* by_ip_locked(std::uint32_t ip);
  // The resolver and the proxy stop listening on `gateway` unless a sandbox other than `id`
  // still has that link (or it is slot 0's, listened on from the start).
  void unlisten_locked(std::uint32_t gateway, const std::string& id);
  void record_locked(Entry& e, AuditEvent ev);
  void read_flow_log();
  // At start: deletes the tables of abxds that are gone (their home missing, or its abxd.lock
  // naming a dead process) and whose links are all gone too. Such a table polices nothing, yet
  // every nftables transaction on the machine pays for it (four leftover tables made an attach 1 ms
  // -> 30-50 ms on a loaded 2-core VM). A table with a live link stays: a killed abxd's sandboxes
  // keep their rules for the next abxd to adopt.
  void remove_orphan_tables();
  // The audit's NFLOG reader on a free group (kResourceExhausted if none of 32 is).
  Status open_nflog();
  // What the resolver and the proxy ask of this network (its rules, the audit); the proxy's TLS
  // contexts are start()'s to add.
  DnsForwarderHooks dns_hooks();
  EgressProxyHooks proxy_hooks();
  bool may_resolve(std::uint32_t src, const std::string& qname);
  void on_answer(std::uint32_t src, const std::string& qname, const std::vector<std::uint32_t>& a,
                 std::uint32_t ttl);
  void on_query(std::uint32_t src, const std::string& qname, std::uint16_t qtype, bool forwarded);
  // blocked_, or an address of the host now (the kernel's route lookup; an error counts as yes).
  bool host_or_blocked(std::uint32_t ip) const;
  struct Flow;
  bool allow_proxied(std::uint32_t src, std::uint32_t dst, std::uint16_t port,
                     const std::optional<std::string>& domain);

  NetworkOptions opt_;
  std::string table_, if_prefix_, home_;
  bool no_upstream_ = false;
  // remove_rules() ran (abxd is stopping): a late detach (a kill still finishing) must not put
  // the table back, as the repair of a failed change would; attach and update are refused.
  bool removed_ = false;  // guarded by mu_
  std::uint16_t log_group_ = 0;
  std::vector<egress::Cidr> start_blocked_;  // start's: the range, the host's, --block-net
  egress::Blocked blocked_;                  // those, the defaults and the peers; guarded by mu_
  Logger log_{"network"};
  boost::asio::io_context io_;
  std::unique_ptr<DnsForwarder> dns_;
  std::unique_ptr<EgressProxy> proxy_;
  std::shared_ptr<CertAuthority> ca_;
  std::string sandbox_bundle_;
  struct Nflog;
  std::unique_ptr<Nflog> nflog_;
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  SecretResolver secret_resolver_;  // guarded by mu_
  std::map<std::string, Entry> sandboxes_;
};

}  // namespace abx::platform
