#include "abx/runtime/sandbox.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>  // SIOCGSKNS
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "abx/runtime/netns.h"
#include "abx/runtime/process.h"
#include "abx/runtime/userns.h"
#include "abx/runtime/veth.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace abx::runtime {
namespace {

using testing::alive;
using testing::TempDir;

// Everything the sandbox put on the host is gone: state dir, cgroup dirs.
void expect_no_leftovers(const std::string& state_path, const std::vector<std::string>& cgroups) {
  EXPECT_FALSE(testing::path_exists(state_path)) << state_path;
  for (const auto& d : cgroups) EXPECT_FALSE(testing::path_exists(d)) << d;
  // Sandbox mounts live in the sandbox's mount namespace only; the host never sees one.
  std::ifstream mi("/proc/self/mountinfo");
  for (std::string line; std::getline(mi, line);)
    EXPECT_EQ(line.find(state_path), std::string::npos) << line;
}

std::vector<std::string> cgroup_dirs(const std::string& id) {
  auto l = CgroupLayout::detect();
  return l ? SandboxCgroups::existing(*l, "abx", id).dirs() : std::vector<std::string>{};
}

// A listener on the host's 127.0.0.1; returns the fd and sets *port.
int host_listener(uint16_t* port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 8) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  *port = ntohs(a.sin_port);
  return s;
}

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
  }
  TempDir tmp_;
};

TEST_F(SandboxTest, RunsProbeAndReportsHostname) {
  auto c = testing::probe_config(tmp_.path(), {"hostname"});
  std::string id = c.id;
  auto r = testing::run_sandbox(std::move(c));
  EXPECT_TRUE(r.exited_ok()) << r.out;
  EXPECT_EQ(r.out, id + "\n");
}

TEST_F(SandboxTest, InvalidConfigIsRejected) {
  auto c = testing::probe_config(tmp_.path(), {"hostname"});
  c.id = "Bad/Id";
  auto r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  c = testing::probe_config(tmp_.path(), {"hostname"});
  c.argv = {"relative/path"};
  r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(SandboxTest, FailedStepIsReportedWithErrnoAndLeavesNothing) {
  auto c = testing::probe_config(tmp_.path(), {});
  c.argv = {"/nonexistent/abx-binary"};
  std::string id = c.id;
  auto r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(r.error().message(), "sandbox " + id + ": execve /nonexistent/abx-binary: ENOENT");
  expect_no_leftovers(tmp_.path() + "/" + id, cgroup_dirs(id));

  // A step before clone: a bind source that does not exist.
  c = testing::probe_config(tmp_.path(), {"hostname"});
  c.binds.push_back({"/nonexistent-abx-src", "/x", false});
  r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.error().message().find("bind source /nonexistent-abx-src: ENOENT"), std::string::npos)
      << r.error().message();
  expect_no_leftovers(tmp_.path() + "/" + c.id, cgroup_dirs(c.id));
}

TEST_F(SandboxTest, DuplicateIdIsAlreadyExists) {
  auto c = testing::probe_config(tmp_.path(), {"sleep", "30"});
  auto a = Sandbox::spawn(c);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  auto b = Sandbox::spawn(c);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code(), ErrorCode::kAlreadyExists);
  EXPECT_TRUE(alive(a->pid()));  // the failed duplicate did not tear down the original
}

TEST_F(SandboxTest, DestroyKillsWholeTreeAndRemovesEverything) {
  auto c = testing::probe_config(tmp_.path(), {"sh", "sleep 100 & sleep 100 & sleep 100 & wait"});
  auto sb = Sandbox::spawn(c);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  std::vector<pid_t> pids;
  for (int i = 0; i < 2000 && pids.size() < 4; ++i) {
    pids = sb->cgroups().pids();
    ::usleep(1000);
  }
  ASSERT_EQ(pids.size(), 4u);  // sh + 3 sleeps
  auto dirs = sb->cgroups().dirs();
  std::string state = sb->state_path();
  EXPECT_TRUE(testing::path_exists(state));
  Status d = sb->destroy();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << p;
  expect_no_leftovers(state, dirs);
  EXPECT_TRUE(sb->destroy().ok());  // idempotent
}

