// The files side of a template build: the uploaded context tar extracted safely, COPY/ADD
// sources resolved inside it, and the staging trees that become layers.
//
// Everything here runs in abxd on input a client sent, so it is hostile-input code: archive
// entries never land outside their directory (absolute paths, `..`, symlink-then-file and
// hard links to outside are refused by libarchive's secure-extraction flags plus our own path
// check), device nodes are skipped, and limits cap the entry count and expanded size. A COPY
// source is resolved like openat2(RESOLVE_IN_ROOT): `..` and absolute symlinks stop at the
// context's root, so no source names a file outside it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/image/dockerignore.h"

namespace abx::platform::build {

struct ArchiveLimits {
  std::uint64_t max_entries = 200'000;
  std::uint64_t max_bytes = 8ull << 30;  // expanded
};

// Extracts the tar (optionally compressed) at `archive` into the existing directory `dest`.
// Ownership is not restored (files belong to root, as COPY makes them); modes and mtimes are.
// Errors: invalid_argument naming the entry for unsafe or malformed archives,
// resource_exhausted over the limits.
Status extract_archive(const std::string& archive, const std::string& dest,
                       const ArchiveLimits& limits = {});

// True if `path` is a tar archive libarchive can read (ADD extracts those).
bool is_archive(const std::string& path);

// Resolves `rel` (as written in a Dockerfile, relative to the context) to a host path inside
// `root`, following symlinks with `root` as "/" (RESOLVE_IN_ROOT). not_found if it does not
// exist.
Result<std::string> resolve_in_root(const std::string& root, const std::string& rel);

// The context paths (relative) a COPY source names: itself, or when it has glob characters
// (* ? [) the sorted matches (glob(3)); `..` components are refused. not_found if nothing
// matches. Each result still goes through resolve_in_root.
Result<std::vector<std::string>> expand_source(const std::string& root, const std::string& src);

// A digest of what COPY would take from `paths` (host paths, in order): names, types, modes,
// symlink targets and contents of every file under them. Ownership and times are not part of it.
Result<std::string> content_digest(const std::vector<std::string>& paths);

// COPY one source into `stage` (the layer's root): `src` is a resolved host path, `dest` an
// absolute path in the image; `dest_is_dir` when the Dockerfile's destination ends with '/' or
// there are several sources. A directory source copies its contents. Created parents get mode
// 0755 and mtime 0; every copied entry is owned by uid:gid (its own owner with kKeepOwner).
Status copy_into(const std::string& src, const std::string& stage, const std::string& dest,
                 bool dest_is_dir, std::uint32_t uid, std::uint32_t gid);

// Removes from the extracted context at `root` what `di` excludes (.dockerignore), so that no
// COPY or ADD sees it and no cache key depends on it.
Status remove_ignored(const std::string& root, const image::DockerIgnore& di);

// copy_into's uid meaning "keep each entry's own owner" (COPY --from without --chown).
inline constexpr std::uint32_t kKeepOwner = 0xffffffffu;

// The filesystem the overlay of `layers` (extracted layer directories, lowest first, whiteouts
// in overlayfs form) shows, built in the existing directory `dest`: regular files are hard
// links to the layers' own (so `dest` must only be read, then removed), across filesystems
// copies. Owners, modes and mtimes are kept; devices, fifos and sockets are left out. COPY
// --from reads an earlier stage from it.
Status flatten_layers(const std::vector<std::string>& layers, const std::string& dest);

// Sets mtime 0 on `dest` (if a directory) and each of its parents in `stage`: what copy_into
// and make_dir created, after files were added to them.
Status reset_parent_times(const std::string& stage, const std::string& dest);

// Makes `dest` (absolute, in the image) a directory in `stage`, parents included (WORKDIR).
Status make_dir(const std::string& stage, const std::string& dest);

// Sets uid:gid on everything under `path` (ADD --chown of an extracted archive).
Status chown_tree(const std::string& path, std::uint32_t uid, std::uint32_t gid);

// "1000", "1000:100" -> uid, gid (numeric only). invalid_argument otherwise.
Result<std::pair<std::uint32_t, std::uint32_t>> parse_chown(const std::string& spec);

// A context-relative path, lexically: "./a//b/" -> "a/b" in `out` ("" for "."); false for an
// absolute path or one with a `..` component.
bool safe_relative(std::string_view p, std::string& out);
// Lexically normalised absolute path: "a/../b/" -> "/b", relative to `base` when not absolute.
std::string clean_path(const std::string& path, const std::string& base = "/");

}  // namespace abx::platform::build
