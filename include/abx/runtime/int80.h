// abx::runtime::int80: a system call through the i386 entry point (int $0x80), for the probes
// that check a sandbox's seccomp filter covers that entry too (runtime_probe, boundary_probe).
#pragma once

#include <errno.h>
#include <setjmp.h>
#include <signal.h>

namespace abx::runtime {

namespace int80_detail {
inline sigjmp_buf fault;
inline void on_fault(int) { siglongjmp(fault, 1); }
}  // namespace int80_detail

// i386 system call `nr` with three arguments: its result, or -errno. A kernel without ia32
// emulation answers -ENOSYS; one that leaves the entry out of its IDT (some guests, e.g. PVM's,
// with ia32 emulation built in) raises a general protection fault, a SIGSEGV, which is caught
// here and answered as -ENOSYS too. Not thread-safe (it swaps the SIGSEGV handler meanwhile).
inline long int80(long nr, long a, long b, long c) {
  struct sigaction catch_fault = {}, old = {};
  catch_fault.sa_handler = int80_detail::on_fault;
  sigemptyset(&catch_fault.sa_mask);
  sigaction(SIGSEGV, &catch_fault, &old);
  volatile long ret = -ENOSYS;
  if (sigsetjmp(int80_detail::fault, 1) == 0) {
    long r;
    asm volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    ret = r;
  }
  sigaction(SIGSEGV, &old, nullptr);
  return ret;
}

}  // namespace abx::runtime
