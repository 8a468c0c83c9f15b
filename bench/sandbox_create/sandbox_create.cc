// sandbox_create: how long does a sandbox take from "create" to its first program having run?
//
// Measures, per tool, the wall time from starting creation to the exit of /bin/true inside:
//   abx     Sandbox::spawn() + wait() (host rootfs, own netns, cgroups, seccomp, caps...);
//           destroy() (kill, cgroup rmdir, state dir removal) is timed separately
//   abx-img the same with an image rootfs: one busybox layer under an overlay whose writable
//           layer is a fresh ext4 image (sparse copy, loop device, host mount) per sandbox
//   img-nous abx-img without the user namespace (no id range, no idmapped layers): the line
//           after the table prints what the user namespace costs, abx-img p50 / img-nous p50
//   bwrap   bwrap --unshare-all with /usr, /etc read-only, /proc, /dev, /tmp  (Debian bubblewrap)
//   unshare unshare --fork --pid --mount --uts --ipc --net --mount-proc true  (util-linux)
// each sequentially (N runs) and 32-way parallel (32 threads, N/32 rounds each), and prints
// p50/p95/p99 with the ratio of each p50 to bwrap's. Needs root. Not a test.
//
// Usage: sandbox_create [--runs N] [--parallel P] [--state-dir DIR]
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "abx/runtime/sandbox.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Stats {
  std::vector<double> samples;
  int failures = 0;
  double pct(double p) const {
    if (samples.empty()) return 0;
    std::vector<double> s = samples;
    std::sort(s.begin(), s.end());
    size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(s.size() - 1) + 0.5);
    return s[std::min(i, s.size() - 1)];
  }
};

// Runs argv to completion with stdio on /dev/null; true if it exited 0.
bool run(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (int fd = 0; fd < 3; ++fd) posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_RDWR, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

const std::vector<std::string> kBwrap = {"/usr/bin/bwrap", "--unshare-all", "--die-with-parent",
                                         "--ro-bind",      "/usr",          "/usr",
                                         "--symlink",      "usr/bin",       "/bin",
                                         "--symlink",      "usr/lib",       "/lib",
                                         "--symlink",      "usr/lib64",     "/lib64",
                                         "--symlink",      "usr/sbin",      "/sbin",
                                         "--ro-bind",      "/etc",          "/etc",
                                         "--proc",         "/proc",         "--dev",
                                         "/dev",           "--tmpfs",       "/tmp",
                                         "--hostname",     "bench",         "/bin/true"};
const std::vector<std::string> kUnshare = {
    "/usr/bin/unshare", "--fork",   "--pid", "--mount", "--uts", "--ipc", "--net",
    "--mount-proc",     "/bin/true"};

std::string g_state_dir;
std::string g_image_layer;  // a busybox layer: /bin/busybox and /bin/true -> busybox
std::atomic<int> g_seq{0};
std::mutex g_destroy_mu;
Stats g_destroy;

bool abx_once(bool image, bool userns = true) {
  abx::runtime::SandboxConfig c;
  c.id = "bench-" + std::to_string(getpid()) + "-" + std::to_string(g_seq++);
  c.state_dir = g_state_dir;
  if (image) {
    c.rootfs = abx::runtime::RootfsMode::kImage;
    c.lower_dirs = {g_image_layer};
  } else {
    c.rootfs = abx::runtime::RootfsMode::kHost;
  }
  c.userns.enabled = userns;
  c.argv = {"/bin/true"};
  c.limits.pids_max = 256;
  c.limits.memory_bytes = 256ull << 20;
  auto sb = abx::runtime::Sandbox::spawn(std::move(c));
  if (!sb) {
    static std::once_flag once;
    std::call_once(once,
                   [&] { std::fprintf(stderr, "abx: %s\n", sb.error().to_string().c_str()); });
    return false;
  }
  auto st = sb->wait();
  bool ok = st.ok() && WIFEXITED(*st) && WEXITSTATUS(*st) == 0;
  auto t0 = Clock::now();
  bool destroyed = sb->destroy().ok();
  double d = ms_since(t0);
  std::lock_guard lock(g_destroy_mu);
  g_destroy.samples.push_back(d);
  return ok && destroyed;
}

Stats measure(const std::function<bool()>& once, int runs, int parallel) {
  Stats s;
  std::mutex mu;
  auto worker = [&](int n) {
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      bool ok = once();
      double ms = ms_since(t0);
      std::lock_guard lock(mu);
      if (ok)
        s.samples.push_back(ms);
      else
        ++s.failures;
    }
  };
  for (int i = 0; i < 5; ++i) once();  // warm-up: page cache, seccomp program, cgroup parents
  if (parallel <= 1) {
    worker(runs);
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < parallel; ++t) threads.emplace_back(worker, std::max(1, runs / parallel));
    for (auto& t : threads) t.join();
  }
  return s;
}

