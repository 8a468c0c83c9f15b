// checkpoint()/restore() with the real CRIU (/usr/local/lib/abx/criu/criu, made by
// scripts/install-criu.sh) on busybox image sandboxes with a user namespace and a veth, running
// runtime_probe's counter (in-memory count, written to /count on SIGUSR1). Needs root; skipped
// when CRIU is absent or `criu check` fails.
#include "abx/runtime/checkpoint.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/magic.h>
#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "abx/base/scope_exit.h"
#include "abx/runtime/process.h"
#include "abx/runtime/sandbox.h"
#include "abx/testing/rootfs.h"
#include "abx/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace abx::runtime {
namespace {

using testing::alive;
using testing::slurp;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The tests' checkpoint key (abxd's is random, in its home).
const std::string kKey(kCheckpointKeyBytes, 'k');

// The hostname in `pid`'s uts namespace (read by a child that joins it).
std::string hostname_of(pid_t pid) {
  int fd = ::open(("/proc/" + std::to_string(pid) + "/ns/uts").c_str(), O_RDONLY | O_CLOEXEC);
  int p[2];
  if (fd < 0 || ::pipe2(p, O_CLOEXEC) != 0) return "";
  pid_t child = ::fork();
  if (child == 0) {
    char name[65] = {};
    if (::setns(fd, CLONE_NEWUTS) != 0 || ::gethostname(name, sizeof name - 1) != 0) _exit(1);
    (void)!::write(p[1], name, ::strlen(name));
    _exit(0);
  }
  ::close(p[1]);
  ::close(fd);
  std::string out = testing::read_all(p[0]);
  ::close(p[0]);
  ::waitpid(child, nullptr, 0);
  return out;
}

// The state letter of /proc/<pid>/stat ('T': stopped), or '?' when the task is gone.
char task_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(") ");
  return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
}

struct Count {
  unsigned long long n = 0;
  std::string token;
};

std::optional<Count> parse_count(const std::string& text) {
  std::istringstream in(text);
  Count c;
  if (!(in >> c.n >> c.token)) return std::nullopt;
  return c;
}

// Asks the counter (the init) for its count and waits until a newer one is in `upper`/count.
std::optional<Count> request(const Sandbox& sb, const std::string& upper) {
  auto before = parse_count(slurp(upper + "/count"));
  for (int i = 0; i < 50; ++i) {
    if (!sb.signal(SIGUSR1).ok()) return std::nullopt;
    for (int j = 0; j < 20; ++j) {
      std::this_thread::sleep_for(5ms);
      auto now = parse_count(slurp(upper + "/count"));
      if (now && (!before || now->n != before->n || now->token != before->token)) return now;
    }
  }
  return std::nullopt;
}

std::map<std::string, std::uintmax_t> listing(const std::string& dir) {
  std::map<std::string, std::uintmax_t> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename()] = e.file_size();
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
    if (Status s = criu_available(kDefaultCriu); !s)
      GTEST_SKIP() << "CRIU unavailable (scripts/install-criu.sh): " << s.error().message();
    base_ = tmp_.string() + "/layers/0-busybox";
    fs::create_directories(base_);
    std::string why;
    if (!abx::testing::make_busybox_layer(base_, &why)) GTEST_SKIP() << why;
    state_ = tmp_.string() + "/state";
  }

  SandboxConfig counter_config() {
    SandboxConfig c =
        testing::image_config(state_, {base_}, {testing::kProbeInside, "count", "/count"}, "ck");
    c.binds.push_back({testing::probe_path(), testing::kProbeInside, false});
    c.veth.enabled = true;
    c.veth.subnet_base = (10u << 24) | (251u << 16);
    c.veth.name_prefix = "abxck";
    c.limits.pids_max = 64;
    return c;
  }

  // A running counter whose first count has been written.
  std::optional<Sandbox> spawn_counter(const SandboxConfig& c, Count* first) {
    auto sb = Sandbox::spawn(c);
    if (!sb) {
      ADD_FAILURE() << "spawn: " << sb.error().to_string();
      return std::nullopt;
    }
    std::this_thread::sleep_for(300ms);
    auto n = request(*sb, sb->upper_dir());
    if (!n) {
      ADD_FAILURE() << "the counter does not answer";
      return std::nullopt;
    }
    *first = *n;
    return std::move(sb).value();
  }

  // A counter of `c` spawned and checkpointed (CheckpointOptions' defaults: it no longer runs)
  // into <tmp>/ck, which is returned; empty (with the failure added) if either step failed.
  std::string checkpointed_counter(const SandboxConfig& c, Count* first) {
    auto sb = spawn_counter(c, first);
    if (!sb) return "";
    const std::string dir = tmp_.string() + "/ck";
    if (auto info = checkpoint(*sb, dir, {.mac_key = kKey}); !info) {
      ADD_FAILURE() << "checkpoint: " << info.error().to_string();
      return "";
    }
    return dir;
  }

  // Running, thawed, counting, its veth in place.
  void expect_running(const Sandbox& sb, const Count& before) {
    EXPECT_TRUE(alive(sb.pid()));
    EXPECT_NE(slurp(sb.cgroups().dirs().front() + "/cgroup.events").find("frozen 0"),
              std::string::npos);
    ASSERT_TRUE(sb.veth().has_value());
    EXPECT_NE(::if_nametoindex(sb.veth()->host_if.c_str()), 0u) << sb.veth()->host_if;
    auto now = request(sb, sb.upper_dir());
    ASSERT_TRUE(now.has_value());
    EXPECT_EQ(now->token, before.token);
    EXPECT_GT(now->n, before.n);
  }

  // Nothing of sandbox `id` is left on the host.
  void expect_no_leftovers(const std::string& id, const std::vector<std::string>& cgroups) {
    const std::string state = state_ + "/" + id;
    EXPECT_FALSE(fs::exists(state)) << state;
    EXPECT_FALSE(fs::exists(RestoreOptions{}.stage_dir + "/" + id));
    for (const auto& d : cgroups) EXPECT_FALSE(fs::exists(d)) << d;
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);) {
      EXPECT_EQ(line.find(state), std::string::npos) << line;
      EXPECT_EQ(line.find(RestoreOptions{}.stage_dir + "/" + id), std::string::npos) << line;
    }
    std::string left;
    for (int i = 0; i < 100; ++i) {
      left.clear();
      for (const auto& e : fs::directory_iterator("/sys/block")) {
        if (slurp(e.path() / "loop/backing_file").find(tmp_.string()) != std::string::npos)
          left += e.path().string() + " ";
      }
      if (left.empty()) break;
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(left, "") << "loop devices still backed by files of " << tmp_.string();
  }

  abx::testing::TempDir tmp_{"abx-rt-ckpt"};
  std::string base_, state_;
};

