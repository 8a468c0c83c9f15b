// Layer extraction against hostile tarballs (built in the test with libarchive's writer). The
// tests run as root, as the store does.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "abx/image/store.h"
#include "abx/testing/temp_dir.h"
#include "test_tar.h"

namespace abx::image {
namespace {

namespace fs = std::filesystem;
using testing::TarBuilder;

class ImageExtract : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "extraction restores owners and makes whiteouts: root";
    open_store({});
  }
  void open_store(LayerLimits limits) {
    auto s = Store::open((dir_ / "store").string(), limits);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    store_ = std::make_unique<Store>(std::move(*s));
  }
  Result<Image> add(const std::vector<std::string>& layers, std::string_view type = kOciLayerTar) {
    auto b = testing::put_image(*store_, layers, type);
    if (!b.ok()) return b.error();
    return store_->add_image(b->manifest);
  }
  // Nothing half-extracted anywhere.
  void expect_clean() {
    EXPECT_TRUE(fs::is_empty(dir_ / "store/layers/sha256"));
    EXPECT_TRUE(fs::is_empty(dir_ / "store/tmp"));
  }

  abx::testing::TempDir dir_{"abx-image-extract"};
  std::unique_ptr<Store> store_;
};

TEST_F(ImageExtract, RestoresOwnersModesTimesLinksAndUserXattrs) {
  TarBuilder t;
  t.dir("usr/", {.mode = 0755});
  t.dir("usr/bin", {.mode = 0750, .uid = 7, .gid = 8});
  t.file("usr/bin/su", "#!su", {.mode = 04755, .mtime = 1'234'567'890});
  t.file("./home/u/f", "data", {.mode = 0600, .uid = 1000, .gid = 1000});
  t.symlink("bin", "usr/bin");
  t.symlink("abs", "/etc/passwd");  // a symlink may point anywhere; it is resolved in the sandbox
  t.hardlink("usr/bin/su2", "usr/bin/su");
  t.file("x", "x",
         {.xattrs = {{"user.keep", "1"},
                     {"trusted.overlay.opaque", "y"},
                     {"security.selinux", "system_u:object_r:x"}}});
  auto img = add({t.finish()});
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  ASSERT_EQ(img->layer_dirs.size(), 1u);
  fs::path root = img->layer_dirs[0];
  EXPECT_EQ(root.string(), dir_.string() + "/store/layers/sha256/" + img->layers[0].substr(7));

  struct stat st {};
  ASSERT_EQ(::lstat((root / "usr/bin/su").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u);
  EXPECT_EQ(st.st_mtime, 1'234'567'890);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_EQ(::lstat((root / "usr/bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_uid, 7u);
  EXPECT_EQ(st.st_gid, 8u);
  ASSERT_EQ(::lstat((root / "home/u/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(fs::read_symlink(root / "bin"), "usr/bin");
  EXPECT_EQ(fs::read_symlink(root / "abs"), "/etc/passwd");

  char v[16];
  EXPECT_EQ(::lgetxattr((root / "x").c_str(), "user.keep", v, sizeof v), 1);
  EXPECT_LT(::lgetxattr((root / "x").c_str(), "trusted.overlay.opaque", v, sizeof v), 0);
  EXPECT_LT(::lgetxattr((root / "x").c_str(), "security.selinux", v, sizeof v), 0);
  EXPECT_TRUE(fs::is_empty(dir_ / "store/tmp"));

  // Shared: a second image with the same layer reuses the directory.
  auto again = add({TarBuilder().finish()});
  ASSERT_TRUE(again.ok());
}

TEST_F(ImageExtract, RefusesEscapes) {
  fs::path outside = dir_ / "outside";
  fs::create_directories(outside);
  struct Case {
    const char* what;
    std::string tar;
  };
  std::vector<Case> cases;
  cases.push_back({"dotdot", TarBuilder().file("a/../../escape", "x").finish()});
  cases.push_back({"absolute", TarBuilder().file((outside / "abs").string(), "x").finish()});
  cases.push_back({"symlink then file",
                   TarBuilder().symlink("a", outside.string()).file("a/pwned", "x").finish()});
  cases.push_back(
      {"relative symlink then file",
       TarBuilder().symlink("a", "../../../../../../..").file("a/tmp/p", "x").finish()});
  // "a" is known to be a directory after a/x; the entry "a" itself makes it unknown again.
  cases.push_back(
      {"directory, then a symlink over it, then a file through it",
       TarBuilder().file("a/x", "x").symlink("a", outside.string()).file("a/pwned", "x").finish()});
  cases.push_back({"hardlink outside", TarBuilder().hardlink("passwd", "/etc/passwd").finish()});
  cases.push_back({"hardlink dotdot", TarBuilder().hardlink("p", "../../etc/passwd").finish()});
  cases.push_back(
      {"hardlink to later", TarBuilder().hardlink("l", "later").file("later", "x").finish()});
  for (const auto& c : cases) {
    auto img = add({c.tar});
    ASSERT_FALSE(img.ok()) << c.what;
    EXPECT_EQ(img.error().code(), ErrorCode::kInvalidArgument) << c.what;
    EXPECT_NE(img.error().message().find("layer sha256:"), std::string::npos)
        << c.what << ": " << img.error().message();
    expect_clean();
  }
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_FALSE(fs::exists(dir_ / "escape"));
  EXPECT_FALSE(fs::exists(dir_ / "store/escape"));
}

// A symlink replaced by a file of the same name: the file replaces the link, never writes
// through it.
TEST_F(ImageExtract, FileReplacesSymlinkNotItsTarget) {
  fs::path outside = dir_ / "outside";
  fs::create_directories(outside);
  testing::write_file(outside / "target", "original");
  auto img = add({TarBuilder()
                      .symlink("link", (outside / "target").string())
                      .file("link", "replaced")
                      .symlink("rel", "../../../../../../../../" + (outside / "target").string())
                      .file("rel", "replaced")
                      .finish()});
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  std::ifstream f(outside / "target");
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "original");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(fs::path(img->layer_dirs[0]) / "link")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(fs::path(img->layer_dirs[0]) / "rel")));
}

// A directory entry over a symlink to a directory outside must not chmod/chown/utime the target.
TEST_F(ImageExtract, DirectoryOverSymlinkLeavesTargetAlone) {
  fs::path outside = dir_ / "outside";
  fs::create_directories(outside);
  ::chmod(outside.c_str(), 0755);
  struct stat before {};
  ASSERT_EQ(::stat(outside.c_str(), &before), 0);
  auto img = add({TarBuilder()
                      .symlink("d", outside.string())
                      .dir("d", {.mode = 0777, .uid = 4242, .gid = 4242, .mtime = 1})
                      .finish()});
  struct stat after {};
  ASSERT_EQ(::stat(outside.c_str(), &after), 0);
  EXPECT_EQ(after.st_mode, before.st_mode);
  EXPECT_EQ(after.st_uid, before.st_uid);
  EXPECT_EQ(after.st_mtime, before.st_mtime);
  if (img.ok()) {
    EXPECT_TRUE(fs::is_directory(fs::symlink_status(fs::path(img->layer_dirs[0]) / "d")));
  } else {
    expect_clean();
  }
}

TEST_F(ImageExtract, SkipsDevicesFifosSockets) {
  TarBuilder t;
  t.special("dev/sda", AE_IFBLK, makedev(8, 0));
  t.special("dev/null", AE_IFCHR, makedev(1, 3));
  t.special("run/fifo", AE_IFIFO);
  t.special("run/sock", AE_IFSOCK);
  t.file("ok", "ok");
  auto img = add({t.finish()});
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  fs::path root = img->layer_dirs[0];
  EXPECT_TRUE(fs::exists(root / "ok"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root / "dev/sda")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root / "dev/null")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root / "run/fifo")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root / "run/sock")));
}

