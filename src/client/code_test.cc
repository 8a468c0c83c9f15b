// The code interpreter's client side without a network: the /execute NDJSON stream decoded into
// an Execution, its JSON, and the mapping of error answers.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "abx/client/sandbox.h"
#include "code_stream.h"

namespace abx::client {
namespace {

namespace json = boost::json;
using detail::ExecutionReader;

constexpr std::string_view kStream =
    "{\"type\":\"number_of_executions\",\"execution_count\":3}\n"
    "{\"type\":\"stdout\",\"text\":\"hello\\n\",\"timestamp\":\"2026-12-01T09:00:00.1Z\"}\n"
    "{\"type\":\"keepalive\"}\n"
    "{\"type\":\"stderr\",\"text\":\"warn\\n\"}\n"
    "{\"type\":\"result\",\"is_main_result\":false,\"png\":\"iVBORw0K\\nGgo=\\n\",\"text\":\"<"
    "Figure>\"}"
    "\n"
    "{\"type\":\"result\",\"is_main_result\":true,\"text\":\"6\",\"html\":\"<b>6</b>\","
    "\"json\":{\"a\":1},\"extra\":{\"application/x-y\":\"z\"},\"chart\":{\"type\":\"line\"}}\n"
    "{\"type\":\"error\",\"name\":\"ZeroDivisionError\",\"value\":\"division by zero\","
    "\"traceback\":\"Traceback...\"}\n"
    "{\"type\":\"error\",\"name\":\"Second\",\"value\":\"ignored\",\"traceback\":\"\"}\n"
    "{\"type\":\"end_of_execution\"}\n";

TEST(CodeStream, DecodesEveryLineType) {
  std::string out, err;
  int results = 0, errors = 0;
  RunCodeOptions opts;
  opts.on_stdout = [&](std::string_view s) { out += s; };
  opts.on_stderr = [&](std::string_view s) { err += s; };
  opts.on_result = [&](const CodeResult&) { ++results; };
  opts.on_error = [&](const CodeError&) { ++errors; };
  Execution ex;
  ExecutionReader r(opts, ex);
  ASSERT_TRUE(r.feed(kStream).ok());
  EXPECT_TRUE(r.ended());
  ASSERT_TRUE(r.finish().ok());
  EXPECT_EQ(ex.execution_count, 3);
  EXPECT_EQ(ex.stdout_chunks, std::vector<std::string>{"hello\n"});
  EXPECT_EQ(ex.stderr_text(), "warn\n");
  EXPECT_EQ(out, "hello\n");
  EXPECT_EQ(err, "warn\n");
  ASSERT_EQ(ex.results.size(), 2u);
  EXPECT_EQ(results, 2);
  EXPECT_FALSE(ex.results[0].is_main_result);
  EXPECT_EQ(ex.results[0].png, "iVBORw0KGgo=");  // the kernel's line breaks are gone
  EXPECT_EQ(ex.results[0].formats(), (std::vector<std::string>{"text", "png"}));
  EXPECT_EQ(ex.text(), "6");
  const auto& main = ex.results[1];
  EXPECT_EQ(main.html, "<b>6</b>");
  EXPECT_EQ(main.json, (json::value{{"a", 1}}));
  EXPECT_EQ(main.extra.at("application/x-y"), json::value("z"));
  EXPECT_TRUE(main.extra.contains("chart"));  // unknown keys are kept, not lost
  ASSERT_TRUE(ex.error.has_value());
  EXPECT_EQ(ex.error->name, "ZeroDivisionError");
  EXPECT_EQ(ex.error->value, "division by zero");
  EXPECT_EQ(ex.error->traceback, "Traceback...");
  EXPECT_EQ(errors, 1);  // only the first error counts
}

TEST(CodeStream, LinesSplitAnywhereDecodeTheSame) {
  for (std::size_t step : {1u, 2u, 7u, 64u}) {
    Execution ex;
    RunCodeOptions opts;
    ExecutionReader r(opts, ex);
    for (std::size_t i = 0; i < kStream.size(); i += step) {
      ASSERT_TRUE(r.feed(kStream.substr(i, step)).ok()) << step;
    }
    ASSERT_TRUE(r.finish().ok()) << step;
    EXPECT_EQ(ex.text(), "6");
    EXPECT_EQ(ex.stdout_text(), "hello\n");
    EXPECT_EQ(ex.results.size(), 2u);
  }
}

TEST(CodeStream, LastLineWithoutNewlineAndCrlf) {
  Execution ex;
  RunCodeOptions opts;
  ExecutionReader r(opts, ex);
  ASSERT_TRUE(
      r.feed("{\"type\":\"stdout\",\"text\":\"a\"}\r\n\n{\"type\":\"end_of_execution\"}").ok());
  EXPECT_FALSE(r.ended());
  ASSERT_TRUE(r.finish().ok());
  EXPECT_EQ(ex.stdout_text(), "a");
}

TEST(CodeStream, MissingEndIsUnavailable) {
  Execution ex;
  RunCodeOptions opts;
  ExecutionReader r(opts, ex);
  ASSERT_TRUE(r.feed("{\"type\":\"stdout\",\"text\":\"partial\"}\n").ok());
  auto st = r.finish();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(ex.stdout_text(), "partial");  // what came is kept
}

TEST(CodeStream, MalformedLinesAreInternalErrors) {
  for (std::string_view bad : {"not json\n", "[1,2]\n", "{\"type\":\n", "\"str\"\n"}) {
    Execution ex;
    RunCodeOptions opts;
    ExecutionReader r(opts, ex);
    auto st = r.feed(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().code(), ErrorCode::kInternal) << bad;
    EXPECT_FALSE(r.feed("{\"type\":\"end_of_execution\"}\n").ok());  // nothing after a failure
  }
}

TEST(CodeStream, UnknownTypesAndFieldsAreIgnored) {
  Execution ex;
  RunCodeOptions opts;
  ExecutionReader r(opts, ex);
  ASSERT_TRUE(
      r.feed("{\"type\":\"future_thing\",\"x\":1}\n{\"no_type\":true}\n"
             "{\"type\":\"error\",\"name\":\"E\",\"value\":\"v\",\"traceback\":[\"a\",\"b\"]}\n"
             "{\"type\":\"end_of_execution\"}\n{\"type\":\"stdout\",\"text\":\"late\"}\n")
          .ok());
  ASSERT_TRUE(r.finish().ok());
  EXPECT_TRUE(ex.stdout_chunks.empty());  // nothing counts after the end
  ASSERT_TRUE(ex.error);
  EXPECT_EQ(ex.error->traceback, "a\nb");  // Jupyter's list form joined
}

TEST(CodeStream, CapsLinesAndTotal) {
  {
    Execution ex;
    RunCodeOptions opts;
    ExecutionReader r(opts, ex, /*max_line=*/32, /*max_total=*/1024);
    auto st = r.feed(std::string(40, 'x'));  // no newline yet: still over the line cap
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code(), ErrorCode::kResourceExhausted);
  }
  {
    Execution ex;
    RunCodeOptions opts;
    ExecutionReader r(opts, ex, /*max_line=*/1024, /*max_total=*/100);
    std::string line = "{\"type\":\"stdout\",\"text\":\"0123456789\"}\n";
    Status st;
    for (int i = 0; i < 10 && st.ok(); ++i) st = r.feed(line);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code(), ErrorCode::kResourceExhausted);
  }
}

