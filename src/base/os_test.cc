#include "abx/base/os.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "abx/testing/pipe.h"

namespace abx::os {
namespace {

using testing::Pipe;

TEST(Os, WriteAllWritesMoreThanAPipeHoldsWhileTheReaderDrains) {
  Pipe p;
  std::string data(1 << 20, 'x');
  for (std::size_t i = 0; i < data.size(); i += 4093) data[i] = static_cast<char>('a' + i % 26);
  Result<std::string> got = std::string();
  std::thread reader([&] { got = read_all(p.r, data.size(), "pipe"); });
  EXPECT_TRUE(write_all(p.w, data, "pipe").ok());
  p.close_w();
  reader.join();
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(*got, data);
}

TEST(Os, WriteAllToAPipeWithoutReaderNamesTheErrno) {
  Pipe p;
  p.close_r();
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ign, &old), 0);
  Status st = write_all(p.w, "hello", "the pipe");
  ::sigaction(SIGPIPE, &old, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message(), "the pipe: EPIPE");
  EXPECT_EQ(st.error().code(), ErrorCode::kInternal);
}

TEST(Os, ReadAllRefusesMoreThanItsLimit) {
  Pipe p;
  ASSERT_TRUE(write_all(p.w, std::string(100, 'y')).ok());
  p.close_w();
  auto got = read_all(p.r, 99, "the pipe");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code(), ErrorCode::kPayloadTooLarge);
  EXPECT_NE(got.error().message().find("the pipe: more than 99 bytes"), std::string::npos);
}

std::atomic<int> signals_seen{0};
void count_signal(int) { signals_seen.fetch_add(1); }

