// The in-process CommandServer the server tests share: bound to a kernel-picked loopback port,
// with small limits so the tests can hit them, and requests sent over real sockets.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "abx/http/client.h"
#include "abx/registry/register.h"
#include "abx/server/server.h"

namespace abx::server {

// The names both server tests speak in.
namespace bhttp = boost::beast::http;
using http::Request;
using http::Response;

class InProcessServerTest : public ::testing::Test {
 protected:
  static constexpr const char* kToken = "test-token-0123456789";

  // The commands both tests call: echo (x, y = "hello"), boom (throws invalid_argument) and slow
  // (sleeps ms), with the MCP hints a test wants to see published.
  void add_test_commands(registry::CommandHints echo_hints = {},
                         registry::CommandHints boom_hints = {}) {
    reg_.command("echo")
        .description("Echo x and y.")
        .arg("x", "a number")
        .arg("y", "a word", "hello")
        .hints(echo_hints)
        .bind([](int x, std::string y) { return std::to_string(x) + ": " + y; });
    reg_.command("boom").description("Throws.").hints(boom_hints).bind([]() -> int {
      throw std::invalid_argument("bad things");
    });
    reg_.command("slow").arg("ms").bind([](int ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return ms;
    });
  }

  // Starts a CommandServer over reg_ with `opt`'s auth choices; the address, the limits and
  // the call timeout are the tests' own.
  void start(CommandServerOptions opt = {}) {
    opt.host = "127.0.0.1";
    opt.port = 0;
    if (!opt.no_auth && !opt.access_token) opt.access_token = kToken;
    opt.limits.max_body_bytes = 4096;
    opt.call_timeout = std::chrono::milliseconds(1500);
    if (opt.io_threads == 0) opt.io_threads = 2;
    auto s = CommandServer::start(reg_, opt);
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(*s);
  }

  // Sends `req` with X-Access-Token `token` (none when empty); a failed fetch fails the test.
  Response send(Request req, const std::string& token = kToken) {
    if (!token.empty()) req.set("X-Access-Token", token);
    auto r = http::fetch("127.0.0.1", server_->port(), std::move(req), std::chrono::seconds(10));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : Response{};
  }

  registry::CommandRegistry reg_;
  std::unique_ptr<CommandServer> server_;
};

}  // namespace abx::server
