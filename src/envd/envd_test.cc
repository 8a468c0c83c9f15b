// envd over real HTTP on loopback: an in-process Envd on port 0, every method, frames checked
// byte for byte, the error codes the SDK depends on, concurrency, large files, and an output
// flood through a stream with the daemon's memory measured (the abx-envd binary).
#include "abx/envd/envd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/sha.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "abx/envd/config.h"
#include "abx/http/client.h"
#include "abx/testing/child_process.h"
#include "abx/testing/temp_dir.h"
#include "connect.h"
#include "creds.h"
#include "files.h"
#include "host_info.h"
#include "process.h"
#include "proto_json.h"

namespace abx::envd {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
namespace asio = boost::asio;
namespace fs = std::filesystem;

struct Frame {
  std::uint8_t flags;
  std::string payload;
};

std::vector<Frame> frames_of(const std::string& body) {
  auto envs = parse_envelopes(body);
  EXPECT_TRUE(envs.ok()) << (envs.ok() ? "" : envs.error().message());
  std::vector<Frame> out;
  if (envs.ok()) {
    for (auto& e : *envs) out.push_back({e.flags, std::string(e.payload)});
  }
  return out;
}

// Reads a chunked streaming response incrementally (for WatchDir and the flood test).
class StreamReader {
 public:
  StreamReader(std::uint16_t port, const std::string& target, const std::string& message,
               const std::string& extra_headers = "")
      : sock_(io_) {
    sock_.connect({asio::ip::make_address("127.0.0.1"), port});
    std::string body = encode_envelope(0, message);
    std::string req =
        "POST " + target + " HTTP/1.1\r\nHost: x\r\n" + extra_headers +
        "Content-Type: application/connect+json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    asio::write(sock_, asio::buffer(req));
    parser_.body_limit(boost::none);
    bhttp::read_header(sock_, buf_, parser_);
  }
  int status() { return parser_.get().result_int(); }
  // Reads until `n` whole frames are available, returns them.
  std::vector<Frame> next_frames(std::size_t n) {
    std::vector<Frame> out;
    while (out.size() < n) {
      auto& body = parser_.get().body();
      while (body.size() >= 5) {
        std::uint32_t len = (std::uint8_t(body[1]) << 24) | (std::uint8_t(body[2]) << 16) |
                            (std::uint8_t(body[3]) << 8) | std::uint8_t(body[4]);
        if (body.size() < 5 + len) break;
        out.push_back({std::uint8_t(body[0]), body.substr(5, len)});
        body.erase(0, 5 + len);
        if (out.size() == n) return out;
      }
      boost::beast::error_code ec;
      bhttp::read_some(sock_, buf_, parser_, ec);
      if (ec) break;
    }
    return out;
  }
  asio::ip::tcp::socket& socket() { return sock_; }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket sock_;
  boost::beast::flat_buffer buf_;
  bhttp::response_parser<bhttp::string_body> parser_;
};

class EnvdTest : public ::testing::Test {
 protected:
  void TearDown() override {
    envd_.reset();
    if (proc_) {
      // No check of the exit status: an in-process Envd of an earlier test leaves its Reaper,
      // which reaps every child of this process (waitpid(-1)), abx-envd included.
      proc_->signal(SIGTERM);
      (void)proc_->wait(std::chrono::seconds(5));
      proc_.reset();  // SIGKILLs it if it is still there
    }
  }
  // The in-process Envd's port, or the abx-envd binary's (start_binary()).
  std::uint16_t port() const { return envd_ ? envd_->port() : binary_port_; }
  // Runs abx-envd (after `prefix`, e.g. setpriv or unshare) on a free port.
  void start_binary(std::vector<std::string> prefix, std::vector<std::string> args,
                    std::vector<std::string> env = {}) {
    std::vector<std::string> argv = std::move(prefix);
    argv.insert(argv.end(), {ABX_ENVD_BINARY, "--port", "0", "--host", "127.0.0.1"});
    argv.insert(argv.end(), args.begin(), args.end());
    proc_.emplace(argv, env);
    ASSERT_TRUE(proc_->started());
    auto p = proc_->wait_listening();
    ASSERT_TRUE(p) << "abx-envd did not start";
    binary_port_ = *p;
  }
  void start(std::optional<std::string> token = std::nullopt,
             std::uint64_t max_upload = 1ULL << 30) {
    EnvdOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.access_token = token;
    o.max_upload_bytes = max_upload;
    // Both users act as the test's own identity, with the temp dir as home.
    UserSpec me{static_cast<std::uint32_t>(::geteuid()), static_cast<std::uint32_t>(::getegid()),
                home_};
    o.users = {{"user", me}, {"root", me}};
    auto e = Envd::start(o);
    ASSERT_TRUE(e.ok()) << e.error().message();
    envd_ = std::move(*e);
  }
  http::Response send(http::Request req) {
    if (token_) req.set("X-Access-Token", *token_);
    auto r = http::fetch("127.0.0.1", port(), std::move(req));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    return r.ok() ? std::move(*r) : http::Response{};
  }
  http::Response rpc(const std::string& method, const std::string& body) {
    return send(http::make_request(bhttp::verb::post, "/" + method, body));
  }
  json::value rpc_ok(const std::string& method, const std::string& body) {
    auto r = rpc(method, body);
    EXPECT_EQ(r.result_int(), 200) << method << ": " << r.body();
    return r.result_int() == 200 ? json::parse(r.body()) : json::value();
  }
  http::Response stream(const std::string& method, const std::string& body,
                        std::map<std::string, std::string> headers = {}) {
    auto req = http::make_request(bhttp::verb::post, "/" + method, encode_envelope(0, body),
                                  "application/connect+json");
    for (auto& [k, v] : headers) req.set(k, v);
    return send(std::move(req));
  }
  static std::string code_of(const http::Response& r) {
    return std::string(json::parse(r.body()).at("code").as_string());
  }
  // The concatenated stdout of a finished Start stream (checks the frame order on the way).
  static std::string stdout_of(const std::vector<Frame>& fr, std::string kind = "stdout") {
    std::string out;
    for (const auto& f : fr) {
      if (f.flags) continue;
      auto v = json::parse(f.payload);
      auto& ev = v.at("event").as_object();
      if (auto* d = ev.if_contains("data"); d && d->as_object().contains(kind)) {
        out += *base64_decode(d->at(kind).as_string());
      }
    }
    return out;
  }

  abx::testing::TempDir tmp_{"abx-envd"};
  std::string home_ = tmp_.string();
  std::optional<std::string> token_;
  std::unique_ptr<Envd> envd_;
  std::optional<abx::testing::ChildProcess> proc_;
  std::uint16_t binary_port_ = 0;
};

TEST_F(EnvdTest, HealthIs204WithoutBody) {
  start("secret");  // and needs no token
  auto r = http::fetch("127.0.0.1", envd_->port(), http::make_request(bhttp::verb::get, "/health"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->result_int(), 204);
  EXPECT_TRUE(r->body().empty());
}

TEST_F(EnvdTest, StartStreamsFramesByteForByte) {
  start();
  auto r = stream("process.Process/Start",
                  R"({"process":{"cmd":"/bin/sh","args":["-c","echo hi"]},"stdin":false})");
  ASSERT_EQ(r.result_int(), 200);
  EXPECT_EQ(r[bhttp::field::content_type], "application/connect+json");
  EXPECT_TRUE(r.chunked());
  auto fr = frames_of(r.body());
  ASSERT_EQ(fr.size(), 4u) << r.body();
  auto pid = json::parse(fr[0].payload).at("event").at("start").at("pid").as_int64();
  EXPECT_GT(pid, 0);
  std::string start_json = R"({"event":{"start":{"pid":)" + std::to_string(pid) + "}}}";
  std::string expect = encode_envelope(0, start_json) + std::string("\x00\x00\x00\x00\x24", 5) +
                       R"({"event":{"data":{"stdout":"aGkK"}}})" +
                       std::string("\x00\x00\x00\x00\x3a", 5) +
                       R"({"event":{"end":{"exited":true,"status":"exit status 0"}}})" +
                       std::string("\x02\x00\x00\x00\x02{}", 7);
  EXPECT_EQ(r.body(), expect);
}

TEST_F(EnvdTest, NonZeroExitStderrEnvCwdAndRelativePaths) {
  start();
  fs::create_directories(home_ + "/sub");
  auto r = stream("process.Process/Start",
                  R"({"process":{"cmd":"sh","args":["-c","pwd; echo $FOO >&2; exit 3"],)"
                  R"("envs":{"FOO":"bar"},"cwd":"sub"}})");
  auto fr = frames_of(r.body());
  EXPECT_EQ(stdout_of(fr), home_ + "/sub\n");
  EXPECT_EQ(stdout_of(fr, "stderr"), "bar\n");
  auto end = json::parse(fr[fr.size() - 2].payload).at("event").at("end");
  EXPECT_EQ(end.at("exitCode").as_int64(), 3);
  EXPECT_EQ(end.at("error").as_string(), "exit status 3");
  EXPECT_EQ(fr.back().flags, kFlagEndStream);
}

TEST_F(EnvdTest, StartErrorsTravelInTheEndStreamFrame) {
  start();
  auto r = stream("process.Process/Start", R"({"process":{"cmd":"/nonexistent/binary"}})");
  EXPECT_EQ(r.result_int(), 200);
  auto fr = frames_of(r.body());
  ASSERT_EQ(fr.size(), 1u);
  EXPECT_EQ(fr[0].flags, kFlagEndStream);
  EXPECT_NE(fr[0].payload.find("\"code\""), std::string::npos);
  // Malformed envelope and malformed JSON inside a good envelope.
  auto req =
      http::make_request(bhttp::verb::post, "/process.Process/Start",
                         std::string("\x00\x00\x00\x00\x09{}", 7), "application/connect+json");
  auto bad = send(std::move(req));
  EXPECT_EQ(bad.result_int(), 200);
  EXPECT_NE(bad.body().find("invalid_argument"), std::string::npos);
  auto badjson = stream("process.Process/Start", R"({"process":)");
  EXPECT_NE(badjson.body().find("invalid_argument"), std::string::npos);
}

TEST_F(EnvdTest, StdinTagListSendInputCloseStdinAndConnect) {
  start();
  std::thread t([&] {
    auto r = stream("process.Process/Start", R"({"process":{"cmd":"cat"},"tag":"t1"})");
    EXPECT_EQ(stdout_of(frames_of(r.body())), "hello\n");
  });
  // Wait until the process is listed (bounded; not a timing assertion).
  json::value list;
  for (int i = 0; i < 500; ++i) {
    list = rpc_ok("process.Process/List", "{}");
    if (!list.at("processes").as_array().empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(list.at("processes").as_array().size(), 1u);
  auto& p = list.at("processes").at(0);
  EXPECT_EQ(p.at("tag").as_string(), "t1");
  EXPECT_EQ(p.at("config").at("cmd").as_string(), "cat");
  auto pid = p.at("pid").as_int64();
  // A Connect stream sees start first, then the output.
  StreamReader conn(envd_->port(), "/process.Process/Connect",
                    R"({"process":{"pid":)" + std::to_string(pid) + "}}");
  ASSERT_EQ(conn.status(), 200);
  auto first = conn.next_frames(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].payload, R"({"event":{"start":{"pid":)" + std::to_string(pid) + "}}}");
  rpc_ok("process.Process/SendInput",
         R"({"process":{"tag":"t1"},"input":{"stdin":")" + base64_encode("hello\n") + "\"}}");
  rpc_ok("process.Process/CloseStdin", R"({"process":{"tag":"t1"}})");
  t.join();
  auto rest = conn.next_frames(3);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0].payload,
            R"({"event":{"data":{"stdout":")" + base64_encode("hello\n") + "\"}}}");
  EXPECT_EQ(rest[2].flags, kFlagEndStream);
  // Gone now.
  auto nf = rpc("process.Process/SendSignal",
                R"({"process":{"pid":)" + std::to_string(pid) + R"(},"signal":"SIGNAL_SIGKILL"})");
  EXPECT_EQ(nf.result_int(), 404);
  EXPECT_EQ(code_of(nf), "not_found");
}

