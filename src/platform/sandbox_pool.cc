// The sandbox pool (sandbox_pool.h): per template a queue of ready sandboxes, and one refill
// thread that boots the missing ones, one at a time, and lets templates left idle go.
#include "sandbox_pool.h"

#include <utility>
#include <vector>

#include "abx/base/failure_run.h"
#include "abx/base/log.h"
#include "abx/runtime/process.h"

namespace abx::platform {

using Clock = std::chrono::steady_clock;

SandboxPool::SandboxPool(Options options, Boot boot, Discard discard, Room room)
    : opt_(options),
      boot_(std::move(boot)),
      discard_(std::move(discard)),
      room_(std::move(room)),
      thread_([this] { run(); }) {}

SandboxPool::~SandboxPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& [id, stock] : stock_) {
    for (auto& b : stock.ready) discard_(b);
  }
}

std::optional<BootedSandbox> SandboxPool::take(
    const std::string& template_id, const std::function<bool(const BootedSandbox&)>& usable) {
  std::vector<BootedSandbox> stale;
  std::optional<BootedSandbox> out;
  {
    std::unique_lock lock(mu_);
    auto it = stock_.find(template_id);
    if (it == stock_.end()) {
      if (stock_.size() >= opt_.max_templates) {
        // The least recently asked for makes room.
        auto oldest = stock_.begin();
        for (auto s = stock_.begin(); s != stock_.end(); ++s) {
          if (s->second.asked < oldest->second.asked) oldest = s;
        }
        for (auto& b : oldest->second.ready) stale.push_back(std::move(b));
        stock_.erase(oldest);
      }
      it = stock_.emplace(template_id, Stock{}).first;
    }
    it->second.asked = Clock::now();
    bool waited = false;
    for (;;) {
      auto& ready = it->second.ready;
      while (!ready.empty() && !out) {
        BootedSandbox b = std::move(ready.front());
        ready.pop_front();
        if (usable(b)) {
          out = std::move(b);
        } else {
          stale.push_back(std::move(b));
        }
      }
      // The one being booted for this template is nearer to ready than a boot of our own; one
      // create waits for it, any other boots its own (the refill boots one at a time).
      if (out || booting_ != template_id || stop_ || (waiting_ && !waited)) break;
      waited = waiting_ = true;
      cv_.wait(lock);
      waiting_ = false;
      it = stock_.find(template_id);
      if (it == stock_.end()) break;  // pushed out meanwhile
    }
    if (out) {
      ++(waited ? stats_.waits : stats_.hits);
    } else {
      ++stats_.misses;
    }
    ++handing_;
    stats_.discarded += stale.size();
  }
  cv_.notify_all();  // the refill: one fewer ready, or a template newly asked for
  for (auto& b : stale) discard_(b);
  return out;
}

void SandboxPool::ended(const std::string& template_id, bool created) {
  {
    std::lock_guard lock(mu_);
    if (handing_ > 0) --handing_;
    if (auto it = stock_.find(template_id); created && it != stock_.end()) it->second.proven = true;
  }
  cv_.notify_all();
}

void SandboxPool::flush() {
  std::vector<BootedSandbox> drop;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, stock] : stock_) {
      for (auto& b : stock.ready) drop.push_back(std::move(b));
      stock.ready.clear();
    }
    stats_.discarded += drop.size();
  }
  cv_.notify_all();
  for (auto& b : drop) discard_(b);
}

SandboxPool::Stats SandboxPool::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.ready = 0;
  for (const auto& [id, stock] : stock_) s.ready += stock.ready.size();
  s.booting = booting_.empty() ? 0 : 1;
  return s;
}

std::optional<std::string> SandboxPool::wanted() const {
  std::optional<std::string> best;
  std::size_t fewest = opt_.per_template;
  for (const auto& [id, stock] : stock_) {
    if (stock.proven && stock.ready.size() < fewest) {
      fewest = stock.ready.size();
      best = id;
    }
  }
  return best;
}

void SandboxPool::run() {
  // Below the creates it serves (as runtime's layer pool): a refill runs beside the create that
  // took the sandbox.
  runtime::lower_thread_priority(10);
  const Logger logger("sandbox_pool");
  FailureRun failures(logger, opt_.tick, std::chrono::minutes(1));
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Templates nobody asked for in opt_.idle leave, with their sandboxes.
    std::vector<BootedSandbox> drop;
    const auto now = Clock::now();
    for (auto it = stock_.begin(); it != stock_.end();) {
      if (now - it->second.asked < opt_.idle) {
        ++it;
        continue;
      }
      for (auto& b : it->second.ready) drop.push_back(std::move(b));
      it = stock_.erase(it);
    }
    stats_.discarded += drop.size();
    if (!drop.empty()) {
      lock.unlock();
      for (auto& b : drop) discard_(b);
      lock.lock();
      continue;
    }
    std::optional<std::string> tmpl = wanted();
    if (tmpl) {
      std::size_t pooled = 0;
      for (const auto& [id, stock] : stock_) pooled += stock.ready.size();
      lock.unlock();
      const bool room = room_(pooled);
      lock.lock();
      if (!room) tmpl.reset();
    }
    if (!tmpl) {
      cv_.wait_for(lock, opt_.tick);
      continue;
    }
    // Not beside a create between its take() and ended() (bounded: a create that never calls
    // ended() holds nothing for long, and past the hold none is waited for).
    if (handing_ > 0) cv_.wait_for(lock, opt_.hold, [&] { return stop_ || handing_ == 0; });
    if (stop_) continue;
    handing_ = 0;
    booting_ = *tmpl;
    lock.unlock();
    Result<BootedSandbox> made = boot_(*tmpl);
    lock.lock();
    booting_.clear();
    if (!made) {
      ++stats_.failed;
      cv_.notify_all();  // a create waiting for it boots its own
      cv_.wait_for(lock,
                   failures.failed("template '" + *tmpl +
                                   "': no sandbox booted ahead (creates boot theirs): " +
                                   made.error().message()),
                   [&] { return stop_; });
      continue;
    }
    failures.succeeded("sandboxes booted ahead again");
    ++stats_.booted;
    auto it = stock_.find(*tmpl);
    if (it != stock_.end() && !stop_) {
      it->second.ready.push_back(std::move(made).value());
      cv_.notify_all();
    } else {
      // Its template left the pool while it booted.
      ++stats_.discarded;
      lock.unlock();
      discard_(*made);
      lock.lock();
    }
  }
}

}  // namespace abx::platform