// A signal without SA_RESTART interrupts a blocking read: retry_eintr reads on and returns the
// bytes that came after it.
TEST(Os, RetryEintrGoesOnAfterASignalInterruptsTheCall) {
  Pipe p;
  struct sigaction sa {
  }, old{};
  sa.sa_handler = count_signal;  // no SA_RESTART: read(2) fails with EINTR
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  pthread_t reader_thread = ::pthread_self();
  std::thread writer([&] {
    // Signals the reader until the handler ran, then writes.
    while (signals_seen.load() == 0) {
      ::pthread_kill(reader_thread, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(write_all(p.w, "z").ok());
  });
  char c = 0;
  ssize_t n = retry_eintr([&] { return ::read(p.r, &c, 1); });
  writer.join();
  ::sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(c, 'z');
  EXPECT_GE(signals_seen.load(), 1);
}

TEST(Os, ErrnoErrorsCarryTheCodeACallerActsOn) {
  EXPECT_EQ(errno_error("open /x", ENOENT).code(), ErrorCode::kNotFound);
  EXPECT_EQ(errno_error("open /x/y", ENOTDIR).code(), ErrorCode::kNotFound);
  EXPECT_EQ(errno_error("open /x", EACCES).code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(errno_error("write /x", EROFS).code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(errno_error("mkdir /x", EEXIST).code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(errno_error("write /x", ENOSPC).code(), ErrorCode::kInsufficientStorage);
  EXPECT_EQ(errno_error("write /x", EDQUOT).code(), ErrorCode::kInsufficientStorage);
  EXPECT_EQ(errno_error("fork", EAGAIN).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(errno_error("connect", ECONNREFUSED).code(), ErrorCode::kUnavailable);
  EXPECT_EQ(errno_error("ioctl", ENOTTY).code(), ErrorCode::kInternal);
  EXPECT_EQ(errno_error("open /x", ENOENT).message(), "open /x: ENOENT");
  EXPECT_EQ(errno_name(99999), "errno 99999");
}

TEST(Os, RetryEintrCallsAgainOnlyForEintr) {
  int calls = 0;
  auto r = retry_eintr([&] {
    ++calls;
    errno = calls < 3 ? EINTR : 0;
    return calls < 3 ? -1 : 7;
  });
  EXPECT_EQ(r, 7);
  EXPECT_EQ(calls, 3);
  calls = 0;
  auto failed = retry_eintr([&] {
    ++calls;
    errno = EBADF;
    return -1;
  });
  EXPECT_EQ(failed, -1);
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(calls, 1);
}

TEST(Os, WriteAllErrnoReportsWouldBlockAndWritesNothingForNothing) {
  Pipe p;
  ASSERT_EQ(::fcntl(p.w, F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(write_all_errno(p.w, ""), 0);
  // More than the pipe holds: a part goes in (a short write), then EAGAIN, never a spin.
  EXPECT_EQ(write_all_errno(p.w, std::string(4 << 20, 'q')), EAGAIN);
  Status st = write_all(p.w, "more", "full pipe");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(st.error().message(), "full pipe: EAGAIN");
}

TEST(Os, CodeForErrnoIsOneTable) {
  EXPECT_EQ(code_for_errno(EPERM), ErrorCode::kPermissionDenied);
  EXPECT_EQ(code_for_errno(ENOMEM), ErrorCode::kResourceExhausted);
  EXPECT_EQ(code_for_errno(EMFILE), ErrorCode::kResourceExhausted);
  EXPECT_EQ(code_for_errno(ENFILE), ErrorCode::kResourceExhausted);
  EXPECT_EQ(code_for_errno(EINVAL), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_for_errno(ETIMEDOUT), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(code_for_errno(EIO), ErrorCode::kInternal);
  EXPECT_EQ(code_for_errno(0), ErrorCode::kInternal);
}

// A clock that only moves when poll_until sleeps.
struct FakeClock {
  using time_point = std::chrono::steady_clock::time_point;
  time_point t{};
  std::vector<std::chrono::nanoseconds> sleeps;
  auto now() {
    return [this] { return t; };
  }
  auto sleep() {
    return [this](std::chrono::nanoseconds d) {
      sleeps.push_back(d);
      t += d;
    };
  }
};

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(Os, PollUntilBacksOffUpToItsMaximumAndStopsWhenDone) {
  FakeClock c;
  int calls = 0;
  bool ok = poll_until(
      c.t + std::chrono::seconds(10), Backoff{microseconds(100), microseconds(1000)},
      [&] { return ++calls == 7; }, c.now(), c.sleep());
  EXPECT_TRUE(ok);
  EXPECT_EQ(calls, 7);
  std::vector<std::chrono::nanoseconds> want = {microseconds(100),  microseconds(200),
                                                microseconds(400),  microseconds(800),
                                                microseconds(1000), microseconds(1000)};
  EXPECT_EQ(c.sleeps, want);
}

TEST(Os, PollUntilChecksOnceMoreAtTheDeadlineNeverSleepingPastIt) {
  FakeClock c;
  const auto deadline = c.t + milliseconds(10);
  int calls = 0;
  bool ok = poll_until(
      deadline, Backoff{milliseconds(4), milliseconds(4)},
      [&] {
        ++calls;
        return false;
      },
      c.now(), c.sleep());
  EXPECT_FALSE(ok);
  EXPECT_EQ(c.t, deadline);  // 4 + 4 + 2 ms: the last sleep cut to the deadline
  EXPECT_EQ(calls, 4);       // at 0, 4, 8 and 10 ms
  // Done already: one call, no sleep, even with the deadline past.
  FakeClock d;
  EXPECT_TRUE(poll_until(
      d.t - milliseconds(1), Backoff{milliseconds(1), milliseconds(1)}, [] { return true; },
      d.now(), d.sleep()));
  EXPECT_TRUE(d.sleeps.empty());
}

TEST(Os, PollUntilOnTheRealClockGivesUpAfterItsDeadline) {
  const auto start = std::chrono::steady_clock::now();
  bool ok = poll_until(start + milliseconds(20), Backoff{milliseconds(1), milliseconds(5)},
                       [] { return false; });
  EXPECT_FALSE(ok);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(20));
}

const std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

TEST(Os, RunReportsTheExitStatusAndBothStreams) {
  auto r = run(sh("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(WIFEXITED(r->status));
  EXPECT_EQ(WEXITSTATUS(r->status), 3);
  EXPECT_FALSE(r->exited_ok());
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->describe(), "exit 3");
}

TEST(Os, RunProgramNamesTheProgramAndItsStderrTail) {
  RunOptions o;
  o.what = "the tool";
  auto r = run_program(sh("echo noise; echo first >&2; echo 'it broke' >&2; exit 1"), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInternal);
  EXPECT_EQ(r.error().message(), "the tool failed (exit 1): first\nit broke");
  auto fine = run_program(sh("printf hi"));
  ASSERT_TRUE(fine.ok()) << fine.error().message();
  EXPECT_EQ(fine->out, "hi");
}

TEST(Os, RunKeepsExactlyTheCaptureLimitAndMergesWhenAsked) {
  RunOptions o;
  o.capture_limit = 1000;
  auto r = run(sh("head -c 100000 /dev/zero; head -c 999 /dev/zero >&2"), o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->exited_ok());  // the rest was read and dropped: the writer never blocked
  EXPECT_EQ(r->out.size(), 1000u);
  EXPECT_TRUE(r->out_truncated);
  EXPECT_EQ(r->err.size(), 999u);
  EXPECT_FALSE(r->err_truncated);
  o.merge_output = true;
  auto m = run(sh("echo a; echo b >&2"), o);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->out, "a\nb\n");
  EXPECT_EQ(m->err, "");
}

TEST(Os, RunGivesTheProgramOnlyItsEnvironmentAndNoDescriptorOfOurs) {
  Pipe p;  // O_CLOEXEC; a descriptor without it would still not reach the program
  int leaky = ::dup(p.w);
  ASSERT_GE(leaky, 0);
  RunOptions o;
  o.env = {"ONLY=this"};
  auto r =
      run(sh("env | grep -v '^PWD=' | grep -v '^SHLVL=' | grep -v '^_='; ls /proc/self/fd"), o);
  ::close(leaky);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "ONLY=this\n0\n1\n2\n3\n");  // 3: ls's own directory
}

TEST(Os, RunKillsAProgramPastItsTimeout) {
  RunOptions o;
  o.timeout = milliseconds(100);
  o.new_session = true;
  const auto start = std::chrono::steady_clock::now();
  auto r = run_program(sh("sleep 30 & sleep 30"), o);  // its child holds the pipe too
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(r.error().message(), "/bin/sh failed (did not finish in time, killed)");
}

TEST(Os, RunOfAMissingProgramIsNotFound) {
  auto r = run({"/nonexistent/abx-tool", "--help"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(r.error().message(), "spawn /nonexistent/abx-tool: ENOENT");
}

TEST(Os, RunWithStartedHoldsTheProgramUntilTheHookReturns) {
  RunOptions o;
  pid_t seen = -1;
  o.started = [&](pid_t pid) {
    seen = pid;
    return Status{};
  };
  auto r = run(sh("echo $$"), o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->out, std::to_string(seen) + "\n");
  o.started = [](pid_t) -> Status { return unavailable("not now"); };
  auto refused = run(sh("echo never"), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message(), "not now");
}

}  // namespace
}  // namespace abx::os
