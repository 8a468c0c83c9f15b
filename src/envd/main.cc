// abx-envd: its configuration (a file or descriptor, flags on top), init duties (PID 1) and the
// envd server.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "abx/base/fd.h"
#include "abx/base/log.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/envd/config.h"
#include "abx/envd/envd.h"
#include "abx/token/token.h"
#include "host_info.h"
#include "process.h"
#include "supervisor.h"
#include "users.h"

namespace {
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitConfig = 3;
constexpr int kExitListen = 4;

struct Flags {
  // The configuration file's (--config, --config-fd), with each flag given on top of it.
  abx::envd::EnvdConfig config;
  // The command server's first companion, started beside envd by abxd's init (issue 37): its
  // pid (0: its exec failed) and the descriptors envd inherits for it.
  int companion_pid = 0;
  std::vector<int> companion_fds;  // the socket, the output pipe's read end, its write end
};

// The whole of a configuration file or descriptor (closed once read: a descriptor left open
// in PID 1 would reach abx-envd's children and its checkpoints).
abx::Result<std::string> read_config_text(const std::string& file, int fd) {
  abx::UniqueFd owned;
  std::string what = "--config-fd " + std::to_string(fd);
  if (!file.empty()) {
    owned.reset(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!owned) {
      const int err = errno;
      return abx::os::errno_error("open --config " + file, err);
    }
    what = "--config " + file;
  } else {
    owned.reset(fd);
  }
  return abx::os::read_all(owned.get(), 1 << 20, "read " + what);
}

// Parses the command line over the configuration file's config (style rule 14: a flag given
// replaces that field); an exit code when abx-envd should stop there (--help, bad usage, an
// unreadable or malformed file). One function: each option's binding sits by its help text.
std::optional<int> parse_flags(int argc, char** argv, Flags& f) {
  using abx::envd::EnvdConfig;
  CLI::App app{
      "abx-envd: the sandbox daemon (PID 1). Serves the envd-compatible API (health, /files, "
      "Connect process.Process and filesystem.Filesystem), reaps zombies, forwards SIGTERM and "
      "supervises the template's start command and command server.\n"
      "Exit codes: 0 ok, 2 usage, 3 configuration, 4 cannot listen."};
  app.set_version_flag("--version", std::string("abx-envd ") + ABX_VERSION);
  std::string config_file;
  int config_fd = -1;
  auto* file_opt = app.add_option("--config", config_file,
                                  "Read the configuration from this JSON file (docs/envd.md, "
                                  "include/abx/envd/config.h); the flags below override it");
  app.add_option("--config-fd", config_fd,
                 "Read the configuration from this inherited descriptor, then close it (abxd "
                 "passes 3)")
      ->excludes(file_opt);
  // Each flag writes into `given`; the ones on the command line are copied over the file's.
  EnvdConfig given;
  std::string server_argv, companion_argv, interp_argv;  // JSON text
  std::vector<std::pair<CLI::Option*, std::function<abx::Status()>>> overlay;
  auto copy = [&](CLI::Option* o, auto EnvdConfig::*field) {
    overlay.emplace_back(o, [&f, &given, field]() -> abx::Status {
      f.config.*field = given.*field;
      return {};
    });
  };
  auto argv_json = [&](CLI::Option* o, std::string& text,
                       std::vector<std::string> EnvdConfig::*field, const char* flag) {
    overlay.emplace_back(o, [&f, &text, field, flag]() -> abx::Status {
      ABX_ASSIGN_OR_RETURN(f.config.*field, abx::envd::parse_argv_json(text, flag));
      return {};
    });
  };
  copy(app.add_option("--port,-p", given.port, "Port to listen on (0 picks a free one)")
           ->capture_default_str(),
       &EnvdConfig::port);
  copy(app.add_option("--host", given.host, "Address to listen on")->capture_default_str(),
       &EnvdConfig::host);
  copy(app.add_option("--token-file", given.token_file,
                      "Read the access token (X-Access-Token) from this file, again on SIGHUP; "
                      "else ABX_ACCESS_TOKEN; else no auth"),
       &EnvdConfig::token_file);
  copy(app.add_option("--start-cmd", given.start_cmd,
                      "Run once at start (/bin/sh -c), as the default user"),
       &EnvdConfig::start_cmd);
  copy(
      app.add_option("--server-cmd", given.server_cmd,
                     "Command server to keep running (/bin/sh -c); restarted with backoff on exit"),
      &EnvdConfig::server_cmd);
  argv_json(app.add_option("--server-argv", server_argv,
                           "The command server as a JSON array of strings, executed directly "
                           "(searched in $PATH without a '/'; no shell needed in the image); "
                           "restarted with backoff"),
            server_argv, &EnvdConfig::server_argv, "--server-argv");
  argv_json(app.add_option("--server-companion-argv", companion_argv,
                           "A process started (JSON array of strings, as --server-argv) just "
                           "before each run of the command server, connected to it by a "
                           "socketpair on descriptor 3 of both, without the server's token; "
                           "killed when the server exits (abx-server's Python worker, "
                           "docs/python.md)"),
            companion_argv, &EnvdConfig::server_companion_argv, "--server-companion-argv");
  argv_json(app.add_option("--interpreter-argv", interp_argv,
                           "The code interpreter (abx-interp) as a JSON array of strings, run as "
                           "the default user and restarted with backoff"),
            interp_argv, &EnvdConfig::interpreter_argv, "--interpreter-argv");
  copy(app.add_option("--default-user", given.default_user, "User for requests that name none")
           ->capture_default_str(),
       &EnvdConfig::default_user);
  copy(app.add_option("--default-workdir", given.default_workdir,
                      "Where processes start when their request names no cwd (if a directory; "
                      "else the user's home)"),
       &EnvdConfig::default_workdir);
  copy(app.add_option("--max-upload", given.max_upload_bytes, "Largest POST /files body in bytes")
           ->capture_default_str(),
       &EnvdConfig::max_upload_bytes);
  copy(app.add_option("--log-level", given.log_level, "trace, debug, info, warn, error or off"),
       &EnvdConfig::log_level);
  auto* companion_fds =
      app.add_option("--server-companion-fds", f.companion_fds,
                     "SOCKET,READ,WRITE: the command server's first companion was started "
                     "beside envd by the sandbox's init (abxd passes this): the server's end of "
                     "their socketpair, and both ends of the pipe the companion writes its "
                     "output into (the first run's stderr); inherited descriptors above 2")
          ->expected(3)
          ->delimiter(',')
          ->check(CLI::Range(3, 1 << 20));
  app.add_option("--server-companion-pid", f.companion_pid,
                 "With --server-companion-fds: the first companion's pid (the init writes it); "
                 "0: its exec failed, and envd starts the companion itself")
      ->check(CLI::NonNegativeNumber)
      ->needs(companion_fds);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (!config_file.empty() || config_fd >= 0) {
    auto text = read_config_text(config_file, config_fd);
    auto config = text.ok() ? abx::envd::parse_envd_config(*text)
                            : abx::Result<abx::envd::EnvdConfig>(text.error());
    if (!config.ok()) {
      std::cerr << "abx-envd: " << config.error().message() << "\n";
      return kExitConfig;
    }
    f.config = std::move(*config);
  }
  for (const auto& [option, apply] : overlay) {
    if (option->count() == 0) continue;
    if (abx::Status s = apply(); !s.ok()) {
      std::cerr << "abx-envd: " << s.error().message() << "\n";
      return kExitUsage;
    }
  }
  if (abx::Status s = abx::envd::check_envd_config(f.config); !s.ok()) {
    std::cerr << "abx-envd: " << s.error().message() << "\n";
    return kExitUsage;
  }
  if (!f.config.log_level.empty() && !abx::set_log_level(f.config.log_level)) {
    std::cerr << "abx-envd: unknown --log-level '" << f.config.log_level << "'\n";
    return kExitUsage;
  }
  return std::nullopt;
}

// The access token from --token-file, else ABX_ACCESS_TOKEN, else none; false: unreadable file.
bool load_token(const Flags& f, abx::envd::EnvdOptions& opt) {
  if (!f.config.token_file.empty()) {
    auto t = abx::token::read_token_file(f.config.token_file);
    if (!t.ok()) {
      std::cerr << "abx-envd: " << t.error().message() << "\n";
      return false;
    }
    opt.access_token = std::move(*t);
  } else if (const char* env = std::getenv("ABX_ACCESS_TOKEN"); env && *env) {
    opt.access_token = env;
  }
  ::unsetenv("ABX_ACCESS_TOKEN");  // never inherited by the processes we start
  return true;
}

// SIGHUP, sent by abxd to a sandbox restored from a checkpoint (each copy of a fork gets its own
// token file behind the same --token-file path): reseeds envd's random generator, then reads the
// token again. A readable, non-empty token becomes the only one accepted, and the command server,
// which got the token in its environment at start, is restarted with the new one. Anything else
// keeps the old token: envd never ends up serving without one. Returns the token now in use.
std::optional<std::string> reload_token(const Flags& f, std::optional<std::string> current,
                                        abx::envd::Envd& server, abx::envd::Supervisor* server_sup,
                                        const abx::Logger& log) {
  std::string reseed;
  if (auto s = abx::token::reseed_random(); !s.ok()) reseed = " (" + s.error().message() + ")";
  if (f.config.token_file.empty() || !current) {
    log.error("SIGHUP: token not reloaded: envd was started without --token-file" + reseed);
    return current;
  }
  auto t = abx::token::read_token_file(f.config.token_file);
  if (!t.ok()) {
    log.error("SIGHUP: token not reloaded, the old one stays: " + t.error().message() + reseed);
    return current;
  }
  if (*t == *current) {
    log.info("SIGHUP: token reloaded (unchanged)" + reseed);
    return current;
  }
  if (auto s = server.set_access_token(*t); !s.ok()) {
    log.error("SIGHUP: token not reloaded: " + s.error().message() + reseed);
    return current;
  }
  if (server_sup) server_sup->restart({"ABX_ACCESS_TOKEN=" + *t});
  log.info(std::string("SIGHUP: token reloaded") +
           (server_sup ? ", restarting the command server with it" : "") + reseed);
  return std::move(*t);
}

// The init duties set up before any thread starts; returns the signals main() waits for: the
// stop signals and SIGHUP (reload_token).
sigset_t become_init() {
  // envd holds the access token and every user's requests in its memory and descriptors. Not
  // dumpable, its /proc/1/{mem,fd,environ}, ptrace and pidfd_getfd need CAP_SYS_PTRACE, which
  // the sandbox's users lack; the processes it starts become dumpable again at their exec (the
  // kernel resets the flag for an exec that changes no credentials), so they stay debuggable.
  ::prctl(PR_SET_DUMPABLE, 0);
  // Orphans of our descendants come to us (as they would to PID 1) and are reaped.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);
  // Block these before any thread starts, so only sigwait() in main receives them. (PID 1
  // ignores signals without handlers; sigwait does not need one.)
  sigset_t waited;
  sigemptyset(&waited);
  sigaddset(&waited, SIGTERM);
  sigaddset(&waited, SIGINT);
  sigaddset(&waited, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &waited, nullptr);
  return waited;
}

// The first companion abxd's init started beside envd (issue 37), for the command server's
// supervisor; none (its descriptors closed) when the flag gives no pid or there is no server.
std::optional<abx::envd::Supervisor::Started> started_companion(const Flags& f) {
  if (f.companion_fds.size() != 3) return std::nullopt;
  const auto& c = f.config;
  const bool usable = f.companion_pid > 0 && !c.server_companion_argv.empty() &&
                      (!c.server_argv.empty() || !c.server_cmd.empty());
  for (int fd : f.companion_fds) {
    if (!usable) {
      ::close(fd);
    } else {
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // the supervisor's alone, never a request's process's
    }
  }
  if (!usable) return std::nullopt;
  return abx::envd::Supervisor::Started{f.companion_pid, f.companion_fds[0], f.companion_fds[1],
                                        f.companion_fds[2]};
}

}  // namespace

