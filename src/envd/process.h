// process.Process: starting processes (pipes or a fresh pty), fanning their output out to
// Connect streams with back-pressure, input, signals, and reaping.
//
// Each process has one pump thread that polls its output fds and turns reads into `data`
// events for every subscribed stream (the Start stream, plus any Connect streams). When a
// subscriber's bounded queue is full the pump stops reading, so a flooding process blocks on
// its own pipe instead of growing envd's memory. Exit statuses come from the Reaper (a
// waitpid(-1) loop, which as PID 1 also reaps orphans).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/http/server.h"
#include "users.h"

namespace abx::envd {

// Reaps every child (waitpid(-1)) and routes the statuses of registered pids to callbacks.
//
// waitpid(-1) is process-wide, so there is one Reaper per process: instance(). It is never
// destroyed (its thread may be blocked in waitpid when the process exits).
class Reaper {
 public:
  using OnExit = std::function<void(int wait_status)>;
  static Reaper& instance();
  // Runs `spawn` (which starts a child and returns its pid, or -1) with registration atomic with
  // respect to reaping: the child's status cannot be collected before `on_exit` is in place.
  pid_t spawn(const std::function<pid_t()>& spawn, OnExit on_exit);
  // Registers `on_exit` for `pid`, a child envd did not start (abxd's init started it just
  // before envd's exec). If the reaper collected it already, as an orphan, `on_exit` runs now.
  void adopt(pid_t pid, OnExit on_exit);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<pid_t, OnExit> watched_;
  // The last orphans collected, with their status, for adopt() (bounded: the oldest go).
  std::deque<std::pair<pid_t, int>> orphans_;
  std::thread thread_;
  Reaper();
};

struct ProcessConfig {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::optional<std::string> cwd;
};

struct StartSpec {
  ProcessConfig config;
  std::optional<std::pair<std::uint16_t, std::uint16_t>> pty;  // cols, rows
  std::optional<std::string> tag;
  bool stdin_open = true;
  User user;
  std::chrono::milliseconds timeout{0};  // process lifetime; 0 = none
  std::string default_cwd;  // without config.cwd: this directory if it is one, else the home
};

// A stream subscribed to a process's events.
struct Subscriber {
  std::shared_ptr<http::StreamWriter> writer;
  std::chrono::milliseconds keepalive{90'000};
  std::chrono::steady_clock::time_point last_sent = std::chrono::steady_clock::now();
};

class Process;

class ProcessManager {
 public:
  explicit ProcessManager(Reaper& reaper) : reaper_(reaper) {}
  ~ProcessManager();  // SIGKILLs what is still running and waits for the pumps to finish

  // Starts a process. Errors: invalid_argument (empty cmd, bad cwd), internal (clone/exec
  // failure, with the step and errno), permission_denied (user switch impossible).
  Result<std::shared_ptr<Process>> start(const StartSpec& spec);
  // Looks a process up by pid or tag. Errors: not_found.
  Result<std::shared_ptr<Process>> find(std::optional<std::uint32_t> pid,
                                        std::optional<std::string> tag);
  std::vector<std::shared_ptr<Process>> list();
  // Signals every process group we started (SIGTERM forwarding).
  void signal_all(int sig);

 private:
  friend class Process;
  void forget(pid_t pid);
  Reaper& reaper_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<pid_t, std::shared_ptr<Process>> procs_;
};

class Process : public std::enable_shared_from_this<Process> {
 public:
  ~Process();
  pid_t pid() const { return pid_; }
  const ProcessConfig& config() const { return config_; }
  const std::optional<std::string>& tag() const { return tag_; }

  // Adds a stream: writes the `start` event to it first, then it receives every later event.
  // Returns false if the process already ended (nothing more will come).
  bool subscribe(Subscriber sub);
  // Starts the pump thread (after the first subscriber is in, so no output is missed).
  void run_pump();

  Status send_stdin(std::string_view data);
  Status send_pty(std::string_view data);
  Status close_stdin();
  Status signal(int sig);
  Status resize(std::uint16_t cols, std::uint16_t rows);

 private:
  friend class ProcessManager;
  Process() = default;
  void pump();
  void on_exit(int status);
  void emit(const std::string& frame);
  void wait_for_subscribers();
  void keepalives();
  bool read_output(int fd, const char* kind, bool& eof);
  std::string end_event() const;

  ProcessManager* manager_ = nullptr;
  pid_t pid_ = -1;
  ProcessConfig config_;
  std::optional<std::string> tag_;
  bool is_pty_ = false;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  bool deadline_hit_ = false;

  std::mutex mu_;  // guards subscribers_, stdin_, exit_status_; ended_ is set under it
  std::vector<Subscriber> subscribers_;
  UniqueFd stdin_;  // write end of the stdin pipe (or the pty master, shared with out_)
  UniqueFd out_;    // stdout read end, or the pty master
  UniqueFd err_;    // stderr read end (pipes only)
  UniqueFd wake_;   // eventfd: the reaper saw the exit
  std::optional<int> exit_status_;
  // Set (under mu_) before the end event is written: no subscriber joins after it, and
  // ProcessManager's find() and list(), which read it without mu_, no longer see the process,
  // so a client that has read the end never reaches it by pid or tag (SendSignal, SendInput,
  // Connect answer not_found), though forget() comes a little later.
  std::atomic<bool> ended_{false};
};

// Starts `child(arg)` in a new process as posix_spawn does: clone(CLONE_VM | CLONE_VFORK), on a
// stack lent by this thread, which waits until the child has exec'd or exited. The child shares
// envd's memory, so it may only make async-signal-safe calls (no allocation, no locks), write
// nothing but its own frames, and must end in exec or _exit. It starts with every signal blocked:
// it calls reset_signals_in_child() first. Returns the pid, or -1 with errno.
pid_t clone_vfork(int (*child)(void*), void* arg);
// In such a child: each handler envd installed, and envd's ignored signals, back to the default;
// then every signal unblocked.
void reset_signals_in_child();
// In such a child: groups {gid}, then gid, then uid, through syscall(2): glibc's setgroups, setgid
// and setuid would signal every thread of envd to do the same. 0, or the step that failed
// (process.cc's kStepGroups, kStepGid or kStepUid) with errno set.
int set_ids_in_child(uid_t uid, gid_t gid);

// In a child before exec: every descriptor from 3 up is closed when the child execs (all
// but `keep_until_exec` right away on kernels before 5.11; -1 keeps none). Async-signal-safe;
// false when the kernel refused.
bool clean_fd_table(int keep_until_exec);

}  // namespace abx::envd
