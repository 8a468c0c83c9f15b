// Isolation probes (security catalogue §1.1, §2.6): each runs on the host first, where it must
// succeed — proof the probe really exercises the path — and then inside a sandbox, where it
// must fail.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "abx/runtime/sandbox.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace abx::runtime {
namespace {

using testing::probe_config;
using testing::run_in_sandbox;
using testing::run_on_host;
using testing::run_sandbox;
using testing::TempDir;

class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
  }
  TempDir tmp_;
};

TEST_F(IsolationTest, CannotSeeHostProcesses) {
  std::string me = std::to_string(::getpid());
  EXPECT_TRUE(run_on_host({"see-pid", me}).exited_ok());
  auto in = run_in_sandbox(tmp_.path(), {"see-pid", me});
  EXPECT_EQ(in.exit_code(), 1) << in.out;
  // Only the sandbox's own processes are listed: the probe is pid 1 and alone.
  auto ls = run_in_sandbox(tmp_.path(), {"ls", "/proc"});
  int pids = 0;
  std::istringstream lines(ls.out);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty() && std::isdigit(static_cast<unsigned char>(l[0]))) ++pids;
  EXPECT_EQ(pids, 1) << ls.out;
}

TEST_F(IsolationTest, CannotWriteHostFiles) {
  // A read-only bound host directory: EROFS inside. On the host the control writes (and we
  // remove) a file in the same directory.
  std::string host_file = "/etc/abx-probe-" + testing::unique_id("w");
  ASSERT_TRUE(run_on_host({"write", host_file}).exited_ok());
  ::unlink(host_file.c_str());
  auto in = run_in_sandbox(tmp_.path(), {"write", host_file});
  EXPECT_EQ(in.exit_code(), 1) << in.out;
  EXPECT_EQ(in.out, "errno EROFS\n");
  struct stat st;
  EXPECT_NE(::stat(host_file.c_str(), &st), 0);

  // The writable layer: writes succeed inside and never reach the host's /tmp or /var/tmp.
  for (std::string dir : {"/tmp", "/var/tmp", "/root"}) {
    std::string path = dir + "/abx-probe-" + testing::unique_id("w");
    auto w = run_in_sandbox(tmp_.path(), {"write", path});
    EXPECT_TRUE(w.exited_ok()) << path << ": " << w.out;
    EXPECT_NE(::stat(path.c_str(), &st), 0) << path << " leaked to the host";
  }
}

TEST_F(IsolationTest, CannotReachHostLoopback) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(s, 8), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::string port = std::to_string(ntohs(a.sin_port));
  EXPECT_TRUE(run_on_host({"connect", port}).exited_ok());
  auto in = run_in_sandbox(tmp_.path(), {"connect", port});
  EXPECT_EQ(in.exit_code(), 1) << in.out;
  EXPECT_EQ(in.out, "errno ECONNREFUSED\n");  // lo is up, but nobody listens in this netns
  ::close(s);
}

TEST_F(IsolationTest, CannotCreateUserNamespace) {
  EXPECT_TRUE(run_on_host({"userns"}).exited_ok());
  auto in = run_in_sandbox(tmp_.path(), {"userns"});
  EXPECT_EQ(in.out, "errno EPERM\n");
  EXPECT_TRUE(run_on_host({"syscall", "clone_newuser"}).exited_ok());
  in = run_in_sandbox(tmp_.path(), {"syscall", "clone_newuser"});
  EXPECT_EQ(in.out, "errno EPERM\n");
}

TEST_F(IsolationTest, CannotCreateUserNamespaceThroughI386Entry) {
  auto host = run_on_host({"syscall", "unshare_newuser_i386"});
  if (host.exit_code() == 3) GTEST_SKIP() << "kernel without ia32 emulation";
  EXPECT_TRUE(host.exited_ok()) << host.out;
  auto in = run_in_sandbox(tmp_.path(), {"syscall", "unshare_newuser_i386"});
  EXPECT_EQ(in.out, "errno EPERM\n");
}

TEST_F(IsolationTest, CannotCreateUserNamespaceThroughX32Entry) {
  auto host = run_on_host({"syscall", "unshare_newuser_x32"});
  if (host.exit_code() == 3) GTEST_SKIP() << "kernel without the x32 ABI";
  EXPECT_TRUE(host.exited_ok()) << host.out;
  auto in = run_in_sandbox(tmp_.path(), {"syscall", "unshare_newuser_x32"});
  EXPECT_EQ(in.out, "errno EPERM\n");
}

