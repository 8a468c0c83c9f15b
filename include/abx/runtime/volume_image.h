// A volume's quota (platform/volumes.h): its files live on a sparse ext4 image, loop-attached and
// mounted on the volume's directory in the host mount namespace, as a sandbox's writable layer
// (src/runtime/disk.h, whose machinery this is), so writing past its size is ENOSPC.
#pragma once

#include <cstdint>
#include <string>

#include "abx/base/error.h"

namespace abx::runtime {

// Makes `image`, a sparse ext4 image of `bytes` with a journal (the volume's files outlive
// sandboxes, abxd and host crashes; a copy of one formatted once into `<cache_dir>/.rw-cache/`),
// attaches it to a loop device (autoclear) and mounts it on the directory `mnt` (nosuid, nodev,
// noatime), its lost+found removed. On failure nothing stays mounted; the image file is left
// for the caller to remove.
Status make_volume_image(const std::string& cache_dir, const std::string& image,
                         const std::string& mnt, std::uint64_t bytes);

// Mounts the volume image `image` on `mnt` unless `mnt` is a mount root already (an abxd killed
// with its volumes mounted). A loop device still attached to `image` (sandboxes that outlived the
// last abxd still bind its filesystem) is mounted again rather than a second one attached: the
// same device is the same superblock, a second device would mount the filesystem twice.
Status mount_volume_image(const std::string& image, const std::string& mnt);

// Lazily unmounts `mnt` if it is mounted (the loop device detaches itself once no sandbox binds
// the filesystem any more). Not mounted is fine.
Status unmount_volume(const std::string& mnt);

// unmount_volume(mnt), waits (at most 5 s) for the loop device to detach, removes `image`.
Status remove_volume_image(const std::string& image, const std::string& mnt);

}  // namespace abx::runtime
