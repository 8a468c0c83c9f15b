// abx-server as users run it: the real binary, the demo module loaded with dlopen, loopback.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "abx/http/client.h"
#include "abx/testing/server.h"
#include "abx/testing/temp_dir.h"
#include "abx/token/token.h"

namespace abx::e2e {
namespace {

using testing::ChildProcess;
namespace bhttp = boost::beast::http;
namespace json = boost::json;

constexpr const char* kToken = "e2e-token-abcdef";

http::Response call(std::uint16_t port, const std::string& name, const std::string& body,
                    const std::string& token = kToken) {
  auto req = http::make_request(bhttp::verb::post, "/commands/" + name, body);
  req.set("X-Access-Token", token);
  auto r = http::fetch("127.0.0.1", port, std::move(req));
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : http::Response{};
}

class AbxServerE2E : public ::testing::Test {
 protected:
  void launch(std::vector<std::string> extra_args = {}) {
    ASSERT_TRUE(server_.start(kToken, std::move(extra_args)));
    port_ = server_.port();
  }
  testing::CommandServerProcess server_;
  std::uint16_t port_ = 0;
};

TEST_F(AbxServerE2E, DemoModuleIsDiscoverableAndCallable) {
  launch();
  auto req = http::make_request(bhttp::verb::get, "/commands");
  req.set("X-Access-Token", kToken);
  auto list = http::fetch("127.0.0.1", port_, std::move(req));
  ASSERT_TRUE(list.ok());
  json::value v = json::parse(list->body());
  std::vector<std::string> names;
  for (const auto& c : v.at("commands").as_array()) names.emplace_back(c.at("name").as_string());
  for (const char* want : {"add", "demo", "divide", "is_even", "noop", "repeat", "scale",
                           "sleep_ms", "word_lengths"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  EXPECT_EQ(call(port_, "demo", R"({"x":42,"y":"world"})").body(), R"({"result":"42: world"})");
  EXPECT_EQ(call(port_, "demo", R"({"x":42})").body(), R"({"result":"42: hello"})");
  EXPECT_EQ(call(port_, "add", R"({"a":40,"b":2})").body(), R"({"result":42})");
  EXPECT_EQ(call(port_, "scale", R"({"value":2})").body(), R"({"result":5E0})");
  EXPECT_EQ(call(port_, "is_even", R"({"n":7})").body(), R"({"result":false})");
  EXPECT_EQ(call(port_, "repeat", R"({"word":"ab","times":2,"upper":true})").body(),
            R"({"result":["AB","AB"]})");
  EXPECT_EQ(call(port_, "word_lengths", R"({"text":"a bb"})").body(),
            R"({"result":{"a":1,"bb":2}})");
  EXPECT_EQ(call(port_, "noop", "{}").body(), R"({"result":null})");
  auto err = call(port_, "divide", R"({"a":1,"b":0})");
  EXPECT_EQ(err.result_int(), 500);
  EXPECT_EQ(err.body(), R"({"error":"division by zero","type":"std::domain_error"})");
  EXPECT_EQ(call(port_, "demo", R"({"x":"42"})").result_int(), 400);
  EXPECT_EQ(call(port_, "demo", R"({"x":42})", "wrong").result_int(), 401);
}

TEST_F(AbxServerE2E, ScopedTokenFromThePlatformWorksAgainstTheBinary) {
  launch();
  auto scoped = token::mint_scoped(kToken, {{"demo"}, std::time(nullptr) + 600});
  ASSERT_TRUE(scoped.ok());
  EXPECT_EQ(call(port_, "demo", R"({"x":1})", *scoped).result_int(), 200);
  EXPECT_EQ(call(port_, "add", R"({"a":1})", *scoped).result_int(), 404);
}

TEST_F(AbxServerE2E, SigtermDrainsTheCallInProgressThenExits) {
  launch();
  http::Response slow;
  std::thread t([&] { slow = call(port_, "sleep_ms", R"({"ms":700})"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the call is under way
  server_.process().signal(SIGTERM);
  t.join();
  EXPECT_EQ(slow.result_int(), 200) << slow.body();
  EXPECT_EQ(slow.body(), R"({"result":"slept 700 ms"})");
  EXPECT_EQ(server_.process().wait(), 0);
  EXPECT_FALSE(http::Connection::open("127.0.0.1", port_, std::chrono::seconds(1)).ok());
}

TEST_F(AbxServerE2E, CallTimeoutFlagGives504) {
  launch({"--call-timeout", "200ms"});
  auto r = call(port_, "sleep_ms", R"({"ms":2000})");
  EXPECT_EQ(r.result_int(), 504) << r.body();
  // The server stays healthy for other calls.
  EXPECT_EQ(call(port_, "demo", R"({"x":1})").result_int(), 200);
}

TEST(AbxServerCli, RefusesToStartWithoutToken) {
  ChildProcess c({ABX_SERVER_BIN, "--module", ABX_DEMO_MODULE, "--port", "0"},
                 {"ABX_ACCESS_TOKEN="});
  EXPECT_EQ(c.wait(), 3);
}

TEST(AbxServerCli, TokenFileAndNoAuth) {
  testing::TempDir tmp("abx-server-e2e");
  const std::filesystem::path& dir = tmp.path();
  std::ofstream(dir / "token") << "from-file\n";
  {
    ChildProcess c({ABX_SERVER_BIN, "-m", ABX_DEMO_MODULE, "--port", "0", "--token-file",
                    (dir / "token").string()});
    auto port = c.wait_listening();
    ASSERT_TRUE(port);
    EXPECT_EQ(call(*port, "demo", R"({"x":1})", "from-file").result_int(), 200);
    EXPECT_EQ(call(*port, "demo", R"({"x":1})", kToken).result_int(), 401);
  }
  {
    ChildProcess c({ABX_SERVER_BIN, "-m", ABX_DEMO_MODULE, "--port", "0", "--no-auth"});
    auto port = c.wait_listening();
    ASSERT_TRUE(port);
    EXPECT_EQ(call(*port, "demo", R"({"x":1})", "").result_int(), 200);
  }
}

TEST(AbxServerCli, ListPrintsTheSchema) {
  ChildProcess c({ABX_SERVER_BIN, "-m", ABX_DEMO_MODULE, "--list"});
  std::string out = c.read_all();
  EXPECT_EQ(c.wait(), 0);
  json::value v = json::parse(out);
  bool found = false;
  for (const auto& cmd : v.at("commands").as_array()) {
    if (cmd.at("name") == "demo") {
      found = true;
      EXPECT_EQ(
          json::serialize(cmd.at("args")),
          R"([{"name":"x","type":"integer","required":true,"default":null,"description":""},)"
          R"({"name":"y","type":"string","required":false,"default":"hello","description":""}])");
    }
  }
  EXPECT_TRUE(found);
}

TEST(AbxServerCli, MissingModuleIsAClearError) {
  ChildProcess c({ABX_SERVER_BIN, "--module", "/nonexistent/lib.so", "--port", "0"},
                 {std::string("ABX_ACCESS_TOKEN=") + kToken});
  EXPECT_EQ(c.wait(), 2);  // CLI11 validates the path exists: a usage error
}

TEST(AbxServerCli, BinariesNeedOnlyGlibc) {
  // The in-sandbox runner and modules must run in any template rootfs: no libstdc++ or OpenSSL.
  for (const char* bin : {ABX_SERVER_BIN, ABX_DEMO_MODULE}) {
    std::string cmd = std::string("ldd ") + bin + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
    pclose(p);
#ifndef __SANITIZE_ADDRESS__
    // Under ASan the sanitizer runtimes (libasan, libubsan) bring libstdc++ themselves; the
    // binary's own static libstdc++ is checked by the presets without sanitizers.
    EXPECT_EQ(out.find("libstdc++"), std::string::npos) << out;
#endif
    EXPECT_EQ(out.find("libcrypto"), std::string::npos) << out;
    EXPECT_EQ(out.find("libspdlog"), std::string::npos) << out;
    EXPECT_EQ(out.find("libfmt"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace abx::e2e