void row(const char* mode, const char* tool, const Stats& s, double base_p50) {
  std::printf("%-10s %-8s %5zu %5d %9.2f %9.2f %9.2f %8.2f\n", mode, tool, s.samples.size(),
              s.failures, s.pct(50), s.pct(95), s.pct(99),
              base_p50 > 0 ? s.pct(50) / base_p50 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 200, parallel = 32;
  std::string state = "/tmp/abx-bench-sandbox-create";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc)
      runs = std::atoi(argv[++i]);
    else if (a == "--parallel" && i + 1 < argc)
      parallel = std::atoi(argv[++i]);
    else if (a == "--state-dir" && i + 1 < argc)
      state = argv[++i];
    else {
      std::fprintf(stderr, "usage: sandbox_create [--runs N] [--parallel P] [--state-dir DIR]\n");
      return 2;
    }
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "sandbox_create: needs root\n");
    return 2;
  }
  g_state_dir = state;
  (void)abx::runtime::cleanup_stale(state);
  // Dot-named: cleanup_stale() never takes it for a sandbox.
  g_image_layer = state + "/.bench-image";
  std::filesystem::create_directories(g_image_layer + "/bin");
  std::error_code ec;
  std::filesystem::copy_file("/bin/busybox", g_image_layer + "/bin/busybox",
                             std::filesystem::copy_options::overwrite_existing, ec);
  std::filesystem::create_symlink("busybox", g_image_layer + "/bin/true", ec);
  bool have_busybox = std::filesystem::exists(g_image_layer + "/bin/busybox");
  bool have_bwrap = access(kBwrap[0].c_str(), X_OK) == 0;

  unsigned ncpu = std::thread::hardware_concurrency();
  double load[3] = {};
  getloadavg(load, 3);
  std::printf(
      "# sandbox create -> /bin/true exited; %d sequential, %d parallel; %u CPUs; "
      "load %.2f\n",
      runs, parallel, ncpu, load[0]);
  std::printf("%-10s %-8s %5s %5s %9s %9s %9s %8s\n", "mode", "tool", "n", "fail", "p50_ms",
              "p95_ms", "p99_ms", "p50/bwrap");
  for (int par : {1, parallel}) {
    const char* mode = par == 1 ? "sequential" : "parallel";
    Stats bw = have_bwrap ? measure([] { return run(kBwrap); }, runs, par) : Stats{};
    Stats un = measure([] { return run(kUnshare); }, runs, par);
    g_destroy = {};
    Stats ab = measure([] { return abx_once(false); }, runs, par);
    Stats ab_del = g_destroy;
    g_destroy = {};
    Stats img = have_busybox ? measure([] { return abx_once(true); }, runs, par) : Stats{};
    Stats img_del = g_destroy;
    Stats nous = have_busybox ? measure([] { return abx_once(true, false); }, runs, par) : Stats{};
    double base = bw.pct(50);
    if (have_bwrap)
      row(mode, "bwrap", bw, base);
    else
      std::printf("%-10s %-8s not installed (Debian bubblewrap)\n", mode, "bwrap");
    row(mode, "unshare", un, base);
    row(mode, "abx", ab, base);
    row(mode, "abx-del", ab_del, 0);
    if (have_busybox) {
      row(mode, "abx-img", img, base);
      row(mode, "img-del", img_del, 0);
      row(mode, "img-nous", nous, base);
      std::printf("# %s: user namespace cost, abx-img p50 / img-nous p50 = %.2f\n", mode,
                  nous.pct(50) > 0 ? img.pct(50) / nous.pct(50) : 0.0);
    } else {
      std::printf("%-10s %-8s no /bin/busybox (Debian busybox-static)\n", mode, "abx-img");
    }
  }
  getloadavg(load, 3);
  std::printf(
      "# abx-del = destroy() after exit (kill, cgroup rmdir, state removal), not in abx; "
      "load after %.2f\n",
      load[0]);
  auto left = abx::runtime::cleanup_stale(state);
  return left.ok() && *left == 0 ? 0 : 1;
}
