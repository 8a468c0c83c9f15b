// File helpers of the image store (private): errno -> Error, atomic file writes, flock, trees.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::image {

// "<what> <path>: <strerror>" with a code from errno (ENOENT not_found, ENOSPC/EDQUOT
// insufficient storage, EACCES/EPERM permission_denied, else internal).
Error errno_error(std::string_view what, std::string_view path, int err);

// mkdir -p (mode 0700 for the directories it makes).
Status make_dirs(const std::string& path);

// The store's directories as only this process's user may reach them (store.h, "Who can reach
// the store"). `root` must be absolute and canonical. Every existing directory above it must be
// owned by root or by this euid and not writable by group or others unless sticky (missing ones
// are made 0700); `root` and each of `dirs` (absolute, below root, parents first) are made 0700
// when missing, and an existing one must be a directory owned by this euid and writable by no
// one else, and is then repaired to 0700. failed_precondition names the offending directory.
Status secure_dirs(const std::string& root, const std::vector<std::string>& dirs);

// Reads a whole regular file; payload_too_large past max_bytes.
Result<std::string> read_file(const std::string& path, std::size_t max_bytes);

// Writes `data` to a fresh file under tmp_dir, fsyncs it and renames it onto `path`.
Status write_file_atomic(const std::string& tmp_dir, const std::string& path,
                         std::string_view data);

// 16 random hex characters for tmp/ names.
std::string random_name();

// Removes a tree without following symlinks; adds the bytes of the regular files it removed to
// *freed when given. A missing path is fine.
Status remove_tree(const std::string& path, std::uint64_t* freed = nullptr);

// An flock(2) held on its own open file description (so two locks in one process exclude each
// other like two processes do); released on destruction.
class FileLock {
 public:
  enum class Mode { kShared, kExclusive };
  // wait=false: unavailable when another holder conflicts.
  static Result<FileLock> acquire(const std::string& path, Mode mode, bool wait = true);
  FileLock() = default;
  bool held() const { return fd_.valid(); }

 private:
  explicit FileLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace abx::image
