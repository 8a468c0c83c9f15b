// How many CPUs this process can use, for sizing its thread pools.
#pragma once

namespace abx {

// The CPUs in the calling thread's affinity mask (taskset, a cpuset), at least 1. A CPU quota
// (cgroup cpu.max) is not counted: a sandbox cannot read its own.
unsigned usable_cpus();

}  // namespace abx
