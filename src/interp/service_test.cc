// abx-interp's service: the E2B event mapping (pure) and the HTTP API against a real IPython
// kernel on the host (Debian's python3-ipykernel; the tests skip without it). The full SDK path
// through abxd and a sandbox is tests/e2e/js/code-interpreter.test.mjs.
#include "abx/interp/service.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "abx/http/client.h"
#include "abx/testing/temp_dir.h"

namespace abx::interp {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;

Message iopub(std::string_view type, json::object content) {
  Message m = make_message(type, std::move(content), "s");
  m.header["date"] = "2026-12-01T00:00:00.000001Z";
  return m;
}

TEST(E2bEvent, StreamsResultsErrorsAndCounts) {
  bool errored = false;
  auto out = e2b_event(iopub("stream", {{"name", "stdout"}, {"text", "hi\n"}}), errored);
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, (json::object{{"type", "stdout"},
                                {"text", "hi\n"},
                                {"timestamp", "2026-12-01T00:00:00.000001Z"}}));
  EXPECT_EQ(e2b_event(iopub("stream", {{"name", "stderr"}, {"text", "e"}}), errored)->at("type"),
            "stderr");
  EXPECT_FALSE(e2b_event(iopub("stream", {{"name", "other"}, {"text", "e"}}), errored));

  auto n = e2b_event(iopub("execute_input", {{"code", "1"}, {"execution_count", 7}}), errored);
  EXPECT_EQ(*n, (json::object{{"type", "number_of_executions"}, {"execution_count", 7}}));

  json::object data{{"text/plain", "'abc'"},
                    {"text/html", "<b>x</b>"},
                    {"image/png", "iVBOR"},
                    {"application/json", json::object{{"a", 1}}},
                    {"application/vnd.custom", "z"}};
  auto r = e2b_event(iopub("execute_result", {{"data", data}, {"execution_count", 7}}), errored);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->at("type"), "result");
  EXPECT_EQ(r->at("text"), "abc");  // E2B drops a string repr's quotes
  EXPECT_EQ(r->at("html"), "<b>x</b>");
  EXPECT_EQ(r->at("png"), "iVBOR");
  EXPECT_EQ(r->at("json"), (json::object{{"a", 1}}));
  EXPECT_EQ(r->at("extra"), (json::object{{"application/vnd.custom", "z"}}));
  EXPECT_EQ(r->at("is_main_result"), true);
  auto d = e2b_event(iopub("display_data", {{"data", json::object{{"text/plain", "\"q\" x"}}}}),
                     errored);
  EXPECT_EQ(d->at("is_main_result"), false);
  EXPECT_EQ(d->at("text"), "\"q\" x");  // not a quoted string as a whole: kept

  auto e = e2b_event(iopub("error", {{"ename", "ValueError"},
                                     {"evalue", "bad"},
                                     {"traceback", json::array{"line 1", "line 2"}}}),
                     errored);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, (json::object{{"type", "error"},
                              {"name", "ValueError"},
                              {"value", "bad"},
                              {"traceback", "line 1\nline 2"}}));
  EXPECT_TRUE(errored);
  EXPECT_FALSE(e2b_event(iopub("error", {{"ename", "Again"}}), errored));  // first error only

  EXPECT_FALSE(e2b_event(iopub("status", {{"execution_state", "idle"}}), errored));
  EXPECT_FALSE(e2b_event(iopub("execute_result", {{"data", "not an object"}}), errored));
  EXPECT_FALSE(e2b_event(iopub("execute_input", {{"execution_count", "x"}}), errored));
}

