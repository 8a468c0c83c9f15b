// sdk_bench: the SDK path of issue 15 against a real abxd and one `demo` sandbox (bench/sdk.sh
// starts both and passes them in through the environment: ABX_API_URL, ABX_API_KEY).
//
//   calls       libabx's sandbox.server().call("demo", {x: 1}) at each caller count (threads
//               sharing one Sandbox handle, so one connection pool), closed loop, for a fixed
//               time: p50/p99 per call and calls/s. Peer, in the same process and run: the same
//               HTTP request (POST /commands/demo with the routing headers and the access token,
//               straight through abxd) from a plain Boost.Beast keep-alive client, one
//               connection per thread, the request built once. The two alternate in rounds.
//   old         the way it was done before registered commands, in the same process through the
//               same SDK: files().write() of a script printing the same answer, then
//               commands().run("sh <script>"), each followed by one server().call (20 ms
//               apart): p50/p99 of both and the ratio of the p50s.
//   first-byte  CLI start-up: posix_spawn of a program to the first byte on its stdout (a pipe),
//               and to its exit: `abx --version`, `abx run <id> demo -a x=1`, and the peers
//               `/bin/echo`, `curl` doing call()'s POST. Runs alternate between the programs.
//
// Every answer is checked (a wrong one counts as an error and is not timed). Output: a table on
// stdout, and one line per summary row on stderr prefixed "ROW\t" (bench_row's fields), which
// sdk.sh turns into bench_row calls. Not a test.
//
// Usage: sdk_bench --sandbox ID [--callers 1,64] [--duration S] [--rounds N] [--warmup S]
//                  [--old-runs N] [--abx PATH] [--cli-runs N] [--curl PATH]
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "abx/client/sandbox.h"

extern char** environ;

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using tcp = asio::ip::tcp;

const char* const kScript = "/tmp/abx-sdk-bench.sh";
const char* const kExpected = "1: hello";  // demo(x=1) with y's default

// The machine's busy and total CPU time so far (/proc/stat's first line, in jiffies).
struct CpuTimes {
  unsigned long long busy = 0, total = 0;
};
CpuTimes cpu_times() {
  CpuTimes t;
  if (FILE* f = std::fopen("/proc/stat", "r")) {
    unsigned long long v[8] = {};
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &v[5], &v[6], &v[7]) == 8) {
      t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
      t.total = t.busy + v[3] + v[4];
    }
    std::fclose(f);
  }
  return t;
}

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Nearest-rank percentile, as bench_pct in lib/load.sh.
double pct(std::vector<double> s, double p) {
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  auto i = static_cast<std::size_t>(p / 100.0 * static_cast<double>(s.size() - 1) + 0.5);
  return s[std::min(i, s.size() - 1)];
}

void row(const std::string& section, const std::string& name, double abx, const std::string& peer,
         std::optional<double> peer_value, const std::string& unit, const std::string& better,
         const std::string& aim = "-") {
  char a[32], b[32];
  std::snprintf(a, sizeof a, "%.0f", abx);
  if (peer_value) std::snprintf(b, sizeof b, "%.0f", *peer_value);
  std::cerr << "ROW\t" << section << '\t' << name << '\t' << a << '\t' << peer << '\t'
            << (peer_value ? b : "-") << '\t' << unit << '\t' << better << '\t' << aim << '\n';
}

// ---- calls: one caller per thread, closed loop ----------------------------------------------

struct LoadResult {
  std::vector<double> us;  // per measured call
  double seconds = 0;
  long errors = 0;
  std::string first_error;
  CpuTimes cpu;  // machine CPU time during the measured windows

  void add(const LoadResult& o) {
    us.insert(us.end(), o.us.begin(), o.us.end());
    seconds += o.seconds;
    if (errors == 0) first_error = o.first_error;
    errors += o.errors;
    cpu.busy += o.cpu.busy;
    cpu.total += o.cpu.total;
  }
  double per_second() const { return seconds > 0 ? static_cast<double>(us.size()) / seconds : 0; }
  // How busy the whole machine was (all CPUs, this bench, abxd and the sandbox included).
  double busy_pct() const {
    return cpu.total ? 100.0 * static_cast<double>(cpu.busy) / static_cast<double>(cpu.total) : 0;
  }
};

