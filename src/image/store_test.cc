#include "abx/image/store.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "abx/testing/temp_dir.h"
#include "test_tar.h"

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

TEST(ImageStore, OpenCreatesLayoutAndCleansTmp) {
  abx::testing::TempDir tmp;
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

// --- Who can reach the store (store.h): its owner only ---------------------------------------

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 07777;
}

const char* const kLayoutDirs[] = {"",        "/tmp",          "/blobs", "/blobs/sha256",
                                   "/layers", "/layers/sha256"};

TEST(ImageStoreAccess, OpenMakesEveryDirectoryOwnerOnly) {
  abx::testing::TempDir tmp;
  std::string root = (tmp / "images").string();
  auto s = Store::open(root);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  for (const char* d : kLayoutDirs) EXPECT_EQ(mode_of(root + d), 0700u) << root + d;
  auto d = s->put_blob("hello");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(mode_of(s->blob_path(*d)), 0600u);
}

TEST(ImageStoreAccess, OpenRepairsAnExistingOpenStore) {
  abx::testing::TempDir tmp;
  std::string root = (tmp / "images").string();
  for (const char* d : kLayoutDirs) {
    fs::create_directories(root + d);
    fs::permissions(root + d, static_cast<fs::perms>(0755));
  }
  fs::create_directories(root + "/layers/sha256/" + std::string(64, 'a') + "/usr");
  auto s = Store::open(root);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  for (const char* d : kLayoutDirs) EXPECT_EQ(mode_of(root + d), 0700u) << root + d;
  // A layer's own tree is the image's and keeps its modes.
  EXPECT_EQ(mode_of(root + "/layers/sha256/" + std::string(64, 'a') + "/usr"), 0755u);
}

TEST(ImageStoreAccess, RefusesAStoreOthersCanWrite) {
  abx::testing::TempDir tmp;
  auto refused = [](const std::string& root, const std::string& names) {
    auto s = Store::open(root);
    if (s.ok()) return ::testing::AssertionFailure() << root << " was opened";
    if (s.error().code() != ErrorCode::kFailedPrecondition ||
        s.error().message().find(names) == std::string::npos) {
      return ::testing::AssertionFailure() << s.error().to_string();
    }
    return ::testing::AssertionSuccess() << s.error().message();
  };
  // The store itself world-writable (files may have been planted): refused, and left as it is.
  std::string world = (tmp / "world").string();
  fs::create_directories(world);
  fs::permissions(world, static_cast<fs::perms>(0777));
  EXPECT_TRUE(refused(world, world + " is writable by other users (mode 0777)"));
  EXPECT_EQ(mode_of(world), 0777u);
  // One of its directories group-writable.
  std::string group = (tmp / "group").string();
  fs::create_directories(group + "/layers/sha256");
  fs::permissions(group + "/layers", static_cast<fs::perms>(0775));
  EXPECT_TRUE(refused(group, group + "/layers is writable by other users"));
  // A parent anyone may write to, not sticky (another user could swap the store for theirs).
  std::string open_parent = (tmp / "open").string();
  fs::create_directories(open_parent);
  fs::permissions(open_parent, static_cast<fs::perms>(0777));
  EXPECT_TRUE(refused(open_parent + "/images", open_parent + " is writable by other users"));
  // A sticky one (as /tmp) is fine.
  std::string sticky = (tmp / "sticky").string();
  fs::create_directories(sticky);
  fs::permissions(sticky, static_cast<fs::perms>(01777));
  auto ok = Store::open(sticky + "/images");
  EXPECT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(mode_of(sticky + "/images"), 0700u);
  if (::geteuid() != 0) return;  // owned by another uid: needs chown
  std::string theirs = (tmp / "theirs").string();
  fs::create_directories(theirs);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(refused(theirs, theirs + " is owned by uid 65534"));
  EXPECT_TRUE(refused(theirs + "/images", theirs + " is owned by uid 65534"));
  // Through a symlink: what is checked is where it leads.
  fs::create_symlink(theirs, tmp / "link");
  EXPECT_TRUE(refused((tmp / "link/images").string(), theirs + " is owned by uid 65534"));
}

