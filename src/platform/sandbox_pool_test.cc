// The sandbox pool's bookkeeping with boots that make no sandbox (BootedSandbox without one):
// what is handed out, waited for, refused as stale, refilled, bounded and let go. abxd's e2e
// test (tests/e2e/abxd_e2e_test.cc, SandboxPool*) runs it with real sandboxes.
#include "sandbox_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace abx::platform {
namespace {

using namespace std::chrono_literals;

// Boots that count what they made and discarded; a boot may be held at a gate.
class FakeBoots {
 public:
  SandboxPool::Boot boot() {
    return [this](const std::string& tmpl) -> Result<BootedSandbox> {
      {
        std::unique_lock lock(mu_);
        ++started_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return open_; });
        if (fail_) return Error(ErrorCode::kUnavailable, "no boot today");
      }
      BootedSandbox b;
      b.id = tmpl + "-" + std::to_string(++seq_);
      b.image_digest = digest_;
      return b;
    };
  }
  SandboxPool::Discard discard() {
    return [this](BootedSandbox& b) {
      std::lock_guard lock(mu_);
      discarded_.insert(b.id);
    };
  }
  void set_open(bool open) {
    std::lock_guard lock(mu_);
    open_ = open;
    cv_.notify_all();
  }
  void set_fail(bool fail) {
    std::lock_guard lock(mu_);
    fail_ = fail;
  }
  void set_digest(std::string d) {
    std::lock_guard lock(mu_);
    digest_ = std::move(d);
  }
  int started() {
    std::lock_guard lock(mu_);
    return started_;
  }
  // Waits (bounded) until `n` boots have started.
  bool started_at_least(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return started_ >= n; });
  }
  std::set<std::string> discarded() {
    std::lock_guard lock(mu_);
    return discarded_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  bool fail_ = false;
  int started_ = 0;
  std::atomic<int> seq_{0};
  std::string digest_ = "d1";
  std::set<std::string> discarded_;
};

bool any(const BootedSandbox&) { return true; }

// Polls `pred` for up to 10 s.
bool eventually(const std::function<bool()>& pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

// A create as SandboxManager::create makes it: take(), then ended() (it recorded a sandbox).
std::optional<BootedSandbox> create(SandboxPool& pool, const std::string& tmpl,
                                    const std::function<bool(const BootedSandbox&)>& usable = any) {
  auto b = pool.take(tmpl, usable);
  pool.ended(tmpl, true);
  return b;
}

SandboxPool::Options fast(std::size_t per_template) {
  SandboxPool::Options o;
  o.per_template = per_template;
  o.tick = 20ms;
  return o;
}

TEST(SandboxPool, FirstTakeMissesThenTheTemplateIsKeptStockedAndEachSandboxIsHandedOutOnce) {
  FakeBoots f;
  SandboxPool pool(fast(2), f.boot(), f.discard(), [](std::size_t) { return true; });
  EXPECT_FALSE(create(pool, "base").has_value());  // nothing asked for it before
  ASSERT_TRUE(eventually([&] { return pool.stats().ready == 2; }));
  std::set<std::string> seen;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(eventually([&] { return pool.stats().ready >= 1; })) << i;
    auto b = create(pool, "base");
    ASSERT_TRUE(b.has_value()) << i;
    EXPECT_TRUE(b->id.starts_with("base-"));
    EXPECT_TRUE(seen.insert(b->id).second) << b->id << " handed out twice";
  }
  const auto s = pool.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 6u);
  EXPECT_TRUE(f.discarded().empty());
}

TEST(SandboxPool, ATakeWaitsForTheSandboxBeingBootedForItsTemplate) {
  FakeBoots f;
  SandboxPool pool(fast(1), f.boot(), f.discard(), [](std::size_t) { return true; });
  f.set_open(false);
  EXPECT_FALSE(create(pool, "base").has_value());
  ASSERT_TRUE(f.started_at_least(1));  // the refill is in the boot, held
  std::optional<BootedSandbox> got;
  std::thread taker([&] { got = create(pool, "base"); });
  std::this_thread::sleep_for(50ms);
  // One create waits for that boot; a second one boots its own at once rather than queue
  // behind the refill.
  EXPECT_FALSE(create(pool, "base").has_value());
  EXPECT_EQ(pool.stats().misses, 2u);
  f.set_open(true);
  taker.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(pool.stats().waits, 1u);
}

TEST(SandboxPool, AFailedBootSendsTheWaitingCreateToBootItsOwn) {
  FakeBoots f;
  SandboxPool pool(fast(1), f.boot(), f.discard(), [](std::size_t) { return true; });
  f.set_open(false);
  f.set_fail(true);
  EXPECT_FALSE(create(pool, "base").has_value());
  ASSERT_TRUE(f.started_at_least(1));
  std::optional<BootedSandbox> got;
  std::atomic<bool> done{false};
  std::thread taker([&] {
    got = create(pool, "base");
    done = true;
  });
  std::this_thread::sleep_for(50ms);
  f.set_open(true);
  taker.join();
  EXPECT_FALSE(got.has_value());
  EXPECT_GE(pool.stats().failed, 1u);
  f.set_fail(false);  // after the backoff it boots again
  EXPECT_TRUE(eventually([&] { return pool.stats().ready == 1; }));
}

