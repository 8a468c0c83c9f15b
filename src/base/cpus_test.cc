#include "abx/base/cpus.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace abx {
namespace {

TEST(Cpus, AtLeastOneAndNoMoreThanTheMachineHas) {
  EXPECT_GE(usable_cpus(), 1u);
  EXPECT_LE(usable_cpus(), std::max(1u, std::thread::hardware_concurrency()));
}

// A thread pinned to one CPU (taskset, a cpuset) counts one, whatever the machine has: the http
// servers size their I/O threads by it (two I/O threads on one pinned CPU gave the command server
// 3x its saturated p99, docs/command-server.md).
TEST(Cpus, FollowTheCallingThreadsAffinity) {
  cpu_set_t all;
  CPU_ZERO(&all);
  ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  unsigned pinned = 0;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0) return;
    pinned = usable_cpus();
  });
  t.join();
  EXPECT_EQ(pinned, 1u);
  EXPECT_EQ(usable_cpus(), static_cast<unsigned>(CPU_COUNT(&all)));  // this thread unchanged
}

}  // namespace
}  // namespace abx
