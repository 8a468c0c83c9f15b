// abxd's POST /mcp platform tools against the real daemon and real sandboxes, as raw JSON-RPC:
// the edges the SDK test does not reach — output cut at 256 KiB, bytes that are not UTF-8,
// a shell command past its timeout, a file over the read_file cap, a template without a
// command server, auth. Needs root (CI runs as root).
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <utility>

#include "abx/http/client.h"
#include "abx/testing/abxd.h"
#include "abx/testing/rootfs.h"

namespace abx::e2e {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
namespace fs = std::filesystem;

class AbxdMcpE2E : public testing::AbxdFixture {
 protected:
  AbxdMcpE2E() : AbxdFixture("abxd-mcp-e2e") {}
  // Images without bash as `rootfs:` templates, when busybox-static and musl are installed:
  // busybox, and alpine-like (musl's libc and loader, busybox's sh).
  void prepare_home(const std::filesystem::path& home) override {
    const auto bb = home / "rootfs" / "busybox", alp = home / "rootfs" / "alpine";
    if (!abx::testing::make_busybox_layer(bb, &no_images_) ||
        !abx::testing::make_busybox_layer(alp, &no_images_) ||
        !abx::testing::make_musl_layer(alp, &no_images_)) {
      return;
    }
    for (const auto& [id, dir] : {std::pair{"busybox", bb}, std::pair{"alpine", alp}}) {
      std::filesystem::create_directories(home / "templates" / id);
      std::ofstream(home / "templates" / id / "template.yaml")
          << "id: " << id << "\nrootfs: " << dir.string() << "\n";
    }
    no_images_.clear();
  }
  std::string no_images_ = "not prepared";
  void SetUp() override {
    AbxdFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    initialize();
  }

