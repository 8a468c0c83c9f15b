#include "abx/base/os.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace abx::os
