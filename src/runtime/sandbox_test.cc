#include "abx/runtime/sandbox.h"

#include "gtest/gtest.h"
#include "test_util.h"

namespace abx::runtime {
namespace {

using testing::TempDir;

TEST(SandboxTest, RunsProbeAndReportsHostname) {
  TempDir tmp;
  auto c = testing::probe_config(tmp.path(), {"hostname"});
  std::string id = c.id;
  auto r = testing::run_sandbox(std::move(c));
  EXPECT_TRUE(r.exited_ok()) << r.out;
  EXPECT_EQ(r.out, id + "\n");
}

}  // namespace
}  // namespace abx::runtime
