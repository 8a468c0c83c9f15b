// The writable-layer pool (layer_pool.h): real loop devices and ext4 mounts; needs root.
#include "abx/runtime/layer_pool.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "abx/runtime/sandbox.h"
#include "abx/testing/rootfs.h"
#include "abx/testing/temp_dir.h"
#include "disk.h"
#include "gtest/gtest.h"
#include "sys.h"
#include "test_util.h"

namespace abx::runtime {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr std::uint64_t kSize = 64ull << 20;

// Mount lines and loop devices that name anything under `path`, waiting (bounded) for the
// kernel's asynchronous autoclear of loop devices whose last user is gone.
std::string leftovers(const std::string& path) {
  std::string left;
  for (int i = 0; i < 100; ++i) {
    left.clear();
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);)
      if (line.find(path) != std::string::npos) left += "mount: " + line + "\n";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
      const std::string backing = testing::slurp(e.path() / "loop/backing_file");
      if (backing.find(path) != std::string::npos)
        left += "loop: " + e.path().string() + " " + backing;
    }
    if (left.empty()) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return left;
}

std::size_t files_in(const std::string& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); ++it) ++n;
  return n;
}

class LayerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "loop devices and mounts need root";
    state_ = tmp_.string() + "/state";
    fs::create_directories(state_);
  }
  LayerPoolOptions options(std::size_t per_size) const {
    LayerPoolOptions o;
    o.state_dir = state_;
    o.per_size = per_size;
    o.tick = milliseconds(20);
    return o;
  }

  abx::testing::TempDir tmp_{"abx-rt-pool"};
  std::string state_;
};

TEST_F(LayerPoolTest, FirstTakeMissesThenTheSizeIsKeptFullOfFreshDetachedLayers) {
  auto pool = LayerPool::start(options(2));
  ASSERT_TRUE(pool.ok()) << pool.error().to_string();
  EXPECT_FALSE((*pool)->take(kSize).has_value());  // nothing made before the size is asked for
  ASSERT_TRUE((*pool)->wait_full(milliseconds(20000)));
  LayerPool::Stats s = (*pool)->stats();
  EXPECT_EQ(s.ready, 2u);
  EXPECT_EQ(s.sizes, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(files_in(state_ + "/.rw-pool"), 2u);
  // Ready layers are mounted nowhere: no path of the state dir is a mount point yet.
  {
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);)
      EXPECT_EQ(line.find(state_), std::string::npos) << line;
  }

  // Two takes: two different files, each installed as a sandbox's new layer, empty, its own.
  std::set<std::string> images;
  std::vector<std::string> dirs;
  for (int i = 0; i < 2; ++i) {
    std::optional<ReadyLayer> l = (*pool)->take(kSize);
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->bytes, kSize);
    images.insert(l->image);
    const std::string dir = state_ + "/sb" + std::to_string(i);
    fs::create_directories(dir + "/rw");
    ASSERT_TRUE(install_ready_layer(std::move(*l), dir).ok());
    dirs.push_back(dir);
    EXPECT_TRUE(fs::exists(dir + "/rw.img"));
    EXPECT_TRUE(fs::is_directory(dir + "/rw/upper"));
    EXPECT_TRUE(fs::is_directory(dir + "/rw/work"));
    EXPECT_TRUE(fs::is_empty(dir + "/rw/upper"));
    struct statvfs v;
    ASSERT_EQ(::statvfs((dir + "/rw").c_str(), &v), 0);
    EXPECT_GT(v.f_blocks * v.f_frsize, kSize / 2);
    EXPECT_LE(v.f_blocks * v.f_frsize, kSize);
    // The loop device follows the renamed file.
    EXPECT_TRUE(loop_backed_by(dir + "/rw.img"));
  }
  EXPECT_EQ(images.size(), 2u);
  std::ofstream(dirs[0] + "/rw/upper/mine") << "0\n";
  EXPECT_FALSE(fs::exists(dirs[1] + "/rw/upper/mine"));
  EXPECT_EQ((*pool)->stats().hits, 2u);
  for (const auto& d : dirs) {
    EXPECT_TRUE(remove_rw_layer(d).ok());
    EXPECT_TRUE(remove_tree(d).ok());
  }
  // Refilled after the takes, and everything gone with the pool.
  EXPECT_TRUE((*pool)->wait_full(milliseconds(20000)));
  pool->reset();
  EXPECT_EQ(files_in(state_ + "/.rw-pool"), 0u);
  EXPECT_EQ(leftovers(state_), "");
}

