// abxd's teardown thread: what a DELETE (or a deadline's, an exit's kill) leaves to do after it
// answered. The kill's caller ends the sandbox's processes, its traffic and its record, and
// answers; the slow rest — reaping the init, removing the cgroups, unmounting the writable layer
// (its loop device detached), the state, run and checkpoint directories — runs here, on one
// worker thread ten nice levels below abxd's (runtime::lower_thread_priority), so that it never
// takes CPU from the creates that follow, and that starts a teardown only in a gap between
// creates: while a create holds the queue (hold()), and for `quiet` after the last one ended or
// after the teardown was queued (the client that deleted often creates next, right after the
// answer), the teardown waits, at most `max_defer` after it was queued. Nothing here is ever
// waited for by a create: the queue's lock is held only to push, pop and count holds.
//
// The queue is bounded: when `capacity` teardowns are waiting, push() refuses and the caller runs
// its teardown itself (a burst of deletes then slows down rather than piling up loop devices,
// disk and cgroups). A crash with teardowns pending leaves what the next abxd's start removes
// (runtime::cleanup_stale for the state directories, SandboxManager::start for the run and
// checkpoint directories); a stop finishes them (drain(), the destructor).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace abx::platform {

class TeardownQueue {
 public:
  using Clock = std::chrono::steady_clock;
  explicit TeardownQueue(std::size_t capacity = kDefaultCapacity,
                         std::chrono::milliseconds quiet = std::chrono::milliseconds(5),
                         std::chrono::milliseconds max_defer = std::chrono::seconds(1));
  ~TeardownQueue();  // runs every job still queued, then stops the worker
  TeardownQueue(const TeardownQueue&) = delete;
  TeardownQueue& operator=(const TeardownQueue&) = delete;

  static constexpr std::size_t kDefaultCapacity = 64;

  // Queues `job` (the teardown of sandbox `id`, named in the log if the job throws); false when
  // `capacity` jobs wait already: the caller runs it itself.
  bool push(std::string id, std::function<void()> job);
  // Blocks until every job pushed before the call has run (jobs start at once meanwhile).
  void drain();

  // A create in flight: teardowns do not start while one is held (see above).
  class Hold {
   public:
    Hold(Hold&& other) noexcept : q_(std::exchange(other.q_, nullptr)) {}
    Hold& operator=(Hold&&) = delete;
    ~Hold();

   private:
    friend class TeardownQueue;
    explicit Hold(TeardownQueue* q) : q_(q) {}
    TeardownQueue* q_;
  };
  Hold hold();
  // Jobs queued or running.
  std::size_t pending() const;

 private:
  struct Job {
    std::string id;
    std::function<void()> run;
    Clock::time_point queued;
  };
  // Under mu_: waits until the front job may start (a gap between creates, max_defer_, a stop
  // or a drain).
  void wait_for_gap(std::unique_lock<std::mutex>& lock);
  void loop();

  const std::size_t capacity_;
  const std::chrono::milliseconds quiet_, max_defer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // the worker: a job, or stop
  std::condition_variable idle_cv_;  // drain(): a job finished
  std::deque<Job> jobs_;
  std::size_t running_ = 0;  // 0 or 1
  std::uint64_t pushed_ = 0, done_ = 0;
  bool stop_ = false;
  std::size_t holds_ = 0, draining_ = 0;
  Clock::time_point last_release_{};
  std::thread worker_;
};

}  // namespace abx::platform
