// The registry client against Debian's reference registry (/usr/bin/docker-registry) on
// loopback, seeded with images this test builds itself (an OCI layout: busybox-static and a file,
// config, manifests, indexes) and copies in with skopeo. Every test starts its own registry and
// kills it when it ends. Parsing helpers (challenges, auth files, URLs) are tested first, with
// no processes.
#include "abx/image/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "abx/base/base64.h"
#include "abx/base/hex.h"
#include "abx/http/server.h"
#include "abx/testing/child_process.h"
#include "abx/testing/temp_dir.h"
#include "registry_auth.h"
#include "registry_transport.h"

namespace abx::image {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using ::testing::HasSubstr;

// ---- parsing, no I/O ----

TEST(ImageRegistryAuth, ParsesBearerChallenge) {
  auto c = detail::parse_challenge(
      R"(Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull")");
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->scheme, "bearer");
  EXPECT_EQ(c->params["realm"], "https://auth.docker.io/token");
  EXPECT_EQ(c->params["service"], "registry.docker.io");
  EXPECT_EQ(c->params["scope"], "repository:library/busybox:pull");
}

TEST(ImageRegistryAuth, ParsesBasicAndEscapes) {
  auto c = detail::parse_challenge(R"(Basic realm="a \"quoted\" realm", charset=UTF-8)");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->scheme, "basic");
  EXPECT_EQ(c->params["realm"], "a \"quoted\" realm");
  EXPECT_EQ(c->params["charset"], "UTF-8");
  EXPECT_FALSE(detail::parse_challenge("").ok());
  EXPECT_FALSE(detail::parse_challenge(R"(Bearer realm="open)").ok());
}

TEST(ImageRegistryAuth, FindsCredentialsByHost) {
  std::string file = R"({"auths":{"localhost:5000":{"auth":")" + base64_encode("u:p:w") +
                     R"("},"https://index.docker.io/v1/":{"auth":")" + base64_encode("hub:x") +
                     R"("}}})";
  auto c = detail::credentials_from_auth_json(file, "localhost:5000");
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->username, "u");
  EXPECT_EQ((*c)->password, "p:w");
  auto hub = detail::credentials_from_auth_json(file, "docker.io");
  ASSERT_TRUE(hub.ok() && hub->has_value());
  EXPECT_EQ((*hub)->username, "hub");
  auto none = detail::credentials_from_auth_json(file, "ghcr.io");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(detail::credentials_from_auth_json(R"({"auths":{"h":{"auth":"!!"}}})", "h").ok());
  EXPECT_FALSE(detail::credentials_from_auth_json("[", "h").ok());
}

TEST(ImageRegistryAuth, AuthFileOrderAndFirstEntryWins) {
  testing::TempDir tmp("abx-registry-auth");
  std::string saved_home = std::getenv("HOME") != nullptr ? std::getenv("HOME") : "";
  setenv("ABX_HOME", (tmp.path() / "abx").c_str(), 1);
  setenv("REGISTRY_AUTH_FILE", (tmp.path() / "containers-auth.json").c_str(), 1);
  setenv("HOME", tmp.path().c_str(), 1);
  auto files = detail::auth_file_candidates("");
  EXPECT_EQ(files, (std::vector<std::string>{(tmp.path() / "abx/auth.json").string(),
                                             (tmp.path() / "containers-auth.json").string(),
                                             (tmp.path() / ".docker/config.json").string()}));
  EXPECT_EQ(detail::auth_file_candidates("/x.json"), std::vector<std::string>{"/x.json"});
  auto entry = [](const std::string& host, const std::string& user) {
    return R"({"auths":{")" + host + R"(":{"auth":")" + base64_encode(user + ":pw") + R"("}}})";
  };
  // The abx file has no entry for ghcr.io: the next file that has one answers.
  std::ofstream(tmp.path() / "containers-auth.json") << entry("ghcr.io", "from-containers");
  std::filesystem::create_directories(tmp.path() / "abx");
  std::filesystem::create_directories(tmp.path() / ".docker");
  std::ofstream(tmp.path() / "abx/auth.json") << entry("quay.io", "from-abx");
  std::ofstream(tmp.path() / ".docker/config.json") << entry("ghcr.io", "from-docker");
  auto c = detail::find_credentials(files, "ghcr.io");
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->username, "from-containers");
  EXPECT_EQ((*c)->source, (tmp.path() / "containers-auth.json").string());
  auto q = detail::find_credentials(files, "quay.io");
  ASSERT_TRUE(q.ok() && q->has_value());
  EXPECT_EQ((*q)->username, "from-abx");
  std::ofstream(tmp.path() / "abx/auth.json") << "{not json";
  auto broken = detail::find_credentials(files, "ghcr.io");
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.error().message(), HasSubstr("abx/auth.json"));
  unsetenv("ABX_HOME");
  unsetenv("REGISTRY_AUTH_FILE");
  setenv("HOME", saved_home.c_str(), 1);
}

TEST(ImageRegistryTransport, Urls) {
  auto u = detail::parse_url("https://auth.example.com/token?x=1");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "auth.example.com");
  EXPECT_EQ(u->effective_port(), 443);
  EXPECT_EQ(u->target, "/token?x=1");
  auto v6 = detail::parse_url("http://[::1]:5000/v2/");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 5000);
  EXPECT_EQ(v6->authority(), "[::1]:5000");
  auto loc = detail::resolve_url(*v6, "/v2/r/blobs/uploads/abc?_state=s");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->str(), "http://[::1]:5000/v2/r/blobs/uploads/abc?_state=s");
  auto other = detail::resolve_url(*v6, "https://s3.example.com/b?sig=1");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->host, "s3.example.com");
  EXPECT_FALSE(detail::parse_url("ftp://x/").ok());
  EXPECT_TRUE(detail::is_loopback_host("localhost"));
  EXPECT_TRUE(detail::is_loopback_host("127.3.4.5"));
  EXPECT_TRUE(detail::is_loopback_host("[::1]"));
  EXPECT_FALSE(detail::is_loopback_host("10.0.0.1"));
  EXPECT_FALSE(detail::is_loopback_host("localhost.example.com"));
}

// ---- helpers for the end-to-end tests ----

