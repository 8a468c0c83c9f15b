// The user namespace's pieces that need no sandbox: the id-range check and the slot registry.
#include "abx/runtime/userns.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "abx/runtime/process.h"
#include "abx/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "test_util.h"
#include "userns_internal.h"

namespace abx::runtime {
namespace {

namespace fs = std::filesystem;

class IdRangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* f : {"passwd", "group", "subuid", "subgid"}) write(f, "");
    write("passwd", "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\n");
  }
  void write(const std::string& file, const std::string& text) {
    std::ofstream(tmp_.string() + "/" + file) << text;
  }
  abx::testing::TempDir tmp_{"abx-idrange"};
};

TEST_F(IdRangeTest, DefaultRangeIsClearOfATypicalHost) {
  EXPECT_TRUE(check_id_range(UserNamespace{}, tmp_.string()).ok());
  UserNamespace u;
  u.base = 100000;
  u.slots = 4;
  write("subuid", "alice:100000:65536\n");
  auto s = check_id_range(u, tmp_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(s.error().message().find("subuid: alice:100000:65536"), std::string::npos)
      << s.error().message();
  EXPECT_NE(s.error().message().find("--userns-base"), std::string::npos);
}

TEST_F(IdRangeTest, UsersGroupsAndSubgidsInTheRangeAreNamed) {
  UserNamespace u;
  u.base = 1000;
  u.slots = 1;
  auto s = check_id_range(u, tmp_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("passwd: user has id 1000"), std::string::npos)
      << s.error().message();
  u.base = 200000;
  write("group", "abx:x:200001:\n");
  s = check_id_range(u, tmp_.string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("group: abx has id 200001"), std::string::npos);
  write("group", "");
  write("subgid", "bob:265535:10\n");  // overlaps the last id of the range only
  EXPECT_FALSE(check_id_range(u, tmp_.string()).ok());
  write("subgid", "bob:265536:10\n");  // just past it
  EXPECT_TRUE(check_id_range(u, tmp_.string()).ok());
}

TEST_F(IdRangeTest, RangeMustFitAndStartAboveRoot) {
  UserNamespace u;
  u.base = 0;
  EXPECT_EQ(check_id_range(u, tmp_.string()).error().code(), ErrorCode::kInvalidArgument);
  u.base = 0xffff0000u;
  u.slots = 2;
  EXPECT_EQ(check_id_range(u, tmp_.string()).error().code(), ErrorCode::kInvalidArgument);
  u.slots = 0;
  EXPECT_EQ(check_id_range(u, tmp_.string()).error().code(), ErrorCode::kInvalidArgument);
}

class SlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    u_.registry = tmp_.string() + "/registry";
    u_.slots = 2;
  }
  abx::testing::TempDir tmp_{"abx-slots"};
  UserNamespace u_;
};

TEST_F(SlotTest, LiveClaimsAreExclusiveAndReleasedOnlyByTheirHolder) {
  auto a = claim_slot(u_);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(*a, 0u);
  auto b = claim_slot(u_);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, 1u);
  auto c = claim_slot(u_);  // both held by this (live) process
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kResourceExhausted);
  // Released only by the holder it names.
  release_slot(u_.registry, 0, ::getpid(), process_start_time(::getpid()) + 1);
  EXPECT_TRUE(fs::exists(u_.registry + "/0"));
  release_slot(u_.registry, 0, ::getpid(), process_start_time(::getpid()));
  EXPECT_FALSE(fs::exists(u_.registry + "/0"));
  auto again = claim_slot(u_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

TEST_F(SlotTest, AReleasedSlotIsClaimedAgainLast) {
  u_.slots = 3;
  const pid_t me = ::getpid();
  const auto start = process_start_time(me);
  auto claim = [&] {
    auto s = claim_slot(u_);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    return s.ok() ? *s : 99u;
  };
  EXPECT_EQ(claim(), 0u);
  release_slot(u_.registry, 0, me, start);
  // Slot 0 is free again, but the search starts after the last slot claimed.
  EXPECT_EQ(claim(), 1u);
  EXPECT_EQ(claim(), 2u);
  release_slot(u_.registry, 2, me, start);
  // Wrapped around: the free slot 0 comes before the just-released 2 ...
  EXPECT_EQ(claim(), 0u);
  // ... which is found once nothing else is free.
  EXPECT_EQ(claim(), 2u);
  // A cursor that is not a slot number (or past the slots) starts the search at slot 0.
  for (const char* bad : {"junk\n", "7\n"}) {
    release_slot(u_.registry, 1, me, start);
    std::ofstream(u_.registry + "/next") << bad;
    EXPECT_EQ(claim(), 1u) << bad;
  }
}

TEST_F(SlotTest, AClaimWhoseHolderIsGoneIsFree) {
  ASSERT_TRUE(claim_slot(u_).ok());
  ASSERT_TRUE(claim_slot(u_).ok());
  // Slot 1 now names a process that does not exist (a pid past pid_max, or a wrong start time).
  std::ofstream(u_.registry + "/1") << ::getpid() << " 1\n";
  auto c = claim_slot(u_);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(*c, 1u);
  EXPECT_EQ(
      testing::slurp(u_.registry + "/1"),
      std::to_string(::getpid()) + " " + std::to_string(process_start_time(::getpid())) + "\n");
  // hold_slot hands the claim to another process (the sandbox's init).
  ASSERT_TRUE(hold_slot(u_, 1, ::getppid()).ok());
  EXPECT_EQ(testing::slurp(u_.registry + "/1").substr(0, std::to_string(::getppid()).size() + 1),
            std::to_string(::getppid()) + " ");
}

}  // namespace
}  // namespace abx::runtime