// The first half of destroy() an owner answers after (abxd's DELETE): kill() ends the whole
// tree and closes the netns, while the cgroups and the state directory wait for destroy(); the
// user namespace's slot is the owner's from kill() to destroy(), not the dying init's.
TEST_F(SandboxTest, KillEndsTheTreeAndDestroyRemovesTheRest) {
  auto c = testing::probe_config(tmp_.path(), {"sh", "sleep 100 & sleep 100 & wait"});
  auto sb = Sandbox::spawn(c);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  std::vector<pid_t> pids;
  for (int i = 0; i < 2000 && pids.size() < 3; ++i) {
    pids = sb->cgroups().pids();
    ::usleep(1000);
  }
  ASSERT_EQ(pids.size(), 3u);  // sh + 2 sleeps
  ASSERT_TRUE(c.userns.enabled);
  const std::string claim = c.userns.registry + "/" +
                            std::to_string((sb->root_host_id() - c.userns.base) / kIdsPerSandbox);
  const std::string init_claim =
      std::to_string(sb->pid()) + " " + std::to_string(process_start_time(sb->pid())) + "\n";
  ASSERT_EQ(testing::slurp(claim), init_claim);
  auto dirs = sb->cgroups().dirs();
  const std::string state = sb->state_path();

  Status k = sb->kill(std::chrono::seconds(30));
  ASSERT_TRUE(k.ok()) << k.error().to_string();
  // Every process has exited (the init is a zombie until destroy() reaps it)...
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << p;
  // ...nothing new reaches its network namespace...
  auto sock = sb->tcp_socket();
  ASSERT_FALSE(sock.ok());
  EXPECT_EQ(sock.error().code(), ErrorCode::kFailedPrecondition);
  // ...its slot is held by this process now, and the rest is still there for destroy().
  EXPECT_EQ(testing::slurp(claim), std::to_string(::getpid()) + " " +
                                       std::to_string(process_start_time(::getpid())) + "\n");
  EXPECT_TRUE(testing::path_exists(state));
  for (const auto& d : dirs) EXPECT_TRUE(testing::path_exists(d)) << d;
  EXPECT_TRUE(sb->kill().ok());  // idempotent

  Status d = sb->destroy();
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  expect_no_leftovers(state, dirs);
  // Released (unless another test's sandbox took the slot in between: then it is not ours).
  const std::string after = testing::slurp(claim);
  EXPECT_EQ(after.find(std::to_string(::getpid()) + " "), std::string::npos) << after;
  EXPECT_TRUE(sb->kill().ok());  // after destroy(): nothing to do
}

// kill() without a wait answers at once; destroy() then waits for the tree, reaps the init and
// removes everything. A sandbox whose init had already exited (reaped) is killed as a no-op.
TEST_F(SandboxTest, KillWithoutWaitingThenDestroyLeavesNothing) {
  auto sb = Sandbox::spawn(testing::probe_config(tmp_.path(), {"sleep", "100"}));
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  const pid_t init = sb->pid();
  auto dirs = sb->cgroups().dirs();
  const std::string state = sb->state_path();
  ASSERT_TRUE(sb->kill().ok());
  ASSERT_TRUE(sb->destroy().ok());
  EXPECT_FALSE(alive(init));
  expect_no_leftovers(state, dirs);

  auto done = Sandbox::spawn(testing::probe_config(tmp_.path(), {"sh", "true"}));
  ASSERT_TRUE(done.ok()) << done.error().to_string();
  ASSERT_TRUE(done->wait().ok());
  const std::string done_state = done->state_path();
  auto done_dirs = done->cgroups().dirs();
  EXPECT_TRUE(done->kill(std::chrono::seconds(5)).ok());
  ASSERT_TRUE(done->destroy().ok());
  expect_no_leftovers(done_state, done_dirs);
}

