// A sandbox's runtime config as abxd keeps it on disk (<home>/run/<id>/sandbox.json), so that
// an abxd that did not spawn the sandbox — a restarted one, or a resume days later — can
// checkpoint it, restore it and fork it with exactly the layers, binds and limits it was
// created with, whatever happened to its template since.
//
// Kept: rootfs mode and layers, binds, argv, env, cwd, limits, sizes, rlimits, network mode and
// whether it had a link. Not kept: what comes from abxd's own options each time (state_dir,
// the user namespace ranges, the veth numbering) and callbacks (link_ready).
#pragma once

#include <string>

#include "abx/base/error.h"
#include "abx/runtime/sandbox.h"

namespace abx::platform {

inline constexpr const char* kSandboxConfigFile = "sandbox.json";

// Writes `config` to <run_dir>/sandbox.json (0600, via a temporary file and rename).
Status save_sandbox_config(const std::string& run_dir, const runtime::SandboxConfig& config);

// Reads it back. Errors: not_found (no file: a sandbox from before it was kept),
// failed_precondition (unreadable or malformed).
Result<runtime::SandboxConfig> load_sandbox_config(const std::string& run_dir);

// The other files of a run directory. A secret (the token files) is written 0400 and owned by
// host root: bound into the sandbox idmapped, it is the sandbox root's file, readable by envd and
// the command server only. Any other file is written through a temporary file and a rename.
Status write_run_secret(const std::string& path, const std::string& value);
Status write_run_file(const std::string& path, const std::string& text);

}  // namespace abx::platform
