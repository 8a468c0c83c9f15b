// `abx-server --python`: the real binary, a real python3 worker, requests over loopback. The
// Python commands must look and fail exactly like C++ ones (the demo module's `demo` is the
// reference), keep module state, survive their worker's death, and never hold up discovery.
#include <gtest/gtest.h>
#include <signal.h>

#include <boost/json.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "abx/http/client.h"
#include "abx/pyworker/pyworker.h"
#include "abx/testing/child_process.h"
#include "abx/testing/server.h"
#include "abx/testing/temp_dir.h"

namespace abx::server {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using testing::ChildProcess;
using namespace std::chrono_literals;

constexpr const char* kToken = "python-test-token-0123456789";

// The issue's tools.py, and commands for each failure the bridge must report.
constexpr const char* kTools = R"PY(import os
import time

from abx import sandbox

counter = 0


@sandbox.register
def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"


@sandbox.register
def bump(by: int = 1) -> int:
    """State persists between calls."""
    global counter
    counter += by
    return counter


@sandbox.register
def types(i: int, f: float, b: bool, s: str = "x") -> str:
    return repr((i, f, b, s))


@sandbox.register
def fail(msg: str) -> None:
    raise ValueError(msg)


@sandbox.register
def unserialisable() -> int:
    return {1, 2}


@sandbox.register
def slow(ms: int) -> int:
    time.sleep(ms / 1000)
    return ms


@sandbox.register
def die() -> int:
    os._exit(3)


@sandbox.register
def pid() -> int:
    return os.getpid()


@sandbox.register
def token_env() -> str:
    return os.environ.get("ABX_ACCESS_TOKEN", "<unset>")


@sandbox.register
def talk() -> str:
    print("printed by a command")
    return "ok"
)PY";

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

http::Response send(std::uint16_t port, bhttp::verb verb, const std::string& target,
                    const std::string& body = {}) {
  auto req = http::make_request(verb, target, body);
  req.set("X-Access-Token", kToken);
  auto r = http::fetch("127.0.0.1", port, std::move(req), std::chrono::seconds(30));
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : http::Response{};
}

http::Response call(std::uint16_t port, const std::string& name, const std::string& body) {
  return send(port, bhttp::verb::post, "/commands/" + name, body);
}

json::object command_schema(std::uint16_t port, const std::string& name) {
  auto list = send(port, bhttp::verb::get, "/commands");
  EXPECT_EQ(list.result_int(), 200);
  json::value parsed = json::parse(list.body());
  for (const auto& c : parsed.at("commands").as_array()) {
    if (c.at("name").as_string() == name) return c.as_object();
  }
  ADD_FAILURE() << "no command " << name << " in " << list.body();
  return {};
}

class PythonServer : public ::testing::Test {
 protected:
  void SetUp() override {
    module_ = dir_ / "tools.py";
    write_file(module_, kTools);
  }

  // abx-server --python <module> --port 0 [extra]; the port, or 0 when it did not listen.
  std::uint16_t launch(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{testing::abx_server_bin(),
                                  "--python",
                                  module_.string(),
                                  "--port",
                                  "0",
                                  "--log-level",
                                  "warn"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<ChildProcess>(
        argv, std::vector<std::string>{std::string("ABX_ACCESS_TOKEN=") + kToken});
    auto port = proc_->wait_listening();
    return port ? *port : 0;
  }

  // Runs abx-server on `module` with stderr folded into stdout; returns {exit code, output}.
  std::pair<int, std::string> run_to_exit(const std::filesystem::path& module,
                                          const std::string& extra = "") {
    std::string cmd = std::string(testing::abx_server_bin()) + " --python " + module.string() +
                      " --port 0 --no-auth " + extra + " 2>&1";
    ChildProcess p({"/bin/sh", "-c", cmd});
    std::string out = p.read_all();
    return {p.wait(), out};
  }

  testing::TempDir dir_{"abx-python"};
  std::filesystem::path module_;
  std::unique_ptr<ChildProcess> proc_;
};

TEST_F(PythonServer, SchemaIsTheCxxShapeByteForByte) {
  std::uint16_t py = launch();
  ASSERT_NE(py, 0);
  testing::CommandServerProcess cxx;
  ASSERT_TRUE(cxx.start(kToken, {"--log-level", "warn"}));
  // The same signature and docstring as the demo module's ABX_REGISTER'd demo.
  EXPECT_EQ(json::serialize(command_schema(py, "demo")),
            json::serialize(command_schema(cxx.port(), "demo")));
  EXPECT_EQ(
      json::serialize(command_schema(py, "bump")),
      R"({"name":"bump","description":"State persists between calls.","args":[{"name":"by","type":"integer","required":false,"default":1,"description":""}]})");
  // Every argument carries its type.
  json::object types = command_schema(py, "types");
  for (const auto& a : types.at("args").as_array()) {
    EXPECT_TRUE(a.as_object().contains("type")) << json::serialize(a);
  }
  // --list prints the same schema without serving.
  auto [code, out] = run_to_exit(module_, "--list");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find(R"("name":"bump")"), std::string::npos) << out;
}

