#include "abx/runtime/layer.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "sys.h"

namespace abx::runtime {

Status make_whiteout(const std::string& path) {
  if (::mknod(path.c_str(), S_IFCHR | 0000, makedev(0, 0)) != 0)
    return os::errno_error("mknod whiteout " + path, errno);
  return {};
}

Status make_opaque(const std::string& dir) {
  if (::lsetxattr(dir.c_str(), "trusted.overlay.opaque", "y", 1, 0) != 0)
    return os::errno_error("setxattr trusted.overlay.opaque " + dir, errno);
  return {};
}

}  // namespace abx::runtime
