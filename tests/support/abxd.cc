#include "abx/testing/abxd.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "abx/http/client.h"
#include "abx/runtime/sandbox.h"

namespace abx::testing {
namespace {

namespace fs = std::filesystem;
namespace bhttp = boost::beast::http;

// Every sandbox abxd lists (running and paused), all pages.
std::vector<std::string> list_sandboxes(std::uint16_t port, const std::string& key) {
  std::vector<std::string> ids;
  std::string next;
  for (int page = 0; page < 100; ++page) {
    auto req = http::make_request(
        bhttp::verb::get, "/v2/sandboxes?limit=100" + (next.empty() ? "" : "&nextToken=" + next));
    req.erase(bhttp::field::content_type);
    req.set("X-API-KEY", key);
    auto r = http::fetch("127.0.0.1", port, std::move(req), std::chrono::seconds(30));
    if (!r.ok() || r->result_int() != 200) break;
    boost::system::error_code ec;
    auto v = boost::json::parse(r->body(), ec);
    if (ec || !v.is_array()) break;
    for (const auto& s : v.as_array()) {
      if (const auto* id = s.as_object().if_contains("sandboxID"); id && id->is_string())
        ids.emplace_back(id->as_string());
    }
    next = std::string((*r)["X-Next-Token"]);
    if (next.empty()) break;
  }
  return ids;
}

}  // namespace

std::string shared_image_store() {
  if (const char* s = std::getenv("ABX_TEST_IMAGE_STORE"); s && *s) return s;
#ifdef ABX_TEST_IMAGE_STORE
  return ABX_TEST_IMAGE_STORE;
#else
  return "";
#endif
}

const char* abxd_bin() {
#ifdef ABXD_BIN
  return ABXD_BIN;
#else
  return "";
#endif
}

Abxd::Abxd(fs::path home, std::vector<std::string> extra_args)
    : home_(std::move(home)), extra_args_(std::move(extra_args)) {
  fs::create_directories(home_);
}

Abxd::~Abxd() { shutdown(); }

::testing::AssertionResult Abxd::start() {
  // Sandboxes have outbound networking: their resolver forwards to a loopback port where nothing
  // answers, so no test's DNS question can reach a real resolver (a test may pass its own).
  std::vector<std::string> argv{abxd_bin(), "--home", home_.string(), "--listen", "127.0.0.1:0"};
  if (std::find(extra_args_.begin(), extra_args_.end(), "--dns-upstream") == extra_args_.end())
    argv.insert(argv.end(), {"--dns-upstream", "127.0.0.1:9"});
  // The run's shared image store (scripts/build-images.sh put `base` there), unless the test
  // passes its own --image-store.
  bool own_store =
      std::find(extra_args_.begin(), extra_args_.end(), "--image-store") != extra_args_.end();
  if (!own_store && !shared_image_store().empty()) {
    argv.insert(argv.end(), {"--image-store", shared_image_store()});
  }
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  proc_ = std::make_unique<ChildProcess>(argv);
  if (!proc_->started()) return ::testing::AssertionFailure() << "cannot run " << argv[0];
  auto port = proc_->wait_listening();
  if (!port) return ::testing::AssertionFailure() << "abxd did not start";
  port_ = *port;
  std::ifstream in(home_ / "api_key");
  std::getline(in, key_);
  if (key_.rfind("e2b_", 0) != 0) return ::testing::AssertionFailure() << "api key: " << key_;
  return ::testing::AssertionSuccess();
}

int Abxd::stop() {
  if (!proc_) return -1;
  proc_->signal(SIGTERM);
  // abxd drains connections for up to 10 s; a loaded CI machine gets more.
  int code = proc_->wait(std::chrono::seconds(40));
  if (code < 0) {
    proc_->signal(SIGKILL);
    proc_->wait();
  }
  proc_.reset();
  return code;
}

void Abxd::kill9() {
  if (!proc_) return;
  proc_->signal(SIGKILL);
  proc_->wait();
  proc_.reset();
}

int Abxd::shutdown() {
  if (proc_) {
    for (const auto& id : list_sandboxes(port_, key_)) {
      auto req = http::make_request(bhttp::verb::delete_, "/sandboxes/" + id);
      req.erase(bhttp::field::content_type);
      req.set("X-API-KEY", key_);
      (void)http::fetch("127.0.0.1", port_, std::move(req), std::chrono::seconds(30));
    }
    stop();
  }
  // abxd is gone, and with it every lock it held: whatever is still recorded is ours to kill.
  int killed = kill_recorded_sandboxes(home_ / "sandboxes");
  if (killed > 0) {
    std::cerr << "abx::testing::Abxd: killed " << killed << " sandbox(es) abxd left under " << home_
              << "\n";
  }
  return killed;
}

int kill_recorded_sandboxes(const fs::path& state_dir) {
  std::error_code ec;
  if (!fs::is_directory(state_dir, ec)) return 0;
  int killed = 0;
  for (const auto& e : fs::directory_iterator(state_dir, ec)) {
    if (!e.is_directory()) continue;
    // adopt() checks the recorded start time through a pidfd, so a reused pid is never hit;
    // it fails when a live owner holds the sandbox or its init is gone (cleanup_stale below).
    auto sb = runtime::Sandbox::adopt(state_dir.string(), e.path().filename().string());
    if (sb.ok()) {
      (void)sb->destroy();
      ++killed;
    }
  }
  (void)runtime::cleanup_stale(state_dir.string());
  return killed;
}

void AbxdFixture::SetUp() {
  if (::geteuid() != 0) GTEST_SKIP() << "abxd needs root for namespaces and cgroups";
  tmp_.emplace(prefix_);
  abxd_ = std::make_unique<Abxd>(tmp_->path() / "abxd", abxd_args());
  prepare_home(abxd_->home());
  ASSERT_TRUE(abxd_->start());
}

void AbxdFixture::TearDown() {
  if (abxd_) abxd_->shutdown();
}

}  // namespace abx::testing
