// abx's own binaries in any image: abx-envd from the /opt/abx bundle (build/<preset>/bundle,
// with its own glibc) runs as PID 1 of image sandboxes that have (a) only busybox, (b) only
// musl, (c) nothing at all, and serves the envd API over HTTP; the command server starts from
// --server-argv with the token envd read (no shell in the image). Real sandboxes; needs root.
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "abx/base/base64.h"
#include "abx/http/client.h"
#include "abx/runtime/sandbox.h"
#include "abx/testing/rootfs.h"
#include "abx/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace abx {
namespace {

namespace fs = std::filesystem;
namespace bhttp = boost::beast::http;
namespace json = boost::json;

constexpr std::uint16_t kEnvdPort = 49983;
constexpr std::uint16_t kServerPort = 49999;
constexpr const char* kToken = "image-e2e-token";

class ImageEnvdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
    ASSERT_TRUE(fs::exists(fs::path(ABX_BUNDLE_DIR) / "bin/abx-envd"))
        << "build the abx_bundle target";
    image_ = tmp_ / "image";
    fs::create_directories(image_);
    std::ofstream(tmp_ / "token") << kToken;
  }
  void TearDown() override {
    if (sb_) {
      EXPECT_TRUE(sb_->destroy().ok());
    }
  }

  // abx-envd from the bundle as PID 1 of an image sandbox whose only layer is image_, with the
  // demo command server started from --server-argv.
  void start() {
    runtime::SandboxConfig c;
    c.id = "img-e2e-" + std::to_string(::getpid());
    c.state_dir = (tmp_ / "state").string();
    c.rootfs = runtime::RootfsMode::kImage;
    c.lower_dirs = {image_.string()};
    c.binds = {{ABX_BUNDLE_DIR, "/opt/abx", false},
               {(tmp_ / "token").string(), "/run/abx/token", false}};
    json::array server = {"/opt/abx/bin/abx-server",
                          "--module",
                          "/opt/abx/lib/libabx_demo_commands.so",
                          "--host",
                          "127.0.0.1",
                          "--port",
                          std::to_string(kServerPort)};
    c.argv = {"/opt/abx/bin/abx-envd",
              "--host",
              "127.0.0.1",
              "--port",
              std::to_string(kEnvdPort),
              "--token-file",
              "/run/abx/token",
              "--default-user",
              "root",
              "--server-argv",
              json::serialize(server)};
    c.env = {"PATH=/bin:/usr/bin"};
    c.limits.pids_max = 256;
    c.disk_bytes = 32ull << 20;
    auto sb = runtime::Sandbox::spawn(std::move(c));
    ASSERT_TRUE(sb.ok()) << sb.error().to_string();
    sb_.emplace(std::move(*sb));
  }

  // A request to `port` inside the sandbox, retried until something listens there (5 s).
  Result<http::Response> send(std::uint16_t port, http::Request req) {
    req.set("X-Access-Token", kToken);
    Error last = unavailable("not tried");
    for (int i = 0; i < 250; ++i) {
      auto fd = sb_->open_tcp(port);
      if (fd) {
        auto conn = http::Connection::adopt(std::move(*fd), "127.0.0.1");
        if (!conn) return conn.error();
        return (*conn)->send(req);
      }
      last = fd.error();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return last;
  }

  // Runs `cmd args...` through envd's process.Process/Start; returns its stdout (its stderr and
  // end status are left in last_stderr_ and last_status_, e.g. "exit status 0").
  std::string run(const std::string& cmd, std::vector<std::string> args = {}) {
    last_stderr_.clear();
    last_status_.clear();
    json::object process{{"cmd", cmd}, {"args", json::value_from(args)}};
    std::string body = json::serialize(json::object{{"process", process}});
    std::string framed(5, '\0');
    framed[4] = static_cast<char>(body.size());  // < 256 bytes here
    framed[3] = static_cast<char>(body.size() >> 8);
    auto r = send(kEnvdPort, http::make_request(bhttp::verb::post, "/process.Process/Start",
                                                framed + body, "application/connect+json"));
    if (!r.ok()) {
      ADD_FAILURE() << r.error().to_string();
      return {};
    }
    EXPECT_EQ(r->result_int(), 200) << r->body();
    // Connect envelopes: 1 flag byte, 4-byte big-endian length, JSON.
    std::string out, all = r->body();
    for (std::size_t pos = 0; pos + 5 <= all.size();) {
      std::size_t n = (static_cast<unsigned char>(all[pos + 1]) << 24) |
                      (static_cast<unsigned char>(all[pos + 2]) << 16) |
                      (static_cast<unsigned char>(all[pos + 3]) << 8) |
                      static_cast<unsigned char>(all[pos + 4]);
      auto v = json::parse(all.substr(pos + 5, n));
      if (auto* ev = v.as_object().if_contains("event")) {
        if (auto* d = ev->as_object().if_contains("data")) {
          if (auto* s = d->as_object().if_contains("stdout"))
            if (auto bytes = base64_decode(s->as_string()); bytes.ok()) out += *bytes;
          if (auto* s = d->as_object().if_contains("stderr"))
            if (auto bytes = base64_decode(s->as_string()); bytes.ok()) last_stderr_ += *bytes;
        }
        if (auto* e = ev->as_object().if_contains("end"))
          if (auto* st = e->as_object().if_contains("status")) last_status_ = st->as_string();
      }
      pos += 5 + n;
    }
    return out;
  }

  // What every image must give: envd's health, a process from the bundle, and the command
  // server (started without a shell, with envd's token) answering GET /commands.
  void expect_abx_works() {
    auto health = send(kEnvdPort, http::make_request(bhttp::verb::get, "/health"));
    ASSERT_TRUE(health.ok()) << health.error().to_string();
    EXPECT_EQ(health->result_int(), 204);
    EXPECT_NE(run("/opt/abx/bin/abx-envd", {"--help"}).find("abx-envd"), std::string::npos);
    // Every binary the bundle ships runs here with only the bundle's libraries (issue 35: the
    // code interpreter needed the image's libbsd.so.0): --help prints its usage and exits 0.
    int binaries = 0;
    for (const auto& e : fs::directory_iterator(fs::path(ABX_BUNDLE_DIR) / "bin")) {
      std::string name = e.path().filename().string();
      std::string out = run("/opt/abx/bin/" + name, {"--help"});
      EXPECT_EQ(last_status_, "exit status 0") << name << ": " << last_stderr_;
      EXPECT_NE(out.find(name), std::string::npos) << name << ": " << out << last_stderr_;
      ++binaries;
    }
    EXPECT_GE(binaries, 3);  // abx-envd, abx-server, abx-interp at least
    auto commands = send(kServerPort, http::make_request(bhttp::verb::get, "/commands"));
    ASSERT_TRUE(commands.ok()) << commands.error().to_string();
    EXPECT_EQ(commands->result_int(), 200) << commands->body();
    EXPECT_NE(commands->body().find("\"add\""), std::string::npos) << commands->body();
    auto denied = http::make_request(bhttp::verb::get, "/commands");
    auto fd = sb_->open_tcp(kServerPort);
    ASSERT_TRUE(fd.ok());
    auto conn = http::Connection::adopt(std::move(*fd), "127.0.0.1");
    ASSERT_TRUE(conn.ok());
    auto r = (*conn)->send(denied);  // no token: the server did get one to check
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->result_int(), 401);
  }

  std::string last_stderr_, last_status_;
  abx::testing::TempDir tmp_{"abx-image-e2e"};
  fs::path image_;
  std::optional<runtime::Sandbox> sb_;
};