TEST_F(EnvdTest, SendSignalKillsAndTimeoutBoundsLifetime) {
  start();
  std::thread t([&] {
    auto r =
        stream("process.Process/Start", R"({"process":{"cmd":"sleep","args":["600"]},"tag":"k"})");
    auto fr = frames_of(r.body());
    ASSERT_GE(fr.size(), 3u);
    auto end = json::parse(fr[fr.size() - 2].payload).at("event").at("end");
    EXPECT_EQ(end.at("status").as_string(), "signal: killed");
    EXPECT_EQ(end.at("exitCode").as_int64(), -1);
  });
  for (int i = 0; i < 500; ++i) {
    auto r =
        rpc("process.Process/SendSignal", R"({"process":{"tag":"k"},"signal":"SIGNAL_SIGKILL"})");
    if (r.result_int() == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  t.join();
  // Connect-Timeout-Ms is the process lifetime.
  auto r = stream("process.Process/Start", R"({"process":{"cmd":"sleep","args":["600"]}})",
                  {{"Connect-Timeout-Ms", "300"}});
  auto fr = frames_of(r.body());
  ASSERT_GE(fr.size(), 3u);
  EXPECT_NE(fr[fr.size() - 2].payload.find("signal: killed"), std::string::npos);
  auto bad = rpc("process.Process/SendSignal", R"({"process":{"pid":1},"signal":"SIGNAL_NOPE"})");
  EXPECT_EQ(bad.result_int(), 400);
  EXPECT_EQ(code_of(bad), "invalid_argument");
}

TEST_F(EnvdTest, PtyProcessEchoesAndResizes) {
  start();
  std::thread t([&] {
    auto r =
        stream("process.Process/Start",
               R"({"process":{"cmd":"/bin/sh"},"pty":{"size":{"cols":100,"rows":30}},"tag":"p"})");
    std::string out = stdout_of(frames_of(r.body()), "pty");
    EXPECT_NE(out.find("42"), std::string::npos) << out;
    EXPECT_NE(out.find("30 100"), std::string::npos) << out;
  });
  for (int i = 0; i < 500; ++i) {
    if (!rpc_ok("process.Process/List", "{}").at("processes").as_array().empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  rpc_ok("process.Process/Update",
         R"({"process":{"tag":"p"},"pty":{"size":{"cols":100,"rows":30}}})");
  rpc_ok("process.Process/SendInput", R"({"process":{"tag":"p"},"input":{"pty":")" +
                                          base64_encode("echo $((6*7)); stty size; exit\n") +
                                          "\"}}");
  t.join();
}

TEST_F(EnvdTest, TwentyProcessesAtOnce) {
  start();
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 20; ++i) {
    ts.emplace_back([&, i] {
      auto r = stream("process.Process/Start", R"({"process":{"cmd":"sh","args":["-c","echo )" +
                                                   std::to_string(i) + R"("]},"stdin":false})");
      if (stdout_of(frames_of(r.body())) == std::to_string(i) + "\n") ++ok;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 20);
}

TEST_F(EnvdTest, FilesystemUnaryMethodsAndErrorCodes) {
  start();
  auto made = rpc_ok("filesystem.Filesystem/MakeDir", R"({"path":"a/b"})");
  EXPECT_EQ(made.at("entry").at("type").as_string(), "FILE_TYPE_DIRECTORY");
  EXPECT_EQ(made.at("entry").at("path").as_string(), home_ + "/a/b");
  auto again = rpc("filesystem.Filesystem/MakeDir", R"({"path":"a/b"})");
  EXPECT_EQ(again.result_int(), 409);
  EXPECT_EQ(code_of(again), "already_exists");
  std::ofstream(home_ + "/a/f.txt") << "x";
  auto st = rpc_ok("filesystem.Filesystem/Stat", R"({"path":")" + home_ + R"(/a/f.txt"})");
  auto& e = st.at("entry");
  EXPECT_EQ(e.at("name").as_string(), "f.txt");
  EXPECT_EQ(e.at("type").as_string(), "FILE_TYPE_FILE");
  EXPECT_EQ(e.at("size").as_string(), "1");  // int64 as a string
  EXPECT_EQ(e.at("permissions").as_string().size(), 10u);
  EXPECT_TRUE(e.at("modifiedTime").as_string().ends_with("Z"));
  auto l1 = rpc_ok("filesystem.Filesystem/ListDir", R"({"path":"a","depth":1})");
  EXPECT_EQ(l1.at("entries").as_array().size(), 2u);  // b, f.txt
  auto l2 = rpc_ok("filesystem.Filesystem/ListDir", R"({"path":"~","depth":"3"})");
  EXPECT_EQ(l2.at("entries").as_array().size(), 3u);  // a, a/b, a/f.txt
  auto missing = rpc("filesystem.Filesystem/Stat", R"({"path":"nope"})");
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_EQ(code_of(missing), "not_found");
  auto notdir = rpc("filesystem.Filesystem/ListDir", R"({"path":"a/f.txt"})");
  EXPECT_EQ(notdir.result_int(), 400);
  EXPECT_EQ(code_of(notdir), "invalid_argument");
  auto mv = rpc_ok("filesystem.Filesystem/Move", R"({"source":"a/f.txt","destination":"c/g.txt"})");
  EXPECT_EQ(mv.at("entry").at("path").as_string(), home_ + "/c/g.txt");
  EXPECT_EQ(code_of(rpc("filesystem.Filesystem/Move", R"({"source":"zz","destination":"y"})")),
            "not_found");
  rpc_ok("filesystem.Filesystem/Remove", R"({"path":"a"})");
  EXPECT_FALSE(fs::exists(home_ + "/a"));
  // Symlink loop, NUL, malformed JSON, unknown method.
  fs::create_symlink(home_ + "/loop", home_ + "/loop");
  auto loop = rpc("filesystem.Filesystem/ListDir", R"({"path":"loop"})");
  EXPECT_EQ(code_of(loop), "invalid_argument");
  EXPECT_NE(loop.body().find("symbolic link loop"), std::string::npos);
  auto lst = rpc_ok("filesystem.Filesystem/Stat", R"({"path":"loop"})");
  EXPECT_EQ(lst.at("entry").at("type").as_string(), "FILE_TYPE_SYMLINK");
  EXPECT_EQ(code_of(rpc("filesystem.Filesystem/Stat", R"({"path":"a\u0000b"})")),
            "invalid_argument");
  auto bad = rpc("filesystem.Filesystem/Stat", R"({"path":)");
  EXPECT_EQ(bad.result_int(), 400);
  EXPECT_EQ(code_of(bad), "invalid_argument");
  auto unk = rpc("filesystem.Filesystem/Nope", "{}");
  EXPECT_EQ(unk.result_int(), 404);
  EXPECT_EQ(code_of(unk), "unimplemented");
}

TEST_F(EnvdTest, WatchDirStreamsEvents) {
  start();
  StreamReader w(envd_->port(), "/filesystem.Filesystem/WatchDir", R"({"path":")" + home_ + "\"}");
  ASSERT_EQ(w.status(), 200);
  auto first = w.next_frames(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].payload, R"({"start":{}})");
  std::ofstream(home_ + "/new.txt") << "x";
  auto ev = w.next_frames(1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].payload, R"({"filesystem":{"name":"new.txt","type":"EVENT_TYPE_CREATE"}})");
  auto missing = stream("filesystem.Filesystem/WatchDir", R"({"path":"nope"})");
  EXPECT_NE(missing.body().find("not_found"), std::string::npos);
}

// The inotify instances this process holds.
int inotify_instances() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(e.path(), ec) == "anon_inode:inotify" ? 1 : 0;
  }
  return n;
}

// Waits (up to 5 s) until this process holds `n` inotify instances; whether it came to that.
bool inotify_instances_become(int n) {
  for (int i = 0; i < 500 && inotify_instances() != n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return inotify_instances() == n;
}

// A watch that ended leaves no inotify instance in envd: not a WatchDir whose client went away
// (the SDK's stop()), nor a removed CreateWatcher. (A WatchDir's instance stayed until the next
// WatchDir, and every checkpoint of the sandbox had to save its watch: issue 41.)
TEST_F(EnvdTest, AnEndedWatchLeavesNoInotifyInstance) {
  start();
  const int before = inotify_instances();
  {
    // A client gone is seen when a write fails: here the keepalive's, each second.
    StreamReader w(envd_->port(), "/filesystem.Filesystem/WatchDir", R"({"path":")" + home_ + "\"}",
                   "Keepalive-Ping-Interval: 1\r\n");
    ASSERT_EQ(w.status(), 200);
    ASSERT_EQ(w.next_frames(1).size(), 1u);  // start
    EXPECT_EQ(inotify_instances(), before + 1);
  }  // the client goes away
  EXPECT_TRUE(inotify_instances_become(before)) << inotify_instances() << " instances";
  auto c = rpc_ok("filesystem.Filesystem/CreateWatcher", R"({"path":"~"})");
  EXPECT_EQ(inotify_instances(), before + 1);
  rpc_ok("filesystem.Filesystem/RemoveWatcher",
         R"({"watcherId":")" + std::string(c.at("watcherId").as_string()) + "\"}");
  EXPECT_TRUE(inotify_instances_become(before)) << inotify_instances() << " instances";
}

std::string multipart(const std::string& filename, const std::string& content);

// Uploads are staged in temporary files renamed onto the target. Found with the E2B JS SDK:
// a watcher saw only those temporary names and a CREATE of the target, never the WRITE that
// callers (the SDK's own watch tests among them) wait for after files.write().
TEST_F(EnvdTest, WatchDirSeesUploadsAsTheTargetNotTheTempFiles) {
  start();
  StreamReader w(envd_->port(), "/filesystem.Filesystem/WatchDir", R"({"path":")" + home_ + "\"}");
  ASSERT_EQ(w.status(), 200);
  ASSERT_EQ(w.next_frames(1).size(), 1u);  // start
  auto up = send(http::make_request(bhttp::verb::post, "/files?path=up.txt", multipart("x", "hi"),
                                    "multipart/form-data; boundary=XyZ"));
  ASSERT_EQ(up.result_int(), 200) << up.body();
  up = send(http::make_request(bhttp::verb::post, "/files?path=up.txt", "again",
                               "application/octet-stream"));
  ASSERT_EQ(up.result_int(), 200) << up.body();
  std::ofstream(home_ + "/marker") << "x";  // ends the sequence under test
  std::vector<std::string> seen;
  while (seen.empty() || seen.back().find("marker") == std::string::npos) {
    auto f = w.next_frames(1);
    ASSERT_EQ(f.size(), 1u);
    seen.push_back(f[0].payload);
  }
  seen.pop_back();
  const std::string create = R"({"filesystem":{"name":"up.txt","type":"EVENT_TYPE_CREATE"}})";
  const std::string write = R"({"filesystem":{"name":"up.txt","type":"EVENT_TYPE_WRITE"}})";
  EXPECT_EQ(seen, (std::vector<std::string>{create, write, create, write}));
}

TEST_F(EnvdTest, PollingWatcherTrio) {
  start();
  auto c = rpc_ok("filesystem.Filesystem/CreateWatcher", R"({"path":"~"})");
  std::string id(c.at("watcherId").as_string());
  fs::create_directory(home_ + "/d");
  json::array events;
  for (int i = 0; i < 500 && events.empty(); ++i) {
    events = rpc_ok("filesystem.Filesystem/GetWatcherEvents", R"({"watcherId":")" + id + "\"}")
                 .at("events")
                 .as_array();
    if (events.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].at("name").as_string(), "d");
  EXPECT_EQ(events[0].at("type").as_string(), "EVENT_TYPE_CREATE");
  rpc_ok("filesystem.Filesystem/RemoveWatcher", R"({"watcher_id":")" + id + "\"}");
  EXPECT_EQ(
      code_of(rpc("filesystem.Filesystem/GetWatcherEvents", R"({"watcherId":")" + id + "\"}")),
      "not_found");
}

