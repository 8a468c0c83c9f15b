#include "abx/runtime/cgroup.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "sys.h"
#include "test_util.h"

namespace abx::runtime {
namespace {

using testing::TempDir;

// Metrics without cgroup v2: CPU time from v1 cpuacct.usage (ns) in the cpu hierarchy, memory
// from memory.usage_in_bytes. Plain files stand in for the cgroupfs.
TEST(CgroupUsageTest, ReadsV1CpuacctWhenThereIsNoV2) {
  TempDir tmp;
  CgroupLayout layout;
  layout.v1["cpu"] = tmp.path() + "/cpu,cpuacct";
  layout.v1["cpuacct"] = tmp.path() + "/cpu,cpuacct";
  layout.v1["memory"] = tmp.path() + "/memory";
  auto g = SandboxCgroups::existing(layout, "abx", "sb1");
  ASSERT_EQ(g.dir_for("cpu"), tmp.path() + "/cpu,cpuacct/abx/sb1");
  EXPECT_EQ(g.usage().cpu_usec, 0u);  // unreadable counters read as 0
  std::filesystem::create_directories(g.dir_for("cpu"));
  std::filesystem::create_directories(g.dir_for("memory"));
  std::ofstream(g.dir_for("cpu") + "/cpuacct.usage") << "2500000123\n";
  std::ofstream(g.dir_for("memory") + "/memory.usage_in_bytes") << "4096\n";
  CgroupUsage u = g.usage();
  EXPECT_EQ(u.cpu_usec, 2'500'000u);
  EXPECT_EQ(u.memory_bytes, 4096u);
}

TEST(CgroupLayoutTest, ParsesHybridMountinfo) {
  TempDir tmp;
  std::string mi = tmp.path() + "/mountinfo";
  std::ofstream(mi)
      << "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
         "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup "
         "rw,cpu,cpuacct\n"
         "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
         "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
         "41 31 0:38 / " +
             tmp.path() + " rw,relatime - cgroup2 cgroup2 rw\n";
  std::ofstream(tmp.path() + "/cgroup.controllers") << "hugetlb pids\n";
  auto l = CgroupLayout::detect(mi);
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(l->v2_root, tmp.path());
  EXPECT_EQ(l->v1.at("cpu"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(l->v1.at("cpuacct"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(l->v1.at("memory"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(l->v1.count("name=systemd"), 0u);
  EXPECT_EQ(l->where("memory"), "v1");
  EXPECT_EQ(l->where("pids"), "v2");
  EXPECT_EQ(l->where("freezer"), "");

  auto g = SandboxCgroups::existing(*l, "abx", "x1");
  EXPECT_EQ(g.dir_for("pids"), tmp.path() + "/abx/x1");
  EXPECT_EQ(g.dir_for("memory"), "/sys/fs/cgroup/memory/abx/x1");
  EXPECT_EQ(g.dir_for("cpu"), "/sys/fs/cgroup/cpu,cpuacct/abx/x1");
  EXPECT_EQ(g.dirs().front(), tmp.path() + "/abx/x1");
}

TEST(CgroupLayoutTest, MissingMountinfoIsAnError) {
  EXPECT_FALSE(CgroupLayout::detect("/nonexistent/mountinfo").ok());
}

class CgroupHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    auto l = CgroupLayout::detect();
    ASSERT_TRUE(l.ok());
    layout_ = *l;
    if (layout_.where("memory").empty() || layout_.where("pids").empty())
      GTEST_SKIP() << "memory and pids controllers not mounted";
  }
  CgroupLayout layout_;
};

TEST_F(CgroupHostTest, WritesLimitsAndRemoves) {
  std::string id = testing::unique_id("cg");
  CgroupLimits lim{64ull << 20, 50, 500};
  auto g = SandboxCgroups::create(layout_, "abx", id, lim);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  auto read = [](const std::string& p) {
    auto t = read_file(p);
    return t ? t->substr(0, t->find('\n')) : std::string("<missing>");
  };
  std::string mem = g->dir_for("memory"), pids = g->dir_for("pids"), cpu = g->dir_for("cpu");
  if (layout_.where("memory") == "v1") {
    EXPECT_EQ(read(mem + "/memory.limit_in_bytes"), std::to_string(64ull << 20));
  } else {
    EXPECT_EQ(read(mem + "/memory.max"), std::to_string(64ull << 20));
  }
  EXPECT_EQ(read(pids + "/pids.max"), "50");
  if (layout_.where("cpu") == "v1") {
    EXPECT_EQ(read(cpu + "/cpu.cfs_quota_us"), "50000");
  } else if (layout_.where("cpu") == "v2") {
    EXPECT_EQ(read(cpu + "/cpu.max"), "50000 100000");
  }
  // A second create of the same id must not silently share the group.
  auto again = SandboxCgroups::create(layout_, "abx", id, {});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kAlreadyExists);
  for (const auto& d : g->dirs()) EXPECT_TRUE(testing::path_exists(d)) << d;
  ASSERT_TRUE(g->remove().ok());
  for (const auto& d : g->dirs()) EXPECT_FALSE(testing::path_exists(d)) << d;
}

TEST_F(CgroupHostTest, LimitWithoutControllerIsFailedPrecondition) {
  CgroupLayout no_mem = layout_;
  no_mem.v1.erase("memory");
  no_mem.v2_controllers.erase("memory");
  auto g = SandboxCgroups::create(no_mem, "abx", testing::unique_id("cg"), {1 << 20, 0, 0});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), ErrorCode::kFailedPrecondition);
}

void kill_tree_test(const CgroupLayout& layout) {
  auto g = SandboxCgroups::create(layout, "abx", testing::unique_id("cg"), {});
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  // Attach before the children exist so they are born inside the group.
  int sync[2];
  ASSERT_EQ(::pipe(sync), 0);
  pid_t top = ::fork();
  if (top == 0) {
    char c;
    (void)!::read(sync[0], &c, 1);
    for (int i = 0; i < 4; ++i)
      if (::fork() == 0) {
        ::pause();
        _exit(0);
      }
    ::pause();
    _exit(0);
  }
  ASSERT_TRUE(g->attach(top).ok());
  (void)!::write(sync[1], "x", 1);
  ::close(sync[0]);
  ::close(sync[1]);
  for (int i = 0; i < 2000 && g->pids().size() < 5; ++i) ::usleep(1000);
  auto pids = g->pids();
  EXPECT_EQ(pids.size(), 5u);
  Status k = g->kill();
  EXPECT_TRUE(k.ok()) << k.error().to_string();
  int st;
  ASSERT_EQ(::waitpid(top, &st, 0), top);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  EXPECT_TRUE(g->pids().empty());
  Status r = g->remove();
  EXPECT_TRUE(r.ok()) << r.error().to_string();
}

TEST_F(CgroupHostTest, KillEmptiesTreeWithCgroupKill) {
  if (layout_.v2_root.empty()) GTEST_SKIP() << "no cgroup2 mounted";
  kill_tree_test(layout_);
}

TEST_F(CgroupHostTest, KillEmptiesTreeWithV1Freezer) {
  if (!layout_.v1.count("freezer")) GTEST_SKIP() << "no v1 freezer";
  CgroupLayout v1_only = layout_;  // as on a host without cgroup2: the freezer path
  v1_only.v2_root.clear();
  v1_only.v2_controllers.clear();
  if (v1_only.where("memory").empty()) GTEST_SKIP() << "controllers only on v2";
  kill_tree_test(v1_only);
}

}  // namespace
}  // namespace abx::runtime
