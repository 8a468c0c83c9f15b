// nftables text for RulesetPlan (see abx/egress/ruleset.h).
#include "abx/egress/ruleset.h"

#include <string_view>

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

std::string render_delete(const std::string& table) {
  return "table inet " + table + " {}\ndelete table inet " + table + "\n";
}

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
  for (const auto& sb : p.sandboxes) {
    std::string n = std::to_string(sb.slot);
    s += set_decl("allow_" + n, sb.rules.allow_cidrs);
    s += set_decl("deny_" + n, sb.rules.deny_cidrs);
  }
  std::string proxied;
  for (const auto& sb : p.sandboxes)
    if (!sb.rules.allow_domains.empty() && p.proxy_port != 0)
      proxied += (proxied.empty() ? "" : ", ") + ("\"" + sb.host_if + "\"");

  // Anti-spoofing, before NAT and everything else (sandboxes lack CAP_NET_RAW, so this is a second
  // wall): a link carries its own sandbox's address only.
  s += "  chain guard {\n    type filter hook prerouting priority raw; policy accept;\n";
  for (const auto& sb : p.sandboxes)
    if (sb.address != 0)
      s += "    iifname \"" + sb.host_if + "\" ip saddr != " + ipv4_str(sb.address) + " drop\n";
  s += "  }\n";
  s += "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n";
  s += "    " + links + "meta nfproto ipv4 udp dport 53 redirect to :" + dns + "\n";
  s += "    " + links + "meta nfproto ipv4 tcp dport 53 redirect to :" + dns + "\n";
  if (!proxied.empty())
    s += "    iifname { " + proxied +
         " } meta nfproto ipv4 tcp dport { 80, 443 } redirect to :" + proxy + "\n";
  s += "  }\n";

  s += "  chain input {\n    type filter hook input priority filter; policy accept;\n";
  s += "    " + links + "ct state established,related accept\n";
  s += "    " + links + "meta nfproto ipv4 meta l4proto { tcp, udp } th dport " + dns +
       " ct status dnat accept\n";
  if (p.proxy_port != 0)
    s += "    " + links + "meta nfproto ipv4 tcp dport " + proxy + " ct status dnat accept\n";
  s += "    " + links + "drop\n  }\n";

  s += "  chain forward {\n    type filter hook forward priority filter; policy accept;\n";
  s += "    " + out_links + "ct state established,related accept\n";
  s += "    " + out_links + "drop\n";
  s += "    " + links + "meta nfproto ipv6 drop\n";
  s += "    " + links + "ct state established,related accept\n";
  for (const auto& sb : p.sandboxes)
    s += "    iifname \"" + sb.host_if + "\" jump sb_" + std::to_string(sb.slot) + "\n";
  s += "    " + links + "drop\n  }\n";

  for (const auto& sb : p.sandboxes) {
    std::string n = std::to_string(sb.slot);
    s += "  chain sb_" + n + " {\n";
    s += logged("ip daddr @blocked ", sb.slot, "blocked", p.log_group, "drop");
    s += logged("ip daddr @allow_" + n + " ", sb.slot, "allow", p.log_group, "accept");
    s += logged("ip daddr @deny_" + n + " ", sb.slot, "deny", p.log_group, "drop");
    s += logged("", sb.slot, "allow", p.log_group, "accept");
    s += "  }\n";
  }

  s += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  s += "    ip saddr " + p.sandbox_range.str() + " oifname != \"" + p.if_prefix +
       "*\" masquerade\n  }\n";
  s += "}\n";
  return s;
}

}  // namespace abx::egress
