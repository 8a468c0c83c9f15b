// The boundary probe suite (issue 11 item 6; security catalogue §1.1 E1–E11, §2.6, and the
// findings of issue 11). Each probe is run on the host first as a positive control — it must
// succeed there, or it is reported as not exercising anything — and then in real sandboxes of a
// real abxd as root and as the default user, where it must fail. One line sums it up:
//
//   boundary: N probes, N held, 0 escapes, 0 host leaks, 0 lateral
//
// The test fails on any probe that was not held and on any probe whose host control did not
// succeed. ABX_BOUNDARY_PROBES=sub1,sub2 runs only the probes whose name contains one of the
// substrings; ABX_BOUNDARY_VERBOSE=1 prints one line per probe even when everything held (a
// failure always prints them).
//
// "escape" covers every boundary a probe guards other than host files and peers: code or writes
// reaching the host, host-wide kernel resources taken from the host or other sandboxes, and the
// default user taking over root's (envd's) requests inside the sandbox. "host leak": host files,
// sockets or metadata read from inside. "lateral": sandbox A reaching sandbox B.
//
// Resource-exhaustion probes hold their limit for a few seconds and, while they hold it, check
// that the host (this process, or a host process of the uid concerned) and sandbox B stay usable.
// Ones that would exhaust a host-wide resource shared with the other sandboxes on this machine
// (uid 0's inotify instances while sandbox uid 0 is host uid 0) are not run then, and count as
// escapes with that reason. Traffic only ever goes to loopback and the sandboxes' own namespaces.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <linux/nsfs.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "abx/client/sandbox.h"
#include "abx/http/client.h"
#include "abx/testing/abxd.h"
#include "abx/testing/socket.h"

