#include "abx/base/os.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "abx/base/fd.h"
#include "abx/base/try.h"

namespace abx::os {

std::string errno_name(int err) {
  if (const char* n = strerrorname_np(err)) return n;
  return "errno " + std::to_string(err);
}

ErrorCode code_for_errno(int err) {
  switch (err) {
    case EPERM:
    case EACCES:
    case EROFS:
      return ErrorCode::kPermissionDenied;
    case ENOENT:
    case ENOTDIR:
      return ErrorCode::kNotFound;
    case EEXIST:
      return ErrorCode::kAlreadyExists;
    case EAGAIN:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ErrorCode::kResourceExhausted;
    case ENOSPC:
    case EDQUOT:
      return ErrorCode::kInsufficientStorage;
    case EINVAL:
      return ErrorCode::kInvalidArgument;
    case ETIMEDOUT:
      return ErrorCode::kDeadlineExceeded;
    case ECONNREFUSED:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kInternal;
  }
}

Error errno_error(std::string_view what, int err) {
  return Error(code_for_errno(err), std::string(what) + ": " + errno_name(err));
}

int write_all_errno(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = retry_eintr([&] { return ::write(fd, data.data(), data.size()); });
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

Status write_all(int fd, std::string_view data, std::string_view what) {
  if (int err = write_all_errno(fd, data); err != 0) return errno_error(what, err);
  return {};
}

Result<std::string> read_all(int fd, std::size_t max, std::string_view what) {
  std::string out;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n < 0) return errno_error(what, errno);
    if (n == 0) return out;
    if (out.size() + static_cast<std::size_t>(n) > max) {
      return Error(ErrorCode::kPayloadTooLarge,
                   std::string(what) + ": more than " + std::to_string(max) + " bytes");
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// Keeps the first `limit` bytes of a stream.
void keep(std::string& to, bool& truncated, const char* p, std::size_t n, std::size_t limit) {
  const std::size_t room = to.size() < limit ? limit - to.size() : 0;
  if (n > room) truncated = true;
  to.append(p, std::min(n, room));
}

// The last few lines of a program's output, for an error message.
std::string tail(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  constexpr std::size_t kMax = 1000;
  if (text.size() > kMax) {
    text.remove_prefix(text.size() - kMax);
    if (auto nl = text.find('\n'); nl != std::string_view::npos) text.remove_prefix(nl + 1);
  }
  return std::string(text);
}

// posix_spawn with 0 from /dev/null (`devnull`), 1 to `out_fd` and 2 to `err_fd`, no other
// descriptor.
Result<pid_t> spawn_now(std::vector<char*>& argv, std::vector<char*>& envp, int devnull, int out_fd,
                        int err_fd, bool new_session, const std::string& what) {
  pid_t pid = -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, devnull, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (new_session) posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  const int rc = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return errno_error("spawn " + what, rc);
  return pid;
}

// fork, then o.started(pid) before the child execs (it waits on a pipe for the go); the same
// descriptors as spawn_now.
Result<pid_t> spawn_gated(std::vector<char*>& argv, std::vector<char*>& envp, int devnull,
                          int out_fd, int err_fd, const RunOptions& o, const std::string& what) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return errno_error("pipe2", errno);
  UniqueFd go_rd(p[0]), go_wr(p[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return errno_error("fork", errno);
  if (pid == 0) {
    if (o.new_session) ::setsid();
    ::dup2(devnull, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    // 0-2 and the go pipe only (the program gets no other descriptor of ours).
    if (::dup2(go_rd.get(), 3) != 3) ::_exit(126);
    ::close_range(4, ~0u, 0);
    char c;
    if (::read(3, &c, 1) != 1) ::_exit(126);  // the parent gave up
    ::close(3);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  go_rd.reset();
  if (Status s = o.started(pid); !s) {
    go_wr.reset();  // the child exits without running the program
    retry_eintr([&] { return ::waitpid(pid, nullptr, 0); });
    return s.error();
  }
  char c = 1;
  if (retry_eintr([&] { return ::write(go_wr.get(), &c, 1); }) != 1) {
    const int err = errno;
    ::kill(pid, SIGKILL);
    retry_eintr([&] { return ::waitpid(pid, nullptr, 0); });
    return errno_error("release " + what, err);
  }
  return pid;
}

// Reads the program's output into `r` until both pipes end (the program and whatever it left
// holding them) or `deadline`, when it is killed (r.timed_out).
void collect_output(UniqueFd& out_rd, UniqueFd& err_rd, pid_t pid, const RunOptions& o,
                    Clock::time_point deadline, Finished& r) {
  char buf[16 * 1024];
  while (out_rd || err_rd) {
    pollfd fds[2] = {{out_rd ? out_rd.get() : -1, POLLIN, 0},
                     {err_rd ? err_rd.get() : -1, POLLIN, 0}};
    int wait_ms = -1;
    if (o.timeout) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      wait_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
    }
    const int ready = retry_eintr([&] { return ::poll(fds, 2, wait_ms); });
    if (ready < 0) break;  // cannot happen with valid fds: wait for the program as before
    if (ready == 0) {
      if (Clock::now() < deadline) continue;
      // Its group with a session of its own: its helpers are in it too. What it leaves behind
      // is for the caller's error path.
      if (o.new_session) ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      r.timed_out = true;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      UniqueFd& fd = i == 0 ? out_rd : err_rd;
      const ssize_t n = retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
      if (n <= 0) {
        fd.reset();
        continue;
      }
      if (i == 0)
        keep(r.out, r.out_truncated, buf, static_cast<std::size_t>(n), o.capture_limit);
      else
        keep(r.err, r.err_truncated, buf, static_cast<std::size_t>(n), o.capture_limit);
    }
  }
}

}  // namespace

bool Finished::exited_ok() const {
  return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string Finished::describe() const {
  if (timed_out) return "did not finish in time, killed";
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

Result<Finished> run(const std::vector<std::string>& args, const RunOptions& o) {
  if (args.empty()) return invalid_argument("run: no program");
  const std::string& what = o.what.empty() ? args[0] : o.what;
  // Everything the child needs, before the spawn: after a fork it only calls what is
  // async-signal-safe.
  std::vector<std::string> arg_copy = args, env_copy = o.env;
  std::vector<char*> argv, envp;
  for (auto& a : arg_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);

  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return errno_error("pipe2", errno);
  UniqueFd out_rd(p[0]), out_wr(p[1]);
  UniqueFd err_rd, err_wr;
  if (!o.merge_output) {
    if (::pipe2(p, O_CLOEXEC) != 0) return errno_error("pipe2", errno);
    err_rd = UniqueFd(p[0]);
    err_wr = UniqueFd(p[1]);
  }
  const int child_err = o.merge_output ? out_wr.get() : err_wr.get();
  UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull) return errno_error("open /dev/null", errno);

  pid_t pid = -1;
  if (!o.started) {
    ABX_ASSIGN_OR_RETURN(
        pid, spawn_now(argv, envp, devnull.get(), out_wr.get(), child_err, o.new_session, what));
  } else {
    ABX_ASSIGN_OR_RETURN(pid,
                         spawn_gated(argv, envp, devnull.get(), out_wr.get(), child_err, o, what));
  }
  out_wr.reset();
  err_wr.reset();

  Finished r;
  const auto deadline = o.timeout ? Clock::now() + *o.timeout : Clock::time_point::max();
  collect_output(out_rd, err_rd, pid, o, deadline, r);
  if (retry_eintr([&] { return ::waitpid(pid, &r.status, 0); }) < 0)
    return errno_error("waitpid " + what, errno);
  // One that ended on its own just as the limit ran out is not reported as killed.
  r.timed_out = r.timed_out && WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL;
  return r;
}

Result<Finished> run_program(const std::vector<std::string>& args, const RunOptions& o) {
  ABX_ASSIGN_OR_RETURN(Finished r, run(args, o));
  if (r.exited_ok()) return r;
  const std::string& what = o.what.empty() ? args[0] : o.what;
  std::string msg = what + " failed (" + r.describe() + ")";
  if (std::string t = tail(o.merge_output ? r.out : r.err); !t.empty()) msg += ": " + t;
  return Error(r.timed_out ? ErrorCode::kDeadlineExceeded : ErrorCode::kInternal, std::move(msg));
}

Result<std::pair<UniqueFd, UniqueFd>> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return errno_error("pipe2", errno);
  return std::pair{UniqueFd(p[0]), UniqueFd(p[1])};
}

Result<std::pair<UniqueFd, UniqueFd>> make_socketpair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return errno_error("socketpair", errno);
  return std::pair{UniqueFd(sv[0]), UniqueFd(sv[1])};
}

}  // namespace abx::os
