// The writable layer: ext4 image, loop device, host mount (see disk.h).
//
// Formatting costs ~15-30 ms of mkfs.ext4 (a fork + exec) per size; copying an already formatted
// image of that size with SEEK_DATA/SEEK_HOLE + copy_file_range copies only its ~600 KiB of
// metadata and takes ~1-2 ms in-process (`cp --sparse=always` measured 5 ms). So each size is
// formatted once into <state_dir>/.rw-cache/<bytes>.img and every sandbox gets a sparse copy.
// (Copies share the filesystem UUID; ext4, unlike xfs or btrfs, does not care.)
#include "disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "abx/base/try.h"
#include "abx/runtime/volume_image.h"
#include "sandbox_internal.h"
#include "sys.h"

namespace abx::runtime {
namespace {

constexpr const char* kCacheDir = ".rw-cache";

// Runs mkfs.ext4 on `path`. No journal (the layer dies with the sandbox), no reserved blocks
// (the whole quota is the sandbox's), inode tables left uninitialised (lazy_itable_init here,
// noinit_itable at mount: the kernel does not zero them in the background either, which would
// fill the sparse image).
// A volume's image (`journal`) keeps the journal: its data outlives sandboxes, abxd and the host's
// crashes. A fresh sparse file reads as zeros, so the journal need not be zeroed either.
Status format_ext4(const std::string& path, bool journal) {
  const char* mkfs =
      ::access("/usr/sbin/mkfs.ext4", X_OK) == 0 ? "/usr/sbin/mkfs.ext4" : "/sbin/mkfs.ext4";
  os::RunOptions o;
  o.what = "mkfs.ext4 " + path;
  o.merge_output = true;
  o.capture_limit = 2048;
  if (journal)
    ABX_TRY(
        os::run_program({mkfs, "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                         "-m", "0", "-L", "abx-volume", path},
                        o));
  else
    ABX_TRY(os::run_program({mkfs, "-q", "-F", "-O", "^has_journal", "-E",
                             "lazy_itable_init=1,nodiscard", "-m", "0", "-L", "abx-rw", path},
                            o));
  return {};
}

Status create_sparse(const std::string& path, std::uint64_t bytes) {
  ABX_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(path, O_WRONLY | O_CREAT | O_EXCL, 0600));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return os::errno_error("ftruncate " + path, errno);
  return {};
}

// The formatted image of `bytes` in the cache, made on first use. Concurrent first uses each
// format a private file and rename it into place; the last rename wins, both are equivalent.
Result<std::string> cached_image(const std::string& state_dir, std::uint64_t bytes,
                                 bool journal = false) {
  std::string cache = state_dir + "/" + kCacheDir;
  std::string path = cache + "/" + std::to_string(bytes) + (journal ? "-journal.img" : ".img");
  if (::access(path.c_str(), R_OK) == 0) return path;
  if (::mkdir(cache.c_str(), 0700) != 0 && errno != EEXIST)
    return os::errno_error("mkdir " + cache, errno);
  static std::atomic<unsigned> seq{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seq++);
  ABX_TRY(create_sparse(tmp, bytes));
  Status s = format_ext4(tmp, journal);
  if (s && ::rename(tmp.c_str(), path.c_str()) != 0) s = os::errno_error("rename " + tmp, errno);
  if (!s) {
    ::unlink(tmp.c_str());
    return s.error();
  }
  return path;
}

// Copies `from` to the new file `to`, data extents only: holes stay holes.
Status copy_sparse(const std::string& from, const std::string& to, std::uint64_t bytes) {
  ABX_ASSIGN_OR_RETURN(UniqueFd in, open_fd(from, O_RDONLY));
  ABX_ASSIGN_OR_RETURN(UniqueFd out, open_fd(to, O_WRONLY | O_CREAT | O_EXCL, 0600));
  if (::ftruncate(out.get(), static_cast<off_t>(bytes)) != 0)
    return os::errno_error("ftruncate " + to, errno);
  off_t end = static_cast<off_t>(bytes);
  for (off_t pos = 0; pos < end;) {
    off_t data = ::lseek(in.get(), pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole remains
      return os::errno_error("lseek SEEK_DATA " + from, errno);
    }
    off_t hole = ::lseek(in.get(), data, SEEK_HOLE);
    if (hole < 0) return os::errno_error("lseek SEEK_HOLE " + from, errno);
    for (off_t off_in = data, off_out = data; off_in < hole;) {
      ssize_t n = os::retry_eintr([&] {
        return ::copy_file_range(in.get(), &off_in, out.get(), &off_out,
                                 static_cast<std::size_t>(hole - off_in), 0);
      });
      if (n < 0) return os::errno_error("copy_file_range " + from + " -> " + to, errno);
      if (n == 0) return internal_error("copy_file_range " + from + ": unexpected end");
    }
    pos = hole;
  }
  return {};
}

struct LoopDevice {
  std::string path;
  UniqueFd fd;
};

// Attaches `image` to a free loop device. Keep the returned fd open until the device is mounted:
// with AUTOCLEAR the device detaches itself on the last close, so the mount must be the opener
// that remains.
Result<LoopDevice> loop_attach(const std::string& image) {
  ABX_ASSIGN_OR_RETURN(UniqueFd file, open_fd(image, O_RDWR));
  ABX_ASSIGN_OR_RETURN(UniqueFd ctl, open_fd("/dev/loop-control", O_RDWR));
  // GET_FREE names the lowest free device to every caller alike: N threads of this process
  // attaching at once would each lose up to N-1 times (32 parallel creates ran out of attempts).
  // They take turns here; the kernel serialises the configuration anyway.
  static std::mutex attaching;
  std::lock_guard turn(attaching);
  // Another process may take the device between GET_FREE and CONFIGURE (EBUSY): try again.
  for (int attempt = 0; attempt < 64; ++attempt) {
    int n = os::retry_eintr([&] { return ::ioctl(ctl.get(), LOOP_CTL_GET_FREE); });
    if (n < 0) return os::errno_error("ioctl LOOP_CTL_GET_FREE", errno);
    std::string dev = "/dev/loop" + std::to_string(n);
    ABX_ASSIGN_OR_RETURN(UniqueFd loop, open_fd(dev, O_RDWR));
    loop_config cfg = {};
    cfg.fd = static_cast<std::uint32_t>(file.get());
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    std::strncpy(reinterpret_cast<char*>(cfg.info.lo_file_name), image.c_str(), LO_NAME_SIZE - 1);
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &cfg) == 0) return LoopDevice{dev, std::move(loop)};
    if (errno != EBUSY) return os::errno_error("ioctl LOOP_CONFIGURE " + dev, errno);
  }
  return Error(ErrorCode::kResourceExhausted, "no free loop device for " + image);
}

