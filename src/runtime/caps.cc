// Capabilities step: shrink the bounding set, clear ambient and inheritable (catalogue E8).
//
// The init stays uid 0, and an exec by uid 0 gets permitted = bounding set, so the bounding set
// is what the sandbox really keeps; inheritable must be empty or an exec of a file with
// inheritable file capabilities would lift them (crun CVE-2022-27650).
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "abx/runtime/sandbox.h"
#include "child.h"

namespace abx::runtime {

const std::uint64_t kKeptCapabilities =
    (1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) | (1ull << CAP_FSETID) |
    (1ull << CAP_KILL) | (1ull << CAP_SETGID) | (1ull << CAP_SETUID) | (1ull << CAP_SETPCAP) |
    (1ull << CAP_NET_BIND_SERVICE) | (1ull << CAP_SYS_CHROOT) | (1ull << CAP_AUDIT_WRITE);

bool caps_child(const ChildPlan& p, ChildReport* r) {
  // Bounding set first: dropping from it needs CAP_SETPCAP, which we still hold.
  for (int cap = 0; cap <= p.cap_last_cap; ++cap) {
    if (p.keep_caps & (1ull << cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return fail(r, "prctl PR_CAPBSET_DROP");
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return fail(r, "prctl PR_CAP_AMBIENT_CLEAR_ALL");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; ++i) {
    auto word = static_cast<std::uint32_t>(p.keep_caps >> (32 * i));
    data[i].effective = word;
    data[i].permitted = word;
    data[i].inheritable = 0;
  }
  if (::syscall(SYS_capset, &hdr, data) != 0) return fail(r, "capset");
  return true;
}

}  // namespace abx::runtime