TEST(SandboxPool, NoBootStartsWhileACreateIsStillRecordingWhatItTook) {
  FakeBoots f;
  SandboxPool::Options o = fast(1);
  o.hold = std::chrono::seconds(30);
  SandboxPool pool(o, f.boot(), f.discard(), [](std::size_t) { return true; });
  (void)create(pool, "base");
  ASSERT_TRUE(eventually([&] { return pool.stats().ready == 1; }));
  ASSERT_TRUE(pool.take("base", any).has_value());
  std::this_thread::sleep_for(200ms);  // ten ticks: the refill holds back
  EXPECT_EQ(f.started(), 1);
  pool.ended("base", true);
  EXPECT_TRUE(eventually([&] { return pool.stats().ready == 1; }));
  EXPECT_EQ(f.started(), 2);
}

TEST(SandboxPool, AStaleSandboxIsDestroyedNeverHandedOut) {
  FakeBoots f;
  SandboxPool pool(fast(2), f.boot(), f.discard(), [](std::size_t) { return true; });
  (void)create(pool, "base");
  ASSERT_TRUE(eventually([&] { return pool.stats().ready == 2; }));
  f.set_digest("d2");  // the template's image changed: the two ready ones are stale
  auto fresh = [](const BootedSandbox& b) { return b.image_digest == "d2"; };
  // Both stale ones go; a new one is booted (and waited for) or the create boots its own.
  auto b = create(pool, "base", fresh);
  if (b) {
    EXPECT_EQ(b->image_digest, "d2");
  }
  EXPECT_EQ(f.discarded().size(), 2u);
  ASSERT_TRUE(eventually([&] { return pool.stats().ready == 2; }));
  auto c = create(pool, "base", fresh);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->image_digest, "d2");
}

TEST(SandboxPool, FlushDestroysTheReadyOnesAndTheRefillBootsNewOnes) {
  FakeBoots f;
  SandboxPool pool(fast(2), f.boot(), f.discard(), [](std::size_t) { return true; });
  (void)create(pool, "base");
  ASSERT_TRUE(eventually([&] { return pool.stats().ready == 2; }));
  pool.flush();
  EXPECT_EQ(f.discarded().size(), 2u);
  EXPECT_TRUE(eventually([&] { return pool.stats().ready == 2; }));
}

TEST(SandboxPool, NoBootWithoutRoomAndTheDestructorDestroysWhatIsReady) {
  FakeBoots f;
  std::atomic<std::size_t> limit{1};
  std::set<std::string> ready_ids;
  {
    SandboxPool pool(fast(3), f.boot(), f.discard(),
                     [&](std::size_t pooled) { return pooled < limit; });
    (void)create(pool, "base");
    ASSERT_TRUE(eventually([&] { return pool.stats().ready == 1; }));
    std::this_thread::sleep_for(100ms);  // several ticks: still one, the room says so
    EXPECT_EQ(pool.stats().ready, 1u);
    limit = 3;
    ASSERT_TRUE(eventually([&] { return pool.stats().ready == 3; }));
  }
  EXPECT_EQ(f.discarded().size(), 3u);
}

TEST(SandboxPool, AnIdleTemplateLeavesAndTheLeastRecentlyAskedMakesRoomForANinth) {
  FakeBoots f;
  SandboxPool::Options o = fast(1);
  o.idle = 300ms;
  o.max_templates = 2;
  SandboxPool pool(o, f.boot(), f.discard(), [](std::size_t) { return true; });
  (void)create(pool, "a");
  ASSERT_TRUE(eventually([&] { return pool.stats().ready == 1; }));
  EXPECT_TRUE(eventually([&] { return f.discarded().size() == 1; }));  // idle: "a" left
  EXPECT_EQ(pool.stats().ready, 0u);
  o.idle = std::chrono::minutes(5);
  SandboxPool bounded(o, f.boot(), f.discard(), [](std::size_t) { return true; });
  (void)create(bounded, "b");
  (void)create(bounded, "c");
  ASSERT_TRUE(eventually([&] { return bounded.stats().ready == 2; }));
  (void)create(bounded, "d");  // "b" was asked for longest ago
  std::size_t of_b = 0, of_c = 0;
  for (const auto& id : f.discarded()) {
    of_b += id.starts_with("b-");
    of_c += id.starts_with("c-");
  }
  EXPECT_EQ(of_b, 1u);
  EXPECT_EQ(of_c, 0u);
  EXPECT_TRUE(eventually([&] { return bounded.stats().ready == 2; }));
  auto c = create(bounded, "c");
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->id.starts_with("c-"));
}

TEST(SandboxPool, ATemplateIsBootedAheadOnlyOnceACreateOfItSucceeded) {
  FakeBoots f;
  SandboxPool::Options o = fast(1);
  o.hold = 20ms;
  SandboxPool pool(o, f.boot(), f.discard(), [](std::size_t) { return true; });
  // Creates that fail (a ready command that never passes): nothing is booted in the background.
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(pool.take("never", any).has_value());
    pool.ended("never", false);
  }
  std::this_thread::sleep_for(200ms);  // ten ticks
  EXPECT_EQ(f.started(), 0);
  // A create that misses is not raced by a boot of the same template while it boots its own.
  EXPECT_FALSE(pool.take("base", any).has_value());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.started(), 0);
  pool.ended("base", true);
  EXPECT_TRUE(eventually([&] { return pool.stats().ready == 1; }));
  EXPECT_EQ(pool.stats().misses, 4u);
}

}  // namespace
}  // namespace abx::platform
