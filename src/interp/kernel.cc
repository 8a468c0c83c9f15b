#include "abx/interp/kernel.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

// glibc 2.36's <sys/pidfd.h> lacks __BEGIN_DECLS (fixed in 2.37): declare it C here.
extern "C" {
#include <sys/pidfd.h>
}

#include <atomic>
#include <boost/json.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "abx/base/fd.h"
#include "abx/base/log.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/token/token.h"

extern char** environ;

namespace abx::interp {
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kStderrTail = 4096;
// kernel_info_request is repeated at this interval until the kernel answers on shell and iopub.
constexpr auto kStartRetry = std::chrono::milliseconds(200);

const Logger& logger() {
  static const Logger log("interp");
  return log;
}

std::string errno_text(const char* call, int err) {
  return std::string(call) + ": " + std::strerror(err);
}

// One spawned kernel process and everything that lives exactly as long as it: its private
// directory, the stderr pipe, the pidfd and the sockets connected to it.
struct Process {
  pid_t pid = 0;
  UniqueFd pidfd;
  UniqueFd stderr_pipe;  // read end; invalid once at EOF
  std::string dir;
  std::string key;
  std::string session;
  std::string tail;  // last kStderrTail bytes of stdout+stderr
  std::optional<zmq::socket_t> shell, control, iopub;
};

void append_tail(std::string& tail, std::string_view more) {
  tail.append(more);
  if (tail.size() > kStderrTail) tail.erase(0, tail.size() - kStderrTail);
}

// Reads what the pipe has now (non-blocking); closes it at EOF.
void drain_pipe(Process& p) {
  char buf[4096];
  while (p.stderr_pipe) {
    ssize_t n = os::retry_eintr([&] { return ::read(p.stderr_pipe.get(), buf, sizeof buf); });
    if (n > 0) {
      append_tail(p.tail, std::string_view(buf, static_cast<std::size_t>(n)));
    } else if (n == 0) {
      p.stderr_pipe.reset();
    } else {
      if (errno != EAGAIN) p.stderr_pipe.reset();
      break;
    }
  }
}

std::string with_tail(std::string msg, const std::string& tail) {
  if (tail.empty()) return msg;
  return msg + "; output:\n" + tail;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// Kills the group the kernel leads and reaps the kernel (only our own child, by pid).
void kill_and_reap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);  // in case it left its group
  os::retry_eintr([&] { return ::waitpid(pid, nullptr, 0); });
}

Result<std::string> make_private_dir(const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = (t != nullptr && *t != '\0') ? t : "/tmp";
  }
  std::string tmpl = base + "/abx-kernel-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return unavailable("kernel runtime dir under " + base + ": " + errno_text("mkdtemp", errno));
  }
  ::chmod(tmpl.c_str(), 0700);  // mkdtemp already uses 0700; the umask cannot widen it
  return tmpl;
}