std::string multipart(const std::string& filename, const std::string& content) {
  return "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + filename +
         "\"\r\nContent-Type: application/octet-stream\r\n\r\n" + content + "\r\n--XyZ--\r\n";
}

TEST_F(EnvdTest, FilesUploadDownloadAndErrors) {
  start();
  auto up = send(http::make_request(bhttp::verb::post, "/files?path=x%2Fy%2Fa.txt",
                                    multipart("ignored", "hello\r\n--XyQ not a boundary"),
                                    "multipart/form-data; boundary=XyZ"));
  ASSERT_EQ(up.result_int(), 200) << up.body();
  EXPECT_EQ(up.body(), R"([{"path":")" + home_ + R"(/x/y/a.txt","name":"a.txt","type":"file"}])");
  auto down = send(http::make_request(bhttp::verb::get, "/files?path=x/y/a.txt"));
  EXPECT_EQ(down.result_int(), 200);
  EXPECT_EQ(down.body(), "hello\r\n--XyQ not a boundary");
  // Filename from the part when no query path; octet-stream replaces atomically.
  up = send(http::make_request(bhttp::verb::post, "/files", multipart(home_ + "/b.txt", "B"),
                               "multipart/form-data; boundary=XyZ"));
  EXPECT_EQ(up.result_int(), 200) << up.body();
  up = send(http::make_request(bhttp::verb::post, "/files?path=b.txt", "new",
                               "application/octet-stream"));
  EXPECT_EQ(up.result_int(), 200) << up.body();
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=b.txt")).body(), "new");
  // Empty file.
  up = send(http::make_request(bhttp::verb::post, "/files?path=e", "", "application/octet-stream"));
  EXPECT_EQ(up.result_int(), 200);
  auto empty = send(http::make_request(bhttp::verb::get, "/files?path=e"));
  EXPECT_EQ(empty.result_int(), 200);
  EXPECT_EQ(empty[bhttp::field::content_length], "0");
  // Errors: missing (404 {"code":404}), a directory, a FIFO (no hang), NUL, bad content type.
  auto nf = send(http::make_request(bhttp::verb::get, "/files?path=nope"));
  EXPECT_EQ(nf.result_int(), 404);
  EXPECT_EQ(json::parse(nf.body()).at("code").as_int64(), 404);
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=x")).result_int(), 400);
  ASSERT_EQ(::mkfifo((home_ + "/fifo").c_str(), 0600), 0);
  auto fifo = send(http::make_request(bhttp::verb::get, "/files?path=fifo"));
  EXPECT_EQ(fifo.result_int(), 400);
  EXPECT_NE(fifo.body().find("not a regular file"), std::string::npos);
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=a%00b")).result_int(), 400);
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=/dev/zero")).result_int(), 400);
  EXPECT_EQ(
      send(http::make_request(bhttp::verb::post, "/files?path=z", "x", "text/plain")).result_int(),
      400);
  // No temp files left behind.
  for (const auto& de : fs::recursive_directory_iterator(home_)) {
    EXPECT_EQ(de.path().filename().string().rfind(".abx-", 0), std::string::npos) << de.path();
  }
}

TEST_F(EnvdTest, UploadOverQuotaIs413AndOldContentStays) {
  start(std::nullopt, 1024);
  std::ofstream(home_ + "/keep") << "old";
  auto r = send(http::make_request(bhttp::verb::post, "/files?path=keep", std::string(512, 'n'),
                                   "application/octet-stream"));
  EXPECT_EQ(r.result_int(), 200);
  auto c = http::Connection::open("127.0.0.1", envd_->port());
  auto out = (*c)->raw_exchange(
      "POST /files?path=keep HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
      "Content-Length: 4096\r\n\r\n");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->rfind("HTTP/1.1 413", 0), 0u) << *out;
  EXPECT_NE(out->find("\"code\":413"), std::string::npos);
  std::ifstream in(home_ + "/keep");
  std::string s((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(s, std::string(512, 'n'));
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& de : fs::directory_iterator(dir)) out.insert(de.path().string());
  return out;
}

// An octet-stream upload of 2 * `half` bytes of which only the first half is sent until
// finish(): its body sits in a spool file meanwhile.
class HeldUpload {
 public:
  HeldUpload(std::uint16_t port, const std::string& path, std::size_t half)
      : sock_(io_), half_(half, 's') {
    sock_.connect({asio::ip::make_address("127.0.0.1"), port});
    asio::write(sock_, asio::buffer("POST /files?path=" + path + " HTTP/1.1\r\nHost: x\r\n" +
                                    "Content-Type: application/octet-stream\r\nContent-Length: " +
                                    std::to_string(2 * half) + "\r\n\r\n" + half_));
  }
  int finish() {
    asio::write(sock_, asio::buffer(half_));
    boost::beast::flat_buffer buf;
    bhttp::response<bhttp::string_body> res;
    bhttp::read(sock_, buf, res);
    return res.result_int();
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket sock_;
  std::string half_;
};

// Issue 9 item 8: a listing made right after an upload returned the body's spool file
// (`.abx-body-XXXXXX`), spooled next to the target and unlinked only after the response had
// gone out. Bodies are now staged outside the user's directories: listings made while uploads
// are in flight (one of them held half-sent) and after they finish show only the user's files,
// and nothing is left behind.
TEST_F(EnvdTest, ListingsDuringAndAfterConcurrentUploadsShowOnlyTheUsersFiles) {
  start();
  const std::string dir = home_ + "/up";
  fs::create_directory(dir);
  std::set<std::string> expected{"slow"};
  for (int i = 0; i < 8; ++i) {
    expected.insert("f" + std::to_string(i));  // octet-stream, half of them replacing a file
    expected.insert("m" + std::to_string(i));  // multipart, by filename (no path parameter)
    if (i % 2 == 0) std::ofstream(dir + "/f" + std::to_string(i)) << "old";
  }
  std::mutex mu;
  std::vector<std::string> unexpected;
  auto check_listing = [&] {
    std::vector<std::string> names;
    auto r = rpc("filesystem.Filesystem/ListDir", R"({"path":")" + dir + "\"}");
    if (r.result_int() == 200) {
      json::value listing = json::parse(r.body());
      for (const auto& e : listing.at("entries").as_array()) {
        names.emplace_back(e.at("name").as_string());
      }
    }
    for (const auto& de : fs::directory_iterator(dir)) names.push_back(de.path().filename());
    std::lock_guard lock(mu);
    for (auto& n : names) {
      if (!expected.count(n)) unexpected.push_back(n);
    }
    return names;
  };

  // One upload held half-sent, so its body sits in a spool file during every listing below.
  User me{"user", ::geteuid(), ::getegid(), home_};
  auto stage = staging_dir_for(dir, fs::temp_directory_path().string(), me);
  ASSERT_TRUE(stage.ok()) << stage.error().message();
  auto before = files_in(*stage);
  HeldUpload slow(envd_->port(), "up/slow", 64 * 1024);
  std::set<std::string> spooled;
  for (int i = 0; i < 500 && spooled.empty(); ++i) {
    for (const auto& f : files_in(*stage)) {
      if (!before.count(f)) spooled.insert(f);
    }
    if (spooled.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(spooled.empty()) << "the half-sent body was not spooled in " << *stage;
  check_listing();

  std::atomic<bool> done{false};
  std::thread lister([&] {
    while (!done.load()) check_listing();
  });
  std::vector<std::thread> uploaders;
  for (int i = 0; i < 8; ++i) {
    uploaders.emplace_back([&, i] {
      std::string n = std::to_string(i);
      for (int round = 0; round < 5; ++round) {
        auto a = send(http::make_request(bhttp::verb::post, "/files?path=up/f" + n,
                                         std::string(4096 * (i + 1), 'a' + i),
                                         "application/octet-stream"));
        EXPECT_EQ(a.result_int(), 200) << a.body();
        auto b = send(http::make_request(bhttp::verb::post, "/files",
                                         multipart("up/m" + n, "multi " + n),
                                         "multipart/form-data; boundary=XyZ"));
        EXPECT_EQ(b.result_int(), 200) << b.body();
      }
    });
  }
  for (auto& t : uploaders) t.join();
  EXPECT_EQ(slow.finish(), 200);  // the held upload completes last
  done = true;
  lister.join();

  EXPECT_EQ(unexpected, std::vector<std::string>{});
  auto after = check_listing();
  EXPECT_EQ(std::set<std::string>(after.begin(), after.end()), expected);
  EXPECT_EQ(fs::file_size(dir + "/slow"), 2u * 64 * 1024);
  EXPECT_EQ(fs::file_size(dir + "/f7"), 4096u * 8);
  std::ifstream m3(dir + "/m3");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(m3)), {}), "multi 3");
  for (const auto& de : fs::recursive_directory_iterator(home_)) {
    EXPECT_EQ(de.path().filename().string().rfind(".abx-", 0), std::string::npos) << de.path();
  }
  // The held body's spool file is gone too (it was renamed onto its target).
  for (const auto& f : spooled) EXPECT_FALSE(fs::exists(f)) << f;
}

TEST_F(EnvdTest, LargeFileStreamsBothWays) {
  start();
  // 64 MiB streamed up (chunked, spooled to disk) and down (sized, streamed from disk).
  const std::size_t kSize = 64u << 20;
  std::string data(kSize, '\0');
  for (std::size_t i = 0; i < kSize; i += 4096) data[i] = static_cast<char>(i / 4096);
  auto up = send(http::make_request(bhttp::verb::post, "/files?path=big.bin", data,
                                    "application/octet-stream"));
  ASSERT_EQ(up.result_int(), 200) << up.body();
  EXPECT_EQ(fs::file_size(home_ + "/big.bin"), kSize);
  auto down = send(http::make_request(bhttp::verb::get, "/files?path=big.bin"));
  ASSERT_EQ(down.result_int(), 200);
  EXPECT_EQ(down.body().size(), kSize);
  EXPECT_TRUE(down.body() == data);
}