TEST_F(CheckpointTest, PauseToDiskThenRestoreContinuesCounting) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  std::this_thread::sleep_for(200ms);
  auto before = request(*sb, sb->upper_dir());
  ASSERT_TRUE(before);
  ASSERT_GT(before->n, first.n);
  auto pids = sb->cgroups().pids();
  ASSERT_EQ(pids.size(), 2u);  // the counter and its child
  const auto cgroups = sb->cgroups().dirs();
  const std::string host_if = sb->veth()->host_if;
  const std::string dir = tmp_.string() + "/ck";

  auto info = checkpoint(*sb, dir, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  std::cout << "checkpoint: dump " << info->dump.count() << " ms, frozen " << info->frozen.count()
            << " ms, total " << info->total.count() << " ms, images " << info->image_bytes
            << " B, layer " << info->layer_bytes << " B\n";
  // Paused to disk: no process, no cgroup, no state dir, no link; the checkpoint has it all.
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << p;
  EXPECT_EQ(::if_nametoindex(host_if.c_str()), 0u);
  expect_no_leftovers(c.id, cgroups);
  for (const char* f : {"checkpoint.json", "rw.img", "inventory.img", "dump.log"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  const auto files = listing(dir);

  for (int round = 0; round < 2; ++round) {  // the checkpoint is left intact: restore it twice
    const auto t0 = std::chrono::steady_clock::now();
    auto back = restore(dir, c, {.mac_key = kKey});
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    std::cout << "restore: "
              << std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count()
              << " ms\n";
    EXPECT_EQ(back->cgroups().pids().size(), 2u);
    // What was written before the dump is there, and the count goes on from where it was.
    EXPECT_EQ(parse_count(slurp(back->upper_dir() + "/count"))->n, before->n);
    EXPECT_EQ(slurp(back->upper_dir() + "/count.started"), first.token + "\n");
    auto after = request(*back, back->upper_dir());
    ASSERT_TRUE(after);
    EXPECT_EQ(after->token, before->token) << "a new process, not the restored one";
    EXPECT_GE(after->n, before->n);
    EXPECT_LT(after->n, before->n + 200) << "counted while paused to disk?";
    expect_running(*back, *after);
    const auto restored_cgroups = back->cgroups().dirs();
    ASSERT_TRUE(back->destroy().ok());
    expect_no_leftovers(c.id, restored_cgroups);
    for (const auto& [name, size] : files) {
      ASSERT_TRUE(fs::exists(dir + "/" + name)) << name;
      EXPECT_EQ(fs::file_size(dir + "/" + name), size) << name;
    }
  }
}

// A connection that a listener in the sandbox has not accepted yet (a client connecting just as
// the pause comes) does not fail the dump: it is left out (criu --skip-in-flight), and the
// sandbox, its listener included, comes back.
TEST_F(CheckpointTest, AConnectionNotYetAcceptedDoesNotFailThePause) {
  constexpr std::uint16_t kPort = 7411;
  SandboxConfig c = counter_config();
  c.argv = {testing::kProbeInside, "count", "/count", std::to_string(kPort)};
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  // The handshake completes in the kernel: the connection waits in the listener's queue.
  Result<UniqueFd> client = Error(ErrorCode::kUnavailable, "not tried");
  for (int i = 0; i < 100 && !client.ok(); ++i) {
    client = sb->open_tcp(kPort, 500ms);
    if (!client.ok()) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(client.ok()) << client.error().to_string();
  auto before = request(*sb, sb->upper_dir());
  ASSERT_TRUE(before);

  const std::string dir = tmp_.string() + "/ck";
  auto info = checkpoint(*sb, dir, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->cgroups().pids().size(), 2u);
  expect_running(*back, *before);
  // The listener is back and takes new connections.
  auto again = back->open_tcp(kPort, 2000ms);
  EXPECT_TRUE(again.ok()) << again.error().to_string();
  ASSERT_TRUE(back->destroy().ok());
}

// A restored sandbox pauses to disk and comes back again (CRIU patch 0003: its init is not
// dumpable after a restore), still the same process.
TEST_F(CheckpointTest, RestoredSandboxPausesToDiskAgain) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  std::optional<Sandbox> cur = std::move(sb);
  Count last = first;
  for (int round = 0; round < 2; ++round) {
    const std::string dir = tmp_.string() + "/ck" + std::to_string(round);
    auto info = checkpoint(*cur, dir, {.mac_key = kKey});
    ASSERT_TRUE(info.ok()) << "round " << round << ": " << info.error().to_string();
    auto back = restore(dir, c, {.mac_key = kKey});
    ASSERT_TRUE(back.ok()) << "round " << round << ": " << back.error().to_string();
    cur.emplace(std::move(back).value());
    auto now = request(*cur, cur->upper_dir());
    ASSERT_TRUE(now);
    EXPECT_EQ(now->token, first.token);
    EXPECT_GE(now->n, last.n);
    last = *now;
  }
  expect_running(*cur, last);
  const auto cgroups = cur->cgroups().dirs();
  ASSERT_TRUE(cur->destroy().ok());
  expect_no_leftovers(c.id, cgroups);
}

// A snapshot leaves the sandbox running; two restores of it run beside it (forks): each its own
// uid range, cgroups, link and writable layer, from the snapshot's count on, and they diverge.
TEST_F(CheckpointTest, SnapshotKeepsRunningAndTwoForksOfItDiverge) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  const std::string dir = tmp_.string() + "/snap";
  auto info = checkpoint(*sb, dir, {.leave_running = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  std::cout << "snapshot: dump " << info->dump.count() << " ms, frozen " << info->frozen.count()
            << " ms, total " << info->total.count() << " ms\n";
  expect_running(*sb, first);

  std::vector<Sandbox> forks;
  std::vector<std::vector<std::string>> cgroups;
  for (int i = 0; i < 2; ++i) {
    SandboxConfig fc = c;
    fc.id = testing::unique_id("fork");
    const auto t0 = std::chrono::steady_clock::now();
    auto f = restore(dir, fc, {.mac_key = kKey});
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    std::cout << "fork restore: "
              << std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count()
              << " ms\n";
    cgroups.push_back(f->cgroups().dirs());
    forks.push_back(std::move(f).value());
  }
  Sandbox& a = forks[0];
  Sandbox& b = forks[1];
  EXPECT_NE(a.root_host_id(), sb->root_host_id());
  EXPECT_NE(b.root_host_id(), sb->root_host_id());
  EXPECT_NE(a.root_host_id(), b.root_host_id());
  EXPECT_NE(
      slurp("/proc/" + std::to_string(a.pid()) + "/uid_map").find(std::to_string(a.root_host_id())),
      std::string::npos);
  EXPECT_NE(a.veth()->host_if, b.veth()->host_if);
  EXPECT_EQ(hostname_of(a.pid()), a.id());
  EXPECT_EQ(hostname_of(sb->pid()), sb->id());
  EXPECT_EQ(a.cgroups().pids().size(), 2u);
  EXPECT_EQ(b.cgroups().pids().size(), 2u);

  // Pausing the original pauses neither fork (they are in cgroups of their own).
  EXPECT_FALSE(sb->cgroups().frozen());
  ASSERT_TRUE(sb->cgroups().freeze(true).ok());
  EXPECT_TRUE(sb->cgroups().frozen());
  EXPECT_FALSE(a.cgroups().frozen());
  auto ca = request(a, a.upper_dir());
  auto cb = request(b, b.upper_dir());
  ASSERT_TRUE(ca && cb);
  ASSERT_TRUE(sb->cgroups().freeze(false).ok());
  // Both go on from the snapshot (same process: same token)...
  EXPECT_EQ(ca->token, first.token);
  EXPECT_EQ(cb->token, first.token);
  EXPECT_GE(ca->n, first.n);
  EXPECT_GE(cb->n, first.n);
  // ...and then apart: b counts and writes while a stands still, in memory and on its layer.
  ASSERT_TRUE(a.cgroups().freeze(true).ok());
  std::this_thread::sleep_for(100ms);
  auto cb2 = request(b, b.upper_dir());
  ASSERT_TRUE(cb2);
  EXPECT_GT(cb2->n, cb->n);
  EXPECT_EQ(parse_count(slurp(a.upper_dir() + "/count"))->n, ca->n);
  EXPECT_EQ(parse_count(slurp(b.upper_dir() + "/count"))->n, cb2->n);
  ASSERT_TRUE(a.cgroups().freeze(false).ok());
  expect_running(a, *ca);
  expect_running(b, *cb2);

  const std::vector<std::string> ids = {c.id, a.id(), b.id()};
  cgroups.push_back(sb->cgroups().dirs());
  ASSERT_TRUE(a.destroy().ok());
  ASSERT_TRUE(b.destroy().ok());
  ASSERT_TRUE(sb->destroy().ok());
  for (std::size_t i = 0; i < ids.size(); ++i) expect_no_leftovers(ids[i], cgroups[i]);
  EXPECT_TRUE(fs::exists(dir + "/checkpoint.json"));
}

// A fork's checkpoint (abxd's): left unsealed, and restored only by a caller that vouches for it
// (`verified`); a restore without that refuses it as any checkpoint without its seal. Only a
// checkpoint that leaves the sandbox running may be unsealed.
TEST_F(CheckpointTest, AnUnsealedSnapshotRestoresOnlyWhenTheCallerVouchesForIt) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  auto pause = checkpoint(*sb, tmp_.string() + "/pause", {.mac_key = kKey, .seal = false});
  ASSERT_FALSE(pause.ok());
  EXPECT_EQ(pause.error().code(), ErrorCode::kInvalidArgument) << pause.error().to_string();
  EXPECT_FALSE(fs::exists(tmp_.string() + "/pause"));
  expect_running(*sb, first);

  const std::string dir = tmp_.string() + "/snap";
  Timeline tl;
  auto info = checkpoint(*sb, dir,
                         {.leave_running = true, .mac_key = kKey, .seal = false, .timeline = &tl});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  std::cout << "unsealed snapshot: " << tl.summary() << "\n";
  EXPECT_FALSE(fs::exists(dir + "/" + kSealFile));
  EXPECT_TRUE(fs::exists(dir + "/checkpoint.json"));
  expect_running(*sb, first);

  SandboxConfig fc = c;
  fc.id = testing::unique_id("fork");
  auto refused = restore(dir, fc, {.mac_key = kKey});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(refused.error().message().find(std::string(kSealFile) + " is missing"),
            std::string::npos)
      << refused.error().message();
  auto linked = restore(dir, fc, {.link_layer = true, .mac_key = kKey, .verified = true});
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.error().code(), ErrorCode::kInvalidArgument) << linked.error().to_string();

  Timeline rtl;
  auto f = restore(dir, fc, {.mac_key = kKey, .verified = true, .timeline = &rtl});
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  std::cout << "restore, verified: " << rtl.summary() << "\n";
  std::vector<std::string> steps;
  for (const auto& st : rtl.steps()) steps.push_back(st.name);
  EXPECT_EQ(steps, (std::vector<std::string>{"verify", "checks", "layer", "slot", "images",
                                             "mounts", "cgroups", "criu", "init", "cleanup"}));
  EXPECT_NE(f->root_host_id(), sb->root_host_id());
  expect_running(*f, first);

  const auto fork_cgroups = f->cgroups().dirs(), cgroups = sb->cgroups().dirs();
  ASSERT_TRUE(f->destroy().ok());
  ASSERT_TRUE(sb->destroy().ok());
  expect_no_leftovers(fc.id, fork_cgroups);
  expect_no_leftovers(c.id, cgroups);
}

// Completing a keep_frozen checkpoint's seal hashes the layer alone and keeps the other entries'
// lines as they were sealed: an image changed in between is not blessed, the next restore's check
// still names it.
TEST_F(CheckpointTest, CompletingTheSealKeepsWhatWasSealedBefore) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  const std::string dir = tmp_.string() + "/ck";
  auto info = checkpoint(*sb, dir, {.leave_running = true, .keep_frozen = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  ASSERT_TRUE(seal_pending(dir));
  const std::string core = dir + "/core-1.img", saved = slurp(core);
  ASSERT_FALSE(saved.empty());
  {
    std::string flipped = saved;
    flipped[flipped.size() / 2] ^= 0x01;
    std::ofstream(core, std::ios::binary | std::ios::trunc) << flipped;
  }
  const auto cgroups = sb->cgroups().dirs();
  ASSERT_TRUE(release_checkpointed(*sb, dir, kKey).ok());
  expect_no_leftovers(c.id, cgroups);
  EXPECT_FALSE(seal_pending(dir));
  auto changed = verify_checkpoint(dir, kKey);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.error().message().find("core-1.img changed (content)"), std::string::npos)
      << changed.error().message();
  EXPECT_EQ(changed.error().message().find("rw.img"), std::string::npos)
      << changed.error().message();
  // As it was, it holds, the layer's content sealed too.
  std::ofstream(core, std::ios::binary | std::ios::trunc) << saved;
  EXPECT_TRUE(verify_checkpoint(dir, kKey).ok());
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  expect_running(*back, first);
  const auto restored_cgroups = back->cgroups().dirs();
  ASSERT_TRUE(back->destroy().ok());
  expect_no_leftovers(c.id, restored_cgroups);
}

// The lines of `text`.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Sends the watcher (runtime_probe watch, the init) `sig` and returns the names its inotify
// watches reported since, once there are `names` of them; empty if they did not come within 5 s.
std::vector<std::string> poke(const Sandbox& sb, int sig, std::size_t names) {
  const std::string log = sb.upper_dir() + "/watch.log";
  const std::size_t before = lines_of(slurp(log)).size();
  if (!sb.signal(sig).ok()) return {};
  for (int i = 0; i < 500; ++i) {
    auto now = lines_of(slurp(log));
    if (now.size() >= before + names)
      return {now.begin() + static_cast<std::ptrdiff_t>(before), now.end()};
    std::this_thread::sleep_for(10ms);
  }
  return {};
}

// Asks the watcher to create an entry in its watched directory (SIGUSR1) and returns the name
// its watch reported for it; empty if none came within 5 s.
std::string poke_watcher(const Sandbox& sb) {
  auto names = poke(sb, SIGUSR1, 1);
  return names.empty() ? "" : names.back();
}

// The number of inotify watches the sandbox's init holds (its fdinfo's "inotify wd:" lines).
int inotify_watches(const Sandbox& sb) {
  int n = 0;
  const std::string proc = "/proc/" + std::to_string(sb.pid());
  for (const auto& e : fs::directory_iterator(proc + "/fdinfo")) {
    for (const auto& l : lines_of(slurp(e.path()))) n += l.starts_with("inotify wd:") ? 1 : 0;
  }
  return n;
}

// A process's inotify watches on the sandbox's own files (a dev server's file watcher: one on a
// directory the sandbox made, one on a directory of the image) survive a snapshot, the forks
// made from it, and a pause to disk, and report entries created after each. The dump failed
// ("fsnotify: Can't dump that handle") while the root overlay gave file handles that cannot be
// opened.
TEST_F(CheckpointTest, InotifyWatchesSurviveSnapshotForkAndPause) {
  SandboxConfig c = counter_config();
  c.argv = {testing::kProbeInside, "watch", "/w", "/watch.log", "/bin"};
  auto sb = Sandbox::spawn(c);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  for (int i = 0; i < 500 && slurp(sb->upper_dir() + "/watch.log").empty(); ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(slurp(sb->upper_dir() + "/watch.log"), "watching\n");
  EXPECT_TRUE(poke_watcher(*sb).starts_with("1-"));
  EXPECT_EQ(inotify_watches(*sb), 2);

  const std::string snap = tmp_.string() + "/snap";
  auto info = checkpoint(*sb, snap, {.leave_running = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  EXPECT_TRUE(poke_watcher(*sb).starts_with("2-")) << "the watch after the snapshot";

  SandboxConfig fc = c;
  fc.id = testing::unique_id("fork");
  auto fork = restore(snap, fc, {.mac_key = kKey});
  ASSERT_TRUE(fork.ok()) << fork.error().to_string();
  EXPECT_EQ(inotify_watches(*fork), 2);
  EXPECT_TRUE(poke_watcher(*fork).starts_with("2-")) << "the fork's watch";
  EXPECT_TRUE(poke_watcher(*fork).starts_with("3-")) << "the fork's watch";
  const auto fork_cgroups = fork->cgroups().dirs();
  ASSERT_TRUE(fork->destroy().ok());

  const std::string dir = tmp_.string() + "/ck";
  info = checkpoint(*sb, dir, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(inotify_watches(*back), 2);
  EXPECT_TRUE(poke_watcher(*back).starts_with("3-")) << "the watch after the pause";
  // Paused and resumed again: a restored watch is dumped as the first one was.
  const std::string dir2 = tmp_.string() + "/ck2";
  info = checkpoint(*back, dir2, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto again = restore(dir2, c, {.mac_key = kKey});
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_TRUE(poke_watcher(*again).starts_with("4-")) << "the watch after the second pause";
  const auto cgroups = again->cgroups().dirs();
  ASSERT_TRUE(again->destroy().ok());
  expect_no_leftovers(c.id, cgroups);
  expect_no_leftovers(fc.id, fork_cgroups);
}

std::pair<dev_t, ino_t> inode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

bool frozen(const Sandbox& sb) {
  return slurp(sb.cgroups().dirs().front() + "/cgroup.events").find("frozen 1") !=
         std::string::npos;
}

// The crash-safe pause to disk: the dump leaves the tree frozen without its link, the
// checkpoint's layer is the sandbox's (one inode); release_checkpointed() commits, and a restore
// that links the layer (one inode again) goes on counting from the checkpoint.
// True if `names` are `dirs` reports of one entry ("<n>-<pid>", n = `n`): SIGUSR2 makes the
// watcher create its next entry in each of its other watched directories.
bool reported(const std::vector<std::string>& names, std::size_t dirs, int n) {
  if (names.size() != dirs) return false;
  for (const auto& name : names)
    if (!name.starts_with(std::to_string(n) + "-") || name != names.front()) return false;
  return true;
}

// Watches on the other filesystems a sandbox's process can watch survive too: /dev/shm (the
// sandbox's tmpfs, whose content CRIU saves with it) and a writable bind of a host directory.
TEST_F(CheckpointTest, InotifyWatchesOnTmpfsAndABindSurviveSnapshotForkAndPause) {
  SandboxConfig c = counter_config();
  const std::string shared = tmp_.string() + "/shared";
  fs::create_directories(shared);
  c.binds.push_back({shared, "/mnt/shared", true});
  c.argv = {testing::kProbeInside, "watch", "/w", "/watch.log", "/dev/shm", "/mnt/shared"};
  auto sb = Sandbox::spawn(c);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  for (int i = 0; i < 500 && slurp(sb->upper_dir() + "/watch.log").empty(); ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(slurp(sb->upper_dir() + "/watch.log"), "watching\n");
  EXPECT_EQ(inotify_watches(*sb), 3);
  EXPECT_TRUE(reported(poke(*sb, SIGUSR2, 2), 2, 1));

  const std::string snap = tmp_.string() + "/snap";
  auto info = checkpoint(*sb, snap, {.leave_running = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  EXPECT_TRUE(reported(poke(*sb, SIGUSR2, 2), 2, 2)) << "after the snapshot";

  SandboxConfig fc = c;
  fc.id = testing::unique_id("fork");
  auto fork = restore(snap, fc, {.mac_key = kKey});
  ASSERT_TRUE(fork.ok()) << fork.error().to_string();
  EXPECT_EQ(inotify_watches(*fork), 3);
  // The parent's entries go (the bind is shared): the fork's next ones may have their names.
  for (const auto& e : fs::directory_iterator(shared)) fs::remove(e.path());
  EXPECT_TRUE(reported(poke(*fork, SIGUSR2, 2), 2, 2)) << "the fork's watches";
  const auto fork_cgroups = fork->cgroups().dirs();
  ASSERT_TRUE(fork->destroy().ok());
  for (const auto& e : fs::directory_iterator(shared)) fs::remove(e.path());

  const std::string dir = tmp_.string() + "/ck";
  info = checkpoint(*sb, dir, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(inotify_watches(*back), 3);
  EXPECT_TRUE(reported(poke(*back, SIGUSR2, 2), 2, 3)) << "after the pause";
  EXPECT_TRUE(poke_watcher(*back).starts_with("4-")) << "the root's watch after the pause";
  const auto cgroups = back->cgroups().dirs();
  ASSERT_TRUE(back->destroy().ok());
  expect_no_leftovers(c.id, cgroups);
  expect_no_leftovers(fc.id, fork_cgroups);
}

// A watch that cannot be saved (on /proc: no file handles there to open again) fails the
// checkpoint with the real CRIU: the sandbox runs on, its watches still report, and the error
// says which kind of thing stopped it.
TEST_F(CheckpointTest, AWatchThatCannotBeSavedFailsTheCheckpointAndTheSandboxRunsOn) {
  SandboxConfig c = counter_config();
  c.argv = {testing::kProbeInside, "watch", "/w", "/watch.log", "/proc"};
  auto sb = Sandbox::spawn(c);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  for (int i = 0; i < 500 && slurp(sb->upper_dir() + "/watch.log").empty(); ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(slurp(sb->upper_dir() + "/watch.log"), "watching\n");
  for (bool leave_running : {true, false}) {
    auto r = checkpoint(*sb, tmp_.string() + "/ck-" + std::to_string(leave_running),
                        {.leave_running = leave_running, .mac_key = kKey});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("holds an inotify or fanotify watch that cannot be saved"),
              std::string::npos)
        << r.error().message();
    EXPECT_NE(slurp(sb->cgroups().dirs().front() + "/cgroup.events").find("frozen 0"),
              std::string::npos);
    ASSERT_TRUE(sb->veth().has_value());
    EXPECT_NE(::if_nametoindex(sb->veth()->host_if.c_str()), 0u);
    EXPECT_FALSE(poke_watcher(*sb).empty()) << "the watcher runs on";
  }
  const auto cgroups = sb->cgroups().dirs();
  ASSERT_TRUE(sb->destroy().ok());
  expect_no_leftovers(c.id, cgroups);
}

// The root overlay's index ties a writable layer to the image layers it was made over: a
// checkpoint resumed over another copy of them at the same path (extracted again, or the home
// copied to another disk) made the mount fail with ESTALE ("failed to verify upper root origin"),
// for good. It resumes now, on an overlay without the index, and pauses again.
TEST_F(CheckpointTest, RestoreOverImageLayersExtractedAgain) {
  SandboxConfig c = counter_config();
  Count first;
  const std::string dir = checkpointed_counter(c, &first);
  ASSERT_FALSE(dir.empty());
  // The layer extracted again where it was: same path and content, other inodes.
  fs::rename(base_, base_ + ".old");
  fs::copy(base_ + ".old", base_, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  expect_running(*back, first);
  const std::string dir2 = tmp_.string() + "/ck2";
  auto info = checkpoint(*back, dir2, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto again = restore(dir2, c, {.mac_key = kKey});
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  expect_running(*again, first);
  const auto cgroups = again->cgroups().dirs();
  ASSERT_TRUE(again->destroy().ok());
  expect_no_leftovers(c.id, cgroups);
}

TEST_F(CheckpointTest, KeepFrozenThenReleaseThenRestoreWithALinkedLayer) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  auto before = request(*sb, sb->upper_dir());
  ASSERT_TRUE(before);
  const std::string dir = tmp_.string() + "/ck";
  auto bad = checkpoint(*sb, dir, {.keep_frozen = true, .mac_key = kKey});  // without leave_running
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);

  auto info = checkpoint(*sb, dir, {.leave_running = true, .keep_frozen = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  std::cout << "keep_frozen: dump " << info->dump.count() << " ms, total " << info->total.count()
            << " ms\n";
  const auto pids = sb->cgroups().pids();
  EXPECT_EQ(pids.size(), 2u);
  for (pid_t p : pids) EXPECT_TRUE(alive(p)) << p;
  EXPECT_TRUE(frozen(*sb));
  EXPECT_EQ(::if_nametoindex(sb->veth()->host_if.c_str()), 0u);
  EXPECT_EQ(inode_of(dir + "/rw.img"), inode_of(sb->state_path() + "/rw.img"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoint.json"));
  // The layer (the frozen sandbox's still) is sealed by release_checkpointed(), not before.
  EXPECT_TRUE(seal_pending(dir));
  auto early = verify_checkpoint(dir, kKey);
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.error().message().find("rw.img was never sealed"), std::string::npos)
      << early.error().message();

  const auto cgroups = sb->cgroups().dirs();
  ASSERT_TRUE(release_checkpointed(*sb, dir, kKey).ok());
  EXPECT_FALSE(seal_pending(dir));
  EXPECT_TRUE(verify_checkpoint(dir, kKey).ok());
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << p;
  expect_no_leftovers(c.id, cgroups);  // no loop device left on the checkpoint's layer either

  auto back = restore(dir, c, {.link_layer = true, .mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(inode_of(dir + "/rw.img"), inode_of(back->state_path() + "/rw.img"));
  EXPECT_EQ(slurp(back->upper_dir() + "/count.started"), first.token + "\n");
  EXPECT_EQ(parse_count(slurp(back->upper_dir() + "/count"))->n, before->n);
  auto after = request(*back, back->upper_dir());
  ASSERT_TRUE(after);
  EXPECT_EQ(after->token, before->token);
  EXPECT_GE(after->n, before->n);
  expect_running(*back, *after);
  fs::remove_all(dir);  // what a resume does: the layer lives on as the restored sandbox's
  const auto restored_cgroups = back->cgroups().dirs();
  ASSERT_TRUE(back->destroy().ok());
  expect_no_leftovers(c.id, restored_cgroups);
}

// The abort of a keep_frozen checkpoint: recover() re-makes the link and thaws; it is idempotent.
// A checkpoint whose layer is still mounted is never linked into a restore.
TEST_F(CheckpointTest, KeepFrozenThenRecoverRunsOn) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  ASSERT_TRUE(recover(*sb).ok());  // running with its link: nothing to do
  expect_running(*sb, first);
  const std::string dir = tmp_.string() + "/ck";
  auto info = checkpoint(*sb, dir, {.leave_running = true, .keep_frozen = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  EXPECT_TRUE(frozen(*sb));
  EXPECT_EQ(::if_nametoindex(sb->veth()->host_if.c_str()), 0u);
  auto still = parse_count(slurp(sb->upper_dir() + "/count"));
  ASSERT_TRUE(still);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(parse_count(slurp(sb->upper_dir() + "/count"))->n, still->n);

  // Its layer is mounted by the frozen sandbox: a restore that would link it refuses (after
  // waiting 5 s for a detach that does not come).
  auto twice = restore(dir, c, {.link_layer = true, .mac_key = kKey});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code(), ErrorCode::kFailedPrecondition) << twice.error().to_string();

  ASSERT_TRUE(recover(*sb).ok());
  fs::remove_all(dir);
  expect_running(*sb, *still);
  EXPECT_TRUE(recover(*sb).ok());
  expect_running(*sb, *still);

  // Committed with a plain destroy(): restore() waits for the old loop device itself.
  const std::string again = tmp_.string() + "/again";
  ASSERT_TRUE(
      checkpoint(*sb, again, {.leave_running = true, .keep_frozen = true, .mac_key = kKey}).ok());
  const auto cgroups = sb->cgroups().dirs();
  ASSERT_TRUE(sb->destroy().ok());
  auto r = recover(*sb);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition);
  auto back = restore(again, c, {.link_layer = true, .mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  auto after = request(*back, back->upper_dir());
  ASSERT_TRUE(after);
  EXPECT_EQ(after->token, first.token);
  expect_running(*back, *after);
  const auto restored_cgroups = back->cgroups().dirs();
  ASSERT_TRUE(back->destroy().ok());
  expect_no_leftovers(c.id, cgroups);
  expect_no_leftovers(c.id, restored_cgroups);
}

// A sandbox adopted with its config can be checkpointed; one its owner left frozen mid-
// checkpoint (keep_frozen, then the owner gone) is recovered by the next owner.
TEST_F(CheckpointTest, AdoptedWithItsConfigCheckpointsAndRecovers) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  const pid_t init = sb->pid();
  sb->detach();
  {
    auto blind = Sandbox::adopt(state_, c.id);
    ASSERT_TRUE(blind.ok()) << blind.error().to_string();
    auto r = checkpoint(*blind, tmp_.string() + "/refused", {.mac_key = kKey});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition) << r.error().to_string();
    blind->detach();
  }
  SandboxConfig other = c;
  other.id = "someone-else";
  auto wrong = Sandbox::adopt(state_, c.id, &other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code(), ErrorCode::kInvalidArgument);

  auto a = Sandbox::adopt(state_, c.id, &c);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->pid(), init);
  // An owner dies between a keep_frozen dump and its commit...
  ASSERT_TRUE(checkpoint(*a, tmp_.string() + "/abandoned",
                         {.leave_running = true, .keep_frozen = true, .mac_key = kKey})
                  .ok());
  EXPECT_TRUE(frozen(*a));
  a->detach();
  // ...and the next one adopts the frozen sandbox and recovers it.
  auto b = Sandbox::adopt(state_, c.id, &c);
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  ASSERT_TRUE(b->veth().has_value());
  EXPECT_EQ(::if_nametoindex(b->veth()->host_if.c_str()), 0u);
  ASSERT_TRUE(recover(*b).ok());
  fs::remove_all(tmp_.string() + "/abandoned");
  expect_running(*b, first);

  const std::string dir = tmp_.string() + "/snap";
  auto info = checkpoint(*b, dir, {.leave_running = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto now = request(*b, b->upper_dir());
  ASSERT_TRUE(now);
  expect_running(*b, *now);
  auto cgroups = b->cgroups().dirs();
  ASSERT_TRUE(b->destroy().ok());
  ::waitpid(init, nullptr, 0);  // still our child: spawned here
  expect_no_leftovers(c.id, cgroups);

  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  auto after = request(*back, back->upper_dir());
  ASSERT_TRUE(after);
  EXPECT_EQ(after->token, first.token);
  expect_running(*back, *after);
  cgroups = back->cgroups().dirs();
  ASSERT_TRUE(back->destroy().ok());
  expect_no_leftovers(c.id, cgroups);
}

TEST_F(CheckpointTest, FailedDumpLeavesTheSandboxRunning) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);

  // No criu, or one whose check fails: refused before the sandbox is touched.
  for (const char* criu : {"/nonexistent/criu", "/bin/false"}) {
    auto r = checkpoint(*sb, tmp_.string() + "/ck-" + std::to_string(criu[1]),
                        {.criu = criu, .mac_key = kKey});
    ASSERT_FALSE(r.ok()) << criu;
    EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition) << r.error().to_string();
  }
  // An images dir that cannot be made.
  auto r = checkpoint(*sb, "/proc/abx-no-such/ck", {.mac_key = kKey});
  ASSERT_FALSE(r.ok());

  // A dump that fails after the freeze and the veth's removal: both are undone.
  const std::string fake = tmp_.string() + "/fake-criu";
  std::ofstream(fake) << "#!/bin/sh\ncase \"$1\" in check|--version) exit 0;; esac\n"
                         "echo 'Error (fake-criu): dump refused' >&2\nexit 1\n";
  fs::permissions(fake, fs::perms::owner_all);
  r = checkpoint(*sb, tmp_.string() + "/ck-fake", {.criu = fake, .mac_key = kKey});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInternal);
  EXPECT_NE(r.error().message().find("dump refused"), std::string::npos) << r.error().message();
  EXPECT_FALSE(fs::exists(tmp_.string() + "/ck-fake/checkpoint.json"));
  expect_running(*sb, first);

  // A watch CRIU cannot save is named as the reason (CRIU's own words follow).
  std::ofstream(fake) << "#!/bin/sh\ncase \"$1\" in check|--version) exit 0;; esac\n"
                         "echo 'Error (criu/fsnotify.c:284): fsnotify: \tCan'\\''t dump that "
                         "handle' >&2\nexit 1\n";
  r = checkpoint(*sb, tmp_.string() + "/ck-watch", {.criu = fake, .mac_key = kKey});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("holds an inotify or fanotify watch that cannot be saved"),
            std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("Can't dump that handle"), std::string::npos)
      << r.error().message();
  expect_running(*sb, first);
}

// A criu that never finishes (as one did, waiting for a trap a PVM guest never delivered) is
// killed with its process group after criu_timeout: the dump fails with deadline_exceeded and
// the sandbox runs on; the restore fails the same way, leaves nothing behind and keeps the
// checkpoint as it was. The fake's child holds criu's output pipe, as criu's helpers would.
// A later abxd finds a dump its dead owner started by the record in the state dir (recover()
// waits for it): the record exists before CRIU runs at all. (Written after the spawn, an owner
// killed in between left a CRIU that ran unrecorded: recover() thawed the tree, and CRIU,
// failing, froze it again for good.)
TEST_F(CheckpointTest, DumpIsRecordedBeforeCriuRuns) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  const std::string fake = tmp_.string() + "/recorded-criu";
  const std::string seen = tmp_.string() + "/recorded-criu.seen";
  std::ofstream(fake) << "#!/bin/sh\ncase \"$1\" in check|--version) exit 0;; esac\n"
                         "echo \"$$ $(cat " +
                             sb->state_path() + "/criu.pid)\" > " + seen + "\nexit 1\n";
  fs::permissions(fake, fs::perms::owner_all);
  auto r = checkpoint(*sb, tmp_.string() + "/ck-recorded", {.criu = fake, .mac_key = kKey});
  ASSERT_FALSE(r.ok());  // the fake fails the dump: the sandbox runs on
  // "<the fake's pid> <the record: pid, start time>"
  std::istringstream line(slurp(seen));
  long self = 0, recorded = 0;
  unsigned long long start = 0;
  line >> self >> recorded >> start;
  EXPECT_GT(self, 0) << "the fake criu never ran";
  EXPECT_EQ(recorded, self) << slurp(seen);
  EXPECT_GT(start, 0u) << slurp(seen);
  EXPECT_FALSE(fs::exists(sb->state_path() + "/criu.pid"));  // gone once the dump ended
  expect_running(*sb, first);
  ASSERT_TRUE(sb->destroy().ok());
}

TEST_F(CheckpointTest, CriuPastItsTimeLimitIsKilledWithItsGroupAndNothingIsLost) {
  const std::string fake = tmp_.string() + "/hung-criu";
  const std::string child_pid = tmp_.string() + "/hung-criu.child";
  std::ofstream(fake) << "#!/bin/sh\ncase \"$1\" in check|--version) exit 0;; esac\n"
                         "sleep 600 &\necho $! > " +
                             child_pid + "\nwait\n";
  fs::permissions(fake, fs::perms::owner_all);
  // The child's pid once the fake wrote it, and then whether it is gone.
  auto child_gone = [&] {
    const long pid = std::strtol(slurp(child_pid).c_str(), nullptr, 10);
    EXPECT_GT(pid, 0) << "the fake criu never ran";
    for (int i = 0; pid > 0 && i < 100 && alive(static_cast<pid_t>(pid)); ++i)
      std::this_thread::sleep_for(20ms);
    return pid > 0 && !alive(static_cast<pid_t>(pid));
  };

  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = checkpoint(*sb, tmp_.string() + "/ck-hung",
                      {.criu = fake, .criu_timeout = 1s, .mac_key = kKey});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kDeadlineExceeded) << r.error().to_string();
  EXPECT_NE(r.error().message().find("did not finish in time"), std::string::npos)
      << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 60s);  // not the fake's 600 s
  EXPECT_TRUE(child_gone());
  EXPECT_FALSE(fs::exists(tmp_.string() + "/ck-hung/checkpoint.json"));
  expect_running(*sb, first);
  ASSERT_TRUE(sb->destroy().ok());

  SandboxConfig c2 = counter_config();
  const std::string dir = checkpointed_counter(c2, &first);
  ASSERT_FALSE(dir.empty());
  const auto files = listing(dir);
  fs::remove(child_pid);
  auto restored = restore(dir, c2, {.criu = fake, .criu_timeout = 1s, .mac_key = kKey});
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.error().code(), ErrorCode::kDeadlineExceeded) << restored.error().to_string();
  EXPECT_TRUE(child_gone());
  for (const auto& [name, size] : files) {
    ASSERT_TRUE(fs::exists(dir + "/" + name)) << name;
    EXPECT_EQ(fs::file_size(dir + "/" + name), size) << name;
  }
  auto l = CgroupLayout::detect();
  expect_no_leftovers(c2.id, SandboxCgroups::existing(*l, "abx", c2.id).dirs());
  // The real criu restores it afterwards: the killed attempt changed nothing.
  auto again = restore(dir, c2, {.mac_key = kKey});
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  auto n = request(*again, again->upper_dir());
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->token, first.token);
  EXPECT_TRUE(again->destroy().ok());
}

// A CRIU dump that its dead owner started and that hangs (the tree frozen, as CRIU leaves it)
// does not cost the sandbox: recover() waits for it up to its limit, kills it with its process
// group and brings the sandbox back running. (It gave up with deadline_exceeded, and abxd with
// it on a healthy sandbox.)
TEST_F(CheckpointTest, RecoverKillsAHungCriuAndKeepsTheSandbox) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  // The hung "criu": a session of its own, as run_criu makes it, with a child in its group.
  const pid_t criu = ::fork();
  ASSERT_GE(criu, 0);
  if (criu == 0) {
    ::setsid();
    ::close(1);  // nothing of it holds the test's output open
    ::close(2);
    execl("/bin/sh", "sh", "-c", "sleep 600 & wait", static_cast<char*>(nullptr));
    _exit(127);
  }
  ScopeExit reap{[&] {
    ::kill(-criu, SIGKILL);
    ::waitpid(criu, nullptr, WNOHANG);
  }};
  std::this_thread::sleep_for(100ms);
  std::ofstream(sb->state_path() + "/criu.pid") << criu << " " << process_start_time(criu) << "\n";
  ASSERT_TRUE(sb->cgroups().freeze(true).ok());

  const auto t0 = std::chrono::steady_clock::now();
  Status r = recover(*sb, 500ms);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  int status = 0;
  ASSERT_EQ(::waitpid(criu, &status, 0), criu);  // (the reap above finds none)
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_FALSE(fs::exists(sb->state_path() + "/criu.pid"));
  expect_running(*sb, first);
  ASSERT_TRUE(sb->destroy().ok());
}

// CRIU outlives an owner killed meanwhile (recover() waits for its dump), and must run on
// undisturbed. Had it a process group in its owner's session, the owner's death would orphan
// the group, and the kernel signals an orphaned group with a stopped member: SIGHUP, then
// SIGCONT. CRIU stops a helper of its own at start and waits for that stop; a real dump hung
// so. The fake criu here stops a child and waits; its owner (a forked process calling
// criu_available) is killed; the child must stay stopped and the fake must live on.
TEST(CriuProcess, OutlivesItsKilledOwnerWithoutSignalsFromItsSession) {
  abx::testing::TempDir tmp;
  const std::string fake = tmp.path().string() + "/criu";
  const std::string pids = tmp.path().string() + "/pids";
  std::ofstream(fake) << "#!/bin/sh\nsleep 600 &\nkill -STOP $!\necho \"$$ $!\" > " + pids +
                             ".new\nmv " + pids + ".new " + pids + "\nwait\n";
  fs::permissions(fake, fs::perms::owner_all);
  const pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    (void)criu_available(fake);  // waits for the fake (up to a minute)
    _exit(0);
  }
  long criu = 0, stopped = 0;
  for (int i = 0; i < 500 && criu == 0; ++i) {
    std::istringstream(slurp(pids)) >> criu >> stopped;
    if (criu == 0) std::this_thread::sleep_for(10ms);
  }
  ::kill(owner, SIGKILL);
  ::waitpid(owner, nullptr, 0);
  ASSERT_GT(criu, 0) << "the fake criu never ran";
  ASSERT_GT(stopped, 0);
  std::this_thread::sleep_for(300ms);  // the kernel's signals, if any, come at the owner's exit
  auto state = [](long pid) {
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
  };
  EXPECT_EQ(state(stopped), 'T') << "the stopped child was continued or killed";
  EXPECT_TRUE(alive(static_cast<pid_t>(criu))) << "the fake criu died with its owner";
  EXPECT_EQ(::getsid(static_cast<pid_t>(criu)), criu) << "criu leads no session of its own";
  ::kill(-static_cast<pid_t>(criu), SIGKILL);
  ::kill(static_cast<pid_t>(criu), SIGKILL);
  ::kill(static_cast<pid_t>(stopped), SIGKILL);
}

TEST_F(CheckpointTest, FullDiskIsInsufficientStorageAndLeavesTheSandboxRunning) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb);
  const std::string full = tmp_.string() + "/full";
  fs::create_directories(full);
  ASSERT_EQ(::mount("abx-full", full.c_str(), "tmpfs", 0, "size=64k"), 0);
  auto r = checkpoint(*sb, full + "/ck", {.mac_key = kKey});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInsufficientStorage) << r.error().to_string();
  EXPECT_FALSE(fs::exists(full + "/ck/checkpoint.json"));
  expect_running(*sb, first);
  ::umount2(full.c_str(), MNT_DETACH);
}