TEST_F(SandboxTest, DirectoryRootfsIsCopyOnWrite) {
  std::string rootfs = tmp_.path() + "/rootfs";
  ASSERT_EQ(::mkdir(rootfs.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((rootfs + "/bin").c_str(), 0755), 0);
  std::ofstream(rootfs + "/hello") << "from lower\n";
  std::string state = tmp_.path() + "/state";
  auto make = [&](std::vector<std::string> args) {
    auto c = testing::probe_config(state, std::move(args));
    c.rootfs = RootfsMode::kDirectory;
    c.rootfs_dir = rootfs;
    return c;
  };
  auto r = testing::run_sandbox(make({"cat", "/hello"}));
  EXPECT_EQ(r.out, "from lower\n");
  // Writes (new files, and over a lower file) land in the sandbox's upper layer only.
  r = testing::run_sandbox(make({"write", "/hello"}));
  EXPECT_TRUE(r.exited_ok()) << r.out;
  r = testing::run_sandbox(make({"write", "/bin/new"}));
  EXPECT_TRUE(r.exited_ok()) << r.out;
  std::ifstream in(rootfs + "/hello");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "from lower");
  EXPECT_FALSE(testing::path_exists(rootfs + "/bin/new"));
  r = testing::run_sandbox(make({"ls", "/bin"}));
  EXPECT_EQ(r.out.find("new"), std::string::npos) << r.out;  // not in the next sandbox either
  // No host binaries in a directory rootfs: only what the rootfs and binds provide.
  r = testing::run_sandbox(make({"ls", "/"}));
  EXPECT_EQ(r.out.find("usr"), std::string::npos) << r.out;
}

TEST_F(SandboxTest, SymlinkedMountPointInRootfsIsRefused) {
  std::string rootfs = tmp_.path() + "/rootfs";
  ASSERT_EQ(::mkdir(rootfs.c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/", (rootfs + "/proc").c_str()), 0);  // catalogue E3
  auto c = testing::probe_config(tmp_.path() + "/state", {"hostname"});
  c.rootfs = RootfsMode::kDirectory;
  c.rootfs_dir = rootfs;
  auto r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("refusing symlinked mount point proc: ELOOP"),
            std::string::npos)
      << r.error().message();
}

TEST_F(SandboxTest, MappedDescriptorIsPassed) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  auto c = testing::probe_config(tmp_.path(), {"fds"});
  c.fds.push_back({p[1], 7});
  auto r = testing::run_sandbox(c);
  ::close(p[0]);
  ::close(p[1]);
  EXPECT_TRUE(r.exited_ok()) << r.out;
  EXPECT_NE(r.out.find("fd 7 -> pipe:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("fd 3"), std::string::npos) << r.out;
}

// SandboxConfig::companion: started by the init just before its exec, with the descriptors it
// maps and no other, in a session of its own, in "/" when its cwd is missing, argv's name looked
// up in its PATH; its pid is in the init's argv, and its private descriptor is not the init's.
TEST_F(SandboxTest, CompanionStartsBesideTheInit) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  auto c = testing::probe_config(tmp_.path(), {});
  // $0 is the argument the runtime appends. The companion's line comes over fd 4.
  // The descriptors are looked for one by one ([ is a builtin: it opens none of its own).
  const std::string fds =
      "f=; for n in 0 1 2 3 4 5 6 7 8 9; do [ -e /proc/$$/fd/$n ] && f=\"$f$n \"; done; ";
  c.argv = {"/bin/sh", "-c",
            fds +
                "echo \"init $0 $$ sid $(cut -d' ' -f6 /proc/$$/stat) fds $f\"; read -r line "
                "<&4; echo \"$line\""};
  c.fds = {{sv[0], 4}, {sv[1], 6}};
  SandboxConfig::Companion k;
  k.argv = {"sh", "-c",
            fds + "echo \"companion $$ sid $(cut -d' ' -f6 /proc/$$/stat) fds ${f}" +
                "cwd $(pwd) home $HOME\" >&3"};
  k.env = {"PATH=/nonexistent:/usr/bin:/bin", "HOME=/x"};
  k.cwd = "/nonexistent";
  k.fds = {{6, 3}};
  k.private_fds = {6};
  k.pid_flag = "--companion-pid";
  c.companion = k;
  auto r = testing::run_sandbox(c);
  ::close(sv[0]);
  ::close(sv[1]);
  ASSERT_TRUE(r.exited_ok()) << r.out;
  // "init --companion-pid=N 1 sid 1 fds 0 1 2 4 " then "companion N sid N fds 0 1 2 3 cwd / ..."
  const auto at = r.out.find("init --companion-pid=");
  ASSERT_NE(at, std::string::npos) << r.out;
  const int pid = std::atoi(r.out.c_str() + at + std::strlen("init --companion-pid="));
  EXPECT_GT(pid, 1) << r.out;
  EXPECT_NE(r.out.find(" 1 sid 1 fds 0 1 2 4 \n"), std::string::npos) << r.out;
  const std::string n = std::to_string(pid);
  EXPECT_NE(r.out.find("companion " + n + " sid " + n + " fds 0 1 2 3 cwd / home /x\n"),
            std::string::npos)
      << r.out;
}

// A sandbox booted by a background thread that lowered its own priority (the sandbox pool's
// refill) runs at the daemon's priority, its init and what the init starts alike: a process
// inherits the nice value of the thread that cloned it.
TEST_F(SandboxTest, ASandboxBootedFromALoweredThreadRunsAtTheDaemonsPriority) {
  errno = 0;
  const int daemon = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::getpid()));
  ASSERT_EQ(errno, 0);
  if (daemon >= 19) GTEST_SKIP() << "the test runs at nice 19: no thread can go lower";
  auto c = testing::probe_config(tmp_.path(), {});
  // Field 19 of /proc/<pid>/stat is the nice value: the init's, then a child's of it.
  c.argv = {"/bin/sh", "-c",
            "cut -d' ' -f19 /proc/$$/stat; sh -c 'cut -d\" \" -f19 /proc/$$/stat'"};
  testing::RunResult r;
  int lowered = 0;
  std::thread booter([&] {
    lower_thread_priority(10);
    lowered = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
    r = testing::run_sandbox(c);
  });
  booter.join();
  ASSERT_GT(lowered, daemon);  // the booting thread did run lower
  ASSERT_TRUE(r.exited_ok()) << r.out;
  const std::string n = std::to_string(daemon);
  EXPECT_EQ(r.out, n + "\n" + n + "\n");
}