std::string sha256_hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return to_hex(md, sizeof md);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, std::string_view data) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Runs a shell command; its output goes to `log`. Returns the exit status.
int sh(const std::string& cmd, const fs::path& log) {
  int rc = std::system(("(" + cmd + ") >>" + log.string() + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool port_open(std::uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

struct Blob {
  std::string digest;
  std::int64_t size = 0;
  std::string media_type;
};

json::object descriptor(const Blob& b) {
  return {{"mediaType", b.media_type}, {"digest", b.digest}, {"size", b.size}};
}

// Writes an OCI image layout: blobs, and index.json naming each tagged manifest or index.
class OciLayout {
 public:
  OciLayout(fs::path dir, fs::path log) : dir_(std::move(dir)), log_(std::move(log)) {
    write_file(dir_ / "oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  }
  const fs::path& dir() const { return dir_; }

  Blob add_blob(std::string_view data, std::string media_type) {
    std::string hex = sha256_hex(data);
    write_file(dir_ / "blobs" / "sha256" / hex, data);
    return {"sha256:" + hex, static_cast<std::int64_t>(data.size()), std::move(media_type)};
  }

  // An image: config for `arch` and the given gzip layers (with their diff ids).
  Blob add_image(const std::string& arch, const std::vector<std::pair<Blob, std::string>>& layers,
                 const std::string& config_type = "application/vnd.oci.image.config.v1+json") {
    json::array diff_ids;
    json::array layer_descs;
    for (const auto& [blob, diff_id] : layers) {
      diff_ids.push_back(json::string(diff_id));
      layer_descs.push_back(descriptor(blob));
    }
    json::object config{{"architecture", arch},
                        {"os", "linux"},
                        {"config",
                         {{"Env", json::array{"PATH=/bin"}},
                          {"Cmd", json::array{"/bin/busybox", "sh"}},
                          {"WorkingDir", "/"}}},
                        {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
    Blob cfg = add_blob(json::serialize(config), config_type);
    json::object manifest{{"schemaVersion", 2},
                          {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                          {"config", descriptor(cfg)},
                          {"layers", layer_descs}};
    return add_blob(json::serialize(manifest), "application/vnd.oci.image.manifest.v1+json");
  }

  Blob add_index(const std::vector<std::pair<Blob, std::string>>& images) {
    json::array manifests;
    for (const auto& [m, platform] : images) {
      auto d = descriptor(m);
      auto slash = platform.find('/');
      d["platform"] = {{"os", platform.substr(0, slash)},
                       {"architecture", platform.substr(slash + 1)}};
      manifests.push_back(d);
    }
    json::object index{{"schemaVersion", 2},
                       {"mediaType", "application/vnd.oci.image.index.v1+json"},
                       {"manifests", manifests}};
    return add_blob(json::serialize(index), "application/vnd.oci.image.index.v1+json");
  }

  void tag(const std::string& name, const Blob& b) {
    auto d = descriptor(b);
    d["annotations"] = {{"org.opencontainers.image.ref.name", name}};
    refs_.push_back(d);
    json::object index{{"schemaVersion", 2}, {"manifests", refs_}};
    write_file(dir_ / "index.json", json::serialize(index));
  }

 private:
  fs::path dir_;
  fs::path log_;
  json::array refs_;
};

// A gzip layer of `root`, with its diff id.
std::pair<Blob, std::string> make_layer(OciLayout& layout, const fs::path& root,
                                        const fs::path& log, bool zstd = false) {
  fs::path tar = layout.dir().parent_path() / "layer.tar";
  EXPECT_EQ(sh("tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --xattrs -C " +
                   root.string() + " -cf " + tar.string() + " .",
               log),
            0);
  std::string diff_id = "sha256:" + sha256_hex(read_file(tar));
  if (zstd) {
    EXPECT_EQ(sh("zstd -q -f --rm " + tar.string(), log), 0);
    Blob b = layout.add_blob(read_file(tar.string() + ".zst"),
                             "application/vnd.oci.image.layer.v1.tar+zstd");
    return {b, diff_id};
  }
  EXPECT_EQ(sh("gzip -n -f " + tar.string(), log), 0);
  Blob b = layout.add_blob(read_file(tar.string() + ".gz"),
                           "application/vnd.oci.image.layer.v1.tar+gzip");
  return {b, diff_id};
}

// What a layer directory holds, one line per entry (type, mode, owner, size, mtime, content
// hash or link target, the opaque xattr), sorted: two extractions of a layer compare equal
// exactly when these do.
std::vector<std::string> tree_listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    EXPECT_EQ(::lstat(e.path().c_str(), &st), 0) << e.path();
    std::string line = fs::relative(e.path(), dir).string() +
                       " mode=" + std::to_string(st.st_mode) + " uid=" + std::to_string(st.st_uid) +
                       " gid=" + std::to_string(st.st_gid);
    // Whiteouts (0:0 devices) are made after the entries, at extraction time.
    if (!S_ISCHR(st.st_mode)) line += " mtime=" + std::to_string(st.st_mtime);
    if (S_ISREG(st.st_mode)) {
      line += " size=" + std::to_string(st.st_size) + " sha256=" + sha256_hex(read_file(e.path()));
    } else if (S_ISLNK(st.st_mode)) {
      line += " -> " + fs::read_symlink(e.path()).string();
    } else if (S_ISCHR(st.st_mode)) {
      line += " rdev=" + std::to_string(st.st_rdev);
    }
    char v[16];
    ssize_t n = ::lgetxattr(e.path().c_str(), "trusted.overlay.opaque", v, sizeof v);
    if (n > 0) line += " opaque=" + std::string(v, static_cast<std::size_t>(n));
    out.push_back(std::move(line));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Deterministic, incompressible bytes (a layer that takes a while to move).
std::string noise(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}

std::size_t entries_in(const fs::path& dir) {
  if (!fs::exists(dir)) return 0;
  return static_cast<std::size_t>(
      std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

// The images every test seeds its registry with, built once.
struct TestImages {
  fs::path layout;
  Blob busybox;  // linux/amd64: /bin/busybox and /etc/abx-hello
  Blob busybox_config;
  Blob busybox_layer;
  Blob multi;     // index: linux/amd64 (busybox) + linux/arm64
  Blob arm64;     // the arm64 image in it
  Blob no_amd64;  // index: linux/arm64 + linux/s390x
};

class ImageRegistryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("test -x /usr/bin/docker-registry && test -x /usr/bin/skopeo") != 0) return;
    root_ = new testing::TempDir("abx-registry-images");
    fs::path log = root_->path() / "build.log";
    images_ = new TestImages;
    OciLayout layout(root_->path() / "layout", log);
    images_->layout = layout.dir();
    fs::path tree = root_->path() / "tree";
    fs::create_directories(tree / "bin");
    fs::create_directories(tree / "etc");
    fs::copy_file("/bin/busybox", tree / "bin" / "busybox");
    write_file(tree / "etc" / "abx-hello", "hello from abx\n");
    auto layer = make_layer(layout, tree, log);
    images_->busybox_layer = layer.first;
    images_->busybox = layout.add_image("amd64", {layer});
    auto manifest = json::parse(
        read_file(layout.dir() / "blobs" / "sha256" / images_->busybox.digest.substr(7)));
    images_->busybox_config.digest = std::string(manifest.at("config").at("digest").as_string());
    fs::path small = root_->path() / "small";
    fs::create_directories(small / "etc");
    write_file(small / "etc" / "arch", "not amd64\n");
    auto small_layer = make_layer(layout, small, log);
    images_->arm64 = layout.add_image("arm64", {small_layer});
    Blob s390x = layout.add_image("s390x", {small_layer});
    images_->multi =
        layout.add_index({{images_->arm64, "linux/arm64"}, {images_->busybox, "linux/amd64"}});
    images_->no_amd64 = layout.add_index({{images_->arm64, "linux/arm64"}, {s390x, "linux/s390x"}});
    layout.tag("v1", images_->busybox);
    layout.tag("multi", images_->multi);
    layout.tag("noamd64", images_->no_amd64);
  }
  static void TearDownTestSuite() {
    delete images_;
    delete root_;
    images_ = nullptr;
    root_ = nullptr;
  }

  void SetUp() override {
    if (images_ == nullptr) GTEST_SKIP() << "needs docker-registry and skopeo (install-deps.sh)";
    auto store = Store::open((tmp_.path() / "store").string());
    ASSERT_TRUE(store.ok()) << store.error().to_string();
    store_ = std::make_unique<Store>(std::move(*store));
    options_.progress = [this](std::string_view line) { progress_.emplace_back(line); };
    options_.auth_file = (tmp_.path() / "no-auth.json").string();  // never the host's files
  }

  // Starts docker-registry on a free loopback port with `extra` YAML (auth:, http.tls).
  void start_registry(const std::string& auth_yaml = "", const std::string& tls_yaml = "") {
    port_ = free_port();
    fs::path cfg = tmp_.path() / "registry.yml";
    storage_ = tmp_.path() / "storage";
    write_file(cfg,
               "version: 0.1\n"
               "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
               "storage:\n  filesystem:\n    rootdirectory: " +
                   storage_.string() +
                   "\n"
                   "  delete:\n    enabled: true\n"
                   "http:\n  addr: 127.0.0.1:" +
                   std::to_string(port_) + "\n  secret: abx-test\n" + tls_yaml + auth_yaml);
    registry_ = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{"/bin/sh", "-c",
                                 "exec /usr/bin/docker-registry serve " + cfg.string() + " >>" +
                                     (tmp_.path() / "registry.log").string() + " 2>&1"});
    ASSERT_TRUE(registry_->started());
    for (int i = 0; i < 200 && !port_open(port_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(port_open(port_)) << read_file(tmp_.path() / "registry.log");
  }

  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }

  // skopeo copy of a tag of the test layout into repo:tag on our registry (`format` v2s2:
  // converted to Docker schema 2 media types on the way).
  void seed(const std::string& tag, const std::string& repo, const std::string& creds = "",
            bool all = false, const std::string& format = "") {
    std::string cmd = "skopeo --insecure-policy copy --dest-tls-verify=false ";
    if (all) cmd += "--all ";
    if (!format.empty()) cmd += "--format " + format + " ";
    if (!creds.empty()) cmd += "--dest-creds " + creds + " ";
    cmd += "oci:" + images_->layout.string() + ":" + tag + " docker://" + host() + "/" + repo;
    ASSERT_EQ(sh(cmd, tmp_.path() / "skopeo.log"), 0) << read_file(tmp_.path() / "skopeo.log");
  }

  // skopeo copy of `tag` of another OCI layout into repo:tag on our registry.
  void seed_layout(const fs::path& layout, const std::string& tag, const std::string& repo) {
    ASSERT_EQ(sh("skopeo --insecure-policy copy --dest-tls-verify=false oci:" + layout.string() +
                     ":" + tag + " docker://" + host() + "/" + repo,
                 tmp_.path() / "skopeo.log"),
              0)
        << read_file(tmp_.path() / "skopeo.log");
  }

  Reference ref(const std::string& text) {
    auto r = parse_reference(text);
    EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().to_string());
    return r.ok() ? *r : Reference{};
  }

  void write_auth(const std::string& user, const std::string& pass) {
    options_.auth_file = (tmp_.path() / "auth.json").string();
    write_file(options_.auth_file, R"({"auths":{")" + host() + R"(":{"auth":")" +
                                       base64_encode(user + ":" + pass) + R"("}}})");
  }

  fs::path blob_data(const std::string& digest) const {
    std::string hex = digest.substr(7);
    return storage_ / "docker/registry/v2/blobs/sha256" / hex.substr(0, 2) / hex / "data";
  }

  static testing::TempDir* root_;
  static TestImages* images_;
  testing::TempDir tmp_{"abx-registry-test"};
  std::unique_ptr<Store> store_;
  RegistryOptions options_;
  std::vector<std::string> progress_;
  std::uint16_t port_ = 0;
  fs::path storage_;
  std::unique_ptr<testing::ChildProcess> registry_;  // killed (SIGKILL) with the fixture
};

testing::TempDir* ImageRegistryTest::root_ = nullptr;
TestImages* ImageRegistryTest::images_ = nullptr;

TEST_F(ImageRegistryTest, PullsByTagThenSkipsBlobsItHas) {
  start_registry();
  seed("v1", "test/busybox:v1");
  auto r = ref(host() + "/test/busybox:v1");
  auto img = pull(*store_, r, options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, images_->busybox.digest);
  EXPECT_EQ(img->config_digest, images_->busybox_config.digest);
  ASSERT_EQ(img->layers.size(), 1u);
  EXPECT_EQ(img->layers[0], images_->busybox_layer.digest);
  EXPECT_TRUE(store_->has_blob(images_->busybox_layer.digest));
  EXPECT_EQ(store_->tags().at(r.str()), images_->busybox.digest);
  ASSERT_EQ(img->layer_dirs.size(), 1u);
  EXPECT_TRUE(fs::exists(fs::path(img->layer_dirs[0]) / "bin" / "busybox"));
  EXPECT_THAT(progress_,
              ::testing::Contains(HasSubstr("pulling " + images_->busybox_layer.digest)));
  EXPECT_THAT(progress_, ::testing::Contains(HasSubstr("done " + images_->busybox_layer.digest)));

  progress_.clear();
  auto again = pull(*store_, r, options_);
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_THAT(progress_, ::testing::Contains("have " + images_->busybox_layer.digest));
  EXPECT_THAT(progress_, ::testing::Not(::testing::Contains(HasSubstr("pulling"))));
}

TEST_F(ImageRegistryTest, PullsByDigestAndRejectsUnknownDigest) {
  start_registry();
  seed("v1", "test/busybox:v1");
  auto img = pull(*store_, ref(host() + "/test/busybox@" + images_->busybox.digest), options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, images_->busybox.digest);
  auto missing =
      pull(*store_, ref(host() + "/test/busybox@sha256:" + std::string(64, 'a')), options_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.error().message(), HasSubstr("not found"));
}

TEST_F(ImageRegistryTest, PullsDockerSchema2) {
  start_registry();
  seed("v1", "test/docker:v1", "", false, "v2s2");
  auto img = pull(*store_, ref(host() + "/test/docker:v1"), options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  auto manifest = store_->read_blob(img->manifest_digest);
  ASSERT_TRUE(manifest.ok());
  EXPECT_THAT(*manifest, HasSubstr("application/vnd.docker.distribution.manifest.v2+json"));
  EXPECT_THAT(*manifest, HasSubstr("application/vnd.docker.image.rootfs.diff.tar.gzip"));
  EXPECT_EQ(img->layers, std::vector<std::string>{images_->busybox_layer.digest});
  EXPECT_EQ(img->config.cmd, (std::vector<std::string>{"/bin/busybox", "sh"}));
}

TEST_F(ImageRegistryTest, IndexPicksLinuxAmd64) {
  start_registry();
  seed("multi", "test/multi:latest", "", /*all=*/true);
  auto img = pull(*store_, ref(host() + "/test/multi:latest"), options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, images_->busybox.digest);
  EXPECT_EQ(store_->tags().at(host() + "/test/multi:latest"), images_->busybox.digest);
  // Only the chosen platform's blobs were fetched.
  auto arm =
      json::parse(read_file(images_->layout / "blobs/sha256" / images_->arm64.digest.substr(7)));
  EXPECT_FALSE(store_->has_blob(std::string(arm.at("config").at("digest").as_string())));
}

TEST_F(ImageRegistryTest, IndexWithoutAmd64NamesThePlatforms) {
  start_registry();
  seed("noamd64", "test/noamd:latest", "", /*all=*/true);
  auto img = pull(*store_, ref(host() + "/test/noamd:latest"), options_);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(img.error().message(), HasSubstr("test/noamd:latest"));
  EXPECT_THAT(img.error().message(), HasSubstr("no manifest for linux/amd64"));
  EXPECT_THAT(img.error().message(), HasSubstr("linux/arm64, linux/s390x"));
  EXPECT_TRUE(store_->tags().empty());
}

TEST_F(ImageRegistryTest, BasicAuth) {
  fs::path htpasswd = tmp_.path() / "htpasswd";
  ASSERT_EQ(sh("htpasswd -Bbn alice s3cret > " + htpasswd.string(), tmp_.path() / "ht.log"), 0);
  start_registry("auth:\n  htpasswd:\n    realm: abx-test\n    path: " + htpasswd.string() + "\n");
  seed("v1", "private/busybox:v1", "alice:s3cret");
  auto r = ref(host() + "/private/busybox:v1");

  auto anonymous = pull(*store_, r, options_);
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.error().code(), ErrorCode::kUnauthenticated);
  EXPECT_THAT(anonymous.error().message(), HasSubstr("requires credentials"));

  write_auth("alice", "wrong");
  auto wrong = pull(*store_, r, options_);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code(), ErrorCode::kUnauthenticated);
  EXPECT_THAT(wrong.error().message(), HasSubstr("rejected the credentials for user 'alice'"));
  EXPECT_THAT(wrong.error().message(), HasSubstr(r.str()));

  write_auth("alice", "s3cret");
  auto img = pull(*store_, r, options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, images_->busybox.digest);
}

// A token server in front of the real registry: the registry's `auth: token:` verifies the JWTs
// it mints (RS256, signed with a key whose self-signed certificate is the registry's
// rootcertbundle, carried in the x5c header).
class TokenServer {
 public:
  TokenServer(const fs::path& dir, std::string user, std::string pass)
      : user_(std::move(user)), pass_(std::move(pass)) {
    key_ = dir / "token-key.pem";
    cert_ = dir / "token-cert.pem";
    EXPECT_EQ(sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key_.string() + " -out " +
                     cert_.string() + " -days 2 -subj /CN=abx-token",
                 dir / "openssl.log"),
              0);
    std::string pem = read_file(cert_);
    std::string b64;
    std::istringstream lines(pem);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("-----", 0) != 0) b64 += line;
    }
    x5c_ = b64;
    http::ServerOptions so;
    so.io_threads = 1;
    auto s = http::Server::start(
        so, [this](http::Request&& req, http::Responder respond) { respond(handle(req)); });
    EXPECT_TRUE(s.ok());
    if (s.ok()) server_ = std::move(*s);
  }
  ~TokenServer() {
    if (server_) server_->shutdown(std::chrono::milliseconds(0));
  }
  std::string realm() const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + "/token";
  }
  const fs::path& cert() const { return cert_; }
  int issued() const { return issued_; }

 private:
  http::Response handle(const http::Request& req) {
    http::Response res{boost::beast::http::status::unauthorized, req.version()};
    auto auth = req.find(boost::beast::http::field::authorization);
    if (auth == req.end() ||
        std::string(auth->value()) != "Basic " + base64_encode(user_ + ":" + pass_)) {
      res.body() = R"({"details":"bad credentials"})";
      res.prepare_payload();
      return res;
    }
    // Grant every scope asked for: "repository:<name>:<actions>".
    std::string target(req.target());
    json::array access;
    for (std::size_t p = 0; (p = target.find("scope=", p)) != std::string::npos;) {
      p += 6;
      std::string scope = target.substr(p, target.find('&', p) - p);
      for (std::size_t q; (q = scope.find('%')) != std::string::npos;) {
        scope.replace(q, 3, 1, static_cast<char>(std::stoi(scope.substr(q + 1, 2), nullptr, 16)));
      }
      auto c1 = scope.find(':');
      auto c2 = scope.rfind(':');
      json::array actions;
      std::istringstream acts(scope.substr(c2 + 1));
      for (std::string a; std::getline(acts, a, ',');) actions.push_back(json::string(a));
      access.push_back({{"type", scope.substr(0, c1)},
                        {"name", scope.substr(c1 + 1, c2 - c1 - 1)},
                        {"actions", actions}});
    }
    auto now = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
    json::object header{{"typ", "JWT"}, {"alg", "RS256"}, {"x5c", json::array{x5c_}}};
    json::object claims{{"iss", "abx-test-issuer"},
                        {"sub", user_},
                        {"aud", "abx-test-registry"},
                        {"exp", now + 300},
                        {"nbf", now - 10},
                        {"iat", now - 10},
                        {"jti", std::to_string(now) + "-" + std::to_string(issued_)},
                        {"access", access}};
    std::string input =
        base64url_encode(json::serialize(header)) + "." + base64url_encode(json::serialize(claims));
    std::string token = input + "." + base64url_encode(sign(input));
    ++issued_;
    res.result(boost::beast::http::status::ok);
    res.set(boost::beast::http::field::content_type, "application/json");
    res.body() = json::serialize(json::object{{"token", token}});
    res.prepare_payload();
    return res;
  }

  std::string sign(const std::string& input) const {
    std::string pem = read_file(key_);
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    std::size_t len = 0;
    std::string sig;
    if (key != nullptr && EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
        EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()),
                       input.size()) == 1) {
      sig.resize(len);
      EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size());
      sig.resize(len);
    }
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(key);
    return sig;
  }

  std::string user_, pass_;
  fs::path key_, cert_;
  std::string x5c_;
  std::atomic<int> issued_{0};
  std::unique_ptr<http::Server> server_;
};

