#include "supervisor.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>

#include "abx/base/log.h"
#include "envd_log.h"
#include "output_log.h"

extern char** environ;

namespace abx::envd {

Supervisor::Supervisor(Reaper& reaper, std::string name, std::string cmd, User user, bool restart)
    : Supervisor(reaper, std::move(name), {"/bin/sh", "-c", cmd}, {}, std::move(user), restart) {}

Supervisor::Supervisor(Reaper& reaper, std::string name, std::vector<std::string> argv,
                       std::vector<std::string> env, User user, bool restart,
                       std::vector<std::string> companion, bool held,
                       std::optional<Started> started)
    : reaper_(reaper),
      name_(std::move(name)),
      argv_(std::move(argv)),
      env_(std::move(env)),
      companion_(std::move(companion)),
      started_(started),
      user_(std::move(user)),
      restart_(restart),
      held_(held) {
  for (const auto& a : argv_) cmd_ += (cmd_.empty() ? "" : " ") + a;
  thread_ = std::thread([this] { run(); });
}

Supervisor::~Supervisor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  signal(SIGTERM);
  {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(2), [this] { return pid_ < 0; })) {
      if (pid_ > 0) ::kill(-pid_, SIGKILL);
    }
  }
  thread_.join();
}

void Supervisor::release() {
  {
    std::lock_guard lock(mu_);
    held_ = false;
  }
  cv_.notify_all();
}

bool Supervisor::wait_for_release() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return !held_ || stop_; });
  return !stop_;
}

void Supervisor::signal(int sig) {
  std::lock_guard lock(mu_);
  if (pid_ > 0) ::kill(-pid_, sig);
}

void Supervisor::restart(std::vector<std::string> env) {
  {
    std::lock_guard lock(mu_);
    env_ = std::move(env);
    restart_now_ = true;
  }
  cv_.notify_all();
}

void Supervisor::event(std::string_view level, const std::string& message) {
  OutputLog::instance().add(name_, "event", level, message);
  if (level == "warn")
    log().warn(message);
  else
    log().info(message);
}

Supervisor::Companion Supervisor::adopt_companion(pid_t pid) {
  auto alive = std::make_shared<std::atomic<bool>>(true);
  reaper_.adopt(pid, [alive](int) { *alive = false; });
  event("info",
        "the companion of " + name_ + " started beside envd (pid " + std::to_string(pid) + ")");
  return {pid, std::move(alive)};
}

Supervisor::Companion Supervisor::start_companion(int err_fd, int* child_end) {
  *child_end = -1;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    event("warn", "cannot connect a companion to " + name_ +
                      ": socketpair: " + std::strerror(errno) + "; it starts without one");
    return {};
  }
  // Cleared by the reaper, which may run after this Supervisor is gone: shared, not a member.
  auto alive = std::make_shared<std::atomic<bool>>(true);
  // What it prints goes to the child's stderr, as a worker abx-server starts itself does.
  pid_t pid = spawn(companion_, {}, err_fd, err_fd, pair[1], [alive](int) { *alive = false; });
  ::close(pair[1]);
  if (pid < 0) {
    event("warn", "cannot start the companion of " + name_ + " (" + companion_.front() +
                      "); it starts without one");
    ::close(pair[0]);
    return {};
  }
  *child_end = pair[0];
  return {pid, std::move(alive)};
}

