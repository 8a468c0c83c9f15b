// The build context is client input: escapes through paths, symlinks and archives.
#include "build_context.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "abx/testing/temp_dir.h"

namespace abx::platform::build {
namespace {

namespace fs = std::filesystem;

struct TarEntry {
  std::string path;
  char type = 'f';   // f file, d dir, l symlink, h hardlink
  std::string data;  // file content or link target
};

void write_tar(const fs::path& out, const std::vector<TarEntry>& entries) {
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  ASSERT_EQ(archive_write_open_filename(a, out.c_str()), ARCHIVE_OK);
  for (const auto& e : entries) {
    archive_entry* en = archive_entry_new();
    archive_entry_set_pathname(en, e.path.c_str());
    archive_entry_set_perm(en, 0644);
    if (e.type == 'd') {
      archive_entry_set_filetype(en, AE_IFDIR);
    } else if (e.type == 'l') {
      archive_entry_set_filetype(en, AE_IFLNK);
      archive_entry_set_symlink(en, e.data.c_str());
    } else if (e.type == 'h') {
      archive_entry_set_filetype(en, AE_IFREG);
      archive_entry_set_hardlink(en, e.data.c_str());
    } else {
      archive_entry_set_filetype(en, AE_IFREG);
      archive_entry_set_size(en, static_cast<la_int64_t>(e.data.size()));
    }
    archive_write_header(a, en);
    if (e.type == 'f') archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(en);
  }
  archive_write_close(a);
  archive_write_free(a);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(BuildContext, ExtractsPlainArchives) {
  testing::TempDir t("build-ctx");
  write_tar(t / "ok.tar", {{"dir", 'd'},
                           {"dir/a", 'f', "A"},
                           {"./b", 'f', "B"},
                           {"link", 'l', "dir/a"},
                           {"hard", 'h', "dir/a"}});
  fs::create_directories(t / "out");
  ASSERT_TRUE(extract_archive((t / "ok.tar").string(), (t / "out").string()).ok());
  EXPECT_EQ(slurp(t / "out/dir/a"), "A");
  EXPECT_EQ(slurp(t / "out/b"), "B");
  EXPECT_EQ(fs::read_symlink(t / "out/link"), "dir/a");
  EXPECT_EQ(slurp(t / "out/hard"), "A");
}

TEST(BuildContext, RefusesEscapes) {
  testing::TempDir t("build-ctx");
  struct Case {
    const char* name;
    std::vector<TarEntry> entries;
  } cases[] = {
      {"dotdot", {{"../evil", 'f', "x"}}},
      {"absolute", {{"/evil", 'f', "x"}}},
      {"symlink-then-file", {{"l", 'l', (t / "outside").string()}, {"l/evil", 'f', "x"}}},
      {"hardlink-out", {{"h", 'h', "../../etc/passwd"}}},
  };
  fs::create_directories(t / "outside");
  for (const auto& c : cases) {
    fs::path out = t / (std::string("out-") + c.name);
    fs::create_directories(out);
    write_tar(t / (std::string(c.name) + ".tar"), c.entries);
    auto s = extract_archive((t / (std::string(c.name) + ".tar")).string(), out.string());
    // A symlink in the way is replaced by a directory (libarchive's SECURE_SYMLINKS with
    // UNLINK); everything else is refused.
    if (std::string(c.name) != "symlink-then-file") {
      EXPECT_FALSE(s.ok()) << c.name;
    }
    EXPECT_FALSE(fs::exists(t / "evil")) << c.name;
    EXPECT_FALSE(fs::exists(t / "outside/evil")) << c.name;
  }
}

TEST(BuildContext, Limits) {
  testing::TempDir t("build-ctx");
  write_tar(t / "big.tar", {{"a", 'f', std::string(1000, 'x')}, {"b", 'f', "y"}});
  fs::create_directories(t / "out");
  ArchiveLimits l;
  l.max_bytes = 500;
  EXPECT_EQ(extract_archive((t / "big.tar").string(), (t / "out").string(), l).error().code(),
            ErrorCode::kResourceExhausted);
  l = {};
  l.max_entries = 1;
  EXPECT_EQ(extract_archive((t / "big.tar").string(), (t / "out").string(), l).error().code(),
            ErrorCode::kResourceExhausted);
}

TEST(BuildContext, ResolveStaysInsideTheRoot) {
  testing::TempDir t("build-ctx");
  fs::path root = t / "ctx";
  fs::create_directories(root / "sub");
  std::ofstream(root / "sub/f") << "f";
  std::ofstream(t / "secret") << "s";
  fs::create_symlink("/", root / "up");  // absolute: the root of the context
  fs::create_symlink("../../secret", root / "rel");
  fs::create_symlink("sub/f", root / "good");
  fs::create_symlink("loop", root / "loop");
  EXPECT_EQ(*resolve_in_root(root.string(), "good"), root.string() + "/sub/f");
  EXPECT_EQ(*resolve_in_root(root.string(), "up/sub/f"), root.string() + "/sub/f");
  EXPECT_EQ(*resolve_in_root(root.string(), "../../sub/f"), root.string() + "/sub/f");
  EXPECT_EQ(resolve_in_root(root.string(), "rel").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(resolve_in_root(root.string(), "../secret").error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(resolve_in_root(root.string(), "loop").ok());
  EXPECT_EQ(resolve_in_root(root.string(), "sub/f/x").error().code(), ErrorCode::kNotFound);
}

TEST(BuildContext, GlobSources) {
  testing::TempDir t("build-ctx");
  fs::path root = t / "ctx";
  fs::create_directories(root / "src");
  for (const char* f : {"src/b.py", "src/a.py", "src/c.txt"}) std::ofstream(root / f) << f;
  EXPECT_EQ(*expand_source(root.string(), "src/*.py"),
            (std::vector<std::string>{"src/a.py", "src/b.py"}));
  EXPECT_EQ(*expand_source(root.string(), "plain"), std::vector<std::string>{"plain"});
  EXPECT_EQ(expand_source(root.string(), "*.none").error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(expand_source(root.string(), "../*").ok());
}

TEST(BuildContext, CopySemanticsAndDigest) {
  testing::TempDir t("build-ctx");
  fs::create_directories(t / "src/d/e");
  std::ofstream(t / "src/d/e/x") << "x";
  std::ofstream(t / "src/f") << "f";
  fs::path stage = t / "stage";
  fs::create_directories(stage);
  // A directory copies its contents; a file into a directory keeps its name.
  ASSERT_TRUE(copy_into((t / "src/d").string(), stage.string(), "/opt/d", false, 0, 0).ok());
  ASSERT_TRUE(copy_into((t / "src/f").string(), stage.string(), "/bin/", true, 1000, 1000).ok());
  ASSERT_TRUE(copy_into((t / "src/f").string(), stage.string(), "/etc/g", false, 0, 0).ok());
  ASSERT_TRUE(reset_parent_times(stage.string(), "/bin/").ok());
  EXPECT_EQ(slurp(stage / "opt/d/e/x"), "x");
  EXPECT_EQ(slurp(stage / "bin/f"), "f");
  EXPECT_EQ(slurp(stage / "etc/g"), "f");
  struct stat st;
  ASSERT_EQ(::stat((stage / "bin/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  ASSERT_EQ(::stat((stage / "bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtime, 0);  // created parents: deterministic layers

  auto d1 = content_digest({(t / "src").string()});
  std::ofstream(t / "src/f") << "changed";
  auto d2 = content_digest({(t / "src").string()});
  ASSERT_TRUE(d1.ok() && d2.ok());
  EXPECT_NE(*d1, *d2);

  EXPECT_EQ(clean_path("a/../b/", "/w"), "/w/b");
  EXPECT_EQ(clean_path("/../x"), "/x");
  EXPECT_EQ(*parse_chown("10:20"), std::make_pair(10u, 20u));
  EXPECT_EQ(*parse_chown("7"), std::make_pair(7u, 7u));
  EXPECT_FALSE(parse_chown("user:group").ok());
}

}  // namespace
}  // namespace abx::platform::build
