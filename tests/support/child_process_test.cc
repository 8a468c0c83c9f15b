// ChildProcess never outlives its test: not when the test process is killed with SIGKILL (no
// destructor runs), and not what the child left in its process group when the object goes.
#include "abx/testing/child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "gtest/gtest.h"

namespace abx::testing {
namespace {

// A pidfd of `pid` (any process, not only a child): readable once it exited.
int pidfd_of(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Kills what survived a failed expectation, so a failure leaks nothing.
void kill_survivor(int pidfd) { ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0); }

// Whether the process behind `pidfd` exits within `timeout`.
bool exits_within(int pidfd, std::chrono::milliseconds timeout) {
  pollfd p{pidfd, POLLIN, 0};
  int rc;
  while ((rc = ::poll(&p, 1, static_cast<int>(timeout.count()))) < 0 && errno == EINTR) {
  }
  return rc == 1;
}

// The "test": a process that starts a ChildProcess, reports its pid and is then killed -9.
TEST(ChildProcess, DiesWhenItsTestIsKilled) {
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  pid_t test = ::fork();
  ASSERT_GE(test, 0);
  if (test == 0) {
    ChildProcess daemon({"/bin/sleep", "1000"});
    pid_t pid = daemon.started() ? daemon.pid() : 0;
    (void)!::write(report[1], &pid, sizeof pid);
    ::pause();
    _exit(0);
  }
  ::close(report[1]);
  pid_t daemon = 0;
  ASSERT_EQ(::read(report[0], &daemon, sizeof daemon), static_cast<ssize_t>(sizeof daemon));
  ::close(report[0]);
  ASSERT_GT(daemon, 0);
  int pidfd = pidfd_of(daemon);
  ASSERT_GE(pidfd, 0);
  EXPECT_FALSE(exits_within(pidfd, std::chrono::milliseconds(100)));  // it runs...
  ASSERT_EQ(::kill(test, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(test, &status, 0), test);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  // ...and is gone once its test is (10 s: the signal is immediate, the exit may be slow on a
  // loaded machine).
  if (!exits_within(pidfd, std::chrono::seconds(10))) {
    ADD_FAILURE() << "pid " << daemon << " survived its test";
    kill_survivor(pidfd);
  }
  ::close(pidfd);
}

// What the child started in its group goes with it, even after the child itself exited.
TEST(ChildProcess, DestructorKillsTheChildsProcessGroup) {
  int pidfd = -1;
  {
    ChildProcess sh({"/bin/sh", "-c", "sleep 1000 & echo \"left $!\"; exit 3"});
    ASSERT_TRUE(sh.started());
    auto line = sh.read_line_starting("left ");
    ASSERT_TRUE(line.has_value());
    pid_t left = std::stoi(line->substr(5));
    pidfd = pidfd_of(left);
    ASSERT_GE(pidfd, 0);
    EXPECT_EQ(sh.wait(), 3);
    EXPECT_FALSE(exits_within(pidfd, std::chrono::milliseconds(100)));  // outlived the shell
  }
  if (!exits_within(pidfd, std::chrono::seconds(10))) {
    ADD_FAILURE() << "what the child left in its process group survived it";
    kill_survivor(pidfd);
  }
  ::close(pidfd);
}

}  // namespace
}  // namespace abx::testing
