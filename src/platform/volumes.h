// Volumes (E2B's /volumes and the create field volumeMounts): a team's named persistent
// directories that sandboxes mount.
//
// A volume is a directory of abxd's home, <home>/volumes/<volumeID> (<home>/volumes is 0700:
// only root reaches what sandboxes wrote there). Its root belongs to on-disk uid:gid 1000:1000,
// mode 0755, which the sandbox sees as its default user `user` (every sandbox's mounts are
// idmapped with its own user namespace, runtime/sandbox.h, so on-disk ids are sandbox ids). A
// sandbox created with volumeMounts gets each one bind-mounted, writable and nodev, at its path;
// the mount is resolved inside the sandbox's root (a symlinked mount point is refused).
//
// Lifetime: a volume outlives every sandbox that mounts it, abxd restarts (records in the store,
// schema 10) and pauses (the mount is an external bind of the checkpoint, made again at resume).
// A fork or a sandbox made from a snapshot mounts the same volumes (shared, not copied: E2B's
// volumes are network volumes shared by every sandbox that mounts them). DELETE refuses (409)
// while a running or paused sandbox mounts the volume.
//
// Quota (E2B's API has no size field: abxd --volume-size-mib, default 10 GiB): a volume made
// with one has its files on <home>/volumes/<volumeID>.img, a sparse ext4 image of that size
// (runtime/volume_image.h) mounted on its directory when it is made and at abxd's start, and
// lazily unmounted at abxd's stop (a sandbox that outlives abxd keeps its bind; the next abxd
// mounts the same loop device again) and at delete. Writes past its size are ENOSPC. A volume
// without an image (made before quotas, or with --volume-size-mib 0) is a plain directory
// that takes what the disk of abxd's home has (docs/volumes.md).
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/store/store.h"

namespace abx::platform {

inline constexpr std::size_t kDefaultMaxVolumesPerTeam = 100;
inline constexpr std::size_t kMaxVolumeMounts = 16;  // per sandbox
inline constexpr std::size_t kMaxVolumeNameBytes = 128;
inline constexpr std::size_t kMaxMountPathBytes = 512;
// The volume content API (api_volume_content.cc): a listing's entries, a removal's entries, a
// read (answered from memory), a write (spooled to disk first), and the largest uid/gid (the
// sandboxes' id range).
inline constexpr std::size_t kMaxVolumeListEntries = 10'000;
inline constexpr std::size_t kMaxVolumeRemoveEntries = 100'000;
inline constexpr std::size_t kMaxVolumeReadBytes = 64u << 20;
inline constexpr std::uint64_t kMaxVolumeWriteBytes = 1ull << 30;
inline constexpr std::uint32_t kMaxVolumeUid = 65535;

// E2B's rule for a volume name: one or more of [A-Za-z0-9_-] (at most kMaxVolumeNameBytes here).
bool valid_volume_name(std::string_view name);
// A version-4 UUID in lowercase hex (what POST /volumes gives a volume).
bool valid_volume_id(std::string_view id);

// A mount path of volumeMounts, normalised (repeated and trailing '/' dropped), or
// invalid_argument saying why not: it must be absolute, at most kMaxMountPathBytes, without
// "." or ".." components or control characters, and neither /, nor on, above or below a path
// abxd mounts itself (/proc, /sys, /dev, /opt/abx, /run/abx, /etc/resolv.conf and the CA files).
Result<std::string> check_mount_path(std::string_view path);

// The create body's volumeMounts ([{name, path}], E2B's SandboxVolumeMount), decoded and checked
// (names, paths, at most kMaxVolumeMounts, no path twice or inside another); volume_id is left
// empty for the caller to resolve. null or absent: none.
Result<std::vector<store::VolumeMount>> parse_volume_mounts(const boost::json::object& body);

// E2B's Volume {volumeID, name}; with the token, its VolumeAndToken.
boost::json::object volume_json(const store::VolumeRecord& v, bool with_token);
// [{name, path}] as E2B's SandboxVolumeMount list; with_ids adds each one's volumeID (what a
// snapshot keeps).
boost::json::array volume_mounts_json(const std::vector<store::VolumeMount>& mounts,
                                      bool with_ids = false);

// <home>/volumes/<id>.
std::string volume_dir(const std::string& home, std::string_view id);
// <home>/volumes/<id>.img: the volume's ext4 image when it has a quota.
std::string volume_image(const std::string& home, std::string_view id);
inline constexpr std::uint64_t kDefaultVolumeBytes = 10ull << 30;
inline constexpr std::uint64_t kMinVolumeBytes = 8ull << 20;
inline constexpr std::uint64_t kMaxVolumeBytes = 16ull << 40;
// Makes volume_dir (and <home>/volumes, 0700), its root owned by 1000:1000, mode 0755: with
// `quota_bytes` (kMinVolumeBytes..kMaxVolumeBytes) the mount of a new volume_image of that size,
// with 0 a plain directory.
Status make_volume_dir(const std::string& home, std::string_view id, std::uint64_t quota_bytes);
// Removes volume_dir and everything in it, and its image (unmounted first; a missing one is fine).
Status remove_volume_dir(const std::string& home, std::string_view id);
// At abxd's start: mounts each volume image of <home>/volumes on its directory (one still
// mounted stays so). Returns how many are mounted; failures are logged, the others go on.
std::size_t mount_volumes(const std::string& home);
// Before a sandbox binds volume `id` (create, resume, fork): a volume with an image is mounted
// on its directory, again if abxd's start failed to (a no-op when it is mounted). An error
// (kUnavailable) names the volume: a sandbox never gets the bare mount point instead.
Status ensure_volume_mounted(const std::string& home, std::string_view id);
// At abxd's stop: unmounts (lazily) each volume image's directory.
void unmount_volumes(const std::string& home);

}  // namespace abx::platform
