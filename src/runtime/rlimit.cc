// Resource limits step: descriptors, file size, and no core dumps (a core of the init could
// land in the host's core_pattern handler).
#include <sys/resource.h>

#include "child.h"

namespace abx::runtime {

bool rlimit_child(const ChildPlan& p, ChildReport* r) {
  rlimit nofile{p.rlimit_nofile, p.rlimit_nofile};
  if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) return fail(r, "setrlimit RLIMIT_NOFILE");
  if (p.rlimit_fsize) {
    rlimit fsize{p.rlimit_fsize, p.rlimit_fsize};
    if (::setrlimit(RLIMIT_FSIZE, &fsize) != 0) return fail(r, "setrlimit RLIMIT_FSIZE");
  }
  rlimit core{0, 0};
  if (::setrlimit(RLIMIT_CORE, &core) != 0) return fail(r, "setrlimit RLIMIT_CORE");
  return true;
}

}  // namespace abx::runtime