// The finding of issue 35: a layer's setuid-root file (a Dockerfile's `chmod 4755` copy of a
// shell) in a store under a world-readable directory. Another host uid must reach nothing of
// it, though it can reach the directory the store is in.
TEST(ImageStoreAccess, OtherUsersCannotReachALayersSetuidFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "layer extraction and setresuid run as root";
  abx::testing::TempDir tmp;
  fs::permissions(tmp.path(), static_cast<fs::perms>(0755));
  auto s = Store::open((tmp / "images").string());
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  std::string layer = testing::TarBuilder().file("rootbash", "#!", {.mode = 04755}).finish();
  auto built = testing::put_image(*s, {layer});
  ASSERT_TRUE(built.ok());
  auto img = s->add_image(built->manifest);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  std::string file = img->layer_dirs[0] + "/rootbash";
  EXPECT_EQ(mode_of(file), 04755u);  // the image's file as it was (sandboxes need it so)
  // errno of stat(2) as host uid 65534 (0: it could), in a child.
  auto stat_as_nobody = [](const std::string& path) {
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
          ::setresuid(65534, 65534, 65534) != 0)
        ::_exit(255);
      struct stat st {};
      ::_exit(::stat(path.c_str(), &st) == 0 ? 0 : errno);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 254;
  };
  EXPECT_EQ(stat_as_nobody(tmp.string()), 0);  // control: the directory above is reachable
  EXPECT_EQ(stat_as_nobody(file), EACCES);
  EXPECT_EQ(stat_as_nobody(s->root() + "/refs.json"), EACCES);
  // What a store of before this fix looked like (0755): the same file was reachable.
  fs::permissions(s->root(), static_cast<fs::perms>(0755));
  fs::permissions(s->root() + "/layers", static_cast<fs::perms>(0755));
  fs::permissions(s->root() + "/layers/sha256", static_cast<fs::perms>(0755));
  EXPECT_EQ(stat_as_nobody(file), 0);
  ASSERT_TRUE(Store::open(s->root()).ok());
  EXPECT_EQ(stat_as_nobody(file), EACCES);
}

TEST(ImageStore, RelativeRootBecomesAbsolute) {
  abx::testing::TempDir tmp;
  std::string cwd = fs::current_path().string();
  fs::current_path(tmp.path());
  auto s = Store::open("rel/images/");
  fs::current_path(cwd);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->root(), (tmp / "rel/images").string());
}