TEST_F(ImageRegistryTest, BearerTokenChallenge) {
  TokenServer tokens(tmp_.path(), "bob", "hunter2");
  start_registry("auth:\n  token:\n    realm: " + tokens.realm() +
                 "\n    service: abx-test-registry\n    issuer: abx-test-issuer\n"
                 "    rootcertbundle: " +
                 tokens.cert().string() + "\n");
  seed("v1", "team/busybox:v1", "bob:hunter2");
  auto r = ref(host() + "/team/busybox:v1");

  auto anonymous = pull(*store_, r, options_);
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.error().code(), ErrorCode::kUnauthenticated);

  write_auth("bob", "wrong");
  auto wrong = pull(*store_, r, options_);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code(), ErrorCode::kUnauthenticated);
  EXPECT_THAT(wrong.error().message(), HasSubstr("rejected"));

  write_auth("bob", "hunter2");
  int before = tokens.issued();
  auto img = pull(*store_, r, options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, images_->busybox.digest);
  EXPECT_GT(tokens.issued(), before);
}

TEST_F(ImageRegistryTest, CorruptedBlobStoresNothingAndRetryWorks) {
  start_registry();
  seed("v1", "test/busybox:v1");
  fs::path data = blob_data(images_->busybox_layer.digest);
  ASSERT_TRUE(fs::exists(data));
  std::string good = read_file(data);
  std::string bad = good;
  bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x5a);  // same size
  write_file(data, bad);

  auto r = ref(host() + "/test/busybox:v1");
  auto img = pull(*store_, r, options_);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(img.error().message(), HasSubstr("digest mismatch"));
  EXPECT_THAT(img.error().message(), HasSubstr(images_->busybox_layer.digest));
  EXPECT_FALSE(store_->has_blob(images_->busybox_layer.digest));
  EXPECT_FALSE(store_->has_blob(images_->busybox.digest));
  EXPECT_TRUE(store_->tags().empty());
  // Nothing half-written under tmp/ either.
  std::size_t leftovers = 0;
  if (fs::exists(tmp_.path() / "store" / "tmp")) {
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp_.path() / "store" / "tmp")) {
      ++leftovers;
    }
  }
  EXPECT_EQ(leftovers, 0u);
  EXPECT_EQ(entries_in(tmp_.path() / "store" / "layers" / "sha256"), 0u);

  write_file(data, good);
  auto retry = pull(*store_, r, options_);
  ASSERT_TRUE(retry.ok()) << retry.error().to_string();
  EXPECT_TRUE(store_->has_blob(images_->busybox_layer.digest));
}