TEST_F(ImageEnvdTest, BusyboxImage) {
  std::string why;
  if (!abx::testing::make_busybox_layer(image_, &why)) GTEST_SKIP() << why;
  start();
  expect_abx_works();
  EXPECT_EQ(run("/bin/sh", {"-c", "echo hi from busybox"}), "hi from busybox\n");
  // The disk quota: ENOSPC for the writer, envd (PID 1) unaffected.
  EXPECT_EQ(run("/bin/sh", {"-c",
                            "dd if=/dev/zero of=/big bs=1M count=64 2>&1 | "
                            "grep -o 'No space left on device'; rm /big; echo ok"}),
            "No space left on device\nok\n");
  auto health = send(kEnvdPort, http::make_request(bhttp::verb::get, "/health"));
  ASSERT_TRUE(health.ok()) << health.error().to_string();
  EXPECT_EQ(health->result_int(), 204);
  EXPECT_FALSE(fs::exists(image_ / "lib"));  // no glibc but the bundle's
}

TEST_F(ImageEnvdTest, MuslImageWithoutGlibc) {
  std::string why;
  if (!abx::testing::make_musl_layer(image_, &why)) GTEST_SKIP() << why;
  start();
  expect_abx_works();
  EXPECT_EQ(run("/bin/hello"), "hello from musl\n");
}

TEST_F(ImageEnvdTest, ScratchImageWithNothing) {
  start();  // image_ is empty: the sandbox has only /opt/abx and what the runtime mounts
  expect_abx_works();
  EXPECT_EQ(run("/opt/abx/bin/abx-server", {"--help"}).find("abx-server") != std::string::npos,
            true);
}

}  // namespace
}  // namespace abx
