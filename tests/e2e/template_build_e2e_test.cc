// Template builds end to end: libabx uploads a context to the real abxd, which builds an image
// FROM scratch (COPY of Debian's static busybox, a RUN in a real sandbox, ENV/WORKDIR/CMD),
// serves the new template without a restart, runs a sandbox of it; a second build is cached
// step for step and writes no blob; a failing RUN names its line and leaves no template.
// Needs root (abxd), busybox-static and the /opt/abx bundle.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "abx/client/sandbox.h"
#include "abx/client/templates.h"
#include "abx/http/client.h"
#include "abx/testing/abxd.h"
#include "abx/testing/child_process.h"

namespace abx::e2e {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr const char* kBusybox = "/bin/busybox";

// Its own image store (not the run's shared one): builds write blobs and `rm` runs gc.
class TemplateBuildE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "abxd needs root for namespaces and cgroups";
    // Debian's busybox package is dynamic; busybox-static puts the static one here.
    if (!fs::exists(kBusybox)) GTEST_SKIP() << "needs busybox-static (" << kBusybox << ")";
    tmp_.emplace("template-build-e2e");
    const fs::path home = tmp_->path() / "abxd";
    abxd_ = std::make_unique<testing::Abxd>(
        home, std::vector<std::string>{"--image-store", (home / "images").string()});
    ASSERT_TRUE(abxd_->start());
    cfg_.api_url = abxd_->url();
    cfg_.api_key = abxd_->api_key();
    cfg_.home = home;
    cfg_.request_timeout = std::chrono::seconds(120);
  }
  void TearDown() override {
    if (abxd_) abxd_->shutdown();
  }
  const fs::path& home() const { return abxd_->home(); }
  const testing::TempDir& tmp() const { return *tmp_; }

  fs::path context(const std::string& name, const std::string& dockerfile) {
    fs::path dir = tmp() / name;
    fs::create_directories(dir);
    fs::copy_file(kBusybox, dir / "busybox", fs::copy_options::overwrite_existing);
    std::ofstream(dir / "Dockerfile") << dockerfile;
    return dir;
  }

  std::size_t blob_count() const {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(home() / "images/blobs/sha256", ec)) {
      (void)e;
      ++n;
    }
    return n;
  }

  bool listed(const std::string& id) {
    auto all = client::list_templates(cfg_);
    EXPECT_TRUE(all.ok()) << all.error().message();
    if (!all.ok()) return false;
    for (const auto& t : *all) {
      if (t.is_object() && t.as_object().if_contains("templateID") &&
          t.as_object().at("templateID") == json::value(id))
        return true;
    }
    return false;
  }

  std::optional<testing::TempDir> tmp_;
  std::unique_ptr<testing::Abxd> abxd_;
  client::ConnectionConfig cfg_;
};

constexpr const char* kDockerfile =
    "FROM scratch\n"
    "COPY busy* /bin/\n"  // a glob into a directory
    "RUN [\"/bin/busybox\",\"sh\",\"-c\",\"echo hi > /hello; echo building\"]\n"
    "ENV GREETING=hello PATH=/bin\n"
    "WORKDIR /work\n"
    "CMD [\"/bin/busybox\", \"sh\"]\n";