TEST_F(IsolationTest, ProcMagicLinksStayInsideTheSandbox) {
  // /proc/<pid>/root of every process the sandbox can see is the sandbox root: a host-only
  // directory (the test's own temp dir) is reachable through it on the host only.
  EXPECT_TRUE(run_on_host({"ls", "/proc/self/root" + tmp_.path()}).exited_ok());
  auto in = run_in_sandbox(tmp_.path(), {"ls", "/proc/1/root" + tmp_.path()});
  EXPECT_EQ(in.out, "errno ENOENT\n");
  in = run_in_sandbox(tmp_.path(), {"ls", "/proc/self/cwd" + tmp_.path()});
  EXPECT_EQ(in.out, "errno ENOENT\n");
}

TEST_F(IsolationTest, RlimitsApplied) {
  auto c = testing::probe_config(tmp_.path(), {"cat", "/proc/self/limits"});
  c.rlimit_nofile = 321;
  c.rlimit_fsize = 1 << 20;
  auto in = run_sandbox(c);
  auto row = [&](const std::string& name) {
    auto at = in.out.find(name);
    if (at == std::string::npos) return std::string("<missing>");
    std::istringstream line(in.out.substr(at + name.size(), 64));
    std::string soft, hard;
    line >> soft >> hard;
    return soft + " " + hard;
  };
  EXPECT_EQ(row("Max open files"), "321 321") << in.out;
  EXPECT_EQ(row("Max file size"), "1048576 1048576");
  EXPECT_EQ(row("Max core file size"), "0 0");
}

TEST_F(IsolationTest, CannotMount) {
  EXPECT_TRUE(run_on_host({"mount"}).exited_ok());
  auto in = run_in_sandbox(tmp_.path(), {"mount"});
  EXPECT_EQ(in.out, "errno EPERM\n");
}

TEST_F(IsolationTest, DangerousSyscallsStopAtSeccomp) {
  // Host: each call reaches the kernel (fails validation, not permission). Sandbox: EPERM.
  for (std::string call :
       {"bpf", "io_uring_setup", "userfaultfd", "perf_event_open", "keyctl", "add_key", "ptrace",
        "finit_module", "reboot", "setns", "open_tree", "swapon", "umount2", "pivot_root"}) {
    auto host = run_on_host({"syscall", call});
    EXPECT_TRUE(host.exited_ok()) << call << " on host: " << host.out;
    auto in = run_in_sandbox(tmp_.path(), {"syscall", call});
    EXPECT_EQ(in.out, "errno EPERM\n") << call;
  }
}

// AIO contexts are one machine-wide pool without per-user limits: denied, as ENOSYS.
TEST_F(IsolationTest, AioContextsAreDenied) {
  auto host = run_on_host({"syscall", "io_setup"});
  EXPECT_TRUE(host.exited_ok()) << host.out;
  EXPECT_EQ(host.out, "ok\n");
  auto in = run_in_sandbox(tmp_.path(), {"syscall", "io_setup"});
  EXPECT_EQ(in.out, "errno ENOSYS\n");
}

// Per-user kernel counters are per sandbox: a sandbox that takes every inotify instance its user
// may have (fs.inotify.max_user_instances) takes none of host root's or another sandbox's.
// Without a user namespace sandbox root is host root, and the host's inotify_init1 below fails.
TEST_F(IsolationTest, InotifyInstancesArePerSandbox) {
  int limit = 0;
  std::ifstream("/proc/sys/fs/inotify/max_user_instances") >> limit;
  ASSERT_GT(limit, 0);
  struct Holder {
    std::optional<Sandbox> sb;
    std::string line;
  };
  auto hold = [&]() {
    Holder h;
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    auto c = testing::probe_config(tmp_.path(), {"inotify-hold", "30"});
    c.fds.push_back({p[1], 1});
    auto sb = Sandbox::spawn(std::move(c));
    ::close(p[1]);
    EXPECT_TRUE(sb.ok()) << sb.error().to_string();
    char ch;
    while (::read(p[0], &ch, 1) == 1 && ch != '\n') h.line += ch;
    ::close(p[0]);
    if (sb) h.sb.emplace(std::move(*sb));
    return h;
  };
  Holder a = hold();
  ASSERT_TRUE(a.sb);
  EXPECT_EQ(a.line, "held " + std::to_string(limit) + " errno EMFILE");
  int mine = ::inotify_init1(IN_CLOEXEC);  // host root still has its own
  EXPECT_GE(mine, 0) << "host root lost its inotify instances to a sandbox: " << errno;
  if (mine >= 0) ::close(mine);
  Holder b = hold();
  ASSERT_TRUE(b.sb);
  EXPECT_EQ(b.line, "held " + std::to_string(limit) + " errno EMFILE");
  EXPECT_TRUE(a.sb->destroy().ok());
  EXPECT_TRUE(b.sb->destroy().ok());
}

