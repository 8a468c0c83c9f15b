// Volumes (volumes.h): names, ids, mount paths, the create body's volumeMounts and the directory.
#include "volumes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

#include "abx/base/json.h"
#include "abx/testing/temp_dir.h"

namespace abx::platform {
namespace {

namespace json = boost::json;

Result<std::vector<store::VolumeMount>> mounts_of(std::string_view body) {
  return parse_volume_mounts(parse_json_strict(body).value().as_object());
}

TEST(Volumes, NamesAreE2Bs) {
  for (const char* ok : {"a", "my-volume", "Data_1", "x-_-y"}) EXPECT_TRUE(valid_volume_name(ok));
  for (const char* bad : {"", "a b", "a.b", "a/b", "é", "a\n"})
    EXPECT_FALSE(valid_volume_name(bad));
  EXPECT_TRUE(valid_volume_name(std::string(kMaxVolumeNameBytes, 'a')));
  EXPECT_FALSE(valid_volume_name(std::string(kMaxVolumeNameBytes + 1, 'a')));
  EXPECT_TRUE(valid_volume_id("1b4e28ba-2fa1-41d2-883f-0016d3cca427"));
  EXPECT_FALSE(valid_volume_id("1B4E28BA-2FA1-41D2-883F-0016D3CCA427"));
  EXPECT_FALSE(valid_volume_id("1b4e28ba2fa141d2883f0016d3cca427"));
  EXPECT_FALSE(valid_volume_id("../../../../etc/passwd-0000-0000-00"));
}

TEST(Volumes, MountPathsAreNormalisedOrRefused) {
  EXPECT_EQ(check_mount_path("/mnt/data").value(), "/mnt/data");
  EXPECT_EQ(check_mount_path("//mnt///data/").value(), "/mnt/data");
  EXPECT_EQ(check_mount_path("/home/user/.cache").value(), "/home/user/.cache");
  EXPECT_EQ(check_mount_path("/opt/abxd").value(), "/opt/abxd");  // not under /opt/abx
  EXPECT_EQ(check_mount_path("/procfs").value(), "/procfs");
  for (const char* bad : {"",
                          "mnt",
                          "./mnt",
                          "/",
                          "//",
                          "/mnt/../etc",
                          "/mnt/./x",
                          "/..",
                          "/a/..",
                          "/proc",
                          "/proc/self",
                          "/sys/fs",
                          "/dev",
                          "/dev/shm",
                          "/opt",
                          "/opt/abx",
                          "/opt/abx/bin",
                          "/run",
                          "/run/abx/token",
                          "/etc",
                          "/etc/resolv.conf",
                          "/etc/ssl",
                          "/usr/local/share",
                          "/mnt/a\nb"}) {
    auto r = check_mount_path(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_FALSE(check_mount_path("/" + std::string(kMaxMountPathBytes, 'a')).ok());
}

TEST(Volumes, VolumeMountsBody) {
  EXPECT_TRUE(mounts_of("{}").value().empty());
  EXPECT_TRUE(mounts_of(R"({"volumeMounts":null})").value().empty());
  auto m =
      mounts_of(R"({"volumeMounts":[{"name":"a","path":"/mnt/a/"},{"name":"a","path":"/b"}]})");
  ASSERT_TRUE(m.ok()) << m.error().message();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0], (store::VolumeMount{"", "a", "/mnt/a"}));
  EXPECT_EQ((*m)[1].path, "/b");

  auto err = [](std::string_view body) {
    auto r = mounts_of(body);
    return r.ok() ? std::string("ok") : r.error().message();
  };
  EXPECT_NE(err(R"({"volumeMounts":{}})").find("volumeMounts"), std::string::npos);
  EXPECT_NE(err(R"({"volumeMounts":[1]})").find("volumeMounts[0]"), std::string::npos);
  EXPECT_NE(err(R"({"volumeMounts":[{"path":"/a"}]})").find("volumeMounts[0].name"),
            std::string::npos);
  EXPECT_NE(err(R"({"volumeMounts":[{"name":"a"}]})").find("volumeMounts[0].path"),
            std::string::npos);
  EXPECT_NE(err(R"({"volumeMounts":[{"name":"a b","path":"/a"}]})").find("invalid volume name"),
            std::string::npos);
  EXPECT_NE(err(R"({"volumeMounts":[{"name":"a","path":"/a"},{"name":"b","path":"/a/b"}]})")
                .find("volumeMounts[1].path: '/a/b' is on, above or below '/a'"),
            std::string::npos);
  EXPECT_NE(err(R"({"volumeMounts":[{"name":"a","path":"/x"},{"name":"b","path":"//x/"}]})")
                .find("another mount"),
            std::string::npos);
  EXPECT_NE(err(R"({"volumeMounts":[{"name":"a","path":"/proc"}]})").find("volumeMounts[0].path"),
            std::string::npos);
  std::string many = R"({"volumeMounts":[)";
  for (std::size_t i = 0; i <= kMaxVolumeMounts; ++i)
    many += (i ? "," : "") + std::string(R"({"name":"a","path":"/m)") + std::to_string(i) + "\"}";
  EXPECT_NE(err(many + "]}").find("at most"), std::string::npos);
}

TEST(Volumes, JsonIsE2Bs) {
  store::VolumeRecord v{"1b4e28ba-2fa1-41d2-883f-0016d3cca427", "t", "data", "tok", 1};
  EXPECT_EQ(json::serialize(volume_json(v, false)),
            R"({"volumeID":"1b4e28ba-2fa1-41d2-883f-0016d3cca427","name":"data"})");
  EXPECT_EQ(volume_json(v, true).at("token").as_string(), "tok");
  EXPECT_EQ(json::serialize(volume_mounts_json({{"id", "data", "/mnt"}})),
            R"([{"name":"data","path":"/mnt"}])");
  EXPECT_EQ(json::serialize(volume_mounts_json({{"id", "data", "/mnt"}}, true)),
            R"([{"name":"data","path":"/mnt","volumeID":"id"}])");
}

TEST(Volumes, DirectoryIsMadeAndRemoved) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown to 1000 needs root";
  testing::TempDir home("abx-volumes");
  const std::string id = "1b4e28ba-2fa1-41d2-883f-0016d3cca427";
  ASSERT_TRUE(make_volume_dir(home.path().string(), id, 0).ok());
  struct stat parent {
  }, dir{};
  ASSERT_EQ(::stat((home.path() / "volumes").c_str(), &parent), 0);
  EXPECT_EQ(parent.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat(volume_dir(home.path().string(), id).c_str(), &dir), 0);
  EXPECT_EQ(dir.st_mode & 07777, 0755u);
  EXPECT_EQ(dir.st_uid, 1000u);
  EXPECT_EQ(dir.st_gid, 1000u);
  EXPECT_EQ(make_volume_dir(home.path().string(), id, 0).error().code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(make_volume_dir(home.path().string(), "../x", 0).error().code(),
            ErrorCode::kInvalidArgument);
  ASSERT_TRUE(remove_volume_dir(home.path().string(), id).ok());
  EXPECT_FALSE(std::filesystem::exists(volume_dir(home.path().string(), id)));
  EXPECT_TRUE(remove_volume_dir(home.path().string(), id).ok());  // gone already: fine
}

// The /sys/block loop devices whose backing file's name starts with `image`.
std::size_t loops_of(const std::string& image) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/sys/block")) {
    if (!e.path().filename().string().starts_with("loop")) continue;
    std::ifstream f(e.path() / "loop" / "backing_file");
    std::string backing;
    if (std::getline(f, backing) && backing.starts_with(image)) ++n;
  }
  return n;
}

bool is_mount_root(const std::string& dir) {
  struct stat self {
  }, parent{};
  return ::stat(dir.c_str(), &self) == 0 && ::stat((dir + "/..").c_str(), &parent) == 0 &&
         self.st_dev != parent.st_dev;
}

// Writes up to `bytes` of zeros to `path`; the errno that stopped it, or 0.
int fill(const std::string& path, std::size_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  std::vector<char> buf(1 << 20, 0);
  int err = 0;
  for (std::size_t done = 0; done < bytes && err == 0;) {
    ssize_t n = ::write(fd, buf.data(), std::min(buf.size(), bytes - done));
    if (n < 0)
      err = errno;
    else
      done += static_cast<std::size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  return err;
}

TEST(Volumes, QuotaIsAnExt4ImageMountedOnTheDirectory) {
  if (::geteuid() != 0 || ::access("/dev/loop-control", R_OK | W_OK) != 0)
    GTEST_SKIP() << "loop devices and mounts need root";
  testing::TempDir home("abx-volumes");
  const std::string h = home.path().string(), id = "2c4e28ba-2fa1-41d2-883f-0016d3cca428";
  const std::string dir = volume_dir(h, id), image = volume_image(h, id);
  EXPECT_EQ(make_volume_dir(h, id, 1u << 20).error().code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(make_volume_dir(h, id, 16u << 20).ok());
  EXPECT_TRUE(std::filesystem::exists(image));
  EXPECT_TRUE(is_mount_root(dir));
  EXPECT_EQ(loops_of(image), 1u);
  struct stat root {};
  ASSERT_EQ(::stat(dir.c_str(), &root), 0);
  EXPECT_EQ(root.st_mode & 07777, 0755u);
  EXPECT_EQ(root.st_uid, 1000u);
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // no lost+found

  EXPECT_EQ(fill(dir + "/big", 24u << 20), ENOSPC);  // over the quota
  std::filesystem::remove(dir + "/big");
  EXPECT_EQ(fill(dir + "/small", 4u << 20), 0);  // usable again

  // abxd's stop and start: unmounted, then mounted again with the files.
  unmount_volumes(h);
  EXPECT_FALSE(is_mount_root(dir));
  EXPECT_EQ(mount_volumes(h), 1u);
  EXPECT_TRUE(is_mount_root(dir));
  EXPECT_EQ(mount_volumes(h), 1u);  // still mounted: left so, not mounted twice
  EXPECT_EQ(std::filesystem::file_size(dir + "/small"), 4u << 20);
  EXPECT_EQ(loops_of(image), 1u);

  // A mount abxd's start did not make: a sandbox binding the volume mounts it first.
  unmount_volumes(h);
  ASSERT_FALSE(is_mount_root(dir));
  ASSERT_TRUE(ensure_volume_mounted(h, id).ok());
  EXPECT_TRUE(is_mount_root(dir));
  EXPECT_EQ(std::filesystem::file_size(dir + "/small"), 4u << 20);
  ASSERT_TRUE(ensure_volume_mounted(h, id).ok());  // mounted: left so
  EXPECT_EQ(loops_of(image), 1u);
  EXPECT_EQ(ensure_volume_mounted(h, "../x").error().code(), ErrorCode::kInvalidArgument);
  // One that cannot be mounted (its image is not a filesystem) is an error naming it.
  unmount_volumes(h);
  const std::string moved = image + ".moved";
  std::filesystem::rename(image, moved);
  { std::ofstream(image) << "not ext4"; }
  auto bad = ensure_volume_mounted(h, id);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(bad.error().message().find(id), std::string::npos) << bad.error().message();
  EXPECT_FALSE(is_mount_root(dir));
  std::filesystem::rename(moved, image);
  ASSERT_TRUE(ensure_volume_mounted(h, id).ok());

  ASSERT_TRUE(remove_volume_dir(h, id).ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_FALSE(std::filesystem::exists(image));
  EXPECT_EQ(loops_of(image), 0u);
}

}  // namespace
}  // namespace abx::platform