TEST_F(TemplateBuildE2E, BuildServeCacheAndFail) {
  fs::path ctx = context("ctx", kDockerfile);
  client::BuildOptions bo;
  bo.name = "hello";
  std::vector<client::BuildEvent> events;
  auto collect = [&events](const client::BuildEvent& e) { events.push_back(e); };

  auto built = client::build_template(ctx.string(), bo, collect, cfg_);
  ASSERT_TRUE(built.ok()) << built.error().message();
  int steps = 0;
  bool saw_output = false;
  for (const auto& e : events) {
    if (e.type == "step") {
      ++steps;
      EXPECT_EQ(e.total, 6);
      if (e.instruction.starts_with("RUN") || e.instruction.starts_with("COPY")) {
        EXPECT_FALSE(e.cached) << e.instruction;
      }
    }
    if (e.type == "log" && e.line == "building") saw_output = true;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_TRUE(saw_output) << "the RUN step's stdout is streamed as a log event";
  EXPECT_EQ(events.back().type, "done");
  // Bytes (issue 38 item 3): the context's size before the upload, and each new layer's.
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().type, "context");
  EXPECT_GT(events.front().bytes, 0);
  std::vector<std::int64_t> layer_bytes;
  for (const auto& e : events) {
    if (e.type == "layer") layer_bytes.push_back(e.bytes);
  }

  // Served without a restart, with its image metadata.
  EXPECT_TRUE(listed("hello"));
  auto img = client::template_image("hello", cfg_);
  ASSERT_TRUE(img.ok()) << img.error().message();
  ASSERT_TRUE(img->at("layers").is_array());
  EXPECT_EQ(img->at("layers").as_array().size(), 3u);  // COPY, RUN, WORKDIR /work
  std::vector<std::int64_t> image_bytes;
  for (const auto& l : img->at("layers").as_array()) {
    image_bytes.push_back(l.as_object().at("size").as_int64());
  }
  EXPECT_EQ(layer_bytes, image_bytes) << "one layer event per new layer, with its size";
  const auto& config = img->at("config").as_object();
  EXPECT_EQ(config.at("workingDir"), "/work");
  EXPECT_EQ(config.at("cmd"), (json::array{"/bin/busybox", "sh"}));

  // A sandbox of it: /hello was written by the RUN step.
  {
    auto sbx = client::Sandbox::create("hello", {}, cfg_);
    ASSERT_TRUE(sbx.ok()) << sbx.error().message();
    auto hello = sbx->files().read("/hello");
    EXPECT_TRUE(hello.ok()) << (hello.ok() ? "" : hello.error().message());
    if (hello.ok()) {
      EXPECT_EQ(*hello, "hi\n");
    }
    (void)sbx->kill();
  }

  // The same build again: every step cached, no new blob.
  const std::size_t blobs = blob_count();
  events.clear();
  auto again = client::build_template(ctx.string(), bo, collect, cfg_);
  ASSERT_TRUE(again.ok()) << again.error().message();
  steps = 0;
  for (const auto& e : events) {
    EXPECT_NE(e.type, "layer") << "a cached step adds no layer";
    if (e.type != "step") continue;
    ++steps;
    EXPECT_TRUE(e.cached) << e.instruction;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(blob_count(), blobs);
  EXPECT_EQ(again->at("manifestDigest"), built->at("manifestDigest"));

  // Another template from the same steps (issue 38 item 3): the layer cache is the store's, not
  // one template's, so every step is cached and no blob is added.
  events.clear();
  client::BuildOptions other = bo;
  other.name = "hello-too";
  auto twin = client::build_template(ctx.string(), other, collect, cfg_);
  ASSERT_TRUE(twin.ok()) << twin.error().message();
  steps = 0;
  for (const auto& e : events) {
    if (e.type != "step") continue;
    ++steps;
    EXPECT_TRUE(e.cached) << "hello-too: " << e.instruction;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(blob_count(), blobs);
  EXPECT_EQ(twin->at("manifestDigest"), built->at("manifestDigest"));
  EXPECT_TRUE(listed("hello-too"));

  // A failing RUN: the line, the exit code, and no template.
  fs::path bad = context("bad",
                         "FROM scratch\nCOPY busybox /bin/busybox\n"
                         "RUN [\"/bin/busybox\",\"sh\",\"-c\",\"exit 3\"]\n");
  client::BuildOptions bad_opts;
  bad_opts.name = "broken";
  auto failed = client::build_template(bad.string(), bad_opts, {}, cfg_);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message(), "Dockerfile:3: RUN exited with 3");
  EXPECT_FALSE(listed("broken"));
  EXPECT_FALSE(fs::exists(home() / "templates/broken"));
  // No partial files: the workspace, the uploads and the store's tmp/ are empty again.
  for (const char* dir : {"build-work", "uploads", "images/tmp"}) {
    std::error_code ec;
    EXPECT_TRUE(!fs::exists(home() / dir) || fs::is_empty(home() / dir, ec)) << dir;
  }
  EXPECT_TRUE(client::template_image("broken", cfg_).error().code() == ErrorCode::kNotFound);

  // A missing COPY source names the line too.
  fs::path missing = context("missing", "FROM scratch\nCOPY nothere /x\n");
  auto nosrc = client::build_template(missing.string(), bad_opts, {}, cfg_);
  ASSERT_FALSE(nosrc.ok());
  EXPECT_EQ(nosrc.error().message(),
            "Dockerfile:2: COPY source nothere not found in the build context");

  // rm while a sandbox of it runs: the template goes, the layers the sandbox stands on stay
  // until it is gone (gc keeps images in use).
  auto running = client::Sandbox::create("hello", {}, cfg_);
  ASSERT_TRUE(running.ok()) << running.error().message();
  ASSERT_TRUE(client::delete_template("hello", cfg_).ok());
  EXPECT_FALSE(listed("hello"));
  EXPECT_EQ(client::delete_template("hello", cfg_).error().code(), ErrorCode::kNotFound);
  auto still = running->files().read("/hello");  // from the RUN step's layer
  EXPECT_TRUE(still.ok()) << (still.ok() ? "" : still.error().message());
  if (still.ok()) {
    EXPECT_EQ(*still, "hi\n");
  }
  (void)running->kill();
}

// A free loopback port (bound and released; the registry takes it right after).
std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Push to Debian's reference registry on loopback (as built and bare), then build FROM the
// pushed image: the registry client's pull and push through the template API.
TEST_F(TemplateBuildE2E, PushAndBuildFromARegistry) {
  if (!fs::exists("/usr/bin/docker-registry")) GTEST_SKIP() << "needs docker-registry";
  const std::uint16_t port = free_port();
  const std::string host = "127.0.0.1:" + std::to_string(port);
  fs::create_directories(tmp().path() / "registry");
  std::ofstream(tmp().path() / "registry/config.yml")
      << "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: "
      << (tmp().path() / "registry/data").string() << "\nhttp:\n  addr: " << host << "\n";
  const fs::path dir = tmp().path() / "registry";
  testing::ChildProcess registry({"/bin/sh", "-c",
                                  "exec /usr/bin/docker-registry serve " +
                                      (dir / "config.yml").string() + " >>" +
                                      (dir / "log").string() + " 2>&1"});
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    auto r =
        http::fetch("127.0.0.1", port, http::make_request(boost::beast::http::verb::get, "/v2/"),
                    std::chrono::seconds(1));
    up = r.ok() && r->result_int() == 200;
    if (!up) ::usleep(50'000);
  }
  ASSERT_TRUE(up) << "docker-registry did not start on " << host;

  client::BuildOptions bo;
  bo.name = "hello";
  ASSERT_TRUE(client::build_template(context("ctx", kDockerfile).string(), bo, {}, cfg_).ok());
  auto pushed = client::push_template("hello", host + "/abx/hello:bare", cfg_, /*bare=*/true);
  ASSERT_TRUE(pushed.ok()) << pushed.error().message();
  EXPECT_EQ(pushed->at("ref"), json::value(host + "/abx/hello:bare"));
  auto tags =
      http::fetch("127.0.0.1", port,
                  http::make_request(boost::beast::http::verb::get, "/v2/abx/hello/tags/list"));
  ASSERT_TRUE(tags.ok());
  EXPECT_NE(tags->body().find("bare"), std::string::npos) << tags->body();

  // FROM the pushed image under another reference: pulled, then a RUN on top of it.
  fs::path ctx =
      context("from-registry", "FROM " + host +
                                   "/abx/hello:bare\n"
                                   "RUN [\"/bin/busybox\",\"cp\",\"/hello\",\"/copied\"]\n");
  client::BuildOptions child;
  child.name = "child";
  std::vector<std::string> steps;
  auto built = client::build_template(
      ctx.string(), child,
      [&](const client::BuildEvent& e) {
        if (e.type == "step") steps.push_back(e.instruction + (e.cached ? " CACHED" : ""));
      },
      cfg_);
  ASSERT_TRUE(built.ok()) << built.error().message();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0], "FROM " + host + "/abx/hello:bare");  // pulled: not from the cache
  auto img = client::template_image("child", cfg_);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->at("layers").as_array().size(), 4u);

  // The same image with its layers recompressed as zstd (OCI tar+zstd) by skopeo: pulled, and a
  // RUN runs in it.
  if (!fs::exists("/usr/bin/skopeo")) GTEST_SKIP() << "needs skopeo for the zstd image";
  const std::string log = (dir / "skopeo.log").string();
  ASSERT_EQ(std::system(("skopeo --insecure-policy copy -q --src-tls-verify=false "
                         "--dest-compress-format zstd docker://" +
                         host + "/abx/hello:bare oci:" + (dir / "zstd").string() + ":z >>" + log +
                         " 2>&1 && skopeo --insecure-policy copy -q "
                         "--dest-tls-verify=false oci:" +
                         (dir / "zstd").string() + ":z docker://" + host + "/abx/hello:zstd >>" +
                         log + " 2>&1")
                            .c_str()),
            0);
  auto get = http::make_request(boost::beast::http::verb::get, "/v2/abx/hello/manifests/zstd");
  get.set(boost::beast::http::field::accept, "application/vnd.oci.image.manifest.v1+json");
  auto manifest = http::fetch("127.0.0.1", port, get);
  ASSERT_TRUE(manifest.ok());
  EXPECT_NE(manifest->body().find("application/vnd.oci.image.layer.v1.tar+zstd"), std::string::npos)
      << manifest->body();
  fs::path zctx = context("from-zstd", "FROM " + host +
                                           "/abx/hello:zstd\n"
                                           "RUN [\"/bin/busybox\",\"cp\",\"/hello\",\"/z\"]\n");
  client::BuildOptions zbo;
  zbo.name = "from-zstd";
  auto zbuilt = client::build_template(zctx.string(), zbo, {}, cfg_);
  ASSERT_TRUE(zbuilt.ok()) << zbuilt.error().message();
}