// A companion whose exec fails leaves the init running, with 0 as its pid.
TEST_F(SandboxTest, ACompanionThatCannotStartIsPidZero) {
  auto c = testing::probe_config(tmp_.path(), {});
  c.argv = {"/bin/sh", "-c", "echo \"init $0\""};
  SandboxConfig::Companion k;
  k.argv = {"abx-no-such-program"};
  k.env = {"PATH=/usr/bin:/bin"};
  k.pid_flag = "--companion-pid";
  c.companion = k;
  auto r = testing::run_sandbox(c);
  EXPECT_TRUE(r.exited_ok()) << r.out;
  EXPECT_EQ(r.out, "init --companion-pid=0\n");
}

// A companion's descriptors must be the init's.
TEST_F(SandboxTest, ACompanionDescriptorTheInitLacksIsRefused) {
  auto c = testing::probe_config(tmp_.path(), {"hostname"});
  SandboxConfig::Companion k;
  k.argv = {"/bin/true"};
  k.fds = {{9, 3}};
  k.pid_flag = "--companion-pid";
  c.companion = k;
  auto r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("descriptor 9 -> 3"), std::string::npos)
      << r.error().message();
}

// uid, gid and groups: argv runs as them, with no capabilities left; the default stays root.
// The init starts with the signal mask of the thread that spawned it, whichever way it was
// cloned (the CLONE_VM clone blocks every signal in its own thread and the child puts the
// spawning thread's mask back before its exec).
TEST_F(SandboxTest, InitGetsTheSpawningThreadsSignalMask) {
  sigset_t usr2, before;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &usr2, &before), 0);
  // The probe itself (the init), not a shell: dash clears its mask when it starts.
  auto r = testing::run_in_sandbox(tmp_.path(), {"cat", "/proc/self/status"});
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  EXPECT_TRUE(r.exited_ok()) << r.out;
  EXPECT_NE(r.out.find("\nSigBlk:\t0000000000000800\n"), std::string::npos)  // SIGUSR2 (12) alone
      << r.out;
}