// The init's order on one screen (~95 lines on purpose, as nsjail's orchestrator): configuration,
// token, the supervised user, the command server held, the API, the start command and the
// interpreter, then the signal loop and shutdown; each step's detail is a function above.
int main(int argc, char** argv) {
  using namespace abx;
  Flags f;
  if (auto code = parse_flags(argc, argv, f)) return *code;
  Logger log("envd");
  const envd::EnvdConfig& cfg = f.config;
  envd::EnvdOptions opt;
  opt.host = cfg.host;
  opt.port = cfg.port;
  opt.default_user = cfg.default_user;
  opt.default_workdir = cfg.default_workdir;
  opt.max_upload_bytes = cfg.max_upload_bytes;
  if (!load_token(f, opt)) return kExitConfig;
  sigset_t waited = become_init();

  envd::ensure_hosts_entry();  // before anything resolves this sandbox's hostname (sudo)
  envd::Users users(opt.default_user, {});
  std::optional<envd::Supervisor> start_sup, server_sup, interp_sup;
  std::optional<envd::User> user;  // the default user, when anything is supervised
  if (!cfg.start_cmd.empty() || !cfg.server_cmd.empty() || !cfg.server_argv.empty() ||
      !cfg.interpreter_argv.empty()) {
    auto u = users.resolve("");
    if (!u.ok()) {
      std::cerr << "abx-envd: " << u.error().message() << "\n";
      return kExitConfig;
    }
    user = *u;
  }
  // The command server's supervisor comes before envd's own API, held until the API listens:
  // only its companion starts now — a Python module's interpreter, the slowest piece of a
  // create (issue 37) — and the server itself after the API, as before.
  //
  // The command server checks the same token as envd, and the token opens envd to anyone as
  // anyone (root included): the default user must never be able to read it. The token file is
  // root's alone (0400), so envd reads it and hands it over in the server's environment (no
  // shell or file access needed in the image). A process's environment, memory and
  // descriptors are open to every process of its uid while it is dumpable, and a process is
  // dumpable from its exec until it calls prctl itself: a server running as the default user
  // could be read (or ptrace-attached, or have its pipe opened through /proc/<pid>/fd) in that
  // window by any of the user's processes, which can also kill it to make it start again. So
  // the server runs as the sandbox's root, whose /proc files and memory the default user can
  // never reach: its commands are called with the token, whose holder may act as root through
  // envd anyway, so root adds nothing they could not do. (abx-server also drops the variable
  // from its environment and makes itself non-dumpable.) A non-root envd runs it as itself.
  if (user && (!cfg.server_argv.empty() || !cfg.server_cmd.empty())) {
    auto server_user = users.can_switch() ? users.resolve("root") : Result<envd::User>(*user);
    if (!server_user.ok()) {
      std::cerr << "abx-envd: " << server_user.error().message() << "\n";
      return kExitConfig;
    }
    std::vector<std::string> server_env;
    if (opt.access_token) server_env.push_back("ABX_ACCESS_TOKEN=" + *opt.access_token);
    std::vector<std::string> cmd = cfg.server_argv.empty()
                                       ? std::vector<std::string>{"/bin/sh", "-c", cfg.server_cmd}
                                       : cfg.server_argv;
    server_sup.emplace(envd::Reaper::instance(), "command server", std::move(cmd), server_env,
                       *server_user, true, cfg.server_companion_argv, /*held=*/true,
                       started_companion(f));
  } else {
    started_companion(f);  // closes what abxd passed for it
  }
  auto server = envd::Envd::start(opt);
  if (!server.ok()) {
    std::cerr << "abx-envd: " << server.error().message() << "\n";
    return server.error().code() == ErrorCode::kUnavailable ? kExitListen : kExitConfig;
  }
  if (server_sup) server_sup->release();
  if (user) {
    if (!cfg.start_cmd.empty())
      start_sup.emplace(envd::Reaper::instance(), "start command", cfg.start_cmd, *user, false);
    // The code interpreter runs the user's code: as the default user, without the token (abxd's
    // proxy checks callers; the interpreter listens on the sandbox's loopback only).
    if (!cfg.interpreter_argv.empty()) {
      interp_sup.emplace(envd::Reaper::instance(), "code interpreter", cfg.interpreter_argv,
                         std::vector<std::string>{}, *user, true);
    }
  }
  std::string addr = (*server)->host() + ":" + std::to_string((*server)->port());
  std::cout << "listening on " << addr << std::endl;
  log.info("envd serving on " + addr + (opt.access_token ? " (token required)" : " (no auth)") +
           (::getpid() == 1 ? " as PID 1" : ""));

  // One thread handles the signals in order: a SIGHUP's reload is complete (the new token
  // accepted, the old one refused) before the next signal is taken.
  int sig = 0;
  std::optional<std::string> token = opt.access_token;
  while (sigwait(&waited, &sig) == 0 && sig == SIGHUP) {
    token = reload_token(f, std::move(token), **server, server_sup ? &*server_sup : nullptr, log);
  }
  log.info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
           ", forwarding it and shutting down");
  (*server)->signal_processes(SIGTERM);
  if (server_sup) server_sup->signal(SIGTERM);
  if (start_sup) start_sup->signal(SIGTERM);
  if (::getpid() == 1) ::kill(-1, SIGTERM);  // everything else in the sandbox
  server_sup.reset();
  start_sup.reset();
  interp_sup.reset();
  (*server)->shutdown(std::chrono::seconds(2));
  return kExitOk;
}
