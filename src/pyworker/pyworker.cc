// The Python worker bridge (abx/pyworker/pyworker.h; protocol and design in docs/python.md).
#include "abx/pyworker/pyworker.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "abx/base/json.h"
#include "abx/base/log.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/registry/failure.h"

extern char** environ;

namespace abx::pyworker {

namespace json = boost::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::string_view kWorkerScript = "abx/server/run.py";  // abx.server.worker's main

bool has_worker(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kWorkerScript, ec);
}

// Writes all of `data`; MSG_NOSIGNAL: a dead worker is an error here, not SIGPIPE.
Status send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = os::retry_eintr([&] { return ::send(fd, data.data(), data.size(), MSG_NOSIGNAL); });
    if (n <= 0)
      return unavailable(std::string("write to the worker failed: ") + std::strerror(errno));
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Status send_frame(int fd, std::string_view body) {
  if (body.size() > kMaxFrameBytes) {
    return Error(ErrorCode::kPayloadTooLarge, "call of " + std::to_string(body.size()) +
                                                  " bytes is over the worker's frame limit");
  }
  std::string frame(4, '\0');
  auto n = static_cast<std::uint32_t>(body.size());
  frame[0] = static_cast<char>(n >> 24);
  frame[1] = static_cast<char>(n >> 16);
  frame[2] = static_cast<char>(n >> 8);
  frame[3] = static_cast<char>(n);
  frame.append(body);
  return send_all(fd, frame);
}

