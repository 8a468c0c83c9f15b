// nftables text for RulesetPlan (see abx/egress/ruleset.h).
#include "abx/egress/ruleset.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace abx::egress {
namespace {

std::string elements(const std::vector<Cidr>& nets) {
  std::string s;
  for (const auto& c : nets) s += (s.empty() ? "" : ", ") + c.str();
  return s;
}

std::string set_decl(const std::string& name, const std::vector<Cidr>& nets) {
  std::string s = "  set " + name + " {\n    type ipv4_addr; flags interval; auto-merge;\n";
  if (!nets.empty()) s += "    elements = { " + elements(nets) + " }\n";
  return s + "  }\n";
}

std::string logged(const std::string& match, std::uint32_t slot, const char* verdict,
                   std::uint16_t group, const char* action) {
  std::string prefix = "\"abx:" + std::to_string(slot) + ":" + verdict + "\"";
  // Logged at a bounded rate (a flood of new flows must not flood abxd), acted on always.
  std::string s = "    " + match + "limit rate 200/second burst 400 packets log group " +
                  std::to_string(group) + " prefix " + prefix + "\n";
  if (std::string_view(action) == "accept") return s + "    " + match + "accept\n";
  // Refused at once (a TCP reset, else ICMP admin-prohibited) rather than dropped: the sandbox's
  // program fails fast instead of waiting out its connect timeout.
  return s + "    " + match + "meta l4proto tcp reject with tcp reset\n    " + match +
         "reject with icmpx admin-prohibited\n";
}

}  // namespace

std::string render_blocked(const std::string& table, const std::vector<Cidr>& blocked) {
  std::string s = "flush set inet " + table + " blocked\n";
  if (!blocked.empty())
    s += "add element inet " + table + " blocked { " + elements(blocked) + " }\n";
  return s;
}

std::string render_delete(const std::string& table) {
  return "table inet " + table + " {}\ndelete table inet " + table + "\n";
}

namespace {

std::string quoted(const std::string& name) { return "\"" + name + "\""; }

// Empties set `set` of table `t` ("inet <table> ") and fills it with `nets`.
std::string refill(const std::string& t, const std::string& set, const std::vector<Cidr>& nets) {
  std::string s = "flush set " + t + set + "\n";
  if (!nets.empty()) s += "add element " + t + set + " { " + elements(nets) + " }\n";
  return s;
}

// One of a sandbox's own CIDR sets, and what its chain does with a match.
struct OwnSet {
  std::string name;
  const std::vector<Cidr>* nets;
  const char* verdict;  // in the log prefix
  const char* action;
};

// The sandbox's own CIDR sets that exist, in the order its chain consults them: only those with
// elements. An empty one would match nothing, and every set costs every later element change
// (any sandbox's attach or detach) one netlink dump of its elements: libnftables 1.0.6 reads all
// sets' elements before it changes any, 600 dumps with two sets for each of 300 sandboxes
// (bench/README.md, "Sets only where a sandbox has rules").
std::vector<OwnSet> own_sets(const RulesetSandbox& sb) {
  const std::string n = std::to_string(sb.slot);
  std::vector<OwnSet> out;
  if (!sb.rules.allow_cidrs.empty())
    out.push_back({"allow_" + n, &sb.rules.allow_cidrs, "allow", "accept"});
  if (!sb.rules.deny_cidrs.empty())
    out.push_back({"deny_" + n, &sb.rules.deny_cidrs, "deny", "drop"});
  return out;
}

// The sandbox's sets (filled) and its chain, (re)made: "add" commands, idempotent (a set or
// chain that exists is flushed first).
std::string sandbox_rules(const RulesetPlan& p, const RulesetSandbox& sb) {
  const std::string t = "inet " + p.table + " ";
  const std::string n = std::to_string(sb.slot);
  const std::vector<OwnSet> sets = own_sets(sb);
  std::string s;
  for (const OwnSet& o : sets) {
    s += "add set " + t + o.name + " { type ipv4_addr; flags interval; auto-merge; }\n";
    s += refill(t, o.name, *o.nets);
  }
  s += "add chain " + t + "sb_" + n + "\nflush chain " + t + "sb_" + n + "\n";
  std::string body;
  body += logged("ip daddr @blocked ", sb.slot, "blocked", p.log_group, "drop");
  for (const OwnSet& o : sets)
    body += logged("ip daddr @" + o.name + " ", sb.slot, o.verdict, p.log_group, o.action);
  body += logged("", sb.slot, "allow", p.log_group, "accept");
  for (std::size_t at = 0; at < body.size();) {  // one "add rule" per line of the chain's body
    std::size_t nl = body.find('\n', at);
    s += "add rule " + t + "sb_" + n + " " + body.substr(at + 4, nl - at - 4) + "\n";
    at = nl + 1;
  }
  return s;
}

// The sandbox's sets and chain, and its entries in the shared sets and map, for after the table
// exists.
std::string sandbox_add(const RulesetPlan& p, const RulesetSandbox& sb) {
  const std::string t = "inet " + p.table + " ";
  const std::string n = std::to_string(sb.slot);
  std::string s = sandbox_rules(p, sb);
  if (sb.address != 0)
    s += "add element " + t + "links { " + quoted(sb.host_if) + " . " + ipv4_str(sb.address) +
         " }\n";
  if (sb.rules.proxied() && p.proxy_port != 0)
    s += "add element " + t + "proxied { " + quoted(sb.host_if) + " }\n";
  s += "add element " + t + "chains { " + quoted(sb.host_if) + " : jump sb_" + n + " }\n";
  return s;
}

}  // namespace