// ADD of a local tar extracts it; ARG/ENV expansion and a relative WORKDIR; a RUN checks it all
// (the build fails if anything is off).
TEST_F(TemplateBuildE2E, AddArgEnvWorkdir) {
  fs::path ctx = context("add",
                         "FROM scratch\n"
                         "ARG DIR=data\n"
                         "COPY busybox /bin/busybox\n"
                         "ADD files.tar.gz /$DIR/\n"
                         "ENV WHERE=/${DIR}\n"
                         "WORKDIR $WHERE\n"
                         "WORKDIR sub\n"
                         "RUN [\"/bin/busybox\", \"sh\", \"-c\", "
                         "\"test \\\"$(/bin/busybox cat ../a)\\\" = A && "
                         "test \\\"$(/bin/busybox pwd)\\\" = /data/sub && "
                         "test \\\"$WHERE\\\" = /data\"]\n");
  fs::create_directories(tmp().path() / "files");
  std::ofstream(tmp().path() / "files/a") << "A";
  ASSERT_EQ(std::system(("tar -C " + (tmp().path() / "files").string() + " -czf " +
                         (ctx / "files.tar.gz").string() + " a")
                            .c_str()),
            0);
  client::BuildOptions bo;
  bo.name = "added";
  std::vector<std::string> logs;
  auto built = client::build_template(
      ctx.string(), bo,
      [&](const client::BuildEvent& e) {
        if (e.type == "log") logs.push_back(e.line);
      },
      cfg_);
  ASSERT_TRUE(built.ok()) << built.error().message();
  auto img = client::template_image("added", cfg_);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->at("config").at("workingDir"), "/data/sub");
}

