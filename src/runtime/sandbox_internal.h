// What spawn(), adopt() and restore() (checkpoint_restore.cc) share: a sandbox's in-memory state,
// its state directory's records, and the parent-side steps both spawn() and restore() take.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/runtime/cgroup.h"
#include "abx/runtime/process.h"
#include "abx/runtime/sandbox.h"
#include "abx/runtime/veth.h"
#include "userns_internal.h"

namespace abx::runtime {

// Files of <state_dir>/<id>/.
inline constexpr const char* kLockFile = "lock";
inline constexpr const char* kInitFile = "init";      // "<pid> <starttime> <cgroup_parent>\n"
inline constexpr const char* kUsernsFile = "userns";  // "<slot> <first host id> <registry>\n"
inline constexpr const char* kVethFile = "veth";      // "<host if> <host ip> <sandbox ip>\n"
inline constexpr const char* kStageFile = "stage";    // "<stage dir>\n" while restore() runs

struct Sandbox::State {
  SandboxConfig config;
  std::string dir;  // <state_dir>/<id>
  UniqueFd lock;
  UniqueFd pidfd;
  // Closed by destroy() and detach() while another thread may be making a socket in it
  // (tcp_socket()): both under netns_mu, so a closed fd's number, reused, is never setns'd into.
  std::mutex netns_mu;
  UniqueFd netns;
  bool netns_closed = false;
  pid_t pid = -1;
  std::optional<int> status;  // set once reaped
  SandboxCgroups cgroups;
  bool destroyed = false;
  bool killed = false;  // kill() ran: the tree has its SIGKILL, the netns fd is closed
  // kill() took the slot's claim over from the init (take_over_slot): this process holds it
  // until destroy() releases it.
  bool slot_taken_over = false;
  bool adopted = false;  // the init is not our child: no waitid, exit seen through the pidfd
  unsigned long long start = 0;       // the init's start time
  std::optional<std::uint32_t> slot;  // the user namespace's slot (userns.h)
  std::optional<VethInfo> veth;
  std::uint32_t root_id = 0;
  std::string registry;

  // Frees the slot's claim: the init's, or this process's once kill() took it over.
  void release_slot_of_init() const {
    if (!slot) return;
    if (slot_taken_over)
      release_slot(registry, *slot, ::getpid(), process_start_time(::getpid()));
    else
      release_slot(registry, *slot, pid, start);
  }
};

struct SandboxAccess {
  static Sandbox::State& state(Sandbox& sb) { return *sb.s_; }
  static Sandbox make(std::unique_ptr<Sandbox::State> st) { return Sandbox(std::move(st)); }
};

// invalid_argument unless `c` is a config spawn() accepts.
Status validate(const SandboxConfig& c);
// The overlay's lower layers, lowest first; empty for kHost.
std::vector<std::string> layers_of(const SandboxConfig& c);
// The host's cgroup layout, detected once.
const CgroupLayout& cgroup_layout();
// Creates <state_dir>/<id> (`dir`), which must not exist (already_exists).
Status make_state_dir(const SandboxConfig& config, const std::string& dir);
// Takes the owner's lock of `dir` and makes the writable layer's mount point.
Result<UniqueFd> lock_state_dir(const std::string& dir);
// The records adopt() and cleanup_stale() read.
Status write_init_record(const std::string& dir, pid_t pid, unsigned long long start,
                         const std::string& cgroup_parent);
Status write_userns_record(const Sandbox::State& st);
// The veth of `st.slot` into `st.netns`, its record, then config.link_ready; sets st.veth.
Status connect_veth(const SandboxConfig& config, Sandbox::State& st, Timeline* timeline = nullptr);

}  // namespace abx::runtime