Status write_connection_file(const std::string& path, const std::string& dir,
                             const std::string& key) {
  json::object c{{"transport", "ipc"},
                 {"ip", dir + "/k"},
                 {"shell_port", 1},
                 {"iopub_port", 2},
                 {"stdin_port", 3},
                 {"control_port", 4},
                 {"hb_port", 5},
                 {"key", key},
                 {"signature_scheme", "hmac-sha256"},
                 {"kernel_name", "python3"}};
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable("connection file: " + errno_text("open", errno));
  UniqueFd owned(fd);
  std::string text = json::serialize(c);
  std::string_view rest = text;
  while (!rest.empty()) {
    ssize_t n = os::retry_eintr([&] { return ::write(fd, rest.data(), rest.size()); });
    if (n <= 0) return unavailable("connection file: " + errno_text("write", errno));
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

// posix_spawn: the kernel leads a new process group (so interrupt and kill reach its children),
// stdin is /dev/null, stdout and stderr go to `out_fd`, nothing else is inherited.
Result<pid_t> spawn(const KernelOptions& o, const std::string& conn_file, int out_fd) {
  std::vector<std::string> args = o.argv;
  for (auto& a : args) {
    for (std::size_t at = a.find("{connection_file}"); at != std::string::npos;
         at = a.find("{connection_file}", at + conn_file.size())) {
      a.replace(at, std::string_view("{connection_file}").size(), conn_file);
    }
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_copy = o.env;
  std::vector<char*> envp;
  for (auto& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  // Descriptors other threads opened without O_CLOEXEC must not leak into the kernel either.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, o.cwd.c_str());
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc =
      ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), o.env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return unavailable("spawn " + o.argv[0] + ": " + std::strerror(rc));
  return pid;
}

void send(zmq::socket_t& s, const Message& m, const std::string& key) {
  auto frames = encode(m, key);
  std::vector<zmq::const_buffer> bufs;
  bufs.reserve(frames.size());
  for (const auto& f : frames) bufs.emplace_back(f.data(), f.size());
  if (!zmq::send_multipart(s, bufs, zmq::send_flags::dontwait)) {
    logger().warn("kernel socket full: dropped " + std::string(m.msg_type()));
  }
}

struct Execution {
  std::string code;
  bool silent = false;
  ExecuteCallbacks callbacks;
  std::string msg_id;  // set once sent
  std::optional<json::object> reply;
  bool idle = false;
};

void finish(Execution& e, Result<json::object> r) {
  if (e.callbacks.on_done) e.callbacks.on_done(std::move(r));
}

}  // namespace

struct Kernel::Impl {
  enum class Phase { kStarting, kReady, kDead };

  explicit Impl(KernelOptions o) : options(std::move(o)) {}

  KernelOptions options;
  zmq::context_t ctx;
  std::thread thread;
  UniqueFd wake;  // eventfd: the public methods' work for the thread

  // Shared with the public methods, under mu.
  mutable std::mutex mu;
  std::deque<Execution> incoming;
  std::deque<std::promise<Status>> restarts;
  bool stop = false;
  bool joined = false;
  pid_t pid_shared = 0;  // 0 once reaped: interrupt() never signals a reused pid
  std::atomic<bool> alive{false};

  // Owned by the thread.
  Process proc;
  Phase phase = Phase::kDead;
  std::optional<Error> dead_error;
  Clock::time_point deadline{}, next_info{};
  bool got_info_reply = false, got_iopub = false;
  std::optional<std::promise<Status>> ready_promise;  // start() or restart() waiting
  std::deque<Execution> pending;
  std::optional<Execution> current;
  bool initial = false;  // the first launch, for start(): failing it ends the thread
  bool quit = false;

  void notify() {
    std::uint64_t one = 1;
    (void)!::write(wake.get(), &one, sizeof one);
  }

  // ---- process lifetime (thread) ----

  Status launch() {
    proc = Process{};
    got_info_reply = got_iopub = false;
    ABX_ASSIGN_OR_RETURN(proc.dir, make_private_dir(options.runtime_dir));
    // ipykernel binds "<dir>/k-<port>": a unix socket path, at most sun_path's size.
    if (proc.dir.size() + std::string_view("/k-1").size() >= sizeof(sockaddr_un::sun_path)) {
      std::string dir = proc.dir;
      close_process();
      return invalid_argument("kernel runtime dir too long for unix socket paths: " + dir);
    }
    auto key = token::random_hex(32);
    if (!key.ok()) return unavailable("kernel key: " + key.error().message());
    proc.key = *key;
    auto sess = token::random_hex(16);
    proc.session = sess.ok() ? *sess : "abx";
    std::string conn = proc.dir + "/connection.json";
    if (auto st = write_connection_file(conn, proc.dir, proc.key); !st.ok()) return st;

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return unavailable("kernel output pipe: " + errno_text("pipe2", errno));
    }
    proc.stderr_pipe.reset(fds[0]);
    UniqueFd write_end(fds[1]);
    auto pid = spawn(options, conn, write_end.get());
    if (!pid.ok()) return pid.error();
    write_end.reset();
    proc.pid = *pid;
    {
      std::lock_guard lk(mu);
      pid_shared = proc.pid;
    }
    int pfd = ::pidfd_open(proc.pid, 0);  // glibc >= 2.36
    if (pfd < 0) {
      int err = errno;
      kill_and_reap(proc.pid);
      close_process();
      return unavailable("kernel: " + errno_text("pidfd_open", err));
    }
    proc.pidfd.reset(pfd);

    const std::string ep = "ipc://" + proc.dir + "/k-";
    auto make = [&](zmq::socket_type type, int port) {
      zmq::socket_t s(ctx, type);
      s.set(zmq::sockopt::linger, 0);
      if (type == zmq::socket_type::sub) s.set(zmq::sockopt::subscribe, "");
      s.connect(ep + std::to_string(port));
      return s;
    };
    try {
      proc.shell.emplace(make(zmq::socket_type::dealer, 1));
      proc.iopub.emplace(make(zmq::socket_type::sub, 2));
      proc.control.emplace(make(zmq::socket_type::dealer, 4));
    } catch (const zmq::error_t& ex) {
      kill_and_reap(proc.pid);
      close_process();
      return unavailable(std::string("kernel sockets: ") + ex.what());
    }
    phase = Phase::kStarting;
    deadline = Clock::now() + options.start_timeout;
    send_kernel_info();
    return {};
  }

  void send_kernel_info() {
    send(*proc.shell, make_message("kernel_info_request", {}, proc.session), proc.key);
    next_info = Clock::now() + kStartRetry;
  }

  // Releases what the process held, once it has been reaped (or never ran).
  void close_process() {
    {
      std::lock_guard lk(mu);
      pid_shared = 0;
    }
    alive = false;
    drain_pipe(proc);
    proc.shell.reset();
    proc.control.reset();
    proc.iopub.reset();
    proc.pidfd.reset();
    proc.stderr_pipe.reset();
    if (!proc.dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(proc.dir, ec);
    }
    proc.pid = 0;
    proc.dir.clear();
  }

  void kill_process() {
    if (proc.pid == 0) {
      close_process();  // a launch that failed before its spawn leaves a directory
      return;
    }
    // Take pid_shared down first: interrupt() then finds no pid rather than a reaped one.
    {
      std::lock_guard lk(mu);
      pid_shared = 0;
    }
    kill_and_reap(proc.pid);
    close_process();
  }

  void fail_all(const Error& e) {
    if (current) {
      Execution ex = std::move(*current);
      current.reset();
      finish(ex, e);
    }
    while (!pending.empty()) {
      Execution ex = std::move(pending.front());
      pending.pop_front();
      finish(ex, e);
    }
  }

  void start_failed(Error e) {
    if (initial) quit = true;  // start() returns the error and joins
    kill_process();
    phase = Phase::kDead;
    dead_error = e;
    fail_all(e);
    if (ready_promise) {
      ready_promise->set_value(std::move(e));
      ready_promise.reset();
    }
  }

  void became_ready() {
    initial = false;
    phase = Phase::kReady;
    alive = true;
    dead_error.reset();
    if (ready_promise) {
      ready_promise->set_value(Status{});
      ready_promise.reset();
    }
    maybe_send_next();
  }

  void maybe_send_next() {
    if (phase != Phase::kReady || current || pending.empty()) return;
    current = std::move(pending.front());
    pending.pop_front();
    json::object content{{"code", current->code},
                         {"silent", current->silent},
                         {"store_history", !current->silent},
                         {"user_expressions", json::object{}},
                         {"allow_stdin", false},
                         // Not true: see kernel.h. Only one request is ever in the kernel, so
                         // there is no queue for stop_on_error to abort, only later requests that
                         // race its abort window.
                         {"stop_on_error", false}};
    Message m = make_message("execute_request", std::move(content), proc.session);
    current->msg_id = std::string(m.msg_id());
    send(*proc.shell, m, proc.key);
  }

  void maybe_finish_current() {
    if (!current || !current->reply || !current->idle) return;
    Execution ex = std::move(*current);
    current.reset();
    json::object reply = std::move(*ex.reply);
    finish(ex, std::move(reply));
    maybe_send_next();
  }

  // ---- messages (thread) ----

  std::optional<Message> receive(zmq::socket_t& s) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(s, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
      return std::nullopt;
    }
    std::vector<std::string> frames;
    frames.reserve(parts.size());
    for (auto& p : parts) frames.emplace_back(p.to_string());
    auto m = decode(std::move(frames), proc.key, options.limits);
    if (!m.ok()) {
      logger().warn("dropped a kernel message: " + m.error().message());
      return Message{};  // empty msg_type: ignored by the handlers, the caller keeps reading
    }
    return std::move(*m);
  }

  void on_shell(const Message& m) {
    if (phase == Phase::kStarting) {
      if (m.msg_type() == "kernel_info_reply") got_info_reply = true;
      return;
    }
    if (current && m.msg_type() == "execute_reply" && m.parent_id() == current->msg_id) {
      current->reply = m.content;
      maybe_finish_current();
    }
  }

  void on_iopub(const Message& m) {
    if (m.msg_type().empty()) return;
    if (phase == Phase::kStarting) {
      got_iopub = true;
      return;
    }
    if (!current || m.parent_id() != current->msg_id) return;
    if (current->callbacks.on_output) current->callbacks.on_output(m);
    if (!current) return;  // callbacks cannot end it, but stay safe
    if (m.msg_type() == "status") {
      const json::value* st = m.content.if_contains("execution_state");
      if (st != nullptr && st->is_string() && st->get_string() == "idle") current->idle = true;
    }
    maybe_finish_current();
  }

  // ---- commands from the public methods (thread) ----

  // Returns false when the thread must exit.
  // What the public methods asked for since the last wake-up (the eventfd is reset).
  struct Commands {
    std::deque<Execution> execs;
    std::deque<std::promise<Status>> restarts;
    bool stopping = false;
  };
  Commands drain_commands() {
    std::uint64_t n = 0;
    (void)!::read(wake.get(), &n, sizeof n);
    Commands c;
    std::lock_guard lk(mu);
    c.execs.swap(incoming);
    c.restarts.swap(restarts);
    c.stopping = stop;
    return c;
  }

  bool take_commands() {
    auto [execs, rs, stopping] = drain_commands();
    if (stopping) {
      Error e(ErrorCode::kFailedPrecondition, "cancelled: kernel shut down");
      kill_process();
      phase = Phase::kDead;
      for (auto& ex : execs) pending.push_back(std::move(ex));
      fail_all(e);
      if (ready_promise) {
        ready_promise->set_value(e);
        ready_promise.reset();
      }
      for (auto& p : rs) p.set_value(e);
      return false;
    }
    for (auto& ex : execs) {
      if (phase == Phase::kDead && dead_error && rs.empty()) {
        finish(ex, *dead_error);
      } else {
        pending.push_back(std::move(ex));
      }
    }
    if (!rs.empty()) {
      // Executions queued before the restart was asked for are cancelled; one restart serves
      // every caller that asked meanwhile.
      kill_process();
      fail_all(Error(ErrorCode::kFailedPrecondition, "cancelled: kernel restarted"));
      std::promise<Status> first = std::move(rs.front());
      rs.pop_front();
      if (ready_promise) {
        ready_promise->set_value(Error(ErrorCode::kFailedPrecondition, "cancelled: restarted"));
      }
      ready_promise.emplace(std::move(first));
      Status st = launch();
      if (!st.ok()) {
        start_failed(st.error());
      }
      for (auto& p : rs) p.set_value(st);  // later callers: the first launch's outcome
    }
    maybe_send_next();
    return true;
  }

  void on_exit() {
    int status = 0;
    pid_t pid = proc.pid;
    {
      std::lock_guard lk(mu);
      pid_shared = 0;
    }
    // Whatever the kernel left in its group goes too; before the reap, while the zombie still
    // holds the group id.
    ::kill(-pid, SIGKILL);
    os::retry_eintr([&] { return ::waitpid(pid, &status, 0); });
    drain_pipe(proc);
    std::string tail = proc.tail;
    close_process();
    Error e = unavailable(with_tail("kernel exited (" + describe_status(status) + ")", tail));
    if (phase == Phase::kStarting) {
      start_failed(std::move(e));
      return;
    }
    phase = Phase::kDead;
    dead_error = e;
    fail_all(e);
  }

  void run() {
    try {
      loop();
    } catch (const std::exception& ex) {
      // A ZeroMQ failure here is a bug or resource exhaustion: end everything cleanly.
      logger().error(std::string("kernel thread: ") + ex.what());
      kill_process();
      phase = Phase::kDead;
      Error e = internal_error(std::string("kernel client failed: ") + ex.what());
      fail_all(e);
      if (ready_promise) ready_promise->set_value(e);
      ready_promise.reset();
      // Keep answering the public methods until shutdown.
      for (;;) {
        pollfd p{wake.get(), POLLIN, 0};
        ::poll(&p, 1, -1);
        auto [execs, rs, stopping] = drain_commands();
        for (auto& x : execs) finish(x, e);
        for (auto& r : rs) r.set_value(e);
        if (stopping) return;
      }
    }
  }

  void loop() {
    for (;;) {
      std::vector<zmq_pollitem_t> items;
      items.push_back({nullptr, wake.get(), ZMQ_POLLIN, 0});
      int i_pidfd = -1, i_pipe = -1, i_shell = -1, i_iopub = -1, i_control = -1;
      if (proc.pidfd) {
        i_pidfd = static_cast<int>(items.size());
        items.push_back({nullptr, proc.pidfd.get(), ZMQ_POLLIN, 0});
      }
      if (proc.stderr_pipe) {
        i_pipe = static_cast<int>(items.size());
        items.push_back({nullptr, proc.stderr_pipe.get(), ZMQ_POLLIN, 0});
      }
      if (proc.shell) {
        i_shell = static_cast<int>(items.size());
        items.push_back({proc.shell->handle(), 0, ZMQ_POLLIN, 0});
        i_iopub = static_cast<int>(items.size());
        items.push_back({proc.iopub->handle(), 0, ZMQ_POLLIN, 0});
        i_control = static_cast<int>(items.size());
        items.push_back({proc.control->handle(), 0, ZMQ_POLLIN, 0});
      }
      long timeout = -1;
      if (phase == Phase::kStarting) {
        auto next = std::min(deadline, next_info);
        timeout = std::max<long>(
            0, std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count());
      }
      int rc = zmq_poll(items.data(), static_cast<int>(items.size()), timeout);
      if (rc < 0) {
        if (zmq_errno() == EINTR) continue;
        throw zmq::error_t();
      }
      auto ready = [&](int i) {
        return i >= 0 && (items[static_cast<std::size_t>(i)].revents) != 0;
      };

      // Sockets first: output the kernel sent before it exited is delivered before its death.
      if (ready(i_shell)) {
        while (proc.shell) {
          auto m = receive(*proc.shell);
          if (!m) break;
          on_shell(*m);
        }
      }
      if (ready(i_iopub)) {
        while (proc.iopub) {
          auto m = receive(*proc.iopub);
          if (!m) break;
          on_iopub(*m);
        }
      }
      if (ready(i_control)) {
        while (proc.control && receive(*proc.control)) {
        }
      }
      if (ready(i_pipe)) drain_pipe(proc);
      if (phase == Phase::kStarting && got_info_reply && got_iopub) became_ready();
      if (ready(i_pidfd) && proc.pid != 0) on_exit();
      if (phase == Phase::kStarting) {
        auto now = Clock::now();
        if (now >= deadline) {
          drain_pipe(proc);
          start_failed(
              unavailable(with_tail("kernel did not answer within " +
                                        std::to_string(options.start_timeout.count()) + " ms",
                                    proc.tail)));
        } else if (now >= next_info) {
          send_kernel_info();
        }
      }
      if (quit) return;
      if (ready(0) && !take_commands()) return;
    }
  }
};

