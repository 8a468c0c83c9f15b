// The output ring of abx-envd: its bound, its selection by time, and the pump that splits a
// child's pipes into lines.
#include "output_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace abx::envd {
namespace {

TEST(OutputLog, KeepsTheNewestLinesWithinItsBounds) {
  OutputLog log(/*max_bytes=*/100, /*max_lines=*/5);
  for (int i = 0; i < 8; ++i)
    log.add("command server", "stdout", "info", "line " + std::to_string(i));
  auto all = log.since(0, 100);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all.front().line, "line 3");
  EXPECT_EQ(all.back().line, "line 7");
  EXPECT_EQ(log.dropped(), 3u);
  log.add("start command", "stderr", "warn", std::string(90, 'x'));  // the byte bound
  all = log.since(0, 100);
  EXPECT_EQ(all.back().line.size(), 90u);
  EXPECT_LE(all.size(), 2u);
  EXPECT_EQ(log.since(0, 1).size(), 1u);  // limit
  EXPECT_TRUE(log.since(all.back().timestamp_ms + 1, 100).empty());
  auto j = log.to_json(0, 100);
  EXPECT_EQ(j.at("logs").as_array().back().at("source"), "start command");
}

TEST(OutputLog, CutsOverlongLines) {
  OutputLog log;
  log.add("s", "stdout", "info", std::string(OutputLog::kMaxLineBytes * 2 + 3, 'y'));
  auto all = log.since(0, 100);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].line.size(), 3u);
}

TEST(OutputLog, QueryParametersAreChecked) {
  OutputLog log;
  log.add("s", "stdout", "info", "a");
  log.add("s", "stdout", "info", "b");
  auto one = logs_query_json(log, {{"limit", "1"}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->at("logs").as_array().size(), 1u);
  EXPECT_FALSE(logs_query_json(log, {{"start", "-1"}}).ok());
  EXPECT_FALSE(logs_query_json(log, {{"limit", "x"}}).ok());
}

TEST(OutputPump, SplitsBothPipesIntoLinesAndKeepsATrailingPartialLine) {
  OutputLog log;
  int out[2], err[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  {
    OutputPump pump(log, "command server", out[0], err[0]);
    ASSERT_EQ(write(out[1], "one\ntw", 6), 6);
    ASSERT_EQ(write(err[1], "bad\r\n", 5), 5);
    ASSERT_EQ(write(out[1], "o\nthree", 7), 7);
    close(out[1]);
    close(err[1]);
  }  // finish(): both pipes at EOF
  std::vector<std::string> got;
  for (const auto& l : log.since(0, 100)) got.push_back(l.stream + ":" + l.line);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got,
            (std::vector<std::string>{"stderr:bad", "stdout:one", "stdout:three", "stdout:two"}));
}

// A grandchild holding the pipe open does not keep finish() waiting for ever.
TEST(OutputPump, FinishReturnsWhenAWriterLingers) {
  OutputLog log;
  int out[2], err[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  auto t0 = std::chrono::steady_clock::now();
  {
    OutputPump pump(log, "s", out[0], err[0]);
    ASSERT_EQ(write(out[1], "x\n", 2), 2);
    pump.finish();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(log.since(0, 10).size(), 1u);
  close(out[1]);
  close(err[1]);
}

}  // namespace
}  // namespace abx::envd
