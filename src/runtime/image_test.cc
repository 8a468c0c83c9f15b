// Image root filesystems: layers stacked by overlayfs (whiteouts, opaque dirs, many layers) over
// the ext4 writable layer on disk (upper dir on the host, quota), with a busybox image built
// from Debian's busybox-static. Real sandboxes; needs root.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "abx/runtime/layer.h"
#include "abx/runtime/sandbox.h"
#include "abx/testing/rootfs.h"
#include "abx/testing/temp_dir.h"
#include "disk.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace abx::runtime {
namespace {

namespace fs = std::filesystem;

// Every mount and loop device a sandbox made is gone once it is destroyed.
void expect_no_disk_leftovers(const std::string& state_path) {
  EXPECT_FALSE(fs::exists(state_path)) << state_path;
  std::ifstream mi("/proc/self/mountinfo");
  for (std::string line; std::getline(mi, line);)
    EXPECT_EQ(line.find(state_path), std::string::npos) << line;
  // The loop device clears itself (LO_FLAGS_AUTOCLEAR) when its last user is gone, which the
  // kernel finishes asynchronously after the sandbox's mount namespace is torn down: wait for
  // it (bounded) rather than sample the moment after destroy().
  std::string left;
  for (int i = 0; i < 100; ++i) {
    left.clear();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
      std::string backing = testing::slurp(e.path() / "loop/backing_file");
      if (backing.find(state_path) != std::string::npos) left += e.path().string() + " ";
    }
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(left, "") << "loop devices still backed by " << state_path;
}

class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
    base_ = tmp_.string() + "/layers/0-busybox";
    fs::create_directories(base_);
    std::string why;
    if (!abx::testing::make_busybox_layer(base_, &why)) GTEST_SKIP() << why;
    state_ = tmp_.string() + "/state";
  }

  SandboxConfig shell(std::vector<std::string> lowers, const std::string& script) {
    return testing::image_config(state_, std::move(lowers), {"/bin/sh", "-c", script});
  }
  static testing::Ran run(SandboxConfig c) { return testing::spawn_and_wait(std::move(c)); }

  abx::testing::TempDir tmp_{"abx-rt-image"};
  std::string base_, state_;
};

TEST_F(ImageTest, LayersStackWithWhiteoutsAndOpaqueDirsAndWritesGoToUpperOnDisk) {
  // Layer 0: busybox plus files that the layer above hides.
  fs::create_directories(base_ + "/data/old");
  std::ofstream(base_ + "/etc/hidden") << "lower\n";
  std::ofstream(base_ + "/etc/kept") << "kept\n";
  std::ofstream(base_ + "/data/old/x") << "x\n";
  // Layer 1: a whiteout for /etc/hidden, /data/old opaque with one new file, a new /etc file.
  std::string top = tmp_.string() + "/layers/1-top";
  fs::create_directories(top + "/etc");
  fs::create_directories(top + "/data/old");
  ASSERT_TRUE(make_whiteout(top + "/etc/hidden").ok());
  ASSERT_TRUE(make_opaque(top + "/data/old").ok());
  std::ofstream(top + "/data/old/new") << "new\n";
  std::ofstream(top + "/etc/added") << "added\n";

  auto r = run(shell({base_, top},
                     "ls /etc; echo --; ls /data/old; echo --; cat /etc/kept; "
                     "echo written > /newfile && rm /etc/kept && echo done"));
  ASSERT_TRUE(r.sb);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
  EXPECT_EQ(r.out, "added\ngroup\nkept\npasswd\n--\nnew\n--\nkept\ndone\n");
  // The writes are on the host, in the upper dir of the ext4 layer, after the init exited.
  std::string upper = r.sb->upper_dir();
  EXPECT_EQ(upper, r.sb->state_path() + "/rw/upper");
  EXPECT_EQ(testing::slurp(upper + "/newfile"), "written\n");
  struct stat st;
  ASSERT_EQ(::lstat((upper + "/etc/kept").c_str(), &st), 0);  // the deletion: a whiteout
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
  struct statfs sfs;
  ASSERT_EQ(::statfs(upper.c_str(), &sfs), 0);
  EXPECT_EQ(sfs.f_type, 0xEF53u);  // ext4, not tmpfs
  // The layers themselves are untouched.
  EXPECT_TRUE(fs::exists(base_ + "/etc/kept"));
  EXPECT_FALSE(fs::exists(base_ + "/newfile"));
  std::string state = r.sb->state_path();
  ASSERT_TRUE(r.sb->destroy().ok());
  expect_no_disk_leftovers(state);
}