// Each spawn's cloning thread (dev and release builds: the init shares our memory until its
// exec) ends once the init has exec'd or died, failed spawns included: the process's threads
// come back to what they were.
TEST_F(SandboxTest, SpawnsLeaveNoThreadBehind) {
  auto threads = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
      ++n;
    return n;
  };
  const std::size_t before = threads();
  for (int i = 0; i < 5; ++i) {
    auto ok = testing::run_in_sandbox(tmp_.path(), {"hostname"});
    EXPECT_TRUE(ok.exited_ok()) << ok.out;
    auto c = testing::probe_config(tmp_.path(), {});
    c.argv = {"/nonexistent/abx-binary"};
    EXPECT_FALSE(Sandbox::spawn(c).ok());
  }
  std::size_t now = threads();
  for (int i = 0; i < 200 && now != before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = threads();
  }
  EXPECT_EQ(now, before);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && defined(__x86_64__)
// What the CLONE_VM clone is for: a fork would leave every page this process had write-protected,
// and the first write to each after the spawn would fault (bench/README.md). 8 MiB of 4 KiB
// pages written before a spawn are written again after it without a fault per page.
TEST_F(SandboxTest, SpawnLeavesTheParentsMemoryWritable) {
  if (const char* f = std::getenv("ABX_SPAWN_FORK"); f != nullptr && *f != '\0' && *f != '0')
    GTEST_SKIP() << "ABX_SPAWN_FORK: the init is a fork";
  constexpr std::size_t kBytes = 8u << 20;
  void* mem = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ::madvise(mem, kBytes, MADV_NOHUGEPAGE);  // one fault per 4 KiB page, as the heap's
  auto* bytes = static_cast<volatile char*>(mem);
  auto write_all = [&](char v) {
    for (std::size_t i = 0; i < kBytes; i += 4096) bytes[i] = v;
  };
  auto faults = [] {
    rusage u = {};
    ::getrusage(RUSAGE_THREAD, &u);
    return u.ru_minflt;
  };
  write_all(1);
  auto r = testing::run_in_sandbox(tmp_.path(), {"hostname"});
  EXPECT_TRUE(r.exited_ok()) << r.out;
  const long f0 = faults();
  write_all(2);
  const long f1 = faults();
  ::munmap(mem, kBytes);
  EXPECT_LT(f1 - f0, 64) << "of " << kBytes / 4096 << " pages written after the spawn";
}
#endif

TEST_F(SandboxTest, RunsAsTheConfiguredIds) {
  auto c = testing::probe_config(tmp_.path(), {"status"});
  c.uid = 1000;
  c.gid = 100;
  c.groups = {20, 30};
  auto r = testing::run_sandbox(c);
  EXPECT_TRUE(r.exited_ok()) << r.out;
  EXPECT_NE(r.out.find("Uid:\t1000\t1000\t1000\t1000\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Gid:\t100\t100\t100\t100\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Groups:\t20 30"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CapEff:\t0000000000000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CapPrm:\t0000000000000000"), std::string::npos) << r.out;

  auto root = testing::run_sandbox(testing::probe_config(tmp_.path(), {"status"}));
  EXPECT_NE(root.out.find("Uid:\t0\t0\t0\t0\n"), std::string::npos) << root.out;

  c = testing::probe_config(tmp_.path(), {"status"});
  c.groups.assign(kMaxGroups + 1, 5);
  auto refused = Sandbox::spawn(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(SandboxTest, HostReachesPortInsideSandboxNetns) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  auto c = testing::probe_config(tmp_.path(), {"listen", "8080"});
  c.fds.push_back({p[1], 1});
  auto sb = Sandbox::spawn(c);
  ::close(p[1]);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  char buf[32] = {};
  ASSERT_GT(::read(p[0], buf, sizeof buf - 1), 0);  // "listening"
  ::close(p[0]);
  // The host's own 127.0.0.1:8080 is a different stack (nothing or something else listens).
  auto fd = sb->open_tcp(8080);
  ASSERT_TRUE(fd.ok()) << fd.error().to_string();
  pollfd pfd{fd->get(), POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  char hi[3] = {};
  EXPECT_EQ(::read(fd->get(), hi, 2), 2);
  EXPECT_STREQ(hi, "hi");

  // A port open on the host loopback is not reachable through the sandbox's netns.
  uint16_t port = 0;
  int l = host_listener(&port);
  ASSERT_GE(l, 0);
  EXPECT_TRUE(connect_loopback(-1, port, std::chrono::seconds(2)).ok());  // control
  auto in = sb->open_tcp(port);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.error().code(), ErrorCode::kUnavailable) << in.error().to_string();
  ::close(l);

  // Once destroyed, its netns fd is closed: no socket is made from a number since reused.
  ASSERT_TRUE(sb->destroy().ok());
  auto gone = sb->tcp_socket();
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kFailedPrecondition) << gone.error().to_string();
}

namespace {
ino_t netns_inode(int fd) {
  struct stat st = {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}
// A fresh network namespace (made by a thread of its own, which unshares and ends), as an fd.
int new_netns() {
  int netns = -1;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) == 0)
      netns = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  });
  t.join();
  return netns;
}
ino_t thread_netns_inode() {
  struct stat st = {};
  return ::stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}
}  // namespace

