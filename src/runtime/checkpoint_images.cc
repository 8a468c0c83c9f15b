// The CRIU images a restore reads and rewrites: userns-*.img into another uid range (a fork),
// a private copy of the image list, and the mount targets of mountpoints-*.img checked.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/try.h"
#include "abx/runtime/checkpoint.h"
#include "checkpoint_internal.h"
#include "disk.h"
#include "sys.h"

namespace abx::runtime {
namespace {

// --- A restore into another uid range (a fork) ---------------------------------------------
//
// CRIU writes the sandbox's id maps into userns-<id>.img and restores exactly those, so a
// restore into another slot rewrites them (criu-spike.md 2.3 did it with crit). An image is two
// u32 magics, then entries of <u32 length><protobuf>; userns_entry is
//   repeated uid_gid_extent uid_map = 1; repeated uid_gid_extent gid_map = 2;
// with uid_gid_extent { uint32 first = 1; uint32 lower_first = 2; uint32 count = 3; }.

bool get_varint(std::string_view& in, std::uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    *v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

void put_varint(std::string& out, std::uint64_t v) {
  do {
    auto b = static_cast<unsigned char>(v & 0x7f);
    v >>= 7;
    out.push_back(static_cast<char>(v ? b | 0x80 : b));
  } while (v);
}

// One uid_gid_extent with lower_first `from` turned into `to` (other extents as they are).
Result<std::string> rewrite_extent(std::string_view in, std::uint32_t from, std::uint32_t to,
                                   int* changed) {
  std::string out;
  while (!in.empty()) {
    std::uint64_t key = 0, value = 0;
    if (!get_varint(in, &key) || (key & 7) != 0 || !get_varint(in, &value))
      return internal_error("userns image: unexpected field in an id extent");
    if (key >> 3 == 2 && value == from) {
      value = to;
      ++*changed;
    }
    put_varint(out, key);
    put_varint(out, value);
  }
  return out;
}

Result<std::string> rewrite_userns_image(const std::string& image, std::uint32_t from,
                                         std::uint32_t to) {
  if (image.size() < 8) return internal_error("userns image: too short");
  std::string out = image.substr(0, 8);  // the magics
  std::string_view rest = std::string_view(image).substr(8);
  int changed = 0;
  while (rest.size() >= 4) {
    std::uint32_t len = 0;
    std::memcpy(&len, rest.data(), 4);
    rest.remove_prefix(4);
    if (len > rest.size()) return internal_error("userns image: truncated entry");
    std::string_view entry = rest.substr(0, len);
    rest.remove_prefix(len);
    std::string body;
    while (!entry.empty()) {
      std::uint64_t key = 0, size = 0;
      if (!get_varint(entry, &key) || (key & 7) != 2 || !get_varint(entry, &size) ||
          size > entry.size())
        return internal_error("userns image: unexpected field");
      ABX_ASSIGN_OR_RETURN(std::string ext,
                           rewrite_extent(entry.substr(0, size), from, to, &changed));
      entry.remove_prefix(size);
      put_varint(body, key);
      put_varint(body, ext.size());
      body += ext;
    }
    auto n = static_cast<std::uint32_t>(body.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += body;
  }
  if (!rest.empty() || changed == 0)
    return internal_error("userns image: no id map with host id " + std::to_string(from));
  return out;
}

}  // namespace

Status images_for_restore(const std::string& dir, const std::string& to, std::uint32_t from,
                          std::uint32_t to_first) {
  if (::mkdir(to.c_str(), 0711) != 0) return os::errno_error("mkdir " + to, errno);
  if (::chmod(to.c_str(), 0711) != 0) return os::errno_error("chmod " + to, errno);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return os::errno_error("opendir " + dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (e->d_type == DT_REG && n != kRwImage && n != kJsonFile && n != kSealFile)
      names.push_back(n);
  }
  ::closedir(d);
  for (const auto& n : names) {
    const std::string src = dir + "/" + n, dst = to + "/" + n;
    if (from != to_first && n.starts_with("userns-") && n.ends_with(".img")) {
      ABX_ASSIGN_OR_RETURN(const std::string image, read_file(src, 1 << 20));
      ABX_ASSIGN_OR_RETURN(const std::string rewritten,
                           rewrite_userns_image(image, from, to_first));
      ABX_TRY(create_file(dst, rewritten));
      if (::chmod(dst.c_str(), 0644) != 0) return os::errno_error("chmod " + dst, errno);
      continue;
    }
    if (n.starts_with("pages-")) {
      ABX_TRY(link_or_copy(src, dst));
      continue;
    }
    ABX_ASSIGN_OR_RETURN(const std::string data, read_file(src, 64 << 20));
    ABX_TRY(create_file(dst, data));
    if (::chmod(dst.c_str(), 0644) != 0) return os::errno_error("chmod " + dst, errno);
  }
  return {};
}

namespace {

// The mount points in CRIU's mountpoints-*.img images (mnt_entry: mnt_id = 2,
// parent_mnt_id = 4, mountpoint = 7) that sit directly on the root mount: the ones CRIU mounts
// onto paths of the restored root itself. Mounts below other mounts (a tmpfs /dev's pts) are
// made inside filesystems CRIU restores from the images, which the seal covers.
Result<std::vector<std::string>> root_mount_targets(const std::string& images) {
  struct Entry {
    std::uint64_t id = 0, parent = 0;
    std::string at;
  };
  std::vector<Entry> entries;
  DIR* d = ::opendir(images.c_str());
  if (!d) return os::errno_error("opendir " + images, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.starts_with("mountpoints-") && n.ends_with(".img")) names.push_back(n);
  }
  ::closedir(d);
  auto bad = [](const std::string& n, const char* why) {
    return Error(ErrorCode::kFailedPrecondition, "checkpoint image " + n + ": " + why);
  };
  for (const auto& n : names) {
    ABX_ASSIGN_OR_RETURN(const std::string image, read_file(images + "/" + n, 16 << 20));
    if (image.size() < 8) return bad(n, "too short");
    std::string_view rest = std::string_view(image).substr(8);  // the magics
    while (rest.size() >= 4) {
      std::uint32_t len = 0;
      std::memcpy(&len, rest.data(), 4);
      rest.remove_prefix(4);
      if (len > rest.size()) return bad(n, "truncated entry");
      std::string_view entry = rest.substr(0, len);
      rest.remove_prefix(len);
      Entry m;
      while (!entry.empty()) {
        std::uint64_t key = 0, v = 0;
        if (!get_varint(entry, &key)) return bad(n, "bad field");
        switch (key & 7) {
          case 0:
            if (!get_varint(entry, &v)) return bad(n, "bad varint");
            if (key >> 3 == 2) m.id = v;
            if (key >> 3 == 4) m.parent = v;
            break;
          case 1:
          case 5: {
            const std::size_t w = (key & 7) == 1 ? 8 : 4;
            if (entry.size() < w) return bad(n, "truncated field");
            entry.remove_prefix(w);
            break;
          }
          case 2:
            if (!get_varint(entry, &v) || v > entry.size()) return bad(n, "bad string");
            if (key >> 3 == 7) m.at = std::string(entry.substr(0, v));
            entry.remove_prefix(v);
            break;
          default:
            return bad(n, "unknown wire type");
        }
      }
      entries.push_back(std::move(m));
    }
  }
  auto norm = [](std::string p) {
    if (p.starts_with(".")) p.erase(0, 1);
    return p;
  };
  std::vector<std::string> out;
  for (const auto& root : entries) {
    if (norm(root.at) != "/") continue;
    for (const auto& m : entries)
      if (m.parent == root.id && &m != &root && norm(m.at) != "/") out.push_back(norm(m.at));
  }
  return out;
}

}  // namespace

Status check_mount_targets(int root, const std::string& images, const SandboxConfig& config) {
  ABX_ASSIGN_OR_RETURN(std::vector<std::string> targets, root_mount_targets(images));
  for (const auto& b : config.binds) targets.push_back(b.target);
  for (const auto& t : targets) {
    std::string rel = t;
    while (rel.starts_with("/")) rel.erase(0, 1);
    if (rel.empty()) continue;
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;  // not O_NOFOLLOW: a final symlink is then ELOOP too
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH;
    const long fd = ::syscall(SYS_openat2, root, rel.c_str(), &how, sizeof how);
    if (fd >= 0) {
      ::close(static_cast<int>(fd));
      continue;
    }
    const int err = errno;
    if (err == ENOENT) continue;
    return Error(ErrorCode::kFailedPrecondition,
                 "restore refused: the mount target " + t + " in the sandbox's saved root " +
                     (err == ELOOP   ? "is or passes through a symlink"
                      : err == EXDEV ? "leads out of the root"
                                     : "cannot be resolved (" + os::errno_name(err) + ")") +
                     "; CRIU would mount onto wherever it leads");
  }
  return {};
}

}  // namespace abx::runtime