TEST_F(ImageTest, WritesPastTheQuotaGetEnospcInsideOnly) {
  struct statvfs before;
  ASSERT_EQ(::statvfs(tmp_.string().c_str(), &before), 0);
  auto c = shell({base_},
                 "dd if=/dev/zero of=/big bs=1M count=64 2>&1 | grep -o 'No space left on device'; "
                 "rm /big; echo small > /small && cat /small; echo alive");
  c.disk_bytes = 16ull << 20;
  auto r = run(std::move(c));
  ASSERT_TRUE(r.sb);
  EXPECT_EQ(r.out, "No space left on device\nsmall\nalive\n");
  // The image never grows past its size, and the host filesystem did not fill.
  struct stat st;
  ASSERT_EQ(::stat((r.sb->state_path() + "/rw.img").c_str(), &st), 0);
  EXPECT_LE(static_cast<std::uint64_t>(st.st_blocks) * 512, 16ull << 20);
  struct statvfs after;
  ASSERT_EQ(::statvfs(tmp_.string().c_str(), &after), 0);
  EXPECT_GT(after.f_bavail * after.f_frsize, 64ull << 20);
  std::string state = r.sb->state_path();
  ASSERT_TRUE(r.sb->destroy().ok());
  expect_no_disk_leftovers(state);
}

TEST_F(ImageTest, ManyLayersPastTheLegacyOptionPage) {
  // 100 layers of ~70-byte paths: ~7 KiB of lowerdir, more than mount(2)'s 4 KiB page.
  std::vector<std::string> lowers = {base_};
  for (int i = 1; i < 100; ++i) {
    std::string d = tmp_.string() + "/layers/layer-" + std::to_string(1000 + i) +
                    "-with-a-long-name-like-an-image-store-digest";
    fs::create_directories(d + "/many");
    std::ofstream(d + "/many/" + std::to_string(i)) << i;
    std::ofstream(d + "/top") << i;  // the last layer's wins
    lowers.push_back(d);
  }
  auto r = run(shell(lowers, "ls /many | wc -l; cat /top"));
  ASSERT_TRUE(r.sb);
  EXPECT_EQ(r.out, "99\n99");
  ASSERT_TRUE(r.sb->destroy().ok());
}

TEST_F(ImageTest, ConfigErrors) {
  auto c = shell({}, "true");
  auto r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  c = shell({tmp_.string() + "/missing"}, "true");
  r = Sandbox::spawn(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("not a directory"), std::string::npos);
  // A config left at its defaults is an image without layers, never the host's root.
  SandboxConfig d;
  EXPECT_EQ(d.rootfs, RootfsMode::kImage);
  EXPECT_FALSE(fs::exists(state_ + "/" + c.id));
}

TEST_F(ImageTest, AdoptedSandboxKeepsItsUpperDirAndDestroyRemovesIt) {
  auto c = shell({base_}, "echo kept > /mark; sleep 100");
  std::string id = c.id;
  auto sb = Sandbox::spawn(std::move(c));
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  std::string state = sb->state_path();
  std::string upper = sb->upper_dir();
  sb->detach();  // a restarting owner
  auto again = Sandbox::adopt(state_, id);
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_EQ(again->upper_dir(), upper);
  // Up to 10 s: the shell may be slow to start on a loaded machine (1 s failed once in CI).
  for (int i = 0; i < 5000 && !fs::exists(upper + "/mark"); ++i) ::usleep(2000);
  EXPECT_EQ(testing::slurp(upper + "/mark"), "kept\n");
  ASSERT_TRUE(again->destroy().ok());
  expect_no_disk_leftovers(state);
}