  http::Response post(const json::value& msg, const std::string& key) {
    auto req = http::make_request(bhttp::verb::post, "/mcp", json::serialize(msg));
    if (!key.empty()) req.set("X-API-KEY", key);
    if (!session_.empty()) req.set("Mcp-Session-Id", session_);
    auto r = http::fetch("127.0.0.1", port(), std::move(req), std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : http::Response{};
  }
  void initialize() {
    auto r = post(
        json::object{{"jsonrpc", "2.0"},
                     {"id", 0},
                     {"method", "initialize"},
                     {"params",
                      json::object{{"protocolVersion", "2025-06-18"},
                                   {"capabilities", json::object{}},
                                   {"clientInfo", json::object{{"name", "t"}, {"version", "1"}}}}}},
        key());
    ASSERT_EQ(r.result_int(), 200) << r.body();
    session_ = std::string(r["Mcp-Session-Id"]);
    ASSERT_EQ(session_.size(), 32u);
  }
  // The tools/call result object (or the whole reply when it is a JSON-RPC error).
  json::object call(const std::string& tool, json::object args) {
    auto r = post(json::object{{"jsonrpc", "2.0"},
                               {"id", ++id_},
                               {"method", "tools/call"},
                               {"params", json::object{{"name", tool}, {"arguments", args}}}},
                  key());
    EXPECT_EQ(r.result_int(), 200) << r.body();
    auto v = json::parse(r.body()).as_object();
    if (auto* res = v.if_contains("result")) return res->as_object();
    return v;
  }
  std::string create(const std::string& tmpl) {
    auto r = call("create_sandbox", {{"template", tmpl}, {"timeoutSeconds", 120}});
    EXPECT_EQ(r.at("isError"), false) << json::serialize(r);
    return std::string(r.at("structuredContent").at("sandboxId").as_string());
  }
  static std::string text(const json::object& r) {
    return std::string(r.at("content").at(0).at("text").as_string());
  }

  std::string session_;
  int id_ = 0;
};

TEST_F(AbxdMcpE2E, ShellOutputIsCutAndMadeValidUtf8) {
  std::string id = create("base");
  auto big = call(
      "run_shell",
      {{"sandboxId", id}, {"command", "head -c 300000 /dev/zero | tr '\\0' a; echo done >&2"}});
  ASSERT_EQ(big.at("isError"), false) << json::serialize(big);
  const auto& s = big.at("structuredContent").as_object();
  EXPECT_EQ(s.at("stdout").as_string().size(), 256u * 1024);
  EXPECT_EQ(s.at("stderr"), "done\n");
  EXPECT_EQ(s.at("truncated"), true);
  EXPECT_EQ(s.at("exitCode"), 0);

  // \xff is never UTF-8: it becomes U+FFFD, and the text around it survives.
  auto bad = call("run_shell", {{"sandboxId", id}, {"command", "printf 'a\\377b'"}});
  ASSERT_EQ(bad.at("isError"), false) << json::serialize(bad);
  EXPECT_EQ(bad.at("structuredContent").at("stdout"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(bad.at("structuredContent").at("truncated"), false);
}

// run_shell in images without bash (busybox; alpine-like, musl): envd runs the command line
// with the image's sh.
TEST_F(AbxdMcpE2E, ShellRunsInAnImageWithoutBash) {
  if (!no_images_.empty()) GTEST_SKIP() << no_images_;
  for (const char* image : {"busybox", "alpine"}) {
    SCOPED_TRACE(image);
    std::string id = create(image);
    auto r = call("run_shell", {{"sandboxId", id},
                                {"command", "test -e /bin/bash || echo no bash; echo $((6*7))"}});
    ASSERT_EQ(r.at("isError"), false) << json::serialize(r);
    EXPECT_EQ(r.at("structuredContent").at("stdout"), "no bash\n42\n");
    EXPECT_EQ(r.at("structuredContent").at("exitCode"), 0);
    EXPECT_EQ(call("kill_sandbox", {{"sandboxId", id}}).at("isError"), false);
  }
}

TEST_F(AbxdMcpE2E, ShellTimeoutIsAToolError) {
  std::string id = create("base");
  auto r = call("run_shell", {{"sandboxId", id}, {"command", "sleep 30"}, {"timeoutSeconds", 1}});
  EXPECT_EQ(r.at("isError"), true) << json::serialize(r);
  EXPECT_NE(text(r).find("DeadlineExceeded"), std::string::npos) << text(r);
  // The sandbox is still usable afterwards.
  auto ok = call("run_shell", {{"sandboxId", id}, {"command", "echo still here"}});
  EXPECT_EQ(ok.at("structuredContent").at("stdout"), "still here\n");
}

TEST_F(AbxdMcpE2E, ReadFileOverTheCapIsAToolError) {
  std::string id = create("base");
  auto w =
      call("run_shell", {{"sandboxId", id}, {"command", "head -c 5000000 /dev/zero > /tmp/big"}});
  ASSERT_EQ(w.at("structuredContent").at("exitCode"), 0) << json::serialize(w);
  auto r = call("read_file", {{"sandboxId", id}, {"path", "/tmp/big"}});
  EXPECT_EQ(r.at("isError"), true) << json::serialize(r);
  EXPECT_NE(text(r).find("PayloadTooLarge"), std::string::npos) << text(r);
  EXPECT_NE(text(r).find("run_shell"), std::string::npos) << text(r);  // says what to do instead
}

TEST_F(AbxdMcpE2E, TemplateWithoutCommandServer) {
  std::string id = create("base");
  auto l = call("list_commands", {{"sandboxId", id}});
  ASSERT_EQ(l.at("isError"), false) << json::serialize(l);
  EXPECT_EQ(l.at("structuredContent").at("commands"), json::array{});
  auto c = call("call_command", {{"sandboxId", id}, {"name", "demo"}, {"arguments", {{"x", 1}}}});
  EXPECT_EQ(c.at("isError"), true);
  EXPECT_NE(text(c).find("no command 'demo'"), std::string::npos) << text(c);
}

// run_code in a code-interpreter sandbox: state persists, a figure comes back as an image
// content item, an exception sets isError, and a template without an interpreter is a tool error.
TEST_F(AbxdMcpE2E, RunCodeInTheCodeInterpreter) {
  std::string id = create("code-interpreter");
  auto a = call("run_code", {{"sandboxId", id}, {"code", "x = 20\nprint('hi')\nx + 1"}});
  ASSERT_EQ(a.at("isError"), false) << json::serialize(a);
  const auto& s = a.at("structuredContent").as_object();
  EXPECT_EQ(s.at("stdout"), "hi\n");
  EXPECT_EQ(s.at("text"), "21");
  EXPECT_EQ(json::parse(text(a)), json::value(s));  // the text item is the structured JSON

  auto fig = call("run_code", {{"sandboxId", id},
                               {"code",
                                "import matplotlib.pyplot as plt; plt.plot([1, x]); "
                                "plt.show()"}});
  ASSERT_EQ(fig.at("isError"), false) << json::serialize(fig).substr(0, 2000);
  const auto& content = fig.at("content").as_array();
  ASSERT_GE(content.size(), 2u);
  EXPECT_EQ(content[1].at("type"), "image");
  EXPECT_EQ(content[1].at("mimeType"), "image/png");
  EXPECT_EQ(std::string(content[1].at("data").as_string()).rfind("iVBORw0KGgo", 0), 0u);

  auto err = call("run_code", {{"sandboxId", id}, {"code", "1 / 0"}});
  EXPECT_EQ(err.at("isError"), true);
  EXPECT_EQ(err.at("structuredContent").at("error").at("name"), "ZeroDivisionError");

  auto ctx = call("run_code", {{"sandboxId", id}, {"code", "1"}, {"contextId", "nosuch"}});
  EXPECT_EQ(ctx.at("isError"), true);
  EXPECT_NE(text(ctx).find("NotFound"), std::string::npos) << text(ctx);

  std::string base = create("base");
  auto none = call("run_code", {{"sandboxId", base}, {"code", "1"}});
  EXPECT_EQ(none.at("isError"), true);
  EXPECT_NE(text(none).find("no code interpreter"), std::string::npos) << text(none);
  EXPECT_EQ(call("kill_sandbox", {{"sandboxId", id}}).at("isError"), false);
  EXPECT_EQ(call("kill_sandbox", {{"sandboxId", base}}).at("isError"), false);
}

TEST_F(AbxdMcpE2E, ProtocolErrorsAndAuth) {
  auto unknown = call("nope", {});
  EXPECT_EQ(unknown.at("error").at("code"), -32602) << json::serialize(unknown);
  auto bad = call("list_files", {{"sandboxId", "x"}, {"path", "/"}, {"depth", 11}});
  EXPECT_EQ(bad.at("error").at("code"), -32602) << json::serialize(bad);
  EXPECT_NE(bad.at("error").at("message").as_string().find("'depth' must be between 1 and 10"),
            std::string::npos)
      << json::serialize(bad);

  json::object ping{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}};
  EXPECT_EQ(post(ping, "").result_int(), 401);
  EXPECT_EQ(post(ping, "e2b_" + std::string(40, '0')).result_int(), 401);
  EXPECT_EQ(post(ping, key()).result_int(), 200);
}

// An MCP client configured with the key in both X-API-KEY and Authorization: Bearer is served;
// two different keys are a clear 400.
TEST_F(AbxdMcpE2E, TheSameKeyInBothHeadersIsServed) {
  json::object ping{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}};
  auto with_bearer = [&](const std::string& bearer) {
    auto req = http::make_request(bhttp::verb::post, "/mcp", json::serialize(ping));
    req.set("X-API-KEY", key());
    req.set(bhttp::field::authorization, "Bearer " + bearer);
    req.set("Mcp-Session-Id", session_);
    auto r = http::fetch("127.0.0.1", port(), std::move(req), std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : http::Response{};
  };
  auto same = with_bearer(key());
  EXPECT_EQ(same.result_int(), 200) << same.body();
  auto other = with_bearer("e2b_" + std::string(40, '0'));
  EXPECT_EQ(other.result_int(), 400) << other.body();
  EXPECT_NE(other.body().find("different API keys"), std::string::npos) << other.body();
}

}  // namespace
}  // namespace abx::e2e