TEST(ImageStore, PutReadHasBlob) {
  abx::testing::TempDir tmp;
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

TEST(ImageStore, BlobWriterStreamsAndVerifies) {
  abx::testing::TempDir tmp;
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

TEST(ImageStore, CorruptBlobLeavesNothing) {
  abx::testing::TempDir tmp;
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

TEST(ImageStore, SizeMismatchAndTruncatedWrite) {
  abx::testing::TempDir tmp;
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

TEST(ImageStore, WriterWithoutExpectedDigest) {
  abx::testing::TempDir tmp;
  auto s = Store::open(tmp.string());
  ASSERT_TRUE(s.ok());
  auto w = s->blob_writer("", -1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->write("hello").ok());
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(w->digest(), kHello);
  EXPECT_EQ(s->blob_writer("sha256:xyz", 1).error().code(), ErrorCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Images, names, gc and imports (extraction needs root: owners and whiteouts).

class ImageStoreImages : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "layer extraction runs as root";
    auto s = Store::open((dir_ / "store").string());
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    store_ = std::make_unique<Store>(std::move(*s));
  }
  fs::path layers() const { return dir_ / "store/layers/sha256"; }

  abx::testing::TempDir dir_{"abx-image-store"};
  std::unique_ptr<Store> store_;
};

using testing::TarBuilder;

TEST_F(ImageStoreImages, AddTagGetUntagGc) {
  std::string base = TarBuilder().file("bin/sh", "sh", {.mode = 0755}).finish();
  std::string app = TarBuilder().file("app/run", "run").finish();
  auto a = testing::put_image(*store_, {base, app});
  ASSERT_TRUE(a.ok());
  auto b = testing::put_image(*store_, {base});
  ASSERT_TRUE(b.ok());
  std::vector<std::string> lines;
  auto img = store_->add_image(a->manifest, [&](std::string_view l) { lines.emplace_back(l); });
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(lines.size(), 2u);
  EXPECT_EQ(img->manifest_digest, a->manifest);
  EXPECT_EQ(img->config_digest, a->config.digest);
  EXPECT_EQ(img->layers.size(), 2u);
  EXPECT_EQ(img->size, static_cast<std::int64_t>(base.size() + app.size()));
  EXPECT_EQ(img->config.entrypoint, std::vector<std::string>{"/bin/sh"});
  EXPECT_EQ(img->config.env.size(), 2u);
  EXPECT_EQ(img->config.working_dir, "/w");
  EXPECT_EQ(img->config.user, "1000");
  EXPECT_EQ(img->config.labels.at("l"), "v");

  ASSERT_TRUE(store_->tag("tpl-a", a->manifest).ok());
  ASSERT_TRUE(store_->tag("docker.io/library/b:latest", b->manifest).ok());
  EXPECT_EQ(store_->tags().size(), 2u);
  EXPECT_EQ(store_->tags().at("tpl-a"), a->manifest);
  // get() by name extracts what is missing (b's only layer is shared with a).
  auto gb = store_->get("docker.io/library/b:latest");
  ASSERT_TRUE(gb.ok()) << gb.error().to_string();
  EXPECT_EQ(gb->layer_dirs[0], img->layer_dirs[0]);
  EXPECT_TRUE(store_->get(a->manifest).ok());
  EXPECT_EQ(store_->get("nope").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(store_->tag("x", "sha256:" + std::string(64, '1')).error().code(),
            ErrorCode::kNotFound);
  EXPECT_FALSE(store_->tag("x", a->config.digest).ok());  // not a manifest
  EXPECT_FALSE(store_->tag("", a->manifest).ok());

  // A second Store on the same root sees the names (refs.json is the state).
  auto other = Store::open(store_->root());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->tags().size(), 2u);

  // Nothing unreferenced yet.
  auto freed = store_->gc();
  ASSERT_TRUE(freed.ok()) << freed.error().to_string();
  EXPECT_EQ(*freed, 0u);

  ASSERT_TRUE(store_->untag("tpl-a").ok());
  EXPECT_EQ(store_->untag("tpl-a").error().code(), ErrorCode::kNotFound);
  // `keep` protects a's manifest (and through it its config and layers).
  ASSERT_TRUE(store_->gc({a->manifest}).ok());
  EXPECT_TRUE(store_->has_blob(a->layers[1].digest));
  freed = store_->gc();
  ASSERT_TRUE(freed.ok());
  EXPECT_GT(*freed, app.size());  // a's manifest, app layer blob and its extracted file
  EXPECT_FALSE(store_->has_blob(a->manifest));
  EXPECT_FALSE(store_->has_blob(a->layers[1].digest));
  EXPECT_FALSE(fs::exists(layers() / a->layers[1].digest.substr(7)));
  // b, and the layer and config it shares with a, stay.
  EXPECT_TRUE(store_->has_blob(b->manifest));
  EXPECT_TRUE(store_->has_blob(b->config.digest));
  EXPECT_TRUE(fs::exists(layers() / b->layers[0].digest.substr(7) / "bin/sh"));
  EXPECT_TRUE(store_->get("docker.io/library/b:latest").ok());
}

TEST_F(ImageStoreImages, AddImageErrors) {
  // An index is the registry client's to resolve.
  auto idx = store_->put_blob(R"({"schemaVersion":2,"mediaType":")" + std::string(kOciIndex) +
                              R"(","manifests":[]})");
  ASSERT_TRUE(idx.ok());
  auto r = store_->add_image(*idx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("image index"), std::string::npos) << r.error().message();
  // Unknown layer media type: named.
  auto odd = testing::put_image(*store_, {"x"}, "application/vnd.example.odd");
  ASSERT_TRUE(odd.ok());
  r = store_->add_image(odd->manifest);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("application/vnd.example.odd"), std::string::npos);
  // A missing layer blob.
  auto tar = TarBuilder().file("f", "f").finish();
  auto b = testing::put_image(*store_, {tar});
  ASSERT_TRUE(b.ok());
  fs::remove(store_->blob_path(b->layers[0].digest));
  r = store_->add_image(b->manifest);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.error().message().find(b->layers[0].digest), std::string::npos);
  EXPECT_TRUE(fs::is_empty(layers()));
}

