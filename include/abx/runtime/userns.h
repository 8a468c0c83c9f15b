// User namespaces: each sandbox's uids and gids 0..65535 map to a host range of its own.
//
// Sandbox root is then an unprivileged host uid: its capabilities mean something only inside
// its own namespaces, files of the host (uid 0 there) are "nobody" to it, and the kernel's
// per-user counters (inotify instances and watches, queued signals, processes, locked memory,
// pipe buffers, user namespaces) are charged to that sandbox's range, not to host root's.
//
// Ranges: slot i (0 <= i < slots) is host ids [base + i*65536, base + (i+1)*65536). A slot is
// claimed machine-wide in `registry` (one file per claimed slot naming the process that holds
// it: the spawning process, then the sandbox's init), under an flock of `registry/.lock`. A
// claim whose process is gone (matched by pid and start time) is free again, so a crashed owner
// leaks nothing; a sandbox that outlives its owner (adopt()) keeps its slot. Every owner on the
// machine must use the same registry, base and slots (abxd's defaults), or two owners could hand
// out the same range.
//
// Layers are shared between sandboxes through idmapped mounts (no per-sandbox chown copies):
// the image layers, the writable layer and every bind are mounted with the sandbox's mapping, so
// a file that is uid 0 on disk is root inside, and what sandbox root writes to its writable layer
// is stored as uid 0 on disk (template builds and snapshots see plain, unshifted ids).
#pragma once

#include <cstdint>
#include <string>

#include "abx/base/error.h"

namespace abx::runtime {

// ids per sandbox: 0..65535, what images (nobody = 65534) and E2B's base (user = 1000) assume.
inline constexpr std::uint32_t kIdsPerSandbox = 65536;

struct UserNamespace {
  bool enabled = true;
  // 0x70000000 = 1879048192: above /etc/subuid's customary 100000.. and systemd-nspawn's
  // dynamic container ranges (524288..1879048191), below systemd's foreign range (from
  // 0x7FFE0000) and 2^31 (ids some tools treat as signed). 2048 slots end at 2013265919.
  std::uint32_t base = 0x70000000;
  std::uint32_t slots = 2048;
  std::string registry = "/run/abx/userns";
  // An empty directory, searchable by everyone, that each sandbox's init mounts its root on in
  // its own mount namespace (so one directory serves every sandbox). Not in the sandbox's
  // state directory: with a user namespace the init may not search that 0700 tree.
  std::string mount_point = "/run/abx/root";
};

// The host ids slot `slot` maps to: [first, first + kIdsPerSandbox).
inline std::uint32_t slot_first_id(const UserNamespace& u, std::uint32_t slot) {
  return u.base + slot * kIdsPerSandbox;
}

// invalid_argument unless [base, base + slots*65536) fits below 2^32-1 and starts above 0;
// failed_precondition naming the entry if the range overlaps a user or group of the host
// (/etc/passwd, /etc/group) or a subordinate range handed out to a user (/etc/subuid,
// /etc/subgid). `etc` is the directory to read (tests point it elsewhere).
Status check_id_range(const UserNamespace& u, const std::string& etc = "/etc");

}  // namespace abx::runtime
