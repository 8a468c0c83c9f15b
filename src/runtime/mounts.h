// Parent side of the sandbox's filesystem: the root overlay and the binds, built by the owner
// (in the host's mount and user namespaces) as detached mounts and handed to the init, which
// only attaches them (mnt.cc).
//
// Why the owner builds them: with a user namespace, only a process privileged over the layers'
// filesystems may idmap them, and an overlay mounted there keeps reading overlayfs's trusted.*
// xattrs (the opaque directories of image layers), which an overlay mounted inside the
// sandbox's user namespace could not. Without a user namespace the same path is taken, minus
// the idmapping, so there is one way to build a root.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/runtime/sandbox.h"

namespace abx::runtime {

struct Idmap {
  int userns_fd = -1;       // the sandbox's user namespace; -1: no idmapping
  std::uint32_t first = 0;  // host id of sandbox root
};

// A detached recursive clone of the tree at `path` with the mount attributes `attr_set`
// (MOUNT_ATTR_*), idmapped with `idmap` when it has a user namespace.
Result<UniqueFd> clone_tree(const std::string& path, std::uint64_t attr_set, const Idmap& idmap);

// The root overlay of `config`'s layers over `<dir>/rw/{upper,work}` (the mounted writable
// layer), as a detached mount. With an idmap, every layer is idmapped and the overlay's
// mounter credentials are the sandbox root's (see ScopedThreadFsIds).
Result<UniqueFd> make_root_overlay(const SandboxConfig& config, const std::string& dir,
                                   const Idmap& idmap);

// One detached mount per bind of `config`, in order: a recursive clone of the source,
// read-only + nosuid + nodev unless writable, idmapped with `idmap`.
Result<std::vector<UniqueFd>> make_bind_mounts(const SandboxConfig& config, const Idmap& idmap);

}  // namespace abx::runtime
