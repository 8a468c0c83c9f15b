#include "process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cstring>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "abx/base/ascii.h"
#include "abx/base/log.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "connect.h"
#include "envd_log.h"
#include "host_info.h"
#include "proto_json.h"

namespace abx::envd {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

// ---- Reaper ----

Reaper::Reaper() : thread_([this] { run(); }) { thread_.detach(); }

Reaper& Reaper::instance() {
  static Reaper* r = new Reaper();  // intentionally leaked, see the header
  return *r;
}

pid_t Reaper::spawn(const std::function<pid_t()>& spawn, OnExit on_exit) {
  std::lock_guard lock(mu_);
  pid_t pid = spawn();
  if (pid > 0) watched_[pid] = std::move(on_exit);
  cv_.notify_all();
  return pid;
}

void Reaper::adopt(pid_t pid, OnExit on_exit) {
  std::unique_lock lock(mu_);
  for (auto it = orphans_.begin(); it != orphans_.end(); ++it) {
    if (it->first != pid) continue;
    const int status = it->second;
    orphans_.erase(it);
    lock.unlock();
    on_exit(status);
    return;
  }
  watched_[pid] = std::move(on_exit);
}

void Reaper::run() {
  for (;;) {
    int status = 0;
    pid_t pid = os::retry_eintr([&] { return ::waitpid(-1, &status, 0); });
    if (pid > 0) {
      OnExit cb;
      {
        std::lock_guard lock(mu_);  // waits for a spawn in progress to register
        if (auto it = watched_.find(pid); it != watched_.end()) {
          cb = std::move(it->second);
          watched_.erase(it);
        } else {
          constexpr std::size_t kKeptOrphans = 64;
          orphans_.emplace_back(pid, status);
          if (orphans_.size() > kKeptOrphans) orphans_.pop_front();
        }
      }
      if (cb) {
        cb(status);
      } else {
        log().debug("reaped orphan " + std::to_string(pid));
      }
      continue;
    }
    // ECHILD: nothing to wait for. Sleep until a spawn, or briefly (orphans may be reparented
    // to us when we are PID 1 or a subreaper).
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

// ---- spawning ----

namespace {

struct ChildError {
  int step;
  int err;
};

enum Step {
  kStepSetsid = 1,
  kStepCtty,
  kStepDup,
  kStepFds,
  kStepGroups,
  kStepGid,
  kStepUid,
  kStepChdir,
  kStepExec
};

const char* step_name(int s) {
  switch (s) {
    case kStepSetsid:
      return "setsid";
    case kStepCtty:
      return "ioctl(TIOCSCTTY)";
    case kStepDup:
      return "dup2";
    case kStepFds:
      return "close_range";
    case kStepGroups:
      return "setgroups";
    case kStepGid:
      return "setgid";
    case kStepUid:
      return "setuid";
    case kStepChdir:
      return "chdir";
    case kStepExec:
      return "execve";
  }
  return "?";
}

// Resolves a command without '/' on PATH (in the parent: execvpe may allocate, which a child of
// a threaded process must not do).
std::string find_executable(const std::string& cmd, const std::string& path) {
  if (cmd.find('/') != std::string::npos) return cmd;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string full = dir + "/" + cmd;
    if (::access(full.c_str(), X_OK) == 0) {
      struct stat st {};
      if (::stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return full;
    }
    start = end + 1;
  }
  return cmd;  // execve reports ENOENT
}

Status set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return errno_error(errno, "fcntl");
  return {};
}

std::string data_frame(const char* kind, std::string_view bytes) {
  json::object data{{kind, base64_encode(bytes)}};
  json::object ev{{"event", json::object{{"data", std::move(data)}}}};
  return encode_envelope(0, json::serialize(ev));
}

const std::string& keepalive_frame() {
  static const std::string f = encode_envelope(
      0, json::serialize(json::object{{"event", json::object{{"keepalive", json::object{}}}}}));
  return f;
}

}  // namespace

ProcessManager::~ProcessManager() {
  std::map<pid_t, std::shared_ptr<Process>> procs;
  {
    std::lock_guard lock(mu_);
    procs = procs_;
  }
  for (auto& [pid, p] : procs) (void)p->signal(SIGKILL);
  procs.clear();
  // Each pump removes its process when it has sent the end event.
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::seconds(10), [this] { return procs_.empty(); });
}

namespace {

// The environment of a started process: envd's own, the user's identity, then the request's
// variables. Errors: invalid_argument for a name or value that cannot be passed to execve.
Result<std::map<std::string, std::string>> process_environment(const StartSpec& spec) {
  std::map<std::string, std::string> env = default_environment();  // GET /envs
  env["HOME"] = spec.user.home;
  env["USER"] = spec.user.name;
  env["LOGNAME"] = spec.user.name;
  if (!env.count("PATH"))
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  if (spec.pty && !env.count("TERM")) env["TERM"] = "xterm-256color";
  for (const auto& [k, v] : spec.config.envs) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
        v.find('\0') != std::string::npos) {
      return invalid_argument("invalid environment variable name or value: '" + k + "'");
    }
    env[k] = v;
  }
  return env;
}

