// The real abxd for a test: its own home, a port picked by the kernel, the API key it writes on
// first start — and, when the test is over, no sandbox left behind.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "abx/testing/child_process.h"
#include "abx/testing/temp_dir.h"

namespace abx::testing {

// The abxd binary this build made (ABXD_BIN when the build has abxd; "" otherwise).
const char* abxd_bin();
// The image store tests share: $ABX_TEST_IMAGE_STORE, else <source>/build/images.
std::string shared_image_store();

class Abxd {
 public:
  explicit Abxd(std::filesystem::path home, std::vector<std::string> extra_args = {});
  ~Abxd();  // shutdown()
  Abxd(const Abxd&) = delete;
  Abxd& operator=(const Abxd&) = delete;

  // Starts abxd on 127.0.0.1:0 over home(); again after stop()/kill9() it adopts what the
  // previous one left running.
  ::testing::AssertionResult start();
  // SIGTERM, then the exit code (abxd leaves its sandboxes running for the next one); -1 when
  // abxd did not exit in time, and then it is SIGKILLed.
  int stop();
  // SIGKILL, as a crash: the sandboxes keep running.
  void kill9();
  // Kills every sandbox of this home and stops abxd: first through the API (DELETE each listed
  // sandbox) while abxd runs, then abxd itself, then — the backstop for what the API missed or
  // a crashed abxd left — every sandbox abxd recorded under <home>/sandboxes, by its init
  // record (pid + start time), cgroups and state directory. Idempotent. Returns how many
  // sandboxes the backstop had to kill.
  int shutdown();

  bool running() const { return proc_ != nullptr; }
  ChildProcess& process() { return *proc_; }
  std::uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& api_key() const { return key_; }
  const std::filesystem::path& home() const { return home_; }

 private:
  std::filesystem::path home_;
  std::vector<std::string> extra_args_;
  std::unique_ptr<ChildProcess> proc_;
  std::uint16_t port_ = 0;
  std::string key_;
};

// Kills every sandbox recorded under `state_dir` (<abxd home>/sandboxes) whose owner is gone,
// and removes its cgroups and directory; returns how many were still alive. Sandboxes a live
// abxd holds are left alone (their owner will kill them).
int kill_recorded_sandboxes(const std::filesystem::path& state_dir);

// A gtest fixture around one Abxd over a fresh home (<tmp>/abxd). Skips without root (abxd
// needs it for namespaces and cgroups). TearDown() is Abxd::shutdown().
class AbxdFixture : public ::testing::Test {
 protected:
  explicit AbxdFixture(std::string prefix = "abxd-test") : prefix_(std::move(prefix)) {}
  void SetUp() override;
  void TearDown() override;
  // Runs before the first start: write templates or config into the home.
  virtual void prepare_home(const std::filesystem::path& home) {}
  // Flags for abxd beyond the fixture's own.
  virtual std::vector<std::string> abxd_args() const { return {}; }

  Abxd& abxd() { return *abxd_; }
  const std::filesystem::path& home() const { return abxd_->home(); }
  const TempDir& tmp() const { return *tmp_; }
  std::uint16_t port() const { return abxd_->port(); }
  const std::string& key() const { return abxd_->api_key(); }

 private:
  std::string prefix_;
  std::optional<TempDir> tmp_;
  std::unique_ptr<Abxd> abxd_;
};

}  // namespace abx::testing