// Multi-stage: a stage builds on an earlier one (FROM tools), the final image takes files from
// both with COPY --from (by name): what a later stage deleted stays deleted (whiteouts), owners
// are kept, and only the last stage's layers make the image. A RUN in the final stage checks it.
TEST_F(TemplateBuildE2E, MultiStageCopyFrom) {
  fs::path ctx = context(
      "multi",
      "FROM scratch AS tools\n"
      "COPY busybox /bin/busybox\n"
      "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"mkdir -p /out/sub && echo made > "
      "/out/sub/artifact && chown 7:8 /out/sub/artifact && echo old > /out/kept\"]\n"
      "FROM tools AS second\n"
      "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"rm /out/kept && echo two > /out/two\"]\n"
      "FROM scratch\n"
      "COPY --from=tools /bin/busybox /bin/busybox\n"
      "COPY --from=second /out /out\n"
      "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"test \\\"$(/bin/busybox cat /out/sub/artifact)\\\" "
      "= "
      "made && test ! -e /out/kept && test \\\"$(/bin/busybox cat /out/two)\\\" = two && test "
      "\\\"$(/bin/busybox stat -c %u:%g /out/sub/artifact)\\\" = 7:8\"]\n");
  client::BuildOptions bo;
  bo.name = "multi";
  auto built = client::build_template(ctx.string(), bo, {}, cfg_);
  ASSERT_TRUE(built.ok()) << built.error().message();
  auto img = client::template_image("multi", cfg_);
  ASSERT_TRUE(img.ok()) << img.error().message();
  // The final stage's COPY, COPY and RUN: nothing of the earlier stages' own layers.
  EXPECT_LE(img->at("layers").as_array().size(), 3u);
  auto sbx = client::Sandbox::create("multi", {}, cfg_);
  ASSERT_TRUE(sbx.ok()) << sbx.error().message();
  auto two = sbx->files().read("/out/two");
  EXPECT_TRUE(two.ok() && *two == "two\n");
  EXPECT_FALSE(sbx->files().read("/out/kept").ok()) << "deleted in stage 'second'";
  (void)sbx->kill();

  // A source the stage lacks names the stage and the line.
  fs::path bad = context("multi-bad",
                         "FROM scratch AS a\nCOPY busybox /bin/busybox\n"
                         "FROM scratch\nCOPY --from=a /nothere /x\n");
  bo.name = "multi-bad";
  auto missing = client::build_template(bad.string(), bo, {}, cfg_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(), "Dockerfile:4: COPY source /nothere not found in stage a");
}