std::string gzip_of(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string gunzip_of(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  char buf[65536];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

TEST(FilesHeaders, DownloadCodingFollowsAcceptEncoding) {
  EXPECT_EQ(download_coding(""), Coding::kIdentity);
  EXPECT_EQ(download_coding("gzip"), Coding::kGzip);
  EXPECT_EQ(download_coding("gzip, deflate, br, zstd"), Coding::kGzip);  // what Node's fetch sends
  EXPECT_EQ(download_coding("X-GZIP"), Coding::kGzip);
  EXPECT_EQ(download_coding("br"), Coding::kIdentity);
  EXPECT_EQ(download_coding("gzip;q=0"), Coding::kIdentity);
  EXPECT_EQ(download_coding("gzip;q=0.5, identity"), Coding::kIdentity);
  EXPECT_EQ(download_coding("*"), Coding::kGzip);
  EXPECT_EQ(download_coding("gzip;q=bad"), Coding::kIdentity);  // the item is ignored
  EXPECT_EQ(download_coding("identity;q=0, gzip"), Coding::kGzip);
  EXPECT_EQ(download_coding("identity;q=0"), std::nullopt);
  EXPECT_EQ(download_coding("*;q=0"), std::nullopt);
  EXPECT_EQ(download_coding("br, identity;q=0"), std::nullopt);
}

TEST(FilesHeaders, UploadMetadataFromHeaders) {
  using H = std::vector<std::pair<std::string_view, std::string_view>>;
  auto md = upload_metadata(
      H{{"X-Metadata-Author", "Alice B."}, {"content-type", "x"}, {"x-metadata-k.2", ""}});
  ASSERT_TRUE(md.ok()) << md.error().message();
  EXPECT_EQ(*md, (FileMetadata{{"author", "Alice B."}, {"k.2", ""}}));
  EXPECT_TRUE(upload_metadata(H{}).ok());
  EXPECT_FALSE(upload_metadata(H{{"X-Metadata-", "v"}}).ok());
  EXPECT_FALSE(upload_metadata(H{{"X-Metadata-a b", "v"}}).ok());
  EXPECT_FALSE(upload_metadata(H{{"X-Metadata-a", "tab\there"}}).ok());
  EXPECT_FALSE(upload_metadata(H{{"X-Metadata-a", "1"}, {"x-metadata-A", "2"}}).ok());
  std::string long_key(kMaxMetadataKeyBytes + 1, 'k');
  std::string name = "X-Metadata-" + long_key;
  EXPECT_FALSE(upload_metadata(H{{name, "v"}}).ok());
  std::string long_value(kMaxMetadataValueBytes + 1, 'v');
  EXPECT_FALSE(upload_metadata(H{{"X-Metadata-a", long_value}}).ok());
  std::vector<std::string> names;
  for (std::size_t i = 0; i <= kMaxMetadataEntries; ++i)
    names.push_back("X-Metadata-k" + std::to_string(i));
  H many;
  for (const auto& n : names) many.emplace_back(n, "v");
  EXPECT_FALSE(upload_metadata(many).ok());
  many.pop_back();
  EXPECT_TRUE(upload_metadata(many).ok());
}

// envd 0.5.7: octet-stream uploads with Content-Encoding: gzip, downloads with Accept-Encoding:
// gzip, 406 when neither gzip nor identity is acceptable.
TEST_F(EnvdTest, GzipUploadsAndDownloads) {
  start(std::nullopt, 1 << 20);
  std::string content;
  for (int i = 0; i < 20000; ++i) content += "line " + std::to_string(i) + "\n";  // ~150 KB
  auto req = http::make_request(bhttp::verb::post, "/files?path=g.txt", gzip_of(content),
                                "application/octet-stream");
  req.set(bhttp::field::content_encoding, "gzip");
  auto up = send(std::move(req));
  ASSERT_EQ(up.result_int(), 200) << up.body();
  EXPECT_EQ(up.body(), R"([{"path":")" + home_ + R"(/g.txt","name":"g.txt","type":"file"}])");
  std::ifstream f(home_ + "/g.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), content);
  // Two gzip members, concatenated, decode to both halves.
  req = http::make_request(bhttp::verb::post, "/files?path=two.txt",
                           gzip_of("first ") + gzip_of("second"), "application/octet-stream");
  req.set(bhttp::field::content_encoding, "gzip");
  ASSERT_EQ(send(std::move(req)).result_int(), 200);
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=two.txt")).body(),
            "first second");
  // Download, compressed on the fly (chunked, no Content-Length).
  auto get = http::make_request(bhttp::verb::get, "/files?path=g.txt");
  get.set(bhttp::field::accept_encoding, "gzip, deflate, br");
  auto down = send(std::move(get));
  ASSERT_EQ(down.result_int(), 200);
  EXPECT_EQ(down[bhttp::field::content_encoding], "gzip");
  EXPECT_EQ(down[bhttp::field::vary], "Accept-Encoding");
  EXPECT_LT(down.body().size(), content.size());
  EXPECT_EQ(gunzip_of(down.body()), content);
  // An empty file is still a valid gzip stream.
  ASSERT_EQ(send(http::make_request(bhttp::verb::post, "/files?path=empty", "",
                                    "application/octet-stream"))
                .result_int(),
            200);
  get = http::make_request(bhttp::verb::get, "/files?path=empty");
  get.set(bhttp::field::accept_encoding, "gzip");
  EXPECT_EQ(gunzip_of(send(std::move(get)).body()), "");
  // Unacceptable: 406 in the REST error shape; an unknown coding alone falls back to identity.
  get = http::make_request(bhttp::verb::get, "/files?path=g.txt");
  get.set(bhttp::field::accept_encoding, "br, identity;q=0");
  auto na = send(std::move(get));
  EXPECT_EQ(na.result_int(), 406);
  EXPECT_EQ(json::parse(na.body()).at("code").as_int64(), 406);
  get = http::make_request(bhttp::verb::get, "/files?path=two.txt");
  get.set(bhttp::field::accept_encoding, "br");
  auto plain = send(std::move(get));
  EXPECT_EQ(plain.result_int(), 200);
  EXPECT_EQ(plain.body(), "first second");
  EXPECT_EQ(plain[bhttp::field::content_encoding], "");
  // Not gzip, truncated gzip, gzip over the decoded limit (1 MiB here), an unknown coding,
  // gzip on multipart: client errors, and the old content stays.
  auto bad = [&](std::string body, std::string coding,
                 std::string type = "application/octet-stream") {
    auto r = http::make_request(bhttp::verb::post, "/files?path=two.txt", std::move(body), type);
    r.set(bhttp::field::content_encoding, coding);
    return send(std::move(r)).result_int();
  };
  EXPECT_EQ(bad("plain text", "gzip"), 400);
  std::string gz = gzip_of(content);
  EXPECT_EQ(bad(gz.substr(0, gz.size() / 2), "gzip"), 400);
  EXPECT_EQ(bad(gzip_of(std::string(2 << 20, '\0')), "gzip"), 413);
  EXPECT_EQ(bad("x", "br"), 400);
  EXPECT_EQ(bad(multipart("x", "y"), "gzip", "multipart/form-data; boundary=XyZ"), 400);
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=two.txt")).body(),
            "first second");
  for (const auto& de : fs::recursive_directory_iterator(home_)) {
    EXPECT_EQ(de.path().filename().string().rfind(".abx-upload", 0), std::string::npos)
        << de.path();
  }
}

// envd 0.6.2: X-Metadata-* headers of an upload are the file's user.e2b.* xattrs (E2B's
// namespace), returned by the upload, Stat and ListDir as `metadata`, prefix stripped.
TEST_F(EnvdTest, UploadMetadataIsUserXattrsShownByStatAndList) {
  start();
  auto req = http::make_request(bhttp::verb::post, "/files?path=m.txt", "data",
                                "application/octet-stream");
  req.set("X-Metadata-Author", "alice");
  req.set("x-metadata-purpose", "a test, with spaces");
  auto up = send(std::move(req));
  ASSERT_EQ(up.result_int(), 200) << up.body();
  auto entry = json::parse(up.body()).as_array().at(0).as_object();
  EXPECT_EQ(entry.at("metadata"),
            (json::object{{"author", "alice"}, {"purpose", "a test, with spaces"}}));
  char value[64] = {};
  ssize_t n = ::getxattr((home_ + "/m.txt").c_str(), "user.e2b.author", value, sizeof value);
  EXPECT_EQ(std::string(value, n > 0 ? static_cast<std::size_t>(n) : 0), "alice");
  EXPECT_LT(::getxattr((home_ + "/m.txt").c_str(), "user.author", value, sizeof value), 0);
  auto st = rpc_ok("filesystem.Filesystem/Stat", R"({"path":"m.txt"})");
  EXPECT_EQ(st.at("entry").at("metadata"),
            (json::object{{"author", "alice"}, {"purpose", "a test, with spaces"}}));
  // As E2B's suite does: an attribute set inside the sandbox under user.e2b. shows, stripped;
  // other user.* attributes (other tools') do not.
  std::string set_in_sandbox = home_ + "/x.txt";
  { std::ofstream(set_in_sandbox) << "x"; }
  ASSERT_EQ(::setxattr(set_in_sandbox.c_str(), "user.e2b.author", "mish", 4, 0), 0);
  ASSERT_EQ(::setxattr(set_in_sandbox.c_str(), "user.other", "tool", 4, 0), 0);
  st = rpc_ok("filesystem.Filesystem/Stat", R"({"path":"x.txt"})");
  EXPECT_EQ(st.at("entry").at("metadata"), (json::object{{"author", "mish"}}));
  ASSERT_EQ(::removexattr(set_in_sandbox.c_str(), "user.e2b.author"), 0);
  st = rpc_ok("filesystem.Filesystem/Stat", R"({"path":"x.txt"})");
  EXPECT_FALSE(st.at("entry").as_object().contains("metadata"));
  // Multipart (the SDK's default) and gzip uploads carry it too; a file without any has none.
  req = http::make_request(bhttp::verb::post, "/files?path=p.txt", multipart("x", "y"),
                           "multipart/form-data; boundary=XyZ");
  req.set("X-Metadata-k", "v");
  ASSERT_EQ(send(std::move(req)).result_int(), 200);
  req = http::make_request(bhttp::verb::post, "/files?path=z.txt", gzip_of("zz"),
                           "application/octet-stream");
  req.set(bhttp::field::content_encoding, "gzip");
  req.set("X-Metadata-k", "gz");
  ASSERT_EQ(send(std::move(req)).result_int(), 200);
  ASSERT_EQ(send(http::make_request(bhttp::verb::post, "/files?path=plain.txt", "p",
                                    "application/octet-stream"))
                .result_int(),
            200);
  auto list = rpc_ok("filesystem.Filesystem/ListDir", R"({"path":"~"})");
  std::map<std::string, json::value> by_name;
  for (auto& e : list.at("entries").as_array()) {
    by_name[std::string(e.at("name").as_string())] = e;
  }
  EXPECT_EQ(by_name["p.txt"].at("metadata"), (json::object{{"k", "v"}}));
  EXPECT_EQ(by_name["z.txt"].at("metadata"), (json::object{{"k", "gz"}}));
  EXPECT_FALSE(by_name["plain.txt"].as_object().contains("metadata"));
  // Overwriting replaces the file, metadata included.
  ASSERT_EQ(send(http::make_request(bhttp::verb::post, "/files?path=m.txt", "new",
                                    "application/octet-stream"))
                .result_int(),
            200);
  st = rpc_ok("filesystem.Filesystem/Stat", R"({"path":"m.txt"})");
  EXPECT_FALSE(st.at("entry").as_object().contains("metadata"));
  // Over the bounds: 400 before the body is stored; the file keeps its content.
  req = http::make_request(bhttp::verb::post, "/files?path=m.txt", "x", "application/octet-stream");
  req.set("X-Metadata-big", std::string(kMaxMetadataValueBytes + 1, 'v'));
  EXPECT_EQ(send(std::move(req)).result_int(), 400);
  req = http::make_request(bhttp::verb::post, "/files?path=m.txt", "x", "application/octet-stream");
  req.set("X-Metadata-a", "1");
  req.insert("x-metadata-A", "2");
  EXPECT_EQ(send(std::move(req)).result_int(), 400);
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=m.txt")).body(), "new");
}

// envd 0.6.3 / 0.6.4: WatchDir events carry the entry when includeEntry is set (not for a
// removal, whose path is gone); allowNetworkMounts is accepted.
TEST_F(EnvdTest, WatchDirIncludeEntryAndAllowNetworkMounts) {
  start();
  StreamReader w(envd_->port(), "/filesystem.Filesystem/WatchDir",
                 R"({"path":")" + home_ + R"(","includeEntry":true,"allowNetworkMounts":true})");
  ASSERT_EQ(w.status(), 200);
  ASSERT_EQ(w.next_frames(1).size(), 1u);  // start
  std::ofstream(home_ + "/e.txt") << "x";
  auto ev = w.next_frames(1);
  ASSERT_EQ(ev.size(), 1u);
  auto fsev = json::parse(ev[0].payload).at("filesystem").as_object();
  EXPECT_EQ(fsev.at("name").as_string(), "e.txt");
  EXPECT_EQ(fsev.at("type").as_string(), "EVENT_TYPE_CREATE");
  ASSERT_TRUE(fsev.contains("entry")) << ev[0].payload;
  EXPECT_EQ(fsev.at("entry").at("name").as_string(), "e.txt");
  EXPECT_EQ(fsev.at("entry").at("path").as_string(), home_ + "/e.txt");
  EXPECT_EQ(fsev.at("entry").at("type").as_string(), "FILE_TYPE_FILE");
  auto wrong = stream("filesystem.Filesystem/WatchDir",
                      R"({"path":")" + home_ + R"(","allowNetworkMounts":"yes"})");
  EXPECT_NE(wrong.body().find("invalid_argument"), std::string::npos) << wrong.body();
}

TEST_F(EnvdTest, TokenIsCheckedExceptOnHealth) {
  start("s3cret");
  auto r = rpc("process.Process/List", "{}");
  EXPECT_EQ(r.result_int(), 401);
  EXPECT_EQ(code_of(r), "unauthenticated");
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/files?path=x")).result_int(), 401);
  token_ = "wrong";
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 401);
  token_ = "s3cret";
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 200);
  // Signed download URL: v1_ + base64(sha256("path:read:user:token")) without padding.
  std::ofstream(home_ + "/s.txt") << "signed";
  token_.reset();
  auto req = http::make_request(bhttp::verb::get, "/files?path=s.txt&signature=v1_bad");
  EXPECT_EQ(send(std::move(req)).result_int(), 401);
  auto sign = [](const std::string& material) {
    unsigned char d[SHA256_DIGEST_LENGTH];
    ::SHA256(reinterpret_cast<const unsigned char*>(material.data()), material.size(), d);
    std::string s = "v1_" + base64_encode(std::string_view(reinterpret_cast<char*>(d), sizeof d));
    while (s.back() == '=') s.pop_back();
    std::string q;  // percent-encoded for the query, as the SDK's URL does ('+' is a space)
    for (char c : s) q += c == '+' ? "%2B" : c == '/' ? "%2F" : std::string(1, c);
    return q;
  };
  // Valid: downloads and uploads (the operation is part of what is signed), with an expiration
  // in the future; refused once expired or for the other operation.
  r = send(http::make_request(bhttp::verb::get,
                              "/files?path=s.txt&signature=" + sign("s.txt:read::s3cret")));
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), "signed");
  std::string later = std::to_string(std::time(nullptr) + 600);
  r = send(
      http::make_request(bhttp::verb::post,
                         "/files?path=s.txt&signature=" + sign("s.txt:write::s3cret:" + later) +
                             "&signature_expiration=" + later,
                         "up", "application/octet-stream"));
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(send(http::make_request(bhttp::verb::get,
                                    "/files?path=s.txt&signature=" + sign("s.txt:write::s3cret")))
                .result_int(),
            401);
  std::string past = std::to_string(std::time(nullptr) - 10);
  // E2B's envd's words, in its order: the signature is checked before its expiration.
  auto refused = [&](const std::string& target, const std::string& message) {
    auto res = send(http::make_request(bhttp::verb::get, target));
    EXPECT_EQ(res.result_int(), 401) << target;
    EXPECT_EQ(json::parse(res.body()).at("message").as_string(), message) << target;
  };
  refused("/files?path=s.txt&signature=" + sign("s.txt:read::s3cret:" + past) +
              "&signature_expiration=" + past,
          "signature is already expired");
  refused("/files?path=s.txt&signature=v1_bad&signature_expiration=" + past, "invalid signature");
  refused("/files?path=s.txt", "missing signature query parameter");
  // As another user: the username is signed too.
  refused("/files?path=s.txt&username=root&signature=" + sign("s.txt:read::s3cret"),
          "invalid signature");
  token_ = "wrong";
  refused("/files?path=s.txt&signature=" + sign("s.txt:read::s3cret"),
          "access token present in header but does not match");
  token_.reset();
  EXPECT_EQ(send(http::make_request(bhttp::verb::get,
                                    "/files?path=s.txt&signature=v1_x&signature_expiration=soon"))
                .result_int(),
            400);
}

