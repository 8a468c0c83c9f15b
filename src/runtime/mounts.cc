#include "mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <optional>

#include "abx/base/try.h"
#include "disk.h"
#include "sys.h"
#include "userns_internal.h"

namespace abx::runtime {
namespace {

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

}  // namespace

Result<UniqueFd> clone_tree(const std::string& path, std::uint64_t attr_set, const Idmap& idmap) {
  int fd = static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, path.c_str(),
                                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
  if (fd < 0) return os::errno_error("open_tree " + path, errno);
  UniqueFd tree(fd);
  mount_attr attr = {};
  attr.attr_set = attr_set;
  if (idmap.userns_fd >= 0) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<std::uint64_t>(idmap.userns_fd);
  }
  if (attr.attr_set == 0) return tree;
  if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
                sizeof attr) != 0) {
    int err = errno;
    std::string why = idmap.userns_fd >= 0 && err == EINVAL
                          ? " (its filesystem cannot be idmapped: run sandboxes without a user "
                            "namespace, abxd --no-userns, or move it to ext4/xfs/btrfs/tmpfs)"
                          : "";
    return os::errno_error("mount_setattr " + path + why, err);
  }
  return tree;
}

namespace {

Status set(int fs, const char* key, const std::string& value, const std::string& what) {
  if (::syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, key, value.c_str(), 0) != 0)
    return os::errno_error(std::string("overlay ") + key + " " + what, errno);
  return {};
}

// A filesystem context for the root overlay over `lowers` (top first; `layers` name them in
// errors) and the writable layer `rw`, configured, not yet created; with `handles`, with
// index=on,nfs_export=on.
Result<UniqueFd> configure_overlay(const std::vector<std::string>& layers,
                                   const std::vector<std::string>& lowers, const std::string& rw,
                                   const std::string& dir, bool handles) {
  int raw = static_cast<int>(::syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC));
  if (raw < 0) return os::errno_error("fsopen overlay", errno);
  UniqueFd fs(raw);
  // One "lowerdir+" per layer (kernel >= 6.8): the number of layers is not bounded by the 4 KiB
  // page of a "lowerdir=a:b:c" string; older kernels get that string when it fits.
  bool plus = true;
  for (std::size_t i = 0; i < lowers.size(); ++i) {
    if (::syscall(SYS_fsconfig, fs.get(), FSCONFIG_SET_STRING, "lowerdir+", lowers[i].c_str(), 0) ==
        0)
      continue;
    if (i == 0 && errno == EINVAL) {
      plus = false;
      break;
    }
    return os::errno_error("overlay lowerdir+ " + layers[layers.size() - 1 - i], errno);
  }
  if (!plus) {
    std::string joined;
    for (const auto& l : lowers) joined += (joined.empty() ? "" : ":") + l;
    if (joined.size() >= 4096)
      return Error(ErrorCode::kInvalidArgument,
                   "overlay: too many layers for this kernel (no lowerdir+, before 6.8)");
    ABX_TRY(set(fs.get(), "lowerdir", joined, "(" + std::to_string(lowers.size()) + " layers)"));
  }
  ABX_TRY(set(fs.get(), "upperdir", rw + "/upper", dir));
  ABX_TRY(set(fs.get(), "workdir", rw + "/work", dir));
  // volatile: no syncs of the upper layer, not even when the overlay goes away with the
  // sandbox's last process (~10 ms on every destroy otherwise); see sandbox.h.
  if (::syscall(SYS_fsconfig, fs.get(), FSCONFIG_SET_FLAG, "volatile", nullptr, 0) != 0)
    return os::errno_error("overlay volatile", errno);
  // index + nfs_export: the overlay's file handles can be opened again (open_by_handle_at).
  // CRIU saves an inotify or fanotify watch by its file handle and turns it into a path by
  // opening it; without these, every checkpoint of a sandbox with a watch on its root (a dev
  // server's file watcher, envd's WatchDir) failed ("fsnotify: Can't dump that handle"). A
  // layer on a filesystem without file handles makes the kernel fall back to both off (and
  // such a watch cannot be saved then; checkpoint() says so).
  if (handles) {
    ABX_TRY(set(fs.get(), "index", "on", dir));
    ABX_TRY(set(fs.get(), "nfs_export", "on", dir));
  }
  return fs;
}

}  // namespace