// ARG scoping as Docker's: a global ARG is seen by FROM, and inside a stage only once declared
// again; --build-arg overrides defaults; an ARG with no value used by a plain $NAME is an error
// naming the line and the ARG.
TEST_F(TemplateBuildE2E, ArgsAndBuildArgs) {
  fs::path ctx = context("args",
                         "ARG BASE=scratch\n"
                         "ARG WHERE=/global\n"
                         "FROM $BASE\n"
                         "ARG WHERE\n"
                         "ARG DEST\n"
                         "COPY busybox $DEST\n"
                         "ENV WHERE_ENV=$WHERE\n");
  client::BuildOptions bo;
  bo.name = "args";
  auto unset = client::build_template(ctx.string(), bo, {}, cfg_);
  ASSERT_FALSE(unset.ok());
  EXPECT_EQ(unset.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(unset.error().message(),
            "Dockerfile:6: $DEST has no value: ARG DEST (line 5) has no default and the build got "
            "no --build-arg DEST=…");

  bo.build_args = {{"DEST", "/bin/busybox"}, {"UNUSED", "1"}};
  std::vector<std::string> logs;
  auto built = client::build_template(
      ctx.string(), bo,
      [&](const client::BuildEvent& e) {
        if (e.type == "log") logs.push_back(e.line);
      },
      cfg_);
  ASSERT_TRUE(built.ok()) << built.error().message();
  auto img = client::template_image("args", cfg_);
  ASSERT_TRUE(img.ok());
  bool found = false;
  for (const auto& e : img->at("config").at("env").as_array()) {
    found = found || e == "WHERE_ENV=/global";
  }
  EXPECT_TRUE(found) << json::serialize(img->at("config"));
  EXPECT_NE(
      std::find(logs.begin(), logs.end(), "warning: --build-arg UNUSED was not used by any ARG"),
      logs.end());
}

// RUN as the USER in effect: a name from the image's /etc/passwd (its gid, its supplementary
// groups from /etc/group, its HOME), then uid:gid numbers; a user who cannot write / fails to.
// An unknown user fails the RUN naming both lines.
TEST_F(TemplateBuildE2E, RunAsUser) {
  fs::path ctx = context(
      "user",
      "FROM scratch\n"
      "COPY busybox /bin/busybox\n"
      "COPY passwd group /etc/\n"
      "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox mkdir -p /home/alice && "
      "/bin/busybox chown alice /home/alice\"]\n"
      "USER alice\n"
      "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox id > $HOME/id && ! /bin/busybox "
      "touch /not-mine 2>/dev/null\"]\n"
      "USER 1234:staff\n"
      "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"test $(/bin/busybox id -u):$(/bin/busybox id -g) "
      "= 1234:50\"]\n"
      "USER root\n");
  std::ofstream(ctx / "passwd") << "root:x:0:0:root:/root:/bin/sh\n"
                                   "alice:x:1000:1000::/home/alice:/bin/sh\n";
  std::ofstream(ctx / "group") << "root:x:0:\nalice:x:1000:\nstaff:x:50:bob,alice\n";
  client::BuildOptions bo;
  bo.name = "user";
  auto built = client::build_template(ctx.string(), bo, {}, cfg_);
  ASSERT_TRUE(built.ok()) << built.error().message();
  auto sbx = client::Sandbox::create("user", {}, cfg_);
  ASSERT_TRUE(sbx.ok()) << sbx.error().message();
  auto id = sbx->files().read("/home/alice/id");
  ASSERT_TRUE(id.ok()) << id.error().message();
  EXPECT_EQ(*id, "uid=1000(alice) gid=1000(alice) groups=50(staff)\n");
  (void)sbx->kill();

  fs::path bad = context("user-bad",
                         "FROM scratch\nCOPY busybox /bin/busybox\nCOPY passwd /etc/passwd\n"
                         "USER bob\nRUN [\"/bin/busybox\", \"true\"]\n");
  std::ofstream(bad / "passwd") << "root:x:0:0:root:/root:/bin/sh\n";
  bo.name = "user-bad";
  auto unknown = client::build_template(bad.string(), bo, {}, cfg_);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message(),
            "Dockerfile:5: USER bob: no user 'bob' in the image's /etc/passwd (USER at line 4)");
}