TEST_F(CheckpointTest, RestoreOfAMissingOrCorruptCheckpointSaysWhyAndDeletesNothing) {
  SandboxConfig c = counter_config();
  auto r = restore(tmp_.string() + "/none", c, {.mac_key = kKey});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound) << r.error().to_string();

  const std::string junk = tmp_.string() + "/junk";
  fs::create_directories(junk);
  std::ofstream(junk + "/checkpoint.json") << "{not json";
  r = restore(junk, c, {.mac_key = kKey});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition) << r.error().to_string();
  EXPECT_TRUE(fs::exists(junk + "/checkpoint.json"));

  // A real checkpoint with one CRIU image damaged: CRIU's own error comes back.
  Count first;
  const std::string dir = checkpointed_counter(c, &first);
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/pstree.img", std::ios::trunc) << "garbage, not a CRIU image";
  // Sealed again (damage from before the seal, as a CRIU bug would leave): CRIU's own check.
  ASSERT_TRUE(seal_checkpoint(dir, kKey).ok());
  const auto files = listing(dir);
  r = restore(dir, c, {.mac_key = kKey});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInternal) << r.error().to_string();
  EXPECT_NE(r.error().message().find("criu restore"), std::string::npos) << r.error().message();
  std::cout << "corrupt restore: " << r.error().message() << "\n";
  for (const auto& [name, size] : files) {
    ASSERT_TRUE(fs::exists(dir + "/" + name)) << name;
    EXPECT_EQ(fs::file_size(dir + "/" + name), size) << name;
  }
  auto l = CgroupLayout::detect();
  expect_no_leftovers(c.id, SandboxCgroups::existing(*l, "abx", c.id).dirs());
  // The slot the failed restore claimed went back: no claim names this process.
  for (const auto& e : fs::directory_iterator(c.userns.registry))
    EXPECT_NE(slurp(e.path()).rfind(std::to_string(::getpid()) + " ", 0), 0u) << e.path();
}

