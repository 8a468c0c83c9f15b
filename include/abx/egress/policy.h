// abx::egress — what a sandbox may reach on the network, as E2B defines it.
//
// A sandbox's outbound rules are E2B's `network` object: `allowOut` (IPv4 addresses, CIDRs and
// domains such as `example.com` or `*.example.com`) and `denyOut` (addresses and CIDRs only).
// `allowOut` wins over `denyOut`; `denyOut: ["0.0.0.0/0"]` denies everything not allowed;
// `allowInternetAccess: false` is that same deny-all. Domains are matched for HTTP (port 80, by
// Host) and TLS (port 443, by SNI) only, and only against addresses the sandbox's own resolver
// answered for that name (the caller checks the binding); every other port is matched by
// address. On top of any rules, an always-blocked set (the host's own addresses, every sandbox's
// range, link-local, loopback, multicast, and what the operator adds) is never reachable.
//
// This module is pure (no I/O): parsing, validation and decisions. The kernel rules that
// enforce it are made by abx::runtime (nftables), the DNS and proxy servers by abx::platform.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::egress {

// Most entries `allowOut` + `denyOut` may hold together.
inline constexpr std::size_t kMaxRules = 1000;

// An IPv4 network; host byte order. `1.2.3.4` parses as 1.2.3.4/32.
struct Cidr {
  std::uint32_t addr = 0;  // network address (host bits cleared)
  int prefix = 32;         // 0..32

  bool contains(std::uint32_t ip) const {
    return prefix == 0 || ((ip ^ addr) >> (32 - prefix)) == 0;
  }
  std::string str() const;  // "10.0.0.0/8"; a /32 prints without the suffix
  friend bool operator==(const Cidr&, const Cidr&) = default;
};

// invalid_argument with the reason for anything but a dotted-quad IPv4 address with an optional
// /0../32 suffix (host bits set are an error: "10.0.0.1/8" names no network). IPv6 is refused
// with its own message (sandboxes have no IPv6).
Result<Cidr> parse_cidr(std::string_view text);

// Parses a dotted-quad IPv4 address (no suffix).
Result<std::uint32_t> parse_ipv4(std::string_view text);
std::string ipv4_str(std::uint32_t ip);

// `example.com` (that name only) or `*.example.com` (any name under it, not the apex).
// Lower-cased, a trailing dot dropped; labels of [a-z0-9-_] (1..63, no leading or trailing '-'),
// at most 253 characters, at least two labels.
struct DomainPattern {
  std::string name;  // without the "*." of a wildcard
  bool wildcard = false;

  bool matches(std::string_view host) const;  // host: any case, optional trailing dot
  std::string str() const;
  friend bool operator==(const DomainPattern&, const DomainPattern&) = default;
};
// `min_labels`: 2 for allowOut; E2B's transform rules take `*.com` (a wildcard over one label).
Result<DomainPattern> parse_domain(std::string_view text, int min_labels = 2);

struct Rules {
  std::vector<Cidr> allow_cidrs;
  std::vector<DomainPattern> allow_domains;
  std::vector<Cidr> deny_cidrs;
  // The sandbox has transform rules (transform.h): its HTTP and TLS go through the egress proxy
  // even when no domain is allowed. Not part of the verdict.
  bool transforms = false;

  // Whether TCP 80/443 goes to the egress proxy (the ruleset's `proxied` set).
  bool proxied() const { return !allow_domains.empty() || transforms; }
  bool empty() const { return allow_cidrs.empty() && allow_domains.empty() && deny_cidrs.empty(); }
  // True when a name could decide a verdict: some domain is allowed while something is denied.
  bool filters_domains() const { return !allow_domains.empty() && !deny_cidrs.empty(); }
  // The rule lists in E2B's spelling (CIDRs as given by str(), domains as str()).
  std::vector<std::string> allow_out() const;
  std::vector<std::string> deny_out() const;
};

// E2B's `allowOut`/`denyOut` lists. Each entry is tried as an address or CIDR first, then (in
// allowOut only) as a domain. invalid_argument names the list, the index and the reason; more
// than kMaxRules entries in all is invalid_argument too. `allow_internet_access == false` adds
// 0.0.0.0/0 to the deny list (E2B: "equivalent to denyOut: ['0.0.0.0/0']").
Result<Rules> parse_rules(const std::vector<std::string>& allow_out,
                          const std::vector<std::string>& deny_out, bool allow_internet_access);

enum class Verdict { kAllow, kDeny };

// E2B's order: an allowed address, then an allowed domain (when `domain` is known), then a denied
// address, then allow. Does not consult the always-blocked set.
Verdict decide(const Rules& rules, std::uint32_t ip, std::optional<std::string_view> domain);

// Whether the sandbox's resolver should answer `qname` at all: yes unless the rules deny
// 0.0.0.0/0 (then only names some allowed domain matches). This is what stops a deny-all sandbox
// from tunnelling data out through DNS queries.
bool may_resolve(const Rules& rules, std::string_view qname);

// Always-blocked networks that hold whatever the rules say.
struct Blocked {
  std::vector<Cidr> nets;
  bool contains(std::uint32_t ip) const;
};
// 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4, 240.0.0.0/4 (255.255.255.255 within),
// plus `extra` (the sandbox range, the host's addresses, the operator's list).
Blocked default_blocked(std::vector<Cidr> extra);

}  // namespace abx::egress
