// abx-envd: flags, init duties (PID 1) and the envd server.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/json/parse.hpp>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "abx/base/log.h"
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
  abx::envd::EnvdOptions opt;
  std::string token_file, start_cmd, server_cmd, server_argv_json, interp_argv_json, log_level;
  std::string companion_argv_json;
  std::vector<std::string> server_argv;     // parsed from server_argv_json
  std::vector<std::string> companion_argv;  // parsed from companion_argv_json
  std::vector<std::string> interp_argv;     // parsed from interp_argv_json
};

// A JSON array of strings (an argv) into `out`; false (with a message) when it is not one.
bool parse_argv_json(const std::string& text, const char* flag, std::vector<std::string>& out) {
  if (text.empty()) return true;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  bool ok = !ec && v.is_array() && !v.as_array().empty();
  if (ok) {
    for (const auto& a : v.as_array()) {
      if (!a.is_string()) {
        ok = false;
        break;
      }
      out.emplace_back(a.as_string());
    }
  }
  if (!ok || out[0].empty()) {
    std::cerr << "abx-envd: " << flag
              << " must be a non-empty JSON array of strings, e.g. "
                 "[\"/opt/abx/bin/abx-server\",\"--port\",\"8080\"]\n";
    return false;
  }
  return true;
}

// --server-argv and --interpreter-argv; false (with a message) when either is malformed.
bool parse_server_argv(Flags& f) {
  if (!parse_argv_json(f.server_argv_json, "--server-argv", f.server_argv)) return false;
  if (!parse_argv_json(f.interp_argv_json, "--interpreter-argv", f.interp_argv)) return false;
  if (!parse_argv_json(f.companion_argv_json, "--server-companion-argv", f.companion_argv))
    return false;
  if (!f.server_argv.empty() && !f.server_cmd.empty()) {
    std::cerr << "abx-envd: give --server-cmd or --server-argv, not both\n";
    return false;
  }
  if (!f.companion_argv.empty() && f.server_argv.empty()) {
    std::cerr << "abx-envd: --server-companion-argv needs --server-argv\n";
    return false;
  }
  return true;
}

// Parses the command line; an exit code when abx-envd should stop there (--help, bad usage).
std::optional<int> parse_flags(int argc, char** argv, Flags& f) {
  CLI::App app{
      "abx-envd: the sandbox daemon (PID 1). Serves the envd-compatible API (health, /files, "
      "Connect process.Process and filesystem.Filesystem), reaps zombies, forwards SIGTERM and "
      "supervises the template's start command and command server.\n"
      "Exit codes: 0 ok, 2 usage, 3 configuration, 4 cannot listen."};
  app.set_version_flag("--version", std::string("abx-envd ") + ABX_VERSION);
  app.add_option("--port,-p", f.opt.port, "Port to listen on (0 picks a free one)")
      ->capture_default_str();
  app.add_option("--host", f.opt.host, "Address to listen on")->capture_default_str();
  app.add_option("--token-file", f.token_file,
                 "Read the access token (X-Access-Token) from this file, again on SIGHUP; else "
                 "ABX_ACCESS_TOKEN; else no auth");
  app.add_option("--start-cmd", f.start_cmd, "Run once at start (/bin/sh -c), as the default user");
  app.add_option("--server-cmd", f.server_cmd,
                 "Command server to keep running (/bin/sh -c); restarted with backoff on exit");
  app.add_option("--server-argv", f.server_argv_json,
                 "The command server as a JSON array of strings, executed directly (searched in "
                 "$PATH without a '/'; no shell needed in the image); restarted with backoff");
  app.add_option("--server-companion-argv", f.companion_argv_json,
                 "A process started (JSON array of strings, as --server-argv) just before each "
                 "run of the command server, connected to it by a socketpair on descriptor 3 of "
                 "both, without the server's token; killed when the server exits (abx-server's "
                 "Python worker, docs/python.md)");
  app.add_option("--interpreter-argv", f.interp_argv_json,
                 "The code interpreter (abx-interp) as a JSON array of strings, run as the default "
                 "user and restarted with backoff");
  app.add_option("--default-user", f.opt.default_user, "User for requests that name none")
      ->capture_default_str();
  app.add_option("--max-upload", f.opt.max_upload_bytes, "Largest POST /files body in bytes")
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error or off");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (!f.log_level.empty() && !abx::set_log_level(f.log_level)) {
    std::cerr << "abx-envd: unknown --log-level '" << f.log_level << "'\n";
    return kExitUsage;
  }
  return std::nullopt;
}

// The access token from --token-file, else ABX_ACCESS_TOKEN, else none; false: unreadable file.
bool load_token(Flags& f) {
  if (!f.token_file.empty()) {
    auto t = abx::token::read_token_file(f.token_file);
    if (!t.ok()) {
      std::cerr << "abx-envd: " << t.error().message() << "\n";
      return false;
    }
    f.opt.access_token = std::move(*t);
  } else if (const char* env = std::getenv("ABX_ACCESS_TOKEN"); env && *env) {
    f.opt.access_token = env;
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
  if (f.token_file.empty() || !current) {
    log.error("SIGHUP: token not reloaded: envd was started without --token-file" + reseed);
    return current;
  }
  auto t = abx::token::read_token_file(f.token_file);
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

}  // namespace

int main(int argc, char** argv) {
  using namespace abx;
  Flags f;
  if (auto code = parse_flags(argc, argv, f)) return *code;
  Logger log("envd");
  if (!parse_server_argv(f)) return kExitUsage;
  if (!load_token(f)) return kExitConfig;
  const envd::EnvdOptions& opt = f.opt;
  sigset_t waited = become_init();

  envd::ensure_hosts_entry();  // before anything resolves this sandbox's hostname (sudo)
  envd::Users users(opt.default_user, {});
  std::optional<envd::Supervisor> start_sup, server_sup, interp_sup;
  std::optional<envd::User> user;  // the default user, when anything is supervised
  if (!f.start_cmd.empty() || !f.server_cmd.empty() || !f.server_argv.empty() ||
      !f.interp_argv.empty()) {
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
  if (user && (!f.server_argv.empty() || !f.server_cmd.empty())) {
    auto server_user = users.can_switch() ? users.resolve("root") : Result<envd::User>(*user);
    if (!server_user.ok()) {
      std::cerr << "abx-envd: " << server_user.error().message() << "\n";
      return kExitConfig;
    }
    std::vector<std::string> server_env;
    if (opt.access_token) server_env.push_back("ABX_ACCESS_TOKEN=" + *opt.access_token);
    std::vector<std::string> cmd = f.server_argv.empty()
                                       ? std::vector<std::string>{"/bin/sh", "-c", f.server_cmd}
                                       : f.server_argv;
    server_sup.emplace(envd::Reaper::instance(), "command server", std::move(cmd), server_env,
                       *server_user, true, f.companion_argv, /*held=*/true);
  }
  auto server = envd::Envd::start(opt);
  if (!server.ok()) {
    std::cerr << "abx-envd: " << server.error().message() << "\n";
    return server.error().code() == ErrorCode::kUnavailable ? kExitListen : kExitConfig;
  }
  if (server_sup) server_sup->release();
  if (user) {
    if (!f.start_cmd.empty())
      start_sup.emplace(envd::Reaper::instance(), "start command", f.start_cmd, *user, false);
    // The code interpreter runs the user's code: as the default user, without the token (abxd's
    // proxy checks callers; the interpreter listens on the sandbox's loopback only).
    if (!f.interp_argv.empty()) {
      interp_sup.emplace(envd::Reaper::instance(), "code interpreter", f.interp_argv,
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