// Reads exactly `n` bytes. kUnavailable at end of input or on an error, kDeadlineExceeded when
// `deadline` (if set) passes first.
Status recv_exact(int fd, char* buf, std::size_t n, std::optional<Clock::time_point> deadline) {
  while (n > 0) {
    if (deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return Error(ErrorCode::kDeadlineExceeded, "deadline");
      pollfd p{fd, POLLIN, 0};
      int r = os::retry_eintr(
          [&] { return ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60'000))); });
      if (r < 0) return unavailable(std::strerror(errno));
      if (r == 0) continue;
    }
    ssize_t k = os::retry_eintr([&] { return ::read(fd, buf, n); });
    if (k == 0) return unavailable("end of input");
    if (k < 0) return unavailable(std::strerror(errno));
    buf += k;
    n -= static_cast<std::size_t>(k);
  }
  return {};
}

Result<std::string> recv_frame(int fd, std::optional<Clock::time_point> deadline) {
  unsigned char head[4];
  ABX_TRY(recv_exact(fd, reinterpret_cast<char*>(head), 4, deadline));
  std::size_t n = (std::size_t{head[0]} << 24) | (std::size_t{head[1]} << 16) |
                  (std::size_t{head[2]} << 8) | head[3];
  if (n > kMaxFrameBytes) {
    return unavailable("the worker sent a frame of " + std::to_string(n) + " bytes (limit " +
                       std::to_string(kMaxFrameBytes) + ")");
  }
  std::string body(n, '\0');
  ABX_TRY(recv_exact(fd, body.data(), n, deadline));
  return body;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "was killed by signal " + std::to_string(sig) +
           (name ? std::string(" (") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

Result<std::string> package_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path bundled = exe.parent_path().parent_path() / "python";
    if (has_worker(bundled)) return bundled.string();
  }
#ifdef ABX_SOURCE_PYTHON_DIR
  if (has_worker(ABX_SOURCE_PYTHON_DIR)) return std::string(ABX_SOURCE_PYTHON_DIR);
#endif
  return not_found("no abx Python package beside " + exe.string() + " (../python/" +
                   std::string(kWorkerScript) + ")");
}

Result<std::unique_ptr<Worker>> Worker::start(WorkerOptions options) {
  ABX_ASSIGN_OR_RETURN(auto w, spawn(std::move(options)));
  ABX_TRY(w->ready());
  return w;
}

Status Worker::ready() {
  std::lock_guard lock(mu_);
  ABX_ASSIGN_OR_RETURN(commands_, hello_locked());
  return {};
}

namespace {

// The interpreter ($ABX_PYTHON, else python3) and package folder a Worker starts workers with.
void resolve(WorkerOptions& options) {
  if (options.python.empty()) {
    const char* env = std::getenv("ABX_PYTHON");
    options.python = env != nullptr && *env ? env : "python3";
  }
  if (options.package_dir.empty()) {
    if (auto dir = package_dir(); dir.ok()) options.package_dir = *dir;
  }
}

}  // namespace

Result<std::unique_ptr<Worker>> Worker::adopt(WorkerOptions options, UniqueFd sock) {
  if (!sock.valid()) return invalid_argument("no socket to a Python worker");
  resolve(options);  // for the worker of our own that replaces this one when it dies
  std::unique_ptr<Worker> w(new Worker(std::move(options)));
  std::lock_guard lock(w->mu_);
  w->sock_ = std::move(sock);
  w->adopted_ = true;
  return w;
}

Result<std::unique_ptr<Worker>> Worker::spawn(WorkerOptions options) {
  resolve(options);
  std::error_code ec;
  if (!fs::is_regular_file(options.module, ec)) {
    return Error(ErrorCode::kFailedPrecondition, "no such Python module: " + options.module);
  }
  std::unique_ptr<Worker> w(new Worker(std::move(options)));
  std::lock_guard lock(w->mu_);
  ABX_TRY(w->launch_locked());
  return w;
}

Worker::~Worker() {
  std::lock_guard lock(mu_);
  if (pid_ > 0) reap_locked(false);
}

pid_t Worker::pid() const {
  std::lock_guard lock(mu_);
  return pid_;
}

Result<json::array> Worker::spawn_locked() {
  ABX_TRY(launch_locked());
  return hello_locked();
}

Status Worker::launch_locked() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return internal_error(std::string("socketpair: ") + std::strerror(errno));
  }
  UniqueFd mine(sv[0]);
  UniqueFd theirs(sv[1]);

  std::vector<std::string> args{opt_.python};
  if (!opt_.package_dir.empty()) {
    args.push_back((fs::path(opt_.package_dir) / kWorkerScript).string());
  } else {
    args.insert(args.end(), {"-m", "abx.server.worker"});
  }
  args.insert(args.end(), {"--fd", "3", opt_.module});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The server's environment, without the access token (the worker runs user code).
  std::vector<char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "ABX_ACCESS_TOKEN=", 17) != 0) envp.push_back(*e);
  }
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // The protocol on 3 (dup2 clears close-on-exec, even when the numbers are equal); what the
  // commands print goes to our stderr, never to our stdout (which says "listening on").
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), 3);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  // A restart happens on a server thread, which blocks SIGTERM/SIGINT (only the main thread's
  // sigwait takes them) and may ignore SIGPIPE: the worker starts with neither.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigset_t defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, opt_.python.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return not_found("cannot start the Python worker with '" + opt_.python +
                     "': " + std::strerror(rc) +
                     " (the image needs python3 >= 3.9 on PATH, or set ABX_PYTHON)");
  }
  theirs.reset();
  pid_ = pid;
  sock_ = std::move(mine);
  return {};
}

Result<json::array> Worker::hello_locked() {
  auto hello = recv_frame(sock_.get(), std::nullopt);
  auto fail = [&](std::string msg) -> Error {
    std::string status = reap_locked(false);
    return Error(ErrorCode::kFailedPrecondition, msg + " (the worker " + status + ")");
  };
  if (!hello.ok()) {
    return fail("the Python worker for " + opt_.module +
                " ended before reporting its commands; its stderr above says why");
  }
  boost::system::error_code jec;
  json::value v = json::parse(*hello, jec);
  if (jec || !v.is_object()) return fail("the Python worker sent a malformed first frame");
  const json::object& o = v.as_object();
  if (const json::value* pid = o.if_contains("pid");
      adopted_ && pid != nullptr && pid->is_int64() && pid->as_int64() > 0) {
    pid_ = static_cast<pid_t>(pid->as_int64());
  }
  if (const json::value* cmds = o.if_contains("commands"); cmds != nullptr && cmds->is_array()) {
    return cmds->as_array();
  }
  // The worker's report of a failure is shown as it came: a part it left out is shown empty.
  std::string why(json_string_or_empty(o, "error"));
  std::string status = reap_locked(false);
  (void)status;
  return Error(ErrorCode::kFailedPrecondition,
               "the Python module " + opt_.module + " failed to import:\n" + why,
               std::string(json_string_or_empty(o, "type")));
}