// socket_in_netns switches the calling thread itself: the socket is in the target netns (the
// kernel's SIOCGSKNS names it), and the thread is back in its own afterwards.
TEST(SocketInNetns, TheSocketIsInTheTargetAndTheCallerReturnsHome) {
  const int netns = new_netns();
  ASSERT_GE(netns, 0);
  const ino_t home = thread_netns_inode();
  ASSERT_NE(home, netns_inode(netns));
  auto s = socket_in_netns(netns, AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(thread_netns_inode(), home);
  int sk_ns = ::ioctl(s->get(), SIOCGSKNS);
  ASSERT_GE(sk_ns, 0);
  EXPECT_EQ(netns_inode(sk_ns), netns_inode(netns));
  ::close(sk_ns);
  // Not a netns fd: an error naming setns, and the thread has not moved.
  auto bad = socket_in_netns(s->get(), AF_INET, SOCK_STREAM);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().to_string().find("setns"), std::string::npos) << bad.error().to_string();
  EXPECT_EQ(thread_netns_inode(), home);
  ::close(netns);
}

// A port of the ephemeral range with nothing behind it: left to connect(), the kernel may pick
// that very port as the source, and TCP's simultaneous open then connects the socket to itself,
// holding the port a server is about to bind. Forced here with a netns whose ephemeral range is
// that one port: the probe is refused without ever holding the port, and a server binds it.
TEST(ConnectLoopback, NeverConnectsToItselfNorHoldsThePort) {
  constexpr std::uint16_t kPort = 45123;
  int netns = -1;
  std::string setup_error;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) return void(setup_error = "unshare CLONE_NEWNET");
    int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr = {};
    std::memcpy(ifr.ifr_name, "lo", 3);
    bool up = s >= 0 && ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    up = up && ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
    if (s >= 0) ::close(s);
    if (!up) return void(setup_error = "lo up");
    std::ofstream("/proc/sys/net/ipv4/ip_local_port_range")
        << kPort << " " << kPort << "\n";  // this thread's netns only
    netns = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  });
  t.join();
  ASSERT_EQ(setup_error, "");
  ASSERT_GE(netns, 0);
  auto r = connect_loopback(netns, kPort, std::chrono::seconds(2));
  ASSERT_FALSE(r.ok()) << "connected to 127.0.0.1:" << kPort << " with nothing listening";
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable) << r.error().to_string();
  EXPECT_NE(r.error().to_string().find("same source port"), std::string::npos)
      << r.error().to_string();
  // The port is free for the server the probe was waiting for (no SO_REUSEADDR: nothing may be
  // bound there at all).
  auto server = tcp_socket_in(netns);
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(kPort);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(server->get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << std::strerror(errno);
  ASSERT_EQ(::listen(server->get(), 4), 0) << std::strerror(errno);
  ::close(netns);
}

// A host end left by a dead sandbox of another abxd (another name prefix) still holds the slot's
// address while the kernel takes its namespace down; the slot numbering is machine-wide, so the
// new sandbox of that slot must replace it, or the host has two routes to the slot's /30 and
// the new sandbox's replies (its DNS answers) can go into the dying link.
TEST(Veth, AStaleLinkOfAnotherDaemonHoldingTheSlotsAddressIsReplaced) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  VethConfig c;
  c.enabled = true;
  c.subnet_base = (10u << 24) | (252u << 16);
  c.name_prefix = "ab0abc0def";
  const VethInfo info = veth_for_slot(c, 5);  // ab0abc0def5, host 10.252.0.21
  const std::string stale = "ab1234abcd5";    // another daemon's name for the same slot
  ASSERT_EQ(std::system(("ip link add " + stale +
                         " type veth peer name abxtstpeer && ip addr add 10.252.0.21/30 dev " +
                         stale + " && ip link set " + stale + " up")
                            .c_str()),
            0);
  const int netns = new_netns();
  ASSERT_GE(netns, 0);
  Status s = setup_veth(c, info, netns);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(::if_nametoindex(stale.c_str()), 0u) << "the stale link is still there";
  EXPECT_NE(::if_nametoindex(info.host_if.c_str()), 0u);
  (void)remove_veth(info);
  (void)remove_veth(VethInfo{stale, 0, 0});  // gone already unless the test failed
  ::close(netns);
}

