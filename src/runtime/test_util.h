// Helpers shared by the runtime tests: temp dirs, unique ids, running the probe on the host
// and inside a sandbox with its output captured.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "abx/runtime/sandbox.h"
#include "abx/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace abx::runtime::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif
#else
inline constexpr bool kAsan = false;
#endif

inline const char* probe_path() { return ABX_RUNTIME_PROBE; }
inline constexpr const char* kProbeInside = "/abx/probe";

// abx::testing::TempDir with its path as a string, as SandboxConfig's fields are.
class TempDir {
 public:
  const std::string& path() const { return path_; }

 private:
  abx::testing::TempDir dir_{"abx-rt-test"};
  std::string path_ = dir_.string();
};

// Unique per process and call: tests may run in parallel processes under ctest.
inline std::string unique_id(const std::string& prefix) {
  static std::atomic<int> n{0};
  return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// A file's whole content ("" if it cannot be read): /proc files, logs, a sandbox's output.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Whether `pid` is alive and not a zombie (the state after its name in /proc/<pid>/stat).
inline bool alive(pid_t pid) {
  std::string all = slurp("/proc/" + std::to_string(pid) + "/stat");
  auto close = all.rfind(')');
  return close != std::string::npos && close + 2 < all.size() && all[close + 2] != 'Z';
}

// Whether something (a symlink included) is at `p`.
inline bool path_exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

struct RunResult {
  int status = -1;  // wait status
  std::string out;
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Runs the probe directly on the host (positive control).
inline RunResult run_on_host(std::vector<std::string> args) {
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  args.insert(args.begin(), probe_path());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(p[1]);
  RunResult r;
  r.out = read_all(p[0]);
  ::close(p[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

// A config that runs the probe (bound at /abx/probe) with `args` in a host-rootfs sandbox
// (RootfsMode::kHost, the development mode: the isolation tests need the host's tools).
inline SandboxConfig probe_config(const std::string& state_dir, std::vector<std::string> args) {
  SandboxConfig c;
  c.rootfs = RootfsMode::kHost;
  c.id = unique_id("t");
  c.state_dir = state_dir;
  c.argv = {kProbeInside};
  for (auto& a : args) c.argv.push_back(a);
  c.env = {"PATH=/usr/bin:/bin"};
  c.binds.push_back({probe_path(), kProbeInside, false});
  return c;
}

// A config that runs `argv` in an image-rootfs sandbox over `lowers` (abx::testing's busybox
// layer first), with PATH=/bin and a 64 MiB writable layer: what the image and checkpoint tests
// start from.
inline SandboxConfig image_config(const std::string& state_dir, std::vector<std::string> lowers,
                                  std::vector<std::string> argv,
                                  const std::string& id_prefix = "img") {
  SandboxConfig c;
  c.id = unique_id(id_prefix);
  c.state_dir = state_dir;
  c.rootfs = RootfsMode::kImage;
  c.lower_dirs = std::move(lowers);
  c.argv = std::move(argv);
  c.env = {"PATH=/bin"};
  c.disk_bytes = 64ull << 20;
  return c;
}

// What spawn_and_wait() ran: the sandbox too (null if it did not start), alive though its
// processes exited, so a test can look at its upper dir before destroying it.
struct Ran : RunResult {
  std::optional<Sandbox> sb;
};

// Spawns `c` with stdout+stderr captured and waits for the init.
inline Ran spawn_and_wait(SandboxConfig c) {
  Ran r;
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  c.fds.push_back({p[1], 1});
  c.fds.push_back({p[1], 2});
  auto sb = Sandbox::spawn(std::move(c));
  ::close(p[1]);
  if (!sb) {
    ::close(p[0]);
    ADD_FAILURE() << "spawn: " << sb.error().to_string();
    return r;
  }
  r.out = read_all(p[0]);
  ::close(p[0]);
  auto st = sb->wait();
  EXPECT_TRUE(st.ok());
  if (st) r.status = *st;
  r.sb.emplace(std::move(*sb));
  return r;
}

// spawn_and_wait(), then destroys the sandbox.
inline RunResult run_sandbox(SandboxConfig c) {
  Ran r = spawn_and_wait(std::move(c));
  if (r.sb) {
    Status d = r.sb->destroy();
    EXPECT_TRUE(d.ok()) << d.error().to_string();
  }
  return r;
}

inline RunResult run_in_sandbox(const std::string& state_dir, std::vector<std::string> args) {
  return run_sandbox(probe_config(state_dir, std::move(args)));
}

}  // namespace abx::runtime::testing
