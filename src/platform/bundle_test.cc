#include "bundle.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "abx/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace abx::platform {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A small bundle like scripts/bundle.sh makes: bin/ and lib/, an executable and a symlink.
void make_bundle(const fs::path& at, const std::string& envd) {
  fs::create_directories(at / "bin");
  fs::create_directories(at / "lib");
  std::ofstream(at / "bin/abx-envd") << envd;
  fs::permissions(at / "bin/abx-envd", fs::perms(0755));
  std::ofstream(at / "lib/libc.so.6") << "libc";
  fs::create_symlink("libc.so.6", at / "lib/libc.so");
}

ino_t inode(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST(Bundle, PinnedOncePerVersionAndKeptWhileNamed) {
  testing::TempDir tmp("abx-bundle");
  const fs::path bundle = tmp / "bundle", home = tmp / "home";
  make_bundle(bundle, "envd v1");
  auto v1 = pin_bundle(home.string(), bundle.string());
  ASSERT_TRUE(v1.ok()) << v1.error().to_string();
  EXPECT_EQ(fs::path(*v1).parent_path(), home / "bundles");
  EXPECT_EQ(slurp(fs::path(*v1) / "bin/abx-envd"), "envd v1");
  EXPECT_EQ(inode(fs::path(*v1) / "bin/abx-envd"), inode(bundle / "bin/abx-envd"));  // a link
  EXPECT_EQ(fs::status(fs::path(*v1) / "bin/abx-envd").permissions(), fs::perms(0755));
  EXPECT_EQ(fs::read_symlink(fs::path(*v1) / "lib/libc.so"), "libc.so.6");
  EXPECT_EQ(pin_bundle(home.string(), bundle.string()).value(), *v1);  // same files, same version

  // Replaced the way an upgrade does it: a new directory of new files.
  fs::remove_all(bundle);
  make_bundle(bundle, "envd v2, larger");
  auto v2 = pin_bundle(home.string(), bundle.string());
  ASSERT_TRUE(v2.ok()) << v2.error().to_string();
  EXPECT_NE(*v2, *v1);
  EXPECT_EQ(slurp(fs::path(*v1) / "bin/abx-envd"), "envd v1");  // the old one is intact
  EXPECT_EQ(slurp(fs::path(*v2) / "bin/abx-envd"), "envd v2, larger");

  // A pin cut short leaves a partial directory: pruning removes it and what nothing names.
  fs::create_directories(home / "bundles/.partial-0123");
  EXPECT_EQ(prune_bundles(home.string(), {*v1, *v2}), 0);
  EXPECT_TRUE(fs::exists(*v1));
  EXPECT_FALSE(fs::exists(home / "bundles/.partial-0123"));
  EXPECT_EQ(prune_bundles(home.string(), {*v2}), 1);
  EXPECT_FALSE(fs::exists(*v1));
  EXPECT_TRUE(fs::exists(fs::path(*v2) / "bin/abx-envd"));
}

// A home on another filesystem than the bundle: the files are copied, with their permissions.
TEST(Bundle, CopiedWhereLinksCannotReach) {
  testing::TempDir tmp("abx-bundle");
  const fs::path bundle = tmp / "bundle";
  make_bundle(bundle, "envd");
  struct stat a {
  }, b{};
  if (::stat("/dev/shm", &b) != 0 || ::stat(tmp.string().c_str(), &a) != 0 || a.st_dev == b.st_dev)
    GTEST_SKIP() << "no /dev/shm on another filesystem than " << tmp.string();
  const fs::path home = fs::path("/dev/shm") / tmp.path().filename();
  auto v = pin_bundle(home.string(), bundle.string());
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  EXPECT_EQ(slurp(fs::path(*v) / "bin/abx-envd"), "envd");
  EXPECT_EQ(fs::status(fs::path(*v) / "bin/abx-envd").permissions(), fs::perms(0755));
  EXPECT_EQ(fs::read_symlink(fs::path(*v) / "lib/libc.so"), "libc.so.6");
  fs::remove_all(home);
}

TEST(Bundle, AMissingBundleIsAClearError) {
  testing::TempDir tmp("abx-bundle");
  auto v = pin_bundle((tmp / "home").string(), (tmp / "nope").string());
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message().find("nope"), std::string::npos) << v.error().message();
}

}  // namespace
}  // namespace abx::platform
