// Parent-side pieces of a sandbox's user namespace (userns.h): the machine-wide slot registry,
// the thread-scoped credentials the spawning thread takes while it creates the namespace and
// the overlay, and the id maps.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "abx/base/error.h"
#include "abx/runtime/userns.h"

namespace abx::runtime {

// Claims a free slot for the calling process (recorded as its pid and start time): the first
// free one from the slot after the last claimed (the registry's `next` file), wrapping around, so
// a slot just released is taken again last. A slot's number also names its sandbox's host link
// and /30 (veth_for_slot), and the kernel removes a dead sandbox's link only when it takes its
// network namespace down, tens of milliseconds after the sandbox died; a new sandbox on that
// slot would wait for that to replace the link. resource_exhausted when every slot is held by a
// live process.
Result<std::uint32_t> claim_slot(const UserNamespace& u);
// Claims exactly `slot` (a restored sandbox's id range is in its images): resource_exhausted
// when a live process holds it.
Status claim_slot_exact(const UserNamespace& u, std::uint32_t slot);
// Records `pid` (the sandbox's init) as the holder of `slot`: the claim then lives as long as
// the init, whoever owns the sandbox.
Status hold_slot(const UserNamespace& u, std::uint32_t slot, pid_t pid);
// Hands `slot` from the process `from_pid` started at `from_start` (a sandbox's init) to the
// calling process, if the claim still names the former: a sandbox killed now but torn down
// later keeps its id range (and its link's name and /30) until its owner releases it with
// release_slot(registry, slot, getpid(), <its start time>). False when the claim names another
// process or none (the init had died and the slot may be another sandbox's already).
bool take_over_slot(const std::string& registry, std::uint32_t slot, pid_t from_pid,
                    unsigned long long from_start);
// Frees `slot` if its claim still names the process `pid` started at `start` (best effort: a
// claim whose holder is gone is free anyway). Conditional because once that process died the
// slot may already belong to another sandbox.
void release_slot(const std::string& registry, std::uint32_t slot, pid_t pid,
                  unsigned long long start);

// Switches the calling THREAD's effective ids (raw setresuid/setresgid: glibc's wrappers would
// switch every thread of the process) so that a user namespace cloned now is owned by `uid`,
// which charges the namespace's per-user counters to that uid instead of host root; restores
// uid/gid 0 (and with them the effective capabilities) on destruction. The thread must be root.
class ScopedThreadOwner {
 public:
  static Result<ScopedThreadOwner> become(std::uint32_t id);
  ScopedThreadOwner(ScopedThreadOwner&& o) noexcept : active_(o.active_) { o.active_ = false; }
  ScopedThreadOwner& operator=(ScopedThreadOwner&&) = delete;
  ~ScopedThreadOwner();

 private:
  ScopedThreadOwner() = default;
  bool active_ = false;
};

// Switches the calling thread's filesystem ids to `id` and raises its effective capabilities
// back to the permitted set (a change of fsuid from 0 drops the filesystem ones): an overlay
// created now records these credentials as its mounter's, so its copy-ups and work dir through
// an idmapped upper layer are stored as the sandbox's root (on-disk 0). Restores fsuid/fsgid 0
// on destruction.
class ScopedThreadFsIds {
 public:
  static Result<ScopedThreadFsIds> become(std::uint32_t id);
  ScopedThreadFsIds(ScopedThreadFsIds&& o) noexcept : active_(o.active_) { o.active_ = false; }
  ScopedThreadFsIds& operator=(ScopedThreadFsIds&&) = delete;
  ~ScopedThreadFsIds();

 private:
  ScopedThreadFsIds() = default;
  bool active_ = false;
};

// Makes `path` (UserNamespace::mount_point) and checks that every component is a root-owned
// directory others may search.
Status prepare_mount_point(const std::string& path);

// Writes "0 <first> 65536" to /proc/<pid>/uid_map and gid_map.
Status write_id_maps(pid_t pid, std::uint32_t first);

}  // namespace abx::runtime