// GET /envs and GET /metrics, as E2B's envd answers them: token required, GET only, JSON with
// Cache-Control: no-store; errors in the REST shape {"code":<status>,"message":…}.
TEST_F(EnvdTest, EnvsIsTheDefaultEnvironmentOfStartedProcesses) {
  ASSERT_EQ(::setenv("ABX_ENVS_TEST", "a b=c", 1), 0);
  start("s3cret");
  auto r = send(http::make_request(bhttp::verb::get, "/envs"));
  EXPECT_EQ(r.result_int(), 401);
  EXPECT_EQ(json::parse(r.body()).at("code").as_int64(), 401);
  token_ = "s3cret";
  r = send(http::make_request(bhttp::verb::get, "/envs"));
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r[bhttp::field::cache_control], "no-store");
  auto envs = json::parse(r.body()).as_object();
  EXPECT_EQ(envs.at("ABX_ENVS_TEST").as_string(), "a b=c");
  for (const auto& kv : envs) EXPECT_TRUE(kv.value().is_string()) << kv.key();
  // A process started without envs of its own sees the same variable.
  auto started =
      stream("process.Process/Start",
             R"({"process":{"cmd":"/bin/sh","args":["-c","printf %s \"$ABX_ENVS_TEST\""]}})");
  EXPECT_EQ(stdout_of(frames_of(started.body())), "a b=c");
  r = send(http::make_request(bhttp::verb::post, "/envs", "{}", "application/json"));
  EXPECT_EQ(r.result_int(), 405);
  EXPECT_EQ(json::parse(r.body()).at("code").as_int64(), 405);
  ::unsetenv("ABX_ENVS_TEST");
}

TEST_F(EnvdTest, MetricsHasE2BsFields) {
  start("s3cret");
  EXPECT_EQ(send(http::make_request(bhttp::verb::get, "/metrics")).result_int(), 401);
  token_ = "s3cret";
  for (int i = 0; i < 2; ++i) {  // the second call measures CPU since the first
    auto r = send(http::make_request(bhttp::verb::get, "/metrics"));
    ASSERT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(r[bhttp::field::cache_control], "no-store");
    auto m = json::parse(r.body()).as_object();
    for (const char* k : {"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used",
                          "mem_total_mib", "mem_used_mib", "disk_used", "disk_total"}) {
      EXPECT_TRUE(m.contains(k)) << k;
    }
    auto num = [&](const char* k) { return json::value_to<double>(m.at(k)); };
    EXPECT_NEAR(num("ts"), static_cast<double>(std::time(nullptr)), 5);
    EXPECT_GE(num("cpu_count"), 1);
    EXPECT_GE(num("cpu_used_pct"), 0);
    EXPECT_LE(num("cpu_used_pct"), 100);
    EXPECT_GT(num("mem_total"), 0);
    EXPECT_GT(num("mem_used"), 0);
    EXPECT_LE(num("mem_used"), num("mem_total"));
    EXPECT_EQ(m.at("mem_total_mib").to_number<std::uint64_t>(),
              m.at("mem_total").to_number<std::uint64_t>() >> 20);
    EXPECT_GT(num("disk_total"), 0);
    EXPECT_LE(num("disk_used"), num("disk_total"));
  }
  auto r = send(http::make_request(bhttp::verb::delete_, "/metrics"));
  EXPECT_EQ(r.result_int(), 405);
}

// sudo in an image without /etc/hosts said "unable to resolve host <sandbox id>" on every call.
TEST(HostInfo, HostsNameTheSandboxsHostname) {
  EXPECT_EQ(envd::hosts_with_hostname("", "sbx1"),
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            "127.0.1.1\tsbx1\t# abx-envd\n");
  // The image's own lines are kept; an earlier line of ours (a fork's parent) is replaced.
  EXPECT_EQ(envd::hosts_with_hostname("127.0.0.1 localhost\n10.0.0.1 db # x\n"
                                      "127.0.1.1\tparent\t# abx-envd\n",
                                      "child"),
            "127.0.0.1 localhost\n10.0.0.1 db # x\n127.0.1.1\tchild\t# abx-envd\n");
  EXPECT_EQ(envd::hosts_with_hostname("127.0.0.1 localhost sbx1\n", "sbx1"), std::nullopt);
  EXPECT_EQ(envd::hosts_with_hostname("# sbx1\n", "sbx1"),  // a comment names nothing
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n# sbx1\n"
            "127.0.1.1\tsbx1\t# abx-envd\n");
}

TEST(HostInfo, ParsesProcStatAndMeminfo) {
  auto t = parse_proc_stat("cpu  10 2 3 100 5 1 1 0 7 0\ncpu0 1 2 3 4\n");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->busy, 17u);    // user nice system irq softirq steal; guest is inside user
  EXPECT_EQ(t->total, 122u);  // the first eight fields
  EXPECT_FALSE(parse_proc_stat("intr 1 2 3\n").ok());
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 x 4\n").ok());
  EXPECT_FALSE(parse_proc_stat("cpu  1 2\n").ok());
  auto m = parse_meminfo("MemTotal:       16000 kB\nMemFree:  100 kB\nMemAvailable:   4000 kB\n");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->total, 16000u * 1024);
  EXPECT_EQ(m->used, 12000u * 1024);
  EXPECT_FALSE(parse_meminfo("MemTotal: 1 kB\n").ok());
}

TEST_F(EnvdTest, UserSelectionRunsAsThatUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  EnvdOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.users = {{"user", UserSpec{1000, 1000, "/"}}, {"root", UserSpec{0, 0, home_}}};
  o.spool_dir = home_;  // not the shared /tmp
  auto e = Envd::start(o);
  ASSERT_TRUE(e.ok());
  envd_ = std::move(*e);
  ASSERT_EQ(::chown(home_.c_str(), 1000, 1000), 0);  // the user uploads into it, as itself
  auto r = stream("process.Process/Start", R"({"process":{"cmd":"id","args":["-u"]}})");
  EXPECT_EQ(stdout_of(frames_of(r.body())), "1000\n");
  r = stream("process.Process/Start", R"({"process":{"cmd":"id","args":["-u"]}})",
             {{"Authorization", "Basic " + base64_encode("root:")}});
  EXPECT_EQ(stdout_of(frames_of(r.body())), "0\n");
  auto up =
      send(http::make_request(bhttp::verb::post, "/files?path=" + home_ + "/own&username=user", "x",
                              "application/octet-stream"));
  EXPECT_EQ(up.result_int(), 200);
  struct stat st {};
  ASSERT_EQ(::stat((home_ + "/own").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
}

// envd starts a process with clone(CLONE_VM | CLONE_VFORK) (process.cc): the child shares envd's
// memory until it execs. It must still get exactly the user's ids and groups (set through
// syscall(2) there), no blocked signal (envd's threads here block SIGUSR2, inherited from the
// test's thread), and several at once must each get their own arguments while envd runs on.
TEST_F(EnvdTest, StartedProcessesGetTheUsersIdsAndNoBlockedSignalEvenManyAtOnce) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  sigset_t usr2, old;
  ::sigemptyset(&usr2);
  ::sigaddset(&usr2, SIGUSR2);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &usr2, &old), 0);
  EnvdOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.users = {{"user", UserSpec{1000, 1000, "/"}}, {"root", UserSpec{0, 0, home_}}};
  o.spool_dir = home_;
  auto e = Envd::start(o);  // its threads start with SIGUSR2 blocked
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
  ASSERT_TRUE(e.ok());
  envd_ = std::move(*e);

  auto status_line = [](const std::string& status, const std::string& key) {
    auto at = status.find("\n" + key + ":");
    if (at == std::string::npos) return std::string("(no " + key + ")");
    auto from = status.find_first_not_of(" \t", at + key.size() + 2);
    std::string v = status.substr(from, status.find('\n', from) - from);
    return v.substr(0, v.find_last_not_of(" \t") + 1);
  };
  auto r =
      stream("process.Process/Start", R"({"process":{"cmd":"cat","args":["/proc/self/status"]}})");
  std::string status = stdout_of(frames_of(r.body()));
  EXPECT_EQ(status_line(status, "Uid"), "1000\t1000\t1000\t1000") << status;
  EXPECT_EQ(status_line(status, "Gid"), "1000\t1000\t1000\t1000") << status;
  EXPECT_EQ(status_line(status, "Groups"), "1000") << status;
  EXPECT_EQ(status_line(status, "SigBlk"), "0000000000000000") << status;

  // 16 at once from 4 clients, each echoing its own number.
  std::vector<std::thread> clients;
  std::mutex mu;
  std::set<std::string> outs;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 4; ++i) {
        std::string n = std::to_string(c * 4 + i);
        auto res = stream("process.Process/Start",
                          R"({"process":{"cmd":"echo","args":[")" + n + R"("]}})");
        std::lock_guard lock(mu);
        outs.insert(stdout_of(frames_of(res.body())));
      }
    });
  }
  for (auto& t : clients) t.join();
  std::set<std::string> want;
  for (int n = 0; n < 16; ++n) want.insert(std::to_string(n) + "\n");
  EXPECT_EQ(outs, want);
  // A failing step still reports its errno: a missing program as the user.
  auto missing = stream("process.Process/Start", R"({"process":{"cmd":"/no/such/program"}})");
  EXPECT_NE(missing.body().find("execve"), std::string::npos) << missing.body();
}