TEST_F(PythonServer, CallsReturnResultsAndModuleStatePersists) {
  std::uint16_t port = launch();
  ASSERT_NE(port, 0);
  EXPECT_EQ(call(port, "demo", R"({"x":42,"y":"world"})").body(), R"({"result":"42: world"})");
  EXPECT_EQ(call(port, "demo", R"({"x":42})").body(), R"({"result":"42: hello"})");
  for (int want : {1, 2, 3}) {
    EXPECT_EQ(call(port, "bump", "{}").body(), "{\"result\":" + std::to_string(want) + "}");
  }
  EXPECT_EQ(call(port, "bump", R"({"by":10})").body(), R"({"result":13})");
  // Coerced by the C++ registry before Python sees them: an integer for a float is a float.
  EXPECT_EQ(call(port, "types", R"({"i":1,"f":2,"b":true})").body(),
            R"J({"result":"(1, 2.0, True, 'x')"})J");
  // The worker never sees the server's access token; what it prints does not break anything.
  EXPECT_EQ(call(port, "token_env", "{}").body(), R"({"result":"<unset>"})");
  EXPECT_EQ(call(port, "talk", "{}").body(), R"({"result":"ok"})");
  EXPECT_EQ(call(port, "bump", "{}").body(), R"({"result":14})");
}

TEST_F(PythonServer, PythonExceptionsAreTypedFailures) {
  std::uint16_t port = launch();
  ASSERT_NE(port, 0);
  auto r = call(port, "fail", R"({"msg":"bad input"})");
  EXPECT_EQ(r.result_int(), 500);
  EXPECT_EQ(r.body(), R"({"error":"bad input","type":"ValueError"})");
  auto u = call(port, "unserialisable", "{}");
  EXPECT_EQ(u.result_int(), 500);
  json::object body = json::parse(u.body()).as_object();
  EXPECT_EQ(body.at("type").as_string(), "TypeError");
  EXPECT_NE(
      std::string(body.at("error").as_string()).find("returned a value that JSON cannot carry"),
      std::string::npos)
      << u.body();
  // Neither killed the worker: state is intact.
  EXPECT_EQ(call(port, "bump", "{}").body(), R"({"result":1})");
  EXPECT_EQ(call(port, "bump", "{}").body(), R"({"result":2})");
}

TEST_F(PythonServer, BadArgumentsGetTheSame400BodiesAsCxxCommands) {
  std::uint16_t py = launch();
  ASSERT_NE(py, 0);
  testing::CommandServerProcess cxx;
  ASSERT_TRUE(cxx.start(kToken, {"--log-level", "warn"}));
  for (const char* body : {R"({"x":"42"})", "{}", R"({"x":1,"z":2})", R"({"x":1.5})",
                           R"({"x":1,"y":3})", "[1]", R"({"x":1,"x":2})", "not json"}) {
    auto a = call(py, "demo", body);
    auto b = call(cxx.port(), "demo", body);
    EXPECT_EQ(a.result_int(), 400) << body;
    EXPECT_EQ(a.result_int(), b.result_int()) << body;
    EXPECT_EQ(a.body(), b.body()) << body;
  }
}