bool have_ipykernel() {
  return std::system("/usr/bin/python3 -c 'import ipykernel' >/dev/null 2>&1") == 0;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_ipykernel()) GTEST_SKIP() << "no /usr/bin/python3 with ipykernel";
    // The kernels' ipc socket paths below it must fit in sun_path (108 bytes): a short prefix.
    dir_ = tmp_.path();
    std::filesystem::create_directories(dir_ / "work");
    ServiceOptions& o = opts_;
    o.port = 0;
    o.python_argv = {"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"};
    o.runtime_dir = dir_.string();
    o.default_cwd = (dir_ / "work").string();
    o.max_contexts = 4;
    o.keepalive_interval = std::chrono::milliseconds(200);
    auto s = Service::start(o);
    ASSERT_TRUE(s.ok()) << s.error().message();
    service_ = std::move(*s);
  }
  void TearDown() override {
    if (service_) service_->shutdown(std::chrono::milliseconds(500));
    service_.reset();
  }

  http::Response call(bhttp::verb method, const std::string& target, const std::string& body = {}) {
    auto r = http::fetch("127.0.0.1", service_->port(), http::make_request(method, target, body),
                         std::chrono::seconds(60));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    return r.ok() ? *r : http::Response{};
  }
  // The NDJSON lines of one /execute.
  std::vector<json::object> execute(const json::object& body, unsigned* status = nullptr) {
    http::Response r = call(bhttp::verb::post, "/execute", json::serialize(body));
    if (status) *status = r.result_int();
    std::vector<json::object> out;
    if (r.result_int() != 200) return out;
    std::string_view rest = r.body();
    while (!rest.empty()) {
      auto nl = rest.find('\n');
      out.push_back(json::parse(rest.substr(0, nl)).as_object());
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
    return out;
  }
  static std::string stdout_of(const std::vector<json::object>& lines) {
    std::string s;
    for (const auto& l : lines) {
      if (l.at("type") == "stdout") s += l.at("text").as_string();
    }
    return s;
  }

  // A kernel process started for a connection file under this test's directory; 0 if none.
  pid_t kernel_pid() const {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmd.find(dir_.string()) != std::string::npos &&
          cmd.find("connection.json") != std::string::npos) {
        return static_cast<pid_t>(std::stol(name));
      }
    }
    return 0;
  }

  abx::testing::TempDir tmp_{"ai"};
  std::filesystem::path dir_;
  ServiceOptions opts_;
  std::unique_ptr<Service> service_;
};