// E2B's envd makes an upload's missing parents as root and gives them to the user (found with
// E2B's suite: `/0/multi_test_file0.txt` as `user`, where `user` may not create /0). Root helps
// only where the user can search without a symlink, and never leaves a directory elsewhere.
TEST_F(EnvdTest, UploadMakesMissingParentsTheUserMayNotAsE2bDoes) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  EnvdOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.users = {{"user", UserSpec{1000, 1000, home_}}, {"root", UserSpec{0, 0, home_}}};
  o.spool_dir = home_;  // not the shared /tmp
  auto e = Envd::start(o);
  ASSERT_TRUE(e.ok());
  envd_ = std::move(*e);
  ASSERT_EQ(::chmod(home_.c_str(), 0755), 0);  // root's; `user` may search it, not write it
  const std::string root_only = home_ + "/root-only";
  ASSERT_EQ(::mkdir(root_only.c_str(), 0700), 0);
  const std::string elsewhere = home_ + "/elsewhere";
  ASSERT_EQ(::mkdir(elsewhere.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), (home_ + "/link").c_str()), 0);
  auto upload_multipart = [&](const std::string& path) {
    return send(http::make_request(bhttp::verb::post, "/files?username=user", multipart(path, "m"),
                                   "multipart/form-data; boundary=XyZ"));
  };
  auto r = upload_multipart(home_ + "/0/multi_test_file0.txt");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  struct stat st {};
  ASSERT_EQ(::stat((home_ + "/0").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat((home_ + "/0/multi_test_file0.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  // The query path (octet-stream; parents made before the body is read), several levels deep.
  r = send(http::make_request(bhttp::verb::post,
                              "/files?username=user&path=" + home_ + "/q/deep/f.txt", "o",
                              "application/octet-stream"));
  ASSERT_EQ(r.result_int(), 200) << r.body();
  ASSERT_EQ(::stat((home_ + "/q/deep").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  // Not through a symlink, not into a directory the user cannot search: 403, nothing made.
  EXPECT_EQ(upload_multipart(home_ + "/link/new/f.txt").result_int(), 403);
  EXPECT_NE(::lstat((elsewhere + "/new").c_str(), &st), 0);
  EXPECT_EQ(upload_multipart(root_only + "/new/f.txt").result_int(), 403);
  EXPECT_NE(::lstat((root_only + "/new").c_str(), &st), 0);
  // Below a directory the user now owns, the user makes the rest (as before).
  EXPECT_EQ(upload_multipart(home_ + "/0/a/b.txt").result_int(), 200);
}

// ---- the sandbox boundary (issue 11) ----

// The lines of `s` without '\r' (a pty's output).
std::string without_cr(std::string s) {
  std::erase(s, '\r');
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A process started through envd inherits nothing of envd's: not its listener, not a client's
// connection (a held keep-alive one here), not any other descriptor of the process. It sees its
// stdio and the directory `ls` opens, with pipes and with a pty alike.
TEST_F(EnvdTest, StartedProcessesSeeOnlyTheirStdio) {
  start();
  auto idle = http::Connection::open("127.0.0.1", port());  // an accepted socket in envd
  ASSERT_TRUE(idle.ok());
  auto r = stream("process.Process/Start", R"({"process":{"cmd":"ls","args":["/proc/self/fd"]}})");
  EXPECT_EQ(stdout_of(frames_of(r.body())), "0\n1\n2\n3\n");
  r = stream(
      "process.Process/Start",
      R"({"process":{"cmd":"ls","args":["-1","/proc/self/fd"]},"pty":{"size":{"cols":80,"rows":24}}})");
  EXPECT_EQ(without_cr(stdout_of(frames_of(r.body()), "pty")), "0\n1\n2\n3\n");
}

// The command server runs as the sandbox's root with the token envd read from a root-only
// (0400) file, starts with stdio only, and the default user finds the token in no process's
// environment (before: the server ran as the default user with the token in its environment).
TEST_F(EnvdTest, CommandServerGetsTheTokenOutOfTheDefaultUsersReach) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  const std::string token = "tok-" + std::to_string(::getpid()) + "-boundary";
  std::string token_file = home_ + "/token";
  std::ofstream(token_file) << token << "\n";
  ASSERT_EQ(::chmod(token_file.c_str(), 0400), 0);
  ASSERT_EQ(::chmod(home_.c_str(), 0755), 0);
  std::string server =
      "ls /proc/self/fd > " + home_ + "/fds; id -u > " + home_ + "/uid; exec sleep 600";
  start_binary({}, {"--token-file", token_file, "--default-user", "user", "--server-argv",
                    json::serialize(json::array{"/bin/sh", "-c", server})});
  for (int i = 0; i < 500 && slurp(home_ + "/uid").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(slurp(home_ + "/uid"), "0\n");
  EXPECT_EQ(slurp(home_ + "/fds"), "0\n1\n2\n3\n");
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 401);
  token_ = token;
  auto r = stream("process.Process/Start",
                  R"({"process":{"cmd":"/bin/sh","args":["-c","id -u; grep -l -s -F )" + token +
                      R"( /proc/[0-9]*/environ; true"]}})");
  EXPECT_EQ(stdout_of(frames_of(r.body())), "1000\n");
}

// The typed configuration (abx/envd/config.h) from --config, with flags on top (style rule 14):
// start_binary's --port 0 and --host replace the file's port 1, and the file's token and start
// command take effect.
TEST_F(EnvdTest, ConfigFileWithFlagsOnTop) {
  const std::string token_file = home_ + "/token";
  std::ofstream(token_file) << "token-cfg\n";
  EnvdConfig c;
  c.host = "192.0.2.1";
  c.port = 1;
  c.token_file = token_file;
  c.start_cmd = "echo started > " + home_ + "/started";
  c.default_user = ::getpwuid(::geteuid())->pw_name;
  const std::string file = home_ + "/envd.json";
  std::ofstream(file) << json::serialize(to_json(c));
  start_binary({}, {"--config", file});
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 401);
  token_ = "token-cfg";
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 200);
  for (int i = 0; i < 500 && slurp(home_ + "/started").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(slurp(home_ + "/started"), "started\n");
}

