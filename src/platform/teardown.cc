#include "teardown.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "abx/base/log.h"
#include "abx/runtime/process.h"

namespace abx::platform {

TeardownQueue::TeardownQueue(std::size_t capacity, std::chrono::milliseconds quiet,
                             std::chrono::milliseconds max_defer)
    : capacity_(capacity == 0 ? 1 : capacity),
      quiet_(quiet),
      max_defer_(max_defer),
      worker_([this] { loop(); }) {}

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
    jobs_.push_back(Job{std::move(id), std::move(job), Clock::now()});
    ++pushed_;
  }
  cv_.notify_one();
  return true;
}

void TeardownQueue::drain() {
  std::unique_lock lock(mu_);
  const std::uint64_t target = pushed_;
  ++draining_;
  cv_.notify_all();
  idle_cv_.wait(lock, [&] { return done_ >= target; });
  --draining_;
}

TeardownQueue::Hold TeardownQueue::hold() {
  std::lock_guard lock(mu_);
  ++holds_;
  return Hold(this);
}

TeardownQueue::Hold::~Hold() {
  if (q_ == nullptr) return;
  {
    std::lock_guard lock(q_->mu_);
    --q_->holds_;
    q_->last_release_ = Clock::now();
  }
  q_->cv_.notify_all();
}

void TeardownQueue::wait_for_gap(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (stop_ || draining_ > 0 || jobs_.empty()) return;
    const Clock::time_point now = Clock::now();
    const Clock::time_point due = jobs_.front().queued + max_defer_;
    if (now >= due) return;
    const Clock::time_point quiet_from = std::max(last_release_, jobs_.front().queued) + quiet_;
    if (holds_ == 0 && now >= quiet_from) return;
    cv_.wait_until(lock, holds_ > 0 ? due : std::min(due, quiet_from));
  }
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
    wait_for_gap(lock);
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
