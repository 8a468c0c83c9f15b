// Init duties of abx-envd beyond the API: running the template's start command once and
// keeping the command server alive (restarting it with exponential backoff when it exits).
// Each child's stdout and stderr are pipes read into OutputLog::instance() (output_log.h), with
// the supervisor's own events (started, exited with status N, restarting in M ms), so a server
// that crashes at start shows why in `abx logs`.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
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
  //
  // `companion` (an argv; empty: none) starts just before each run of the child, connected to
  // it by a socketpair whose ends are descriptor 3 of both: abx-server's Python worker, whose
  // interpreter then starts while abx-server does (issue 37: create -> first call). It runs as
  // the same user in the same folder with envd's environment but not `env` (which carries the
  // command server's token), writes into the child's log (stdout and stderr) and is killed
  // when the child exits. A child whose companion could not start runs without descriptor 3.
  // `held`: the first run starts its companion at once but the child only at release() (envd
  // makes the command server's supervisor before its own API, so that the interpreter, the
  // slowest piece of a create, starts first, and releases it once the API listens).
  //
  // `started`: the first run's companion is running already (abxd's init started it beside
  // envd): its pid, the child's end of their socketpair and both ends of the pipe it writes its
  // output into, all taken over (the pipe becomes the first run's stderr pipe).
  struct Started {
    pid_t pid = -1;
    int socket_fd = -1;
    int output_read_fd = -1;
    int output_write_fd = -1;
  };
  Supervisor(Reaper& reaper, std::string name, std::vector<std::string> argv,
             std::vector<std::string> env, User user, bool restart,
             std::vector<std::string> companion = {}, bool held = false,
             std::optional<Started> started = std::nullopt);
  ~Supervisor();  // stops restarting, SIGTERMs the child (SIGKILL after 2 s) and joins
  void signal(int sig);
  // Lets a `held` supervisor start its child.
  void release();
  // Replaces `env` and restarts the child at once to take it: SIGTERM to its process group,
  // SIGKILL if it is still there after 2 s, then a new run without backoff (a child waiting out
  // its backoff starts now). For a supervisor made with `restart`; returns before the new run.
  void restart(std::vector<std::string> env);

 private:
  void run();
  // Until release() (true) or destruction (false); at once when not held.
  bool wait_for_release();
  // Starts `argv` with `env`; `fd3` (-1: none) becomes its descriptor 3. `on_exit` as Reaper's.
  pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env, int out_fd, int err_fd,
              int fd3, Reaper::OnExit on_exit);
  // The companion of a run: its pid and whether the reaper has collected it yet.
  struct Companion {
    pid_t pid = -1;
    std::shared_ptr<std::atomic<bool>> alive;  // null: none started
    // SIGKILL unless none started or the reaper collected it. (Its pid is not reused between
    // the reaper's wait and the flag: pids are handed out in sequence, and the namespace would
    // have to wrap around in between.)
    void kill() const {
      if (alive && *alive) ::kill(pid, SIGKILL);
    }
  };
  // Starts the companion of the next run; the child's end of their socketpair goes to
  // `child_end` (-1 when it could not start, and then the companion is empty).
  Companion start_companion(int err_fd, int* child_end);
  // The companion `started_` names, collected by the reaper like one of ours.
  Companion adopt_companion(pid_t pid);
  void event(std::string_view level, const std::string& message);
  Reaper& reaper_;
  std::string name_, cmd_;               // cmd_: argv joined, for the log
  std::vector<std::string> argv_, env_;  // env_: guarded by mu_
  std::vector<std::string> companion_;
  std::optional<Started> started_;  // until the first run takes it
  User user_;
  bool restart_;
  std::mutex mu_;
  std::condition_variable cv_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;  // of the last exit
  bool stop_ = false;
  bool restart_now_ = false;  // restart() asked for a new run with env_
  bool held_ = false;         // guarded by mu_
  std::thread thread_;
};

}  // namespace abx::envd
