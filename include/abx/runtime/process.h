// Process identity across pid reuse: a pid names one process only together with its start time.
#pragma once

#include <sys/types.h>

namespace abx::runtime {

// Start time of `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot), 0 if the process
// is gone. Stored beside a pid, it lets a later reader (adopt(), cleanup_stale(), abxd's
// records) tell the original process from a newer one that reused the pid.
unsigned long long process_start_time(pid_t pid);

// Puts the calling thread `levels` nice levels below its current priority (at most 19, never
// above it; best effort): background work that runs beside the creates it serves and must not
// slow them (the writable-layer and sandbox pools' refills, abxd's teardown of deleted
// sandboxes).
void lower_thread_priority(int levels);

// Gives process `pid` the daemon's own priority (its main thread's nice value), whatever the
// calling thread's: a process inherits the nice value of the thread that cloned it, so a sandbox
// booted ahead by a background thread (lower_thread_priority) would otherwise run every process
// it ever starts that many levels below the sandboxes a create booted. Best effort.
void match_daemon_priority(pid_t pid);

}  // namespace abx::runtime