// The requested cwd (which must be a directory), else the default one (the image's WorkingDir)
// if it is a directory, else the user's home, else "/".
Result<std::string> process_cwd(const StartSpec& spec) {
  if (spec.config.cwd && !spec.config.cwd->empty()) {
    ABX_ASSIGN_OR_RETURN(auto cwd, resolve_path(*spec.config.cwd, spec.user));
    struct stat st {};
    if (::stat(cwd.c_str(), &st) != 0) return errno_error(errno, "cwd " + cwd);
    if (!S_ISDIR(st.st_mode)) return invalid_argument("cwd is not a directory: " + cwd);
    return cwd;
  }
  struct stat st {};
  if (!spec.default_cwd.empty() && ::stat(spec.default_cwd.c_str(), &st) == 0 &&
      S_ISDIR(st.st_mode))
    return spec.default_cwd;
  if (::stat(spec.user.home.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::string("/");
  return spec.user.home;
}

// Everything the child passes to execve, built before the clone: the child of a threaded process
// must not allocate.
struct ExecImage {
  std::string exe;
  std::string cwd;
  std::vector<std::string> argv_s, env_s;
  std::vector<char*> argv, envp;

  ExecImage(const StartSpec& spec, std::string program,
            const std::map<std::string, std::string>& env, std::string dir)
      : exe(find_executable(program, env.at("PATH"))), cwd(std::move(dir)) {
    argv_s.push_back(std::move(program));
    argv_s.insert(argv_s.end(), spec.config.args.begin(), spec.config.args.end());
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

// The program to run: the request's cmd, except that /bin/bash (what the e2b SDKs and libabx send
// for a command line: `/bin/bash -l -c CMD`) becomes /bin/sh in an image without bash (busybox,
// alpine, debian-slim's dash all take -l -c). An image with neither has no shell to run a
// command line: the error names the way that needs none.
Result<std::string> program_for(const std::string& cmd) {
  static constexpr const char* kBash = "/bin/bash";
  static constexpr const char* kSh = "/bin/sh";
  if (cmd != kBash || ::access(kBash, X_OK) == 0) return cmd;
  if (::access(kSh, X_OK) == 0) return std::string(kSh);
  return Error(ErrorCode::kFailedPrecondition,
               "this image has no shell (neither /bin/bash nor /bin/sh) to run a command line: "
               "run the program itself without a shell (`abx exec ID -- /path/to/prog args…`, "
               "the SDK's argv form), or add a shell to the image");
}

// The child's ends of its stdio; the parent's ends go into the Process.
struct ChildStdio {
  UniqueFd in, out, err;  // pipes (or /dev/null for a closed stdin)
  UniqueFd pty_slave;     // a pty: the slave is all three
  int stdin_fd() const { return pty_slave.valid() ? pty_slave.get() : in.get(); }
  int stdout_fd() const { return pty_slave.valid() ? pty_slave.get() : out.get(); }
  int stderr_fd() const { return pty_slave.valid() ? pty_slave.get() : err.get(); }
};

// A fresh pty of the requested size; the master is the process's stdin and output.
Status open_pty(const StartSpec& spec, bool switch_user, UniqueFd& stdin_w, UniqueFd& out_r,
                ChildStdio& child) {
  UniqueFd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master.valid()) return errno_error(errno, "posix_openpt");
  if (::grantpt(master.get()) != 0 || ::unlockpt(master.get()) != 0) {
    return errno_error(errno, "unlockpt");
  }
  char name[128];
  if (::ptsname_r(master.get(), name, sizeof name) != 0) return errno_error(errno, "ptsname");
  child.pty_slave.reset(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!child.pty_slave.valid()) return errno_error(errno, std::string("open ") + name);
  winsize ws{};
  ws.ws_col = spec.pty->first ? spec.pty->first : 80;
  ws.ws_row = spec.pty->second ? spec.pty->second : 24;
  ::ioctl(master.get(), TIOCSWINSZ, &ws);
  if (switch_user && ::fchown(child.pty_slave.get(), spec.user.uid, spec.user.gid) != 0) {
    // best effort: the child can still use the pty as root-owned
  }
  int dup = ::fcntl(master.get(), F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return errno_error(errno, "dup");
  stdin_w.reset(dup);
  out_r = std::move(master);
  (void)set_nonblocking(out_r.get());
  return {};
}

// Three pipes (stdin only when the request keeps it open, /dev/null otherwise).
Status open_pipes(const StartSpec& spec, UniqueFd& stdin_w, UniqueFd& out_r, UniqueFd& err_r,
                  ChildStdio& child) {
  int p[2];
  if (spec.stdin_open) {
    if (::pipe2(p, O_CLOEXEC) != 0) return errno_error(errno, "pipe2");
    child.in.reset(p[0]);
    stdin_w.reset(p[1]);
  } else {
    child.in.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!child.in.valid()) return errno_error(errno, "open /dev/null");
  }
  if (::pipe2(p, O_CLOEXEC) != 0) return errno_error(errno, "pipe2");
  out_r.reset(p[0]);
  child.out.reset(p[1]);
  if (::pipe2(p, O_CLOEXEC) != 0) return errno_error(errno, "pipe2");
  err_r.reset(p[0]);
  child.err.reset(p[1]);
  (void)set_nonblocking(out_r.get());
  (void)set_nonblocking(err_r.get());
  return {};
}

// What the child needs, as plain values (nothing here allocates or frees).
struct ChildArgs {
  bool pty;
  bool switch_user;
  uid_t uid;
  gid_t gid;
  int in_fd, out_fd, err_fd;
  int report_fd;  // write end: a ChildError if a step fails
  const char* exe;
  const char* cwd;
  char* const* argv;
  char* const* envp;
};

}  // namespace

// Everything above stdio is closed at exec, whatever envd holds and however it was opened (a
// descriptor another thread opens without O_CLOEXEC, or one a library leaks, would otherwise
// reach a process started as another user: envd's sockets carry other users' requests).
// CLOSE_RANGE_CLOEXEC (Linux 5.11) keeps `keep_until_exec` (the report pipe) usable until the
// exec succeeds; on older kernels everything but it is closed now. Async-signal-safe.
bool clean_fd_table(int keep_until_exec) {
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return true;
  if (keep_until_exec < 3) return ::close_range(3, ~0U, 0) == 0;
  if (keep_until_exec > 3 && ::close_range(3, static_cast<unsigned>(keep_until_exec) - 1, 0) != 0)
    return false;
  return ::close_range(static_cast<unsigned>(keep_until_exec) + 1, ~0U, 0) == 0;
}

// run_child's frames, with room for a sanitizer's redzones.
constexpr std::size_t kChildStackBytes = 64 * 1024;

// On a VM where a page fault costs ~17 us, fork() made Process/Start of `echo` ~4 ms slower (p50
// 9.6 against 5.6 ms): the copy of envd's page tables, then copy-on-write faults in both
// processes (bench/README.md, "Page faults: the CLI's start-up and envd's spawn"). The child's
// stack is a buffer in this frame, free while this thread waits (as in musl). Signals stay blocked
// from before the clone until the child has reset their handlers (reset_signals_in_child), so no
// handler of envd's runs in the child.
pid_t clone_vfork(int (*child)(void*), void* arg) {
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  alignas(16) char stack[kChildStackBytes];
  pid_t pid = ::clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
  int saved = errno;
#if defined(__SANITIZE_ADDRESS__)
  // The child's frames poisoned their redzones in this buffer's shadow, and never returned.
  __asan_unpoison_memory_region(stack, sizeof stack);
#endif
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = saved;
  return pid;
}

void reset_signals_in_child() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction cur {};
    if (s == SIGKILL || s == SIGSTOP || ::sigaction(s, nullptr, &cur) != 0) continue;
    if (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN) ::sigaction(s, &dfl, nullptr);
  }
  // Also those envd ignores: a process starts with every signal at its default.
  for (int s : {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD, SIGTTOU, SIGTTIN}) {
    ::sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

int set_ids_in_child(uid_t uid, gid_t gid) {
  if (::syscall(SYS_setgroups, 1, &gid) < 0) return kStepGroups;
  if (::syscall(SYS_setresgid, gid, gid, gid) < 0) return kStepGid;
  if (::syscall(SYS_setresuid, uid, uid, uid) < 0) return kStepUid;
  return 0;
}

namespace {

// The child between clone_vfork and execve. A failing step writes {step, errno} to the report
// pipe and exits 127.
[[noreturn]] void run_child(const ChildArgs& a) {
  auto die = [&](int step) {
    ChildError ce{step, errno};
    (void)!::write(a.report_fd, &ce, sizeof ce);
    ::_exit(127);
  };
  reset_signals_in_child();
  if (::setsid() < 0) die(kStepSetsid);
  if (a.pty && ::ioctl(a.out_fd, TIOCSCTTY, 0) < 0) die(kStepCtty);
  if (::dup2(a.in_fd, 0) < 0 || ::dup2(a.out_fd, 1) < 0 || ::dup2(a.err_fd, 2) < 0) die(kStepDup);
  if (!clean_fd_table(a.report_fd)) die(kStepFds);
  if (a.switch_user) {
    if (int step = set_ids_in_child(a.uid, a.gid); step != 0) die(step);
  }
  if (::chdir(a.cwd) < 0) die(kStepChdir);
  ::execve(a.exe, a.argv, a.envp);
  die(kStepExec);
  ::_exit(127);  // not reached
}

int child_main(void* args) { run_child(*static_cast<const ChildArgs*>(args)); }

// Waits for the exec: EOF on the report pipe means it happened (the pipe is O_CLOEXEC), a
// ChildError means a step failed (the reaper then collects the child).
Status await_exec(int report_r, const std::string& exe) {
  ChildError ce{};
  ssize_t n = os::retry_eintr([&] { return ::read(report_r, &ce, sizeof ce); });
  if (n != static_cast<ssize_t>(sizeof ce)) return {};
  Error e = errno_error(ce.err, std::string("error starting process: ") + step_name(ce.step) +
                                    (ce.step == kStepExec ? " " + exe : ""));
  return Error(e.code() == ErrorCode::kNotFound ? ErrorCode::kInvalidArgument : e.code(),
               e.message());
}

}  // namespace

// The steps in order: check the request, build the environment, cwd and exec image, open the
// stdio, start the child (registered with the reaper), close the child's ends, wait for the exec.
Result<std::shared_ptr<Process>> ProcessManager::start(const StartSpec& spec) {
  if (spec.config.cmd.empty()) return invalid_argument("process.cmd is empty");
  for (const auto& a : spec.config.args) {
    if (a.find('\0') != std::string::npos) return invalid_argument("an argument contains NUL");
  }
  bool switch_user = ::geteuid() == 0 && spec.user.uid != 0;
  if (::geteuid() != 0 && spec.user.uid != ::geteuid()) {
    return Error(ErrorCode::kPermissionDenied,
                 "envd is not root and cannot run as " + spec.user.name);
  }
  ensure_hosts_entry();  // before the first process, and again in a fork's child (new hostname)
  ABX_ASSIGN_OR_RETURN(auto env, process_environment(spec));
  ABX_ASSIGN_OR_RETURN(auto cwd, process_cwd(spec));
  ABX_ASSIGN_OR_RETURN(auto program, program_for(spec.config.cmd));
  ExecImage image(spec, std::move(program), env, std::move(cwd));

  auto proc = std::shared_ptr<Process>(new Process());
  proc->manager_ = this;
  proc->config_ = spec.config;
  proc->tag_ = spec.tag;
  proc->is_pty_ = spec.pty.has_value();
  if (spec.timeout.count() > 0) proc->deadline_ = Clock::now() + spec.timeout;
  proc->wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!proc->wake_.valid()) return errno_error(errno, "eventfd");

  ChildStdio child;
  if (spec.pty) {
    ABX_TRY(open_pty(spec, switch_user, proc->stdin_, proc->out_, child));
  } else {
    ABX_TRY(open_pipes(spec, proc->stdin_, proc->out_, proc->err_, child));
  }
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return errno_error(errno, "pipe2");
  UniqueFd report_r(report[0]), report_w(report[1]);

  ChildArgs args{spec.pty.has_value(), switch_user,       spec.user.uid,     spec.user.gid,
                 child.stdin_fd(),     child.stdout_fd(), child.stderr_fd(), report_w.get(),
                 image.exe.c_str(),    image.cwd.c_str(), image.argv.data(), image.envp.data()};
  std::weak_ptr<Process> weak = proc;
  pid_t pid = reaper_.spawn([&]() -> pid_t { return clone_vfork(child_main, &args); },
                            [weak](int status) {
                              if (auto p = weak.lock()) p->on_exit(status);
                            });
  if (pid < 0) return errno_error(errno, "clone");
  proc->pid_ = pid;
  // The child holds its ends now; ours must go so EOF arrives when it exits.
  report_w.reset();
  child = ChildStdio{};
  ABX_TRY(await_exec(report_r.get(), image.exe));
  {
    std::lock_guard lock(mu_);
    procs_[pid] = proc;
  }
  log().debug("started pid " + std::to_string(pid) + ": " + spec.config.cmd);
  return proc;
}

Result<std::shared_ptr<Process>> ProcessManager::find(std::optional<std::uint32_t> pid,
                                                      std::optional<std::string> tag) {
  std::lock_guard lock(mu_);
  if (pid) {
    auto it = procs_.find(static_cast<pid_t>(*pid));
    if (it != procs_.end() && !it->second->ended_.load(std::memory_order_acquire))
      return it->second;
    return not_found("process with pid " + std::to_string(*pid) + " not found");
  }
  if (tag) {
    for (auto& [p, proc] : procs_) {
      if (proc->tag_ == tag && !proc->ended_.load(std::memory_order_acquire)) return proc;
    }
    return not_found("process with tag '" + *tag + "' not found");
  }
  return invalid_argument("process selector needs a pid or a tag");
}

std::vector<std::shared_ptr<Process>> ProcessManager::list() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Process>> out;
  for (auto& [p, proc] : procs_) {
    if (!proc->ended_.load(std::memory_order_acquire)) out.push_back(proc);
  }
  return out;
}