// The registry serves other bytes that are a perfectly good layer (a plain tar of another tree,
// padded to the blob's size): its streamed extraction succeeds, and is thrown away because the
// digest does not match. Nothing reaches blobs/ or layers/, nothing stays in tmp/.
TEST_F(ImageRegistryTest, ValidLayerWithTheWrongDigestIsDiscarded) {
  start_registry();
  seed("v1", "test/busybox:v1");
  fs::path data = blob_data(images_->busybox_layer.digest);
  const std::size_t size = fs::file_size(data);
  fs::path evil = tmp_.path() / "evil";
  write_file(evil / "etc" / "evil", "not the image's\n");
  fs::path tar = tmp_.path() / "evil.tar";
  ASSERT_EQ(sh("tar --owner=0 --group=0 -C " + evil.string() + " -cf " + tar.string() + " .",
               tmp_.path() / "tar.log"),
            0);
  std::string bytes = read_file(tar);
  ASSERT_LT(bytes.size(), size);
  bytes.resize(size, '\0');
  write_file(data, bytes);

  auto img = pull(*store_, ref(host() + "/test/busybox:v1"), options_);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(img.error().message(), HasSubstr("digest mismatch"));
  EXPECT_THAT(img.error().message(), HasSubstr(images_->busybox_layer.digest));
  EXPECT_FALSE(store_->has_blob(images_->busybox_layer.digest));
  EXPECT_EQ(entries_in(tmp_.path() / "store" / "layers" / "sha256"), 0u);
  EXPECT_EQ(entries_in(tmp_.path() / "store" / "tmp"), 0u);
  EXPECT_TRUE(store_->tags().empty());
}