std::string Worker::reap_locked(bool kill_first) {
  sock_.reset();  // end of input: a live worker exits by itself
  if (std::exchange(adopted_, false)) {
    // Not our child: no status to collect (envd reaps it).
    pid_t pid = std::exchange(pid_, 0);
    if (kill_first && pid > 0) ::kill(pid, SIGKILL);
    return kill_first && pid > 0 ? "was killed" : "ended";
  }
  if (pid_ <= 0) return "was not running";
  pid_t pid = std::exchange(pid_, 0);
  if (kill_first) ::kill(pid, SIGKILL);
  int status = 0;
  // A worker that closed its end may still be on its way out: give it a moment, then kill it.
  pid_t r = 0;
  os::poll_until(Clock::now() + std::chrono::milliseconds(kill_first ? 5000 : 500),
                 os::Backoff{std::chrono::milliseconds(2), std::chrono::milliseconds(2)}, [&] {
                   r = os::retry_eintr([&] { return ::waitpid(pid, &status, WNOHANG); });
                   return r != 0;
                 });
  if (r == pid) return describe_status(status);
  if (r < 0) return "ended (its status was not available)";
  ::kill(pid, SIGKILL);
  if (os::retry_eintr([&] { return ::waitpid(pid, &status, 0); }) < 0)
    return "ended (its status was not available)";
  return describe_status(status);
}

Error Worker::died_locked(std::string_view name, const std::string& what, bool kill_first) {
  std::string status = reap_locked(kill_first);
  std::string msg = "the Python worker serving " + opt_.module + " " + what +
                    " during the call to '" + std::string(name) + "' (it " + status + ")";
  auto again = spawn_locked();
  if (again.ok()) {
    msg += "; it was restarted, with the module's state starting over";
  } else {
    msg += "; restarting it failed: " + again.error().message();
  }
  Logger("python").warn(msg);
  return Error(ErrorCode::kUnavailable, msg);
}

Result<json::value> Worker::call(std::string_view name, const json::object& kwargs) {
  const auto entered = Clock::now();
  std::lock_guard lock(mu_);
  // A call that waited for the worker past its deadline has been answered 504 by the server
  // already: running it now would act for a caller who was told it did not happen.
  if (opt_.call_timeout.count() > 0 && Clock::now() - entered >= opt_.call_timeout) {
    return Error(ErrorCode::kDeadlineExceeded,
                 "command '" + std::string(name) + "' waited " +
                     std::to_string(opt_.call_timeout.count()) +
                     " ms for the Python worker (busy with other calls) and was not run");
  }
  if (pid_ <= 0) {
    // An earlier restart failed: try again, once per call.
    auto again = spawn_locked();
    if (!again.ok()) {
      return unavailable("the Python worker serving " + opt_.module +
                         " is not running and could not be restarted: " + again.error().message());
    }
  }
  std::string req = "{\"call\":";
  req += json::serialize(json::value(json::string(name)));
  req += ",\"kwargs\":";
  req += json::serialize(kwargs);
  req += '}';
  if (Status st = send_frame(sock_.get(), req); !st.ok()) {
    if (st.error().code() == ErrorCode::kPayloadTooLarge) return st.error();
    return died_locked(name, "was gone", false);
  }
  std::optional<Clock::time_point> deadline;
  if (opt_.call_timeout.count() > 0) deadline = Clock::now() + opt_.call_timeout;
  auto frame = recv_frame(sock_.get(), deadline);
  if (!frame.ok()) {
    if (frame.error().code() == ErrorCode::kDeadlineExceeded) {
      Error e = died_locked(
          name, "was killed after " + std::to_string(opt_.call_timeout.count()) + " ms", true);
      return Error(ErrorCode::kDeadlineExceeded, e.message());
    }
    return died_locked(name, "died", false);
  }
  boost::system::error_code jec;
  json::value v = json::parse(*frame, jec);
  if (jec || !v.is_object()) return died_locked(name, "sent a malformed answer", true);
  json::object& o = v.as_object();
  if (json::value* r = o.if_contains("result")) return std::move(*r);
  // A failed call's report, shown as it came (see above).
  std::string type(json_string_or_empty(o, "type"));
  std::string message(json_string_or_empty(o, "error"));
  if (type == "NotFound") return not_found(message);
  return Error(ErrorCode::kInternal, message, type.empty() ? "Exception" : type);
}