TEST_F(LayerPoolTest, ASizeLeftIdleIsEmptied) {
  LayerPoolOptions o = options(2);
  // Longer than the pool takes to make its two layers, even under a sanitizer on a loaded
  // machine (300 ms was not: the size expired before the check of its ready layers).
  o.idle = milliseconds(3000);
  auto pool = LayerPool::start(o);
  ASSERT_TRUE(pool.ok());
  (void)(*pool)->take(kSize);
  ASSERT_TRUE((*pool)->wait_full(milliseconds(20000)));
  EXPECT_EQ((*pool)->stats().ready, 2u);
  // (The thread removes the files just after it lets go of the size.)
  for (int i = 0; i < 400 && ((*pool)->stats().sizes != 0 || files_in(state_ + "/.rw-pool") != 0);
       ++i)
    std::this_thread::sleep_for(milliseconds(25));
  LayerPool::Stats s = (*pool)->stats();
  EXPECT_EQ(s.sizes, 0u);
  EXPECT_EQ(s.ready, 0u);
  EXPECT_GE(s.dropped, 2u);
  EXPECT_EQ(files_in(state_ + "/.rw-pool"), 0u);
  EXPECT_EQ(leftovers(state_), "");  // unmounted, loop devices released, with the pool alive
}

TEST_F(LayerPoolTest, OnlyMaxSizesAreKeptTheLeastRecentlyTakenMakesRoom) {
  LayerPoolOptions o = options(1);
  o.max_sizes = 1;
  auto pool = LayerPool::start(o);
  ASSERT_TRUE(pool.ok());
  (void)(*pool)->take(kSize);
  ASSERT_TRUE((*pool)->wait_full(milliseconds(20000)));
  (void)(*pool)->take(2 * kSize);
  EXPECT_EQ((*pool)->stats().sizes, 1u);
  ASSERT_TRUE((*pool)->wait_full(milliseconds(20000)));
  std::optional<ReadyLayer> l = (*pool)->take(2 * kSize);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->bytes, 2 * kSize);
  l.reset();  // a dropped ready layer unmounts itself; its file is the holder's
  EXPECT_FALSE((*pool)->take(kSize).has_value());  // evicted: made again only from now on
  pool->reset();
  EXPECT_EQ(leftovers(state_), "");
}

TEST_F(LayerPoolTest, SizeZeroIsNoPool) {
  auto pool = LayerPool::start(options(0));
  ASSERT_TRUE(pool.ok());
  EXPECT_FALSE((*pool)->take(kSize).has_value());
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ((*pool)->stats().ready, 0u);
  EXPECT_EQ((*pool)->stats().misses, 0u);
  EXPECT_FALSE(fs::exists(state_ + "/.rw-pool"));
}

TEST_F(LayerPoolTest, StartRemovesWhatADeadPredecessorLeft) {
  fs::create_directories(state_ + "/.rw-pool");
  std::ofstream(state_ + "/.rw-pool/7.img") << "left by a crash\n";
  auto pool = LayerPool::start(options(1));
  ASSERT_TRUE(pool.ok());
  EXPECT_FALSE(fs::exists(state_ + "/.rw-pool/7.img"));
  EXPECT_FALSE(LayerPool::start(LayerPoolOptions{}).ok());  // no state dir
}

// A sandbox spawned with a pool runs on a ready layer (no layer made at spawn), writes there,
// and its destroy leaves nothing, as a layer made at spawn.
TEST_F(LayerPoolTest, SpawnTakesAReadyLayerAndDestroyRemovesIt) {
  const std::string base = tmp_.string() + "/layers/0-busybox";
  fs::create_directories(base);
  std::string why;
  if (!abx::testing::make_busybox_layer(base, &why)) GTEST_SKIP() << why;
  auto pool = LayerPool::start(options(1));
  ASSERT_TRUE(pool.ok());
  (void)(*pool)->take(kSize);
  ASSERT_TRUE((*pool)->wait_full(milliseconds(20000)));

  SandboxConfig c = testing::image_config(state_, {base}, {"/bin/sh", "-c", "echo hi > /mark"});
  c.disk_bytes = kSize;
  c.layer_pool = pool->get();
  testing::Ran r = testing::spawn_and_wait(std::move(c));
  ASSERT_TRUE(r.sb.has_value());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ((*pool)->stats().hits, 1u);
  EXPECT_EQ(testing::slurp(r.sb->upper_dir() + "/mark"), "hi\n");
  const std::string dir = r.sb->state_path();
  ASSERT_TRUE(r.sb->destroy().ok());
  EXPECT_FALSE(fs::exists(dir));
  pool->reset();
  EXPECT_EQ(leftovers(state_), "");
}

}  // namespace
}  // namespace abx::runtime
