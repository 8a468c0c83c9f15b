// A moved sandbox's archive as the receiving node reads it (read_move_archive): the record of a
// running sandbox, of one paused to disk and of one paused filesystem-only, and the refusals.
#include <archive.h>
#include <archive_entry.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "abx/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "sandboxes_internal.h"

namespace abx::platform {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

// A pax tar at `path` with `entries` (name, content), as move_out writes it.
void write_tar(const fs::path& path,
               const std::vector<std::pair<std::string, std::string>>& entries) {
  archive* w = archive_write_new();
  archive_write_set_format_pax(w);
  ASSERT_EQ(archive_write_open_filename(w, path.c_str()), ARCHIVE_OK);
  for (const auto& [name, data] : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0600);
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    ASSERT_EQ(archive_write_header(w, e), ARCHIVE_OK);
    ASSERT_EQ(archive_write_data(w, data.data(), data.size()),
              static_cast<la_ssize_t>(data.size()));
    archive_entry_free(e);
  }
  ASSERT_EQ(archive_write_close(w), ARCHIVE_OK);
  archive_write_free(w);
}

// What move_out puts in record.json (record_json and the fields it adds).
json::object record(const std::string& id) {
  store::SandboxRecord r;
  r.template_id = "base";
  r.metadata = {{"who", "a"}};
  json::object o = record_json(r);
  o["sandboxID"] = id;
  o["clientID"] = "6532622b";
  o["createdAt"] = 1;
  o["endAt"] = 2;
  o["tokenDigest"] = "";
  o["domain"] = "localhost";
  o["home"] = "/var/lib/abx";
  return o;
}

class MoveArchive : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dest_ / "checkpoint");
    fs::create_directories(dest_ / "run");
  }
  Result<MoveRecord> read(const json::object& rec, const std::string& layer_name) {
    const fs::path tar = tmp_ / "move.tar";
    write_tar(tar, {{"record.json", json::serialize(rec)},
                    {"checkpoint/" + layer_name, std::string(4096, 'x')},
                    {"run/sandbox.json", "{}"}});
    return read_move_archive(tar.string(), dest_.string());
  }
  testing::TempDir tmp_{"abx-move-archive"};
  fs::path dest_ = tmp_ / "dest";
};

TEST_F(MoveArchive, ARunningSandboxFromANodeThatDoesNotSayIsRunning) {
  auto m = read(record("abcdefghij0123456789"), "core-1.img");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->record.id, "abcdefghij0123456789");
  EXPECT_EQ(m->record.metadata.at("who"), "a");
  EXPECT_EQ(m->home, "/var/lib/abx");
  EXPECT_FALSE(m->paused);
  EXPECT_FALSE(m->filesystem_only);
  EXPECT_TRUE(fs::exists(dest_ / "checkpoint" / "core-1.img"));
}

TEST_F(MoveArchive, PausedWithAndWithoutMemory) {
  json::object rec = record("abcdefghij0123456789");
  rec["paused"] = true;
  rec["filesystemOnly"] = false;
  auto m = read(rec, "core-1.img");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_TRUE(m->paused);
  EXPECT_FALSE(m->filesystem_only);

  fs::remove_all(dest_ / "checkpoint" / "core-1.img");
  fs::remove_all(dest_ / "run" / "sandbox.json");
  rec["filesystemOnly"] = true;
  auto f = read(rec, kKeptLayer);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->paused);
  EXPECT_TRUE(f->filesystem_only);
  std::ifstream in(dest_ / "checkpoint" / kKeptLayer);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), std::string(4096, 'x'));
}

TEST_F(MoveArchive, RefusesAFilesystemOnlyPauseThatIsNotPausedOrAFlagThatIsNoBool) {
  json::object rec = record("abcdefghij0123456789");
  rec["paused"] = false;
  rec["filesystemOnly"] = true;
  auto m = read(rec, kKeptLayer);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.error().message().find("filesystemOnly without paused"), std::string::npos)
      << m.error().message();

  fs::remove_all(dest_ / "checkpoint" / kKeptLayer);
  fs::remove_all(dest_ / "run" / "sandbox.json");
  rec = record("abcdefghij0123456789");
  rec["paused"] = "yes";
  auto b = read(rec, kKeptLayer);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(b.error().message().find("record.json"), std::string::npos) << b.error().message();
}

}  // namespace
}  // namespace abx::platform