// Runs `callers` threads; each makes a caller with make() (on its own thread) and then calls
// it in a loop: `warmup` unmeasured, then `duration` measured.
using CallFn = std::function<std::optional<std::string>()>;  // nullopt: ok; else the error
LoadResult run_load(int callers, std::chrono::milliseconds warmup,
                    std::chrono::milliseconds duration, const std::function<CallFn()>& make) {
  std::atomic<int> phase{0};  // 0 warm-up, 1 measuring, 2 stop
  std::mutex mu;
  LoadResult out;
  std::vector<std::thread> threads;
  for (int i = 0; i < callers; ++i) {
    threads.emplace_back([&] {
      CallFn call = make();
      std::vector<double> mine;
      mine.reserve(1 << 16);
      long errors = 0;
      std::string first_error;
      for (;;) {
        int ph = phase.load(std::memory_order_relaxed);
        if (ph == 2) break;
        auto t0 = Clock::now();
        auto err = call();
        double us = us_since(t0);
        if (phase.load(std::memory_order_relaxed) != 1 || ph != 1) continue;
        if (err) {
          if (errors++ == 0) first_error = *err;
          continue;
        }
        mine.push_back(us);
      }
      std::lock_guard lk(mu);
      out.us.insert(out.us.end(), mine.begin(), mine.end());
      out.errors += errors;
      if (out.first_error.empty()) out.first_error = first_error;
    });
  }
  std::this_thread::sleep_for(warmup);
  auto t0 = Clock::now();
  CpuTimes c0 = cpu_times();
  phase = 1;
  std::this_thread::sleep_for(duration);
  phase = 2;
  out.seconds = us_since(t0) / 1e6;
  CpuTimes c1 = cpu_times();
  out.cpu = {c1.busy - c0.busy, c1.total - c0.total};
  for (auto& t : threads) t.join();
  return out;
}

// The peer: Boost.Beast's synchronous client on one keep-alive connection.
struct Target {
  std::string host;
  std::uint16_t port = 0;
  std::string sandbox_id, token;
};

Target parse_target(const std::string& api_url, const abx::client::SandboxInfo& info) {
  // ABX_API_URL is http://HOST:PORT (sdk.sh sets it from abxd's "listening on").
  std::string rest = api_url.substr(api_url.find("://") + 3);
  rest = rest.substr(0, rest.find('/'));
  auto colon = rest.rfind(':');
  return {rest.substr(0, colon), static_cast<std::uint16_t>(std::stoi(rest.substr(colon + 1))),
          info.sandbox_id, info.envd_access_token};
}

CallFn beast_caller(const Target& t) {
  struct State {
    asio::io_context ioc;
    beast::tcp_stream stream{ioc};
    beast::flat_buffer buffer;
    bhttp::request<bhttp::string_body> req;
    bool connected = false;
  };
  auto s = std::make_shared<State>();
  s->req = {bhttp::verb::post, "/commands/demo", 11};
  s->req.set(bhttp::field::host, t.host + ":" + std::to_string(t.port));
  s->req.set(bhttp::field::content_type, "application/json");
  s->req.set("E2b-Sandbox-Id", t.sandbox_id);
  s->req.set("E2b-Sandbox-Port", "49982");
  s->req.set("X-Access-Token", t.token);
  s->req.body() = R"({"x":1})";
  s->req.keep_alive(true);
  s->req.prepare_payload();
  tcp::endpoint ep(asio::ip::make_address(t.host), t.port);
  return [s, ep]() -> std::optional<std::string> {
    beast::error_code ec;
    if (!s->connected) {
      s->stream.socket().connect(ep, ec);
      if (ec) return "connect: " + ec.message();
      s->stream.socket().set_option(tcp::no_delay(true), ec);
      s->connected = true;
    }
    bhttp::write(s->stream, s->req, ec);
    if (ec) return "write: " + ec.message();
    bhttp::response<bhttp::string_body> res;
    bhttp::read(s->stream, s->buffer, res, ec);
    if (ec) {
      s->stream.socket().close(ec);
      s->connected = false;
      return "read: " + ec.message();
    }
    if (res.result_int() != 200 || res.body() != std::string(R"({"result":")") + kExpected + "\"}")
      return "answer " + std::to_string(res.result_int()) + " " + res.body();
    if (!res.keep_alive()) {
      s->stream.socket().close(ec);
      s->connected = false;
    }
    return std::nullopt;
  };
}

CallFn sdk_caller(abx::client::Sandbox sbx) {
  return [sbx]() mutable -> std::optional<std::string> {
    auto r = sbx.server().call("demo", {{"x", 1}});
    if (!r.ok()) return r.error().to_string();
    if (!r->is_string() || r->as_string() != kExpected) return "answer " + json::serialize(*r);
    return std::nullopt;
  };
}

// ---- first byte: a program's start-up ---------------------------------------------------------

struct Spawned {
  double first_byte_us = 0, exit_us = 0;
  std::string out;
  int status = 0;
};