void ProcessManager::signal_all(int sig) {
  for (auto& p : list()) (void)p->signal(sig);
}

void ProcessManager::forget(pid_t pid) {
  std::shared_ptr<Process> keep;  // released outside the lock
  {
    std::lock_guard lock(mu_);
    if (auto it = procs_.find(pid); it != procs_.end()) {
      keep = std::move(it->second);
      procs_.erase(it);
    }
  }
  cv_.notify_all();
}

// ---- Process ----

Process::~Process() = default;

bool Process::subscribe(Subscriber sub) {
  std::string start = encode_envelope(
      0, json::serialize(json::object{
             {"event",
              json::object{{"start", json::object{{"pid", static_cast<std::uint32_t>(pid_)}}}}}}));
  std::lock_guard lock(mu_);
  if (ended_) return false;
  sub.writer->write(std::move(start));
  sub.last_sent = Clock::now();
  subscribers_.push_back(std::move(sub));
  return true;
}

void Process::run_pump() {
  // Detached: the pump holds the process alive and tells the manager when it is done.
  std::thread([self = shared_from_this()] { self->pump(); }).detach();
}

void Process::on_exit(int status) {
  {
    std::lock_guard lock(mu_);
    exit_status_ = status;
  }
  std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void Process::emit(const std::string& frame) {
  std::lock_guard lock(mu_);
  for (auto it = subscribers_.begin(); it != subscribers_.end();) {
    if (!it->writer->write(frame)) {
      it = subscribers_.erase(it);  // the client went away; the process keeps running
    } else {
      it->last_sent = Clock::now();
      ++it;
    }
  }
}

// Back-pressure: while any subscriber's queue is over its mark, do not read more output.
void Process::wait_for_subscribers() {
  for (;;) {
    std::shared_ptr<http::StreamWriter> slow;
    {
      std::lock_guard lock(mu_);
      for (auto& s : subscribers_) {
        if (!s.writer->ready() && !s.writer->closed()) {
          slow = s.writer;
          break;
        }
      }
    }
    if (!slow) return;
    {
      // Once the process is gone only what is left in its pipes remains (bounded): stop waiting.
      std::lock_guard lock(mu_);
      if (exit_status_) return;
    }
    slow->wait_ready(std::chrono::milliseconds(100));
    if (!deadline_hit_ && Clock::now() >= deadline_) {
      deadline_hit_ = true;
      (void)signal(SIGKILL);
    }
    keepalives();
  }
}

void Process::keepalives() {
  auto now = Clock::now();
  std::lock_guard lock(mu_);
  for (auto& s : subscribers_) {
    if (now - s.last_sent >= s.keepalive && s.writer->ready()) {
      s.writer->write(keepalive_frame());
      s.last_sent = now;
    }
  }
}

// Reads what is available on `fd` (a bounded amount per call, so one stream cannot starve the
// other). Returns true if it read anything.
bool Process::read_output(int fd, const char* kind, bool& eof) {
  char buf[32 * 1024];
  bool any = false;
  for (int i = 0; i < 4; ++i) {
    ssize_t n = os::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n > 0) {
      emit(data_frame(kind, std::string_view(buf, static_cast<std::size_t>(n))));
      wait_for_subscribers();
      any = true;
      continue;
    }
    if (n < 0 && errno == EAGAIN) return any;
    eof = true;  // 0, or EIO on a pty master once the last slave fd is closed
    return any;
  }
  return any;
}

