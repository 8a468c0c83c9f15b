#include "teardown.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace abx::platform {
namespace {

TEST(TeardownQueue, RunsJobsInOrderAndDrainWaitsForThem) {
  TeardownQueue q;
  std::vector<int> ran;  // written by the worker only; read after drain()
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(q.push("sb" + std::to_string(i), [&ran, i] { ran.push_back(i); }));
  q.drain();
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(q.pending(), 0u);
  q.drain();  // nothing queued: returns at once
}

// A full queue refuses (its caller then tears down itself) instead of growing or blocking.
TEST(TeardownQueue, AFullQueueRefusesAndTakesJobsAgainOnceItMoves) {
  TeardownQueue q(2);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  ASSERT_TRUE(q.push("running", [&started, released] {
    started.set_value();
    released.wait();
  }));
  started.get_future().wait();  // the worker holds the first; two more may wait
  std::atomic<int> ran{0};
  EXPECT_TRUE(q.push("a", [&ran] { ++ran; }));
  EXPECT_TRUE(q.push("b", [&ran] { ++ran; }));
  EXPECT_FALSE(q.push("c", [&ran] { ++ran; }));
  EXPECT_EQ(q.pending(), 3u);
  release.set_value();
  q.drain();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_TRUE(q.push("c", [&ran] { ++ran; }));
  q.drain();
  EXPECT_EQ(ran.load(), 3);
}

// A stopping abxd finishes what is queued: none of it is dropped.
TEST(TeardownQueue, TheDestructorRunsWhatIsStillQueued) {
  std::atomic<int> ran{0};
  {
    TeardownQueue q;
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    ASSERT_TRUE(q.push("slow", [released, &ran] {
      released.wait();
      ++ran;
    }));
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.push("x", [&ran] { ++ran; }));
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 4);
}

// A job that throws is logged and the worker goes on with the next.
TEST(TeardownQueue, AThrowingJobDoesNotStopTheWorker) {
  TeardownQueue q;
  bool after = false;
  ASSERT_TRUE(q.push("bad", [] { throw std::runtime_error("boom"); }));
  ASSERT_TRUE(q.push("good", [&after] { after = true; }));
  q.drain();
  EXPECT_TRUE(after);
}

// A create in flight holds teardowns back: none starts while it is held, and the queued ones
// run once it ends (or, held too long, after max_defer all the same).
TEST(TeardownQueue, AHeldQueueStartsNothingUntilReleasedOrMaxDefer) {
  TeardownQueue q(8, std::chrono::milliseconds(1), std::chrono::hours(1));
  std::atomic<int> ran{0};
  {
    auto held = q.hold();
    ASSERT_TRUE(q.push("a", [&ran] { ++ran; }));
    ASSERT_TRUE(q.push("b", [&ran] { ++ran; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(ran.load(), 0);      // held: nothing started (max_defer is an hour)
    auto moved = std::move(held);  // a moved hold still holds
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(ran.load(), 0);
  }
  std::promise<void> done;
  ASSERT_TRUE(q.push("c", [&done] { done.set_value(); }));
  done.get_future().wait();  // released: all three ran, in order
  EXPECT_EQ(ran.load(), 2);

  // drain() does not wait for the holder: the jobs it waits for start at once.
  auto held = q.hold();
  ASSERT_TRUE(q.push("d", [&ran] { ++ran; }));
  q.drain();
  EXPECT_EQ(ran.load(), 3);

  TeardownQueue soon(8, std::chrono::milliseconds(1), std::chrono::milliseconds(10));
  auto held_long = soon.hold();
  std::promise<void> ran_anyway;
  ASSERT_TRUE(soon.push("e", [&ran_anyway] { ran_anyway.set_value(); }));
  ran_anyway.get_future().wait();  // past max_defer it runs though still held
}

// The worker runs below the threads that push (the creates): 10 nice levels lower, at most 19.
TEST(TeardownQueue, TheWorkerRunsAtALowerPriority) {
  errno = 0;
  const int mine = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  ASSERT_EQ(errno, 0);
  TeardownQueue q;
  int worker = -100;
  ASSERT_TRUE(q.push(
      "nice", [&worker] { worker = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())); }));
  q.drain();
  EXPECT_EQ(worker, std::min(mine + 10, 19));
}

}  // namespace
}  // namespace abx::platform
