#include "volumes.h"

#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>

#include "abx/base/json.h"
#include "abx/base/log.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/runtime/volume_image.h"
#include "bundle.h"
#include "network.h"

namespace abx::platform {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// The sandbox's default user (templates' `user`): the owner of a new volume's root.
constexpr unsigned kVolumeOwner = 1000;

// Whether `a` is `b` or a directory above or below it.
bool overlaps(std::string_view a, std::string_view b) {
  auto under = [](std::string_view x, std::string_view dir) {
    return x.size() > dir.size() && x.starts_with(dir) && x[dir.size()] == '/';
  };
  return a == b || under(a, b) || under(b, a);
}

}  // namespace

bool valid_volume_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxVolumeNameBytes &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
         });
}

bool valid_volume_id(std::string_view id) {
  if (id.size() != 36) return false;
  for (std::size_t i = 0; i < id.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    const char c = id[i];
    if (dash != (c == '-')) return false;
    if (!dash && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<std::string> check_mount_path(std::string_view path) {
  const std::string shown(path.substr(0, 128));
  if (path.empty() || path[0] != '/')
    return invalid_argument("mount path '" + shown + "' must be absolute");
  if (path.size() > kMaxMountPathBytes)
    return invalid_argument("mount path over " + std::to_string(kMaxMountPathBytes) + " bytes");
  if (std::any_of(path.begin(), path.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
    return invalid_argument("mount path '" + shown + "' has a control character");
  std::string norm;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "." || part == "..")
      return invalid_argument("mount path '" + shown + "' must not have . or .. components");
    if (!part.empty()) (norm += '/') += part;
    start = end + 1;
  }
  if (norm.empty()) return invalid_argument("mount path must not be / (the sandbox's root)");
  for (std::string_view reserved :
       {std::string_view("/proc"), std::string_view("/sys"), std::string_view("/dev"),
        std::string_view(kBundleInside), std::string_view("/run/abx"),
        std::string_view("/etc/resolv.conf"), std::string_view(kSandboxCaBundle),
        std::string_view(kSandboxEgressCa)}) {
    if (overlaps(norm, reserved))
      return invalid_argument("mount path '" + shown + "' is on, above or below " +
                              std::string(reserved) + ", which abxd mounts itself");
  }
  return norm;
}

Result<std::vector<store::VolumeMount>> parse_volume_mounts(const json::object& body) {
  std::vector<store::VolumeMount> out;
  ABX_ASSIGN_OR_RETURN(const json::array* arr, json_optional_array(body, "volumeMounts", ""));
  if (arr == nullptr) return out;
  if (arr->size() > kMaxVolumeMounts)
    return invalid_argument("volumeMounts: at most " + std::to_string(kMaxVolumeMounts) +
                            " mounts per sandbox");
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const std::string at = json_path_index("volumeMounts", i);
    ABX_ASSIGN_OR_RETURN(const json::object* m, json_as_object((*arr)[i], at));
    ABX_ASSIGN_OR_RETURN(std::string name, json_required_string(*m, "name", at));
    ABX_ASSIGN_OR_RETURN(std::string path, json_required_string(*m, "path", at));
    if (!valid_volume_name(name))
      return invalid_argument(at + ".name: invalid volume name (1.." +
                              std::to_string(kMaxVolumeNameBytes) + " of A-Z a-z 0-9 _ -)");
    auto norm = check_mount_path(path);
    if (!norm) return invalid_argument(at + ".path: " + norm.error().message());
    for (const auto& prev : out) {
      if (overlaps(prev.path, *norm))
        return invalid_argument(at + ".path: '" + *norm + "' is on, above or below '" + prev.path +
                                "', another mount of the sandbox");
    }
    out.push_back({"", std::move(name), std::move(*norm)});
  }
  return out;
}

json::object volume_json(const store::VolumeRecord& v, bool with_token) {
  json::object o{{"volumeID", v.id}, {"name", v.name}};
  if (with_token) o["token"] = v.token;
  return o;
}

json::array volume_mounts_json(const std::vector<store::VolumeMount>& mounts, bool with_ids) {
  json::array a;
  for (const auto& m : mounts) {
    json::object o{{"name", m.name}, {"path", m.path}};
    if (with_ids) o["volumeID"] = m.volume_id;
    a.emplace_back(std::move(o));
  }
  return a;
}

std::string volume_dir(const std::string& home, std::string_view id) {
  return home + "/volumes/" + std::string(id);
}

std::string volume_image(const std::string& home, std::string_view id) {
  return volume_dir(home, id) + ".img";
}

namespace {

// The volume's root: 1000:1000, 0755.
Status own_volume_root(const std::string& dir) {
  std::error_code ec;
  fs::permissions(dir,
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  ec);
  if (ec) return os::errno_error("chmod " + dir, ec.value());
  if (::chown(dir.c_str(), kVolumeOwner, kVolumeOwner) != 0)
    return os::errno_error("chown " + dir, errno);
  return {};
}

// The ids of <home>/volumes/<id>.img.
std::vector<std::string> imaged_volumes(const std::string& home) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(home) / "volumes", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 40 && name.ends_with(".img") && valid_volume_id(name.substr(0, 36)))
      out.push_back(name.substr(0, 36));
  }
  return out;
}

}  // namespace