namespace abx::boundary {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

constexpr const char* kProbeDir = "/tmp/abx-boundary";
constexpr const char* kProbe = "/tmp/abx-boundary/probe";
constexpr uid_t kHostNobody = 64999;  // an unused host uid for host controls of per-user limits

std::string random_tag() {
  std::random_device rd;
  std::ostringstream o;
  o << std::hex << rd() << rd();
  return o.str();
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// --- Runs -----------------------------------------------------------------------------------

struct ProbeRun {
  int code = -1;  // exit code; -1: did not run or did not finish
  std::string out;
  bool ok() const { return code == 0; }
  std::string brief() const {
    std::string s = out.size() > 160 ? out.substr(out.size() - 160) : out;
    for (auto& c : s)
      if (c == '\n') c = ' ';
    return "exit " + std::to_string(code) + ": " + s;
  }
};

struct HostOpts {
  fs::path cwd;                           // empty: inherited
  bool leak_fd = false;                   // an inherited fd 7 on "/" (no O_CLOEXEC)
  std::vector<std::string> cgroup_procs;  // cgroup.procs files the child joins before exec
};

// A probe (or any argv) on the host, stdout and stderr captured.
class HostProc {
 public:
  HostProc(std::vector<std::string> argv, const HostOpts& o = {}) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(p[1], 1);
      dup2(p[1], 2);
      for (const auto& f : o.cgroup_procs) {
        int fd = open(f.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) _exit(98);
        close(fd);
      }
      if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) _exit(97);
      if (o.leak_fd) {
        int fd = open("/", O_RDONLY | O_DIRECTORY);
        if (fd != 7) dup2(fd, 7), close(fd);
      }
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(99);
    }
    close(p[1]);
    fd_ = p[0];
  }
  ~HostProc() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  HostProc(const HostProc&) = delete;
  HostProc& operator=(const HostProc&) = delete;
  pid_t pid() const { return pid_; }

  bool wait_for(const std::string& text, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out_.find(text) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !pump(static_cast<int>(left.count()))) return false;
    }
    return true;
  }
  ProbeRun finish(std::chrono::milliseconds timeout = 30s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      if (!pump(static_cast<int>(left.count()))) break;
    }
    ProbeRun r;
    r.out = out_;
    if (pid_ <= 0) return r;
    int st = 0;
    pid_t got = 0;
    // EOF comes a moment before the exit status: wait for it until the deadline.
    while ((got = waitpid(pid_, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    if (got != pid_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &st, 0);
      r.out += " [killed: timeout]";
    } else {
      r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    done_ = true;
    return r;
  }

 private:
  bool pump(int ms) {  // false at EOF or timeout
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return false;
    char buf[4096];
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  bool done_ = false;
  std::string out_;
};

std::vector<std::string> probe_argv(std::vector<std::string> args) {
  args.insert(args.begin(), ABX_BOUNDARY_PROBE);
  return args;
}

ProbeRun host_run(std::vector<std::string> args, const HostOpts& o = {}) {
  HostProc p(probe_argv(std::move(args)), o);
  return p.finish();
}

enum class Who { kRoot, kUser };
const char* who_name(Who w) { return w == Who::kRoot ? "root" : "user"; }

ProbeRun sandbox_run(client::Sandbox& sb, Who who, std::vector<std::string> args,
                     const std::string& cwd = {}) {
  args.insert(args.begin(), kProbe);
  client::CommandOptions o;
  o.user = who_name(who);
  o.timeout = 60s;
  o.cwd = cwd;
  auto r = sb.commands().run_argv(args, o);
  ProbeRun out;
  if (!r.ok()) {
    out.out = "run failed: " + r.error().message();
    return out;
  }
  out.code = r->exit_code;
  out.out = r->stdout_data + r->stderr_data;
  return out;
}

// A probe started in a sandbox in the background (exhaustion), its output collected.
class SandboxProc {
 public:
  SandboxProc(client::Sandbox& sb, Who who, std::vector<std::string> args) {
    args.insert(args.begin(), kProbe);
    client::CommandOptions o;
    o.user = who_name(who);
    o.timeout = 120s;
    o.on_stdout = [this](std::string_view d) {
      std::lock_guard l(mu_);
      out_.append(d);
    };
    o.on_stderr = o.on_stdout;
    std::string cmd = "exec";
    for (const auto& a : args) cmd += " '" + a + "'";  // our own fixed arguments: no quotes
    auto h = sb.commands().start(cmd, o);
    if (h.ok())
      handle_.emplace(std::move(*h));
    else
      out_ = "start failed: " + h.error().message();
  }
  bool wait_for(const std::string& text, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard l(mu_);
        if (out_.find(text) != std::string::npos) return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  ProbeRun finish() {
    ProbeRun r;
    if (handle_) {
      auto res = handle_->wait();
      if (res.ok()) r.code = res->exit_code;
    }
    std::lock_guard l(mu_);
    r.out = out_;
    return r;
  }
  void kill() {
    if (handle_) (void)handle_->kill();
  }

 private:
  std::mutex mu_;
  std::string out_;
  std::optional<client::CommandHandle> handle_;
};

// --- Probes ---------------------------------------------------------------------------------

enum class Impact { kEscape, kHostLeak, kLateral };

struct Outcome {
  bool succeeded = false;  // the attempt worked (host: good; sandbox: bad)
  std::string detail;
  bool not_applicable = false;  // the kernel lacks the mechanism (exit 3)
  bool error = false;           // the probe did not run at all (never counts as held)
};
Outcome of(const ProbeRun& r) { return {r.ok(), r.brief(), r.code == 3, r.code == -1}; }

struct Probe {
  std::string name;
  std::string cls;  // E1..E11, F (issue 11 findings), R (resource exhaustion), T (tenants)
  Impact impact;
  std::function<Outcome()> host;
  std::function<Outcome(Who)> sandbox;
  std::vector<Who> who{Who::kRoot, Who::kUser};
};

class BoundaryTest : public testing::AbxdFixture {
 protected:
  BoundaryTest() : AbxdFixture("abx-boundary") {}
  void prepare_home(const fs::path& home) override {
    fs::create_directories(home / "templates/boundary");
    std::ofstream(home / "templates/boundary/template.yaml")
        << "id: boundary\n"
           "description: boundary probe suite\n"
           "image: abx:base\n"
           "capabilities: [shell, files, code, ports]\n"
           "resources: {memory: 256Mi, pids: 256}\n"
           "timeout: 15m\n";
  }

  // Sandbox-plane request through abxd's proxy (the SDK's routing headers).
  http::Response through_proxy(const std::string& id, int port, bhttp::verb verb,
                               const std::string& target, const std::string& body,
                               const std::string& token,
                               std::vector<std::pair<std::string, std::string>> headers = {}) {
    auto req = http::make_request(verb, target, body);
    if (body.empty() && verb != bhttp::verb::post) req.erase(bhttp::field::content_type);
    req.set("E2b-Sandbox-Id", id);
    req.set("E2b-Sandbox-Port", std::to_string(port));
    if (!token.empty()) req.set("X-Access-Token", token);
    for (auto& [k, v] : headers) req.set(k, v);
    auto r = http::fetch("127.0.0.1", port_(), std::move(req), 30s);
    if (!r.ok()) {
      http::Response e;
      e.result(599);
      e.body() = r.error().message();
      return e;
    }
    return *r;
  }
  std::uint16_t port_() { return abxd().port(); }

  // GET /files as `user` ("" : no username).
  http::Response files_get(const std::string& id, const std::string& token, const std::string& path,
                           const std::string& user) {
    std::string t = "/files?path=" + url_encode(path);
    if (!user.empty()) t += "&username=" + user;
    return through_proxy(id, 49983, bhttp::verb::get, t, "", token);
  }
  http::Response files_post(const std::string& id, const std::string& token,
                            const std::string& path, const std::string& user,
                            const std::string& data) {
    std::string t = "/files?path=" + url_encode(path);
    if (!user.empty()) t += "&username=" + user;
    auto req = http::make_request(bhttp::verb::post, t, data, "application/octet-stream");
    req.set("E2b-Sandbox-Id", id);
    req.set("E2b-Sandbox-Port", "49983");
    req.set("X-Access-Token", token);
    auto r = http::fetch("127.0.0.1", port_(), std::move(req), 30s);
    if (!r.ok()) {
      http::Response e;
      e.result(599);
      return e;
    }
    return *r;
  }
  http::Response rpc(const std::string& id, const std::string& token, const std::string& method,
                     const std::string& body, const std::string& user) {
    std::vector<std::pair<std::string, std::string>> h;
    if (!user.empty()) h.emplace_back("Authorization", "Basic " + basic(user));
    h.emplace_back("Connect-Protocol-Version", "1");
    return through_proxy(id, 49983, bhttp::verb::post, method, body, token, h);
  }
  static std::string basic(const std::string& user) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string in = user + ":", out;
    for (size_t i = 0; i < in.size(); i += 3) {
      unsigned v = static_cast<unsigned char>(in[i]) << 16;
      if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
      if (i + 2 < in.size()) v |= static_cast<unsigned char>(in[i + 2]);
      out += t[(v >> 18) & 63];
      out += t[(v >> 12) & 63];
      out += i + 1 < in.size() ? t[(v >> 6) & 63] : '=';
      out += i + 2 < in.size() ? t[v & 63] : '=';
    }
    return out;
  }
  static std::string url_encode(const std::string& s) {
    std::string o;
    char b[4];
    for (unsigned char c : s) {
      if (isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
        o += static_cast<char>(c);
      } else {
        snprintf(b, sizeof b, "%%%02X", c);
        o += b;
      }
    }
    return o;
  }

  // envd Process/Start with a pty (a Connect server stream, one envelope in): the process's exit
  // code from the `end` event (-1 when there was none) and a short account.
  std::pair<int, std::string> pty_start(const std::string& id, const std::string& token,
                                        const std::string& user,
                                        const std::vector<std::string>& argv) {
    json::object proc{{"cmd", argv[0]}};
    json::array args;
    for (size_t i = 1; i < argv.size(); ++i) args.emplace_back(argv[i]);
    proc["args"] = std::move(args);
    json::object msg{{"process", std::move(proc)},
                     {"pty", json::object{{"size", json::object{{"cols", 80}, {"rows", 24}}}}},
                     {"stdin", false}};
    std::string j = json::serialize(msg), body(5, '\0');
    body[0] = 0;
    for (int i = 0; i < 4; ++i) body[1 + i] = static_cast<char>((j.size() >> (8 * (3 - i))) & 0xff);
    body += j;
    auto req = http::make_request(bhttp::verb::post, "/process.Process/Start", body,
                                  "application/connect+json");
    req.set("E2b-Sandbox-Id", id);
    req.set("E2b-Sandbox-Port", "49983");
    req.set("X-Access-Token", token);
    req.set("Connect-Protocol-Version", "1");
    req.set("Authorization", "Basic " + basic(user));
    auto r = http::fetch("127.0.0.1", port_(), std::move(req), 60s);
    if (!r.ok()) return {-1, "start failed: " + r.error().message()};
    const std::string& b = r->body();
    int code = -1;
    std::string detail = std::to_string(r->result_int());
    for (size_t at = 0; at + 5 <= b.size();) {
      size_t len = (static_cast<unsigned char>(b[at + 1]) << 24) |
                   (static_cast<unsigned char>(b[at + 2]) << 16) |
                   (static_cast<unsigned char>(b[at + 3]) << 8) |
                   static_cast<unsigned char>(b[at + 4]);
      if (at + 5 + len > b.size()) break;
      boost::system::error_code ec;
      auto v = json::parse(b.substr(at + 5, len), ec);
      at += 5 + len;
      if (ec || !v.is_object()) continue;
      const auto* ev = v.as_object().if_contains("event");
      if (!ev || !ev->is_object()) continue;
      if (const auto* end = ev->as_object().if_contains("end"); end && end->is_object()) {
        const auto* c = end->as_object().if_contains("exitCode");
        code = c && c->is_number() ? c->to_number<int>() : 0;
      }
    }
    return {code, detail + " exit " + std::to_string(code)};
  }

  // Raw request through the proxy; the status line and whether the proxy closed afterwards.
  std::pair<std::string, bool> raw_proxy(const std::string& id, int port, const std::string& token,
                                         const std::string& extra) {
    auto fd = testing::connect_raw(port_(), std::chrono::seconds(5));
    if (!fd.valid()) return {"connect failed", false};
    std::string req = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nE2b-Sandbox-Id: " + id +
                      "\r\nE2b-Sandbox-Port: " + std::to_string(port) +
                      "\r\nX-Access-Token: " + token + "\r\n" + extra + "\r\n";
    if (::write(fd.get(), req.data(), req.size()) != static_cast<ssize_t>(req.size()))
      return {"write failed", false};
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    std::string status = got.substr(0, got.find("\r\n"));
    // Closed: EOF after the head (a body of the 502 may come first) within about 3 s.
    timeval tv{1, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    bool closed = false;
    for (int i = 0; i < 3; ++i) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n == 0) {
        closed = true;
        break;
      }
      if (n < 0) break;  // timeout: still open
    }
    return {status, closed};
  }
};

// The python3 services the proxy and lateral probes talk to. Port 8080 echoes the request head
// as the body; 8081 answers every request with an unsolicited 101 and holds the connection;
// with an abstract name, a listener on that abstract unix socket too.
std::string services_py(const std::string& abstract_name, int echo_port) {
  std::string py =
      "import socket,threading\n"
      "def echo(c):\n"
      "  d=b''\n"
      "  while b'\\r\\n\\r\\n' not in d:\n"
      "    x=c.recv(65536)\n"
      "    if not x: break\n"
      "    d+=x\n"
      "  h=d.split(b'\\r\\n\\r\\n')[0]\n"
      "  c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\nConnection: close\\r\\n"
      "Content-Length: %d\\r\\n\\r\\n'%len(h)+h)\n"
      "  c.close()\n"
      "def up(c):\n"
      "  d=b''\n"
      "  while b'\\r\\n\\r\\n' not in d:\n"
      "    x=c.recv(65536)\n"
      "    if not x: break\n"
      "    d+=x\n"
      "  c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nConnection: Upgrade\\r\\n"
      "Upgrade: websocket\\r\\n\\r\\n')\n"
      "  try:\n"
      "    while c.recv(65536): pass\n"
      "  except Exception: pass\n"
      "  c.close()\n"
      "def serve(fam,addr,h):\n"
      "  s=socket.socket(fam,socket.SOCK_STREAM)\n"
      "  if fam==socket.AF_INET: s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
      "  s.bind(addr); s.listen(64)\n"
      "  while True:\n"
      "    c,_=s.accept()\n"
      "    threading.Thread(target=h,args=(c,),daemon=True).start()\n"
      "ts=[threading.Thread(target=serve,args=(socket.AF_INET,('0.0.0.0'," +
      std::to_string(echo_port) +
      "),echo)),threading.Thread(target=serve,args=(socket.AF_INET,('0.0.0.0',8081),up))]\n";
  if (!abstract_name.empty())
    py += "ts.append(threading.Thread(target=serve,args=(socket.AF_UNIX,'\\0" + abstract_name +
          "',echo)))\n";
  py += "[t.start() for t in ts]\n[t.join() for t in ts]\n";
  return py;
}

// Host-side resources the probes look for, removed when the test ends.
struct HostFixtures {
  std::string tag = random_tag();
  fs::path dir;  // 0755 directory under /tmp for host controls that run as other uids
  std::string marker_content = "abx-boundary-host-marker-" + tag + "\n";
  std::vector<fs::path> markers;
  int tcp = -1, tcp_any = -1, abstract_sock = -1, path_sock = -1;
  std::uint16_t tcp_port = 0, tcp_any_port = 0;
  std::string abstract_name = "abx-boundary-host-" + tag;
  fs::path unix_path;
  std::vector<fs::path> cgroups;

  HostFixtures() {
    char tmpl[] = "/tmp/abx-boundary-XXXXXX";
    dir = mkdtemp(tmpl);
    fs::permissions(dir, fs::perms(0755));
    for (fs::path p :
         {fs::path("/etc"), fs::path("/tmp"), fs::path("/root"), fs::path("/var/tmp")}) {
      fs::path m = p / ("abx-boundary-" + tag);
      std::ofstream(m) << marker_content;
      markers.push_back(m);
    }
    tcp = listen_tcp(INADDR_LOOPBACK, &tcp_port);
    tcp_any = listen_tcp(INADDR_ANY, &tcp_any_port);
    abstract_sock = listen_unix(abstract_name, true);
    unix_path = dir / ("host-" + tag + ".sock");
    path_sock = listen_unix(unix_path.string(), false);
  }
  ~HostFixtures() {
    for (int fd : {tcp, tcp_any, abstract_sock, path_sock})
      if (fd >= 0) close(fd);
    for (const auto& m : markers) fs::remove(m);
    for (const auto& c : cgroups) ::rmdir(c.c_str());
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  static int listen_tcp(in_addr_t addr, std::uint16_t* port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(addr);
    socklen_t len = sizeof a;
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 64) != 0 ||
        getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return -1;
    *port = ntohs(a.sin_port);
    return s;
  }
  static int listen_unix(const std::string& name, bool abstract) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + (abstract ? 1 : 0), name.data(), name.size());
    socklen_t len =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 1 : 0));
    if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(s, 64) != 0) return -1;
    return s;
  }
  // A fresh cgroup for a host control, below this process's own, with one limit: `file` of
  // cgroup v1's `controller` hierarchy, else (a unified-only host) `v2_file` below the v2
  // cgroup. Its cgroup.procs ("" when none could be made: the control then fails, reported).
  std::string cgroup(const std::string& controller, const std::string& file,
                     const std::string& v2_file, const std::string& value) {
    std::ifstream f("/proc/self/cgroup");
    std::string base, limit = file;
    for (std::string line; std::getline(f, line);) {
      auto a = line.find(':'), b = line.find(':', a + 1);
      std::string ctrls = line.substr(a + 1, b - a - 1);
      if (ctrls == controller) base = "/sys/fs/cgroup/" + controller + line.substr(b + 1);
      if (ctrls.empty() && base.empty() && fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
        base = "/sys/fs/cgroup" + line.substr(b + 1);
        limit = v2_file;
      }
    }
    if (base.empty()) return {};
    fs::path cg = fs::path(base) / ("abx-boundary-" + tag + "-" + controller);
    std::error_code ec;
    fs::create_directories(cg, ec);
    cgroups.push_back(cg);
    std::ofstream(cg / limit) << value;
    return (cg / "cgroup.procs").string();
  }
};

