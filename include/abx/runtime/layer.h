// Overlay-format layer helpers: the two on-disk markers overlayfs reads in a lower layer, for
// whoever writes layers (image extraction, tests). A layer written with them can be given to
// SandboxConfig::lower_dirs as is.
#pragma once

#include <string>

#include "abx/base/error.h"

namespace abx::runtime {

// Creates the overlay whiteout `path` (a character device 0:0): in a stack of layers, hides the
// entry of that name in every layer below. Needs CAP_MKNOD. Errors carry the errno.
Status make_whiteout(const std::string& path);

// Marks the existing directory `dir` opaque (xattr trusted.overlay.opaque = "y"): the layers
// below contribute nothing to it. Needs CAP_SYS_ADMIN (trusted.* xattrs).
Status make_opaque(const std::string& dir);

}  // namespace abx::runtime
