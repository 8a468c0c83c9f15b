// abx::runtime sandbox links: a veth pair from each sandbox's network namespace to the host, and
// the host's nftables ruleset that polices them.
//
// Addressing is routed point-to-point (no bridge): slot i of the user-namespace registry (the
// machine-wide number every live sandbox holds, userns.h) owns the /30 `subnet_base + 4*i`:
// .1 on the host end (named `<prefix><i>`), .2 on the sandbox end (`eth0`), whose default route
// is .1. No bridge means sandboxes share no L2 segment, so one cannot ARP-spoof or reach another
// except through the host's forward path, where the ruleset decides. IPv6 is off on both ends
// (no addresses are generated), so nothing reaches the host over link-local IPv6.
//
// Links need no cleanup: a veth dies with the sandbox's network namespace. A stale host end left
// by a sandbox whose namespace is still being torn down is replaced.
#pragma once

#include <cstdint>
#include <string>

#include "abx/base/error.h"

namespace abx::runtime {

struct VethConfig {
  bool enabled = false;
  std::uint32_t subnet_base = 0;  // host byte order, aligned to 4 * slots
  std::string name_prefix;        // host-end name prefix, [a-z0-9]; with the slot <= 15 chars
};

struct VethInfo {
  std::string host_if;
  std::uint32_t host_ip = 0;     // host byte order; the sandbox's gateway and resolver address
  std::uint32_t sandbox_ip = 0;  // host byte order
};

// The addresses slot `slot` gets.
VethInfo veth_for_slot(const VethConfig& c, std::uint32_t slot);

// Creates the pair (the peer moved into `netns_fd` as eth0), addresses both ends, brings them up
// and adds the sandbox's default route. Errors name the netlink request and its errno.
Status setup_veth(const VethConfig& c, const VethInfo& info, int netns_fd);

// Deletes the pair by its host end (the sandbox's eth0 goes with it). A missing link is fine.
Status remove_veth(const VethInfo& info);

// Whether a packet to `ip` (host byte order) from this host would be delivered to the host
// itself: the kernel's own route lookup (RTM_GETROUTE) answers "local" or "broadcast", as
// for every address on any of its links now, the ones added after abxd started included, and
// all of 127/8. One rtnetlink round trip on a fresh socket (64-70 µs on the development VM
// under load); thread-safe. Errors name RTM_GETROUTE with its errno; an address with no route
// at all is not the host's (false).
Result<bool> is_host_address(std::uint32_t ip);

// Runs an nftables script (nft's own syntax) as one transaction through libnftables: all of it
// applies or none does. Errors carry nft's message. Thread-safe. One libnftables context serves
// the process, made by the first call: every call acts in the network namespace that call ran in
// (abxd's: the host's), whichever thread calls later.
Status nft_apply(const std::string& script);
// Runs one nftables command (e.g. "list tables") and returns what it prints, with each object's
// handle ("# handle N") when `handles`. Errors as nft_apply.
Result<std::string> nft_query(const std::string& command, bool handles = false);

// Writes `value` to /proc/sys/`key` (e.g. "net/ipv4/ip_forward").
Status write_sysctl(const std::string& key, const std::string& value);

}  // namespace abx::runtime