namespace {

// One command of the worker's list, read strictly: the worker is ours, so a field of the wrong
// type is a bug to report, not to paper over.
Result<registry::RegisteredCommand> read_command(const json::value& c, const std::string& at) {
  ABX_ASSIGN_OR_RETURN(const json::object* o, json_as_object(c, at));
  registry::RegisteredCommand cmd;
  ABX_ASSIGN_OR_RETURN(cmd.name, json_required_string(*o, "name", at));
  ABX_ASSIGN_OR_RETURN(auto description, json_optional_string(*o, "description", at));
  cmd.description = std::move(description).value_or("");
  ABX_ASSIGN_OR_RETURN(const json::array* args, json_optional_array(*o, "args", at));
  if (args == nullptr) return cmd;
  for (std::size_t i = 0; i < args->size(); ++i) {
    const std::string aat = json_path_index(json_path_key(at, "args"), i);
    ABX_ASSIGN_OR_RETURN(const json::object* ao, json_as_object((*args)[i], aat));
    ABX_ASSIGN_OR_RETURN(std::string name, json_required_string(*ao, "name", aat));
    ABX_ASSIGN_OR_RETURN(auto type, json_optional_string(*ao, "type", aat));
    ABX_ASSIGN_OR_RETURN(auto required, json_optional_bool(*ao, "required", aat));
    ABX_ASSIGN_OR_RETURN(auto arg_description, json_optional_string(*ao, "description", aat));
    const json::value* def = ao->if_contains("default");
    // Throws registry::RegistryError for an argument the registry refuses.
    cmd.args.emplace_back(std::move(name), std::move(type).value_or(""), required.value_or(false),
                          def != nullptr ? *def : json::value(nullptr),
                          std::move(arg_description).value_or(""));
  }
  return cmd;
}

}  // namespace

Status register_commands(const std::shared_ptr<Worker>& worker, registry::CommandRegistry& reg) {
  const json::array& commands = worker->commands();
  for (std::size_t i = 0; i < commands.size(); ++i) {
    // The command's name for an error message only (read_command reads it strictly).
    std::string name(commands[i].is_object() ? json_string_or_empty(commands[i].as_object(), "name")
                                             : "");
    try {
      auto read = read_command(commands[i], json_path_index("commands", i));
      if (!read.ok()) {
        return invalid_argument("the Python worker reported a malformed command (" +
                                worker->module() + "): " + read.error().message());
      }
      registry::RegisteredCommand cmd = std::move(*read);
      std::weak_ptr<Worker> weak = worker;
      // The worker outlives the registry's use of it in practice (both live until exit); a
      // weak reference keeps a test's registry from holding a worker after the test ends.
      cmd.fn = [weak, name](const json::object& kwargs) -> json::value {
        auto w = weak.lock();
        if (!w) {
          throw registry::CommandFailure(unavailable("the Python worker has been stopped"));
        }
        auto r = w->call(name, kwargs);
        if (!r.ok()) throw registry::CommandFailure(r.error());
        return std::move(*r);
      };
      reg.register_command(std::move(cmd));
    } catch (const registry::RegistryError& e) {
      return invalid_argument("Python command '" + name + "' from " + worker->module() + ": " +
                              e.what());
    }
  }
  return {};
}

Result<json::array> describe_module(const std::string& module) {
  ABX_ASSIGN_OR_RETURN(auto w, Worker::start(WorkerOptions{.module = module}));
  return w->commands();
}

}  // namespace abx::pyworker