Result<UniqueFd> make_root_overlay(const SandboxConfig& config, const std::string& dir,
                                   const Idmap& idmap) {
  std::vector<std::string> layers = config.rootfs == RootfsMode::kDirectory
                                        ? std::vector<std::string>{config.rootfs_dir}
                                        : config.lower_dirs;
  // With an idmap the overlay sees the layers through idmapped clones, named by descriptor.
  std::vector<UniqueFd> trees;
  std::vector<std::string> lowers;  // top first, as overlayfs stacks them
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (idmap.userns_fd < 0) {
      lowers.push_back(*it);
      continue;
    }
    ABX_ASSIGN_OR_RETURN(UniqueFd t, clone_tree(*it, 0, idmap));
    lowers.push_back(fd_path(t.get()));
    trees.push_back(std::move(t));
  }
  std::string rw = dir + "/" + kRwMount;
  UniqueFd rw_tree;
  if (idmap.userns_fd >= 0) {
    ABX_ASSIGN_OR_RETURN(rw_tree, clone_tree(rw, 0, idmap));
    rw = fd_path(rw_tree.get());
  }

  std::optional<ScopedThreadFsIds> fsids;
  auto become = [&]() -> Status {
    if (idmap.userns_fd < 0) return {};
    ABX_ASSIGN_OR_RETURN(auto became, ScopedThreadFsIds::become(idmap.first));
    fsids.emplace(std::move(became));
    return {};
  };
  auto create = [](int fs) {
    return ::syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0 ? 0 : errno;
  };
  ABX_TRY(become());
  ABX_ASSIGN_OR_RETURN(UniqueFd fs, configure_overlay(layers, lowers, rw, dir, true));
  int err = create(fs.get());
  if (err == ESTALE) {
    // The writable layer was made over other copies of its image layers (extracted again, or
    // the home copied to another disk): the index checks the upper root's origin by file handle
    // and refuses. Without the index the overlay mounts as it did before the index was used; a
    // watch on it cannot be saved then (checkpoint() says so), everything else works. The
    // failed mount left its work dir (with volatile's incompat mark), which the next refuses.
    fsids.reset();
    ABX_TRY(remove_tree(dir + "/" + kRwMount + "/work/work"));
    ABX_TRY(become());
    ABX_ASSIGN_OR_RETURN(fs, configure_overlay(layers, lowers, rw, dir, false));
    err = create(fs.get());
  }
  if (err != 0) return os::errno_error("create overlay for " + dir, err);
  // setuid binaries of the image (sudo) work only with a user namespace, where they elevate
  // to the sandbox's root and no further; without one, sandbox root is host root.
  std::uint64_t attrs = MOUNT_ATTR_NODEV | (idmap.userns_fd >= 0 ? 0 : MOUNT_ATTR_NOSUID);
  int mnt = static_cast<int>(::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC, attrs));
  if (mnt < 0) return os::errno_error("fsmount overlay", errno);
  return UniqueFd(mnt);
}

Result<std::vector<UniqueFd>> make_bind_mounts(const SandboxConfig& config, const Idmap& idmap) {
  std::vector<UniqueFd> out;
  for (const auto& b : config.binds) {
    // A writable bind (abxd's volumes) is nodev still: a device node found there is never opened.
    std::uint64_t attrs =
        b.writable ? MOUNT_ATTR_NODEV : MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    auto tree = clone_tree(b.source, attrs, idmap);
    if (!tree) return tree.error().with_context("bind " + b.target);
    out.push_back(std::move(tree).value());
  }
  return out;
}

}  // namespace abx::runtime
