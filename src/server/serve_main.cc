// `abx-server`: load command modules, freeze the registry, serve until SIGTERM/SIGINT.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>

#include "abx/base/fd.h"
#include "abx/base/log.h"
#include "abx/base/try.h"
#include "abx/pyworker/pyworker.h"
#include "abx/server/server.h"
#include "abx/token/token.h"

namespace abx::server {

namespace {

// Exit codes (documented in docs/command-server.md).
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;   // bad flags
constexpr int kExitConfig = 3;  // a module failed to load, registration errors, no token
constexpr int kExitListen = 4;  // could not bind
constexpr int kExitStdio = 5;   // --stdio: reading stdin or writing stdout failed

std::chrono::milliseconds parse_duration(const std::string& s) {
  // "30s", "500ms", "2m", or a bare number of seconds.
  std::size_t pos = 0;
  double n = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double ms = unit == "ms" ? n : unit == "m" ? n * 60000 : n * 1000;
  if (!(unit.empty() || unit == "s" || unit == "ms" || unit == "m") || ms < 0) {
    throw CLI::ValidationError("duration", "use e.g. 30s, 500ms or 2m");
  }
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

// What the command line asks for, parsed into the server's options.
struct Flags {
  std::vector<std::string> modules;
  std::string python;  // a Python command module (docs/python.md)
  int python_fd = -1;  // its worker, started already (by envd), on this descriptor
  CommandServerOptions opt;
  std::string token_file;
  bool list_only = false;
  bool stdio = false;
};

// Parses argv; on a usage error or --help, the exit code to return instead.
std::optional<int> parse_flags(int argc, char** argv, Flags& f) {
  CLI::App app{
      "abx-server: serves registered commands over HTTP (GET /commands, POST /commands/{name})\n"
      "and as MCP tools (POST /mcp, Streamable HTTP).\n"
      "The access token comes from $ABX_ACCESS_TOKEN or --token-file."};
  app.set_version_flag("--version", std::string("abx-server ") + ABX_VERSION);
  CommandServerOptions& opt = f.opt;
  std::string call_timeout = "30s";
  std::size_t max_body = opt.limits.max_body_bytes;
  std::string log_level;
  app.add_option("--module,-m", f.modules, "Command module (.so) to load; repeatable")
      ->check(CLI::ExistingFile);
  app.add_option("--python", f.python,
                 "Python command module (.py) to serve, run by the image's python3 in a worker "
                 "process (docs/python.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--python-fd", f.python_fd,
                 "The --python module's worker is running already (envd started it beside this "
                 "server) and speaks on this descriptor; when it dies, a worker of our own "
                 "replaces it")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--host", opt.host, "Address to listen on")->capture_default_str();
  app.add_option("--port,-p", opt.port, "Port to listen on (0 picks a free one)")
      ->capture_default_str();
  app.add_option("--token-file", f.token_file, "Read the access token from this file");
  app.add_flag("--no-auth", opt.no_auth, "Serve without authentication (logs a warning)");
  app.add_option("--call-timeout", call_timeout, "Per-call deadline, e.g. 30s, 500ms; 0 = none")
      ->capture_default_str();
  app.add_option("--max-body", max_body, "Largest request body in bytes")->capture_default_str();
  app.add_option("--workers", opt.workers, "Threads that run commands")->capture_default_str();
  app.add_option("--io-threads", opt.io_threads,
                 "Network threads (0 = one per CPU in the process's affinity mask)")
      ->capture_default_str();
  app.add_option("--mcp-allow-origin", opt.mcp_allowed_origins,
                 "Browser Origin (scheme://host[:port], or *) allowed on /mcp besides loopback "
                 "ones; repeatable");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  app.add_flag("--list", f.list_only, "Print the commands' schema as JSON and exit");
  app.add_flag("--stdio", f.stdio,
               "Serve the commands as MCP tools on stdin/stdout (one session, no token) "
               "instead of HTTP; exits at end of input");
  try {
    app.parse(argc, argv);
    opt.call_timeout = parse_duration(call_timeout);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "abx-server: invalid --call-timeout '" << call_timeout << "'\n";
    return kExitUsage;
  }
  if (!log_level.empty() && !set_log_level(log_level)) {
    std::cerr << "abx-server: unknown --log-level '" << log_level << "'\n";
    return kExitUsage;
  }
  opt.limits.max_body_bytes = max_body;
  return std::nullopt;
}

// dlopens every module: their ABX_REGISTERs bind to this executable's exported registry.
bool load_modules(const std::vector<std::string>& modules) {
  for (const auto& m : modules) {
    // RTLD_GLOBAL is not needed: modules bind to this executable's exported registry.
    if (dlopen(m.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      std::cerr << "abx-server: cannot load module " << m << ": " << dlerror() << "\n";
      return false;
    }
  }
  return true;
}

// The Python worker of --python, started by start_python() before anything else (or adopted
// from envd, which started it before this process: --python-fd), and its commands registered by
// register_python() once it reported them, so the interpreter's start (tens of ms) overlaps
// the server's own (issue 37). The worker lives until the process exits (the registry's
// commands call it).
struct PythonWorker {
  std::shared_ptr<pyworker::Worker> worker;
  pyworker::WorkerOptions options;
  bool adopted = false;
};

PythonWorker& python() {
  static PythonWorker state;
  return state;
}

bool start_python(const std::string& module, int python_fd, const CommandServerOptions& opt) {
  PythonWorker& py = python();
  py.options = {.module = module, .call_timeout = opt.call_timeout};
  if (python_fd >= 0) {
    // Not inherited by what runs later (a worker of our own, the commands' processes).
    if (::fcntl(python_fd, F_SETFD, FD_CLOEXEC) == 0) {
      if (auto w = pyworker::Worker::adopt(py.options, UniqueFd(python_fd)); w.ok()) {
        py.worker = std::move(*w);
        py.adopted = true;
        return true;
      }
    }
    Logger("python").warn("--python-fd " + std::to_string(python_fd) +
                          " is not open: starting a worker of our own");
  }
  auto w = pyworker::Worker::spawn(py.options);
  if (!w.ok()) {
    std::cerr << "abx-server: " << w.error().message() << "\n";
    return false;
  }
  py.worker = std::move(*w);
  return true;
}

// Waits for the worker's first frame and registers its commands. On failure the error carries
// the module's traceback. A worker envd started that fails is replaced by one of ours first,
// whose failure says why in our words ("the image needs python3 ...", the traceback).
Status register_python(registry::CommandRegistry& reg) {
  PythonWorker& py = python();
  if (!py.worker) return {};
  Status ready = py.worker->ready();
  if (!ready.ok() && std::exchange(py.adopted, false)) {
    Logger("python").warn("the worker envd started for " + py.options.module + " did not start (" +
                          ready.error().message() + "); starting one of our own");
    py.worker.reset();
    ABX_ASSIGN_OR_RETURN(py.worker, pyworker::Worker::start(py.options));
    ready = Status{};
  }
  ABX_TRY(ready);
  ABX_TRY(pyworker::register_commands(py.worker, reg));
  Logger("python").info("serving " + std::to_string(py.worker->commands().size()) +
                        " Python command(s) from " + py.options.module + " (worker pid " +
                        std::to_string(py.worker->pid()) + (py.adopted ? ", started by envd" : "") +
                        ")");
  return {};
}

int print_schema(const registry::CommandRegistry& reg) {
  boost::json::array out;
  for (const auto* c : reg.list_all()) out.push_back(registry::describe(*c));
  std::cout << boost::json::serialize(boost::json::object{{"commands", out}}) << "\n";
  for (const auto& e : reg.errors()) std::cerr << "abx-server: " << e << "\n";
  return reg.errors().empty() ? kExitOk : kExitConfig;
}

int serve_stdio(registry::CommandRegistry& reg, const CommandServerOptions& opt) {
  // stdout carries protocol messages only (logs go to stderr). A client that stops reading
  // must not kill us with SIGPIPE mid-write: the write fails and we exit instead.
  signal(SIGPIPE, SIG_IGN);
  auto st = serve_mcp_stdio(reg, opt);
  if (!st.ok()) {
    std::cerr << "abx-server: " << st.error().message() << "\n";
    return st.error().code() == ErrorCode::kFailedPrecondition ? kExitConfig : kExitStdio;
  }
  return kExitOk;
}

// --token-file, else $ABX_ACCESS_TOKEN; empty when neither (the server then refuses to start
// unless --no-auth).
Result<std::string> access_token(const std::string& token_file) {
  if (!token_file.empty()) return token::read_token_file(token_file);
  std::string token;
  if (const char* env = std::getenv("ABX_ACCESS_TOKEN"); env != nullptr && *env) token = env;
  // Never inherited by what the commands start.
  ::unsetenv("ABX_ACCESS_TOKEN");
  return token;
}

// Serves HTTP until SIGTERM/SIGINT, then drains calls in progress and exits the process.
[[noreturn]] void serve_http(registry::CommandRegistry& reg, const CommandServerOptions& opt,
                             const sigset_t& stop) {
  Logger log("server");
  bool python_failed = false;
  auto server = CommandServer::start(reg, opt, [&] {
    Status st = register_python(reg);
    python_failed = !st.ok();
    return st;
  });
  if (!server.ok()) {
    std::cerr << "abx-server: " << server.error().message() << "\n";
    std::exit(server.error().code() == ErrorCode::kUnavailable && !python_failed ? kExitListen
                                                                                 : kExitConfig);
  }
  std::string addr = (*server)->host() + ":" + std::to_string((*server)->port());
  std::cout << "listening on " << addr << std::endl;
  log.info("serving " + std::to_string(reg.size()) + " command(s) on " + addr);

  int sig = 0;
  sigwait(&stop, &sig);
  log.info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
           ", draining calls in progress");
  (*server)->shutdown(opt.call_timeout.count() > 0 ? opt.call_timeout : std::chrono::seconds(30));
  log.info("stopped");
  // A command still running past the drain cannot be cancelled; leave without waiting for it.
  std::fflush(nullptr);
  std::_Exit(kExitOk);
}

}  // namespace

int serve_main(int argc, char** argv) {
  // The server holds the access token (which opens envd as any user): not dumpable, its memory,
  // environment and descriptors are out of reach of other processes of its uid (/proc/<pid>/mem,
  // ptrace, pidfd_getfd). What its commands start execs and is dumpable again as usual.
  ::prctl(PR_SET_DUMPABLE, 0);
  Flags f;
  if (auto exit_code = parse_flags(argc, argv, f)) return *exit_code;
  if (f.python_fd >= 0 && f.python.empty()) {
    std::cerr << "abx-server: --python-fd needs --python\n";
    return kExitUsage;
  }
  // The worker gets the server's environment minus ABX_ACCESS_TOKEN (pyworker filters it).
  if (!f.python.empty() && !start_python(f.python, f.python_fd, f.opt)) return kExitConfig;
  if (!load_modules(f.modules)) return kExitConfig;
  auto& reg = registry::default_registry();
  if (f.list_only || f.stdio) {
    if (Status st = register_python(reg); !st.ok()) {
      std::cerr << "abx-server: " << st.error().message() << "\n";
      return kExitConfig;
    }
    return f.list_only ? print_schema(reg) : serve_stdio(reg, f.opt);
  }

  auto token = access_token(f.token_file);
  if (!token.ok()) {
    std::cerr << "abx-server: " << token.error().message() << "\n";
    return kExitConfig;
  }
  f.opt.access_token = *token;

  // Block the stop signals before any thread starts, so only sigwait() receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  serve_http(reg, f.opt, stop);
}

}  // namespace abx::server
