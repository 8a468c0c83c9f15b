#include "abx/image/store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "abx/testing/temp_dir.h"

namespace abx::image {
namespace {

namespace fs = std::filesystem;

// sha256("hello")
constexpr char kHello[] = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

std::size_t count_files(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

TEST(Store, OpenCreatesLayoutAndCleansTmp) {
  testing::TempDir tmp;
  std::string root = (tmp / "images").string();
  {
    auto s = Store::open(root);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
  }
  EXPECT_TRUE(fs::is_directory(root + "/blobs/sha256"));
  EXPECT_TRUE(fs::is_directory(root + "/layers/sha256"));
  std::ofstream(root + "/tmp/blob-leftover") << "partial";
  fs::create_directories(root + "/tmp/extract-x/usr");
  auto s = Store::open(root);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(fs::is_empty(root + "/tmp"));
}

TEST(Store, PutReadHasBlob) {
  testing::TempDir tmp;
  auto s = Store::open(tmp.string());
  ASSERT_TRUE(s.ok());
  auto d = s->put_blob("hello");
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(*d, kHello);
  EXPECT_TRUE(s->has_blob(kHello));
  EXPECT_EQ(s->blob_path(kHello), tmp.string() + "/blobs/sha256/" + std::string(kHello + 7));
  auto r = s->read_blob(kHello);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "hello");
  EXPECT_EQ(s->read_blob(kHello, 3).error().code(), ErrorCode::kPayloadTooLarge);
  // Idempotent.
  EXPECT_TRUE(s->put_blob("hello").ok());
  // Digests that are not sha256:<64 hex> never reach the file system.
  EXPECT_FALSE(s->has_blob("sha256:../../etc/passwd"));
  EXPECT_EQ(s->blob_path("sha256:../x"), "");
  EXPECT_EQ(s->read_blob("md5:abc").error().code(), ErrorCode::kInvalidArgument);
  auto missing = s->read_blob("sha256:" + std::string(64, '0'));
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
}

TEST(Store, BlobWriterStreamsAndVerifies) {
  testing::TempDir tmp;
  auto s = Store::open(tmp.string());
  ASSERT_TRUE(s.ok());
  auto w = s->blob_writer(kHello, 5);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->write("he").ok());
  ASSERT_TRUE(w->write("llo").ok());
  EXPECT_EQ(w->written(), 5);
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(w->digest(), kHello);
  EXPECT_TRUE(s->has_blob(kHello));
  EXPECT_EQ(count_files(tmp / "tmp"), 0u);
}

TEST(Store, CorruptBlobLeavesNothing) {
  testing::TempDir tmp;
  auto s = Store::open(tmp.string());
  ASSERT_TRUE(s.ok());
  auto w = s->blob_writer(kHello, -1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->write("hellO").ok());
  auto st = w->commit();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.error().message().find("digest mismatch: expected " + std::string(kHello)),
            std::string::npos)
      << st.error().message();
  EXPECT_FALSE(s->has_blob(kHello));
  EXPECT_EQ(count_files(tmp / "tmp"), 0u);
  EXPECT_EQ(count_files(tmp / "blobs"), 0u);
}

TEST(Store, SizeMismatchAndTruncatedWrite) {
  testing::TempDir tmp;
  auto s = Store::open(tmp.string());
  ASSERT_TRUE(s.ok());
  {
    auto w = s->blob_writer(kHello, 4);  // more bytes than announced: refused while streaming
    ASSERT_TRUE(w.ok());
    auto st = w->write("hello");
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message().find("size mismatch"), std::string::npos);
  }
  {
    auto w = s->blob_writer(kHello, 5);  // truncated: the connection dropped after 3 bytes
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->write("hel").ok());
    auto st = w->commit();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message().find("size mismatch"), std::string::npos);
  }
  {
    auto w = s->blob_writer(kHello, 5);  // abandoned: the destructor removes the partial file
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->write("hel").ok());
    EXPECT_EQ(count_files(tmp / "tmp"), 1u);
  }
  EXPECT_EQ(count_files(tmp / "tmp"), 0u);
  EXPECT_EQ(count_files(tmp / "blobs"), 0u);
}

TEST(Store, WriterWithoutExpectedDigest) {
  testing::TempDir tmp;
  auto s = Store::open(tmp.string());
  ASSERT_TRUE(s.ok());
  auto w = s->blob_writer("", -1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->write("hello").ok());
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(w->digest(), kHello);
  EXPECT_EQ(s->blob_writer("sha256:xyz", 1).error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace abx::image
