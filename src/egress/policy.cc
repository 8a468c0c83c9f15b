// E2B's outbound rules: parsing and decisions (see abx/egress/policy.h).
#include "abx/egress/policy.h"

#include <algorithm>
#include <charconv>

#include "abx/base/ascii.h"

namespace abx::egress {
namespace {

bool parse_uint(std::string_view s, unsigned max, unsigned* out) {
  if (s.empty() || s.size() > 3) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  if (s.size() > 1 && s[0] == '0') return false;  // "010" is octal to inet_aton: refuse
  unsigned v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  if (v > max) return false;
  *out = v;
  return true;
}

std::string normal_host(std::string_view h) {
  if (!h.empty() && h.back() == '.') h.remove_suffix(1);
  return ascii_lower(h);
}

}  // namespace

Result<std::uint32_t> parse_ipv4(std::string_view text) {
  std::uint32_t ip = 0;
  std::string_view rest = text;
  for (int i = 0; i < 4; ++i) {
    std::size_t dot = rest.find('.');
    std::string_view part = i < 3 ? rest.substr(0, dot) : rest;
    if (i < 3 && dot == std::string_view::npos) return invalid_argument("not an IPv4 address");
    unsigned v = 0;
    if (!parse_uint(part, 255, &v)) return invalid_argument("not an IPv4 address");
    ip = (ip << 8) | v;
    if (i < 3) rest.remove_prefix(dot + 1);
  }
  return ip;
}

std::string ipv4_str(std::uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
         std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
}

std::string Cidr::str() const {
  return prefix == 32 ? ipv4_str(addr) : ipv4_str(addr) + "/" + std::to_string(prefix);
}

Result<Cidr> parse_cidr(std::string_view text) {
  if (text.find(':') != std::string_view::npos)
    return invalid_argument("IPv6 is not supported (sandboxes have IPv4 only)");
  std::size_t slash = text.find('/');
  auto ip = parse_ipv4(text.substr(0, slash));
  if (!ip) return invalid_argument("not an IPv4 address or CIDR");
  Cidr c{*ip, 32};
  if (slash != std::string_view::npos) {
    unsigned p = 0;
    if (!parse_uint(text.substr(slash + 1), 32, &p))
      return invalid_argument("prefix length must be 0..32");
    c.prefix = static_cast<int>(p);
    std::uint32_t mask = p == 0 ? 0 : ~std::uint32_t{0} << (32 - p);
    if ((c.addr & ~mask) != 0)
      return invalid_argument("host bits set (did you mean " + Cidr{c.addr & mask, c.prefix}.str() +
                              "?)");
  }
  return c;
}

bool DomainPattern::matches(std::string_view host) const {
  std::string h = normal_host(host);
  if (!wildcard) return h == name;
  return h.size() > name.size() + 1 && h.ends_with(name) && h[h.size() - name.size() - 1] == '.';
}

std::string DomainPattern::str() const { return wildcard ? "*." + name : name; }

Result<DomainPattern> parse_domain(std::string_view text, int min_labels) {
  DomainPattern d;
  if (text.starts_with("*.")) {
    d.wildcard = true;
    text.remove_prefix(2);
  }
  d.name = normal_host(text);
  if (d.name.empty() || d.name.size() > 253) return invalid_argument("not a domain name");
  int labels = 0;
  std::size_t start = 0;
  while (start <= d.name.size()) {
    std::size_t dot = d.name.find('.', start);
    if (dot == std::string::npos) dot = d.name.size();
    std::string_view label(d.name.data() + start, dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return invalid_argument("not a domain name");
    for (char c : label)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
        return invalid_argument(c == '*' ? "a wildcard is allowed only as a leading '*.'"
                                         : "not a domain name");
    ++labels;
    start = dot + 1;
  }
  if (labels < min_labels) return invalid_argument("a domain needs at least two labels");
  return d;
}

std::vector<std::string> Rules::allow_out() const {
  std::vector<std::string> out;
  for (const auto& c : allow_cidrs) out.push_back(c.str());
  for (const auto& d : allow_domains) out.push_back(d.str());
  return out;
}

std::vector<std::string> Rules::deny_out() const {
  std::vector<std::string> out;
  for (const auto& c : deny_cidrs) out.push_back(c.str());
  return out;
}

Result<Rules> parse_rules(const std::vector<std::string>& allow_out,
                          const std::vector<std::string>& deny_out, bool allow_internet_access) {
  if (allow_out.size() + deny_out.size() > kMaxRules)
    return invalid_argument("network: " + std::to_string(allow_out.size() + deny_out.size()) +
                            " rules; at most " + std::to_string(kMaxRules) + " are allowed");
  Rules r;
  for (std::size_t i = 0; i < allow_out.size(); ++i) {
    const std::string& e = allow_out[i];
    auto where = [&] { return "network.allowOut[" + std::to_string(i) + "] \"" + e + "\": "; };
    bool looks_ip = !e.empty() && (std::isdigit(static_cast<unsigned char>(e[0])) ||
                                   e.find(':') != std::string::npos);
    if (auto c = parse_cidr(e); c) {
      r.allow_cidrs.push_back(*c);
    } else if (looks_ip && e.find_first_not_of("0123456789./") == std::string::npos) {
      return invalid_argument(where() + c.error().message());
    } else if (e.find(':') != std::string::npos) {
      return invalid_argument(where() + c.error().message());
    } else if (auto d = parse_domain(e); d) {
      r.allow_domains.push_back(*d);
    } else {
      return invalid_argument(where() + "neither an IPv4 address, a CIDR nor a domain (" +
                              d.error().message() + ")");
    }
  }
  for (std::size_t i = 0; i < deny_out.size(); ++i) {
    const std::string& e = deny_out[i];
    auto c = parse_cidr(e);
    if (!c) {
      std::string why = c.error().message();
      if (parse_domain(e)) why = "denyOut takes addresses and CIDRs only, not domains";
      return invalid_argument("network.denyOut[" + std::to_string(i) + "] \"" + e + "\": " + why);
    }
    r.deny_cidrs.push_back(*c);
  }
  if (!allow_internet_access && std::none_of(r.deny_cidrs.begin(), r.deny_cidrs.end(),
                                             [](const Cidr& c) { return c.prefix == 0; }))
    r.deny_cidrs.push_back(Cidr{0, 0});
  return r;
}

Verdict decide(const Rules& rules, std::uint32_t ip, std::optional<std::string_view> domain) {
  for (const auto& c : rules.allow_cidrs)
    if (c.contains(ip)) return Verdict::kAllow;
  if (domain)
    for (const auto& d : rules.allow_domains)
      if (d.matches(*domain)) return Verdict::kAllow;
  for (const auto& c : rules.deny_cidrs)
    if (c.contains(ip)) return Verdict::kDeny;
  return Verdict::kAllow;
}

bool may_resolve(const Rules& rules, std::string_view qname) {
  bool deny_all = std::any_of(rules.deny_cidrs.begin(), rules.deny_cidrs.end(),
                              [](const Cidr& c) { return c.prefix == 0; });
  if (!deny_all) return true;
  return std::any_of(rules.allow_domains.begin(), rules.allow_domains.end(),
                     [&](const DomainPattern& d) { return d.matches(qname); });
}

bool Blocked::contains(std::uint32_t ip) const {
  return std::any_of(nets.begin(), nets.end(), [&](const Cidr& c) { return c.contains(ip); });
}

Blocked default_blocked(std::vector<Cidr> extra) {
  Blocked b;
  b.nets = {Cidr{0x00000000, 8}, Cidr{0x7f000000, 8}, Cidr{0xa9fe0000, 16}, Cidr{0xe0000000, 4},
            Cidr{0xf0000000, 4}};
  b.nets.insert(b.nets.end(), extra.begin(), extra.end());
  return b;
}

}  // namespace abx::egress
