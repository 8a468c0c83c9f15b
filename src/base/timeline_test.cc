#include "abx/base/timeline.h"

#include <gtest/gtest.h>

#include <thread>

namespace abx {
namespace {

using namespace std::chrono_literals;

TEST(TimelineTest, StepsAreTheTimeBetweenMarks) {
  Timeline t;
  std::this_thread::sleep_for(2ms);
  t.mark("first");
  t.mark("second");
  ASSERT_EQ(t.steps().size(), 2u);
  EXPECT_EQ(t.steps()[0].name, "first");
  EXPECT_GE(t.steps()[0].took, 2ms);  // a sleep lasts at least as long as asked
  EXPECT_EQ(t.steps()[1].name, "second");
  EXPECT_EQ(t.total(), t.steps()[0].took + t.steps()[1].took);
}

TEST(TimelineTest, SkipLeavesTimeOutAndAppendPrefixes) {
  Timeline inner;
  inner.mark("clone");
  Timeline outer;
  std::this_thread::sleep_for(2ms);
  outer.skip();
  outer.mark("wait");
  EXPECT_LT(outer.steps()[0].took, 2ms);
  outer.append(inner, "spawn.");
  ASSERT_EQ(outer.steps().size(), 2u);
  EXPECT_EQ(outer.steps()[1].name, "spawn.clone");
  EXPECT_EQ(outer.steps()[1].took, inner.steps()[0].took);
}

TEST(TimelineTest, SummaryNamesEveryStepAndTheTotal) {
  Timeline t;
  EXPECT_EQ(t.summary(), "total 0.000 ms");
  t.mark("a");
  t.mark("b");
  std::string s = t.summary();
  EXPECT_NE(s.find("a "), std::string::npos);
  EXPECT_NE(s.find(", b "), std::string::npos);
  EXPECT_NE(s.find("; total "), std::string::npos);
}

TEST(TimelineStatsTest, SumsPerStepAndBucketsTheTotals) {
  TimelineStats stats;
  Timeline quick;
  quick.mark("clone");
  Timeline slow;
  slow.mark("clone");
  std::this_thread::sleep_for(3ms);
  slow.mark("envd");
  stats.add(quick);
  stats.add(slow);
  auto s = stats.snapshot();
  EXPECT_EQ(s.count, 2u);
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_EQ(s.steps[0].name, "clone");
  EXPECT_EQ(s.steps[0].count, 2u);
  EXPECT_EQ(s.steps[0].total, quick.steps()[0].took + slow.steps()[0].took);
  EXPECT_EQ(s.steps[1].name, "envd");
  EXPECT_EQ(s.steps[1].count, 1u);
  EXPECT_EQ(s.steps[1].max, slow.steps()[1].took);
  EXPECT_EQ(s.total, quick.total() + slow.total());
  // Cumulative buckets: the slow one (>= 3 ms) is not under 2 ms, both are under 1 s.
  EXPECT_LE(s.buckets[1], 1u);  // <= 2 ms
  EXPECT_EQ(s.buckets.back(), 2u);
  for (std::size_t i = 1; i < s.buckets.size(); ++i) EXPECT_GE(s.buckets[i], s.buckets[i - 1]);
}

}  // namespace
}  // namespace abx