TEST_F(ImageStoreImages, ImportOciLayoutDirectory) {
  auto b = testing::put_image(*store_, {TarBuilder().file("hello", "world").finish()});
  ASSERT_TRUE(b.ok());
  fs::path layout = dir_ / "layout";
  testing::write_layout(*store_, *b, layout, "v1");
  // A fresh store, so every blob really comes from the layout.
  auto fresh = Store::open((dir_ / "fresh").string());
  ASSERT_TRUE(fresh.ok());
  auto img = fresh->import(*parse_reference("oci:" + layout.string() + ":v1"));
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, b->manifest);
  EXPECT_TRUE(fs::exists(fs::path(img->layer_dirs[0]) / "hello"));
  // The only image, untagged.
  EXPECT_TRUE(fresh->import(*parse_reference("oci:" + layout.string())).ok());
  auto missing = fresh->import(*parse_reference("oci:" + layout.string() + ":v2"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("it has: v1"), std::string::npos)
      << missing.error().message();

  // A damaged blob in the layout: refused by digest, nothing left behind.
  auto broken = Store::open((dir_ / "broken").string());
  ASSERT_TRUE(broken.ok());
  testing::write_file(layout / "blobs/sha256" / b->layers[0].digest.substr(7),
                      TarBuilder().file("hello", "WORLD").finish());
  auto bad = broken->import(*parse_reference("oci:" + layout.string() + ":v1"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("digest mismatch"), std::string::npos)
      << bad.error().message();
  EXPECT_FALSE(broken->has_blob(b->layers[0].digest));
  EXPECT_TRUE(fs::is_empty(dir_ / "broken/tmp"));
  EXPECT_TRUE(fs::is_empty(dir_ / "broken/layers/sha256"));
}

// A layout whose tag names a multi-platform index: linux/amd64 is picked.
TEST_F(ImageStoreImages, ImportLayoutWithIndexPicksLinuxAmd64) {
  auto amd = testing::put_image(*store_, {TarBuilder().file("arch", "amd64").finish()});
  auto arm = testing::put_image(*store_, {TarBuilder().file("arch", "arm64").finish()});
  ASSERT_TRUE(amd.ok() && arm.ok());
  auto entry = [](const testing::Built& b, const char* arch) {
    return R"({"mediaType":")" + std::string(kOciManifest) + R"(","digest":")" + b.manifest +
           R"(","size":)" + std::to_string(b.body.size()) +
           R"(,"platform":{"os":"linux","architecture":")" + arch + R"("}})";
  };
  std::string index = R"({"schemaVersion":2,"mediaType":")" + std::string(kOciIndex) +
                      R"(","manifests":[)" + entry(*arm, "arm64") + "," + entry(*amd, "amd64") +
                      "]}";
  auto index_digest = store_->put_blob(index);
  ASSERT_TRUE(index_digest.ok());
  fs::path layout = dir_ / "layout";
  testing::write_layout(*store_, *amd, layout, "unused");
  testing::write_layout(*store_, *arm, layout, "unused");
  fs::copy_file(store_->blob_path(*index_digest),
                layout / "blobs/sha256" / index_digest->substr(7));
  testing::write_file(layout / "index.json",
                      R"({"schemaVersion":2,"manifests":[{"mediaType":")" + std::string(kOciIndex) +
                          R"(","digest":")" + *index_digest + R"(","size":)" +
                          std::to_string(index.size()) +
                          R"(,"annotations":{"org.opencontainers.image.ref.name":"multi"}}]})");
  auto fresh = Store::open((dir_ / "fresh").string());
  ASSERT_TRUE(fresh.ok());
  auto img = fresh->import(*parse_reference("oci:" + layout.string() + ":multi"));
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, amd->manifest);
  EXPECT_FALSE(fresh->has_blob(arm->layers[0].digest));  // only what the platform needs
}

