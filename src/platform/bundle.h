// The /opt/abx bundle (abx-envd, abx-server, their glibc) as sandboxes see it, one version per
// bundle abxd was started with, kept for as long as something needs it.
//
// A sandbox binds the bundle read-only, and its processes map the bundle's files. A paused
// sandbox's checkpoint names them, and CRIU restores only onto the very same files (it refuses
// one whose size changed). The bundle abxd was started with may be replaced in the meantime — an
// upgrade of abx, `scripts/bundle.sh` after a rebuild (both put new files in place of the old
// ones) — so abxd binds a pinned copy instead: <home>/bundles/<version>/, made of hard links to
// the bundle's files (a copy where the home is on another filesystem), where <version> names
// the files (path, type, permissions, size, modification time). The sandbox's saved config
// (sandbox_config.h) names the version it was created with; a resume, a fork and a snapshot's
// new sandboxes use that one. prune_bundles() removes the versions nothing names any more.
#pragma once

#include <set>
#include <string>

#include "abx/base/error.h"

namespace abx::platform {

// Where sandboxes see it.
inline constexpr const char* kBundleInside = "/opt/abx";

// Whether `dir` is a bundle (it has bin/abx-envd); "" is none.
bool is_bundle(const std::string& dir);

// <home>/bundles/<version> for the bundle at `bundle` (made if missing: in a temporary
// directory, then renamed). Errors name the file that could not be linked or copied.
Result<std::string> pin_bundle(const std::string& home, const std::string& bundle);

// Removes every <home>/bundles/<version> whose path is not in `keep` (and leftovers of a pin
// cut short). Returns how many versions went; failures are skipped (the next start retries).
int prune_bundles(const std::string& home, const std::set<std::string>& keep);

}  // namespace abx::platform