TEST_F(ImageExtract, WhiteoutsBecomeOverlayWhiteouts) {
  std::string lower =
      TarBuilder().file("etc/gone", "old").file("etc/kept", "k").file("opq/old", "o").finish();
  TarBuilder up;
  up.dir("etc");
  up.file("etc/.wh.gone", "");
  up.file(".wh.toplevel", "");
  up.dir("opq");
  up.file("opq/.wh..wh..opq", "");
  up.file("opq/new", "n");
  up.file("etc/.wh..wh.plnk", "");  // aufs bookkeeping: dropped
  auto img = add({lower, up.finish()});
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  ASSERT_EQ(img->layer_dirs.size(), 2u);
  fs::path upper = img->layer_dirs[1];
  struct stat st {};
  ASSERT_EQ(::lstat((upper / "etc/gone").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(0, 0));
  ASSERT_EQ(::lstat((upper / "toplevel").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_FALSE(fs::exists(fs::symlink_status(upper / "etc/.wh.gone")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(upper / "etc/.wh..wh.plnk")));
  char v[4] = {};
  ASSERT_EQ(::getxattr((upper / "opq").c_str(), "trusted.overlay.opaque", v, sizeof v), 1);
  EXPECT_EQ(v[0], 'y');

  // The kernel agrees: mount the two layers and look. (The runtime owns mounts; this only
  // checks the on-disk format, through mount(8), and is skipped where overlayfs is missing.)
  fs::path mnt = dir_ / "mnt";
  fs::create_directories(mnt);
  std::string cmd = "mount -t overlay overlay -o lowerdir=" + img->layer_dirs[1] + ":" +
                    img->layer_dirs[0] + " " + mnt.string() + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "overlayfs not mountable here";
  EXPECT_FALSE(fs::exists(mnt / "etc/gone"));
  EXPECT_TRUE(fs::exists(mnt / "etc/kept"));
  EXPECT_FALSE(fs::exists(mnt / "opq/old"));
  EXPECT_TRUE(fs::exists(mnt / "opq/new"));
  EXPECT_EQ(std::system(("umount " + mnt.string()).c_str()), 0);
}

TEST_F(ImageExtract, GzipBombHitsRatioLimit) {
  open_store({.max_entries = 100, .max_bytes = 1ull << 30, .max_ratio = 20});
  std::string bomb = TarBuilder(TarBuilder::Compression::kGzip).zeros("zeros", 8 << 20).finish();
  ASSERT_LT(bomb.size(), 64u << 10);
  auto img = add({bomb}, kOciLayerGzip);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(img.error().message().find("expansion ratio"), std::string::npos)
      << img.error().message();
  EXPECT_NE(img.error().message().find("layer sha256:"), std::string::npos);
  expect_clean();
}

TEST_F(ImageExtract, EntryAndByteLimits) {
  open_store({.max_entries = 3, .max_bytes = 1000, .max_ratio = 1000});
  auto many = add({TarBuilder().file("a", "").file("b", "").file("c", "").file("d", "").finish()});
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(many.error().message().find("entry count limit of 3"), std::string::npos);
  expect_clean();
  auto big = add(
      {TarBuilder().file("a", std::string(600, 'a')).file("b", std::string(600, 'b')).finish()});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message().find("expanded size limit of 1000"), std::string::npos);
  expect_clean();
}

TEST_F(ImageExtract, ZstdAndGzipLayers) {
  auto z =
      add({TarBuilder(TarBuilder::Compression::kZstd).file("z", "zstd").finish()}, kOciLayerZstd);
  ASSERT_TRUE(z.ok()) << z.error().to_string();
  EXPECT_TRUE(fs::exists(fs::path(z->layer_dirs[0]) / "z"));
  auto g =
      add({TarBuilder(TarBuilder::Compression::kGzip).file("g", "gz").finish()}, kDockerLayerGzip);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_TRUE(fs::exists(fs::path(g->layer_dirs[0]) / "g"));
}

TEST_F(ImageExtract, CorruptArchiveLeavesNothing) {
  std::string tar =
      TarBuilder(TarBuilder::Compression::kGzip).file("f", std::string(5000, 'x')).finish();
  tar.resize(tar.size() / 2);  // a truncated gzip stream, stored under its own (valid) digest
  auto img = add({tar}, kOciLayerGzip);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kInvalidArgument);
  expect_clean();
}

// A write the disk refuses says why. libarchive's own text leaves the errno out ("Write failed",
// "Can't create '...'"); stop 53's CI failed on such a line, most likely on a full disk. Here
// RLIMIT_FSIZE refuses the write (EFBIG) with no mount needed.
TEST_F(ImageExtract, AWriteTheDiskRefusesNamesTheSystemsReason) {
  open_store({.max_ratio = 1000000});
  std::string layer =
      TarBuilder(TarBuilder::Compression::kGzip).file("big", std::string(4 << 20, 'x')).finish();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto img = add({layer}, kOciLayerGzip);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(img.ok());
  EXPECT_NE(img.error().message().find("File too large"), std::string::npos)
      << img.error().to_string();
  expect_clean();
}

}  // namespace
}  // namespace abx::image