// .dockerignore: what it excludes is not in the context COPY sees (exceptions, `**`, a
// directory and everything below it); excluding the Dockerfile itself only keeps it out of COPY
// (as Docker does); a bad pattern names its line.
TEST_F(TemplateBuildE2E, DockerIgnore) {
  fs::path ctx = context("ignore",
                         "FROM scratch\n"
                         "COPY busybox /bin/busybox\n"
                         "COPY . /ctx/\n"
                         "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"cd /ctx && test ! -e a.log && "
                         "test -e keep.log && test ! -e secret && test ! -e sub/cache && test -e "
                         "sub/real && test ! -e Dockerfile && test -e sub/keep/kept\"]\n");
  std::ofstream(ctx / ".dockerignore") << "# outputs\n*.log\n!keep.log\nsecret/\n**/cache\n"
                                          "Dockerfile\nsub/keep\n!sub/keep/kept\n";
  fs::create_directories(ctx / "secret");
  fs::create_directories(ctx / "sub/cache");
  fs::create_directories(ctx / "sub/keep");
  for (const char* f : {"a.log", "keep.log", "secret/key", "sub/cache/x", "sub/real",
                        "sub/keep/gone", "sub/keep/kept"})
    std::ofstream(ctx / f) << f;
  client::BuildOptions bo;
  bo.name = "ignore";
  auto built = client::build_template(ctx.string(), bo, {}, cfg_);
  ASSERT_TRUE(built.ok()) << built.error().message();

  std::ofstream(ctx / ".dockerignore") << "ok\n\n[abc\n";
  auto bad = client::build_template(ctx.string(), bo, {}, cfg_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message(),
            ".dockerignore:3: bad pattern '[abc' (an unterminated [ class or a trailing \\)");
}

TEST_F(TemplateBuildE2E, RefusedRequests) {
  // No credential: refused before the upload is read.
  auto req = http::make_request(boost::beast::http::verb::post, "/templates/build?name=x",
                                std::string(2 << 20, 'x'));
  auto r = http::fetch("127.0.0.1", abxd_->port(), std::move(req));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->result_int(), 401) << r->body();
  client::BuildOptions bo;
  bo.name = "Not-Valid";
  auto bad = client::build_template(context("c", kDockerfile).string(), bo, {}, cfg_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  bo.name = "ok";
  fs::path unknown = context("u", "FROM scratch\nFROBNICATE x\n");
  auto parse = client::build_template(unknown.string(), bo, {}, cfg_);
  ASSERT_FALSE(parse.ok());
  EXPECT_EQ(parse.error().message(), "Dockerfile:2: unknown instruction FROBNICATE");
}

}  // namespace
}  // namespace abx::e2e