TEST_F(PythonServer, ADeadWorkerIs503ThenRestarted) {
  std::uint16_t port = launch();
  ASSERT_NE(port, 0);
  EXPECT_EQ(call(port, "bump", "{}").body(), R"({"result":1})");
  auto first = json::parse(call(port, "pid", "{}").body()).at("result").as_int64();

  auto died = call(port, "die", "{}");
  EXPECT_EQ(died.result_int(), 503);
  json::object body = json::parse(died.body()).as_object();
  EXPECT_EQ(body.at("type").as_string(), "Unavailable");
  std::string msg(body.at("error").as_string());
  EXPECT_NE(msg.find("died during the call to 'die'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exited with status 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("restarted"), std::string::npos) << msg;

  // A new process, its module state starting over.
  auto second = json::parse(call(port, "pid", "{}").body()).at("result").as_int64();
  EXPECT_NE(first, second);
  EXPECT_EQ(call(port, "bump", "{}").body(), R"({"result":1})");

  // Killed from outside while idle: the next call finds out, answers 503, and recovers.
  ASSERT_EQ(::kill(static_cast<pid_t>(second), SIGKILL), 0);
  std::this_thread::sleep_for(100ms);
  auto killed = call(port, "bump", "{}");
  EXPECT_EQ(killed.result_int(), 503) << killed.body();
  EXPECT_EQ(call(port, "bump", "{}").body(), R"({"result":1})");
  // Discovery never depended on the worker.
  EXPECT_EQ(send(port, bhttp::verb::get, "/commands").result_int(), 200);
}

// envd starts a Python module's worker just before abx-server and hands it over on descriptor 3
// (--python-fd, issue 37). Here a launcher does what envd does: a socketpair, the worker on one
// end (not abx-server's child), abx-server on the other. The server serves the worker it was
// handed; when that worker dies, a worker of its own replaces it, as after any death.
TEST_F(PythonServer, AWorkerStartedBesideTheServerIsServedThenReplacedWhenItDies) {
  auto pkg = pyworker::package_dir();
  ASSERT_TRUE(pkg.ok()) << pkg.error().to_string();
  const std::string pid_file = (dir_ / "worker.pid").string();
  const char* launcher = R"PY(
import os, socket, sys
server, module, pkg, pid_file = sys.argv[1:5]
mine, theirs = socket.socketpair()
if os.fork() == 0:  # the worker, in a grandchild: never the server's child
    worker = os.fork()
    if worker == 0:
        os.dup2(theirs.fileno(), 3)
        os.execv(sys.executable, [sys.executable, os.path.join(pkg, "abx", "server", "run.py"),
                                  "--fd", "3", module])
    with open(pid_file, "w") as f:
        f.write(str(worker))
    os._exit(0)
os.wait()
theirs.close()
os.dup2(mine.fileno(), 3)
os.execv(server, [server, "--python", module, "--python-fd", "3", "--port", "0",
                  "--log-level", "warn"])
)PY";
  proc_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{"/usr/bin/python3", "-c", launcher, testing::abx_server_bin(),
                               module_.string(), *pkg, pid_file},
      std::vector<std::string>{std::string("ABX_ACCESS_TOKEN=") + kToken});
  auto port = proc_->wait_listening();
  ASSERT_TRUE(port.has_value());
  std::string handed;
  std::ifstream(pid_file) >> handed;
  ASSERT_FALSE(handed.empty());
  EXPECT_EQ(call(*port, "pid", "{}").body(), R"({"result":)" + handed + "}");
  EXPECT_EQ(call(*port, "bump", "{}").body(), R"({"result":1})");

  auto died = call(*port, "die", "{}");
  EXPECT_EQ(died.result_int(), 503);
  std::string msg(json::parse(died.body()).at("error").as_string());
  EXPECT_NE(msg.find("died during the call to 'die' (it ended)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("restarted"), std::string::npos) << msg;
  auto own = json::parse(call(*port, "pid", "{}").body()).at("result").as_int64();
  EXPECT_NE(std::to_string(own), handed);
  EXPECT_EQ(call(*port, "bump", "{}").body(), R"({"result":1})");  // state starts over
}

// A --python-fd that is not open: the server starts a worker of its own.
TEST_F(PythonServer, APythonFdThatIsNotOpenFallsBackToAWorkerOfItsOwn) {
  std::uint16_t port = launch({"--python-fd", "97"});
  ASSERT_NE(port, 0);
  EXPECT_EQ(call(port, "demo", R"({"x":42,"y":"world"})").body(), R"({"result":"42: world"})");
}

TEST_F(PythonServer, ASlowCallDoesNotBlockDiscoveryOrHealth) {
  std::uint16_t port = launch();
  ASSERT_NE(port, 0);
  auto slow = std::async(std::launch::async, [&] { return call(port, "slow", R"({"ms":3000})"); });
  std::this_thread::sleep_for(300ms);  // the call is running in the worker
  for (const char* target : {"/commands", "/health"}) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = send(port, bhttp::verb::get, target);
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(r.result_int(), 200) << target;
    EXPECT_LT(took, 1000ms) << target << " waited for the Python call";
  }
  ASSERT_EQ(slow.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(slow.get().body(), R"({"result":3000})");
}

TEST_F(PythonServer, ACallPastTheDeadlineIs504AndTheWorkerIsReplaced) {
  std::uint16_t port = launch({"--call-timeout", "500ms"});
  ASSERT_NE(port, 0);
  EXPECT_EQ(call(port, "bump", "{}").body(), R"({"result":1})");
  auto r = call(port, "slow", R"({"ms":5000})");
  EXPECT_EQ(r.result_int(), 504) << r.body();
  // The stuck worker was killed rather than left to hold every later call: once its
  // replacement has started (a call queued meanwhile may still meet the deadline), calls are
  // served again, by a fresh interpreter.
  http::Response next;
  for (int i = 0; i < 20; ++i) {
    next = call(port, "bump", "{}");
    if (next.result_int() != 504) break;
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_EQ(next.body(), R"({"result":1})");
}

TEST_F(PythonServer, McpToolsListAndCallReachPythonCommands) {
  // abx-server --stdio: the same registry as MCP tools on stdin/stdout, which the worker's own
  // prints (`talk`) must not reach.
  write_file(
      dir_ / "in.jsonl",
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo","arguments":{"x":42,"y":"world"}}}
{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"talk","arguments":{}}}
{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fail","arguments":{"msg":"no"}}}
)");
  std::string cmd = std::string(testing::abx_server_bin()) + " --stdio --python " +
                    module_.string() + " --log-level warn <" + (dir_ / "in.jsonl").string();
  ChildProcess p({"/bin/sh", "-c", cmd});
  std::string out = p.read_all();
  EXPECT_EQ(p.wait(), 0) << out;
  std::map<std::int64_t, json::object> answers;
  std::size_t start = 0;
  for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
    json::value v = json::parse(out.substr(start, nl - start));  // every line is JSON-RPC
    answers[v.at("id").as_int64()] = v.as_object();
  }
  ASSERT_EQ(answers.size(), 5u) << out;
  bool listed = false;
  for (const auto& t : answers[2].at("result").at("tools").as_array()) {
    if (t.at("name").as_string() != "demo") continue;
    listed = true;
    EXPECT_EQ(t.at("description").as_string(), "Run a demo command.");
    EXPECT_EQ(t.at("inputSchema").at("properties").at("x").at("type").as_string(), "integer");
  }
  EXPECT_TRUE(listed) << out;
  EXPECT_EQ(json::serialize(answers[3].at("result").at("structuredContent")),
            R"({"result":"42: world"})");
  EXPECT_EQ(json::serialize(answers[4].at("result").at("structuredContent")), R"({"result":"ok"})");
  EXPECT_TRUE(answers[5].at("result").at("isError").as_bool());
  EXPECT_EQ(answers[5].at("result").at("content").at(0).at("text").as_string(), "ValueError: no");
}

TEST_F(PythonServer, ImportFailuresStopTheServerWithThePythonTraceback) {
  auto syntax = dir_ / "syntax.py";
  write_file(syntax, "from abx import sandbox\n\ndef broken(:\n    pass\n");
  auto [code, out] = run_to_exit(syntax);
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("failed to import"), std::string::npos) << out;
  EXPECT_NE(out.find("syntax.py\", line 3"), std::string::npos) << out;
  EXPECT_NE(out.find("SyntaxError"), std::string::npos) << out;
  EXPECT_EQ(out.find("listening on"), std::string::npos) << out;

  auto missing = dir_ / "missing.py";
  write_file(missing, "import no_such_module_abx\n");
  std::tie(code, out) = run_to_exit(missing);
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("ModuleNotFoundError: No module named 'no_such_module_abx'"),
            std::string::npos)
      << out;

  auto annotation = dir_ / "annotation.py";
  write_file(annotation,
             "from abx import sandbox\n\n@sandbox.register\ndef f(x: list) -> int:\n"
             "    return 1\n");
  std::tie(code, out) = run_to_exit(annotation);
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("command 'f', parameter 'x': unsupported type list"), std::string::npos)
      << out;
  EXPECT_NE(out.find("annotation.py\", line 3"), std::string::npos) << out;

  auto twice = dir_ / "twice.py";
  write_file(twice,
             "from abx import sandbox\n\n@sandbox.register\ndef f(x: int) -> int:\n"
             "    return 1\n\n@sandbox.register\ndef f(y: int) -> int:\n    return 2\n");
  std::tie(code, out) = run_to_exit(twice);
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("command 'f' is registered twice"), std::string::npos) << out;

  auto varargs = dir_ / "varargs.py";
  write_file(varargs,
             "from abx import sandbox\n\n@sandbox.register\ndef g(*rest: int) -> int:\n"
             "    return 1\n");
  std::tie(code, out) = run_to_exit(varargs);
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("command 'g', parameter 'rest': *rest is not supported"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace abx::server
