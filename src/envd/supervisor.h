// Init duties of abx-envd beyond the API: running the template's start command once and
// keeping the command server alive (restarting it with exponential backoff when it exits).
// Each child's stdout and stderr are pipes read into OutputLog::instance() (output_log.h), with
// the supervisor's own events (started, exited with status N, restarting in M ms), so a server
// that crashes at start shows why in `abx logs`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "process.h"

namespace abx::envd {

class Supervisor {
 public:
  // `cmd` runs as `/bin/sh -c cmd` as `user`. `restart`: run again after each exit, waiting
  // 100 ms doubling up to 30 s (reset after a run that lasted 60 s).
  Supervisor(Reaper& reaper, std::string name, std::string cmd, User user, bool restart);
  // Runs `argv` directly (argv[0] searched in $PATH if it has no '/'; no shell needed), with `env`
  // ("K=V") added to envd's environment.
  Supervisor(Reaper& reaper, std::string name, std::vector<std::string> argv,
             std::vector<std::string> env, User user, bool restart);
  ~Supervisor();  // stops restarting, SIGTERMs the child (SIGKILL after 2 s) and joins
  void signal(int sig);
  // Replaces `env` and restarts the child at once to take it: SIGTERM to its process group,
  // SIGKILL if it is still there after 2 s, then a new run without backoff (a child waiting out
  // its backoff starts now). For a supervisor made with `restart`; returns before the new run.
  void restart(std::vector<std::string> env);

 private:
  void run();
  pid_t spawn(std::vector<std::string> env, int out_fd, int err_fd);
  void event(std::string_view level, const std::string& message);
  Reaper& reaper_;
  std::string name_, cmd_;               // cmd_: argv joined, for the log
  std::vector<std::string> argv_, env_;  // env_: guarded by mu_
  User user_;
  bool restart_;
  std::mutex mu_;
  std::condition_variable cv_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;  // of the last exit
  bool stop_ = false;
  bool restart_now_ = false;  // restart() asked for a new run with env_
  std::thread thread_;
};

}  // namespace abx::envd
