// Sandboxes booted ahead of creates (abxd --sandbox-pool; docs/abxd.md#the-sandbox-pool): per
// template that creates asked for lately, a few sandboxes spawned and ready (envd, the command
// server and interpreter answering) but never handed to anyone, each with its own id, token and
// writable layer. A create that asks for nothing a pooled sandbox was not booted with (no
// envVars, no volumes, the default network, a token) takes one and only records it; a refill
// thread boots the next, below abxd's priority. A pooled sandbox never served another create:
// taking one removes it from the pool for good.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "abx/base/error.h"
#include "abx/runtime/sandbox.h"
#include "abx/templates/template.h"
#include "network.h"

namespace abx::platform {

// A sandbox spawned and ready for a create but not yet a live one: no record, no event, no
// deadline. SandboxManager::boot makes one, create() records it (commit) or discards it.
struct BootedSandbox {
  std::string id;
  std::string token;          // envd's access token; empty for secure=false
  std::string traffic_token;  // empty unless the network keeps public traffic out
  SandboxNetworkSpec network;
  std::string image_digest;  // empty for rootfs: host
  // The catalog it was booted from: a pooled one whose catalog was replaced since (a template
  // built or reloaded) is never handed out.
  std::shared_ptr<const templates::TemplateCatalog> catalog;
  std::optional<runtime::Sandbox> sandbox;  // empty only in the pool's own unit tests
};

class SandboxPool {
 public:
  struct Options {
    std::size_t per_template = 2;  // ready sandboxes kept per template (1..64)
    // A template no create asked for in this long leaves the pool, its sandboxes destroyed.
    std::chrono::milliseconds idle{std::chrono::minutes(5)};
    std::size_t max_templates = 8;  // a ninth pushes out the least recently asked for
    // The refill's pause when nothing is wanted (and the first wait after a failed boot, which
    // doubles up to a minute).
    std::chrono::milliseconds tick{std::chrono::seconds(1)};
    // How long the refill waits for creates between their take() and ended().
    std::chrono::milliseconds hold{100};
  };
  // A new ready sandbox of the template (the refill thread's, below abxd's priority).
  using Boot = std::function<Result<BootedSandbox>(const std::string& template_id)>;
  // Destroys what boot made (the sandbox, its link's rules, its run directory).
  using Discard = std::function<void(BootedSandbox&)>;
  // Whether there is room for one more sandbox on this abxd (its --max-sandboxes) besides the
  // `pooled` ones ready now.
  using Room = std::function<bool(std::size_t pooled)>;
  struct Stats {
    std::size_t ready = 0;    // booted, not yet taken, over all templates
    std::size_t booting = 0;  // 0 or 1
    std::uint64_t hits = 0, waits = 0, misses = 0, booted = 0, failed = 0, discarded = 0;
  };

  SandboxPool(Options options, Boot boot, Discard discard, Room room);
  // Stops the refill and destroys every pooled sandbox.
  ~SandboxPool();
  SandboxPool(const SandboxPool&) = delete;
  SandboxPool& operator=(const SandboxPool&) = delete;

  // A ready sandbox of `template_id` for which `usable` holds (others are destroyed), or the one
  // the refill is booting for it, waited for by one create at a time (a hit, or a wait); nullopt
  // (a miss) otherwise.
  // Either way the template is asked for now: once a create of it succeeded (ended()), the
  // refill keeps it stocked until it is idle. Every take() is followed by one ended().
  std::optional<BootedSandbox> take(const std::string& template_id,
                                    const std::function<bool(const BootedSandbox&)>& usable);
  // The create that called take() has ended: it recorded a sandbox (`created`: the one it took,
  // or on a miss the one it booted) or it failed. Until then, for at most Options::hold, the
  // refill starts no boot, which would take the CPU the create needs. A template is booted ahead
  // only after one of its creates succeeded: one whose creates fail (a ready command that never
  // passes, an image that cannot be used) is never booted in the background.
  void ended(const std::string& template_id, bool created);
  // Destroys every ready sandbox (templates reloaded); the refill boots new ones as needed.
  void flush();
  Stats stats() const;

 private:
  struct Stock {
    std::deque<BootedSandbox> ready;
    std::chrono::steady_clock::time_point asked;
    bool proven = false;  // a create of it succeeded: the refill may boot it
  };
  void run();
  // The template to boot one for next (the proven one asked for with the fewest ready), if any.
  // Under mu_.
  std::optional<std::string> wanted() const;

  const Options opt_;
  const Boot boot_;
  const Discard discard_;
  const Room room_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Stock> stock_;
  std::string booting_;   // the template the refill is booting for, or empty
  bool waiting_ = false;  // a create waits for that boot
  int handing_ = 0;       // creates between their take() and ended()
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace abx::platform