std::optional<Spawned> spawn_timed(const std::vector<std::string>& args, std::string* err) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    *err = "pipe2 failed";
    return std::nullopt;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  auto t0 = Clock::now();
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    *err = "cannot run " + args[0] + ": " + std::strerror(rc);
    return std::nullopt;
  }
  Spawned s;
  char buf[4096];
  for (;;) {
    ssize_t n = read(p[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (s.out.empty()) s.first_byte_us = us_since(t0);
    s.out.append(buf, static_cast<std::size_t>(n));
  }
  close(p[0]);
  while (waitpid(pid, &s.status, 0) < 0 && errno == EINTR) {
  }
  s.exit_us = us_since(t0);
  if (s.out.empty()) s.first_byte_us = s.exit_us;
  return s;
}

struct Program {
  std::string name;
  std::vector<std::string> args;
  std::string expect;  // stdout must start with it
  std::vector<double> first, exit;
  int failures = 0;
  std::string first_error;
};

void print_calls_header() {
  std::printf("%-44s %7s %9s %9s %11s %7s %6s\n", "path", "callers", "p50 us", "p99 us", "calls/s",
              "errors", "busy%");
}
void print_calls(const std::string& name, int callers, const LoadResult& r) {
  std::printf("%-44s %7d %9.0f %9.0f %11.0f %7ld %6.0f\n", name.c_str(), callers, pct(r.us, 50),
              pct(r.us, 99), r.per_second(), r.errors, r.busy_pct());
  if (r.errors > 0) std::printf("  first error: %s\n", r.first_error.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sdk_bench: libabx's server().call vs a plain keep-alive client, vs files.write + "
      "commands.run, and CLI start-up (bench/sdk.sh runs it)"};
  std::string sandbox_id, abx_bin, curl_bin = "/usr/bin/curl", callers_list = "1,64";
  double duration = 5, warmup = 0.2;
  int old_runs = 50, cli_runs = 200, rounds = 5;
  app.add_option("--sandbox", sandbox_id, "A running sandbox of template demo")->required();
  app.add_option("--callers", callers_list, "Caller counts, comma-separated")
      ->capture_default_str();
  app.add_option("--duration", duration, "Measured seconds per path and caller count")
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Unmeasured seconds before each round")->capture_default_str();
  app.add_option("--rounds", rounds, "Alternating rounds the duration is split into")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--old-runs", old_runs, "files.write + commands.run iterations (0: skip)")
      ->capture_default_str();
  app.add_option("--abx", abx_bin, "The abx CLI for the start-up rows (empty: skip them)");
  app.add_option("--cli-runs", cli_runs, "Spawns per program for the start-up rows")
      ->capture_default_str();
  app.add_option("--curl", curl_bin, "curl for the start-up peer")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto cfg = abx::client::ConnectionConfig::from_env();
  auto sbx = abx::client::Sandbox::connect(sandbox_id, cfg);
  if (!sbx.ok()) {
    std::cerr << "sdk_bench: " << sbx.error().to_string() << "\n";
    return 1;
  }
  Target target = parse_target(cfg.api_url, sbx->cached_info());
  auto warm = std::chrono::milliseconds(static_cast<long>(warmup * 1000));

  // (a) server().call vs Beast at each caller count, in alternating rounds (peer, then abx) so
  // that whatever else the machine does hits both alike.
  std::vector<int> callers;
  std::stringstream ss(callers_list);
  for (std::string c; std::getline(ss, c, ',');) callers.push_back(std::stoi(c));
  auto round_dur = std::chrono::milliseconds(static_cast<long>(duration * 1000 / rounds));
  std::printf(
      "registered call demo(x=1) through abxd %s, sandbox %s: %.1f s per path and caller "
      "count in %d alternating rounds (+%.1f s warm-up each); busy%% = the whole "
      "machine (all CPUs, this bench, abxd and the sandbox included)\n",
      cfg.api_url.c_str(), sandbox_id.c_str(), duration, rounds, warmup);
  print_calls_header();
  double hot_p50 = 0;  // server().call's p50 with 1 caller, calls back to back
  for (int c : callers) {
    LoadResult peer, abx;
    for (int r = 0; r < rounds; ++r) {
      peer.add(run_load(c, warm, round_dur, [&] { return beast_caller(target); }));
      abx.add(run_load(c, warm, round_dur, [&] { return sdk_caller(*sbx); }));
    }
    print_calls("beast keep-alive POST /commands/demo", c, peer);
    print_calls("libabx server().call(\"demo\")", c, abx);
    std::string n = std::to_string(c);
    row("sdk", "server().call p50, " + n + " callers", pct(abx.us, 50), "beast keep-alive",
        pct(peer.us, 50), "us", "lower");
    row("sdk", "server().call p99, " + n + " callers", pct(abx.us, 99), "beast keep-alive",
        pct(peer.us, 99), "us", "lower");
    row("sdk", "server().call calls/s, " + n + " callers", abx.per_second(), "beast keep-alive",
        peer.per_second(), "calls/s", "higher");
    if (c == 1) hot_p50 = pct(abx.us, 50);
    std::fflush(stdout);
  }

  // (b) files.write + commands.run vs server().call, one caller, one of each per iteration.
  if (old_runs > 0) {
    std::vector<double> old, call;
    long errors = 0;
    std::string first_error;
    std::string script = std::string("echo \"") + kExpected + "\"\n";
    auto sdk = sdk_caller(*sbx);
    CpuTimes c0 = cpu_times();
    // A pause before each measured operation lets the sandbox settle from the one before (a
    // call right after commands.run competes with the exiting shell for the sandbox's CPU).
    const auto settle = std::chrono::milliseconds(20);
    for (int i = 0; i < old_runs + 2; ++i) {
      std::this_thread::sleep_for(settle);
      auto t0 = Clock::now();
      std::optional<std::string> err;
      auto w = sbx->files().write(kScript, script);
      if (!w.ok()) err = w.error().to_string();
      if (!err) {
        auto r = sbx->commands().run(std::string("sh ") + kScript);
        if (!r.ok())
          err = r.error().to_string();
        else if (r->exit_code != 0 || r->stdout_data != std::string(kExpected) + "\n")
          err = "exit " + std::to_string(r->exit_code) + ", stdout " + r->stdout_data;
      }
      double old_us = us_since(t0);
      std::this_thread::sleep_for(settle);
      t0 = Clock::now();
      if (!err) err = sdk();
      double call_us = us_since(t0);
      if (i < 2) continue;  // warm-up
      if (err) {
        if (errors++ == 0) first_error = *err;
        continue;
      }
      old.push_back(old_us);
      call.push_back(call_us);
    }
    CpuTimes c1 = cpu_times();
    auto as_result = [&](const std::vector<double>& v) {
      LoadResult r{v, 0, errors, first_error, {c1.busy - c0.busy, c1.total - c0.total}};
      for (double x : v) r.seconds += x / 1e6;
      return r;
    };
    std::printf(
        "\nthe old way vs a registered call: same process, same SDK, one caller, one of "
        "each per iteration, 20 ms apart (%d iterations)\n",
        old_runs);
    print_calls_header();
    print_calls("files().write + commands().run(\"sh script\")", 1, as_result(old));
    print_calls("libabx server().call(\"demo\") after 20 ms idle", 1, as_result(call));
    double o50 = pct(old, 50), c50 = pct(call, 50);
    if (c50 > 0) {
      std::printf(
          "ratio (files.write + commands.run) / server().call at p50, each after 20 ms "
          "idle: %.1fx   aim >= 10x: %s\n",
          o50 / c50, o50 / c50 >= 10 ? "met" : "NOT MET");
      row("sdk", "server().call vs files.write+commands.run p50 (each after 20 ms idle)", c50,
          "files.write+commands.run", o50, "us", "lower", ">=10x");
      row("sdk", "server().call vs files.write+commands.run p99 (each after 20 ms idle)",
          pct(call, 99), "files.write+commands.run", pct(old, 99), "us", "lower");
    }
    if (hot_p50 > 0) {
      std::printf(
          "ratio (files.write + commands.run) / server().call at p50, calls back to back "
          "(the 1-caller row above): %.1fx   aim >= 10x: %s\n",
          o50 / hot_p50, o50 / hot_p50 >= 10 ? "met" : "NOT MET");
      row("sdk", "server().call (back to back) vs files.write+commands.run p50", hot_p50,
          "files.write+commands.run", o50, "us", "lower", ">=10x");
    }
    std::fflush(stdout);
  }

  // (c) CLI start-up to first byte.
  if (!abx_bin.empty() && cli_runs > 0) {
    std::string url =
        "http://" + target.host + ":" + std::to_string(target.port) + "/commands/demo";
    std::vector<Program> progs = {
        {"abx --version", {abx_bin, "--version"}, "abx "},
        {"/bin/echo (peer of --version)", {"/bin/echo", "x"}, "x"},
        {"abx run <id> demo -a x=1", {abx_bin, "run", sandbox_id, "demo", "-a", "x=1"}, kExpected},
        {"curl POST /commands/demo (peer of run)",
         {curl_bin, "-sS", "-X", "POST", "-H", "Content-Type: application/json", "-H",
          "E2b-Sandbox-Id: " + target.sandbox_id, "-H", "E2b-Sandbox-Port: 49982", "-H",
          "X-Access-Token: " + target.token, "-d", R"({"x":1})", url},
         std::string(R"({"result":")") + kExpected},
    };
    struct {
      std::vector<double> connect, list, call, total;
      int failures = 0;
      std::string first_error;
    } steps;
    CpuTimes c0 = cpu_times();
    for (int i = 0; i < cli_runs + 3; ++i) {
      for (auto& p : progs) {
        std::string err;
        auto s = spawn_timed(p.args, &err);
        if (i < 3) continue;  // warm the page cache
        if (s && (!WIFEXITED(s->status) || WEXITSTATUS(s->status) != 0))
          err = "exit status " + std::to_string(s->status);
        else if (s && !s->out.starts_with(p.expect))
          err = "stdout " + s->out;
        if (!err.empty()) {
          if (p.failures++ == 0) p.first_error = err;
          continue;
        }
        p.first.push_back(s->first_byte_us);
        p.exit.push_back(s->exit_us);
      }
      // What `abx run` does after its start-up, in this process: a fresh handle (connect), then
      // discovery and the call on its new connection pool.
      auto t0 = Clock::now();
      auto fresh = abx::client::Sandbox::connect(sandbox_id, cfg);
      double t_connect = us_since(t0);
      std::optional<std::string> err;
      double t_list = 0, t_call = 0;
      if (!fresh.ok()) {
        err = fresh.error().to_string();
      } else {
        t0 = Clock::now();
        auto l = fresh->list_commands();
        t_list = us_since(t0);
        if (!l.ok()) err = l.error().to_string();
        t0 = Clock::now();
        if (!err) err = sdk_caller(*fresh)();
        t_call = us_since(t0);
      }
      if (i < 3) continue;
      if (err) {
        if (steps.failures++ == 0) steps.first_error = *err;
        continue;
      }
      steps.connect.push_back(t_connect);
      steps.list.push_back(t_list);
      steps.call.push_back(t_call);
      steps.total.push_back(t_connect + t_list + t_call);
    }
    CpuTimes c1 = cpu_times();
    double busy = c1.total > c0.total ? 100.0 * static_cast<double>(c1.busy - c0.busy) /
                                            static_cast<double>(c1.total - c0.total)
                                      : 0;
    std::printf(
        "\nCLI start-up: spawn to the first byte on stdout and to exit (%d runs each, "
        "alternating; the machine %.0f%% busy meanwhile)\n",
        cli_runs, busy);
    std::printf("%-44s %9s %9s %9s %9s %7s\n", "program", "1st p50", "1st p99", "exit p50",
                "exit p99", "errors");
    for (const auto& p : progs) {
      std::printf("%-44s %9.0f %9.0f %9.0f %9.0f %7d\n", p.name.c_str(), pct(p.first, 50),
                  pct(p.first, 99), pct(p.exit, 50), pct(p.exit, 99), p.failures);
      if (p.failures) std::printf("  first error: %s\n", p.first_error.c_str());
    }
    std::printf("(us; aim: abx's first byte p50 < 5000 us)\n");
    std::printf(
        "\nabx run's requests without its start-up: libabx in this process, a fresh handle "
        "each run (same runs, interleaved)\n");
    std::printf("%-44s %9s %9s\n", "step", "p50 us", "p99 us");
    for (auto [name, v] :
         {std::pair{"Sandbox::connect (POST /sandboxes/{id}/connect)", &steps.connect},
          std::pair{"list_commands (GET /commands, new connection)", &steps.list},
          std::pair{"server().call (same connection)", &steps.call},
          std::pair{"sum", &steps.total}}) {
      std::printf("%-44s %9.0f %9.0f\n", name, pct(*v, 50), pct(*v, 99));
    }
    if (steps.failures)
      std::printf("  %d failed; first error: %s\n", steps.failures, steps.first_error.c_str());
    row("sdk", "abx --version first byte p50", pct(progs[0].first, 50), "/bin/echo",
        pct(progs[1].first, 50), "us", "lower", "<5000");
    row("sdk", "abx --version first byte p99", pct(progs[0].first, 99), "/bin/echo",
        pct(progs[1].first, 99), "us", "lower");
    row("sdk", "abx run demo first byte p50", pct(progs[2].first, 50), "curl",
        pct(progs[3].first, 50), "us", "lower", "<5000");
    row("sdk", "abx run demo first byte p99", pct(progs[2].first, 99), "curl",
        pct(progs[3].first, 99), "us", "lower");
  }
  return 0;
}
