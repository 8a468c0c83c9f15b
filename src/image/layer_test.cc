#include "abx/image/layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "abx/testing/temp_dir.h"

namespace abx::image {
namespace {

namespace fs = std::filesystem;

struct Tmp {
  abx::testing::TempDir dir{"abx-layer-test"};
  const fs::path& path = dir.path();
};

void write(const fs::path& p, const std::string& data) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << data;
}

// path -> "type:content-or-target"
std::map<std::string, std::string> read_layer(const std::string& file) {
  std::map<std::string, std::string> out;
  struct archive* a = archive_read_new();
  archive_read_support_filter_gzip(a);
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_filename(a, file.c_str(), 10240), ARCHIVE_OK);
  archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    std::string v;
    if (archive_entry_hardlink(e)) {
      v = std::string("link:") + archive_entry_hardlink(e);
    } else if (archive_entry_filetype(e) == AE_IFDIR) {
      v = "dir";
    } else if (archive_entry_filetype(e) == AE_IFLNK) {
      v = std::string("sym:") + archive_entry_symlink(e);
    } else {
      std::string data(static_cast<std::size_t>(archive_entry_size(e)), '\0');
      archive_read_data(a, data.data(), data.size());
      v = "file:" + data;
    }
    out[archive_entry_pathname(e)] = v;
  }
  archive_read_free(a);
  return out;
}

TEST(ImageLayer, FilesDirsLinksAndDeterminism) {
  Tmp t;
  fs::path d = t.path / "root";
  write(d / "bin/busybox", "ELF");
  write(d / "etc/a", "a");
  fs::create_symlink("busybox", d / "bin/sh");
  fs::create_hard_link(d / "etc/a", d / "etc/b");
  fs::create_directories(d / "proc");
  fs::create_directories(d / "opt/abx");
  LayerWriteOptions opt;
  opt.skip_if_empty = {"proc", "opt", "opt/abx"};
  std::string out1 = (t.path / "l1.tar.gz").string(), out2 = (t.path / "l2.tar.gz").string();
  int fd1 = ::open(out1.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  int fd2 = ::open(out2.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  auto b1 = write_layer_to(d.string(), fd1, opt);
  auto b2 = write_layer_to(d.string(), fd2, opt);
  ::close(fd1);
  ::close(fd2);
  ASSERT_TRUE(b1.ok()) << b1.error().message();
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b1->digest, b2->digest);
  EXPECT_EQ(b1->diff_id, b2->diff_id);
  EXPECT_NE(b1->digest, b1->diff_id);
  EXPECT_EQ(b1->size, static_cast<std::int64_t>(fs::file_size(out1)));
  auto entries = read_layer(out1);
  EXPECT_EQ(entries["bin/busybox"], "file:ELF");
  EXPECT_EQ(entries["bin/sh"], "sym:busybox");
  EXPECT_EQ(entries["etc/a"], "file:a");
  EXPECT_EQ(entries["etc/b"], "link:etc/a");
  EXPECT_EQ(entries.count("proc"), 0u);
  EXPECT_EQ(entries.count("opt"), 0u);
  EXPECT_EQ(entries.count("opt/abx"), 0u);
}

TEST(ImageLayer, OverlayWhiteoutsBecomeOciOnes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a 0:0 device node, trusted.* xattrs)";
  Tmp t;
  fs::path d = t.path / "upper";
  fs::create_directories(d / "etc");
  fs::create_directories(d / "var/cache");
  ASSERT_EQ(std::system(("mknod " + (d / "etc/gone").string() + " c 0 0").c_str()), 0);
  ASSERT_EQ(std::system(("mknod " + (d / "etc/null").string() + " c 1 3").c_str()), 0);
  ASSERT_EQ(::setxattr((d / "var/cache").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
  LayerWriteOptions opt;
  opt.overlay_upper = true;
  std::string out = (t.path / "l.tar.gz").string();
  int fd = ::open(out.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  auto b = write_layer_to(d.string(), fd, opt);
  ::close(fd);
  ASSERT_TRUE(b.ok()) << b.error().message();
  auto entries = read_layer(out);
  EXPECT_EQ(entries["etc/.wh.gone"], "file:");
  EXPECT_EQ(entries.count("etc/null"), 0u);  // other devices never go into a layer
  EXPECT_EQ(entries["var/cache/.wh..wh..opq"], "file:");
}

// write_tar (with_runtime's layer): the same walk, uncompressed, under a prefix whose
// directories come first; `reproducible` zeroes owners and mtimes and keeps modes.
TEST(ImageLayer, WriteTarUnderAPrefixReproducibly) {
  Tmp t;
  write(t.path / "bin/tool", "#!/bin/sh\n");
  fs::permissions(t.path / "bin/tool", fs::perms(0750));
  fs::create_symlink("tool", t.path / "bin/alias");
  ::utimensat(AT_FDCWD, (t.path / "bin/tool").c_str(), nullptr, 0);
  std::string tar;
  ASSERT_TRUE(write_tar(t.path.string(),
                        [&](std::string_view b) {
                          tar.append(b);
                          return Status{};
                        },
                        {.prefix = "opt/abx", .reproducible = true})
                  .ok());
  struct archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  ASSERT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  std::vector<std::string> names;
  archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    std::string name = archive_entry_pathname(e);
    names.push_back(name);
    EXPECT_EQ(archive_entry_uid(e), 0) << name;
    EXPECT_EQ(archive_entry_gid(e), 0) << name;
    EXPECT_EQ(archive_entry_mtime(e), 0) << name;
    if (name == "opt/abx/bin/tool") {
      EXPECT_EQ(archive_entry_perm(e), 0750);
    }
    if (name == "opt/") {
      EXPECT_EQ(archive_entry_perm(e), 0755);
    }
  }
  archive_read_free(a);
  EXPECT_EQ(names, (std::vector<std::string>{"opt/", "opt/abx/", "opt/abx/bin/",
                                             "opt/abx/bin/alias", "opt/abx/bin/tool"}));
  // An error of the output's own is the writer's error.
  auto failed =
      write_tar(t.path.string(), [](std::string_view) { return Status(unavailable("disk gone")); });
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message().find("disk gone"), std::string::npos)
      << failed.error().message();
}

}  // namespace
}  // namespace abx::image
