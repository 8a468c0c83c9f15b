// The stdio transport over real pipes: line framing (CRLF, blank lines, a last line without a
// newline, lines split across reads), replies from other threads, oversized lines skipped in
// constant memory, notifications silent, and end of input waiting for calls in progress.
#include "abx/mcp/stdio.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "abx/testing/pipe.h"
#include "test_tools.h"

namespace abx::mcp {
namespace {

namespace json = boost::json;

class SlowTools : public ToolProvider {
 public:
  std::vector<Tool> list_tools() override { return {Tool{.name = "later"}}; }
  void call_tool(std::string_view name, const json::object&, ToolDone done) override {
    if (name != "later") return done(not_found("unknown tool"));
    answer_from_thread(done, "done", std::chrono::milliseconds(200));
  }
};

using testing::Pipe;

// Feeds `chunks` (each written separately) to serve_stdio and returns its output lines.
std::vector<json::value> run(const std::vector<std::string>& chunks, Status* status = nullptr,
                             std::size_t max_bytes = 4096) {
  Dispatcher d(ServerInfo{"t", "1", ""}, DecodeLimits{max_bytes, {}});
  SlowTools tools;
  Pipe in, out;
  Status st;
  std::thread server([&] { st = serve_stdio(d, tools, in.r, out.w); });
  for (const auto& c : chunks) {
    EXPECT_EQ(::write(in.w, c.data(), c.size()), static_cast<ssize_t>(c.size()));
  }
  ::close(in.w);
  in.w = -1;
  server.join();
  ::close(out.w);
  out.w = -1;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out.r, buf, sizeof buf)) > 0;) text.append(buf, n);
  std::vector<json::value> lines;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(json::parse(text.substr(start, nl - start)));
  }
  EXPECT_EQ(start, text.size()) << "output must end with a newline";
  if (status) *status = st;
  return lines;
}

const std::string kInit =
    R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",)"
    R"("capabilities":{},"clientInfo":{"name":"c","version":"1"}}})";

TEST(McpStdio, OneSessionLineByLine) {
  Status st;
  auto out = run({kInit + "\n",
                  R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
                  "\r\n\n   \n",
                  R"({"jsonrpc":"2.0","id":2,"method":"tools/li)",
                  R"(st"})"
                  "\n",
                  R"({"jsonrpc":"2.0","id":3,"method":"ping"})"},
                 &st);
  ASSERT_TRUE(st.ok()) << st.error().message();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].at("result").at("protocolVersion"), "2025-06-18");
  EXPECT_EQ(out[1].at("result").at("tools").at(0).at("name"), "later");
  EXPECT_EQ(out[2].at("id"), 3);
}

TEST(McpStdio, EndOfInputWaitsForCallsInProgress) {
  auto out = run({kInit + "\n" +
                  R"({"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"later"}})"
                  "\n"
                  R"({"jsonrpc":"2.0","id":"b","method":"ping"})"
                  "\n"});
  ASSERT_EQ(out.size(), 3u);
  // The slow call answers last, after the ping that followed it.
  EXPECT_EQ(out[1].at("id"), "b");
  EXPECT_EQ(out[2].at("id"), "a");
  EXPECT_EQ(out[2].at("result").at("content").at(0).at("text"), "done");
}

TEST(McpStdio, BadLinesGetErrorsAndTheSessionGoesOn) {
  std::string big = R"({"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":")" +
                    std::string(10000, 'x') + "\"}}\n";
  auto out = run({"{oops\n", big.substr(0, 3000), big.substr(3000),
                  R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])"
                  "\n",
                  R"({"jsonrpc":"2.0","id":4,"method":"ping"})"
                  "\n"});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].at("error").at("code"), kParseError);
  EXPECT_EQ(out[1].at("error").at("code"), kInvalidRequest);
  EXPECT_NE(std::string(out[1].at("error").at("message").as_string()).find("limit"),
            std::string::npos);
  EXPECT_EQ(out[2].at("error").at("code"), kInvalidRequest);
  EXPECT_EQ(out[3].at("id"), 4);
}

TEST(McpStdio, RequestsBeforeInitializeAreRefused) {
  auto out = run({R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"
                  "\n"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].at("error").at("code"), kInvalidRequest);
}

}  // namespace
}  // namespace abx::mcp