std::string Process::end_event() const {
  int st = *exit_status_;
  json::object end;
  std::string status;
  int code = -1;
  if (WIFEXITED(st)) {
    code = WEXITSTATUS(st);
    status = "exit status " + std::to_string(code);
    end["exited"] = true;
  } else if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    const char* name = ::sigdescr_np(sig);
    status = "signal: " + ascii_lower(name ? name : ("signal " + std::to_string(sig)));
    end["exited"] = false;
  }
  if (code != 0) end["exitCode"] = code;  // proto3 JSON omits the default 0
  end["status"] = status;
  if (code != 0) {
    end["error"] = deadline_hit_ ? status + " (Connect-Timeout-Ms elapsed)" : status;
  }
  return encode_envelope(0, json::serialize(json::object{{"event", json::object{{"end", end}}}}));
}

void Process::pump() {
  bool out_eof = !out_.valid();
  bool err_eof = !err_.valid();
  for (;;) {
    bool exited;
    {
      std::lock_guard lock(mu_);
      exited = exit_status_.has_value();
    }
    if (exited) {
      // Drain what the process left in the pipes, without waiting for descendants that may
      // still hold them open.
      if (!out_eof) read_output(out_.get(), is_pty_ ? "pty" : "stdout", out_eof);
      if (!err_eof) read_output(err_.get(), "stderr", err_eof);
      break;
    }
    auto now = Clock::now();
    if (!deadline_hit_ && now >= deadline_) {
      deadline_hit_ = true;
      (void)signal(SIGKILL);
    }
    keepalives();
    long timeout_ms = 1000;
    {
      std::lock_guard lock(mu_);
      for (auto& s : subscribers_) {
        auto due =
            std::chrono::duration_cast<std::chrono::milliseconds>(s.last_sent + s.keepalive - now)
                .count();
        timeout_ms = std::min(timeout_ms, std::max(1L, static_cast<long>(due)));
      }
    }
    if (deadline_ != Clock::time_point::max() && !deadline_hit_) {
      auto due = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now).count();
      timeout_ms = std::min(timeout_ms, std::max(1L, static_cast<long>(due)));
    }
    pollfd fds[3];
    int n = 0;
    fds[n++] = {wake_.get(), POLLIN, 0};
    int out_i = -1, err_i = -1;
    if (!out_eof) {
      out_i = n;
      fds[n++] = {out_.get(), POLLIN, 0};
    }
    if (!err_eof) {
      err_i = n;
      fds[n++] = {err_.get(), POLLIN, 0};
    }
    int r = os::retry_eintr(
        [&] { return ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(timeout_ms)); });
    if (r < 0) break;
    if (r == 0) continue;
    if (out_i >= 0 && fds[out_i].revents)
      read_output(out_.get(), is_pty_ ? "pty" : "stdout", out_eof);
    if (err_i >= 0 && fds[err_i].revents) read_output(err_.get(), "stderr", err_eof);
  }
  std::string end = end_event();
  std::string trailer = encode_envelope(kFlagEndStream, "{}");
  std::vector<Subscriber> subs;
  {
    std::lock_guard lock(mu_);
    ended_ = true;
    subs.swap(subscribers_);
    stdin_.reset();
  }
  for (auto& s : subs) {
    s.writer->write(end);
    s.writer->write(trailer);
    s.writer->finish();
  }
  manager_->forget(pid_);  // last touch of the manager
}

