// UTS namespace step: the hostname is the sandbox id (the namespace was created by clone).
#include <string.h>
#include <unistd.h>

#include "child.h"

namespace abx::runtime {

bool uts_child(const ChildPlan& p, ChildReport* r) {
  if (::sethostname(p.hostname, ::strlen(p.hostname)) != 0) return fail(r, "sethostname");
  return true;
}

}  // namespace abx::runtime
