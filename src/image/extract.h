// Layer extraction (private to abx::image): a layer tarball, maybe gzip- or zstd-compressed, is
// unpacked with libarchive into a fresh directory, treating every entry as hostile.
//
// What ends up in `dest`, and what does not:
//   - regular files, directories, symlinks and hardlinks, with owner, mode (setuid/setgid
//     included: the store runs as root and images rely on them, e.g. su, ping) and mtime;
//   - nothing outside `dest`: entries with ".." or absolute names, entries whose parent is a
//     symlink (symlink-then-file), hardlinks to absolute, "..", or not-yet-extracted paths
//     fail the whole layer; libarchive's SECURE_NODOTDOT | SECURE_SYMLINKS |
//     SECURE_NOABSOLUTEPATHS check the same again;
//   - device nodes, fifos and sockets are skipped (a sandbox gets its /dev from the runtime);
//   - xattrs: only "user.*" and "security.capability" (file capabilities, which images such as
//     iputils rely on). "trusted.*" is dropped on purpose — a layer must not forge overlayfs'
//     own trusted.overlay.* (opaque, redirect, metacopy) — and so are "security.selinux" and
//     ACLs, which belong to the host's policy, not the image's;
//   - OCI whiteouts become overlayfs ones: ".wh.NAME" -> a 0:0 character device NAME (unless the
//     same layer also has NAME), ".wh..wh..opq" -> xattr trusted.overlay.opaque=y on its
//     directory; other ".wh..wh.*" (aufs bookkeeping) are dropped.
// Limits (LayerLimits): entries, expanded bytes and expanded/compressed ratio, checked before
// each entry is written and while the decompressed stream is read; exceeding one is
// resource_exhausted naming the layer and the limit. On any error `dest` is left for the
// caller to remove (the store extracts under tmp/ and removes it).
#pragma once

#include <archive.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/image/store.h"

namespace abx::image {

struct ExtractStats {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;    // regular-file content written
  std::uint64_t skipped = 0;  // devices, fifos, sockets, aufs metadata
  std::uint64_t whiteouts = 0;
};

// `dest` must be an existing empty directory; `layer` names the layer in errors.
Result<ExtractStats> extract_layer(const std::string& blob_path, const std::string& dest,
                                   const LayerLimits& limits, std::string_view layer);

// The same extraction fed piece by piece while the layer downloads: it runs on a thread of its
// own and reads what feed() hands over (at most kMaxQueued bytes wait; feed() blocks beyond).
// The bytes are not verified here: the caller checks the blob's digest and discards `dest` when
// it does not match (Store's LayerWriter). `compressed_size` is the blob's declared size (for
// the expansion ratio).
class LayerStream {
 public:
  static constexpr std::size_t kMaxQueued = 8 << 20;

  static Result<std::unique_ptr<LayerStream>> start(const std::string& dest,
                                                    std::uint64_t compressed_size,
                                                    const LayerLimits& limits,
                                                    std::string_view layer);
  // Abandons an unfinished extraction and waits for its thread.
  ~LayerStream();
  LayerStream(const LayerStream&) = delete;
  LayerStream& operator=(const LayerStream&) = delete;

  // Queues a copy of `piece`. Once the extraction has ended (the tar's end-of-archive, or an
  // error that finish() reports) pieces are dropped.
  void feed(std::string_view piece);
  // No more pieces; `complete`: the blob ended (false: abandoned, the extraction fails). Waits
  // for the extraction and returns its result.
  Result<ExtractStats> finish(bool complete);

 private:
  LayerStream();
  static la_ssize_t read(archive* a, void* self, const void** buf);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::size_t queued_ = 0;
  bool closed_ = false;     // no more pieces
  bool abandoned_ = false;  // ... and the blob did not end
  bool ended_ = false;      // the extraction returned
  std::string current_;     // the piece libarchive reads
  Result<ExtractStats> result_;
  UniqueFd dir_;
  std::thread thread_;
};

}  // namespace abx::image