// --- Checkpoints are private and sealed -------------------------------------------------------

// Every entry of the tree under `dir` with its mode and owner: "<path> <mode> <uid>".
std::vector<std::string> modes_under(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) != 0) continue;
    char m[8];
    std::snprintf(m, sizeof m, "%04o", st.st_mode & 07777);
    out.push_back(e.path().string() + " " + (S_ISDIR(st.st_mode) ? "d" : "") + m + " " +
                  std::to_string(st.st_uid));
  }
  return out;
}

// Whether host uid 65534 can open `name` for reading through a descriptor of its directory
// (so only the directory's own mode counts, not its parents').
bool readable_by_nobody(const std::string& dir, const std::string& name) {
  int d = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return false;
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0)
      _exit(2);
    _exit(::openat(d, name.c_str(), O_RDONLY | O_CLOEXEC) >= 0 ? 0 : 1);
  }
  ::close(d);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST_F(CheckpointTest, CheckpointsAreRootOnlyAndRepaired) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb.has_value());
  const std::string dir = tmp_.string() + "/private";
  auto info = checkpoint(*sb, dir, {.leave_running = true, .mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  std::cout << "seal of " << (info->image_bytes >> 10) << " KiB of images and "
            << (info->layer_bytes >> 10) << " KiB of layer: " << info->seal.count() << " ms\n";
  int files = 0;
  for (const auto& line : modes_under(dir)) {
    const bool is_dir = line.find(" d0") != std::string::npos;
    EXPECT_NE(line.find(is_dir ? " d0700 0" : " 0600 0"), std::string::npos) << line;
    files += is_dir ? 0 : 1;
  }
  EXPECT_GT(files, 5);
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_FALSE(readable_by_nobody(dir, "pages-1.img"));
  EXPECT_FALSE(readable_by_nobody(dir, "checkpoint.json"));
  // Control: the same file, world-readable in a 0755 directory, is readable by that uid.
  const std::string open_dir = tmp_.string() + "/open";
  fs::create_directories(open_dir);
  fs::permissions(open_dir, fs::perms(0755));
  fs::copy_file(dir + "/pages-1.img", open_dir + "/pages-1.img");
  fs::permissions(open_dir + "/pages-1.img", fs::perms(0644));
  EXPECT_TRUE(readable_by_nobody(open_dir, "pages-1.img"));

  // Opened up, it is refused (the modes are sealed) until make_private() repairs it.
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir + "/pages-1.img").c_str(), 0644), 0);
  auto v = verify_checkpoint(dir, kKey);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message().find("pages-1.img changed (mode 0600 -> 0644)"), std::string::npos)
      << v.error().message();
  EXPECT_TRUE(readable_by_nobody(dir, "pages-1.img"));
  ASSERT_TRUE(make_private(dir).ok());
  EXPECT_FALSE(readable_by_nobody(dir, "pages-1.img"));
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_TRUE(verify_checkpoint(dir, kKey).ok());
  ASSERT_TRUE(sb->destroy().ok());
}

