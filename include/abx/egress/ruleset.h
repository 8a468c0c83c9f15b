// The nftables ruleset that enforces every sandbox's rules on one abxd's links (pure text; the
// runtime applies it through libnftables as one transaction).
//
// One `inet` table per abxd (its name and link prefix derive from the daemon's home, so several
// daemons on a machine never touch each other's rules). What it does, hook by hook:
//   prerouting  DNS (udp/tcp 53 to any address) from a sandbox goes to abxd's resolver; for a
//               sandbox whose rules name domains, TCP 80/443 goes to abxd's egress proxy, which
//               matches Host/SNI against the names its resolver answered.
//   input       from a sandbox link only replies, the resolver and the proxy reach the host: no
//               other host listener (abxd's API included) is reachable from a sandbox.
//   forward     nothing enters a sandbox link unsolicited (no sandbox reaches another); IPv6 from
//               a sandbox is dropped; new flows go through the sandbox's chain: the always-blocked
//               set, then E2B's allow, then deny, then allow — each verdict logged to NFLOG.
//   postrouting sandbox traffic leaving through another link is masqueraded.
// A link of this daemon without its entries yet (created, rules not applied) is dropped: fail
// closed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "abx/egress/policy.h"

namespace abx::egress {

struct RulesetSandbox {
  std::uint32_t slot = 0;  // numbers the chain and the NFLOG prefix "abx:<slot>:<verdict>"
  std::string host_if;
  std::uint32_t address = 0;  // the sandbox's own address: any other source on its link is dropped
  Rules rules;
};

struct RulesetPlan {
  std::string table;      // [a-z0-9_]{1,32}
  std::string comment;    // shown by `nft list` (quotes and backslashes are dropped)
  std::string if_prefix;  // the links' name prefix, [a-z0-9]{1,10}
  Cidr sandbox_range;     // every sandbox address of the machine
  std::vector<Cidr> blocked;
  std::uint16_t dns_port = 0;
  std::uint16_t proxy_port = 0;
  std::uint16_t log_group = 0;
  // Connections a sandbox may have in the host's conntrack table at once (its outbound flows,
  // its DNS and its proxied flows together, counted by its address); new ones over it are
  // refused. The table is shared by the whole machine (nf_conntrack_max).
  std::uint32_t max_conns_per_sandbox = 4096;
  std::vector<RulesetSandbox> sandboxes;
};

// "table inet T {}; delete table inet T; table inet T {...}" and each sandbox's part: replaces
// the table atomically.
std::string render_ruleset(const RulesetPlan& plan);
// One sandbox's part alone, for a table render_ruleset() made: its sets, its chain, and its
// link's entries in the shared `links` set, `proxied` set and `chains` map. A create or delete
// changes only its own sandbox's part, so its cost does not grow with the number of sandboxes
// (nor does a packet's: the shared hooks find a link's entries with one lookup each).
std::string render_attach(const RulesetPlan& plan, const RulesetSandbox& sandbox);
// New rules for an attached sandbox (`before`: what it had).
std::string render_update(const RulesetPlan& plan, const RulesetSandbox& before,
                          const RulesetSandbox& after);
// Replaces the elements of the always-blocked set of a table render_ruleset() made with `blocked`
// (one transaction: a packet sees the old set or the new one, never an empty one).
std::string render_blocked(const std::string& table, const std::vector<Cidr>& blocked);
// Removes what render_attach() added. Fails (as one transaction: nothing changes) when some of
// it is missing; re-render the whole table then.
std::string render_detach(const RulesetPlan& plan, const RulesetSandbox& sandbox);
// (prerouting, before anything else: a packet from a sandbox link whose source is not that
// sandbox's address is dropped — no sandbox speaks for another to the resolver or the proxy.)
// Removes the table (and only it), whether or not it exists.
std::string render_delete(const std::string& table);

}  // namespace abx::egress