TEST(CodeStream, ExecutionJsonHasE2bShape) {
  Execution ex;
  RunCodeOptions opts;
  ExecutionReader r(opts, ex);
  ASSERT_TRUE(r.feed(kStream).ok());
  auto j = to_json(ex);
  EXPECT_EQ(j.at("executionCount"), json::value(3));
  EXPECT_EQ(j.at("logs").at("stdout"), (json::array{"hello\n"}));
  EXPECT_EQ(j.at("error").at("name"), json::value("ZeroDivisionError"));
  const auto& res = j.at("results").as_array();
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[1].at("text"), json::value("6"));
  EXPECT_EQ(res[1].at("isMainResult"), json::value(true));
  EXPECT_FALSE(res[0].as_object().contains("html"));
  Execution empty;
  auto e = to_json(empty);
  EXPECT_TRUE(e.at("error").is_null());
  EXPECT_TRUE(e.at("executionCount").is_null());
}

TEST(CodeErrors, MapsStatusesAndTheMissingInterpreter) {
  using detail::code_http_error;
  auto e = code_http_error(404, "Context abc not found", "sb1");
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_EQ(e.message(), "Context abc not found");
  EXPECT_EQ(code_http_error(400, "unsupported language 'r'\n", "sb1").code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_http_error(429, "too many contexts", "sb1").code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(code_http_error(503, "kernel did not start", "sb1").code(), ErrorCode::kUnavailable);
  auto none = code_http_error(
      502, R"({"code":502,"message":"nothing listens on port 49999 in sandbox 'sb1'"})", "sb1");
  EXPECT_EQ(none.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(none.message().find("has no code interpreter"), std::string::npos);
  EXPECT_EQ(code_http_error(502, "bad gateway", "sb1").code(), ErrorCode::kUnavailable);
  auto priv = code_http_error(
      403, R"J({"code":403,"message":"port 49999 of this sandbox is private (no `ports`)"})J",
      "sb1");
  EXPECT_EQ(priv.code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(code_http_error(403, "forbidden", "sb1").code(), ErrorCode::kPermissionDenied);
  auto dial =
      detail::code_dial_error(unavailable("nothing listens on port 49999 in sandbox 'x'"), "x");
  EXPECT_EQ(dial.code(), ErrorCode::kFailedPrecondition);
}

}  // namespace
}  // namespace abx::client