// The filesystem-only pause: keep_layer() keeps the writable layer of a running sandbox,
// release_layer() ends its processes, and a new sandbox spawned on the kept layer (layer_image)
// has the files and none of the processes; the kept file is the new sandbox's layer (unless
// copy_layer).
TEST_F(ImageTest, KeptLayerOutlivesItsProcessesAndANewSandboxBootsOnIt) {
  auto c = shell({base_}, "rm /etc/passwd; echo kept > /mark; sleep 100");
  const std::string id = c.id;
  auto sb = Sandbox::spawn(c);
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  const std::string state = sb->state_path(), upper = sb->upper_dir();
  for (int i = 0; i < 5000 && !fs::exists(upper + "/mark"); ++i) ::usleep(2000);
  ASSERT_EQ(testing::slurp(upper + "/mark"), "kept\n");
  const std::string kept = tmp_.string() + "/kept.img";
  ASSERT_TRUE(keep_layer(*sb, kept).ok());
  EXPECT_TRUE(sb->cgroups().frozen());
  ASSERT_TRUE(release_layer(*sb, kept).ok());
  expect_no_disk_leftovers(state);  // processes, cgroups, mounts, loop device: all gone
  ASSERT_TRUE(fs::exists(kept));

  // The same id, new processes, the old files (a deletion included).
  SandboxConfig again = shell({base_},
                              "cat /mark; ls /etc/passwd 2>&1 | grep -c 'No such'; "
                              "echo second > /mark2; echo done");
  again.id = id;
  again.layer_image = kept;
  auto r = run(std::move(again));
  ASSERT_TRUE(r.sb);
  EXPECT_EQ(r.out, "kept\n1\ndone\n");
  ASSERT_TRUE(r.sb->destroy().ok());
  expect_no_disk_leftovers(state);
  // A sandbox on the kept layer (or, copy_layer, on a copy of it) runs `cmd`: its output.
  auto on_kept = [&](const std::string& cmd, bool copy_layer) -> std::string {
    SandboxConfig cfg = shell({base_}, cmd);
    cfg.layer_image = kept;
    cfg.copy_layer = copy_layer;
    auto ran = run(std::move(cfg));
    if (!ran.sb) return "(no sandbox)";
    EXPECT_TRUE(ran.sb->destroy().ok());
    return ran.out;
  };
  // The new sandbox wrote to the kept file itself (its layer was a hard link of it).
  EXPECT_EQ(on_kept("cat /mark2", false), "second\n");
  // copy_layer: a copy of it; the kept file is left as it was.
  EXPECT_EQ(on_kept("cat /mark2; echo third > /mark3", true), "second\n");
  EXPECT_EQ(on_kept("cat /mark3 2>/dev/null || echo none", false), "none\n");

  // Refused: a relative path, or a host rootfs (no layer to take).
  SandboxConfig bad = shell({base_}, "true");
  bad.layer_image = "kept.img";
  EXPECT_EQ(Sandbox::spawn(bad).error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(ImageTest, CleanupStaleUnmountsTheWritableLayer) {
  auto c = shell({base_}, "sleep 100");
  std::string id = c.id;
  auto sb = Sandbox::spawn(std::move(c));
  ASSERT_TRUE(sb.ok()) << sb.error().to_string();
  std::string state = sb->state_path();
  sb->detach();  // as if the owner died: unlocked, running, mounted
  auto n = cleanup_stale(state_);
  ASSERT_TRUE(n.ok()) << n.error().to_string();
  EXPECT_EQ(*n, 1);
  expect_no_disk_leftovers(state);
  EXPECT_TRUE(fs::exists(state_ + "/.rw-cache"));  // the cache is not a sandbox
}

// Many writable layers attached at once by threads of one process: LOOP_CTL_GET_FREE names the
// same lowest free device to all of them, and each must still get one (32 parallel creates
// used to run out of attempts: "no free loop device").
TEST_F(ImageTest, ThirtyTwoLayersAttachedAtOnceAllGetALoopDevice) {
  constexpr int kLayers = 32;
  const std::string root = state_ + "/many";
  std::vector<std::string> dirs;
  for (int i = 0; i < kLayers; ++i) {
    dirs.push_back(root + "/" + std::to_string(i));
    fs::create_directories(dirs.back() + "/" + kRwMount);
  }
  Status first = make_rw_layer(state_, dirs[0], 16ull << 20);  // formats the cached image once
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  std::vector<std::string> errors(kLayers);
  std::vector<std::thread> threads;
  for (int i = 1; i < kLayers; ++i) {
    threads.emplace_back([&, i] {
      if (Status s = make_rw_layer(state_, dirs[i], 16ull << 20); !s)
        errors[i] = s.error().message();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kLayers; ++i) {
    EXPECT_EQ(errors[i], "") << "layer " << i;
    EXPECT_TRUE(remove_rw_layer(dirs[i]).ok());
  }
  fs::remove_all(root);
  expect_no_disk_leftovers(root);
}

// User namespaces (userns.h): sandbox root is the first id of a host range of its own, the
// layers are idmapped (on-disk 0 is root inside), and the writable layer stores ids unshifted.
TEST_F(ImageTest, RootIsAnUnprivilegedHostRangeAndTheWritableLayerStaysUnshifted) {
  auto r = run(shell({base_},
                     "cat /proc/self/uid_map; id -u; ls -ln /etc/passwd; "
                     "echo x > /rootfile && mkdir -p /home && touch /home/u && "
                     "chown 1000:1000 /home/u && echo done"));
  ASSERT_TRUE(r.sb);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
  const std::uint32_t first = r.sb->root_host_id();
  EXPECT_GE(first, UserNamespace{}.base);
  EXPECT_EQ((first - UserNamespace{}.base) % kIdsPerSandbox, 0u);
  std::istringstream out(r.out);
  std::uint64_t inside = 1, outside = 0, count = 0;
  out >> inside >> outside >> count;
  EXPECT_EQ(inside, 0u);
  EXPECT_EQ(outside, first);
  EXPECT_EQ(count, kIdsPerSandbox);
  EXPECT_NE(r.out.find("\n0\n"), std::string::npos) << r.out;  // id -u: root inside
  // The layer's file (uid 0 on disk) is root's inside, through the idmapped layer.
  EXPECT_NE(r.out.find(" 0        0 "), std::string::npos) << r.out;
  struct stat st;
  ASSERT_EQ(::lstat((r.sb->upper_dir() + "/rootfile").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);  // not `first`: a layer made from it is plain
  ASSERT_EQ(::lstat((r.sb->upper_dir() + "/home/u").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  ASSERT_TRUE(r.sb->destroy().ok());
}

TEST_F(ImageTest, ConcurrentSandboxesGetDisjointRangesFreedOnDestroy) {
  auto a = Sandbox::spawn(shell({base_}, "sleep 30"));
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  auto b = Sandbox::spawn(shell({base_}, "sleep 30"));
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  EXPECT_NE(a->root_host_id(), b->root_host_id());
  // The host sees each init as its range's root.
  for (Sandbox* sb : {&*a, &*b}) {
    std::string status = testing::slurp("/proc/" + std::to_string(sb->pid()) + "/status");
    EXPECT_NE(status.find("Uid:\t" + std::to_string(sb->root_host_id()) + "\t"), std::string::npos)
        << status;
  }
  const std::string registry = UserNamespace{}.registry;
  auto claim = [&](const Sandbox& sb) {
    return registry + "/" +
           std::to_string((sb.root_host_id() - UserNamespace{}.base) / kIdsPerSandbox);
  };
  std::string claim_a = claim(*a);
  EXPECT_EQ(testing::slurp(claim_a).substr(0, std::to_string(a->pid()).size() + 1),
            std::to_string(a->pid()) + " ");
  ASSERT_TRUE(a->destroy().ok());
  // Freed, unless another test's sandbox took the slot in between.
  std::string after = testing::slurp(claim_a);
  EXPECT_EQ(after.find(std::to_string(a->pid()) + " "), std::string::npos) << after;
  ASSERT_TRUE(b->destroy().ok());
}

TEST_F(ImageTest, RootOnlyHostFileBoundInIsReadableAsSandboxRoot) {
  std::string secret = tmp_.string() + "/token";
  std::ofstream(secret) << "s3cret\n";
  ASSERT_EQ(::chmod(secret.c_str(), 0400), 0);
  auto c = shell({base_}, "cat /run/token; ls -ln /run/token");
  c.binds.push_back({secret, "/run/token", false});
  auto r = run(c);
  ASSERT_TRUE(r.sb);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.out;
  EXPECT_EQ(r.out.substr(0, 7), "s3cret\n") << r.out;
  EXPECT_NE(r.out.find("-r--------    1 0        0 "), std::string::npos) << r.out;
  ASSERT_TRUE(r.sb->destroy().ok());
}

TEST_F(ImageTest, WithoutAUserNamespaceRootIsHostRoot) {
  auto c = shell({base_}, "cat /proc/self/uid_map");
  c.userns.enabled = false;
  auto r = run(c);
  ASSERT_TRUE(r.sb);
  EXPECT_EQ(r.sb->root_host_id(), 0u);
  std::istringstream out(r.out);
  std::uint64_t inside = 1, outside = 1, count = 0;
  out >> inside >> outside >> count;
  EXPECT_EQ(inside, 0u);
  EXPECT_EQ(outside, 0u);
  EXPECT_EQ(count, 4294967295u);
  ASSERT_TRUE(r.sb->destroy().ok());
}

}  // namespace
}  // namespace abx::runtime