TEST_F(ServiceTest, TheDefaultKernelStartsBeforeAnyExecutionWhenAsked) {
  // The fixture's service starts kernels on first use: none runs yet.
  EXPECT_EQ(kernel_pid(), 0);
  service_->shutdown(std::chrono::milliseconds(0));
  service_.reset();
  opts_.start_default_kernel = true;
  auto s = Service::start(opts_);
  ASSERT_TRUE(s.ok()) << s.error().message();
  service_ = std::move(*s);
  // No request at all: the default context's kernel comes up on its own.
  pid_t kernel = 0;
  for (int i = 0; i < 600 && kernel == 0; ++i) {
    kernel = kernel_pid();
    if (kernel == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(kernel, 0) << "no kernel started without an execution";
  // The first execution runs in that kernel: no second one is started for it.
  auto out = execute({{"code", "import os; print(os.getpid())"}});
  EXPECT_EQ(stdout_of(out), std::to_string(kernel) + "\n");
}

TEST_F(ServiceTest, ExecuteKeepsStateAndEndsEveryStream) {
  auto a = execute({{"code", "x = 40\nprint('set')"}});
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.back(), (json::object{{"type", "end_of_execution"}}));
  EXPECT_EQ(stdout_of(a), "set\n");
  auto b = execute({{"code", "x + 2"}, {"language", "python"}});
  bool found = false;
  for (const auto& l : b) {
    if (l.at("type") == "result") {
      EXPECT_EQ(l.at("text"), "42");
      found = true;
    }
  }
  EXPECT_TRUE(found);
  // The default context's cwd.
  auto c = execute({{"code", "import os; print(os.getcwd())"}});
  EXPECT_EQ(stdout_of(c), (dir_ / "work").string() + "\n");
}

TEST_F(ServiceTest, EnvVarsAreDataNotCodeAndAreRestored) {
  std::string nasty = "a'\"\\n'); import os; os._exit(3) #";
  auto a = execute({{"code", "import os; print(os.environ['ABX_X'])"},
                    {"env_vars", json::object{{"ABX_X", nasty}}}});
  EXPECT_EQ(stdout_of(a), nasty + "\n");
  auto b = execute({{"code", "import os; print(os.environ.get('ABX_X'))"}});
  EXPECT_EQ(stdout_of(b), "None\n");
}

TEST_F(ServiceTest, ContextsLifecycleAndLimits) {
  http::Response r = call(bhttp::verb::post, "/contexts", R"({"cwd": "/"})");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  auto ctx = json::parse(r.body()).as_object();
  std::string id(ctx.at("id").as_string());
  EXPECT_EQ(ctx.at("cwd"), "/");
  EXPECT_EQ(ctx.at("language"), "python");

  r = call(bhttp::verb::get, "/contexts");
  auto list = json::parse(r.body()).as_array();
  EXPECT_EQ(list.size(), 2u);  // the default python context and ours

  execute({{"code", "y = 1"}, {"context_id", id}});
  auto before = execute({{"code", "print(y)"}, {"context_id", id}});
  EXPECT_EQ(stdout_of(before), "1\n");
  r = call(bhttp::verb::post, "/contexts/" + id + "/restart");
  EXPECT_EQ(r.result_int(), 200) << r.body();
  auto after = execute({{"code", "print(y)"}, {"context_id", id}});
  bool name_error = false;
  for (const auto& l : after) name_error |= l.at("type") == "error" && l.at("name") == "NameError";
  EXPECT_TRUE(name_error);

  r = call(bhttp::verb::delete_, "/contexts/" + id);
  EXPECT_EQ(r.result_int(), 200);
  unsigned status = 0;
  execute({{"code", "1"}, {"context_id", id}}, &status);
  EXPECT_EQ(status, 404u);
  r = call(bhttp::verb::delete_, "/contexts/" + id);
  EXPECT_EQ(r.result_int(), 404);
  EXPECT_NE(r.body().find(id), std::string::npos);

  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(call(bhttp::verb::post, "/contexts", "{}").result_int(), 200);
  r = call(bhttp::verb::post, "/contexts", "{}");
  EXPECT_EQ(r.result_int(), 429) << r.body();  // max_contexts 4
}

TEST_F(ServiceTest, BadInputIsA4xxWithAMessage) {
  struct Case {
    std::string body;
    unsigned status;
    std::string says;
  };
  std::vector<Case> cases = {
      {"{", 400, "JSON"},
      {"[]", 400, "object"},
      {R"({"code": 1})", 400, "code: expected a string, got number"},
      {R"({"language": "python"})", 400, "code: required field is missing"},
      {R"({"code": "1", "language": "cobol"})", 400, "cobol"},
      {R"({"code": "1", "language": "python", "context_id": "x"})", 400, "Only one"},
      {R"({"code": "1", "context_id": "nope"})", 404, "nope"},
      {R"({"code": "1", "env_vars": {"A=B": "x"}})", 400, "A=B"},
      {R"({"code": "1", "env_vars": {"A": 1}})", 400, "env_vars.A: expected a string"},
      {R"({"code": "1", "env_vars": []})", 400, "env_vars"},
      {R"({"code": "1", "extra": true})", 400, "extra"},
      {R"({"code": "1", "code": "2"})", 400, "JSON"},  // duplicate key
  };
  for (const auto& c : cases) {
    http::Response r = call(bhttp::verb::post, "/execute", c.body);
    EXPECT_EQ(r.result_int(), c.status) << c.body << " -> " << r.body();
    EXPECT_NE(r.body().find(c.says), std::string::npos) << c.body << " -> " << r.body();
  }
  EXPECT_EQ(call(bhttp::verb::post, "/contexts", R"({"cwd": "relative"})").result_int(), 400);
  EXPECT_EQ(call(bhttp::verb::post, "/contexts", R"({"cwd": "/no/such"})").result_int(), 400);
  EXPECT_EQ(call(bhttp::verb::post, "/contexts", R"({"language": "r"})").result_int(), 400);
  EXPECT_EQ(call(bhttp::verb::get, "/execute").result_int(), 405);
  EXPECT_EQ(call(bhttp::verb::get, "/contexts/a/b").result_int(), 404);
  EXPECT_EQ(call(bhttp::verb::get, "/health").result_int(), 200);
}

// The client leaving mid-run (the SDK's timeoutMs) interrupts the kernel: the next execution of
// the context runs at once, with the state from before.
TEST_F(ServiceTest, ClientGoneInterruptsTheRun) {
  execute({{"code", "kept = 5"}});
  auto conn = http::Connection::open("127.0.0.1", service_->port());
  ASSERT_TRUE(conn.ok());
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    (*conn)->cancel();
  });
  auto r = (*conn)->send_streaming(
      http::make_request(bhttp::verb::post, "/execute", R"({"code": "while True: pass"})"),
      [](std::string_view) { return true; }, std::chrono::seconds(60));
  closer.join();
  EXPECT_FALSE(r.ok());
  // Without the interrupt this would wait for the loop forever (the test's timeout).
  auto next = execute({{"code", "print(kept * 2)"}});
  EXPECT_EQ(stdout_of(next), "10\n");
}

TEST_F(ServiceTest, AKernelThatDiesIsReportedAndReplaced) {
  auto a = execute({{"code", "import os; os.kill(os.getpid(), 9)"}});
  ASSERT_FALSE(a.empty());
  bool died = false;
  for (const auto& l : a) died |= l.at("type") == "error" && l.at("name") == "KernelDied";
  EXPECT_TRUE(died);
  EXPECT_EQ(a.back().at("type"), "end_of_execution");
  auto b = execute({{"code", "print('again')"}});
  EXPECT_EQ(stdout_of(b), "again\n");
}

}  // namespace
}  // namespace abx::interp