// A four-layer image (files, symlinks, modes, a whiteout, an opaque directory, a few MB of
// noise each) pulled three layers at a time: every layer directory is the same tree the
// file-based extraction of an import of the same layout gives. The layers are in flight at once
// (three "pulling" lines before the first layer is done); with parallel_layers = 1 they are not.
TEST_F(ImageRegistryTest, ParallelStreamedPullGivesTheSameTreesAsImport) {
  fs::path work = tmp_.path() / "multi";
  OciLayout layout(work / "layout", work / "build.log");
  std::vector<std::pair<Blob, std::string>> layers;
  for (unsigned i = 0; i < 4; ++i) {
    fs::path t = work / ("tree" + std::to_string(i));
    write_file(t / "data" / ("noise" + std::to_string(i)), noise(3 << 20, i));
    write_file(t / "etc" / ("layer" + std::to_string(i)), "layer " + std::to_string(i) + "\n");
    if (i == 0) {
      write_file(t / "etc" / "gone", "removed by layer 2\n");
      write_file(t / "opt" / "old", "hidden by layer 3\n");
      fs::create_symlink("layer0", t / "etc" / "link");
      fs::create_directories(t / "private");
      fs::permissions(t / "private",
                      fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
      fs::permissions(t / "etc" / "layer0", fs::perms::owner_all | fs::perms::others_read);
    }
    if (i == 2) write_file(t / "etc" / ".wh.gone", "");
    if (i == 3) write_file(t / "opt" / ".wh..wh..opq", "");
    layers.push_back(make_layer(layout, t, work / "build.log"));
  }
  Blob manifest = layout.add_image("amd64", layers);
  layout.tag("four", manifest);
  start_registry();
  seed_layout(layout.dir(), "four", "test/four:1");

  auto imported_store = Store::open((tmp_.path() / "imported").string());
  ASSERT_TRUE(imported_store.ok());
  auto imported = imported_store->import(ref("oci:" + layout.dir().string() + ":four"));
  ASSERT_TRUE(imported.ok()) << imported.error().to_string();
  ASSERT_EQ(imported->layer_dirs.size(), 4u);

  auto first_done_after = [&](std::size_t* pulling_before) {
    *pulling_before = 0;
    for (const auto& line : progress_) {
      for (const auto& [b, _] : layers) {
        if (line.rfind("done " + b.digest, 0) == 0) return;
        if (line.rfind("pulling " + b.digest, 0) == 0) ++*pulling_before;
      }
    }
  };
  options_.progress_interval = std::chrono::milliseconds(0);
  auto img = pull(*store_, ref(host() + "/test/four:1"), options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  ASSERT_EQ(img->layer_dirs.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(tree_listing(img->layer_dirs[i]), tree_listing(imported->layer_dirs[i])) << i;
  }
  EXPECT_TRUE(fs::is_character_file(fs::path(img->layer_dirs[2]) / "etc" / "gone"));
  EXPECT_EQ(fs::status(fs::path(img->layer_dirs[0]) / "private").permissions() & fs::perms::all,
            fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  std::size_t in_flight = 0;
  first_done_after(&in_flight);
  EXPECT_EQ(in_flight, 3u);
  // Bytes so far, per layer, while it downloads.
  EXPECT_THAT(progress_, ::testing::Contains(::testing::MatchesRegex(
                             "sha256:[0-9a-f]{12}: [0-9.]+ MB of 3\\.[0-9] MB")));
  // The store keeps its modes: nothing the streamed extraction made is reachable by others.
  for (const char* d : {"", "/tmp", "/blobs/sha256", "/layers/sha256"}) {
    EXPECT_EQ(fs::status(tmp_.path() / ("store" + std::string(d))).permissions() & fs::perms::all,
              fs::perms::owner_all)
        << d;
  }
  for (const auto& [b, _] : layers) {
    EXPECT_EQ(fs::status(store_->blob_path(b.digest)).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
  }

  auto one_store = Store::open((tmp_.path() / "one").string());
  ASSERT_TRUE(one_store.ok());
  progress_.clear();
  options_.parallel_layers = 1;
  auto one = pull(*one_store, ref(host() + "/test/four:1"), options_);
  ASSERT_TRUE(one.ok()) << one.error().to_string();
  first_done_after(&in_flight);
  EXPECT_EQ(in_flight, 1u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(tree_listing(one->layer_dirs[i]), tree_listing(imported->layer_dirs[i])) << i;
  }
}

// OCI tar+zstd layers are pulled (and extracted while they download) as gzip ones are.
TEST_F(ImageRegistryTest, PullsZstdLayers) {
  if (std::system("command -v zstd >/dev/null") != 0) GTEST_SKIP() << "needs zstd";
  fs::path work = tmp_.path() / "zstd";
  OciLayout layout(work / "layout", work / "build.log");
  fs::path t = work / "tree";
  fs::create_directories(t / "bin");
  fs::copy_file("/bin/busybox", t / "bin" / "busybox");
  write_file(t / "etc" / "abx-hello", "hello from zstd\n");
  auto layer = make_layer(layout, t, work / "build.log", /*zstd=*/true);
  Blob manifest = layout.add_image("amd64", {layer});
  layout.tag("z", manifest);
  start_registry();
  seed_layout(layout.dir(), "z", "test/zstd:1");

  auto img = pull(*store_, ref(host() + "/test/zstd:1"), options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  ASSERT_EQ(img->layers.size(), 1u);
  EXPECT_EQ(img->layers[0], layer.first.digest);
  auto m = store_->read_blob(img->manifest_digest);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(*m, HasSubstr("application/vnd.oci.image.layer.v1.tar+zstd"));
  EXPECT_EQ(read_file(fs::path(img->layer_dirs[0]) / "etc" / "abx-hello"), "hello from zstd\n");
  EXPECT_EQ(read_file(fs::path(img->layer_dirs[0]) / "bin" / "busybox"), read_file("/bin/busybox"));
}

TEST_F(ImageRegistryTest, UnknownTagIsNotFound) {
  start_registry();
  seed("v1", "test/busybox:v1");
  auto r = ref(host() + "/test/busybox:nope");
  auto img = pull(*store_, r, options_);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(img.error().message(), HasSubstr(r.str()));
  EXPECT_THAT(img.error().message(), HasSubstr("tag 'nope' not found"));
}

TEST_F(ImageRegistryTest, UnknownMediaTypeIsRefused) {
  start_registry();
  // An OCI artifact (a Helm chart's media types), pushed with our own push().
  auto cfg = store_->put_blob("{}");
  ASSERT_TRUE(cfg.ok()) << cfg.error().to_string();
  auto content = store_->put_blob("not a tar");
  ASSERT_TRUE(content.ok());
  json::object manifest{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config",
       {{"mediaType", "application/vnd.oci.image.config.v1+json"}, {"digest", *cfg}, {"size", 2}}},
      {"layers", json::array{{{"mediaType", "application/vnd.cncf.helm.chart.content.v1.tar+gzip"},
                              {"digest", *content},
                              {"size", 9}}}}};
  auto m = store_->put_blob(json::serialize(manifest));
  ASSERT_TRUE(m.ok());
  auto pushed = push(*store_, *m, ref(host() + "/charts/thing:1.0"), options_);
  ASSERT_TRUE(pushed.ok()) << pushed.error().to_string();

  auto fresh = Store::open((tmp_.path() / "fresh").string());
  ASSERT_TRUE(fresh.ok());
  auto img = pull(*fresh, ref(host() + "/charts/thing:1.0"), options_);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kUnsupportedMediaType);
  EXPECT_THAT(
      img.error().message(),
      HasSubstr(
          "unsupported layer media type \"application/vnd.cncf.helm.chart.content.v1.tar+gzip\""));
  EXPECT_FALSE(fresh->has_blob(*content));
}

TEST_F(ImageRegistryTest, UnreachableRegistry) {
  port_ = free_port();  // nothing listens there
  options_.connect_timeout = std::chrono::seconds(2);
  auto r = ref(host() + "/test/busybox:v1");
  auto img = pull(*store_, r, options_);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(img.error().message(), HasSubstr(r.str()));
  EXPECT_THAT(img.error().message(), HasSubstr("unreachable"));
}

TEST_F(ImageRegistryTest, SilentServerTimesOut) {
  // A listening socket nobody accepts on: the connect succeeds (backlog), nothing ever answers.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  options_.connect_timeout = std::chrono::milliseconds(300);
  options_.read_timeout = std::chrono::milliseconds(300);
  auto start = std::chrono::steady_clock::now();
  auto img = pull(*store_, ref(host() + "/test/busybox:v1"), options_);
  close(fd);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kDeadlineExceeded) << img.error().to_string();
  EXPECT_THAT(img.error().message(), HasSubstr("timed out"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Blob storage elsewhere (S3-style): a front registry with Basic auth answers blob GETs with a
// redirect to another host, which must not see the registry's credentials. Both are small
// servers in the test, serving the test layout's blobs.
class RedirectingRegistry {
 public:
  explicit RedirectingRegistry(fs::path layout) : layout_(std::move(layout)) {
    http::ServerOptions so;
    so.io_threads = 1;
    auto storage = http::Server::start(so, [this](http::Request&& req, http::Responder respond) {
      if (req.find(boost::beast::http::field::authorization) != req.end()) ++storage_saw_auth_;
      std::string target(req.target());
      std::string hex = target.substr(target.rfind(':') + 1, 64);
      std::string data = read_file(layout_ / "blobs/sha256" / hex);
      if (truncate_ && data.size() > 1000) {
        // Announce the whole blob, send half, drop the connection: an interrupted download.
        http::Response head{boost::beast::http::status::ok, req.version()};
        head.content_length(data.size());
        auto writer = respond.stream(std::move(head));
        writer->write(data.substr(0, data.size() / 2));
        return;  // the writer goes without finish(): the connection is aborted
      }
      respond(reply(req, 200, std::move(data)));
    });
    EXPECT_TRUE(storage.ok());
    storage_ = std::move(*storage);
    auto front = http::Server::start(so, [this](http::Request&& req, http::Responder respond) {
      std::string target(req.target());
      auto auth = req.find(boost::beast::http::field::authorization);
      if (auth == req.end() || auth->value() != "Basic " + base64_encode("carol:pw")) {
        auto res = reply(req, 401, R"({"errors":[{"code":"UNAUTHORIZED"}]})");
        res.set(boost::beast::http::field::www_authenticate, R"(Basic realm="front")");
        return respond(std::move(res));
      }
      if (target == "/v2/") return respond(reply(req, 200, "{}"));
      if (auto m = target.find("/manifests/"); m != std::string::npos) {
        std::string digest = manifest_;
        auto res = reply(req, 200, read_file(layout_ / "blobs/sha256" / digest.substr(7)));
        res.set(boost::beast::http::field::content_type,
                "application/vnd.oci.image.manifest.v1+json");
        return respond(std::move(res));
      }
      auto b = target.find("/blobs/");
      std::string digest = target.substr(b + 7);
      auto res = reply(req, 307, "");
      if (target.starts_with("/v2/loop/")) {
        res.set(boost::beast::http::field::location, target);
      } else {
        res.set(boost::beast::http::field::location,
                "http://localhost:" + std::to_string(storage_->port()) + "/bucket/" + digest +
                    "?X-Signature=abc");
      }
      respond(std::move(res));
    });
    EXPECT_TRUE(front.ok());
    front_ = std::move(*front);
  }
  ~RedirectingRegistry() {
    front_->shutdown(std::chrono::milliseconds(0));
    storage_->shutdown(std::chrono::milliseconds(0));
  }
  std::string host() const { return "127.0.0.1:" + std::to_string(front_->port()); }
  void serve_manifest(std::string digest) { manifest_ = std::move(digest); }
  int storage_saw_auth() const { return storage_saw_auth_; }
  void truncate_blobs(bool on) { truncate_ = on; }

 private:
  static http::Response reply(const http::Request& req, unsigned status, std::string body) {
    http::Response res{static_cast<boost::beast::http::status>(status), req.version()};
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
  }
  fs::path layout_;
  std::string manifest_;
  std::atomic<int> storage_saw_auth_{0};
  std::atomic<bool> truncate_{false};
  std::unique_ptr<http::Server> storage_;
  std::unique_ptr<http::Server> front_;
};

TEST_F(ImageRegistryTest, FollowsBlobRedirectsWithoutCredentials) {
  RedirectingRegistry front(images_->layout);
  front.serve_manifest(images_->busybox.digest);
  port_ = 0;
  options_.auth_file = (tmp_.path() / "auth.json").string();
  write_file(options_.auth_file, R"({"auths":{")" + front.host() + R"(":{"auth":")" +
                                     base64_encode("carol:pw") + R"("}}})");
  auto img = pull(*store_, ref(front.host() + "/redir/img:v1"), options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, images_->busybox.digest);
  EXPECT_TRUE(store_->has_blob(images_->busybox_layer.digest));
  EXPECT_EQ(front.storage_saw_auth(), 0);

  auto fresh = Store::open((tmp_.path() / "fresh").string());
  ASSERT_TRUE(fresh.ok());
  options_.max_redirects = 3;
  auto loop = pull(*fresh, ref(front.host() + "/loop/img:v1"), options_);
  ASSERT_FALSE(loop.ok());
  EXPECT_THAT(loop.error().message(), HasSubstr("more than 3 redirects"));
}

TEST_F(ImageRegistryTest, InterruptedBlobStoresNothingAndRetryWorks) {
  RedirectingRegistry front(images_->layout);
  front.serve_manifest(images_->busybox.digest);
  front.truncate_blobs(true);
  options_.auth_file = (tmp_.path() / "auth.json").string();
  write_file(options_.auth_file, R"({"auths":{")" + front.host() + R"(":{"auth":")" +
                                     base64_encode("carol:pw") + R"("}}})");
  auto r = ref(front.host() + "/redir/img:v1");
  auto cut = pull(*store_, r, options_);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code(), ErrorCode::kUnavailable) << cut.error().to_string();
  EXPECT_THAT(cut.error().message(), HasSubstr(images_->busybox_layer.digest));
  EXPECT_FALSE(store_->has_blob(images_->busybox_layer.digest));
  EXPECT_TRUE(store_->tags().empty());
  EXPECT_TRUE(!fs::exists(tmp_.path() / "store" / "tmp") ||
              fs::is_empty(tmp_.path() / "store" / "tmp"));

  front.truncate_blobs(false);
  auto retry = pull(*store_, r, options_);
  ASSERT_TRUE(retry.ok()) << retry.error().to_string();
  EXPECT_TRUE(store_->has_blob(images_->busybox_layer.digest));
}