// The loop device ("/dev/loopN") attached to `image` by its name, or "".
std::string loop_device_of(const std::string& image) {
  DIR* d = ::opendir("/sys/block");
  if (!d) return {};
  std::string found;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "loop", 4) != 0) continue;
    auto backing = read_file(std::string("/sys/block/") + e->d_name + "/loop/backing_file", 4096);
    if (backing && backing->rfind(image, 0) == 0 &&
        (backing->size() == image.size() || (*backing)[image.size()] == '\n')) {
      found = std::string("/dev/") + e->d_name;
      break;
    }
  }
  ::closedir(d);
  return found;
}

// Whether `path` is the root of a mount (another device than its parent directory's).
bool mount_root(const std::string& path) {
  struct stat self, parent;
  return ::lstat(path.c_str(), &self) == 0 && S_ISDIR(self.st_mode) &&
         ::stat((path + "/..").c_str(), &parent) == 0 && self.st_dev != parent.st_dev;
}

}  // namespace

Status make_volume_image(const std::string& cache_dir, const std::string& image,
                         const std::string& mnt, std::uint64_t bytes) {
  ABX_ASSIGN_OR_RETURN(const std::string cached, cached_image(cache_dir, bytes, true));
  ABX_TRY(copy_sparse(cached, image, bytes));
  ABX_TRY(mount_rw_image(image, mnt));
  // mkfs's lost+found is no file of the volume's (a new volume is empty); fsck makes it again.
  const std::string lost = mnt + "/lost+found";
  if (::rmdir(lost.c_str()) != 0 && errno != ENOENT) {
    Error e = os::errno_error("rmdir " + lost, errno);
    ::umount2(mnt.c_str(), MNT_DETACH);
    return e;
  }
  return {};
}