TEST(CheckpointKey, MadeOnceRootOnlyAndRefusedWhenOthersCanReadIt) {
  abx::testing::TempDir tmp("abx-ck-key");
  const std::string path = tmp.string() + "/checkpoint.key";
  auto k = load_checkpoint_key(path);
  ASSERT_TRUE(k.ok()) << k.error().to_string();
  EXPECT_EQ(k->size(), kCheckpointKeyBytes);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto again = load_checkpoint_key(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *k);
  EXPECT_NE(*load_checkpoint_key(tmp.string() + "/other.key"), *k);  // random
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto open = load_checkpoint_key(path);
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(open.error().message().find("0644"), std::string::npos) << open.error().message();
}

// How many mounts sit exactly at `dir` (stacked ones counted), from /proc/self/mountinfo.
int mounts_at(const std::string& dir) {
  std::istringstream in(slurp("/proc/self/mountinfo"));
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, devno, root, point;
    f >> id >> parent >> devno >> root >> point;
    n += point == dir;
  }
  return n;
}

// CRIU's kernel-feature cache (criu.kdat) must sit on a tmpfs only root can write: one is mounted
// once, found again on the next call, and mounted over when what is there is not root-only (a
// file planted there is then never seen). A parent others may write is refused.
TEST(CriuRunDir, IsARootOnlyTmpfsMountedOnceAndReplacedWhenOpen) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting needs root";
  const std::string dir = "/run/abx/criu-test-" + std::to_string(::getpid());
  ScopeExit cleanup{[&] {
    while (mounts_at(dir) > 0 && ::umount2(dir.c_str(), MNT_DETACH) == 0) {
    }
    ::rmdir(dir.c_str());
  }};
  auto private_tmpfs = [&] {
    struct stat st;
    struct statfs sfs;
    return ::stat(dir.c_str(), &st) == 0 && ::statfs(dir.c_str(), &sfs) == 0 &&
           static_cast<unsigned long>(sfs.f_type) == TMPFS_MAGIC && st.st_uid == 0 &&
           (st.st_mode & 07777) == 0700;
  };
  Status s = prepare_criu_rundir(dir);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_TRUE(private_tmpfs());
  EXPECT_EQ(mounts_at(dir), 1);
  std::ofstream(dir + "/criu.kdat") << "abxd's";
  s = prepare_criu_rundir(dir);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(mounts_at(dir), 1) << "a second call mounted again";
  EXPECT_EQ(slurp(dir + "/criu.kdat"), "abxd's");

  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  std::ofstream(dir + "/criu.kdat", std::ios::trunc) << "planted";
  s = prepare_criu_rundir(dir);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(mounts_at(dir), 2);
  EXPECT_TRUE(private_tmpfs());
  EXPECT_FALSE(fs::exists(dir + "/criu.kdat")) << "the planted cache is still visible";

  abx::testing::TempDir tmp("abx-criu-rundir");
  const std::string open = tmp.string() + "/open";
  fs::create_directories(open);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  s = prepare_criu_rundir(open + "/criu");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kFailedPrecondition) << s.error().to_string();
  EXPECT_NE(s.error().message().find(open), std::string::npos) << s.error().message();
  EXPECT_EQ(mounts_at(open + "/criu"), 0);
  EXPECT_EQ(prepare_criu_rundir("run/abx/criu").error().code(), ErrorCode::kInvalidArgument);
}