std::string host_ipv4() {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return {};
  std::string out;
  for (auto* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    auto* a = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    if (ntohl(a->sin_addr.s_addr) >> 24 == 127) continue;
    char b[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, b, sizeof b);
    out = b;
    break;
  }
  freeifaddrs(ifs);
  return out;
}

bool selected(const std::string& name) {
  const char* f = std::getenv("ABX_BOUNDARY_PROBES");
  if (!f || !*f) return true;
  std::stringstream ss(f);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty() && name.find(part) != std::string::npos) return true;
  return false;
}

struct Tally {
  int not_held = 0, not_exercising = 0, errors = 0;
};

// Runs every selected probe (host control, then each sandbox context) and prints the lines and
// the summary. A probe counts as held only when its host control succeeded and no context
// succeeded; one whose control failed is "not exercising"; one that could not be run in the
// sandbox at all (envd refused, the sandbox is gone) is an error, never a vacuous "held".
Tally run_and_report(std::vector<Probe>& probes) {
  const bool verbose = std::getenv("ABX_BOUNDARY_VERBOSE") != nullptr;
  int n = 0, held = 0, escapes = 0, leaks = 0, lateral = 0;
  std::vector<std::string> lines, not_exercising, not_applicable, failed, errors;
  for (auto& p : probes) {
    if (!selected(p.name)) continue;
    Outcome h = p.host();
    if (h.not_applicable) {
      not_applicable.push_back(p.name);
      lines.push_back("[n/a]    " + p.name + " (" + p.cls + "): " + h.detail);
      continue;
    }
    ++n;
    std::string line = p.name + " (" + p.cls + "): host " + (h.succeeded ? "ok" : "FAILED") + " [" +
                       h.detail + "]";
    bool bad = false, error = false;
    for (Who w : p.who) {
      Outcome o = p.sandbox(w);
      line += std::string("; ") + who_name(w) + ": " +
              (o.error       ? "ERROR"
               : o.succeeded ? "SUCCEEDED"
                             : "held") +
              " [" + o.detail + "]";
      bad = bad || o.succeeded;
      error = error || o.error;
    }
    std::string tag;
    if (bad) {
      failed.push_back(p.name);
      (p.impact == Impact::kEscape ? escapes : p.impact == Impact::kHostLeak ? leaks : lateral)++;
      tag = p.impact == Impact::kEscape     ? "[ESCAPE] "
            : p.impact == Impact::kHostLeak ? "[LEAK]   "
                                            : "[LATERAL]";
    } else if (error) {
      errors.push_back(p.name);
      tag = "[ERROR]  ";
    } else if (!h.succeeded) {
      not_exercising.push_back(p.name);
      tag = "[NOCTRL] ";
    } else {
      ++held;
      tag = "[held]   ";
    }
    lines.push_back(tag + " " + line);
  }
  bool problems = !failed.empty() || !not_exercising.empty() || !errors.empty();
  if (verbose || problems)
    for (const auto& l : lines) std::cout << l << "\n";
  std::cout << "boundary: " << n << " probes, " << held << " held, " << escapes << " escapes, "
            << leaks << " host leaks, " << lateral << " lateral\n";
  auto list = [](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    std::cout << "boundary: " << names.size() << " " << what << ":";
    for (const auto& s : names) std::cout << " " << s;
    std::cout << "\n";
  };
  list("not held", failed);
  list("not exercising anything (host control failed)", not_exercising);
  list("could not run in the sandbox", errors);
  list("not applicable on this kernel (skipped)", not_applicable);
  std::cout.flush();
  return {static_cast<int>(failed.size()), static_cast<int>(not_exercising.size()),
          static_cast<int>(errors.size())};
}