std::string render_ruleset(const RulesetPlan& p) {
  const std::string links = "iifname \"" + p.if_prefix + "*\" ";
  const std::string out_links = "oifname \"" + p.if_prefix + "*\" ";
  const std::string dns = std::to_string(p.dns_port), proxy = std::to_string(p.proxy_port);
  std::string s = render_delete(p.table);
  s += "table inet " + p.table + " {\n";
  if (!p.comment.empty()) {
    std::string c;
    for (char ch : p.comment)
      if (ch != '"' && ch != '\\' && ch >= 0x20 && ch < 0x7f) c += ch;
    s += "  comment \"" + c.substr(0, 120) + "\"\n";
  }
  s += set_decl("blocked", p.blocked);
  // Per link, found by one lookup whatever the number of sandboxes: its sandbox's address, whether
  // it goes through the proxy, and its sandbox's chain.
  s += "  set links {\n    type ifname . ipv4_addr;\n  }\n";
  s += "  set proxied {\n    type ifname;\n  }\n";
  s += "  map chains {\n    type ifname : verdict;\n  }\n";
  // Each sandbox address's live connections (nf_conncount), for its share of conntrack.
  s += "  set conns {\n    type ipv4_addr; size 65535; flags dynamic;\n  }\n";

  // Anti-spoofing, before NAT and everything else (sandboxes lack CAP_NET_RAW, so this is a second
  // wall): a link carries its own sandbox's address only (a link not in `links` carries nothing).
  s += "  chain guard {\n    type filter hook prerouting priority raw; policy accept;\n";
  s += "    " + links + "iifname . ip saddr != @links drop\n";
  s += "  }\n";
  s += "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n";
  s += "    " + links + "meta nfproto ipv4 udp dport 53 redirect to :" + dns + "\n";
  s += "    " + links + "meta nfproto ipv4 tcp dport 53 redirect to :" + dns + "\n";
  if (p.proxy_port != 0)
    s +=
        "    iifname @proxied meta nfproto ipv4 tcp dport { 80, 443 } redirect to :" + proxy + "\n";
  s += "  }\n";

  // A sandbox over its share of the host's conntrack table opens no new connection, to the
  // resolver and the proxy (input) or anywhere else (forward).
  const std::string conn_cap = links + "ct state new add @conns { ip saddr ct count over " +
                               std::to_string(p.max_conns_per_sandbox) + " } ";
  s += "  chain input {\n    type filter hook input priority filter; policy accept;\n";
  s += "    " + links + "ct state established,related accept\n";
  s += "    " + conn_cap + "drop\n";
  s += "    " + links + "meta nfproto ipv4 meta l4proto { tcp, udp } th dport " + dns +
       " ct status dnat accept\n";
  if (p.proxy_port != 0)
    s += "    " + links + "meta nfproto ipv4 tcp dport " + proxy + " ct status dnat accept\n";
  s += "    " + links + "drop\n";
  // The resolver and the proxy are for the sandboxes' redirected traffic alone (accepted above):
  // from anywhere else (the host's loopback, its other links) their ports on the gateway addresses
  // are closed. Only there: the same port number on another address is another socket (the
  // kernel hands the resolver's ephemeral port to 127.0.0.1 listeners too), which stays open.
  const std::string gateways = "ip daddr " + p.sandbox_range.str() + " ";
  s += "    " + gateways + "meta l4proto { tcp, udp } th dport " + dns + " drop\n";
  if (p.proxy_port != 0) s += "    " + gateways + "tcp dport " + proxy + " drop\n";
  s += "  }\n";

  s += "  chain forward {\n    type filter hook forward priority filter; policy accept;\n";
  s += "    " + out_links + "ct state established,related accept\n";
  s += "    " + out_links + "drop\n";
  s += "    " + links + "meta nfproto ipv6 drop\n";
  s += "    " + links + "ct state established,related accept\n";
  s += "    " + conn_cap + "drop\n";
  s += "    iifname vmap @chains\n";
  s += "    " + links + "drop\n  }\n";

  s += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  s += "    ip saddr " + p.sandbox_range.str() + " oifname != \"" + p.if_prefix +
       "*\" masquerade\n  }\n";
  s += "}\n";
  for (const auto& sb : p.sandboxes) s += sandbox_add(p, sb);
  return s;
}

