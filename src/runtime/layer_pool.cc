// The writable-layer pool (layer_pool.h): a map of sizes to ready layers, and one thread that
// makes the missing ones, one at a time, and empties sizes left idle.
#include "abx/runtime/layer_pool.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "abx/base/failure_run.h"
#include "abx/base/log.h"
#include "abx/base/try.h"
#include "disk.h"
#include "sys.h"

namespace abx::runtime {
namespace {

constexpr const char* kPoolDir = ".rw-pool";
using Clock = std::chrono::steady_clock;

// Unmounts it (the last fd of a detached mount) and removes its file.
void discard(ReadyLayer& layer) {
  layer.mount.reset();
  if (!layer.image.empty()) ::unlink(layer.image.c_str());
}

}  // namespace

struct LayerPool::Impl {
  struct Size {
    std::deque<ReadyLayer> ready;
    Clock::time_point last_take;
  };
  LayerPoolOptions opt;
  std::string dir;  // <state_dir>/.rw-pool
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::map<std::uint64_t, Size> sizes;
  Stats counts;
  std::uint64_t seq = 0;
  bool stop = false;
  std::thread thread;

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
    for (auto& [bytes, size] : sizes)
      for (auto& layer : size.ready) discard(layer);
  }

  // The size with fewest ready layers below per_size, if any. Under mu.
  std::optional<std::uint64_t> wanted() const {
    std::optional<std::uint64_t> best;
    std::size_t fewest = opt.per_size;
    for (const auto& [bytes, size] : sizes)
      if (size.ready.size() < fewest) {
        fewest = size.ready.size();
        best = bytes;
      }
    return best;
  }

  // Sizes not taken for opt.idle leave the pool, their layers into `out`. Under mu.
  void expire(Clock::time_point now, std::vector<ReadyLayer>& out) {
    for (auto it = sizes.begin(); it != sizes.end();) {
      if (now - it->second.last_take < opt.idle) {
        ++it;
        continue;
      }
      for (auto& layer : it->second.ready) out.push_back(std::move(layer));
      it = sizes.erase(it);
    }
  }

  void run() {
    // Below the creates it serves (10 nice levels below abxd's, at most 19; never above it):
    // a refill runs beside the create that took the layer and must not slow it.
    lower_thread_priority(10);
    // After a failure the next try waits, twice as long each time up to a minute (a full disk,
    // no free loop device: creates make their own layers meanwhile); the log names the first
    // failure of a run of them and the recovery.
    const Logger logger("layer_pool");
    FailureRun failures(logger, opt.tick, std::chrono::minutes(1));
    std::unique_lock lock(mu);
    while (!stop) {
      std::vector<ReadyLayer> drop;
      expire(Clock::now(), drop);
      counts.dropped += drop.size();
      const std::optional<std::uint64_t> bytes = wanted();
      if (!drop.empty() || bytes) {
        const std::string image = dir + "/" + std::to_string(seq++) + ".img";
        lock.unlock();
        for (auto& layer : drop) discard(layer);
        Result<ReadyLayer> made = bytes ? make_ready_layer(opt.state_dir, image, *bytes)
                                        : Result<ReadyLayer>(ReadyLayer{});
        lock.lock();
        if (!bytes) continue;
        if (!made) {
          ++counts.failed;
          cv.wait_for(lock,
                      failures.failed("no writable layer made (creates make theirs): " +
                                      made.error().message()),
                      [&] { return stop; });
          continue;
        }
        failures.succeeded("writable layers made again");
        ++counts.made;
        auto it = sizes.find(*bytes);
        if (it != sizes.end() && it->second.ready.size() < opt.per_size) {
          it->second.ready.push_back(std::move(made).value());
          cv.notify_all();  // wait_full()
        } else {            // the size went idle (or was evicted) meanwhile
          ReadyLayer extra = std::move(made).value();
          ++counts.dropped;
          lock.unlock();
          discard(extra);
          lock.lock();
        }
        continue;
      }
      cv.wait_for(lock, opt.tick);
    }
  }
};

LayerPool::LayerPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerPool::~LayerPool() = default;

Result<std::unique_ptr<LayerPool>> LayerPool::start(LayerPoolOptions options) {
  if (options.state_dir.empty() || options.state_dir[0] != '/')
    return invalid_argument("layer pool: the state dir must be an absolute path");
  auto impl = std::make_unique<Impl>();
  impl->dir = options.state_dir + "/" + kPoolDir;
  impl->opt = std::move(options);
  // A dead predecessor's files: nothing holds them any more (its mounts were fds of its own).
  ABX_TRY(remove_tree(impl->dir));
  if (impl->opt.per_size > 0) {
    if (::mkdir(impl->dir.c_str(), 0700) != 0) return os::errno_error("mkdir " + impl->dir, errno);
    impl->thread = std::thread([p = impl.get()] { p->run(); });
  }
  return std::unique_ptr<LayerPool>(new LayerPool(std::move(impl)));
}

std::optional<ReadyLayer> LayerPool::take(std::uint64_t bytes) {
  Impl& p = *impl_;
  if (p.opt.per_size == 0) return std::nullopt;
  std::optional<ReadyLayer> out;
  std::vector<ReadyLayer> evicted;
  {
    std::lock_guard lock(p.mu);
    auto [it, added] = p.sizes.try_emplace(bytes);
    it->second.last_take = Clock::now();
    if (added && p.sizes.size() > p.opt.max_sizes) {
      // The size taken longest ago makes room (never the one just added: its time is now).
      auto oldest = p.sizes.end();
      for (auto i = p.sizes.begin(); i != p.sizes.end(); ++i)
        if (i != it && (oldest == p.sizes.end() || i->second.last_take < oldest->second.last_take))
          oldest = i;
      for (auto& layer : oldest->second.ready) evicted.push_back(std::move(layer));
      p.counts.dropped += evicted.size();
      p.sizes.erase(oldest);
    }
    if (!it->second.ready.empty()) {
      out = std::move(it->second.ready.front());
      it->second.ready.pop_front();
      ++p.counts.hits;
    } else {
      ++p.counts.misses;
    }
  }
  p.cv.notify_all();
  for (auto& layer : evicted) discard(layer);
  return out;
}

LayerPool::Stats LayerPool::stats() const {
  std::lock_guard lock(impl_->mu);
  Stats s = impl_->counts;
  s.sizes = impl_->sizes.size();
  for (const auto& [bytes, size] : impl_->sizes) s.ready += size.ready.size();
  return s;
}

bool LayerPool::wait_full(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] { return !impl_->wanted().has_value(); });
}

}  // namespace abx::runtime