Kernel::Kernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Kernel::~Kernel() { shutdown(); }

Result<std::unique_ptr<Kernel>> Kernel::start(KernelOptions options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return invalid_argument("kernel argv is empty");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return unavailable("kernel: " + errno_text("eventfd", errno));
  impl->wake.reset(efd);
  std::promise<Status> ready;
  std::future<Status> started = ready.get_future();
  Impl* raw = impl.get();
  // The first launch happens on the thread that will own the sockets.
  impl->thread = std::thread([raw, p = std::move(ready)]() mutable {
    raw->initial = true;
    raw->ready_promise.emplace(std::move(p));
    Status st = raw->launch();
    if (!st.ok()) {
      raw->start_failed(st.error());
      return;
    }
    raw->run();
  });
  Status st = started.get();
  if (!st.ok()) {
    impl->thread.join();
    impl->joined = true;
    return st.error();
  }
  return std::unique_ptr<Kernel>(new Kernel(std::move(impl)));
}

void Kernel::execute(std::string code, bool silent, ExecuteCallbacks callbacks) {
  {
    std::lock_guard lk(impl_->mu);
    if (!impl_->stop) {
      impl_->incoming.push_back(
          Execution{.code = std::move(code), .silent = silent, .callbacks = std::move(callbacks)});
      impl_->notify();
      return;
    }
  }
  if (callbacks.on_done) {
    callbacks.on_done(Error(ErrorCode::kFailedPrecondition, "cancelled: kernel shut down"));
  }
}