// The egress proxy asks this for every flow (issue 35, finding 2): an address added to the host
// after abxd started must count as the host's at once, and stop counting when it goes.
TEST(Veth, IsHostAddressFollowsAddressesAddedAndRemovedLater) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  const std::string dummy = "abxtsthost0";
  // TEST-NET-2, and not .77: boundary_probes adds that one on the host, and ctest may run both
  // at once.
  const std::uint32_t added = (198u << 24) | (51u << 16) | (100u << 8) | 78u;
  for (std::uint32_t lo : {0x7f000001u, 0x7f050505u}) {
    auto r = is_host_address(lo);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_TRUE(*r) << lo;
  }
  auto before = is_host_address(added);
  ASSERT_TRUE(before.ok()) << before.error().to_string();
  EXPECT_FALSE(*before);
  // A veth pair with both ends on the host (kernels without the dummy driver have veth).
  ASSERT_EQ(std::system(("ip link add " + dummy + " type veth peer name " + dummy +
                         "p && ip addr add 198.51.100.78/32 dev " + dummy + " && ip link set " +
                         dummy + " up")
                            .c_str()),
            0);
  auto during = is_host_address(added);
  EXPECT_EQ(std::system(("ip link del " + dummy + " 2>/dev/null").c_str()), 0);
  ASSERT_TRUE(during.ok()) << during.error().to_string();
  EXPECT_TRUE(*during) << "an address added after the start is not seen as the host's";
  auto after = is_host_address(added);
  ASSERT_TRUE(after.ok()) << after.error().to_string();
  EXPECT_FALSE(*after);
}

TEST_F(SandboxTest, HostNetworkModeSharesHostLoopback) {
  uint16_t port = 0;
  int l = host_listener(&port);
  ASSERT_GE(l, 0);
  auto c = testing::probe_config(tmp_.path(), {"connect", std::to_string(port)});
  c.network = NetworkMode::kHost;
  auto r = testing::run_sandbox(c);
  EXPECT_TRUE(r.exited_ok()) << r.out;  // documented as weaker: the host loopback is reachable
  ::close(l);
}

// Forks an owner process that spawns a sandbox (sh with two sleeps) over `state` and reports
// its init pid through a pipe, then waits to be killed; with `mid_spawn` it SIGKILLs itself
// between cgroup attach and releasing the init instead. Sets *id, *owner and *init_out.
void fork_owner(const std::string& state, bool mid_spawn, std::string* id, pid_t* owner,
                pid_t* init_out) {
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  auto c = testing::probe_config(state, {"sh", "sleep 100 & sleep 100 & wait"});
  *id = c.id;
  *owner = ::fork();
  if (*owner == 0) {
    if (mid_spawn)
      c.before_start_hook = [&](pid_t init) {
        (void)!::write(report[1], &init, sizeof init);
        ::raise(SIGKILL);
      };
    auto sb = Sandbox::spawn(c);
    if (sb) {
      pid_t init = sb->pid();
      (void)!::write(report[1], &init, sizeof init);
      ::pause();
    }
    _exit(1);
  }
  ::close(report[1]);
  *init_out = 0;
  ASSERT_EQ(::read(report[0], init_out, sizeof *init_out), static_cast<ssize_t>(sizeof *init_out));
  ::close(report[0]);
}

