#include "teardown.h"

#include <exception>
#include <utility>

#include "abx/base/log.h"
#include "abx/runtime/process.h"

namespace abx::platform {

TeardownQueue::TeardownQueue(std::size_t capacity)
    : capacity_(capacity == 0 ? 1 : capacity), worker_([this] { loop(); }) {}

TeardownQueue::~TeardownQueue() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool TeardownQueue::push(std::string id, std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || jobs_.size() >= capacity_) return false;
    jobs_.push_back(Job{std::move(id), std::move(job)});
    ++pushed_;
  }
  cv_.notify_one();
  return true;
}

void TeardownQueue::drain() {
  std::unique_lock lock(mu_);
  const std::uint64_t target = pushed_;
  idle_cv_.wait(lock, [&] { return done_ >= target; });
}

std::size_t TeardownQueue::pending() const {
  std::lock_guard lock(mu_);
  return jobs_.size() + running_;
}

void TeardownQueue::loop() {
  // Below the creates (10 nice levels under abxd's): a teardown runs beside the create that
  // follows its DELETE and must not slow it.
  runtime::lower_thread_priority(10);
  std::unique_lock lock(mu_);
  for (;;) {
    // A stop still runs what is queued: a stopping abxd leaves no half-removed sandbox.
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    running_ = 1;
    lock.unlock();
    try {
      job.run();
    } catch (const std::exception& e) {
      Logger("teardown", job.id).error(std::string("teardown failed: ") + e.what());
    }
    lock.lock();
    running_ = 0;
    ++done_;
    idle_cv_.notify_all();
  }
}

}  // namespace abx::platform