Status Kernel::interrupt() {
  std::lock_guard lk(impl_->mu);
  if (impl_->stop) return Error(ErrorCode::kFailedPrecondition, "kernel shut down");
  if (impl_->pid_shared == 0) return unavailable("kernel is not running");
  if (::kill(-impl_->pid_shared, SIGINT) != 0) {
    return unavailable("interrupt kernel: " + errno_text("kill", errno));
  }
  return {};
}

Status Kernel::restart() {
  if (std::this_thread::get_id() == impl_->thread.get_id()) {
    return Error(ErrorCode::kFailedPrecondition, "restart() called from a kernel callback");
  }
  std::future<Status> done;
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->stop) return Error(ErrorCode::kFailedPrecondition, "kernel shut down");
    impl_->restarts.emplace_back();
    done = impl_->restarts.back().get_future();
    impl_->notify();
  }
  return done.get();
}

void Kernel::shutdown() {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->joined) return;
    impl_->stop = true;
    impl_->notify();
  }
  if (impl_->thread.joinable() && std::this_thread::get_id() != impl_->thread.get_id()) {
    impl_->thread.join();
  }
  std::lock_guard lk(impl_->mu);
  impl_->joined = true;
}

bool Kernel::alive() const { return impl_->alive.load(); }

pid_t Kernel::pid() const {
  std::lock_guard lk(impl_->mu);
  return impl_->pid_shared;
}

}  // namespace abx::interp