// The owner of a sandbox dies by SIGKILL; cleanup_stale() must remove every trace.
// `mid_spawn`: it dies between cgroup attach and releasing the init; else after exec.
void owner_killed_then_cleanup(const std::string& state, bool mid_spawn) {
  // Orphans are reparented to us, so we can reap them and check for real absence.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  std::string id;
  pid_t owner = 0, init = 0;
  ASSERT_NO_FATAL_FAILURE(fork_owner(state, mid_spawn, &id, &owner, &init));
  auto dirs = cgroup_dirs(id);
  if (!mid_spawn) {
    // Wait for sh and both sleeps: by the clock (30 s), not by a count of 1 ms sleeps, which a
    // loaded machine stretches but a slow start there may outlast.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (SandboxCgroups::existing(*CgroupLayout::detect(), "abx", id).pids().size() < 3 &&
           std::chrono::steady_clock::now() < deadline) {
      ::usleep(1000);
    }
  }
  ASSERT_EQ(::kill(owner, SIGKILL), 0);
  ASSERT_EQ(::waitpid(owner, nullptr, 0), owner);
  auto before = SandboxCgroups::existing(*CgroupLayout::detect(), "abx", id).pids();
  if (!mid_spawn) {
    EXPECT_EQ(before.size(), 3u);  // the sandbox outlived its owner...
    EXPECT_TRUE(testing::path_exists(state + "/" + id));
  }

  auto n = cleanup_stale(state);
  ASSERT_TRUE(n.ok()) << n.error().to_string();
  EXPECT_EQ(*n, 1);
  // ...and cleanup leaves no process, cgroup or state behind.
  ::waitpid(init, nullptr, 0);  // reap it if it was reparented to us
  EXPECT_FALSE(alive(init));
  for (pid_t p : before) EXPECT_FALSE(alive(p)) << p;
  expect_no_leftovers(state + "/" + id, dirs);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_F(SandboxTest, CleanupAfterOwnerKilledWhileRunning) {
  owner_killed_then_cleanup(tmp_.path(), false);
}

TEST_F(SandboxTest, CleanupAfterOwnerKilledMidSpawn) {
  owner_killed_then_cleanup(tmp_.path(), true);
}

// A new owner adopts a sandbox whose owner was killed: same init (pid + start time), same
// netns, and destroy() then removes everything. A live owner's sandbox cannot be adopted.
TEST_F(SandboxTest, AdoptAfterOwnerKilled) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  std::string id;
  pid_t owner = 0, init = 0;
  ASSERT_NO_FATAL_FAILURE(fork_owner(tmp_.path(), false, &id, &owner, &init));
  auto dirs = cgroup_dirs(id);
  auto busy = Sandbox::adopt(tmp_.path(), id);  // the owner is alive: refused
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code(), ErrorCode::kAlreadyExists);
  ASSERT_EQ(::kill(owner, SIGKILL), 0);
  ASSERT_EQ(::waitpid(owner, nullptr, 0), owner);

  auto sb = Sandbox::adopt(tmp_.path(), id);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  EXPECT_EQ(sb->pid(), init);
  EXPECT_TRUE(alive(init));
  // The adopted netns is the sandbox's own: the host's listeners are not there.
  uint16_t port = 0;
  int l = host_listener(&port);
  ASSERT_GE(l, 0);
  EXPECT_FALSE(sb->open_tcp(port, std::chrono::milliseconds(500)).ok());
  ::close(l);
  EXPECT_EQ(cleanup_stale(tmp_.path()).value(), 0);  // adopted means locked: not stale
  ASSERT_TRUE(sb->destroy().ok());
  ::waitpid(init, nullptr, 0);  // reparented to us as subreaper
  EXPECT_FALSE(alive(init));
  expect_no_leftovers(tmp_.path() + "/" + id, dirs);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_F(SandboxTest, AdoptOfADeadSandboxIsNotFound) {
  auto c = testing::probe_config(tmp_.path(), {"hostname"});
  std::string id = c.id;
  auto r = Sandbox::adopt(tmp_.path(), id);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
}

TEST_F(SandboxTest, CleanupSkipsLiveSandboxes) {
  auto sb = Sandbox::spawn(testing::probe_config(tmp_.path(), {"sleep", "30"}));
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  auto n = cleanup_stale(tmp_.path());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0);
  EXPECT_TRUE(alive(sb->pid()));
  EXPECT_TRUE(testing::path_exists(sb->state_path()));
}

}  // namespace
}  // namespace abx::runtime