Status make_volume_dir(const std::string& home, std::string_view id, std::uint64_t quota_bytes) {
  if (!valid_volume_id(id)) return invalid_argument("invalid volume id");
  if (quota_bytes != 0 && (quota_bytes < kMinVolumeBytes || quota_bytes > kMaxVolumeBytes))
    return invalid_argument("volume size out of range");
  const fs::path parent = fs::path(home) / "volumes";
  std::error_code ec;
  fs::create_directory(parent, ec);
  if (ec) return os::errno_error("create " + parent.string(), ec.value());
  fs::permissions(parent, fs::perms::owner_all, ec);
  if (ec) return os::errno_error("chmod " + parent.string(), ec.value());
  const std::string dir = volume_dir(home, id);
  if (!fs::create_directory(dir, ec) || ec)
    return ec ? os::errno_error("create " + dir, ec.value())
              : Error(ErrorCode::kAlreadyExists, "volume directory " + dir + " exists already");
  // With a quota the directory itself is only the mount point: mode 0 (a sandbox that got it
  // unmounted, after a failed mount at abxd's start, has no `user` access to the home's disk).
  Status s = quota_bytes == 0 ? own_volume_root(dir) : Status{};
  if (quota_bytes != 0) fs::permissions(dir, fs::perms::none, ec);
  if (s && quota_bytes != 0) {
    const std::string image = volume_image(home, id);
    s = runtime::make_volume_image(parent.string(), image, dir, quota_bytes);
    if (s) s = own_volume_root(dir);  // now the image's root
    if (!s) {
      (void)runtime::remove_volume_image(image, dir);
      fs::remove(image, ec);
    }
  }
  if (!s) fs::remove(dir, ec);
  return s;
}

Status remove_volume_dir(const std::string& home, std::string_view id) {
  if (!valid_volume_id(id)) return invalid_argument("invalid volume id");
  const std::string dir = volume_dir(home, id), image = volume_image(home, id);
  std::error_code ec;
  if (fs::exists(image, ec)) {
    // The files go with the image: unmounted first, so nothing is deleted file by file.
    ABX_TRY(runtime::remove_volume_image(image, dir));
  }
  fs::remove_all(dir, ec);
  if (ec) return os::errno_error("remove " + dir, ec.value());
  return {};
}

std::size_t mount_volumes(const std::string& home) {
  std::size_t mounted = 0;
  for (const auto& id : imaged_volumes(home)) {
    if (Status s = runtime::mount_volume_image(volume_image(home, id), volume_dir(home, id)); !s)
      Logger("volumes").error("volume " + id + " not mounted: " + s.error().message());
    else
      ++mounted;
  }
  return mounted;
}

Status ensure_volume_mounted(const std::string& home, std::string_view id) {
  if (!valid_volume_id(id)) return invalid_argument("invalid volume id");
  const std::string image = volume_image(home, id);
  std::error_code ec;
  if (!fs::exists(image, ec)) return {};  // no quota: a plain directory
  if (Status s = runtime::mount_volume_image(image, volume_dir(home, id)); !s)
    return Error(ErrorCode::kUnavailable,
                 "volume " + std::string(id) + " cannot be mounted: " + s.error().message());
  return {};
}

void unmount_volumes(const std::string& home) {
  for (const auto& id : imaged_volumes(home)) {
    if (Status s = runtime::unmount_volume(volume_dir(home, id)); !s)
      Logger("volumes").warn("volume " + id + " not unmounted: " + s.error().message());
  }
}

}  // namespace abx::platform
