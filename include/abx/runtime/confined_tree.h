// abx::runtime::ConfinedTree: file operations on a directory tree that no path can leave — the
// host side of E2B's volume content API (a volume's files, read and written by abxd as root
// without a sandbox).
//
// Every path is relative to the tree's root ("/a/b" and "a/b" are the same; "", "/" and "." are
// the root). A path with a ".." component, a NUL or a control character is invalid_argument
// before any syscall. Resolution is openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV) from the root's descriptor: a symlink anywhere in the tree, absolute or full of
// "..", resolves as if the root were "/" and never reaches the host's files or another mount.
// An operation on a path's last component (stat, remove, chown, mkdir, the rename that writes a
// file) acts on that entry itself, never on what a symlink there points at.
//
// New entries belong to `default_owner` (the sandboxes' `user`, 1000:1000) unless the caller
// gives uid/gid. Writes go to a temporary file in the target's directory, renamed over the
// target once complete: a reader never sees half a file.
//
// Errors: invalid_argument (the path; an operation that the entry's type does not allow),
// not_found (a component missing; ENOTDIR), already_exists (make_dir without `parents` on an
// existing entry), permission_denied, payload_too_large (read over `max`), resource_exhausted
// (a listing or a removal over its entry limit), insufficient_storage (ENOSPC, EDQUOT), internal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::runtime {

struct TreeEntry {
  enum class Type { kUnknown, kFile, kDirectory, kSymlink };
  std::string name;  // the last component ("" for the root)
  std::string path;  // normalised, from the root: "/a/b" ("/" for the root)
  Type type = Type::kUnknown;
  std::int64_t size = 0;
  std::uint32_t mode = 0;  // permission bits and setuid/setgid/sticky (no file type)
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::int64_t atime_ms = 0, mtime_ms = 0, ctime_ms = 0;
  std::string target;  // a symlink's target, as stored
};

// "file" | "directory" | "symlink" | "unknown" (E2B's VolumeFileType).
std::string_view tree_entry_type_name(TreeEntry::Type t);

struct TreeOwner {
  std::uint32_t uid = 1000;
  std::uint32_t gid = 1000;
};

// Explicit metadata for a new or changed entry; nullopt keeps (or, for a new entry, defaults).
struct TreeMetadata {
  std::optional<std::uint32_t> uid, gid, mode;
};

// "/a/b" for "a//b/", or invalid_argument (a ".." component, NUL or control characters, over
// 4096 bytes).
Result<std::string> normalize_tree_path(std::string_view path);

class ConfinedTree {
 public:
  // The tree rooted at directory `root` (opened here, O_DIRECTORY, not following a final symlink).
  static Result<ConfinedTree> open(const std::string& root, TreeOwner default_owner = {});

  Result<TreeEntry> stat(std::string_view path) const;
  // The entries under directory `path`, `depth` levels deep (1: its children), by path; at most
  // `max_entries` (resource_exhausted past it). Symlinked directories are listed, not entered.
  Result<std::vector<TreeEntry>> list(std::string_view path, int depth,
                                      std::size_t max_entries) const;
  // mkdir; with `parents` the missing parents too, and an existing directory is fine.
  Result<TreeEntry> make_dir(std::string_view path, bool parents, const TreeMetadata& meta) const;
  // A regular file's contents; at most `max` bytes (payload_too_large past it).
  Result<std::string> read_file(std::string_view path, std::size_t max) const;
  // Replaces (or creates) regular file `path` with the contents of `source` (read to its end;
  // at most `max` bytes). The parent must exist unless `parents`. Default mode 0644.
  Result<TreeEntry> write_file(std::string_view path, int source, std::uint64_t max, bool parents,
                               const TreeMetadata& meta) const;
  // Removes `path`, a directory with everything in it (at most `max_entries`, 64 levels deep).
  // The root cannot be removed.
  Status remove(std::string_view path, std::size_t max_entries) const;
  // chown (uid, gid) and chmod (mode) of `path` itself; a symlink's mode cannot change.
  Result<TreeEntry> set_metadata(std::string_view path, const TreeMetadata& meta) const;

 private:
  ConfinedTree(UniqueFd root, TreeOwner owner) : root_(std::move(root)), owner_(owner) {}
  // The directory holding the last component of normalised `norm`, and that component.
  Result<std::pair<UniqueFd, std::string>> parent_of(const std::string& norm) const;
  Result<UniqueFd> resolve(const std::string& norm, int flags) const;
  Result<TreeEntry> stat_at(int dir, const std::string& name, const std::string& norm) const;

  UniqueFd root_;
  TreeOwner owner_;
};

}  // namespace abx::runtime