std::string render_attach(const RulesetPlan& p, const RulesetSandbox& sb) {
  return sandbox_add(p, sb);
}

std::string render_update(const RulesetPlan& p, const RulesetSandbox& before,
                          const RulesetSandbox& after) {
  const std::string t = "inet " + p.table + " ";
  // The chain is made again: which sets it consults may change. A set it no longer consults
  // goes after the flush that drops its rules, in the same transaction.
  std::string s = sandbox_rules(p, after);
  const std::vector<OwnSet> now = own_sets(after);
  for (const OwnSet& old : own_sets(before)) {
    const bool kept =
        std::any_of(now.begin(), now.end(), [&](const OwnSet& o) { return o.name == old.name; });
    if (!kept) s += "delete set " + t + old.name + "\n";
  }
  if (p.proxy_port != 0) {
    const bool was = before.rules.proxied(), is = after.rules.proxied();
    if (was && !is) s += "delete element " + t + "proxied { " + quoted(after.host_if) + " }\n";
    if (!was && is) s += "add element " + t + "proxied { " + quoted(after.host_if) + " }\n";
  }
  return s;
}

std::string render_detach(const RulesetPlan& p, const RulesetSandbox& sb) {
  const std::string t = "inet " + p.table + " ";
  const std::string n = std::to_string(sb.slot);
  std::string s = "delete element " + t + "chains { " + quoted(sb.host_if) + " }\n";
  if (sb.address != 0)
    s += "delete element " + t + "links { " + quoted(sb.host_if) + " . " + ipv4_str(sb.address) +
         " }\n";
  if (sb.rules.proxied() && p.proxy_port != 0)
    s += "delete element " + t + "proxied { " + quoted(sb.host_if) + " }\n";
  s += "flush chain " + t + "sb_" + n + "\ndelete chain " + t + "sb_" + n + "\n";
  for (const OwnSet& own : own_sets(sb)) s += "delete set " + t + own.name + "\n";
  return s;
}

}  // namespace abx::egress