// A bad file stops abx-envd with exit code 3 and the field at fault; a bad flag is usage (2).
TEST_F(EnvdTest, ConfigFileErrorsNameTheField) {
  const std::string file = home_ + "/envd.json";
  json::object o = to_json(EnvdConfig{});
  o["serverArgv"] = json::array{"abx-server", 8080};
  std::ofstream(file) << json::serialize(o);
  const std::string err = home_ + "/err";
  auto run = [&](const std::string& args) {
    int st = std::system((std::string(ABX_ENVD_BINARY) + " " + args + " 2>" + err).c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  EXPECT_EQ(run("--config " + file), 3);
  EXPECT_EQ(slurp(err), "abx-envd: envd config: serverArgv[1]: expected a string, got number\n");
  EXPECT_EQ(run("--config " + home_ + "/missing.json"), 3);
  EXPECT_NE(slurp(err).find("missing.json"), std::string::npos) << slurp(err);
  EXPECT_EQ(run("--server-argv '[1]'"), 2);
  EXPECT_NE(slurp(err).find("--server-argv must be a non-empty JSON array"), std::string::npos)
      << slurp(err);
  EXPECT_EQ(run("--server-cmd x --server-argv '[\"y\"]'"), 2);
  EXPECT_NE(slurp(err).find("not both"), std::string::npos) << slurp(err);
  EXPECT_EQ(run("--config " + file + " --config-fd 0"), 2);
}

// --server-companion-argv (abx-server's Python worker, issue 37): a process started just before
// each run of the command server, the two connected by a socketpair on descriptor 3 of both. It
// runs without the server's token; what it writes reaches the server; when the server exits it
// is killed, and the next run gets a new one.
TEST_F(EnvdTest, CommandServerCompanionIsConnectedOnFd3WithoutTheToken) {
  std::string token_file = home_ + "/token";
  std::ofstream(token_file) << "token-c\n";
  std::string seen = home_ + "/seen";
  // The companion names itself and what it sees of the token, then waits (fd 3 stays open).
  std::string companion = "echo \"$$ tok=${ABX_ACCESS_TOKEN:-none}\" >&3; exec sleep 600";
  // Each run of the server records its companion's line; the first run then exits (envd
  // restarts it after 100 ms), the second stays.
  std::string server = "read -r line <&3; echo \"$line tok=${ABX_ACCESS_TOKEN:-none}\" >> " + seen +
                       "; [ \"$(wc -l < " + seen + ")\" -ge 2 ] && exec sleep 600; exit 1";
  start_binary(
      {}, {"--token-file", token_file, "--default-user", ::getpwuid(::geteuid())->pw_name,
           "--server-argv", json::serialize(json::array{"/bin/sh", "-c", server}),
           "--server-companion-argv", json::serialize(json::array{"/bin/sh", "-c", companion})});
  auto lines = [&] {
    std::vector<std::string> out;
    std::istringstream in(slurp(seen));
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  for (int i = 0; i < 500 && lines().size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto got = lines();
  ASSERT_EQ(got.size(), 2u) << slurp(seen);
  pid_t first = 0, second = 0;
  char tok1[64] = {}, tok2[64] = {}, srv1[64] = {}, srv2[64] = {};
  ASSERT_EQ(std::sscanf(got[0].c_str(), "%d tok=%63s tok=%63s", &first, tok1, srv1), 3) << got[0];
  ASSERT_EQ(std::sscanf(got[1].c_str(), "%d tok=%63s tok=%63s", &second, tok2, srv2), 3) << got[1];
  EXPECT_STREQ(tok1, "none");  // the companion never sees the token...
  EXPECT_STREQ(tok2, "none");
  EXPECT_STREQ(srv1, "token-c");  // ...which the server has
  EXPECT_NE(first, second);
  // The first run's companion was killed with its server; the second's is alive.
  bool first_gone = false;
  for (int i = 0; i < 200 && !first_gone; ++i) {
    first_gone = ::kill(first, 0) != 0 && errno == ESRCH;
    if (!first_gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(first_gone) << "companion " << first << " outlived its server";
  EXPECT_EQ(::kill(second, 0), 0) << std::strerror(errno);
}

// Reaper::adopt (the companion abxd's init started beside envd): a child envd did not start is
// reported to its callback whether it exits after the adoption or was reaped before it.
TEST(Reaper, AdoptReportsAChildWhetherItExitsBeforeOrAfter) {
  Reaper& reaper = Reaper::instance();  // its thread reaps every child of this process
  const pid_t early = ::fork();
  if (early == 0) ::_exit(7);
  ASSERT_GT(early, 0);
  // Reaped as an orphan (nobody registered it): /proc has no entry once it is collected.
  for (int i = 0; i < 500 && ::kill(early, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_NE(::kill(early, 0), 0) << "child " << early << " was not reaped";
  std::promise<int> early_status;
  reaper.adopt(early, [&](int st) { early_status.set_value(st); });
  auto f1 = early_status.get_future();
  ASSERT_EQ(f1.wait_for(std::chrono::seconds(0)), std::future_status::ready);  // at once
  const int st1 = f1.get();
  EXPECT_TRUE(WIFEXITED(st1) && WEXITSTATUS(st1) == 7) << st1;

  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  const pid_t late = ::fork();
  if (late == 0) {
    ::close(go[1]);
    char b;
    (void)!::read(go[0], &b, 1);  // EOF once the test closes its end
    ::_exit(9);
  }
  ASSERT_GT(late, 0);
  std::promise<int> late_status;
  reaper.adopt(late, [&](int st) { late_status.set_value(st); });
  ::close(go[1]);  // now it exits
  ::close(go[0]);
  auto f2 = late_status.get_future();
  ASSERT_EQ(f2.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const int st2 = f2.get();
  EXPECT_TRUE(WIFEXITED(st2) && WEXITSTATUS(st2) == 9) << st2;
}

// --server-companion-fds and --server-companion-pid (written by abxd and its init): checked as
// flags, the pid only with the descriptors.
TEST_F(EnvdTest, ServerCompanionFlagsAreChecked) {
  std::string err = home_ + "/err";
  auto run = [&](const std::string& flags) {
    std::string cmd = std::string(ABX_ENVD_BINARY) + " --port 0 " + flags + " 2>" + err;
    int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  EXPECT_EQ(run("--server-companion-pid 5"), 2);
  EXPECT_NE(slurp(err).find("--server-companion-fds"), std::string::npos) << slurp(err);
  EXPECT_EQ(run("--server-companion-fds 1,4,5"), 2);
  EXPECT_EQ(run("--server-companion-fds 4,5"), 2);
}

// set_access_token: the new token is the only one accepted; it neither clears the token nor turns
// auth on.
TEST_F(EnvdTest, SetAccessTokenReplacesTheToken) {
  start("token-a");
  EXPECT_EQ(envd_->set_access_token("").error().code(), ErrorCode::kInvalidArgument);
  token_ = "token-a";
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 200);
  ASSERT_TRUE(envd_->set_access_token("token-b").ok());
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 401);
  token_ = "token-b";
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 200);
  envd_.reset();
  start();
  EXPECT_EQ(envd_->set_access_token("token-c").error().code(), ErrorCode::kFailedPrecondition);
  token_.reset();
  EXPECT_EQ(rpc("process.Process/List", "{}").result_int(), 200);
}

// SIGHUP (sent by abxd to a sandbox restored from a checkpoint, whose token file is new): the
// file's token becomes the only one accepted and the command server is restarted with it; an
// empty or missing file is logged and keeps the token (and the server) as they were.
TEST_F(EnvdTest, SighupReloadsTheTokenFileAndRestartsTheCommandServer) {
  std::string token_file = home_ + "/token";
  std::string tokens_seen = home_ + "/server.tokens";
  std::ofstream(token_file) << "token-a\n";
  std::string server = "echo \"$ABX_ACCESS_TOKEN\" >> " + tokens_seen + "; exec sleep 600";
  // stderr (the log) joins stdout, which the test reads.
  start_binary({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"},
               {"--token-file", token_file, "--default-user", ::getpwuid(::geteuid())->pw_name,
                "--server-argv", json::serialize(json::array{"/bin/sh", "-c", server})});
  auto logged = [&](const std::string& text) {
    while (auto line = proc_->read_line_starting("", std::chrono::seconds(10))) {
      if (line->find(text) != std::string::npos) return true;
    }
    return false;
  };
  auto status_with = [&](const std::string& t) {
    token_ = t;
    return send(http::make_request(bhttp::verb::get, "/envs")).result_int();
  };
  auto server_saw = [&](const std::string& want) {
    for (int i = 0; i < 500 && slurp(tokens_seen) != want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return slurp(tokens_seen);
  };
  EXPECT_EQ(server_saw("token-a\n"), "token-a\n");
  EXPECT_EQ(status_with("token-a"), 200);
  EXPECT_EQ(status_with("token-b"), 401);

  std::ofstream(token_file) << "token-b\n";
  proc_->signal(SIGHUP);
  ASSERT_TRUE(logged("SIGHUP: token reloaded, restarting the command server"));
  EXPECT_EQ(status_with("token-a"), 401);
  EXPECT_EQ(status_with("token-b"), 200);
  EXPECT_EQ(server_saw("token-a\ntoken-b\n"), "token-a\ntoken-b\n");

  std::ofstream(token_file) << "\n";
  proc_->signal(SIGHUP);
  EXPECT_TRUE(logged("SIGHUP: token not reloaded, the old one stays: token file"));
  EXPECT_EQ(status_with("token-b"), 200);
  fs::remove(token_file);
  proc_->signal(SIGHUP);
  EXPECT_TRUE(logged("SIGHUP: token not reloaded, the old one stays: cannot read"));
  EXPECT_EQ(status_with("token-b"), 200);
  EXPECT_EQ(status_with("token-a"), 401);
  EXPECT_EQ(slurp(tokens_seen), "token-a\ntoken-b\n");  // not restarted again
}

// The same with the real abx-server: after SIGHUP the restarted server accepts the new token only
// (its port, 0 at start, is read from its "listening on" lines in envd's GET /logs).
TEST_F(EnvdTest, SighupHandsTheNewTokenToAbxServer) {
  std::string token_file = home_ + "/token";
  std::ofstream(token_file) << "token-a\n";
  start_binary(
      {}, {"--token-file", token_file, "--default-user", ::getpwuid(::geteuid())->pw_name,
           "--server-argv",
           json::serialize(json::array{ABX_SERVER_BINARY, "--host", "127.0.0.1", "--port", "0"})});
  // The port of the command server's `run`-th start (1-based); 0 when it does not come.
  auto server_port = [&](std::size_t run) -> std::uint16_t {
    for (int i = 0; i < 500; ++i) {
      std::vector<std::string> ports;
      auto r = send(http::make_request(bhttp::verb::get, "/logs?start=0&limit=1000"));
      if (r.result_int() == 401) {  // the SIGHUP is not handled yet
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (r.result_int() != 200) return 0;
      json::value logs = json::parse(r.body());  // outlives the loop (a temporary would not)
      for (const auto& l : logs.at("logs").as_array()) {
        std::string line(l.at("line").as_string());
        if (line.find("listening on 127.0.0.1:") != std::string::npos)
          ports.push_back(line.substr(line.rfind(':') + 1));
      }
      if (ports.size() >= run) return static_cast<std::uint16_t>(std::stoi(ports[run - 1]));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  };
  auto commands_with = [&](std::uint16_t server, const std::string& t) {
    auto req = http::make_request(bhttp::verb::get, "/commands");
    req.set("X-Access-Token", t);
    auto r = http::fetch("127.0.0.1", server, std::move(req));
    return r.ok() ? r->result_int() : 0;
  };
  token_ = "token-a";
  std::uint16_t first = server_port(1);
  ASSERT_NE(first, 0);
  EXPECT_EQ(commands_with(first, "token-a"), 200);
  std::ofstream(token_file) << "token-b\n";
  proc_->signal(SIGHUP);
  token_ = "token-b";
  std::uint16_t second = server_port(2);
  ASSERT_NE(second, 0);
  EXPECT_EQ(commands_with(second, "token-b"), 200);
  EXPECT_EQ(commands_with(second, "token-a"), 401);
}

// envd and the command server are not dumpable: another process of their own uid can read
// neither their environment (where both found the token) nor their descriptors. What envd
// starts is dumpable again, so a user's processes can still inspect each other. abx-envd runs
// as uid 1000 here, so that the processes it starts share its uid.
TEST_F(EnvdTest, EnvdAndTheCommandServerAreNotDumpable) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run abx-envd as another user";
  ASSERT_EQ(::chmod(home_.c_str(), 0755), 0);
  ASSERT_EQ(::chown(home_.c_str(), 1000, 1000), 0);
  std::string server = "echo $$ > " + home_ + "/server.pid; exec " + ABX_SERVER_BINARY +
                       " --host 127.0.0.1 --port 0";
  start_binary({"/usr/bin/setpriv", "--reuid=1000", "--regid=1000", "--clear-groups",
                "/usr/bin/env", "HOME=" + home_, "ABX_ACCESS_TOKEN=s3cret-boundary"},
               {"--server-argv", json::serialize(json::array{"/bin/sh", "-c", server})});
  token_ = "s3cret-boundary";
  for (int i = 0; i < 500 && slurp(home_ + "/server.pid").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::string pid = slurp(home_ + "/server.pid");
  ASSERT_FALSE(pid.empty());
  pid.pop_back();
  // Until the server has exec'd and made itself non-dumpable, which the kernel shows by handing
  // its /proc files to root (slow under sanitizers; a server that never does fails below).
  const std::string environ_path = "/proc/" + pid + "/environ";
  for (int i = 0; i < 1000; ++i) {
    struct stat st {};
    if (::stat(environ_path.c_str(), &st) == 0 && st.st_uid == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string script =
      "id -u; for p in $PPID " + pid +
      "; do cat /proc/$p/environ >/dev/null 2>&1 && echo environ $p; ls /proc/$p/fd >/dev/null "
      "2>&1 && echo fd $p; done; sh -c 'cat /proc/$PPID/environ' >/dev/null && echo child ok";
  auto r = stream("process.Process/Start", R"({"process":{"cmd":"/bin/sh","args":["-c",)" +
                                               json::serialize(json::string(script)) + "]}}");
  EXPECT_EQ(stdout_of(frames_of(r.body())), "1000\nchild ok\n") << r.result_int() << r.body();
}

// Credentials are per thread and restored: a thread acting as the user cannot open a root-only
// file while another thread of the process still can (threads created under a guard inherit
// it, as clone copies the creator's credentials: envd creates none there but watcher threads),
// acting as envd again inside the user's scope works, and the thread is root again when the guard
// ends.
TEST(FsCredsTest, ThreadScopedNestedAndRestored) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch credentials";
  abx::testing::TempDir tmp{"abx-creds"};
  std::string secret = tmp.string() + "/secret";
  std::ofstream(secret) << "x";
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(tmp.string().c_str(), 0755), 0);
  auto can_open = [&] {
    UniqueFd fd(::open(secret.c_str(), O_RDONLY | O_CLOEXEC));
    return fd.valid();
  };
  User user{"user", 1000, 1000, "/"};
  std::promise<void> held, checked;
  auto held_future = held.get_future();
  std::thread t([&] {
    {
      auto as_user = FsCreds::act_as(user);
      ASSERT_TRUE(as_user.ok()) << as_user.error().message();
      EXPECT_FALSE(can_open());
      EXPECT_EQ(current_fsuid(), 1000u);
      held.set_value();  // the test's thread checks it is still root meanwhile
      checked.get_future().wait();
      {
        auto as_envd = FsCreds::act_as_envd();
        ASSERT_TRUE(as_envd.ok());
        EXPECT_TRUE(can_open());
      }
      EXPECT_FALSE(can_open());
    }
    EXPECT_TRUE(can_open());
    EXPECT_EQ(current_fsuid(), 0u);
  });
  held_future.wait();
  EXPECT_TRUE(can_open());
  checked.set_value();
  t.join();
  EXPECT_TRUE(can_open());
}

// The files API, both /files and the Connect filesystem service, acts as the requested user:
// the default user cannot read, list, stat, change or watch what only root may, and what it
// creates is its own; root, served by the same threads in between, still can.
TEST_F(EnvdTest, FilesApiActsAsTheRequestedUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  ASSERT_EQ(::chmod(home_.c_str(), 0755), 0);
  const std::string uhome = home_ + "/u";
  fs::create_directory(uhome);
  ASSERT_EQ(::chown(uhome.c_str(), 1000, 1000), 0);
  EnvdOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.users = {{"user", UserSpec{1000, 1000, uhome}}, {"root", UserSpec{0, 0, home_}}};
  o.spool_dir = home_;  // not the shared /tmp: the staging directories are checked below
  auto e = Envd::start(o);
  ASSERT_TRUE(e.ok());
  envd_ = std::move(*e);
  std::ofstream(home_ + "/secret") << "root only";
  ASSERT_EQ(::chmod((home_ + "/secret").c_str(), 0600), 0);
  fs::create_directory(home_ + "/private");
  std::ofstream(home_ + "/private/x") << "x";
  ASSERT_EQ(::chmod((home_ + "/private").c_str(), 0700), 0);
  fs::create_directory(home_ + "/rootdir");
  std::ofstream(home_ + "/rootdir/f") << "old";
  auto get = [&](const std::string& path, const std::string& user) {
    return send(http::make_request(bhttp::verb::get, "/files?path=" + path + "&username=" + user));
  };
  auto put = [&](const std::string& path, const std::string& user) {
    return send(http::make_request(bhttp::verb::post, "/files?path=" + path + "&username=" + user,
                                   "new", "application/octet-stream"));
  };
  auto as_user =
      std::map<std::string, std::string>{{"Authorization", "Basic " + base64_encode("user:")}};
  auto unary_as_user = [&](const std::string& method, const std::string& body) {
    auto req = http::make_request(bhttp::verb::post, "/" + method, body);
    req.set("Authorization", "Basic " + base64_encode("user:"));
    return send(std::move(req));
  };

  auto r = get(home_ + "/secret", "user");
  EXPECT_EQ(r.result_int(), 403) << r.body();
  EXPECT_NE(r.body().find("Permission denied"), std::string::npos) << r.body();
  EXPECT_EQ(get(home_ + "/private/x", "user").result_int(), 403);
  r = put(home_ + "/rootdir/f", "user");
  EXPECT_EQ(r.result_int(), 403) << r.body();
  EXPECT_EQ(slurp(home_ + "/rootdir/f"), "old");
  // A missing parent of an upload is made for the user even in root's directory, as E2B's envd
  // does (UploadMakesMissingParentsTheUserMayNotAsE2bDoes); not below what it cannot search.
  EXPECT_EQ(put(home_ + "/rootdir/sub/g", "user").result_int(), 200);
  EXPECT_EQ(fs::status(home_ + "/rootdir/sub").type(), fs::file_type::directory);
  EXPECT_EQ(put(home_ + "/private/sub/g", "user").result_int(), 403);
  EXPECT_FALSE(fs::exists(home_ + "/private/sub"));
  for (const auto& [method, body] : std::vector<std::pair<std::string, std::string>>{
           {"Stat", R"({"path":")" + home_ + R"(/private/x"})"},
           {"ListDir", R"({"path":")" + home_ + R"(/private"})"},
           {"MakeDir", R"({"path":")" + home_ + R"(/rootdir/d"})"},
           {"Remove", R"({"path":")" + home_ + R"(/rootdir/f"})"},
           {"Move",
            R"({"source":")" + home_ + R"(/rootdir/f","destination":")" + uhome + R"(/f"})"},
           {"CreateWatcher", R"({"path":")" + home_ + R"(/private"})"}}) {
    r = unary_as_user("filesystem.Filesystem/" + method, body);
    EXPECT_EQ(r.result_int(), 403) << method << ": " << r.body();
    if (r.result_int() == 403) {
      EXPECT_EQ(code_of(r), "permission_denied") << method;
    }
  }
  r = stream("filesystem.Filesystem/WatchDir", R"({"path":")" + home_ + R"(/private"})", as_user);
  EXPECT_NE(r.body().find("permission_denied"), std::string::npos) << r.body();
  EXPECT_EQ(slurp(home_ + "/rootdir/f"), "old");

  // What the user makes is the user's: an upload (and the directories it needs), a directory.
  EXPECT_EQ(put("a/b/up.txt", "user").result_int(), 200);
  EXPECT_EQ(unary_as_user("filesystem.Filesystem/MakeDir", R"({"path":"made"})").result_int(), 200);
  for (const auto& p : {"/a", "/a/b", "/a/b/up.txt", "/made"}) {
    struct stat st {};
    ASSERT_EQ(::stat((uhome + p).c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, 1000u) << p;
    EXPECT_EQ(st.st_gid, 1000u) << p;
  }
  // The user's uploads stage in its own directory inside envd's, which the user cannot swap.
  struct stat top {
  }, mine{};
  ASSERT_EQ(::lstat((home_ + "/.abx-spool-0").c_str(), &top), 0);
  EXPECT_EQ(top.st_uid, 0u);
  EXPECT_EQ(top.st_mode & 0777, 0711u);
  ASSERT_EQ(::lstat((home_ + "/.abx-spool-0/1000").c_str(), &mine), 0);
  EXPECT_EQ(mine.st_uid, 1000u);
  EXPECT_EQ(mine.st_mode & 0777, 0700u);
  EXPECT_TRUE(fs::is_empty(home_ + "/.abx-spool-0/1000"));
  // Root is still root on the same threads.
  r = get(home_ + "/secret", "root");
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), "root only");
  EXPECT_EQ(put(home_ + "/rootdir/f", "root").result_int(), 200);
  EXPECT_EQ(slurp(home_ + "/rootdir/f"), "new");
}

// A client's mistake is never a 5xx: every errno a request's path or data can provoke maps to
// a 4xx (or 507 for a full disk).
TEST(EnvdErrors, FilesystemErrnosAreClientErrors) {
  const std::map<int, unsigned> want = {
      {EACCES, 403}, {EPERM, 403},    {EROFS, 403},  {ENOENT, 404},  {EEXIST, 409},
      {EBUSY, 409},  {ETXTBSY, 409},  {EISDIR, 400}, {ENOTDIR, 400}, {ENAMETOOLONG, 400},
      {ELOOP, 400},  {ENOSPC, 507},   {EDQUOT, 507}, {EFBIG, 413},   {ENXIO, 400},
      {EXDEV, 400},  {ENOTEMPTY, 409}};
  for (const auto& [err, status] : want) {
    Error e = errno_error(err, "write /x");
    EXPECT_EQ(http::http_status(e.code()), status) << std::strerror(err);
    if (err != ELOOP) {  // which says "symbolic link loop" in its own words
      EXPECT_NE(e.message().find(std::strerror(err)), std::string::npos) << e.message();
    }
  }
}

// Uploads onto a read-only mount and onto a busy path (a mount point, as the files abx binds
// into a sandbox) answer 403 and 409 with the reason, not 500; the old content stays and no
// temporary file is left. abx-envd runs in a private mount namespace made with unshare(1).
TEST_F(EnvdTest, UploadsOntoReadOnlyAndBusyPathsAreClientErrors) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for mounts";
  const std::string d = home_;
  fs::create_directories(d + "/rosrc");
  fs::create_directories(d + "/ro");
  std::ofstream(d + "/rosrc/f") << "old";
  std::ofstream(d + "/busysrc") << "bound";
  std::ofstream(d + "/busy") << "";
  std::string setup = "mount --bind " + d + "/rosrc " + d + "/ro && mount -o remount,bind,ro " + d +
                      "/ro && mount --bind " + d + "/busysrc " + d + "/busy && exec \"$0\" \"$@\"";
  start_binary({"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup},
               {"--default-user", "root"}, {"TMPDIR=" + d});
  auto put = [&](const std::string& path) {
    return send(http::make_request(bhttp::verb::post, "/files?path=" + path, "new",
                                   "application/octet-stream"));
  };
  auto multipart_put = [&](const std::string& path) {
    return send(http::make_request(bhttp::verb::post, "/files?path=" + path, multipart("f", "new"),
                                   "multipart/form-data; boundary=XyZ"));
  };
  auto r = put(d + "/ro/f");
  EXPECT_EQ(r.result_int(), 403) << r.body();
  EXPECT_NE(r.body().find("read-only"), std::string::npos) << r.body();
  EXPECT_EQ(multipart_put(d + "/ro/f").result_int(), 403);
  EXPECT_EQ(put(d + "/ro/new").result_int(), 403);
  EXPECT_EQ(put(d + "/ro/sub/new").result_int(), 403);
  r = put(d + "/busy");
  EXPECT_EQ(r.result_int(), 409) << r.body();
  EXPECT_NE(r.body().find("in use"), std::string::npos) << r.body();
  EXPECT_EQ(multipart_put(d + "/busy").result_int(), 409);
  r = rpc("filesystem.Filesystem/MakeDir", R"({"path":")" + d + R"(/ro/dir"})");
  EXPECT_EQ(r.result_int(), 403) << r.body();
  // Moving a mount point away is a move across mounts (EXDEV).
  r = rpc("filesystem.Filesystem/Move",
          R"({"source":")" + d + R"(/busy","destination":")" + d + R"(/moved"})");
  EXPECT_EQ(r.result_int(), 400) << r.body();
  r = rpc("filesystem.Filesystem/Remove", R"({"path":")" + d + R"(/ro/f"})");
  EXPECT_EQ(r.result_int(), 403) << r.body();
  EXPECT_EQ(slurp(d + "/rosrc/f"), "old");
  EXPECT_EQ(slurp(d + "/busysrc"), "bound");
  // Nothing is left behind. A request's spooled body goes when the request is freed, which may
  // be just after its response was written: allow it a moment.
  std::vector<std::string> left;
  for (int i = 0; i < 100; ++i) {
    left.clear();
    for (const auto& de : fs::recursive_directory_iterator(d)) {
      std::string name = de.path().filename().string();
      if (name.rfind(".abx-upload", 0) == 0 || name.rfind(".abx-body", 0) == 0)
        left.push_back(de.path().string());
    }
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(left.empty()) << left.front();
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// A `yes` flood through a Start stream, read by a client and then not read at all: the
// abx-envd process's RSS stays bounded (the pump stops reading the pipe when the queue is full).
TEST(EnvdFlood, OutputFloodKeepsDaemonMemoryBounded) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    // A test killed mid-flood (ctest's timeout) takes its abx-envd along (the envd's `yes` then
    // dies of SIGPIPE): left behind, the pair ran at 100% CPU for hours.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out[1], 1);
    ::execl(ABX_ENVD_BINARY, "abx-envd", "--port", "0", "--host", "127.0.0.1", "--log-level",
            "warn", nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(out[0]);
  ASSERT_EQ(line.rfind("listening on 127.0.0.1:", 0), 0u) << line;
  auto port = static_cast<std::uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  long before = rss_kib(pid);
  {
    StreamReader r(port, "/process.Process/Start", R"({"process":{"cmd":"yes"},"tag":"flood"})");
    ASSERT_EQ(r.status(), 200);
    std::vector<char> buf(1 << 16);
    std::size_t got = 0;
    while (got < (64u << 20)) got += r.socket().read_some(asio::buffer(buf));
    long reading = rss_kib(pid);
    // Now stop reading for a while: the producer must stall instead of buffering.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    long stalled = rss_kib(pid);
    std::cerr << "abx-envd RSS KiB: idle " << before << ", after 64 MiB of stream " << reading
              << ", stalled reader " << stalled << "\n";
#if !defined(__SANITIZE_ADDRESS__)
    EXPECT_LT(stalled - before, 48 * 1024);  // nothing like the hundreds of MiB produced
#endif
    auto kill = http::make_request(bhttp::verb::post, "/process.Process/SendSignal",
                                   R"({"process":{"tag":"flood"},"signal":"SIGNAL_SIGKILL"})");
    auto k = http::fetch("127.0.0.1", port, std::move(kill));
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(k->result_int(), 200);
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace abx::envd
