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
// escapes with that reason. Traffic only ever goes to loopback, the sandboxes' own namespaces and
// a veth pair the N probes make and remove (their TEST-NET flows end in abxd's proxy, refused).
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
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
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "abx/client/sandbox.h"
#include "abx/http/client.h"
#include "abx/testing/abxd.h"
#include "abx/testing/socket.h"
#include "abx/testing/temp_dir.h"

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
  // E1..E11, F (issue 11 findings), R (resource exhaustion), N (egress), C (checkpoints),
  // S (image store), T (tenants)
  std::string cls;
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
  testing::TempDir tmp{"abx-boundary"};
  fs::path dir = tmp.path();  // 0755: host controls run as other uids (reachable() below)
  std::string marker_content = "abx-boundary-host-marker-" + tag + "\n";
  std::vector<fs::path> markers;
  int tcp = -1, tcp_any = -1, abstract_sock = -1, path_sock = -1;
  std::uint16_t tcp_port = 0, tcp_any_port = 0;
  std::string abstract_name = "abx-boundary-host-" + tag;
  fs::path unix_path;
  std::vector<fs::path> cgroups;

  HostFixtures() {
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
  }
  // The probes that run as another host user reach `dir` only below world-searchable
  // directories (scripts/test.sh's $TMPDIR is 1777, as /tmp is). The first that is not, or "".
  std::string unreachable_parent() const {
    for (fs::path p = dir.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return p.string();
    }
    return "";
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
  ASSERT_EQ(hf.unreachable_parent(), "")
      << "is not searchable by other users: point TMPDIR at a directory that is (chmod 1777)";
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

  // --- issue 35, findings 2-4 (egress proxy, resolver): begin --------------------------------
  // abxd's resolver and proxy must not be reachable from the host's loopback; the proxy must not
  // reach a host address added after abxd started; one sandbox must not starve another's
  // proxied flows. Traffic: loopback, a veth pair this block makes (TEST-NET-2), and
  // TEST-NET-3 flows that abxd's proxy holds and refuses (its rules here deny every address).
  {
    // A TCP connect within 1 s; whether it connected.
    auto tcp_connects = [](std::uint32_t ip, std::uint16_t port) {
      return testing::tcp_connects(ip, port);
    };
    // stdout of a host command.
    auto host_out = [](const std::string& cmd) {
      std::string out;
      if (FILE* f = ::popen(cmd.c_str(), "r")) {
        char buf[4096];
        for (std::size_t n; (n = ::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
        ::pclose(f);
      }
      return out;
    };
    // This abxd's resolver and proxy ports: its table's redirects ("redirect to :P"), in order.
    auto abxd_ports = [host_out, this] {
      std::string rules = host_out("nft list ruleset 2>/dev/null");
      std::vector<std::uint16_t> ports;
      std::size_t at = rules.find("comment \"abxd " + home().string());
      if (at == std::string::npos) return ports;
      std::string table = rules.substr(at, rules.find("\ntable ", at) - at);
      for (std::size_t p = 0; (p = table.find("redirect to :", p)) != std::string::npos;) {
        p += 13;
        auto port = static_cast<std::uint16_t>(std::stoi(table.substr(p, 6)));
        if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
      }
      return ports;
    };
    // Issue 40: abxd's egress CA key (<home>/ca/ca.key) signs the leaves the proxy presents for
    // network.rules names: with it, a sandbox could mint certificates every other sandbox
    // trusts. Its bytes must be nowhere a sandbox can read (16 base64 characters of the private
    // scalar: the PKCS#8 line's first 48 are the same for every P-256 key). Searched inside as
    // each user (the pattern split so no command line holds it), and from the host through A's
    // root (every file, whoever may read it).
    {
      std::string needle;
      {
        std::istringstream key(slurp(home() / "ca" / "ca.key"));
        std::string line;
        std::getline(key, line);
        std::getline(key, line);
        if (line.size() >= 64) needle = line.substr(48, 16);
      }
      Probe ck{"n.egress_ca_key", "N", L, nullptr, nullptr};
      ck.host = [&, host_out, needle] {
        if (needle.empty()) return Outcome{false, "no " + (home() / "ca/ca.key").string()};
        std::string found = host_out("grep -rlF -- '" + needle + "' '" + (home() / "ca").string() +
                                     "' 2>/dev/null");
        return Outcome{found.find("ca.key") != std::string::npos, "host finds it in abxd's home"};
      };
      ck.sandbox = [&, host_out, needle](Who w) {
        if (needle.empty()) return Outcome{false, "no key", false, true};
        client::CommandOptions o;
        o.user = who_name(w);
        auto c = A.commands().run("p='" + needle.substr(0, 8) + "'; p=\"$p\"'" + needle.substr(8) +
                                      "'; grep -rlsaF -D skip --exclude-dir=proc --exclude-dir=sys "
                                      "--exclude-dir=dev -- \"$p\" / | head -3; echo scanned",
                                  o);
        if (!c.ok()) return Outcome{false, c.error().message(), false, true};
        std::string inside = c->stdout_data;
        std::string via_root;
        if (w == Who::kRoot)
          via_root = host_out(
              "grep -rlsaF -D skip --exclude-dir=proc --exclude-dir=sys "
              "--exclude-dir=dev -- '" +
              needle + "' " + a_root + "/ 2>/dev/null | head -3");
        const bool found = inside.find("scanned") != 0 || !via_root.empty();
        return Outcome{found, "inside: " + inside.substr(0, 80) + " via root: " + via_root, false,
                       inside.find("scanned") == std::string::npos};
      };
      probes.push_back(ck);
    }
    Probe rb{"n.resolver_bind", "N", E, nullptr, nullptr, root_only};
    rb.host = [&, tcp_connects] {
      return Outcome{tcp_connects(INADDR_LOOPBACK, hf.tcp_port), "host loopback listener"};
    };
    rb.sandbox = [&, tcp_connects, abxd_ports](Who) {
      // Not from the sandbox: from the host, to abxd's own ports.
      std::vector<std::uint16_t> ports = abxd_ports();
      if (ports.size() < 2) return Outcome{false, "no redirects in abxd's table", false, true};
      std::vector<std::uint32_t> addrs{INADDR_LOOPBACK};
      if (std::string ip = host_ipv4(); !ip.empty()) {
        in_addr a{};
        if (::inet_pton(AF_INET, ip.c_str(), &a) == 1) addrs.push_back(ntohl(a.s_addr));
      }
      std::string detail;
      bool reached = false;
      for (std::uint32_t ip : addrs)
        for (std::uint16_t port : ports) {
          bool c = tcp_connects(ip, port);
          reached = reached || c;
          in_addr ia{htonl(ip)};
          char text[INET_ADDRSTRLEN] = {};
          ::inet_ntop(AF_INET, &ia, text, sizeof text);
          detail +=
              std::string(text) + ":" + std::to_string(port) + (c ? " CONNECTED; " : " closed; ");
        }
      return Outcome{reached, detail};
    };
    probes.push_back(rb);

    // A host address added now, after abxd started: a link of this test's (a veth pair, both
    // ends on the host) with 198.51.100.77 and an HTTP listener on it that answers a marker.
    struct NewAddress {
      std::string link, marker;
      int fd = -1;
      std::thread server;
      bool ok = false;
      ~NewAddress() {
        if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
        if (server.joinable()) server.join();
        if (fd >= 0) ::close(fd);
        (void)!std::system(("ip link del " + link + " 2>/dev/null").c_str());
      }
    };
    constexpr std::uint32_t kNewHostIp = 0xc633644d;  // 198.51.100.77
    auto na = std::make_shared<NewAddress>();
    na->link = "abxbn" + hf.tag.substr(0, 8);
    na->marker = "abx-new-host-address-" + hf.tag;
    na->ok = std::system(("ip link add " + na->link + " type veth peer name " + na->link +
                          "p && ip addr add " + "198.51.100.77/32 dev " + na->link +
                          " && ip link set " + na->link + " up")
                             .c_str()) == 0;
    if (na->ok) {
      na->fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(kNewHostIp);
      a.sin_port = htons(80);
      na->ok = ::bind(na->fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
               ::listen(na->fd, 16) == 0;
      if (na->ok)
        na->server = std::thread([raw = na.get()] {
          for (int c; (c = ::accept4(raw->fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) {
            char buf[2048];
            (void)!::recv(c, buf, sizeof buf, 0);
            std::string r =
                "HTTP/1.0 200 OK\r\nContent-Length: " + std::to_string(raw->marker.size()) +
                "\r\n\r\n" + raw->marker;
            (void)!::send(c, r.data(), r.size(), MSG_NOSIGNAL);
            ::close(c);
          }
        });
    }
    // An HTTP GET of http://<ip>/ with Host `host` from A, in python (stdout: what came back).
    auto fetch_in = [](client::Sandbox& sb, const std::string& ip, const std::string& host) {
      client::CommandOptions o;
      o.user = "root";
      o.timeout = 60s;
      auto r = sb.commands().run_argv({"python3", "-c",
                                       "import socket,sys\n"
                                       "try:\n"
                                       "  s=socket.create_connection(('" +
                                           ip +
                                           "',80),timeout=5)\n"
                                           "  s.sendall(b'GET / HTTP/1.1\\r\\nHost: " +
                                           host +
                                           "\\r\\nConnection: close\\r\\n\\r\\n')\n"
                                           "  d=b''\n"
                                           "  while True:\n"
                                           "    c=s.recv(4096)\n"
                                           "    if not c: break\n"
                                           "    d+=c\n"
                                           "  print(d.decode(errors='replace'))\n"
                                           "except Exception as e:\n"
                                           "  print('error', e)\n"},
                                      o);
      return r.ok() ? r->stdout_data : "run failed: " + r.error().message();
    };
    Probe nh{"n.proxy_new_host_address", "N", E, nullptr, nullptr, root_only};
    nh.host = [na] {
      if (!na->ok) return Outcome{false, "no test link / listener", false, true};
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(kNewHostIp);
      a.sin_port = htons(80);
      std::string got;
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        (void)!::send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL);
        char buf[2048];
        for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
          got.append(buf, static_cast<std::size_t>(n));
      }
      ::close(fd);
      return Outcome{got.find(na->marker) != std::string::npos,
                     "host reaches 198.51.100.77:80 (added after abxd started)"};
    };
    nh.sandbox = [&, na, fetch_in](Who) {
      if (!na->ok) return Outcome{false, "no test link / listener", false, true};
      // Proxied (its rules name a domain) and allowed that address by CIDR, deny everything
      // else: only the host-address check stands between A and the listener.
      Status s = client::Sandbox::update_network(ida, cfg, {"198.51.100.77/32", "boundary.test"},
                                                 {"0.0.0.0/0"});
      if (!s) return Outcome{false, "update_network: " + s.error().message(), false, true};
      std::string got = fetch_in(A, "198.51.100.77", "boundary.test");
      (void)client::Sandbox::update_network(ida, cfg, {}, {});
      bool reached = got.find(na->marker) != std::string::npos;
      std::string brief = got.substr(0, 120);
      for (auto& c : brief)
        if (c == '\r' || c == '\n') c = ' ';
      return Outcome{reached, brief};
    };
    probes.push_back(nh);

    // A holds more flows than the proxy has for everybody (1100, silent: in the sniff phase for
    // 10 s); B's proxied flow must still be decided (its audit shows its Host).
    auto b_flow_decided = [&, fetch_in](const std::string& domain) {
      (void)fetch_in(B, "203.0.113.9", domain);
      for (int i = 0; i < 40; ++i) {
        auto ev = client::Sandbox::network_audit(idb, cfg);
        if (ev.ok())
          for (const auto& e : *ev)
            if (e.domain == domain) return true;
        std::this_thread::sleep_for(50ms);
      }
      return false;
    };
    Probe fs_{"n.proxy_flow_starvation", "N", E, nullptr, nullptr, root_only};
    fs_.host = [&, b_flow_decided] {
      // Both proxied, every address denied: the proxy refuses each flow, nothing leaves.
      Status s = client::Sandbox::update_network(idb, cfg, {"boundary.test"}, {"0.0.0.0/0"});
      if (s) s = client::Sandbox::update_network(ida, cfg, {"boundary.test"}, {"0.0.0.0/0"});
      if (!s) return Outcome{false, "update_network: " + s.error().message(), false, true};
      bool ok = b_flow_decided("b-alone-" + hf.tag + ".test");
      return Outcome{ok, "B's proxied flow is decided while A holds none"};
    };
    fs_.sandbox = [&, b_flow_decided](Who) {
      const std::string hold =
          "import socket,resource,time\n"
          "h=resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
          "resource.setrlimit(resource.RLIMIT_NOFILE,(min(h,4096),h))\n"
          "held=[]\n"
          "for i in range(1100):\n"
          "  try:\n"
          "    s=socket.socket(); s.settimeout(3); s.connect(('203.0.113.9',80)); held.append(s)\n"
          "  except Exception:\n"
          "    pass\n"
          "print('holding', len(held), flush=True)\n"
          "time.sleep(8)\n";
      auto out = std::make_shared<std::string>();
      auto mu = std::make_shared<std::mutex>();
      client::CommandOptions o;
      o.user = "root";
      o.timeout = 120s;
      o.on_stdout = [out, mu](std::string_view d) {
        std::lock_guard l(*mu);
        out->append(d);
      };
      o.on_stderr = o.on_stdout;
      if (auto w = A.files().write("/tmp/abx-boundary/hold.py", hold); !w.ok())
        return Outcome{false, "write: " + w.error().message(), false, true};
      auto h = A.commands().start("exec python3 /tmp/abx-boundary/hold.py", o);
      if (!h.ok()) return Outcome{false, "start: " + h.error().message(), false, true};
      bool holding = false;
      for (int i = 0; i < 1200 && !holding; ++i) {
        {
          std::lock_guard l(*mu);
          holding = out->find("holding") != std::string::npos;
        }
        if (!holding) std::this_thread::sleep_for(50ms);
      }
      const bool decided = holding && b_flow_decided("b-starved-" + hf.tag + ".test");
      (void)h->wait();
      (void)client::Sandbox::update_network(ida, cfg, {}, {});
      (void)client::Sandbox::update_network(idb, cfg, {}, {});
      std::string said;
      {
        std::lock_guard l(*mu);
        said = *out;
      }
      for (auto& c : said)
        if (c == '\n') c = ' ';
      if (!holding) return Outcome{false, "A never held its flows: " + said, false, true};
      return Outcome{!decided, said + (decided ? "; B's flow decided" : "; B STARVED")};
    };
    probes.push_back(fs_);
  }
  // --- issue 35, findings 2-4: end ------------------------------------------------------------
  // ---- Checkpoints (issue 35) -------------------------------------------------------------
  // A third sandbox, C, made by the first of these probes, paused to disk and resumed by them,
  // killed when the probes go. A and B are not touched. Attacker: a host user other than root
  // (reading a checkpoint), and anyone who can change a checkpoint on disk (tampering, or a
  // symlink the sandbox's own writable layer holds where a mount target is).
  {
    struct CheckpointC {
      std::optional<client::Sandbox> sb;
      std::string id, error;
      ~CheckpointC() {
        if (sb) (void)sb->kill();
      }
    };
    auto ck = std::make_shared<CheckpointC>();
    const fs::path ck_home = home();
    auto c_ready = [ck, cfg, co]() -> std::string {
      if (ck->sb || !ck->error.empty()) return ck->error;
      auto made = client::Sandbox::create("boundary", co, cfg);
      if (!made.ok()) return ck->error = "create C: " + made.error().message();
      ck->id = made->id();
      ck->sb.emplace(std::move(*made));
      return "";
    };
    auto c_paused = [ck, c_ready]() -> std::string {
      if (auto e = c_ready(); !e.empty()) return e;
      auto p = ck->sb->pause();
      return p.ok() ? "" : "pause C: " + p.error().message();
    };
    auto c_resume = [ck, cfg]() -> Result<client::Sandbox> {
      return client::Sandbox::connect(ck->id, cfg);
    };
    // How many of `entries` (directory, name) host uid `uid` can open for reading, each through
    // a descriptor of its directory: only the directory's own mode counts, not its parents'
    // (abxd's home is 0700 anyway).
    auto readable_as = [](uid_t uid, const std::vector<std::pair<fs::path, std::string>>& entries) {
      std::vector<int> dirs;
      for (const auto& [dir, name] : entries)
        dirs.push_back(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      pid_t child = fork();
      if (child == 0) {
        if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 ||
            setresuid(uid, uid, uid) != 0)
          _exit(255);
        int n = 0;
        for (std::size_t i = 0; i < entries.size(); ++i) {
          int fd = dirs[i] < 0 ? -1 : openat(dirs[i], entries[i].second.c_str(), O_RDONLY);
          if (fd >= 0) ++n, close(fd);
        }
        _exit(std::min(n, 254));
      }
      for (int d : dirs)
        if (d >= 0) close(d);
      int st = 0;
      waitpid(child, &st, 0);
      return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    };
    auto flip_file = [](const fs::path& f, const std::string& from, const std::string& to) {
      std::string data = slurp(f);
      auto at = data.find(from);
      if (at == std::string::npos) return false;
      data.replace(at, from.size(), to);
      std::ofstream(f, std::ios::binary | std::ios::trunc) << data;
      return true;
    };

    Probe dir_probe{"c.checkpoint_dir_root_only", "C", L, nullptr, nullptr, {Who::kRoot}};
    dir_probe.host = [=, &hf]() -> Outcome {
      if (auto e = c_paused(); !e.empty()) return {false, e, false, true};
      // The same file, world-readable in a 0755 directory: readable by an unprivileged uid.
      const fs::path open_dir = hf.dir / "ck-control";
      fs::create_directories(open_dir);
      fs::permissions(open_dir, fs::perms(0755));
      std::error_code ec;
      fs::copy_file(ck_home / "checkpoints" / ck->id / "pages-1.img", open_dir / "pages-1.img",
                    fs::copy_options::overwrite_existing, ec);
      fs::permissions(open_dir / "pages-1.img", fs::perms(0644), ec);
      int n = readable_as(kHostNobody, {{open_dir, "pages-1.img"}});
      return {n == 1, "uid " + std::to_string(kHostNobody) + " read a copy of pages-1.img in a " +
                          "0755 dir: " + (n == 1 ? "yes" : "no")};
    };
    dir_probe.sandbox = [=](Who) -> Outcome {
      const fs::path dir = ck_home / "checkpoints" / ck->id;
      std::vector<std::pair<fs::path, std::string>> entries{{dir.parent_path(), ck->id},
                                                            {ck_home, "checkpoint.key"}};
      std::string open_modes;
      std::error_code ec;
      for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
        entries.emplace_back(e.path().parent_path(), e.path().filename().string());
        struct stat st {};
        if (lstat(e.path().c_str(), &st) == 0 && (st.st_mode & 077) != 0)
          open_modes += " " + e.path().filename().string();
      }
      if (entries.size() < 5) return {false, "no checkpoint in " + dir.string(), false, true};
      int n = readable_as(kHostNobody, entries);
      return {
          n != 0 || !open_modes.empty(),
          std::to_string(n) + " of " + std::to_string(entries.size()) +
              " checkpoint entries (and the key) readable by uid " + std::to_string(kHostNobody) +
              (open_modes.empty() ? "; every mode 0700/0600" : "; open to others:" + open_modes)};
    };
    probes.push_back(dir_probe);

    Probe tampered{"c.tampered_checkpoint_refused", "C", E, nullptr, nullptr, {Who::kRoot}};
    tampered.host = [=]() -> Outcome {
      // Control: C's checkpoint as abxd wrote it resumes; then C is paused again.
      if (auto e = c_paused(); !e.empty()) return {false, e, false, true};
      auto back = c_resume();
      if (!back.ok()) return {false, "untampered resume failed: " + back.error().message()};
      auto again = ck->sb->pause();
      return {again.ok(), std::string("untampered checkpoint resumed, paused again: ") +
                              (again.ok() ? "yes" : again.error().message())};
    };
    tampered.sandbox = [=](Who) -> Outcome {
      const fs::path dir = ck_home / "checkpoints" / ck->id;
      fs::path mounts, core = dir / "core-1.img";
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().filename().string().starts_with("mountpoints-")) mounts = e.path();
      if (mounts.empty() || !fs::exists(core))
        return {false, "no checkpoint images in " + dir.string(), false, true};
      std::string detail;
      bool resumed = false;
      auto attempt = [&](const std::string& what, const std::function<bool()>& tamper,
                         const std::function<void()>& undo) {
        if (!tamper()) {
          detail += what + ": could not tamper; ";
          return;
        }
        auto r = c_resume();
        resumed = resumed || r.ok();
        std::string msg = r.ok() ? "RESUMED" : r.error().message();
        auto at = msg.find("integrity check");
        detail +=
            what + ": " + (at == std::string::npos ? msg.substr(0, 80) : msg.substr(at, 90)) + "; ";
        undo();
      };
      const std::string saved_mounts = slurp(mounts), saved_core = slurp(core);
      attempt(
          "mount target /opt/abx -> /opt/abY",
          [&] { return flip_file(mounts, "/opt/abx", "/opt/abY"); },
          [&] { std::ofstream(mounts, std::ios::binary | std::ios::trunc) << saved_mounts; });
      attempt(
          "creds (core-1.img) byte",
          [&] {
            std::string d = saved_core;
            d[d.size() / 2] ^= 1;
            std::ofstream(core, std::ios::binary | std::ios::trunc) << d;
            return true;
          },
          [&] { std::ofstream(core, std::ios::binary | std::ios::trunc) << saved_core; });
      attempt(
          "added file", [&] { return static_cast<bool>(std::ofstream(dir / "extra.img") << "x"); },
          [&] { fs::remove(dir / "extra.img", ec); });
      // Nothing lost: as abxd wrote it, it resumes (C runs on for the next probe).
      auto back = c_resume();
      detail += std::string("untouched again: ") + (back.ok() ? "resumed" : back.error().message());
      return {resumed || !back.ok(), detail};
    };
    probes.push_back(tampered);

    Probe symlinked{"c.symlinked_mount_target_refused", "C", E, nullptr, nullptr, {Who::kRoot}};
    symlinked.host = [=, &hf]() -> Outcome {
      // Control: a bind mount onto a symlink lands where the link points (private mount ns).
      const fs::path d = hf.dir / "ck-sym";
      fs::create_directories(d / "src");
      fs::create_directories(d / "real");
      std::ofstream(d / "src/marker") << "x";
      std::error_code ec;
      fs::create_symlink(d / "real", d / "link", ec);
      HostProc h({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                  "mount --bind '" + (d / "src").string() + "' '" + (d / "link").string() +
                      "' && test -e '" + (d / "real/marker").string() + "'"});
      ProbeRun r = h.finish();
      return {r.ok(), "bind onto a symlink reached its target: " + r.brief()};
    };
    symlinked.sandbox = [=](Who) -> Outcome {
      if (auto e = c_ready(); !e.empty()) return {false, e, false, true};
      // In C's writable layer, under its /opt/abx bind: a symlink to /tmp. CRIU follows it,
      // against its own root (the host's): without abx's check it tried to move the bundle's
      // mount onto the host's /tmp, and only the kernel's refusal to move a mount into another
      // namespace's tree (EINVAL) stopped it. So anything but abx's own refusal counts as not
      // held: CRIU must never be handed a symlinked target.
      const fs::path upper = ck_home / "sandboxes" / ck->id / "rw/upper";
      std::error_code ec;
      fs::create_directories(upper / "opt", ec);
      fs::remove(upper / "opt/abx", ec);
      fs::create_symlink("/tmp", upper / "opt/abx", ec);
      if (ec) return {false, "plant: " + ec.message(), false, true};
      if (auto e = c_paused(); !e.empty()) return {false, e, false, true};
      auto r = c_resume();
      std::string msg = r.ok() ? "RESUMED with /opt/abx -> /tmp" : r.error().message();
      auto at = msg.find("mount target");
      (void)ck->sb->kill();
      ck->sb.reset();
      const bool refused = !r.ok() && msg.find("mount target /opt/abx") != std::string::npos &&
                           msg.find("symlink") != std::string::npos;
      return {!refused, at == std::string::npos
                            ? msg.substr(std::max<std::size_t>(msg.size(), 200) - 200)
                            : msg.substr(at, 110)};
    };
    probes.push_back(symlinked);
  }
  // ---- end of checkpoint probes ------------------------------------------------------------
  // ---- S: the image store (issue 35, finding 1) ------------------------------------------
  // abxd extracts layers keeping host-root owners, setuid bits and file capabilities (sandboxes
  // need them so). An image layer with a setuid-root copy of the probe and a copy carrying
  // cap_dac_read_search is imported into this abxd's store (`abxd image import`, as a
  // Dockerfile's `RUN cp ... && chmod 4755` build leaves one); an unprivileged host uid (65534,
  // through setpriv) must reach neither. Host control: the same files in a 0755 directory make
  // that uid host root, or read a root-only file. The "sandbox" side of these probes is the
  // host itself, as that uid: who = root only (one context). The probes run after this block:
  // what they use lives in `st`, shared by their closures.
  {
    struct StoreState {
      fs::path src, ctl, secret;
      std::string layer_dir, why_not;  // the extracted layer in the store, or why there is none
      // The layer is this run's only (untagged after the import; its blobs go at the store's
      // next gc): its setuid and capability files go with the probes.
      ~StoreState() {
        std::error_code ec;
        if (!layer_dir.empty()) fs::remove_all(layer_dir, ec);
      }
      // Copies of the probe: rootbash setuid root, capread with security.capability v2 giving
      // cap_dac_read_search (2), permitted and effective.
      static bool plant(const fs::path& dir) {
        static const std::uint32_t vfs_cap[5] = {0x02000001u, 1u << 2, 0, 0, 0};
        std::error_code ec;
        for (const char* name : {"rootbash", "capread"}) {
          fs::copy_file(ABX_BOUNDARY_PROBE, dir / name, fs::copy_options::overwrite_existing, ec);
          if (ec) return false;
        }
        return ::chown((dir / "rootbash").c_str(), 0, 0) == 0 &&
               ::chmod((dir / "rootbash").c_str(), 04755) == 0 &&
               ::chmod((dir / "capread").c_str(), 0755) == 0 &&
               ::setxattr((dir / "capread").c_str(), "security.capability", vfs_cap, sizeof vfs_cap,
                          0) == 0;
      }
      static ProbeRun as_nobody(const std::string& file, const std::vector<std::string>& args) {
        // Through a shell: setpriv keeps its capabilities until its own execve (they go with
        // the exec), so a path it execs directly is looked up with root's
        // CAP_DAC_OVERRIDE and the store's modes would not matter. The shell runs without them,
        // as the unprivileged user does.
        std::vector<std::string> argv{"/usr/bin/setpriv",
                                      "--reuid=65534",
                                      "--regid=65534",
                                      "--clear-groups",
                                      "/bin/sh",
                                      "-c",
                                      "exec \"$@\"",
                                      "sh",
                                      file};
        argv.insert(argv.end(), args.begin(), args.end());
        HostProc p(argv);
        return p.finish(30s);
      }
    };
    auto st = std::make_shared<StoreState>();
    const std::string store = testing::shared_image_store();
    st->src = hf.dir / "store-layer";
    st->ctl = hf.dir / "store-control";
    const fs::path secret_dir = hf.dir / "store-secret";  // 0700 root: the capability's target
    st->secret = secret_dir / "secret";
    fs::create_directories(st->src);
    fs::create_directories(st->ctl);
    fs::create_directories(secret_dir);
    fs::permissions(secret_dir, fs::perms(0700));
    std::ofstream(st->secret) << "abx-boundary-store-secret-" << hf.tag << "\n";
    std::ofstream(st->src / "tag") << hf.tag << "\n";  // a layer of this run only
    const std::string tar = (hf.dir / "store-layer.tar").string();
    const std::string name = "abx-boundary-store-" + hf.tag;
    if (!StoreState::plant(st->src)) {
      st->why_not = "could not make the setuid/capability files";
    } else if (std::system(("tar --xattrs --xattrs-include=security.capability -C " +
                            st->src.string() + " -cf " + tar + " .")
                               .c_str()) != 0) {
      st->why_not = "tar failed";
    } else {
      HostProc imp({testing::abxd_bin(), "--image-store", store, "image", "import", name,
                    "rootfs-tar:" + tar});
      ProbeRun r = imp.finish(120s);
      // "<name> sha256:<manifest>": the manifest's only layer.
      std::size_t at = r.out.rfind("sha256:");
      std::string manifest = r.ok() && at != std::string::npos ? r.out.substr(at + 7, 64) : "";
      if (manifest.size() != 64) {
        st->why_not = "abxd image import: " + r.brief();
      } else {
        boost::system::error_code ec;
        auto m = json::parse(slurp(fs::path(store) / "blobs/sha256" / manifest), ec);
        const json::value* layers = ec ? nullptr : m.as_object().if_contains("layers");
        if (layers == nullptr || !layers->is_array() || layers->as_array().empty()) {
          st->why_not = "manifest " + manifest + " has no layers";
        } else {
          std::string layer(layers->as_array()[0].at("digest").as_string());
          st->layer_dir = store + "/layers/sha256/" + layer.substr(7);
          struct stat sb {};
          if (::stat((st->layer_dir + "/rootbash").c_str(), &sb) != 0 ||
              (sb.st_mode & S_ISUID) == 0 ||
              ::getxattr((st->layer_dir + "/capread").c_str(), "security.capability", nullptr, 0) <=
                  0) {
            st->why_not = "the store's layer has no setuid/capability files at " + st->layer_dir;
          }
        }
      }
      HostProc rm({testing::abxd_bin(), "--image-store", store, "image", "rm", name});
      (void)rm.finish(60s);  // untagged: the layer goes at the store's next gc
    }
    struct StoreProbe {
      std::string name, file;
      Impact impact;
      std::vector<std::string> args;
    };
    for (const auto& sp :
         {StoreProbe{"s.store_setuid_layer_file", "rootbash", E, {"host-root"}},
          StoreProbe{
              "s.store_file_capability_layer_file", "capread", L, {"read", st->secret.string()}}}) {
      Probe p{sp.name, "S", sp.impact, nullptr, nullptr, root_only};
      p.host = [st, sp] {
        bool ok = StoreState::plant(st->ctl);  // a 0755 directory under /tmp, emptied right after
        ProbeRun r = StoreState::as_nobody((st->ctl / sp.file).string(), sp.args);
        std::error_code ec;
        fs::remove(st->ctl / "rootbash", ec);
        fs::remove(st->ctl / "capread", ec);
        return ok ? of(r) : Outcome{false, "could not make the control files"};
      };
      p.sandbox = [st, sp](Who) {
        if (!st->why_not.empty()) return Outcome{false, st->why_not, false, true};
        return of(StoreState::as_nobody(st->layer_dir + "/" + sp.file, sp.args));
      };
      probes.push_back(p);
    }
  }
  // ---- end S ------------------------------------------------------------------------------

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