// abx's criu (scripts/install-criu.sh: make RUNDIR=/run/abx/criu) keeps its kernel-feature cache
// on that tmpfs: after one `criu check` the cache is there, and the next run loads it.
TEST(CriuRunDir, AbxsCriuKeepsItsKernelFeatureCacheThere) {
  if (::geteuid() != 0) GTEST_SKIP() << "criu needs root";
  const char* env = std::getenv("ABX_CRIU");
  const std::string criu = env && *env ? env : kDefaultCriu;
  if (Status s = criu_available(criu); !s)
    GTEST_SKIP() << "CRIU unavailable (scripts/install-criu.sh): " << s.error().message();
  if (slurp(criu).find(kCriuRunDir) == std::string::npos)
    GTEST_SKIP() << criu << " was built without RUNDIR=" << kCriuRunDir
                 << ": run scripts/install-criu.sh again";
  Status s = prepare_criu_rundir();
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  const std::string cache = std::string(kCriuRunDir) + "/criu.kdat";
  ::unlink(cache.c_str());
  const std::string log = ::testing::TempDir() + "criu-kdat-" + std::to_string(::getpid());
  const std::string cmd = criu + " check -v4 -o " + log + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  struct stat st;
  ASSERT_EQ(::stat(cache.c_str(), &st), 0) << "criu wrote no " << cache << ": " << slurp(log);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_NE(slurp(log).find("Loaded kdat cache from " + cache), std::string::npos) << slurp(log);
  ::unlink(log.c_str());
}

// The bytes of `path` with the first `from` replaced by `to` (same length); false if absent.
bool replace_in_file(const std::string& path, const std::string& from, const std::string& to) {
  std::string data = slurp(path);
  auto at = data.find(from);
  if (at == std::string::npos || from.size() != to.size()) return false;
  data.replace(at, from.size(), to);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
  return true;
}

