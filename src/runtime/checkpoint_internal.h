// What checkpoint.cc (checkpoint(), recover()), checkpoint_restore.cc (restore()),
// checkpoint_images.cc (the CRIU images a restore reads and rewrites) and checkpoint_criu.cc
// (running CRIU; what both sides of a checkpoint use) share, and mark_pending() of
// checkpoint_seal.cc.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/os.h"
#include "abx/runtime/cgroup.h"
#include "abx/runtime/sandbox.h"

namespace abx::runtime {

constexpr const char* kJsonFile = "checkpoint.json";
constexpr int kFormat = 1;

std::string bind_key(std::size_t i);

// What a CRIU run left: its status, its stdout + stderr (the first 64 KiB), whether it timed out.
using Ran = os::Finished;

// How long `criu check` and `criu --version` may take.
constexpr std::chrono::seconds kQuickCriuLimit{60};

// Runs `args` (argv[0] absolute; no shell) with os::run: /dev/null as stdin, one pipe as stdout
// and stderr (the first 64 KiB kept). With `join` or `started`, the forked child waits until the
// parent has attached it to those cgroups (so the program runs in them from its first
// instruction) and has called started(pid), then execs; should the parent die before, the child
// exits and the program never runs.
// started() records the pid where a later abxd finds it: the program must not act before the
// record exists (a dump started by an abxd killed in between ran unrecorded; recover() thawed
// the tree, and CRIU, ending, froze it again for good). The program leads a session (and so a
// process group) of its own; when it has not finished within `limit`, that group is killed
// (SIGKILL) and the result says timed_out.
// A session, not only a process group: a CRIU dump outlives an abxd killed meanwhile (recover()
// waits for it). Were it only a group of abxd's session, abxd's death would orphan the group,
// and the kernel sends SIGHUP and SIGCONT to an orphaned group with a stopped member. CRIU's
// start stops a helper of its own (SIGSTOP, the compat vDSO probe of kerndat_init) and waits
// for that stop: a SIGCONT first and the helper runs on while CRIU waits for ever (seen: a
// "kill -9 of abxd" test's CRIU hung in waitpid with SIGHUP pending). The kernel sends those
// signals only within one session.
Result<Ran> run_criu(const std::vector<std::string>& args, std::chrono::milliseconds limit,
                     const SandboxCgroups* join = nullptr,
                     const std::function<Status(pid_t)>& started = {});

// Marks the entries `names` of `dir`'s seal pending (as seal_checkpoint() with them pending
// would), keeping every other line as sealed rather than hashing the tree again: for a restore
// with link_layer, right after verify_checkpoint() held. Errors: a seal whose MAC fails.
Status mark_pending(const std::string& dir, std::string_view key,
                    const std::vector<std::string>& names);

// `criu --version`'s version ("4.1.1"), or "" when it does not say; asked once per path and
// process (each checkpoint records it, and an exec of CRIU costs milliseconds).
std::string criu_version(const std::string& criu);

// The file's text, or `fallback` when it cannot be read.
std::string read_or(const std::string& path, std::string fallback, std::size_t max = 16 << 20);

// The lines of a CRIU log worth showing: its errors (the last 6), else its last 6 lines.
std::string log_tail(const std::string& text);

// A private copy of the images in `dir` (hard links where the filesystem allows, copies
// otherwise) at `to`, with every userns-*.img rewritten from `from` to `to_first` when they
// differ. The original files are never written: the rewritten ones are new files (0600, as
// every file of a checkpoint). restore() hands it to CRIU idmapped (the restored tasks read
// their images themselves, from inside the sandbox's user namespace).
Status images_for_restore(const std::string& dir, const std::string& to, std::uint32_t from,
                          std::uint32_t to_first);

// Refuses a restore when a mount target — every mount CRIU puts directly on the root, and every
// bind of `config` — has a symlink (or `..` out of the root) anywhere on its way in the root
// overlay `root`: CRIU would mount onto wherever the link points. A target that does not exist
// yet is fine (what exists of its path has no symlink).
Status check_mount_targets(int root, const std::string& images, const SandboxConfig& config);

}  // namespace abx::runtime
