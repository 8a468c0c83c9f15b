// The image store's shared state and path layout (private to abx::image).
#pragma once

#include <mutex>
#include <string>
#include <string_view>

#include "abx/image/store.h"
#include "fs.h"

namespace abx::image {

// Locking. <root>/lock is an flock: every operation that writes under tmp/, blobs/, layers/ or
// refs.json holds it shared (a BlobWriter for its whole life); gc() and open()'s tmp/ cleanup
// hold it exclusive, so neither removes what another process is writing. refs.json's
// read-modify-write is serialised by <root>/refs.lock between processes and `refs_mu` within
// this one.
struct Store::State {
  std::string root;
  LayerLimits limits;
  std::mutex refs_mu;

  std::string tmp_dir() const { return root + "/tmp"; }
  std::string blobs_dir() const { return root + "/blobs/sha256"; }
  std::string layers_dir() const { return root + "/layers/sha256"; }
  std::string refs_path() const { return root + "/refs.json"; }
  std::string lock_path() const { return root + "/lock"; }
  std::string refs_lock_path() const { return root + "/refs.lock"; }
  // Callers check valid_digest first.
  std::string blob_file(std::string_view digest) const {
    return blobs_dir() + "/" + std::string(digest.substr(7));
  }
  std::string layer_dir(std::string_view digest) const {
    return layers_dir() + "/" + std::string(digest.substr(7));
  }

  Result<FileLock> shared_lock() const {
    return FileLock::acquire(lock_path(), FileLock::Mode::kShared);
  }

  // The image of a manifest blob (image.cc). With `extract`, layers not yet under layers/ are
  // extracted (callers hold the shared lock); without, a missing layer dir is not_found.
  Result<Image> load_image(std::string_view manifest_digest,
                           const std::function<void(std::string_view)>& progress, bool extract);
  // Extracts one layer blob into layers/ through tmp/ (no-op when already there).
  Status ensure_layer(std::string_view digest,
                      const std::function<void(std::string_view)>& progress);
  // refs.json (image.cc).
  Result<std::map<std::string, std::string>> read_refs() const;
  Status write_refs(const std::map<std::string, std::string>& refs);
};

}  // namespace abx::image
