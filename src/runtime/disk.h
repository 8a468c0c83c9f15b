// The writable layer of an image sandbox: a sparse ext4 image in the sandbox's state dir,
// loop-attached and mounted in the host mount namespace, so its size is a real quota (ENOSPC
// inside the sandbox), it is disk rather than tmpfs memory, and its upper dir stays readable by
// the owner after the sandbox's processes exit. Parent side only (allocates, forks mkfs).
#pragma once

#include <cstdint>
#include <string>

#include "abx/base/error.h"
#include "abx/runtime/layer_pool.h"

namespace abx::runtime {

inline constexpr const char* kRwImage = "rw.img";  // <state>/<id>/rw.img
inline constexpr const char* kRwMount = "rw";      // <state>/<id>/rw, the mount point

// Creates `<dir>/rw.img` of `bytes` (sparse; a copy of a per-size ext4 image formatted once into
// `<state_dir>/.rw-cache/`), attaches it to a free loop device with LO_FLAGS_AUTOCLEAR, mounts
// it on `<dir>/rw` (nosuid, nodev, noatime) and creates `rw/upper` and `rw/work`. On failure
// nothing stays mounted (the image file is left for the caller's removal of `dir`).
Status make_rw_layer(const std::string& state_dir, const std::string& dir, std::uint64_t bytes);

// Makes the writable layer make_rw_layer() makes, ahead of a sandbox (layer_pool.h): `image`
// (a sparse copy of the cached one) loop-attached and its filesystem mounted *detached*
// (fsopen/fsmount: attached to no path and no mount namespace) with `upper` and `work` made.
// Nothing but the returned fd holds the mount: closing it (or the process dying) unmounts it
// and lets the loop device go (autoclear); the image file is the caller's to unlink. On failure
// nothing stays mounted or attached and `image` is removed.
Result<ReadyLayer> make_ready_layer(const std::string& state_dir, const std::string& image,
                                    std::uint64_t bytes);

// Gives the ready layer to the sandbox whose state dir is `dir`: renames its image to
// `<dir>/rw.img` and moves its mount onto `<dir>/rw`, as make_rw_layer() leaves them. On
// failure nothing is attached at `<dir>/rw` (the caller's remove_rw_layer() removes the image).
Status install_ready_layer(ReadyLayer layer, const std::string& dir);

// Attaches the ext4 image `image` to a free loop device (autoclear) and mounts it on `mnt`
// (nosuid, nodev, noatime). Nothing stays attached on failure.
Status mount_rw_image(const std::string& image, const std::string& mnt);

// Takes the writable layer `image` (an rw.img another sandbox left: a checkpoint's, or one kept
// by keep_layer()) as `<dir>/rw.img`: a hard link of it when `link` (a copy where the filesystem
// does not allow one), else a copy; mounts it on `<dir>/rw` as make_rw_layer() mounts a new one,
// and removes its overlay's stale work dir (the old overlay was mounted `volatile`, and
// overlayfs refuses, mounting read-only, a work dir that still has its incompat/volatile marker).
Status take_rw_layer(const std::string& image, const std::string& dir, bool link);

// syncfs(2) of the filesystem `path` is on (the writable layer: `<dir>/rw`).
Status sync_filesystem(const std::string& path);

// Copies `from` to the new file `to` (same size, data extents only: holes stay holes).
Status copy_sparse_file(const std::string& from, const std::string& to);

// `to` as a hard link of `from` (the same inode), or a copy where the filesystem does not allow
// the link (another filesystem, or no hard links there).
Status link_or_copy(const std::string& from, const std::string& to);

// Whether a loop device is still attached to `image` (an absolute path).
bool loop_backed_by(const std::string& image);

// Whether a loop device is still attached to the inode `file` names, under whatever name it was
// attached (a hard link of it, or one since unlinked: the checkpoint's rw.img shares the
// sandbox's). False when `file` does not exist.
bool loop_backed_by_inode(const std::string& file);

// Waits (bounded: 5 s) until no loop device is attached to `image` any more, by its name or (a
// hard link: a kept or keep_frozen layer) its inode: the kernel detaches an autoclear device
// asynchronously once the last mount of its filesystem is gone. False if one still is.
bool wait_loop_detached(const std::string& image);

// Lazily unmounts `<dir>/rw` if it is mounted (the loop device then detaches itself once the
// last user of the filesystem is gone) and removes `<dir>/rw.img`. Missing pieces are fine.
Status remove_rw_layer(const std::string& dir);

// Unmounts (lazily) and removes each entry of `stage`, a restore's staging dir (its root
// overlay and binds, attached there for CRIU), then `stage` itself. Best effort: missing is fine.
void remove_stage(const std::string& stage);

// The stage a restore of sandbox `id` recorded in its state dir `dir` (the `stage` file, written
// before staging and removed once the stage is gone): removed with remove_stage(), then the
// record. A record that does not name a stage of `id` (an absolute path ending in /<id>, no
// "..") is ignored. For an owner that died mid-restore: cleanup_stale() and adopt() call it.
void remove_recorded_stage(const std::string& dir, const std::string& id);

}  // namespace abx::runtime