namespace {
// A process's stdin is non-blocking: waits for room (5 s) rather than fail, unlike os::write_all.
Status write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = os::retry_eintr([&] { return ::write(fd, data.data(), data.size()); });
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      if (os::retry_eintr([&] { return ::poll(&p, 1, 5000); }) == 0) {
        return Error(ErrorCode::kUnavailable, "the process is not reading its input");
      }
      continue;
    }
    return errno_error(errno, "write input");
  }
  return {};
}
}  // namespace

Status Process::send_stdin(std::string_view data) {
  std::lock_guard lock(mu_);
  if (is_pty_) return invalid_argument("process has a pty: send pty input instead of stdin");
  if (!stdin_.valid())
    return Error(ErrorCode::kFailedPrecondition, "stdin is closed or was not enabled");
  (void)set_nonblocking(stdin_.get());
  return write_all(stdin_.get(), data);
}

Status Process::send_pty(std::string_view data) {
  std::lock_guard lock(mu_);
  if (!is_pty_) return invalid_argument("process has no pty");
  if (!stdin_.valid()) return Error(ErrorCode::kFailedPrecondition, "process has ended");
  return write_all(stdin_.get(), data);
}

Status Process::close_stdin() {
  std::lock_guard lock(mu_);
  if (is_pty_) {
    // A terminal has no separate stdin to close: send EOF (^D) as a user would.
    if (!stdin_.valid()) return {};
    return write_all(stdin_.get(), "\x04");
  }
  stdin_.reset();
  return {};
}

Status Process::signal(int sig) {
  // The process leads its own session and group: signal the group so its children go too.
  if (::kill(-pid_, sig) != 0 && ::kill(pid_, sig) != 0) {
    if (errno == ESRCH) return {};
    return errno_error(errno, "kill");
  }
  return {};
}

Status Process::resize(std::uint16_t cols, std::uint16_t rows) {
  std::lock_guard lock(mu_);
  if (!is_pty_) return invalid_argument("process has no pty to resize");
  winsize ws{};
  ws.ws_col = cols;
  ws.ws_row = rows;
  if (!out_.valid() || ::ioctl(out_.get(), TIOCSWINSZ, &ws) != 0)
    return errno_error(errno, "TIOCSWINSZ");
  return {};
}

}  // namespace abx::envd