// skopeo (installed by install-deps) converts the layout the test writes into the archives
// `docker save` and `podman save` produce.
TEST_F(ImageStoreImages, ImportArchivesMadeBySkopeo) {
  if (std::system("skopeo --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no skopeo";
  std::string l1 = TarBuilder(TarBuilder::Compression::kGzip).file("etc/os", "abx").finish();
  std::string l2 = TarBuilder(TarBuilder::Compression::kGzip)
                       .file("etc/.wh.os", "")
                       .file("bin/tool", "t", {.mode = 0755})
                       .finish();
  auto b = testing::put_image(*store_, {l1, l2}, kOciLayerGzip);
  ASSERT_TRUE(b.ok());
  fs::path layout = dir_ / "layout";
  testing::write_layout(*store_, *b, layout, "v1");
  std::string docker_tar = (dir_ / "docker.tar").string();
  std::string oci_tar = (dir_ / "oci.tar").string();
  std::string skopeo = "skopeo --insecure-policy copy -q oci:" + layout.string() + ":v1 ";
  ASSERT_EQ(std::system((skopeo + "docker-archive:" + docker_tar + ":example/app:v1").c_str()), 0);
  ASSERT_EQ(std::system((skopeo + "oci-archive:" + oci_tar + ":v1").c_str()), 0);

  auto fresh = Store::open((dir_ / "fresh").string());
  ASSERT_TRUE(fresh.ok());
  auto o = fresh->import(*parse_reference("oci-archive:" + oci_tar + ":v1"));
  ASSERT_TRUE(o.ok()) << o.error().to_string();
  ASSERT_EQ(o->layer_dirs.size(), 2u);
  EXPECT_TRUE(fs::exists(fs::path(o->layer_dirs[0]) / "etc/os"));
  EXPECT_EQ(o->config.entrypoint, std::vector<std::string>{"/bin/sh"});

  std::vector<std::string> lines;
  auto d = fresh->import(*parse_reference("docker-archive:" + docker_tar),
                         [&](std::string_view l) { lines.emplace_back(l); });
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(lines.size(), 2u);
  ASSERT_EQ(d->layer_dirs.size(), 2u);
  // docker-archive layers are uncompressed tars: new blobs, same content.
  EXPECT_TRUE(fs::exists(fs::path(d->layer_dirs[0]) / "etc/os"));
  struct stat st {};
  ASSERT_EQ(::lstat((fs::path(d->layer_dirs[1]) / "etc/os").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));  // the whiteout survived the conversion
  EXPECT_EQ(d->config.working_dir, "/w");
  // The synthesized manifest is an OCI one and taggable.
  auto m = fresh->read_blob(d->manifest_digest);
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->find(kOciManifest), std::string::npos);
  EXPECT_TRUE(fresh->tag("app", d->manifest_digest).ok());
  // By RepoTags, in either spelling.
  EXPECT_TRUE(
      fresh->import(*parse_reference("docker-archive:" + docker_tar + ":example/app:v1")).ok());
  EXPECT_TRUE(
      fresh->import(*parse_reference("docker-archive:" + docker_tar + ":docker.io/example/app:v1"))
          .ok());
  auto none = fresh->import(*parse_reference("docker-archive:" + docker_tar + ":other:v1"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find("example/app:v1"), std::string::npos)
      << none.error().message();
  EXPECT_EQ(fresh->import(*parse_reference("busybox")).error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(ImageStoreImages, ConcurrentTagsAndGcWaitingForWriters) {
  auto b = testing::put_image(*store_, {TarBuilder().file("f", "f").finish()});
  ASSERT_TRUE(b.ok());
  // Two Store objects on one root stand in for two processes (flock is per open file).
  auto other = Store::open(store_->root());
  ASSERT_TRUE(other.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Store& s = t % 2 == 0 ? *store_ : *other;
      for (int i = 0; i < 10; ++i) {
        EXPECT_TRUE(s.tag("t" + std::to_string(t) + "-" + std::to_string(i), b->manifest).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->tags().size(), 40u);  // no lost update

  // A writer in flight (another process pulling) holds the store: gc does not wait for it and
  // does not remove its partial blob.
  auto w = other->blob_writer("", -1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->write("partial").ok());
  auto g = store_->gc();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), ErrorCode::kUnavailable);
  // open() leaves tmp/ alone while a writer is active.
  ASSERT_TRUE(Store::open(store_->root()).ok());
  EXPECT_FALSE(fs::is_empty(dir_ / "store/tmp"));
  ASSERT_TRUE(w->commit().ok());
  EXPECT_TRUE(store_->gc().ok());
  EXPECT_FALSE(store_->has_blob(w->digest()));  // unreferenced
  EXPECT_TRUE(store_->has_blob(b->manifest));
}

TEST(ImageStoreDirectory, DirectoryImage) {
  abx::testing::TempDir tmp;
  auto img = Store::directory_image(tmp.string());
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->layer_dirs, std::vector<std::string>{tmp.string()});
  EXPECT_TRUE(img->manifest_digest.empty());
  EXPECT_EQ(Store::directory_image(tmp.string() + "/nope").error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(Store::directory_image("relative").ok());
}

}  // namespace
}  // namespace abx::image
