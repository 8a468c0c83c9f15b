// The platform tools over a fake backend: run_code's result shaping (images as image content
// items, isError when the code raised, the structured summary) and its argument checks.
#include "abx/mcp/platform_tools.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace abx::mcp {
namespace {

namespace json = boost::json;

class FakeBackend : public PlatformBackend {
 public:
  json::object execution;
  CodeRequest last;
  std::optional<Error> fail;

  Result<SandboxSummary> create_sandbox(const SandboxSpec&) override { return unimplemented(); }
  Result<std::vector<SandboxSummary>> list_sandboxes() override { return unimplemented(); }
  Result<bool> kill_sandbox(const std::string&) override { return unimplemented(); }
  Result<ShellResult> run_shell(const std::string&, const ShellRequest&) override {
    return unimplemented();
  }
  Result<std::string> read_file(const std::string&, const std::string&) override {
    return unimplemented();
  }
  Status write_file(const std::string&, const std::string&, const std::string&) override {
    return unimplemented();
  }
  Result<std::vector<FileEntry>> list_files(const std::string&, const std::string&, int) override {
    return unimplemented();
  }
  Result<std::vector<CommandInfo>> list_commands(const std::string&) override {
    return unimplemented();
  }
  Result<json::value> call_command(const std::string&, const std::string&,
                                   const json::object&) override {
    return unimplemented();
  }
  Result<json::object> run_code(const std::string&, const CodeRequest& req) override {
    last = req;
    if (fail) return *fail;
    return execution;
  }

 private:
  static Error unimplemented() { return Error(ErrorCode::kUnimplemented, "not in this fake"); }
};

Result<ToolResult> call(PlatformTools& tools, const json::object& args) {
  std::optional<Result<ToolResult>> out;
  tools.call_tool("run_code", args, [&](Result<ToolResult> r) { out = std::move(r); });
  return std::move(*out);
}

TEST(PlatformRunCode, ShapesTheExecution) {
  FakeBackend b;
  b.execution = json::parse(R"({
    "results": [{"png": "iVBORw0KGgo=", "text": "<Figure>", "isMainResult": false},
                {"text": "42", "html": "<b>42</b>", "isMainResult": true}],
    "logs": {"stdout": ["a", "b\n"], "stderr": ["w\n"]},
    "error": null, "executionCount": 7})")
                    .as_object();
  PlatformTools tools(b);
  auto r = call(tools, {{"sandboxId", "s"},
                        {"code", "x"},
                        {"contextId", "c1"},
                        {"envs", {{"A", "1"}}},
                        {"timeoutSeconds", 5}});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->is_error);
  EXPECT_EQ(b.last.code, "x");
  EXPECT_EQ(b.last.context_id, "c1");
  EXPECT_EQ(b.last.envs.at("A"), "1");
  EXPECT_EQ(b.last.timeout, std::chrono::seconds(5));
  const auto& s = *r->structured;
  EXPECT_EQ(s.at("stdout"), "ab\n");
  EXPECT_EQ(s.at("stderr"), "w\n");
  EXPECT_EQ(s.at("text"), "42");
  EXPECT_EQ(s.at("executionCount"), 7);
  EXPECT_FALSE(s.contains("error"));
  EXPECT_EQ(s.at("results").at(0).at("image"), 1);
  EXPECT_EQ(json::parse(r->text), json::value(s));      // the text item is the structured JSON
  EXPECT_EQ(r->text.find("iVBOR"), std::string::npos);  // the image is not in the JSON
  ASSERT_EQ(r->images.size(), 1u);
  EXPECT_EQ(r->images[0].mime_type, "image/png");
  EXPECT_EQ(r->images[0].data, "iVBORw0KGgo=");
  auto j = tool_result_json(*r);
  ASSERT_EQ(j.at("content").as_array().size(), 2u);
  EXPECT_EQ(j.at("content").at(1),
            json::parse(R"({"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"})"));
}

TEST(PlatformRunCode, RaisedCodeIsAnErrorResultAndFailuresAreToolErrors) {
  FakeBackend b;
  b.execution = json::parse(R"({"results": [], "logs": {"stdout": [], "stderr": []},
    "error": {"name": "ZeroDivisionError", "value": "division by zero",
              "traceback": "\u001b[0;31mZeroDivisionError\u001b[0m: division by zero"}})")
                    .as_object();
  PlatformTools tools(b);
  auto r = call(tools, {{"sandboxId", "s"}, {"code", "1/0"}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->is_error);
  const auto& e = r->structured->at("error");
  EXPECT_EQ(e.at("name"), "ZeroDivisionError");
  EXPECT_EQ(e.at("traceback"), "ZeroDivisionError: division by zero");  // colours dropped

  b.fail = Error(ErrorCode::kFailedPrecondition, "sandbox s's template has no code interpreter");
  auto f = call(tools, {{"sandboxId", "s"}, {"code", "1"}});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->is_error);
  EXPECT_FALSE(f->structured);
  EXPECT_NE(f->text.find("no code interpreter"), std::string::npos);
}

TEST(PlatformRunCode, ArgumentsAreChecked) {
  FakeBackend b;
  PlatformTools tools(b);
  EXPECT_EQ(call(tools, {{"sandboxId", "s"}}).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(call(tools, {{"sandboxId", "s"}, {"code", "1"}, {"timeoutSeconds", 0}}).error().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(call(tools, {{"sandboxId", "s"}, {"code", "1"}, {"contextId", "c"}, {"language", "py"}})
                .error()
                .code(),
            ErrorCode::kInvalidArgument);
  bool listed = false;
  for (const auto& t : platform_tools()) listed = listed || t.name == "run_code";
  EXPECT_TRUE(listed);
}

}  // namespace
}  // namespace abx::mcp
