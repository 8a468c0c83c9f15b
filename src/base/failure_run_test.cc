#include "abx/base/failure_run.h"

#include <gtest/gtest.h>

#include <chrono>

namespace abx {
namespace {

using std::chrono::milliseconds;

TEST(FailureRun, WaitsDoubleUpToTheMaximumAndStartOverAfterASuccess) {
  const Logger log("test");
  FailureRun run(log, milliseconds(100), milliseconds(500));
  EXPECT_EQ(run.failed("first"), milliseconds(100));
  EXPECT_EQ(run.failed("second"), milliseconds(200));
  EXPECT_EQ(run.failed("third"), milliseconds(400));
  EXPECT_EQ(run.failed("fourth"), milliseconds(500));
  EXPECT_EQ(run.failed("fifth"), milliseconds(500));
  EXPECT_EQ(run.failures(), 5u);
  run.succeeded("working again");
  EXPECT_EQ(run.failures(), 0u);
  EXPECT_EQ(run.failed("a new run"), milliseconds(100));
  run.succeeded("working again");
  run.succeeded("no run: nothing logged, nothing changed");
  EXPECT_EQ(run.failures(), 0u);
}

}  // namespace
}  // namespace abx
