// The sandbox's seccomp filter, compiled once in the parent (libseccomp allocates, so it never
// runs in the child) and installed by the child as its last step before exec.
//
// Policy: default allow, with a deny list answering EPERM, on x86_64, x32 and i386 (the arch is
// checked; the same numbers through `int 0x80` or with the x32 bit hit the same rules):
//  - new user namespaces: clone/unshare with CLONE_NEWUSER; clone3 gets ENOSYS (its flags sit in
//    memory BPF cannot read; glibc then falls back to clone, which is checked);
//  - mounts: mount, umount2, pivot_root, move_mount, open_tree, fsopen, fsconfig, fsmount, fspick,
//    mount_setattr; setns;
//  - kernel attack surface: bpf, io_uring_setup/enter/register, userfaultfd, perf_event_open,
//    keyctl, add_key, request_key, open_by_handle_at, name_to_handle_at;
//  - whole-machine operations: kexec_load, kexec_file_load, init_module, finit_module,
//    delete_module, reboot, swapon, swapoff, acct, settimeofday, clock_settime, adjtimex;
//  - ptrace, process_vm_readv/writev: denied outright (simpler to audit than "non-children
//    only"; envd does not need them, and debuggers inside a sandbox are not a goal yet);
//  - ioctl TIOCSTI and TIOCLINUX, compared on the low 32 bits of the request only (the kernel
//    truncates it to int; CVE-2019-10063 passed TIOCSTI | 1 << 32 through a 64-bit compare).
#pragma once

#include <linux/filter.h>

#include <vector>

#include "abx/base/error.h"

namespace abx::runtime {

// The compiled filter; built on first call and cached (the policy is constant).
Result<const std::vector<sock_filter>*> seccomp_program();

}  // namespace abx::runtime
