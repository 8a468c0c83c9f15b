// Test helper: runs one of our binaries as a child process, reads its "listening on" line, and
// signals/waits for it. Test code only; production code keeps process control in its modules.
//
// A child never outlives its test: it leads a process group of its own, which the destructor
// kills (the daemon and whatever it left in its group), and it gets SIGTERM when the test process
// dies without running destructors (abort, a crash, kill -9, ctest's timeout kill), through
// PR_SET_PDEATHSIG. That signal follows the *thread* that forked: construct a ChildProcess on a
// thread that lives as long as the test (the main thread), not on a short-lived helper thread.
// tests/support/child_process_test.cc proves both.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace abx::testing {

class ChildProcess {
 public:
  // Starts argv with extra environment entries ("K=V"); stdout is captured, stderr inherited.
  // The child is tied to the test's life (above): SIGTERM when the test process dies, not
  // SIGKILL, so an abxd still shuts down in order and stops its sandboxes.
  ChildProcess(std::vector<std::string> argv, std::vector<std::string> env_extra = {}) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    // Everything the child needs is built before fork: between fork and exec only
    // async-signal-safe calls (the test may have threads).
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> env_store;
    for (char** e = environ; *e != nullptr; ++e) env_store.emplace_back(*e);
    for (auto& e : env_extra) env_store.push_back(e);
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    // A failed exec is reported as posix_spawn did (started() is false): the child writes its
    // errno to a close-on-exec pipe that a successful exec closes.
    int err[2];
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(fds[0]);
      close(fds[1]);
      return;
    }
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // The parent may have died before prctl: then getppid() is no longer it.
      if (setpgid(0, 0) == 0 && prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() == parent &&
          dup2(fds[1], 1) >= 0)
        execve(args[0], args.data(), envp.data());
      int e = errno;
      (void)!write(err[1], &e, sizeof e);
      _exit(127);
    }
    close(err[1]);
    close(fds[1]);
    out_ = fds[0];
    int e = 0;
    ssize_t n;
    while ((n = read(err[0], &e, sizeof e)) < 0 && errno == EINTR) {
    }
    close(err[0]);
    if (pid_ > 0 && n > 0) {
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // Kills the child's process group (what it left there too, even after it exited) and reaps
  // the child. wait() leaves the child unreaped, so its pid still names our group here and
  // cannot have been reused.
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      if (!exit_status_) kill(pid_, SIGKILL);  // in case it moved to a group of its own
      while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    if (out_ >= 0) close(out_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }  // also its process group's id

  // Reads stdout until a line starting with `prefix` arrives (or EOF / timeout).
  std::optional<std::string> read_line_starting(
      const std::string& prefix, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (std::size_t nl; (nl = buf_.find('\n')) != std::string::npos;) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (line.rfind(prefix, 0) == 0) return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char tmp[4096];
      ssize_t n = read(out_, tmp, sizeof tmp);
      if (n <= 0) return std::nullopt;
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
  }

  // The port of a "listening on HOST:PORT" line.
  std::optional<std::uint16_t> wait_listening() {
    auto line = read_line_starting("listening on ");
    if (!line) return std::nullopt;
    return static_cast<std::uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
  }

  // Everything remaining on stdout until EOF.
  std::string read_all() {
    std::string out = buf_;
    buf_.clear();
    char tmp[4096];
    for (ssize_t n; (n = read(out_, tmp, sizeof tmp)) > 0;)
      out.append(tmp, static_cast<std::size_t>(n));
    return out;
  }

  void signal(int sig) { kill(pid_, sig); }

  // Waits for exit; returns the exit code, or 128+signal, or -1 on timeout. The child stays
  // unreaped (a zombie) until the destructor, which kills its group first.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (exit_status_) return *exit_status_;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      siginfo_t si{};
      if (waitid(P_PID, static_cast<id_t>(pid_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          si.si_pid == pid_) {
        exit_status_ = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
        return *exit_status_;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      usleep(10'000);
    }
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
  std::optional<int> exit_status_;
};

}  // namespace abx::testing
