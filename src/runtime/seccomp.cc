#include "seccomp.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <mutex>

#include "abx/base/fd.h"
#include "abx/base/try.h"
#include "child.h"
#include "sys.h"

namespace abx::runtime {
namespace {

constexpr const char* kDenied[] = {
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "setns",
    "bpf",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "lookup_dcookie",
    "quotactl",
    "nfsservctl",
    "vm86",
    "vm86old",
    "uselib",
    "iopl",
    "ioperm",
};

Result<std::vector<sock_filter>> build() {
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW),
                                                       seccomp_release);
  if (!ctx) return internal_error("seccomp_init failed");
  for (uint32_t arch : {SCMP_ARCH_X86, SCMP_ARCH_X32}) {
    int rc = seccomp_arch_add(ctx.get(), arch);
    if (rc != 0 && rc != -EEXIST) return os::errno_error("seccomp_arch_add", -rc);
  }
  const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
  auto rule = [&](const char* name, uint32_t action, unsigned count,
                  const scmp_arg_cmp* cmp) -> Status {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return {};  // unknown to every arch we filter: nothing to deny
    int rc = seccomp_rule_add_array(ctx.get(), action, nr, count, cmp);
    if (rc != 0) return os::errno_error(std::string("seccomp_rule_add ") + name, -rc);
    return {};
  };
  for (const char* name : kDenied) ABX_TRY(rule(name, deny, 0, nullptr));

  const scmp_arg_cmp newuser = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
  ABX_TRY(rule("clone", deny, 1, &newuser));
  ABX_TRY(rule("unshare", deny, 1, &newuser));
  ABX_TRY(rule("clone3", SCMP_ACT_ERRNO(ENOSYS), 0, nullptr));
  // AIO contexts come from one machine-wide pool (fs.aio-max-nr) with no per-user, per-namespace
  // or per-cgroup limit: one sandbox could take all of it from the host and every other sandbox
  // (io_setup's EAGAIN). ENOSYS, not EPERM: libaio users (databases) then fall back to threads,
  // as on a kernel built without AIO; glibc's POSIX aio never used it.
  ABX_TRY(rule("io_setup", SCMP_ACT_ERRNO(ENOSYS), 0, nullptr));
  for (unsigned long req :
       {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    const scmp_arg_cmp cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, req);
    ABX_TRY(rule("ioctl", deny, 1, &cmp));
  }

  // libseccomp 2.5 exports only to a descriptor.
  UniqueFd mem(::memfd_create("abx-seccomp", MFD_CLOEXEC));
  if (!mem) return os::errno_error("memfd_create", errno);
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc != 0)
    return os::errno_error("seccomp_export_bpf", -rc);
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0)
    return internal_error("seccomp_export_bpf produced " + std::to_string(size) + " bytes");
  std::vector<sock_filter> prog(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), prog.data(), static_cast<size_t>(size), 0) != size)
    return os::errno_error("pread seccomp program", errno);
  return prog;
}

}  // namespace

Result<const std::vector<sock_filter>*> seccomp_program() {
  static std::once_flag once;
  static std::vector<sock_filter> prog;
  static Error error{ErrorCode::kInternal, ""};
  static bool ok = false;
  std::call_once(once, [] {
    auto built = build();
    if (built) {
      prog = std::move(built).value();
      ok = true;
    } else {
      error = built.error();
    }
  });
  if (!ok) return error;
  return &prog;
}

bool seccomp_child(const ChildPlan& p, ChildReport* r) {
  // With no_new_privs set (no user namespace) or CAP_SYS_ADMIN still held (child_main's order).
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, p.seccomp) != 0)
    return fail(r, "seccomp SECCOMP_SET_MODE_FILTER");
  return true;
}

}  // namespace abx::runtime