// A checkpoint changed on disk in any way is refused before anything is made, naming what
// changed, and stays as it was: undone, it restores and the counter counts on.
TEST_F(CheckpointTest, TamperedCheckpointIsRefusedAndNothingIsLost) {
  SandboxConfig c = counter_config();
  Count first;
  const std::string dir = checkpointed_counter(c, &first);
  ASSERT_FALSE(dir.empty());
  std::string mountpoints, core;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename();
    if (n.starts_with("mountpoints-")) mountpoints = e.path();
    if (n == "core-1.img") core = e.path();
  }
  ASSERT_FALSE(mountpoints.empty());
  ASSERT_FALSE(core.empty());
  const std::string saved_mounts = slurp(mountpoints), saved_core = slurp(core);
  auto refused = [&](const std::string& what, const std::string& expect,
                     const std::string& key = kKey) {
    SCOPED_TRACE(what);
    SandboxConfig again = c;
    auto r = restore(dir, again, {.mac_key = key});
    ASSERT_FALSE(r.ok()) << what << " was restored";
    EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition) << r.error().to_string();
    EXPECT_NE(r.error().message().find("failed its integrity check"), std::string::npos)
        << r.error().message();
    EXPECT_NE(r.error().message().find(expect), std::string::npos) << r.error().message();
    std::cout << what << ": " << r.error().message() << "\n";
    EXPECT_FALSE(fs::exists(state_ + "/" + c.id));
  };
  const std::string name_of_mounts = fs::path(mountpoints).filename();
  // A mount target changed: the bind's /abx/probe made /abx/proc_ (same length).
  ASSERT_TRUE(replace_in_file(mountpoints, testing::kProbeInside, "/abx/proc_"));
  refused("changed mount target", name_of_mounts + " changed (content)");
  std::ofstream(mountpoints, std::ios::binary | std::ios::trunc) << saved_mounts;
  // A credentials entry changed: the init's core image (its creds) with one byte flipped in
  // the middle, as a rewritten uid or capability mask would be.
  {
    std::string flipped = saved_core;
    flipped[flipped.size() / 2] ^= 0x01;
    std::ofstream(core, std::ios::binary | std::ios::trunc) << flipped;
  }
  refused("modified creds entry", "core-1.img changed (content)");
  std::ofstream(core, std::ios::binary | std::ios::trunc) << saved_core;
  ASSERT_TRUE(verify_checkpoint(dir, kKey).ok());
  // A sealing cut short between its write and its rename (kill -9 of abxd) leaves the seal's
  // temporary file beside the previous seal, which still holds (abxd_js_persistence_e2e once
  // failed a resume on "checkpoint.mac.tmp was added").
  std::ofstream(dir + "/checkpoint.mac.tmp") << "partial";
  EXPECT_TRUE(verify_checkpoint(dir, kKey).ok());
  fs::remove(dir + "/checkpoint.mac.tmp");
  // A file added, one removed, a symlink in place of an image, a mode opened up.
  std::ofstream(dir + "/extra.img") << "x";
  refused("added file", "extra.img was added");
  fs::remove(dir + "/extra.img");
  fs::rename(dir + "/inventory.img", tmp_.string() + "/inventory.img");
  refused("removed file", "inventory.img was removed");
  fs::rename(tmp_.string() + "/inventory.img", dir + "/inventory.img");
  fs::rename(dir + "/pstree.img", tmp_.string() + "/pstree.img");
  fs::create_symlink("/etc/passwd", dir + "/pstree.img");
  refused("symlinked image", "pstree.img changed (type f -> l");
  fs::remove(dir + "/pstree.img");
  fs::rename(tmp_.string() + "/pstree.img", dir + "/pstree.img");
  // The seal itself: another key, a rewritten list.
  refused("another key", "does not match abxd's checkpoint key", std::string(32, 'x'));
  const std::string seal = slurp(dir + "/" + kSealFile);
  ASSERT_TRUE(replace_in_file(dir + "/" + kSealFile, " 0600 ", " 0644 "));
  refused("rewritten seal", "does not match abxd's checkpoint key");
  std::ofstream(dir + "/" + kSealFile, std::ios::trunc) << seal;
  // A 0644 copy of the layer written back by a careless backup: sealed mode differs.
  ASSERT_EQ(::chmod((dir + "/rw.img").c_str(), 0644), 0);
  refused("opened mode", std::string("rw.img") + " changed (mode 0600 -> 0644)");
  ASSERT_EQ(::chmod((dir + "/rw.img").c_str(), 0600), 0);
  // The layer's content (one byte in the ext4 superblock's volume name area).
  {
    int fd = ::open((dir + "/rw.img").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    char b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, 1024 + 120), 1);
    char x = static_cast<char>(b ^ 0x20);
    ASSERT_EQ(::pwrite(fd, &x, 1, 1024 + 120), 1);
    refused("layer content", std::string("rw.img") + " changed (content)");
    ASSERT_EQ(::pwrite(fd, &b, 1, 1024 + 120), 1);
    ::close(fd);
  }

  // Nothing lost: as it was, it restores, counting on.
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  expect_running(*back, first);
  ASSERT_TRUE(back->destroy().ok());
}

// A symlink in the writable layer where a mount target is (here the probe's bind target,
// /abx/probe, pointing at a host file) is never mounted through: the restore is refused.
TEST_F(CheckpointTest, SymlinkedMountTargetInTheLayerIsRefused) {
  SandboxConfig c = counter_config();
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb.has_value());
  const std::string host_file = tmp_.string() + "/host-target";
  std::ofstream(host_file) << "host\n";
  // In the layer, under the bind: the sandbox never sees it until a restore mounts onto it.
  const std::string planted = sb->upper_dir() + testing::kProbeInside;
  fs::remove(planted);
  fs::create_symlink(host_file, planted);
  const std::string dir = tmp_.string() + "/ck-link";
  auto info = checkpoint(*sb, dir, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto r = restore(dir, c, {.mac_key = kKey});
  ASSERT_FALSE(r.ok()) << "restored with a symlinked mount target";
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition) << r.error().to_string();
  EXPECT_NE(r.error().message().find("mount target /abx/probe"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("symlink"), std::string::npos) << r.error().message();
  std::cout << "symlinked target: " << r.error().message() << "\n";
  EXPECT_EQ(slurp(host_file), "host\n");
  std::ifstream mi("/proc/self/mountinfo");
  for (std::string line; std::getline(mi, line);)
    EXPECT_EQ(line.find(host_file), std::string::npos) << line;
  auto l = CgroupLayout::detect();
  expect_no_leftovers(c.id, SandboxCgroups::existing(*l, "abx", c.id).dirs());
}

// What the kernel says of each process of a sandbox, keyed by its pid inside: credentials,
// capabilities, no_new_privs, seccomp, and its mount table as it sees it (ids and devices left
// out: a restore makes new mounts), plus the user namespace's maps.
std::map<std::string, std::string> processes_of(const Sandbox& sb) {
  std::map<std::string, std::string> out;
  std::ifstream procs(sb.cgroups().dirs().front() + "/cgroup.procs");
  for (std::string pid; std::getline(procs, pid);) {
    const std::string proc = "/proc/" + pid;
    std::string inner, keep;
    std::istringstream status(slurp(proc + "/status"));
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("NSpid:")) inner = line.substr(line.rfind('\t') + 1);
      for (const char* k : {"Name:", "Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:",
                            "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:"})
        if (line.starts_with(k)) keep += line + "\n";
    }
    std::istringstream mi(slurp(proc + "/mountinfo"));
    for (std::string line; std::getline(mi, line);) {
      std::istringstream f(line);
      std::string id, parent, dev, rest, field;
      f >> id >> parent >> dev;
      while (f >> field) {
        if (field.starts_with("shared:") || field.starts_with("master:")) continue;
        // overlayfs shows uuid=on only on the mount that found its upper dir new (the spawn's):
        // the same layer mounted again by a restore says nothing of it.
        if (auto at = field.find(",uuid=on"); at != std::string::npos) field.erase(at, 8);
        rest += " " + field;
      }
      keep += "mount" + rest + "\n";
    }
    keep += "uid_map " + slurp(proc + "/uid_map") + "gid_map " + slurp(proc + "/gid_map");
    // Host ids relative to the sandbox's id range ("R+1000"): a restore may get another slot
    // when the checkpointed one is still held (the maps must then move with it, and do).
    std::string rel;
    const std::uint64_t root = sb.root_host_id();
    for (std::size_t i = 0; i < keep.size();) {
      if (!std::isdigit(static_cast<unsigned char>(keep[i]))) {
        rel += keep[i++];
        continue;
      }
      std::size_t j = i;
      while (j < keep.size() && std::isdigit(static_cast<unsigned char>(keep[j]))) ++j;
      const std::string num = keep.substr(i, j - i);
      const std::uint64_t v = num.size() < 12 ? std::stoull(num) : 0;
      rel += v >= root && v < root + 65536 ? "R+" + std::to_string(v - root) : num;
      i = j;
    }
    out[inner] = rel;
  }
  return out;
}

// The restored sandbox is what was paused: every process's ids, groups, capabilities,
// no_new_privs and seccomp state, its mounts (read-only ones still read-only) and the id maps —
// for the root init and for a process that dropped to uid 1000 (both use rseq: glibc registers
// it in every thread on this kernel).
TEST_F(CheckpointTest, RestoredSandboxHasTheSameCredentialsMountsAndSeccomp) {
  SandboxConfig c = counter_config();
  c.argv = {"/bin/sh", "-c",
            "su -s /bin/sh -c 'exec setpriv --nnp tail -f /dev/null' user & exec "
            "/abx/probe count /count"};
  Count first;
  auto sb = spawn_counter(c, &first);
  ASSERT_TRUE(sb.has_value());
  const std::string user = "R+1000";
  auto has_user = [&](const std::map<std::string, std::string>& procs) {
    for (const auto& [pid, text] : procs)
      if (text.find("Uid:\t" + user + "\t" + user + "\t" + user + "\t" + user) !=
              std::string::npos &&
          text.find("CapEff:\t0000000000000000") != std::string::npos &&
          text.find("NoNewPrivs:\t1") != std::string::npos)
        return true;
    return false;
  };
  auto before = processes_of(*sb);
  for (int i = 0; i < 100 && !has_user(before); ++i) {
    std::this_thread::sleep_for(20ms);
    before = processes_of(*sb);
  }
  ASSERT_TRUE(has_user(before)) << "no process of uid 1000 with no_new_privs";
  for (const auto& [pid, text] : before) {
    EXPECT_NE(text.find("Seccomp:\t2"), std::string::npos) << text;
    EXPECT_NE(text.find(testing::kProbeInside + std::string(" ro,")), std::string::npos) << text;
  }
  const std::string dir = tmp_.string() + "/ck-same";
  auto info = checkpoint(*sb, dir, {.mac_key = kKey});
  ASSERT_TRUE(info.ok()) << info.error().to_string();
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  auto after = processes_of(*back);
  EXPECT_EQ(after, before);
  for (const auto& [pid, text] : after) {
    if (before.count(pid) && text != before[pid])
      std::cout << "pid " << pid << " before:\n" << before[pid] << "after:\n" << text << "\n";
  }
  ASSERT_TRUE(back->destroy().ok());
}

