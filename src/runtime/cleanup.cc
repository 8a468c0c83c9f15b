// cleanup_stale: undo what a dead owner left in a state directory.
//
// The owner holds an flock on <state>/<id>/lock for the sandbox's whole life; the kernel drops
// it when the owner dies, however it dies. So an unlocked directory is stale by construction,
// and a locked one belongs to a live owner and is never touched.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "abx/base/try.h"
#include "abx/runtime/sandbox.h"
#include "disk.h"
#include "sandbox_internal.h"
#include "sys.h"
#include "userns_internal.h"

namespace abx::runtime {
namespace {

// Kills the tree whose init is `pid`, if that process still is the one with `start`.
void kill_init(pid_t pid, unsigned long long start) {
  if (pid <= 0) return;
  UniqueFd pidfd(sys_pidfd_open(pid));
  if (!pidfd) return;  // gone already
  // Compare the start time only after taking the pidfd: from here on the pid cannot be reused
  // under us, so a match means the pidfd names the very process we started.
  if (process_start_time(pid) != start) return;
  sys_pidfd_send_signal(pidfd.get(), SIGKILL);
  // Not our child (the owner died; it was reparented): wait until it exits, then its
  // namespace's processes are gone too.
  pollfd p{pidfd.get(), POLLIN, 0};
  os::retry_eintr([&] { return ::poll(&p, 1, 5000); });
}

}  // namespace

Result<int> cleanup_stale(const std::string& state_dir) {
  DIR* d = ::opendir(state_dir.c_str());
  if (!d) {
    if (errno == ENOENT) return 0;
    return os::errno_error("opendir " + state_dir, errno);
  }
  std::vector<std::string> ids;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;  // ., .. and .rw-cache: never a sandbox id
    bool dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {  // some filesystems do not fill d_type
      struct stat st;
      dir = ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (dir) ids.push_back(name);
  }
  ::closedir(d);

  ABX_ASSIGN_OR_RETURN(auto layout, CgroupLayout::detect());
  int cleaned = 0;
  Status first_error;
  for (const auto& id : ids) {
    std::string dir = state_dir + "/" + id;
    auto lock = open_fd(dir + "/lock", O_RDWR);
    if (lock) {
      if (::flock(lock->get(), LOCK_EX | LOCK_NB) != 0) continue;  // a live owner
    } else if (lock.error().code() != ErrorCode::kNotFound) {
      continue;
    }
    // No lock file: the owner died between mkdir and creating it. Nothing else can exist.
    pid_t pid = 0;
    unsigned long long start = 0;
    std::string parent = "abx";
    if (auto init = read_file(dir + "/init")) {
      std::istringstream in(*init);
      in >> pid >> start >> parent;
    }
    kill_init(pid, start);
    // Its id range, if the claim still names that init (else it is free or someone else's).
    if (auto userns = read_file(dir + "/userns", 4096)) {
      std::istringstream in(*userns);
      std::uint32_t slot = 0, first = 0;
      std::string registry;
      if (in >> slot >> first >> registry) release_slot(registry, slot, pid, start);
    }
    SandboxCgroups cg = SandboxCgroups::existing(layout, parent, id);
    Status s = cg.kill();
    if (s) s = cg.remove();
    // A restore cut short: its staged root and binds hold the layer's loop device.
    remove_recorded_stage(dir, id);
    if (s) s = remove_rw_layer(dir);
    if (s) s = remove_tree(dir);
    if (s) {
      ++cleaned;
    } else if (first_error) {
      first_error = s;
    }
  }
  if (!first_error) return first_error.error();
  return cleaned;
}

}  // namespace abx::runtime