pid_t Supervisor::spawn(std::vector<std::string> argv_in, std::vector<std::string> env, int out_fd,
                        int err_fd, int fd3, Reaper::OnExit on_exit) {
  std::string home_env = "HOME=" + user_.home;
  std::string user_env = "USER=" + user_.name;
  // One entry per name (getenv() returns the first of duplicates): the user's HOME and USER,
  // then `env`, then envd's own environment for the rest.
  std::vector<char*> envp{home_env.data(), user_env.data()};
  for (auto& e : env) envp.push_back(e.data());
  auto overridden = [&](std::string_view entry) {
    std::string_view name = entry.substr(0, entry.find('=') + 1);  // "NAME="
    for (const char* have : envp) {
      if (std::string_view(have).starts_with(name)) return true;
    }
    return false;
  };
  for (char** e = environ; e && *e; ++e) {
    if (!overridden(*e)) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  std::string cwd = user_.home;
  struct stat st {};
  if (::stat(cwd.c_str(), &st) != 0) cwd = "/";
  std::vector<char*> argv;
  for (auto& a : argv_in) argv.push_back(a.data());
  argv.push_back(nullptr);
  // What the child needs, as plain values: it runs between clone_vfork and exec (process.h).
  struct Child {
    bool switch_user;
    uid_t uid;
    gid_t gid;
    int out_fd, err_fd, fd3;
    const char* cwd;
    char* const* argv;
    char* const* envp;
  } child{::geteuid() == 0 && user_.uid != 0,
          user_.uid,
          user_.gid,
          out_fd,
          err_fd,
          fd3,
          cwd.c_str(),
          argv.data(),
          envp.data()};
  auto child_main = +[](void* p) -> int {
    const Child& c = *static_cast<const Child*>(p);
    reset_signals_in_child();
    ::setsid();
    // stdout and stderr: the pipes to the output log (dup2 clears their close-on-exec).
    if (c.out_fd >= 0) ::dup2(c.out_fd, STDOUT_FILENO);
    if (c.err_fd >= 0) ::dup2(c.err_fd, STDERR_FILENO);
    if (!clean_fd_table(c.fd3)) ::_exit(126);  // the server starts with stdio only...
    // ...and its companion's socket (dup2 clears close-on-exec; for fd 3 itself, fcntl does).
    if (c.fd3 == 3 ? ::fcntl(3, F_SETFD, 0) != 0 : c.fd3 >= 0 && ::dup2(c.fd3, 3) != 3)
      ::_exit(126);
    if (c.switch_user && set_ids_in_child(c.uid, c.gid) != 0) ::_exit(126);
    if (::chdir(c.cwd) < 0) ::_exit(126);
    ::execvpe(c.argv[0], c.argv, c.envp);  // PATH: envd's, i.e. the sandbox's
    ::_exit(127);
  };
  return reaper_.spawn([&]() -> pid_t { return clone_vfork(child_main, &child); },
                       std::move(on_exit));
}

// One function of ~90 lines on purpose: one loop iteration is one run of the program (pipes,
// spawn, output, wait) and the restart decision, which share the backoff and start time.
void Supervisor::run() {
  auto backoff = std::chrono::milliseconds(100);
  for (;;) {
    std::vector<std::string> env;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      exited_ = false;
      restart_now_ = false;
      env = env_;
    }
    auto started = std::chrono::steady_clock::now();
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    int child_end = -1;
    Companion companion;
    if (started_) {
      // The first run's companion is running already: its output pipe is this run's stderr.
      err[0] = started_->output_read_fd;
      err[1] = started_->output_write_fd;
      child_end = started_->socket_fd;
      companion = adopt_companion(started_->pid);
      started_.reset();
    }
    if (::pipe2(out, O_CLOEXEC) != 0 || (err[0] < 0 && ::pipe2(err, O_CLOEXEC) != 0)) {
      log().warn("cannot make output pipes for " + name_ + ": its output is not kept");
    }
    // The companion first: its start is the longer one.
    if (!companion.alive && !companion_.empty()) companion = start_companion(err[1], &child_end);
    if (!wait_for_release()) {  // destroyed while held: nothing was started but the companion
      for (int fd : {out[0], out[1], err[0], err[1], child_end}) {
        if (fd >= 0) ::close(fd);
      }
      companion.kill();
      return;
    }
    pid_t pid = spawn(argv_, std::move(env), out[1], err[1], child_end, [this](int status) {
      std::lock_guard lock(mu_);
      exited_ = true;
      status_ = status;
      cv_.notify_all();
    });
    for (int fd : {out[1], err[1], child_end}) {
      if (fd >= 0) ::close(fd);
    }
    std::optional<OutputPump> pump;
    if (out[0] >= 0 && err[0] >= 0) {
      pump.emplace(OutputLog::instance(), name_, out[0], err[0]);
    } else {
      for (int fd : {out[0], err[0]}) {
        if (fd >= 0) ::close(fd);
      }
    }
    std::unique_lock lock(mu_);
    if (pid < 0) {
      event("warn", "cannot start " + name_ + ": " + cmd_);
      exited_ = true;
    } else {
      pid_ = pid;
      event("info", "started " + name_ + " (pid " + std::to_string(pid) + "): " + cmd_);
    }
    cv_.wait(lock, [this] { return exited_ || restart_now_; });
    if (!exited_) {  // restart(): this child goes first
      ::kill(-pid, SIGTERM);
      if (!cv_.wait_for(lock, std::chrono::seconds(2), [this] { return exited_; })) {
        ::kill(-pid, SIGKILL);
      }
      cv_.wait(lock, [this] { return exited_; });
    }
    pid_ = -1;
    cv_.notify_all();
    int status = status_;
    lock.unlock();
    companion.kill();  // gone already, usually: the child's end of the socket closed
    pump.reset();      // its last lines before the exit event
    lock.lock();
    if (pid >= 0) {
      event(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "info" : "warn",
            name_ + " exited with " +
                (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                   : "signal " + std::to_string(WTERMSIG(status))));
    }
    if (!restart_ || stop_) return;
    if (restart_now_) {
      event("info", "restarting " + name_ + " now, with a new environment");
      backoff = std::chrono::milliseconds(100);
      continue;  // unlocks; the next run takes the new env_
    }
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(60)) {
      backoff = std::chrono::milliseconds(100);
    }
    event("warn", "restarting " + name_ + " in " + std::to_string(backoff.count()) + " ms");
    cv_.wait_for(lock, backoff, [this] { return stop_ || restart_now_; });
    if (stop_) return;
    lock.unlock();
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(30));
  }
}

}  // namespace abx::envd
