// ConfinedTree: the volume content API's file operations, and that no path or symlink leaves the
// tree (what a sandbox that mounts the volume may have planted there).
#include "abx/runtime/confined_tree.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "abx/testing/temp_dir.h"

namespace abx::runtime {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int source_of(const std::string& data, abx::testing::TempDir& d) {
  const auto p = d.path() / "src";
  std::ofstream(p) << data;
  return ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
}

TEST(ConfinedTree, NormalizesAndRefusesDotDot) {
  EXPECT_EQ(*normalize_tree_path("a//b/./c/"), "/a/b/c");
  EXPECT_EQ(*normalize_tree_path(""), "/");
  EXPECT_EQ(*normalize_tree_path("/"), "/");
  EXPECT_FALSE(normalize_tree_path("a/../b").ok());
  EXPECT_FALSE(normalize_tree_path("..").ok());
  EXPECT_FALSE(normalize_tree_path(std::string("a\0b", 3)).ok());
  EXPECT_FALSE(normalize_tree_path("a\nb").ok());
}

TEST(ConfinedTree, WriteReadListMkdirRemove) {
  abx::testing::TempDir d;
  const fs::path root = d.path() / "vol";
  fs::create_directory(root);
  auto t = ConfinedTree::open(root.string(), {::getuid(), ::getgid()});
  ASSERT_TRUE(t.ok()) << t.error().message();
  int src = source_of("hello", d);
  auto w = t->write_file("/dir/a.txt", src, 100, /*parents=*/false, {});
  EXPECT_EQ(w.error().code(), ErrorCode::kNotFound);  // no parent, no parents
  ::lseek(src, 0, SEEK_SET);
  w = t->write_file("/dir/a.txt", src, 100, /*parents=*/true, {.mode = 0600});
  ::close(src);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w->type, TreeEntry::Type::kFile);
  EXPECT_EQ(w->size, 5);
  EXPECT_EQ(w->mode, 0600u);
  EXPECT_EQ(w->path, "/dir/a.txt");
  EXPECT_EQ(slurp(root / "dir/a.txt"), "hello");
  EXPECT_EQ(*t->read_file("dir/a.txt", 100), "hello");
  EXPECT_EQ(t->read_file("dir/a.txt", 3).error().code(), ErrorCode::kPayloadTooLarge);
  EXPECT_EQ(t->read_file("dir", 100).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(t->read_file("nope", 100).error().code(), ErrorCode::kNotFound);
  int big = source_of(std::string(200, 'x'), d);
  EXPECT_EQ(t->write_file("/big", big, 100, false, {}).error().code(), ErrorCode::kPayloadTooLarge);
  ::close(big);
  EXPECT_FALSE(fs::exists(root / "big"));
  // Nothing half-written is left behind either.
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().find(".abx-write-"), std::string::npos);

  auto m = t->make_dir("/x/y/z", false, {});
  EXPECT_EQ(m.error().code(), ErrorCode::kNotFound);
  m = t->make_dir("/x/y/z", true, {.mode = 0700});
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->type, TreeEntry::Type::kDirectory);
  EXPECT_EQ(m->mode, 0700u);
  EXPECT_EQ(t->make_dir("/x", false, {}).error().code(), ErrorCode::kAlreadyExists);
  EXPECT_TRUE(t->make_dir("/x", true, {}).ok());

  auto one = t->list("/", 1, 100);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 2u);
  EXPECT_EQ((*one)[0].path, "/dir");
  EXPECT_EQ((*one)[1].path, "/x");
  auto deep = t->list("/", 3, 100);
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ(deep->size(), 5u);  // dir, dir/a.txt, x, x/y, x/y/z
  EXPECT_EQ(t->list("/", 3, 2).error().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(t->list("/dir/a.txt", 1, 10).error().code(), ErrorCode::kNotFound);

  auto md = t->set_metadata("/dir/a.txt", {.mode = 0640});
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->mode, 0640u);
  EXPECT_TRUE(t->remove("/x", 100).ok());
  EXPECT_FALSE(fs::exists(root / "x"));
  EXPECT_EQ(t->remove("/x", 100).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(t->remove("/", 100).error().code(), ErrorCode::kInvalidArgument);
}

// What a sandbox may plant in its volume: symlinks out of it (absolute and through ..), a FIFO.
TEST(ConfinedTree, SymlinksNeverLeaveTheTree) {
  abx::testing::TempDir d;
  const fs::path root = d.path() / "vol";
  const fs::path outside = d.path() / "outside";
  fs::create_directory(root);
  fs::create_directory(outside);
  std::ofstream(outside / "secret") << "host secret";
  fs::create_directory_symlink(outside, root / "abs");            // absolute
  fs::create_directory_symlink("../outside", root / "rel");       // relative, climbing out
  fs::create_symlink((outside / "secret").string(), root / "s");  // a file
  ASSERT_EQ(::mkfifo((root / "fifo").c_str(), 0600), 0);
  auto t = ConfinedTree::open(root.string(), {::getuid(), ::getgid()});
  ASSERT_TRUE(t.ok());
  // Resolved as if the tree were "/": /abs/secret is <root><outside>/secret, which is not there.
  EXPECT_EQ(t->read_file("/abs/secret", 100).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(t->read_file("/rel/secret", 100).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(t->read_file("/s", 100).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(t->read_file("/fifo", 100).error().code(), ErrorCode::kInvalidArgument);
  int src = source_of("planted", d);
  EXPECT_FALSE(t->write_file("/abs/new", src, 100, false, {}).ok());
  ::close(src);
  EXPECT_FALSE(fs::exists(outside / "new"));
  EXPECT_FALSE(t->make_dir("/rel/made", true, {}).ok());
  EXPECT_FALSE(fs::exists(outside / "made"));
  // The link itself is what stat, list, chown and remove see.
  auto st = t->stat("/abs");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->type, TreeEntry::Type::kSymlink);
  EXPECT_EQ(st->target, outside.string());
  EXPECT_EQ(t->set_metadata("/s", {.mode = 0777}).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(t->remove("/abs", 100).ok());
  EXPECT_TRUE(t->remove("/rel", 100).ok());
  EXPECT_TRUE(t->remove("/s", 100).ok());
  EXPECT_EQ(slurp(outside / "secret"), "host secret");
  EXPECT_TRUE(fs::exists(outside));
}

}  // namespace
}  // namespace abx::runtime