TEST_F(ImageRegistryTest, ManifestOverTheLimitIsRefused) {
  start_registry();
  seed("v1", "test/busybox:v1");
  options_.max_manifest_bytes = 100;
  auto img = pull(*store_, ref(host() + "/test/busybox:v1"), options_);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.error().code(), ErrorCode::kPayloadTooLarge);
  EXPECT_THAT(img.error().message(), HasSubstr("over the limit of 100 bytes"));
}

TEST_F(ImageRegistryTest, PushThenPullBackByDigestAndSkopeoInspect) {
  start_registry();
  seed("v1", "test/busybox:v1");
  auto img = pull(*store_, ref(host() + "/test/busybox:v1"), options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();

  progress_.clear();
  auto dest = ref(host() + "/pushed/copy:v2");
  auto st = push(*store_, *img, dest, options_);
  ASSERT_TRUE(st.ok()) << st.error().to_string();
  // Blobs are per repository in the registry: both were uploaded to the new one.
  EXPECT_THAT(progress_,
              ::testing::Contains(HasSubstr("pushing " + images_->busybox_layer.digest)));
  progress_.clear();
  ASSERT_TRUE(push(*store_, *img, dest, options_).ok());
  EXPECT_THAT(progress_, ::testing::Contains("exists " + images_->busybox_layer.digest));

  fs::path out = tmp_.path() / "inspect.json";
  ASSERT_EQ(sh("skopeo inspect --tls-verify=false docker://" + host() + "/pushed/copy:v2 > " +
                   out.string(),
               tmp_.path() / "skopeo.log"),
            0)
      << read_file(tmp_.path() / "skopeo.log");
  auto inspected = json::parse(read_file(out));
  EXPECT_EQ(inspected.at("Digest").as_string(), img->manifest_digest);
  EXPECT_EQ(inspected.at("Architecture").as_string(), "amd64");
  EXPECT_EQ(inspected.at("Layers").as_array().size(), 1u);

  auto fresh = Store::open((tmp_.path() / "fresh").string());
  ASSERT_TRUE(fresh.ok());
  auto back = pull(*fresh, ref(host() + "/pushed/copy@" + img->manifest_digest), options_);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->manifest_digest, img->manifest_digest);
  EXPECT_EQ(back->layers, img->layers);
}

