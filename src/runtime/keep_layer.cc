// keep_layer() and release_layer(): the filesystem-only pause's two steps (sandbox.h).
#include <unistd.h>

#include <string>

#include "abx/base/try.h"
#include "abx/runtime/sandbox.h"
#include "disk.h"

namespace abx::runtime {

Status keep_layer(Sandbox& sb, const std::string& image) {
  if (sb.upper_dir().empty())
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox " + sb.id() +
                     " has no writable layer to keep (rootfs: host: its files live in a tmpfs of "
                     "its own mount namespace)");
  if (sb.init_exited())
    return Error(ErrorCode::kFailedPrecondition, "sandbox " + sb.id() + " is not running");
  // Frozen first: the layer synced and linked is the one the processes leave (with a copy,
  // where no link is possible, nothing may write to it meanwhile).
  ABX_TRY(sb.cgroups().freeze(true));
  const std::string dir = sb.state_path();
  Status s = sync_filesystem(dir + "/" + kRwMount);
  if (s) s = link_or_copy(dir + "/" + kRwImage, image);
  if (!s) {
    ::unlink(image.c_str());  // a copy cut short
    (void)sb.cgroups().freeze(false);
    return s;
  }
  return {};
}

Status release_layer(Sandbox& sb, const std::string& image) {
  // Killed while frozen (cgroup.kill and SIGKILL reach frozen tasks): nothing runs again.
  ABX_TRY(sb.destroy());
  if (!wait_loop_detached(image))
    return Error(ErrorCode::kDeadlineExceeded,
                 "the kept writable layer " + image + " is still loop-attached after 5 s");
  return {};
}

}  // namespace abx::runtime
