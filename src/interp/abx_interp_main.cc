// `abx-interp`: the code interpreter of a sandbox (service.h) — E2B's code-interpreter API on
// port 49999, Jupyter kernels behind it. Runs until SIGTERM/SIGINT.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "abx/base/log.h"
#include "abx/interp/service.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitListen = 4;

// "--python 'python3 -m ipykernel_launcher -f {connection_file}'": split on spaces (no quoting;
// the argv of a kernel has no spaces in practice).
std::vector<std::string> split_argv(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace abx;
  interp::ServiceOptions opt;
  std::string python = "python3 -m ipykernel_launcher -f {connection_file}";
  std::string log_level;
  CLI::App app{
      "abx-interp: the sandbox's code interpreter. Serves E2B's code-interpreter API (POST\n"
      "/execute, /contexts) on Jupyter kernels, so @e2b/code-interpreter and abx run_code keep\n"
      "state between calls. See docs/code-interpreter.md."};
  app.set_version_flag("--version", std::string("abx-interp ") + ABX_VERSION);
  app.add_option("--host", opt.host, "Address to listen on")->capture_default_str();
  app.add_option("--port,-p", opt.port, "Port to listen on (0 picks a free one)")
      ->capture_default_str();
  app.add_option("--python", python,
                 "How a Python kernel starts; {connection_file} is replaced by its connection file")
      ->capture_default_str();
  app.add_option("--cwd", opt.default_cwd,
                 "Working directory of the default context (default $HOME)");
  app.add_option("--max-contexts", opt.max_contexts, "Most contexts at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  bool lazy_kernel = false;
  app.add_flag("--lazy-kernel", lazy_kernel,
               "Start the default context's kernel on its first execution, not at start");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (!log_level.empty() && !set_log_level(log_level)) {
    std::cerr << "abx-interp: unknown --log-level " << log_level << "\n";
    return kExitUsage;
  }
  opt.start_default_kernel = !lazy_kernel;
  opt.python_argv = split_argv(python);
  if (opt.python_argv.empty()) {
    std::cerr << "abx-interp: --python is empty\n";
    return kExitUsage;
  }
  // Block the stop signals before any thread starts, so only sigwait() receives them (kernels
  // get a clean signal mask of their own when they start).
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  Logger log("interp");
  auto service = interp::Service::start(opt);
  if (!service.ok()) {
    std::cerr << "abx-interp: " << service.error().message() << "\n";
    return kExitListen;
  }
  std::cout << "listening on " << opt.host << ":" << (*service)->port() << std::endl;
  log.info("code interpreter serving on " + opt.host + ":" + std::to_string((*service)->port()));
  int sig = 0;
  sigwait(&stop, &sig);
  log.info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
           ", stopping kernels");
  (*service)->shutdown(std::chrono::seconds(2));
  std::fflush(nullptr);
  std::_Exit(0);
}