// The owner dies (SIGKILL) while its restore has the root and binds staged for CRIU: the stage's
// mounts hold the layer's loop device, and the stage is outside the state dir. cleanup_stale()
// finds it through the state dir and removes it with the rest.
TEST_F(CheckpointTest, CleanupRemovesTheStageOfARestoreWhoseOwnerWasKilled) {
  SandboxConfig c = counter_config();
  Count first;
  const std::string dir = checkpointed_counter(c, &first);
  ASSERT_FALSE(dir.empty());
  const std::string stage_root = RestoreOptions{}.stage_dir + "/" + c.id + "/root";
  auto staged = [&] {
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);)
      if (line.find(" " + stage_root + " ") != std::string::npos) return true;
    return false;
  };
  bool killed_staged = false;
  for (int attempt = 0; attempt < 5 && !killed_staged; ++attempt) {
    pid_t owner = ::fork();
    ASSERT_GE(owner, 0);
    if (owner == 0) {
      auto r = restore(dir, c, {.mac_key = kKey});
      _exit(r.ok() ? 0 : 1);
    }
    for (int i = 0; i < 20000 && !staged(); ++i) {
      int status = 0;
      if (::waitpid(owner, &status, WNOHANG) == owner) {
        owner = -1;
        break;
      }
      std::this_thread::sleep_for(100us);
    }
    if (owner > 0) {
      killed_staged = staged();
      ::kill(owner, SIGKILL);
      ::waitpid(owner, nullptr, 0);
      // A child the owner forked to exec criu holds the owner's lock until it sees the owner
      // gone, a moment later; cleanup_stale() rightly leaves a locked sandbox alone. (One CI
      // run cleaned up in that moment and found everything left.) A child that never lets go
      // still fails the test below.
      const std::string lock = state_ + "/" + c.id + "/lock";
      for (int i = 0; i < 500; ++i) {
        int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) break;
        const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
        ::close(fd);
        if (free) break;
        std::this_thread::sleep_for(10ms);
      }
    }
    // Whatever the owner left (a whole restored sandbox if it won the race) goes.
    auto n = cleanup_stale(state_);
    ASSERT_TRUE(n.ok()) << n.error().to_string();
  }
  ASSERT_TRUE(killed_staged) << "never caught a restore with its stage mounted";
  auto l = CgroupLayout::detect();
  expect_no_leftovers(c.id, SandboxCgroups::existing(*l, "abx", c.id).dirs());
}

// The owner dies after CRIU restored the init but before it took down the stage (here: while
// the restored sandbox's link is being made ready). The next owner adopts the live sandbox and
// with it the recorded stage: nothing of the stage may outlive the adoption. And had it died
// before the link was made, recover() makes it.
TEST_F(CheckpointTest, AdoptAndRecoverCompleteARestoreWhoseOwnerDiedAfterCriu) {
  SandboxConfig c = counter_config();
  Count first;
  const std::string dir = checkpointed_counter(c, &first);
  ASSERT_FALSE(dir.empty());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    SandboxConfig in_child = c;
    in_child.link_ready = [&](const VethInfo&) -> Status {
      char one = 1;
      if (::write(ready[1], &one, 1) != 1) _exit(2);
      ::pause();  // killed here
      return {};
    };
    auto r = restore(dir, in_child, {.mac_key = kKey});
    _exit(r.ok() ? 0 : 1);
  }
  ::close(ready[1]);
  char got = 0;
  const bool reached = ::read(ready[0], &got, 1) == 1;
  ::close(ready[0]);
  ::kill(owner, SIGKILL);
  ::waitpid(owner, nullptr, 0);
  ASSERT_TRUE(reached) << "the restore failed before its link was ready";
  const std::string stage = RestoreOptions{}.stage_dir + "/" + c.id;
  ASSERT_TRUE(fs::exists(stage + "/root")) << "the owner died with its stage taken down";

  auto adopted = Sandbox::adopt(state_, c.id, &c);
  ASSERT_TRUE(adopted) << adopted.error().to_string();
  EXPECT_FALSE(fs::exists(stage)) << "adopt() left the restore's stage";
  EXPECT_FALSE(fs::exists(state_ + "/" + c.id + "/stage"));
  // Nothing of the restored tree has run: CRIU left every task stopped until the restore ends,
  // so an owner that dies before it changes nothing (the writable layer stays as dumped). The
  // next owner lets it run.
  const std::vector<pid_t> tasks = adopted->cgroups().pids();
  ASSERT_FALSE(tasks.empty());
  for (pid_t p : tasks) EXPECT_EQ(task_state(p), 'T') << "task " << p << " ran";
  Status continued = continue_restored(*adopted);
  ASSERT_TRUE(continued.ok()) << continued.error().to_string();
  for (pid_t p : tasks) EXPECT_NE(task_state(p), 'T') << "task " << p << " still stopped";
  auto now = request(*adopted, adopted->upper_dir());  // the restored sandbox itself is whole
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->token, first.token);

  // Had the owner died before it made the link (no veth record, no link), recover() makes it
  // from the slot: abxd calls it when it completes a resume cut short by a restart.
  ASSERT_TRUE(adopted->veth().has_value());
  const VethInfo link = *adopted->veth();
  adopted->detach();
  ASSERT_TRUE(remove_veth(link).ok());
  ASSERT_TRUE(fs::remove(state_ + "/" + c.id + "/veth"));
  auto again = Sandbox::adopt(state_, c.id, &c);
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_FALSE(again->veth().has_value());
  Status recovered = recover(*again);
  ASSERT_TRUE(recovered.ok()) << recovered.error().to_string();
  ASSERT_TRUE(again->veth().has_value());
  EXPECT_EQ(again->veth()->host_if, link.host_if);
  EXPECT_NE(::if_nametoindex(link.host_if.c_str()), 0u);
  EXPECT_TRUE(fs::exists(state_ + "/" + c.id + "/veth"));
  ASSERT_TRUE(again->destroy().ok());
  auto l = CgroupLayout::detect();
  expect_no_leftovers(c.id, SandboxCgroups::existing(*l, "abx", c.id).dirs());
}

// A spawn runs link_rules before its clone (the link is not there yet, the sandbox's cgroup holds
// no process), then link_ready once the link is up, with the same link; a restore, which clones
// nothing of its caller, runs both once its link is up, in that order. An error from link_rules
// fails the spawn and leaves nothing behind (no state directory, no link, no cgroup).
TEST_F(CheckpointTest, LinkRulesRunBeforeTheCloneThenLinkReadyOnTheSameLink) {
  SandboxConfig c = counter_config();
  std::vector<std::string> calls;
  std::optional<VethInfo> ruled;
  std::vector<std::string> cgroup_dirs;
  bool restoring = false;
  c.link_rules = [&](const VethInfo& l) -> Status {
    calls.push_back("rules");
    ruled = l;
    if (restoring) return {};  // CRIU has restored the processes; the link is up
    EXPECT_EQ(::if_nametoindex(l.host_if.c_str()), 0u) << "the link is up before link_rules";
    auto layout = CgroupLayout::detect();
    if (layout) cgroup_dirs = SandboxCgroups::existing(*layout, c.cgroup_parent, c.id).dirs();
    for (const auto& d : cgroup_dirs)
      EXPECT_EQ(slurp(d + "/cgroup.procs"), "") << "a process in " << d << " before link_rules";
    return {};
  };
  c.link_ready = [&](const VethInfo& l) -> Status {
    calls.push_back("ready");
    EXPECT_NE(::if_nametoindex(l.host_if.c_str()), 0u) << l.host_if;
    EXPECT_TRUE(ruled && ruled->host_if == l.host_if && ruled->host_ip == l.host_ip &&
                ruled->sandbox_ip == l.sandbox_ip)
        << "link_rules was given another link than link_ready";
    return {};
  };
  Count first;
  const std::string dir = checkpointed_counter(c, &first);
  ASSERT_FALSE(dir.empty());
  EXPECT_EQ(calls, (std::vector<std::string>{"rules", "ready"}));
  EXPECT_FALSE(cgroup_dirs.empty()) << "no cgroup of the sandbox when link_rules ran";

  calls.clear();
  ruled.reset();
  restoring = true;
  auto back = restore(dir, c, {.mac_key = kKey});
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(calls, (std::vector<std::string>{"rules", "ready"}));
  ASSERT_TRUE(back->destroy().ok());

  SandboxConfig refused = counter_config();
  refused.id = "ck-refused";
  refused.link_rules = [](const VethInfo&) -> Status {
    return Error(ErrorCode::kUnavailable, "no rules today");
  };
  bool readied = false;
  refused.link_ready = [&](const VethInfo&) -> Status {
    readied = true;
    return {};
  };
  auto r = Sandbox::spawn(refused);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message().find("no rules today"), std::string::npos) << r.error().to_string();
  EXPECT_FALSE(readied);
  std::vector<std::string> refused_cgroups;
  if (auto layout = CgroupLayout::detect())
    refused_cgroups = SandboxCgroups::existing(*layout, refused.cgroup_parent, refused.id).dirs();
  expect_no_leftovers(refused.id, refused_cgroups);
  // The restored sandbox's link goes with its network namespace, which the kernel takes down in
  // the background after destroy() (slots are taken round-robin, so the refused spawn's was
  // another); a link that stays is one something made again or failed to remove.
  if (ruled) {
    bool gone = false;
    for (int i = 0; i < 200 && !gone; ++i) {
      gone = ::if_nametoindex(ruled->host_if.c_str()) == 0;
      if (!gone) std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(gone) << ruled->host_if << " is still there 10 s after its sandbox was destroyed";
  }
}

}  // namespace
}  // namespace abx::runtime