TEST_F(ImageRegistryTest, TlsWithExtraCaAndNotWithout) {
  // The certificate names localhost only: reached as 127.0.0.1 it must fail host name checks.
  fs::path key = tmp_.path() / "tls-key.pem";
  fs::path cert = tmp_.path() / "tls-cert.pem";
  ASSERT_EQ(
      sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key.string() + " -out " +
             cert.string() + " -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost",
         tmp_.path() / "openssl.log"),
      0);
  start_registry("",
                 "  tls:\n    certificate: " + cert.string() + "\n    key: " + key.string() + "\n");
  seed("v1", "secure/busybox:v1");
  auto r = ref("localhost:" + std::to_string(port_) + "/secure/busybox:v1");

  auto untrusted = pull(*store_, r, options_);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(untrusted.error().message(), HasSubstr("not trusted"));
  EXPECT_THAT(untrusted.error().message(), HasSubstr(r.str()));

  options_.ca_file = cert.string();
  auto img = pull(*store_, r, options_);
  ASSERT_TRUE(img.ok()) << img.error().to_string();
  EXPECT_EQ(img->manifest_digest, images_->busybox.digest);

  auto by_address = pull(*store_, ref(host() + "/secure/busybox:v1"), options_);
  ASSERT_FALSE(by_address.ok());
  EXPECT_EQ(by_address.error().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(by_address.error().message(), HasSubstr("does not name the host"));
}

}  // namespace
}  // namespace abx::image
