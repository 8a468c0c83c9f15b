// The real abx-server with a command module (the demo module by default) on a kernel-picked
// loopback port, for tests that drive it over HTTP or point a client at it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "abx/testing/child_process.h"

namespace abx::testing {

// The binaries this build made ("" when the build has no such target).
const char* abx_server_bin();
const char* demo_module();

class CommandServerProcess {
 public:
  // Starts `abx-server --module <module> --port 0 <extra args>`, with ABX_ACCESS_TOKEN=token
  // when `token` is not empty.
  ::testing::AssertionResult start(const std::string& token,
                                   std::vector<std::string> extra_args = {},
                                   const std::string& module = demo_module());
  ChildProcess& process() { return *proc_; }
  std::uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::unique_ptr<ChildProcess> proc_;
  std::uint16_t port_ = 0;
};

// A gtest fixture with one abx-server running the demo module with access token kToken.
class ServerFixture : public ::testing::Test {
 protected:
  static constexpr const char* kToken = "server-fixture-token-0123456789";
  void SetUp() override { ASSERT_TRUE(server_.start(kToken, {"--log-level", "warn"})); }
  CommandServerProcess& server() { return server_; }
  std::uint16_t port() const { return server_.port(); }
  std::string url() const { return server_.url(); }

 private:
  CommandServerProcess server_;
};

}  // namespace abx::testing
