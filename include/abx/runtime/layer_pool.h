// abx::runtime::LayerPool: writable layers made ahead of the sandboxes that will use them
// (issue 44). Making a layer at create — a sparse copy of the formatted image, a loop device,
// an ext4 mount — was the longest step of a create; a pool keeps a few made per layer size (a
// template's `resources.disk`) and a background thread makes the next one after each take.
//
// A ready layer is its own image file under `<state_dir>/.rw-pool/` and an ext4 filesystem on a
// loop device, mounted *detached* (fsmount: at no path, in no mount namespace), with the empty
// `upper` and `work` directories of a new layer. No sandbox has seen it: each is made new from
// the formatted image, handed out once (moved out of the pool) and never comes back; a deleted
// sandbox's layer is removed as before. Only the pool's fd holds the mount, so abxd dying
// unmounts every ready layer and lets its loop device go (autoclear); start() removes the image
// files a dead predecessor left.
//
// Bounds: at most `per_size` ready layers for each of at most `max_sizes` sizes (the sizes taken
// most recently), each ~0.6 MiB of disk (the ext4 metadata of the sparse image), a loop device,
// a mounted ext4 superblock (~17 KiB of kernel slab measured) and one fd. A size not taken for
// `idle` is emptied and not made again until it is taken; sizes are kept warm only once taken (the
// first create of each size makes its own layer).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::runtime {

// A writable layer made ahead of its sandbox (disk.h's make_ready_layer): its image file and
// the fd of its detached mount. Dropping it unmounts it; the image file is then the owner's to
// unlink.
struct ReadyLayer {
  std::string image;
  UniqueFd mount;
  std::uint64_t bytes = 0;
};

struct LayerPoolOptions {
  // The sandboxes' state dir (spawn()'s SandboxConfig::state_dir): the formatted images'
  // cache and the pool's directory, `.rw-pool`, live there (renamed into `<state_dir>/<id>/`).
  std::string state_dir;
  std::size_t per_size = 2;  // ready layers kept per size; 0: no pool (take() always misses)
  std::size_t max_sizes = 4;
  std::chrono::milliseconds idle = std::chrono::minutes(10);
  // How long the refill thread sleeps when it has nothing to do (it checks idleness then).
  std::chrono::milliseconds tick = std::chrono::seconds(1);
};

class LayerPool {
 public:
  struct Stats {
    std::size_t ready = 0;  // layers made and not yet taken, all sizes
    std::size_t sizes = 0;  // sizes kept warm
    std::uint64_t hits = 0, misses = 0, made = 0, dropped = 0, failed = 0;
  };

  // Removes what a previous pool left in `<state_dir>/.rw-pool` (image files only: their mounts
  // and loop devices died with the process that held them) and starts the refill thread
  // (per_size 0: no thread, nothing made). Errors: the directory cannot be made or emptied.
  static Result<std::unique_ptr<LayerPool>> start(LayerPoolOptions options);
  // Stops the thread and drops every ready layer (unmounted, loop device released, file gone).
  ~LayerPool();
  LayerPool(const LayerPool&) = delete;
  LayerPool& operator=(const LayerPool&) = delete;

  // A ready layer of `bytes`, or nothing (none ready yet: the caller makes its own). Either way
  // `bytes` counts as taken now: the pool keeps (or starts keeping) layers of that size warm.
  // Never blocks on making one.
  std::optional<ReadyLayer> take(std::uint64_t bytes);
  Stats stats() const;
  // Blocks until every kept size has per_size layers ready, or `timeout` (tests, benchmarks).
  bool wait_full(std::chrono::milliseconds timeout) const;

  struct Impl;

 private:
  explicit LayerPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace abx::runtime