TEST_F(BoundaryTest, EveryProbeHolds) {
  HostFixtures hf;
  ASSERT_GE(hf.tcp, 0);
  const std::string probe_bytes = slurp(ABX_BOUNDARY_PROBE);
  ASSERT_FALSE(probe_bytes.empty());

  client::ConnectionConfig cfg;
  cfg.api_url = abxd().url();
  cfg.api_key = abxd().api_key();
  cfg.home = home();
  cfg.request_timeout = 120s;
  client::CreateOptions co;
  co.timeout = 900s;
  auto ca = client::Sandbox::create("boundary", co, cfg);
  ASSERT_TRUE(ca.ok()) << ca.error().message();
  auto cb = client::Sandbox::create("boundary", co, cfg);
  ASSERT_TRUE(cb.ok()) << cb.error().message();
  client::Sandbox A = *ca, B = *cb;
  const std::string ida = A.id(), idb = B.id();
  const std::string ta = A.cached_info().envd_access_token, tb = B.cached_info().envd_access_token;

  // The probe binary in both sandboxes, executable by root and user.
  for (client::Sandbox* sb : {&A, &B}) {
    auto w = sb->files().write(std::string(kProbe), probe_bytes);
    ASSERT_TRUE(w.ok()) << w.error().message();
    client::CommandOptions o;
    o.user = "root";
    auto c = sb->commands().run_argv({"/bin/chmod", "-R", "a+rwX,+t", kProbeDir}, o);
    ASSERT_TRUE(c.ok() && c->exit_code == 0);
    c = sb->commands().run_argv({"/bin/chmod", "0755", kProbe}, o);
    ASSERT_TRUE(c.ok() && c->exit_code == 0);
  }

  // Host pids of the two inits (abxd's record: "<pid> <starttime> <cgroup parent>").
  auto init_pid = [&](const std::string& id) {
    std::ifstream f(home() / "sandboxes" / id / "init");
    pid_t pid = 0;
    f >> pid;
    return pid;
  };
  const pid_t a_pid = init_pid(ida), b_pid = init_pid(idb);
  ASSERT_GT(a_pid, 1);
  ASSERT_GT(b_pid, 1);
  const std::string a_root = "/proc/" + std::to_string(a_pid) + "/root";
  const std::string b_root = "/proc/" + std::to_string(b_pid) + "/root";

  // Services: A echoes on 8080 and answers 101 on 8081; B echoes on 8090 and holds an
  // abstract socket; B has a root-only secret file.
  const std::string b_abstract = "abx-boundary-b-" + hf.tag;
  const std::string b_secret = "abx-boundary-b-secret-" + hf.tag;
  ASSERT_TRUE(A.files().write("/tmp/abx-boundary/services.py", services_py("", 8080)).ok());
  ASSERT_TRUE(B.files().write("/tmp/abx-boundary/services.py", services_py(b_abstract, 8090)).ok());
  ASSERT_TRUE(B.files().write("/tmp/abx-boundary/b-secret", b_secret).ok());
  std::vector<client::CommandHandle> services;
  for (client::Sandbox* sb : {&A, &B}) {
    client::CommandOptions o;
    o.user = "user";
    o.timeout = 0ms;
    auto h = sb->commands().start("exec python3 /tmp/abx-boundary/services.py", o);
    ASSERT_TRUE(h.ok()) << h.error().message();
    services.push_back(std::move(*h));
  }
  {
    client::CommandOptions o;
    o.user = "root";
    auto c = B.commands().run_argv({"/bin/chmod", "0600", "/tmp/abx-boundary/b-secret"}, o);
    ASSERT_TRUE(c.ok() && c->exit_code == 0);
    c = A.commands().run(
        "mkdir -p /root && echo abx-root-only > /root/abx-root-only && chmod 0600 "
        "/root/abx-root-only && ln -sfn /etc/abx-boundary-" +
            hf.tag +
            " /tmp/abx-boundary/l-final && ln -sfn / /tmp/abx-boundary/l-root && ln -sfn "
            "/etc/abx-boundary-w-" +
            hf.tag +
            " /tmp/abx-boundary/l-write && ln -sfn /proc/sys/kernel/core_pattern "
            "/tmp/abx-boundary/l-core && ln -sfn /sys/kernel/mm/ksm/run /tmp/abx-boundary/l-sys",
        o);
    ASSERT_TRUE(c.ok() && c->exit_code == 0) << (c.ok() ? c->stderr_data : c.error().message());
  }
  auto wait_http = [&](const std::string& id, int port, const std::string& token) {
    for (int i = 0; i < 200; ++i) {
      if (through_proxy(id, port, bhttp::verb::get, "/", "", token).result_int() == 200)
        return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  };
  ASSERT_TRUE(wait_http(ida, 8080, ta)) << "A's echo service did not come up";
  ASSERT_TRUE(wait_http(idb, 8090, tb)) << "B's echo service did not come up";

  // Would exhausting a per-uid kernel count (inotify instances, queued signals) inside A take it
  // from the host? Yes when A has no user namespace of its own (its uids are the host's), and
  // also when host root owns A's user namespace: the kernel charges each count to every level
  // of the user-namespace tree, the owner's uid in the parent included. Then the probe is not
  // run (it would starve the host and every sandbox on this machine) and counts as an escape.
  const std::string uid_sharing = [&]() -> std::string {
    struct stat mine {
    }, theirs{};
    std::string ns = "/proc/" + std::to_string(a_pid) + "/ns/user";
    if (::stat("/proc/self/ns/user", &mine) != 0 || ::stat(ns.c_str(), &theirs) != 0)
      return "cannot compare user namespaces";
    if (mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev)
      return "no user namespace: sandbox uids are the host's same uids";
    int fd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    uid_t owner = 0;
    int rc = fd < 0 ? -1 : ::ioctl(fd, NS_GET_OWNER_UID, &owner);
    if (fd >= 0) ::close(fd);
    if (rc != 0) return "cannot read the user namespace's owner";
    if (owner == 0) return "host root owns the user namespace: its counts are charged to host root";
    return {};
  }();

  const std::string bin_abx_envd_host = [] {
    // The bundle abxd binds at /opt/abx (build/<preset>/bundle beside abxd).
    fs::path p = fs::path(testing::abxd_bin()).parent_path().parent_path().parent_path() /
                 "bundle/bin/abx-envd";
    return p.string();
  }();
  const std::string bundle_lib_host =
      fs::path(bin_abx_envd_host).parent_path().parent_path() / "lib";
  // A's memory limit seen from the host (cgroup v1's memory hierarchy, else v2).
  const std::string a_memory_limit_host = [&] {
    std::ifstream f("/proc/" + std::to_string(a_pid) + "/cgroup");
    std::string v1, v2, line;
    while (std::getline(f, line)) {
      auto a = line.find(':'), b = line.find(':', a + 1);
      std::string ctrls = line.substr(a + 1, b - a - 1);
      if (ctrls == "memory")
        v1 = "/sys/fs/cgroup/memory" + line.substr(b + 1) + "/memory.limit_in_bytes";
      if (ctrls.empty()) v2 = "/sys/fs/cgroup" + line.substr(b + 1) + "/memory.max";
    }
    return v1.empty() ? v2 : v1;
  }();

  // --- the table ---
  std::vector<Probe> probes;
  // A binary probe: the same attempt on the host (host_args) and in A (box_args).
  auto bin = [&](std::string name, std::string cls, Impact impact,
                 std::vector<std::string> host_args, std::vector<std::string> box_args,
                 std::vector<Who> who = {Who::kRoot, Who::kUser}, HostOpts ho = {}) {
    Probe p;
    p.name = std::move(name);
    p.cls = std::move(cls);
    p.impact = impact;
    p.host = [host_args, ho] { return of(host_run(host_args, ho)); };
    p.sandbox = [&A, box_args](Who w) { return of(sandbox_run(A, w, box_args)); };
    p.who = std::move(who);
    probes.push_back(std::move(p));
  };
  auto same = [&](std::string name, std::string cls, Impact impact, std::vector<std::string> args,
                  std::vector<Who> who = {Who::kRoot, Who::kUser}) {
    bin(std::move(name), std::move(cls), impact, args, args, std::move(who));
  };
  const std::string self = std::to_string(getpid());
  const std::string apid = std::to_string(a_pid), bpid = std::to_string(b_pid);
  const auto E = Impact::kEscape, L = Impact::kHostLeak, X = Impact::kLateral;
  const std::vector<Who> root_only{Who::kRoot}, user_only{Who::kUser};

  // E1: host binaries through /proc/<pid>/exe; /opt/abx read-only.
  bin("e1.exe_write_pid1", "E1", E, {"exe-write", "self"}, {"exe-write", "1"});
  bin("e1.exe_reopen_pid1", "E1", E, {"exe-reopen", "self"}, {"exe-reopen", "1"});
  {
    // Host control: a process whose binary is no longer reachable by its name.
    Probe p{"e1.exe_foreign", "E1", E, nullptr, nullptr};
    p.host = [&] {
      fs::path copy = hf.dir / "unreachable-probe";
      fs::copy_file(ABX_BOUNDARY_PROBE, copy, fs::copy_options::overwrite_existing);
      HostProc sleeper({copy.string(), "sleep", "20"});
      std::this_thread::sleep_for(100ms);
      fs::remove(copy);
      return of(host_run({"exe-foreign"}));
    };
    p.sandbox = [&](Who w) { return of(sandbox_run(A, w, {"exe-foreign"})); };
    probes.push_back(p);
  }
  bin("e1.opt_abx_binary_writable", "E1", E, {"open-write", bin_abx_envd_host},
      {"open-write", "/opt/abx/bin/abx-envd"});
  bin("e1.opt_abx_create", "E1", E, {"create-in", bundle_lib_host}, {"create-in", "/opt/abx/lib"});

  // E2: leaked descriptors and directories.
  {
    HostOpts leak;
    leak.leak_fd = true;
    bin("e2.exec_inherits_fds", "E2", E, {"fds"}, {"fds"}, {Who::kRoot, Who::kUser}, leak);
  }
  {
    Probe p{"e2.pid1_foreign_fds", "E2", E, nullptr, nullptr};
    p.host = [&] {
      HostProc holder(probe_argv({"hold-unlinked", hf.dir.string(), "20"}));
      holder.wait_for("ready", 5s);
      return of(host_run({"fds-of", std::to_string(holder.pid())}));
    };
    p.sandbox = [&](Who w) { return of(sandbox_run(A, w, {"fds-of", "1"})); };
    probes.push_back(p);
  }
  {
    Probe p{"e2.exec_cwd_proc_self_fd", "E2", E, nullptr, nullptr};
    p.host = [&] {
      // The directory is removed after the child chdir()s into it: its cwd is unreachable.
      fs::path d2 = hf.dir / "gone2";
      fs::create_directories(d2);
      pid_t pid = fork();
      if (pid == 0) {
        if (chdir(d2.c_str()) != 0 || rmdir(d2.c_str()) != 0) _exit(96);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(ABX_BOUNDARY_PROBE, ABX_BOUNDARY_PROBE, "cwd-check", static_cast<char*>(nullptr));
        _exit(99);
      }
      int st = 0;
      waitpid(pid, &st, 0);
      ProbeRun r;
      r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      return of(r);
    };
    p.sandbox = [&](Who w) {
      Outcome o;
      for (int n = 3; n <= 12; ++n) {
        ProbeRun r = sandbox_run(A, w, {"cwd-check"}, "/proc/self/fd/" + std::to_string(n));
        o.detail += "fd" + std::to_string(n) + ":" + (r.ok() ? "ESCAPED " : "held ");
        if (r.ok()) o.succeeded = true;
      }
      return o;
    };
    probes.push_back(p);
  }
  bin("e2.pid1_root_is_ours", "E2", E, {"root-differs", apid}, {"root-differs", "1"});
  bin("e2.pid1_cwd_is_ours", "E2", E, {"cwd-differs", apid}, {"cwd-differs", "1"});

  // E3: /proc writes redirected through symlinks and devices.
  {
    fs::path l1 = hf.dir / "l-core", l2 = hf.dir / "l-sys";
    fs::create_symlink("/proc/sys/kernel/core_pattern", l1);
    fs::create_symlink("/sys/kernel/mm/ksm/run", l2);
    bin("e3.symlink_to_core_pattern", "E3", E, {"open-write", l1.string()},
        {"open-write", "/tmp/abx-boundary/l-core"});
    bin("e3.symlink_to_sys_knob", "E3", E, {"open-write", l2.string()},
        {"open-write", "/tmp/abx-boundary/l-sys"});
  }
  same("e3.dev_console_write", "E3", E, {"open-write", "/dev/console"});
  same("e3.proc_sys_vm_write", "E3", E, {"open-write", "/proc/sys/vm/drop_caches"});

  // E4: kernel knobs and kernel memory.
  same("e4.sysrq_trigger", "E4", E, {"open-write", "/proc/sysrq-trigger"});
  same("e4.core_pattern", "E4", E, {"open-write", "/proc/sys/kernel/core_pattern"});
  same("e4.kernel_panic_knob", "E4", E, {"open-write", "/proc/sys/kernel/panic"});
  same("e4.sys_write", "E4", E, {"open-write", "/sys/kernel/mm/transparent_hugepage/enabled"});
  same("e4.sys_ksm_run", "E4", E, {"open-write", "/sys/kernel/mm/ksm/run"});
  bin("e4.mount_proc", "E4", E, {"mount-proc", hf.dir.string()}, {"mount-proc", kProbeDir});
  same("e4.proc_kcore", "E4", L, {"read", "/proc/kcore"});
  same("e4.proc_keys", "E4", L, {"read", "/proc/keys"});
  same("e4.proc_kallsyms", "E4", L, {"kallsyms"});
  same("e4.dev_kmsg", "E4", L, {"read", "/dev/kmsg"});
  bin("e4.mknod_dev_kmsg", "E4", L, {"mknod-kmsg", hf.dir.string()}, {"mknod-kmsg", kProbeDir});
  bin("e4.own_cgroup_limit", "E4", E, {"open-write-any", a_memory_limit_host},
      {"open-write-any", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max",
       "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"});

  // E5: terminal injection.
  same("e5.tiocsti", "E5", E, {"tiocsti"});
  same("e5.tiocsti_bit32", "E5", E, {"tiocsti", "high"});
  same("e5.tioclinux", "E5", E, {"tioclinux"});

  {
    // A PTY exec (envd's Process/Start with `pty`) gets a pty of the sandbox's own devpts.
    Probe p{"e5.pty_exec_gets_own_pty", "E5", E, nullptr, nullptr};
    p.host = [&] {
      fs::create_directories(hf.dir / "pts2");
      return of(host_run({"foreign-pty-exec", (hf.dir / "pts2").string()}));
    };
    p.sandbox = [&](Who w) {
      auto [code, detail] = pty_start(ida, ta, who_name(w), {kProbe, "tty-foreign"});
      Outcome o{code == 0, detail};
      o.error = code != 0 && code != 1;  // 4: no tty at all; -1: no end event
      return o;
    };
    probes.push_back(p);
  }

  // E6: the filter on every thread; the other syscall entries.
  same("e6.seccomp_every_thread", "E6", E, {"seccomp-threads"});
  same("e6.unshare_newuser_i386", "E6", E, {"syscall", "unshare_newuser_i386"});
  same("e6.mount_i386", "E6", E, {"syscall", "mount_i386"});
  same("e6.unshare_newuser_x32", "E6", E, {"syscall", "unshare_newuser_x32"});
  same("e6.keyctl_x32", "E6", E, {"syscall", "keyctl_x32"});

  // E7: kernel attack surface.
  for (const char* sc : {"unshare_newuser", "clone_newuser", "io_uring_setup", "bpf", "userfaultfd",
                         "perf_event_open", "keyctl", "add_key", "kexec_load", "finit_module",
                         "reboot", "setns", "pivot_root", "swapon", "open_by_handle_at"})
    same(std::string("e7.") + sc, "E7", E, {"syscall", sc});
  {
    Probe p{"e7.ptrace_non_child", "E7", E, nullptr, nullptr};
    p.host = [&] {
      HostProc s(probe_argv({"sleep", "20"}));
      return of(host_run({"ptrace-attach", std::to_string(s.pid())}));
    };
    p.sandbox = [&](Who w) { return of(sandbox_run(A, w, {"ptrace-attach", "1"})); };
    probes.push_back(p);
  }

  // E8: capabilities, setuid, the uid map.
  bin("e8.inheritable_ambient_caps", "E8", E, {"with-ambient", "caps-inheritable"},
      {"caps-inheritable"});
  same("e8.bounding_set", "E8", E, {"caps-bounding"});
  same("e8.user_has_no_caps", "E8", E, {"caps-effective"}, user_only);
  {
    Probe p{"e8.setuid_binary_gains_host_root", "E8", E, nullptr, nullptr};
    p.host = [&] {
      return of(host_run({"setuid-gain", hf.dir.string(), std::to_string(kHostNobody)}));
    };
    // Root makes the setuid-root copy (and its child drops to 1000); then user runs it.
    p.sandbox = [&](Who w) { return of(sandbox_run(A, w, {"setuid-gain", kProbeDir, "1000"})); };
    probes.push_back(p);
  }
  same("e8.sandbox_root_is_host_root", "E8", E, {"uid-map"});
  {
    // The image's passwordless sudo gives `user` the sandbox's root (as in E2B), never the
    // host's: the escape is euid 0 under an identity uid map. Host control: a setuid-root binary
    // run by an unprivileged host uid is host root by that same check.
    Probe p{"e8.sudo_gains_host_root", "E8", E, nullptr, nullptr, user_only};
    p.host = [&] {
      return of(host_run({"setuid-gain", hf.dir.string(), std::to_string(kHostNobody)}));
    };
    p.sandbox = [&](Who w) {
      client::CommandOptions o;
      o.user = who_name(w);
      auto r = A.commands().run_argv({"/usr/bin/sudo", "-n", kProbe, "host-root"}, o);
      if (!r.ok()) return Outcome{false, r.error().message(), false, true};
      return Outcome{r->exit_code == 0, "exit " + std::to_string(r->exit_code) + ": " +
                                            r->stdout_data.substr(0, 60) +
                                            r->stderr_data.substr(0, 80)};
    };
    probes.push_back(p);
  }

  // E9: the files API never reaches the host (a host marker file), nor root-only files for the
  // default user. Host control: the marker is there on the host.
  const std::string etc_marker = "/etc/abx-boundary-" + hf.tag;
  auto host_marker = [&] {
    return Outcome{slurp(etc_marker) == hf.marker_content, "host reads " + etc_marker};
  };
  auto files_probe = [&](std::string name, std::string path) {
    Probe p{std::move(name), "E9", L, host_marker, nullptr};
    p.sandbox = [&, path](Who w) {
      auto r = files_get(ida, ta, path, who_name(w));
      bool leak = r.result_int() == 200 && r.body() == hf.marker_content;
      return Outcome{leak, std::to_string(r.result_int())};
    };
    probes.push_back(p);
  };
  files_probe("e9.files_absolute_host_path", etc_marker);
  files_probe("e9.files_dotdot", "../../../../../../.." + etc_marker);
  files_probe("e9.files_final_symlink", "/tmp/abx-boundary/l-final");
  files_probe("e9.files_dir_symlink_to_root", "/tmp/abx-boundary/l-root" + etc_marker);
  files_probe("e9.files_proc_self_root", "/proc/self/root" + etc_marker);
  files_probe("e9.files_proc_1_root", "/proc/1/root" + etc_marker);
  files_probe("e9.files_proc_self_cwd", "/proc/self/cwd/../../../../../.." + etc_marker);
  {
    // Writes through a planted symlink (final, and a directory symlink to /) never create the
    // host path. Host control: host root can create it.
    const std::string w1 = "/etc/abx-boundary-w-" + hf.tag, w2 = "/tmp/abx-boundary-w2-" + hf.tag;
    hf.markers.push_back(w1);
    hf.markers.push_back(w2);
    auto host_can_create = [](std::string path) {
      return [path] {
        std::ofstream(path) << "x";
        bool ok = fs::exists(path);
        fs::remove(path);
        return Outcome{ok, "host creates " + path};
      };
    };
    Probe p{"e9.files_write_final_symlink", "E9", E, host_can_create(w1), nullptr};
    p.sandbox = [&, w1](Who w) {
      auto r = files_post(ida, ta, "/tmp/abx-boundary/l-write", who_name(w), "abx");
      bool esc = fs::exists(w1);
      fs::remove(w1);
      return Outcome{esc, std::to_string(r.result_int())};
    };
    probes.push_back(p);
    Probe q{"e9.files_write_dir_symlink", "E9", E, host_can_create(w2), nullptr};
    q.sandbox = [&, w2](Who w) {
      auto r = files_post(ida, ta, "/tmp/abx-boundary/l-root" + w2, who_name(w), "abx");
      bool esc = fs::exists(w2);
      fs::remove(w2);
      return Outcome{esc, std::to_string(r.result_int())};
    };
    probes.push_back(q);
  }
  {
    Probe p{"e9.files_listdir_proc_1_root_etc", "E9", L, nullptr, nullptr};
    const std::string name = "abx-boundary-" + hf.tag;
    p.host = [&, name] { return Outcome{fs::exists("/etc/" + name), "host lists /etc"}; };
    p.sandbox = [&, name](Who w) {
      bool leak = false;
      std::string d;
      for (std::string dir : {"/proc/1/root/etc", "/tmp/abx-boundary/l-root/etc", "/etc"}) {
        auto r = rpc(ida, ta, "/filesystem.Filesystem/ListDir",
                     R"({"path":")" + dir + R"(","depth":1})", who_name(w));
        d += dir + ":" + std::to_string(r.result_int()) + " ";
        if (r.body().find(name) != std::string::npos) leak = true;
      }
      return Outcome{leak, d};
    };
    probes.push_back(p);
  }
  {
    // Issue 11: `abx files read <id> ../../../../etc/shadow-` as the default user returned the
    // host's file. Now: never the host's bytes, and never a root-only file for `user`.
    for (const char* f :
         {"/etc/shadow-", "/etc/gshadow-", "/etc/security/opasswd", "/etc/shadow"}) {
      std::string file = f;
      Probe p{"f.files_root_only_as_user" + file, "F", E, nullptr, nullptr, user_only};
      p.host = [file] {
        return Outcome{access(file.c_str(), R_OK) == 0, "host root reads " + file};
      };
      p.sandbox = [&, file](Who w) {
        // As `user` explicitly, and with no username (envd's default user: what `abx files
        // read` sends).
        Outcome o;
        for (std::string u : {std::string(who_name(w)), std::string()}) {
          auto r = files_get(ida, ta, "../../../.." + file, u);
          bool host = r.result_int() == 200 && !r.body().empty() && r.body() == slurp(file);
          o.succeeded = o.succeeded || r.result_int() == 200;
          o.detail += (u.empty() ? "default user " : u + " ") + std::to_string(r.result_int()) +
                      (host ? " (the HOST's bytes) " : " ");
        }
        return o;
      };
      probes.push_back(p);
    }
    Probe p{"f.files_root_only_sandbox_file_as_user", "F", E, nullptr, nullptr, user_only};
    p.host = [&] {
      return Outcome{slurp(a_root + "/root/abx-root-only") == "abx-root-only\n",
                     "host reads it through " + a_root};
    };
    p.sandbox = [&](Who w) {
      auto r = files_get(ida, ta, "/root/abx-root-only", who_name(w));
      return Outcome{r.result_int() == 200, std::to_string(r.result_int())};
    };
    probes.push_back(p);
  }

  // Issue 11: host files in the sandbox (the host's /etc bound in).
  for (const auto& m : hf.markers) {
    if (m.string().find("-w") != std::string::npos) continue;
    Probe p{"f.host_marker" + m.parent_path().string(), "F", L, nullptr, nullptr};
    p.host = [&, m] { return Outcome{slurp(m) == hf.marker_content, "host reads " + m.string()}; };
    p.sandbox = [&, m](Who w) {
      ProbeRun r = sandbox_run(A, w, {"read", m.string()});
      return Outcome{r.out.find(hf.marker_content) != std::string::npos, r.brief()};
    };
    probes.push_back(p);
  }
  for (const char* f : {"/etc/shadow-", "/etc/gshadow-", "/etc/security/opasswd"}) {
    std::string file = f;
    Probe p{"f.host_inode" + file, "F", L, nullptr, nullptr};
    p.host = [file] { return of(host_run({"stat", file})); };
    p.sandbox = [&, file](Who w) {
      ProbeRun in = sandbox_run(A, w, {"stat", file});
      ProbeRun host = host_run({"stat", file});
      return Outcome{in.ok() && in.out == host.out, in.brief()};
    };
    probes.push_back(p);
  }

  // Issue 11: the default user taking over root's envd.
  bin("f.envd_proc_mem", "F", E, {"proc-mem", apid}, {"proc-mem", "1"}, user_only);
  {
    Probe p{"f.envd_pidfd_getfd", "F", E, nullptr, nullptr, user_only};
    p.host = [&] {
      HostProc s(probe_argv({"sleep", "20"}));
      std::this_thread::sleep_for(50ms);
      return of(host_run({"pidfd-getfd", std::to_string(s.pid())}));
    };
    p.sandbox = [&](Who w) { return of(sandbox_run(A, w, {"pidfd-getfd", "1"})); };
    probes.push_back(p);
  }
  {
    Probe p{"f.envd_token_file", "F", E, nullptr, nullptr, user_only};
    p.host = [&] {
      return Outcome{slurp(a_root + "/run/abx/token").find(ta) != std::string::npos,
                     "host reads " + a_root + "/run/abx/token"};
    };
    p.sandbox = [&](Who w) {
      ProbeRun r = sandbox_run(A, w, {"read", "/run/abx/token"});
      return Outcome{r.out.find(ta) != std::string::npos, r.brief().substr(0, 40)};
    };
    probes.push_back(p);
  }
  bin("f.envd_environ", "F", E, {"read", "/proc/" + apid + "/environ"}, {"read", "/proc/1/environ"},
      user_only);
  bin("f.envd_fd_table", "F", E, {"fds-of", apid}, {"fds-of", "1"}, user_only);
  probes.back().host = [&] {
    // Listing another process's descriptors works on the host (the path the probe takes).
    ProbeRun r = host_run({"fds-of", apid});
    return Outcome{r.out.find("fds listed") != std::string::npos, r.brief()};
  };
  probes.back().sandbox = [&](Who w) {
    ProbeRun r = sandbox_run(A, w, {"fds-of", "1"});
    return Outcome{r.out.find("fds listed") != std::string::npos, r.brief()};
  };

  // Issue 11: the proxy (a service in A echoes request heads; another answers 101).
  {
    Probe p{"f.proxy_strips_x_api_key", "F", L, nullptr, nullptr, root_only};
    p.host = [&] {
      auto r = through_proxy(ida, 8080, bhttp::verb::get, "/", "", ta, {{"X-Abx-Probe", "seen"}});
      return Outcome{r.body().find("seen") != std::string::npos, "echo service echoes headers"};
    };
    p.sandbox = [&](Who) {
      auto r = through_proxy(ida, 8080, bhttp::verb::get, "/", "", ta,
                             {{"X-API-KEY", abxd().api_key()}});
      return Outcome{r.body().find(abxd().api_key()) != std::string::npos,
                     std::to_string(r.result_int())};
    };
    probes.push_back(p);
    Probe q = p;
    q.name = "f.proxy_strips_bearer_api_key";
    q.sandbox = [&](Who) {
      auto r = through_proxy(ida, 8080, bhttp::verb::get, "/", "", ta,
                             {{"Authorization", "Bearer " + abxd().api_key()}});
      return Outcome{r.body().find(abxd().api_key()) != std::string::npos,
                     std::to_string(r.result_int())};
    };
    probes.push_back(q);
    Probe u{"f.proxy_unsolicited_101", "F", E, nullptr, nullptr, root_only};
    u.host = [&] {
      auto [status, closed] =
          raw_proxy(ida, 8081, ta, "Connection: Upgrade\r\nUpgrade: websocket\r\n");
      return Outcome{status.find(" 101") != std::string::npos, "solicited: " + status};
    };
    u.sandbox = [&](Who) {
      auto [status, closed] = raw_proxy(ida, 8081, ta, "");
      bool bad = status.find(" 101") != std::string::npos ||
                 status.find(" 502") == std::string::npos || !closed;
      return Outcome{bad, status + (closed ? " (closed)" : " (left open)")};
    };
    probes.push_back(u);
  }

  // E10: host sockets.
  bin("e10.connect_abxd_port", "E10", E, {"connect", std::to_string(abxd().port())},
      {"connect", std::to_string(abxd().port())});
  same("e10.connect_host_loopback", "E10", E, {"connect", std::to_string(hf.tcp_port)});
  if (std::string ip = host_ipv4(); !ip.empty())
    same("e10.connect_host_address", "E10", E, {"connect", std::to_string(hf.tcp_any_port), ip});
  same("e10.host_abstract_socket", "E10", E, {"connect-abstract", hf.abstract_name});
  same("e10.proc_net_unix_lists_host", "E10", L, {"unix-listed", hf.unix_path.filename().string()});

  // E11: sandbox A reaching sandbox B.
  bin("e11.see_b_init", "E11", X, {"see-pid", bpid}, {"see-pid", bpid});
  bin("e11.signal_b_init", "E11", X, {"kill-pid", bpid}, {"kill-pid", bpid});
  bin("e11.ptrace_b_init", "E11", X, {"ptrace-attach", bpid}, {"ptrace-attach", bpid});
  bin("e11.read_b_file_via_proc", "E11", X, {"read", b_root + "/tmp/abx-boundary/b-secret"},
      {"read", b_root + "/tmp/abx-boundary/b-secret"});
  bin("e11.connect_b_port", "E11", X, {"netns-connect", "/proc/" + bpid + "/ns/net", "8090"},
      {"connect", "8090"});
  bin("e11.b_abstract_socket", "E11", X,
      {"connect-abstract", b_abstract, "/proc/" + bpid + "/ns/net"},
      {"connect-abstract", b_abstract});
  {
    auto proxy_probe = [&](std::string name, int port, std::string target, std::string token,
                           int good) {
      Probe p{std::move(name), "E11", X, nullptr, nullptr, root_only};
      p.host = [&, port, target, good] {
        int st = through_proxy(idb, port, bhttp::verb::get, target, "", tb).result_int();
        return Outcome{st == good, "B's own token: " + std::to_string(st)};
      };
      p.sandbox = [&, port, target, token](Who) {
        auto r = through_proxy(idb, port, bhttp::verb::get, target, "", token);
        bool reached = r.result_int() < 400 || r.body().find(b_secret) != std::string::npos;
        return Outcome{reached, std::to_string(r.result_int())};
      };
      probes.push_back(p);
    };
    proxy_probe("e11.proxy_a_token_b_envd", 49983, "/health", ta, 204);
    proxy_probe("e11.proxy_a_token_b_service", 8090, "/", ta, 200);
    proxy_probe("e11.proxy_a_token_b_files", 49983,
                "/files?path=/tmp/abx-boundary/b-secret&username=root", ta, 200);
    proxy_probe("e11.proxy_no_token_b_envd", 49983, "/health", "", 204);
    proxy_probe("e11.proxy_no_token_b_service", 8090, "/", "", 200);
    proxy_probe("e11.proxy_bad_token_b_envd", 49983, "/health", std::string(ta.size(), 'x'), 204);
  }

  // R: resource exhaustion. The probe holds its limit; meanwhile the host and B must work.
  const std::string cg_pids = hf.cgroup("pids", "pids.max", "pids.max", "32");
  const std::string cg_mem = hf.cgroup("memory", "memory.limit_in_bytes", "memory.max", "33554432");
  struct Exhaust {
    std::string name;
    std::vector<std::string> box_args;
    std::vector<std::string> host_args;
    HostOpts host_opts;
    std::vector<std::string> b_check;  // run in B (as the same user) during the hold
    std::function<bool()> host_check;  // on the host during the hold
    bool per_uid;                      // the limit is per (host) uid
    bool host_wide = false;            // the limit is the host's, shared by all
  };
  std::vector<Exhaust> ex = {
      {"r.inotify_instances",
       {"exhaust-inotify", "3"},
       {"drop-to", std::to_string(kHostNobody), "exhaust-inotify", "3"},
       {},
       {"inotify"},
       [] {
         int fd = inotify_init1(IN_CLOEXEC);
         if (fd >= 0) close(fd);
         return fd >= 0;
       },
       true},
      {"r.rt_signal_queue",
       {"exhaust-rtsig", "3"},
       {"drop-to", std::to_string(kHostNobody), "exhaust-rtsig", "3"},
       {},
       {"rtsig-one"},
       [] { return host_run({"rtsig-one"}).ok(); },
       true},
      {"r.ptys",
       {"exhaust-ptys", "3"},
       {"exhaust-ptys", "3", (hf.dir / "pts").string()},
       {},
       {"open-pty"},
       [] { return host_run({"open-pty"}).ok(); },
       false,
       true},
      {"r.pids",
       {"exhaust-pids", "3"},
       {"exhaust-pids", "3"},
       {.cgroup_procs = {cg_pids}},
       {"sleep", "0"},
       [] {
         return host_run({"sleep", "0"}).ok();
       },
       false},
      {"r.memory",
       {"exhaust-mem", "3", "1024"},
       {"exhaust-mem", "3", "256"},
       {.cgroup_procs = {cg_mem}},
       {"sleep", "0"},
       [] {
         return host_run({"sleep", "0"}).ok();
       },
       false},
  };
  fs::create_directories(hf.dir / "pts");
  for (auto& e : ex) {
    Probe p{e.name, "R", E, nullptr, nullptr};
    p.host = [e] {
      HostProc h(probe_argv(e.host_args), e.host_opts);
      ProbeRun r = h.finish(60s);
      return Outcome{r.ok(), r.brief()};
    };
    p.sandbox = [&, e](Who w) {
      if (e.per_uid && !uid_sharing.empty())
        return Outcome{true, "not run: " + uid_sharing +
                                 ", so this would exhaust a host uid's limit for the host and "
                                 "every sandbox"};
      if (e.host_wide) {
        // Without a per-sandbox devpts max= the probe would take the host's pty pool (the
        // kernel's pty/max less pty/reserve) from the host and from every other sandbox on
        // this machine: seen once, it starved both. Run it only once it is bounded.
        ProbeRun d = sandbox_run(A, w, {"devpts-max"});
        if (!d.ok())
          return Outcome{true, "not run: the sandbox's devpts has no max= (" + d.brief() +
                                   "): it can take every pty of the host's pool"};
      }
      SandboxProc sp(A, w, e.box_args);
      if (!sp.wait_for("holding", 60s)) {
        sp.kill();
        ProbeRun r = sp.finish();
        // The memory probe's child may be killed before it prints more; no hold, no check.
        return Outcome{false, "no hold: " + r.brief()};
      }
      std::this_thread::sleep_for(300ms);
      bool host_ok = e.host_check();
      ProbeRun b = sandbox_run(B, w, e.b_check);
      ProbeRun r = sp.finish();
      bool ok = host_ok && b.ok();
      return Outcome{!ok, std::string("host ") + (host_ok ? "usable" : "STARVED") + ", B " +
                              (b.ok() ? "usable" : "STARVED (" + b.brief() + ")") + "; " +
                              r.brief()};
    };
    probes.push_back(p);
  }
  same("r.io_setup_global_aio_pool", "R", E, {"syscall", "io_setup"});

  // ---- Tenants (issue 35): another team's API key on A. Self-contained block. ----------------
  // Team B's key is made with `abxd teams create` / `keys create --team` on this abxd's home;
  // A and B above are the home's first key's (the default team). Host control: A's own key does
  // the same thing and it works. The probe: B's key must get exactly an unknown id's 404.
  // (The probes run after this block: they capture what they use by value.)
  {
    auto admin = [&](std::vector<std::string> args) {
      std::vector<std::string> argv{testing::abxd_bin(), "--home", home().string()};
      argv.insert(argv.end(), args.begin(), args.end());
      testing::ChildProcess p(argv);
      std::string out = p.read_all();
      out.erase(out.find_last_not_of("\n") + 1);
      return std::make_pair(out, p.wait());
    };
    const std::string team = "boundary-t-" + hf.tag;
    ASSERT_EQ(admin({"teams", "create", team}).second, 0);
    const auto made = admin({"keys", "create", "--name", "t", "--team", team});
    ASSERT_EQ(made.second, 0);
    const std::string other_key = made.first, own_key = abxd().api_key(), a_id = ida;
    const std::string unknown(20, 'z');  // an id of the right shape that no sandbox has
    auto control = [this](const std::string& key, bhttp::verb verb, const std::string& target) {
      auto req = http::make_request(verb, target, verb == bhttp::verb::post ? "{}" : "");
      if (verb != bhttp::verb::post) req.erase(bhttp::field::content_type);
      req.set("X-API-KEY", key);
      auto r = http::fetch("127.0.0.1", port_(), std::move(req), 30s);
      return r.ok() ? *r : http::Response{};
    };
    // The other team's request reached A unless it got exactly what an id nobody has gets (the
    // same status and body, the id aside) and A still runs.
    auto reached = [=](bhttp::verb verb, const std::string& suffix) {
      auto r = control(other_key, verb, "/sandboxes/" + a_id + suffix);
      auto u = control(other_key, verb, "/sandboxes/" + unknown + suffix);
      std::string body = r.body();
      for (auto at = body.find(a_id); at != std::string::npos; at = body.find(a_id))
        body.replace(at, a_id.size(), unknown);
      const bool like_unknown = r.result_int() == 404 && body == u.body();
      const bool a_alive =
          control(own_key, bhttp::verb::get, "/sandboxes/" + a_id).result_int() == 200;
      return Outcome{!like_unknown || !a_alive,
                     std::to_string(r.result_int()) +
                         (like_unknown ? " as an unknown id" : ": not an unknown id's answer") +
                         (a_alive ? "" : ", A GONE")};
    };
    auto cross = [&](std::string name, bhttp::verb verb, std::string suffix, int good) {
      Probe p{std::move(name), "T", X, nullptr, nullptr, root_only};
      p.host = [=] {
        int st = control(own_key, verb, "/sandboxes/" + a_id + suffix).result_int();
        return Outcome{st == good, "A's own key: " + std::to_string(st)};
      };
      p.sandbox = [=](Who) { return reached(verb, suffix); };
      probes.push_back(p);
    };
    cross("t.cross_team_get", bhttp::verb::get, "", 200);
    cross("t.cross_team_metrics", bhttp::verb::get, "/metrics", 200);
    cross("t.cross_team_connect", bhttp::verb::post, "/connect", 200);
    cross("t.cross_team_tokens", bhttp::verb::post, "/tokens", 400);  // A: reaches the body check
    // Kill: the control kills a throwaway sandbox of A's team with A's key (A must live on).
    {
      Probe p{"t.cross_team_kill", "T", X, nullptr, nullptr, root_only};
      p.host = [=] {
        auto c = client::Sandbox::create("boundary", client::CreateOptions{}, cfg);
        if (!c.ok()) return Outcome{false, "throwaway create: " + c.error().message()};
        int st = control(own_key, bhttp::verb::delete_, "/sandboxes/" + c->id()).result_int();
        return Outcome{st == 204,
                       "A's own key killed its throwaway sandbox: " + std::to_string(st)};
      };
      p.sandbox = [=](Who) { return reached(bhttp::verb::delete_, ""); };
      probes.push_back(p);
    }
    // List: A's key lists A; the other team's list must not.
    {
      Probe p{"t.cross_team_list", "T", X, nullptr, nullptr, root_only};
      auto lists_a = [=](const std::string& key) {
        auto r = control(key, bhttp::verb::get, "/v2/sandboxes");
        return std::make_pair(r.body().find(a_id) != std::string::npos, r.result_int());
      };
      p.host = [=] {
        auto [has, st] = lists_a(own_key);
        return Outcome{has && st == 200, "A's own list: " + std::to_string(st)};
      };
      p.sandbox = [=](Who) {
        auto [has, st] = lists_a(other_key);
        return Outcome{has || st != 200, std::to_string(st) + (has ? " listing A" : " without A")};
      };
      probes.push_back(p);
    }
  }
  // ---- end of the tenants block ----------------------------------------------------------------

  Tally t = run_and_report(probes);
  EXPECT_EQ(t.not_held, 0) << t.not_held << " probe(s) not held (see the lines above)";
  EXPECT_EQ(t.not_exercising, 0) << t.not_exercising << " probe(s) exercise nothing";
  EXPECT_EQ(t.errors, 0) << t.errors << " probe(s) could not run in the sandbox";
  for (auto& s : services) (void)s.kill();
  (void)A.kill();
  (void)B.kill();
}

}  // namespace
}  // namespace abx::boundary