TEST_F(IsolationTest, CannotInjectTerminalInput) {
  for (std::string variant : {"low", "high"}) {
    auto host = run_on_host({"tiocsti", variant});
    EXPECT_TRUE(host.exited_ok()) << variant << ": " << host.out;
    auto in = run_in_sandbox(tmp_.path(), {"tiocsti", variant});
    EXPECT_EQ(in.out, "errno EPERM\n") << variant;
  }
}

TEST_F(IsolationTest, ForkBombStopsAtPidsLimit) {
  EXPECT_TRUE(run_on_host({"forkbomb", "64"}).exited_ok());
  auto c = testing::probe_config(tmp_.path(), {"forkbomb", "64"});
  c.limits.pids_max = 16;
  auto in = run_sandbox(std::move(c));
  EXPECT_EQ(in.exit_code(), 1) << in.out;
  EXPECT_NE(in.out.find("errno EAGAIN"), std::string::npos) << in.out;
}

TEST_F(IsolationTest, AllocationStopsAtMemoryLimit) {
  EXPECT_TRUE(run_on_host({"alloc", "96"}).exited_ok());
  auto c = testing::probe_config(tmp_.path(), {"alloc", "96"});
  c.limits.memory_bytes = 32ull << 20;
  auto in = run_sandbox(std::move(c));
  ASSERT_TRUE(WIFSIGNALED(in.status)) << "status " << in.status << ": " << in.out;
  EXPECT_EQ(WTERMSIG(in.status), SIGKILL);  // the OOM killer
}

TEST_F(IsolationTest, NoInheritedDescriptors) {
  // A descriptor the parent opened without O_CLOEXEC leaks into a plain fork+exec...
  int leaky = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leaky, 3);
  auto host = run_on_host({"fds"});
  EXPECT_TRUE(host.exited_ok()) << host.out;
  // ...but not into a sandbox.
  auto in = run_in_sandbox(tmp_.path(), {"fds"});
  EXPECT_EQ(in.exit_code(), 1) << in.out;
  ::close(leaky);
}

TEST_F(IsolationTest, CapabilitiesNoNewPrivsAndSeccomp) {
  auto parse = [](const std::string& out) {
    std::map<std::string, std::string> m;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      auto v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      m[line.substr(0, colon)] = v;
    }
    return m;
  };
  auto host = parse(run_on_host({"status"}).out);
  EXPECT_EQ(host["NoNewPrivs"], "0");  // control: the host probe is not confined
  EXPECT_EQ(host["Seccomp"], "0");
  auto c = probe_config(tmp_.path(), {"status"});
  ASSERT_TRUE(c.userns.enabled);  // the default
  auto in = parse(run_sandbox(c).out);
  // Without a user namespace (sandbox root is host root), no_new_privs keeps a setuid binary
  // from regaining what was dropped; in one, setuid (sudo) elevates to the sandbox's root only.
  c = probe_config(tmp_.path(), {"status"});
  c.userns.enabled = false;
  auto no_userns = parse(run_sandbox(c).out);
  EXPECT_EQ(no_userns["NoNewPrivs"], "1");
  EXPECT_EQ(no_userns["Seccomp"], "2");
  char expected[32];
  std::snprintf(expected, sizeof expected, "%016llx",
                static_cast<unsigned long long>(kKeptCapabilities));
  EXPECT_EQ(in["CapInh"], "0000000000000000");
  EXPECT_EQ(in["CapAmb"], "0000000000000000");
  EXPECT_EQ(in["CapBnd"], expected);
  EXPECT_EQ(in["CapEff"], expected);
  EXPECT_EQ(in["CapPrm"], expected);
  EXPECT_EQ(in["NoNewPrivs"], "0");
  EXPECT_EQ(in["Seccomp"], "2");
  EXPECT_EQ(no_userns["CapBnd"], expected);
  EXPECT_EQ(no_userns["CapEff"], expected);
}

TEST_F(IsolationTest, KernelKnobsReadOnlyAndSecretsMasked) {
  auto in = run_in_sandbox(tmp_.path(), {"write", "/proc/sys/kernel/core_pattern"});
  EXPECT_EQ(in.out, "errno EROFS\n");
  in = run_in_sandbox(tmp_.path(), {"write", "/proc/sysrq-trigger"});
  EXPECT_EQ(in.exit_code(), 1) << in.out;
  in = run_in_sandbox(tmp_.path(), {"cat", "/etc/shadow"});
  EXPECT_TRUE(in.exited_ok());
  EXPECT_EQ(in.out, "");  // masked with /dev/null
}

}  // namespace
}  // namespace abx::runtime