Status mount_volume_image(const std::string& image, const std::string& mnt) {
  if (mount_root(mnt)) return {};  // still mounted (the last abxd was killed)
  // Still attached: sandboxes that outlived the last abxd hold binds of its filesystem. Mounting
  // the same device gives the same superblock; a second device would mount it twice.
  if (const std::string dev = loop_device_of(image); !dev.empty()) {
    if (::mount(dev.c_str(), mnt.c_str(), "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME,
                "noinit_itable") == 0)
      return {};
    if (errno != ENXIO && errno != ENOENT)  // else detached meanwhile: attach it anew
      return os::errno_error("mount " + dev + " (" + image + ") on " + mnt, errno);
  }
  return mount_rw_image(image, mnt);
}

Status unmount_volume(const std::string& mnt) {
  if (::umount2(mnt.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL &&
      errno != ENOENT)
    return os::errno_error("umount " + mnt, errno);
  return {};
}

Status remove_volume_image(const std::string& image, const std::string& mnt) {
  ABX_TRY(unmount_volume(mnt));
  if (!wait_loop_detached(image))
    return internal_error("a loop device is still attached to " + image);
  if (::unlink(image.c_str()) != 0 && errno != ENOENT)
    return os::errno_error("unlink " + image, errno);
  return {};
}

Status make_rw_layer(const std::string& state_dir, const std::string& dir, std::uint64_t bytes) {
  ABX_ASSIGN_OR_RETURN(const std::string cached, cached_image(state_dir, bytes));
  std::string image = dir + "/" + kRwImage;
  std::string mnt = dir + "/" + kRwMount;
  ABX_TRY(copy_sparse(cached, image, bytes));
  ABX_TRY(mount_rw_image(image, mnt));
  for (const char* sub : {"upper", "work"}) {
    std::string d = mnt + "/" + sub;
    if (::mkdir(d.c_str(), 0755) != 0) {
      Error e = os::errno_error("mkdir " + d, errno);
      ::umount2(mnt.c_str(), MNT_DETACH);
      return e;
    }
  }
  return {};
}

Result<ReadyLayer> make_ready_layer(const std::string& state_dir, const std::string& image,
                                    std::uint64_t bytes) {
  ABX_ASSIGN_OR_RETURN(const std::string cached, cached_image(state_dir, bytes));
  ABX_TRY(copy_sparse(cached, image, bytes));
  auto made = [&]() -> Result<ReadyLayer> {
    ABX_ASSIGN_OR_RETURN(const LoopDevice dev, loop_attach(image));
    // A new mount API's filesystem: mounted nowhere (no path, no mount namespace sees it) until
    // install_ready_layer() moves it onto the sandbox's mount point. The mount holds the loop
    // device from here on; `dev.fd` closes when this returns.
    UniqueFd fs(::fsopen("ext4", FSOPEN_CLOEXEC));
    if (!fs) return os::errno_error("fsopen ext4", errno);
    if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, "source", dev.path.c_str(), 0) != 0 ||
        ::fsconfig(fs.get(), FSCONFIG_SET_FLAG, "noinit_itable", nullptr, 0) != 0 ||
        ::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
      return os::errno_error("fsconfig ext4 " + dev.path + " (" + image + ")", errno);
    UniqueFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC,
                           MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME));
    if (!mnt) return os::errno_error("fsmount " + dev.path + " (" + image + ")", errno);
    for (const char* sub : {"upper", "work"})
      if (::mkdirat(mnt.get(), sub, 0755) != 0)
        return os::errno_error(std::string("mkdir ") + sub + " in " + image, errno);
    return ReadyLayer{image, std::move(mnt), bytes};
  }();
  if (!made) ::unlink(image.c_str());  // nothing mounted: the closed fds let the device go
  return made;
}

