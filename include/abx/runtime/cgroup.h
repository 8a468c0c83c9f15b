// abx::runtime cgroups: one interface over cgroup v1 and v2 for a sandbox's resource limits.
//
// CgroupLayout::detect() reads /proc/self/mountinfo and records, per controller, whether it is
// bound to a v1 hierarchy or enabled on the v2 (unified) one; hybrid hosts (v1 controllers plus
// a controller-less cgroup2 at /sys/fs/cgroup/unified) are common and handled: limits go to
// whichever hierarchy owns the controller, and the v2 group is still created because its
// cgroup.kill (Linux >= 5.14) kills a whole tree atomically, racing forks included. Without v2,
// kill() falls back to the v1 freezer: freeze, SIGKILL every task, thaw.
//
// Every sandbox gets `<mount>/<parent>/<id>` in each hierarchy it uses; nothing else is touched
// (v2: the parent's cgroup.subtree_control gains the controllers limits need).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "abx/base/error.h"

namespace abx::runtime {

// Limits enforced through cgroups. Zero means "no limit" for every field.
struct CgroupLimits {
  std::uint64_t memory_bytes = 0;    // v1 memory.limit_in_bytes (+memsw) / v2 memory.max (+swap 0)
  std::uint32_t pids_max = 0;        // pids.max: fork/clone beyond it fail with EAGAIN
  std::uint32_t cpu_millicores = 0;  // 1000 = one full core (CFS quota over a 100 ms period)
};

// What a sandbox's groups use right now; 0 where the controller is not in use or the kernel does
// not report it.
struct CgroupUsage {
  std::uint64_t memory_bytes = 0;  // v1 memory.usage_in_bytes, else v2 memory.current
  // CPU time used: v2 cpu.stat usage_usec, else v1 cpuacct.usage / 1000 when cpuacct is
  // mounted with cpu; 0 otherwise.
  std::uint64_t cpu_usec = 0;
};

struct CgroupLayout {
  std::string v2_root;                    // cgroup2 mount point, empty if none mounted
  std::set<std::string> v2_controllers;   // controllers listed in <v2_root>/cgroup.controllers
  std::map<std::string, std::string> v1;  // controller name -> its v1 hierarchy's mount point

  // Parses /proc/self/mountinfo (or `mountinfo_path`). Fails only if it cannot be read.
  static Result<CgroupLayout> detect(const std::string& mountinfo_path = "/proc/self/mountinfo");

  // Where `controller` lives: "v2", "v1" or "" (unavailable).
  std::string where(const std::string& controller) const;
};

// The cgroup directories of one sandbox. Move-only; does not remove anything on destruction
// (teardown is explicit so a crashed owner leaves state that cleanup_stale() can find).
class SandboxCgroups {
 public:
  // Creates the groups and writes `limits`. Errors: failed_precondition if a limit is asked for
  // and its controller is mounted nowhere; already_exists if the group exists; internal with the
  // path and errno otherwise. On error nothing created is left behind.
  static Result<SandboxCgroups> create(const CgroupLayout& layout, const std::string& parent,
                                       const std::string& id, const CgroupLimits& limits);
  // The groups a sandbox with this id would have, whether or not they exist (for cleanup).
  static SandboxCgroups existing(const CgroupLayout& layout, const std::string& parent,
                                 const std::string& id);

  // Moves `pid` (a host pid) into every group.
  Status attach(pid_t pid) const;
  // Kills every task in the groups and waits (bounded) until they are empty.
  Status kill() const;
  // kill() without the wait: SIGKILL sent to every task (cgroup.kill, else through the v1
  // freezer, else one pass over the pids), not waited for. The caller waits its own way (a pid
  // namespace's init exits last: Sandbox::kill polls its pidfd).
  Status send_kill() const;
  // Freezes (true) or thaws (false) every task, waiting until the kernel reports it done:
  // cgroup v2's cgroup.freeze, else the v1 freezer. Memory is kept while frozen.
  // failed_precondition when neither is available.
  Status freeze(bool frozen) const;
  // Whether freeze(true) is in force (the freezer freeze() uses asks for it); false without one.
  bool frozen() const;
  // Removes the directories (retrying while the kernel still tears tasks down). Missing ones
  // are fine.
  Status remove() const;
  // Host pids in the groups (the first hierarchy that lists any).
  std::vector<pid_t> pids() const;
  // Reads the usage counters (for the control API's metrics); never fails, see CgroupUsage.
  CgroupUsage usage() const;
  // How many times the kernel's OOM killer acted in the groups (v2 memory.events oom_kill, v1
  // memory.oom_control oom_kill); 0 when unknown or the memory controller is not in use.
  std::uint64_t oom_kills() const;

  // The directory whose freezer freeze() uses (cgroup v2's core freezer, else the v1 freezer
  // group); "" when there is none.
  std::string freezer_dir() const;
  // Absolute directories, v2 first if present.
  const std::vector<std::string>& dirs() const { return dirs_; }
  // Directory that holds `controller`'s files, or "" if the controller is not in use.
  std::string dir_for(const std::string& controller) const;

 private:
  std::vector<std::string> dirs_;
  std::string v2_dir_;       // "" if no cgroup2
  std::string freezer_dir_;  // v1 freezer, used for kill without v2
  std::map<std::string, std::string> controller_dir_;
};

}  // namespace abx::runtime