Status install_ready_layer(ReadyLayer layer, const std::string& dir) {
  const std::string image = dir + "/" + kRwImage, mnt = dir + "/" + kRwMount;
  // The same filesystem (both under the state dir): the loop device follows the file's new name.
  if (::rename(layer.image.c_str(), image.c_str()) != 0)
    return os::errno_error("rename " + layer.image + " -> " + image, errno);
  if (::move_mount(layer.mount.get(), "", AT_FDCWD, mnt.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return os::errno_error("move_mount " + image + " onto " + mnt, errno);
  return {};
}

Status mount_rw_image(const std::string& image, const std::string& mnt) {
  // The mount holds the loop device open and the device holds the image: a failure (or a
  // crash) between attach and mount leaves nothing attached once the fd is closed.
  ABX_ASSIGN_OR_RETURN(const LoopDevice dev, loop_attach(image));
  if (::mount(dev.path.c_str(), mnt.c_str(), "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME,
              "noinit_itable") != 0)
    return os::errno_error("mount " + dev.path + " (" + image + ") on " + mnt, errno);
  return {};
}

Status take_rw_layer(const std::string& image, const std::string& dir, bool link) {
  const std::string taken = dir + "/" + kRwImage, mnt = dir + "/" + kRwMount;
  ABX_TRY(link ? link_or_copy(image, taken) : copy_sparse_file(image, taken));
  ABX_TRY(mount_rw_image(taken, mnt));
  if (Status s = remove_tree(mnt + "/work/work"); !s) {
    ::umount2(mnt.c_str(), MNT_DETACH);
    return s;
  }
  return {};
}

Status sync_filesystem(const std::string& path) {
  ABX_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(path, O_RDONLY | O_DIRECTORY));
  if (::syncfs(fd.get()) != 0) return os::errno_error("syncfs " + path, errno);
  return {};
}

Status copy_sparse_file(const std::string& from, const std::string& to) {
  struct stat st;
  if (::stat(from.c_str(), &st) != 0) return os::errno_error("stat " + from, errno);
  return copy_sparse(from, to, static_cast<std::uint64_t>(st.st_size));
}

Status link_or_copy(const std::string& from, const std::string& to) {
  if (::link(from.c_str(), to.c_str()) == 0) return {};
  if (errno != EXDEV && errno != EPERM) return os::errno_error("link " + from + " -> " + to, errno);
  return copy_sparse_file(from, to);
}

bool wait_loop_detached(const std::string& image) {
  auto attached = [&] { return loop_backed_by(image) || loop_backed_by_inode(image); };
  return os::poll_until(std::chrono::steady_clock::now() + std::chrono::seconds(5),
                        os::Backoff{std::chrono::milliseconds(5), std::chrono::milliseconds(5)},
                        [&] { return !attached(); });
}

bool loop_backed_by(const std::string& image) {
  DIR* d = ::opendir("/sys/block");
  if (!d) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "loop", 4) != 0) continue;
    auto backing = read_file(std::string("/sys/block/") + e->d_name + "/loop/backing_file", 4096);
    if (backing && backing->rfind(image, 0) == 0 &&
        (backing->size() == image.size() || (*backing)[image.size()] == '\n')) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

bool loop_backed_by_inode(const std::string& file) {
  struct stat want;
  if (::stat(file.c_str(), &want) != 0) return false;
  DIR* d = ::opendir("/sys/block");
  if (!d) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "loop", 4) != 0) continue;
    // Bound devices only (an unbound one has no backing_file); the name there may be another
    // link's or end in " (deleted)", so the device and inode are what is compared.
    const std::string name = e->d_name;
    if (::access(("/sys/block/" + name + "/loop/backing_file").c_str(), F_OK) != 0) continue;
    auto loop = open_fd("/dev/" + name, O_RDONLY);
    loop_info64 info{};
    if (!loop || ::ioctl(loop->get(), LOOP_GET_STATUS64, &info) != 0) continue;
    if (info.lo_device == static_cast<std::uint64_t>(want.st_dev) &&
        info.lo_inode == static_cast<std::uint64_t>(want.st_ino)) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

Status remove_rw_layer(const std::string& dir) {
  std::string mnt = dir + "/" + kRwMount;
  // EINVAL: not a mount point (kHost, or a spawn that failed before mounting).
  if (::umount2(mnt.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL &&
      errno != ENOENT)
    return os::errno_error("umount " + mnt, errno);
  std::string image = dir + "/" + kRwImage;
  if (::unlink(image.c_str()) != 0 && errno != ENOENT)
    return os::errno_error("unlink " + image, errno);
  return {};
}

void remove_stage(const std::string& stage) {
  DIR* d = ::opendir(stage.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  for (const auto& n : names) {
    std::string p = stage + "/" + n;
    ::umount2(p.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    if (::rmdir(p.c_str()) != 0) ::unlink(p.c_str());
  }
  ::rmdir(stage.c_str());
}

void remove_recorded_stage(const std::string& dir, const std::string& id) {
  const std::string record = dir + "/" + kStageFile;
  auto stage = read_file(record, 4096);
  if (!stage) return;
  std::string path = stage->substr(0, stage->find('\n'));
  if (path.size() > id.size() + 1 && path[0] == '/' &&
      path.compare(path.size() - id.size() - 1, std::string::npos, "/" + id) == 0 &&
      path.find("/../") == std::string::npos)
    remove_stage(path);
  ::unlink(record.c_str());
}

}  // namespace abx::runtime
