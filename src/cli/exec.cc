// abx exec [-i] [-t] <id> [--cwd D] [--env K=V]… [--user U] [--timeout 0] [--json] -- cmd args…
//
// `abx exec ID 'a | b'` (one argument with spaces or shell syntax) runs a command line in the
// image's shell (/bin/bash -l -c, envd's /bin/sh where there is no bash); `abx exec ID -- prog
// arg…` (or one plain word) runs the program itself with those arguments, no shell, as docker
// exec does — the one form that works in an image without any shell.
//
// Streams stdout/stderr as they arrive and exits with the command's exit code; when abx itself
// fails (cannot reach the sandbox, auth, capability) it exits 125, like `docker exec`.
//
// -i streams our stdin to the process (Process/SendInput) and closes its stdin at our EOF
// (CloseStdin). -t runs it on a pseudo-terminal of our terminal's size: the local terminal is in
// raw mode while it runs (restored on every way out, signals included), keystrokes go as pty
// input and SIGWINCH resizes the remote terminal (Process/Update). One thread does both: it polls
// stdin and a self-pipe the SIGWINCH handler writes to.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

#include "abx/base/os.h"
#include "cli.h"

namespace abx::cli {

namespace {

struct ExecOpts {
  std::string id, cwd, user, timeout = "0";
  std::vector<std::string> envs, argv;
  bool interactive = false, tty = false;
};

// The local terminal's state before raw mode, restored by the guard, atexit and the signal
// handlers (tcsetattr is async-signal-safe).
termios g_saved_termios;
volatile sig_atomic_t g_raw = 0;
int g_winch_pipe[2] = {-1, -1};

void restore_terminal() {
  if (g_raw) {
    ::tcsetattr(STDIN_FILENO, TCSADRAIN, &g_saved_termios);
    g_raw = 0;
  }
}

void on_fatal_signal(int sig) {
  restore_terminal();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void on_winch(int) {
  int saved = errno;
  char c = 'w';
  [[maybe_unused]] auto n = ::write(g_winch_pipe[1], &c, 1);
  errno = saved;
}

class RawTerminal {
 public:
  RawTerminal() {
    if (::tcgetattr(STDIN_FILENO, &g_saved_termios) != 0) return;
    termios raw = g_saved_termios;
    ::cfmakeraw(&raw);
    for (int s : {SIGTERM, SIGHUP, SIGQUIT, SIGINT}) ::signal(s, on_fatal_signal);
    std::atexit(restore_terminal);
    if (::tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) == 0) g_raw = 1;
  }
  ~RawTerminal() { restore_terminal(); }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
};

client::PtySize terminal_size() {
  client::PtySize size;
  winsize ws{};
  for (int fd : {STDIN_FILENO, STDOUT_FILENO}) {
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      size.cols = ws.ws_col;
      size.rows = ws.ws_row;
      break;
    }
  }
  return size;
}

// Forwards stdin (with -i) and window-size changes (with -t) until `stop`.
void pump_input(client::CommandHandle& h, const ExecOpts& o, const std::atomic<bool>& stop) {
  bool stdin_open = o.interactive;
  char buf[16 * 1024];
  while (!stop.load()) {
    pollfd fds[2] = {{stdin_open ? STDIN_FILENO : -1, POLLIN, 0}, {g_winch_pipe[0], POLLIN, 0}};
    int n = os::retry_eintr([&] { return ::poll(fds, 2, 100); });
    if (n < 0) return;
    if (n == 0) continue;
    if (fds[1].revents & POLLIN) {
      char drain[64];
      [[maybe_unused]] auto r = ::read(g_winch_pipe[0], drain, sizeof drain);
      (void)h.resize(terminal_size());
    }
    if (stdin_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = os::retry_eintr([&] { return ::read(STDIN_FILENO, buf, sizeof buf); });
      if (r < 0 && errno == EAGAIN) continue;
      if (r <= 0) {
        stdin_open = false;
        (void)h.close_stdin();  // EOF: the process sees its stdin end
        continue;
      }
      std::string_view data(buf, static_cast<std::size_t>(r));
      Status st = o.tty ? h.send_pty(data) : h.send_stdin(data);
      if (!st.ok()) stdin_open = false;  // the process ended or closed its input
    }
  }
}

// A word the shell would pass on unchanged: no whitespace, quotes, expansions or operators.
bool plain_word(std::string_view w) {
  if (w.empty()) return false;
  for (unsigned char c : w) {
    if (!(std::isalnum(c) || std::strchr("_./-+,:@%^", c) != nullptr)) return false;
  }
  return true;
}

int exec(Context& ctx, const ExecOpts& o) {
  auto fail = [&](const Error& e) {
    ctx.fail(e);
    return kExitExecFailed;
  };
  if (o.argv.empty()) return fail(invalid_argument("nothing to run: abx exec <id> -- cmd args…"));
  if (o.tty && !::isatty(STDIN_FILENO)) {
    return fail(invalid_argument("-t needs a terminal on stdin (drop -t to pipe input with -i)"));
  }
  if (o.tty && ctx.flags.json) return fail(invalid_argument("-t and --json do not go together"));
  auto t = parse_duration(o.timeout);
  if (!t.ok()) return fail(t.error());
  auto envs = parse_pairs(o.envs, "--env");
  if (!envs.ok()) return fail(envs.error());
  auto sbx = ctx.open_sandbox(o.id);
  if (!sbx.ok()) return fail(sbx.error());
  // One argument with spaces or shell syntax is a command line for the image's shell; otherwise
  // the words are the program and its arguments, run without a shell (docs/cli.md).
  const bool shell = o.argv.size() == 1 && !plain_word(o.argv[0]);
  client::CommandOptions opts;
  opts.cwd = o.cwd;
  opts.user = o.user;
  opts.envs = *envs;
  opts.timeout = *t;
  opts.stdin = o.interactive;
  if (o.tty) opts.pty = terminal_size();
  if (!ctx.flags.json) {  // --json collects the output into one document instead
    opts.on_stdout = [](std::string_view d) { write_all(STDOUT_FILENO, d); };
    opts.on_stderr = [](std::string_view d) { write_all(STDERR_FILENO, d); };
  }

  std::optional<RawTerminal> raw;
  if (o.tty) {
    if (::pipe2(g_winch_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      return fail(internal_error("pipe: " + std::string(std::strerror(errno))));
    }
    ::signal(SIGWINCH, on_winch);
    raw.emplace();
  }
  auto h =
      shell ? sbx->commands().start(o.argv[0], opts) : sbx->commands().start_argv(o.argv, opts);
  if (!h.ok()) {
    raw.reset();
    return fail(h.error());
  }
  std::atomic<bool> stop{false};
  std::thread input;
  if (o.interactive || o.tty) input = std::thread([&] { pump_input(*h, o, stop); });
  auto r = h->wait();
  stop = true;
  if (input.joinable()) input.join();
  raw.reset();
  if (!r.ok()) return fail(r.error());
  if (ctx.flags.json) {
    ctx.print_json(boost::json::object{
        {"exitCode", r->exit_code}, {"stdout", r->stdout_data}, {"stderr", r->stderr_data}});
  }
  return r->exit_code;
}

void fill_exec(CLI::App* sub, Context& ctx) {
  auto o = std::make_shared<ExecOpts>();
  add_sandbox_arg(*sub, o->id);
  sub->add_option("command", o->argv, "Command and arguments (after --)")->required();
  sub->add_flag("-i,--interactive", o->interactive,
                "Stream stdin to the command; EOF closes its stdin");
  sub->add_flag("-t,--tty", o->tty,
                "Run on a pseudo-terminal of this terminal's size (raw mode while it runs)");
  sub->add_option("--cwd", o->cwd, "Working directory");
  sub->add_option("--user", o->user, "User to run as");
  sub->add_option("--env", o->envs, "Environment KEY=VALUE (repeatable)")->allow_extra_args(false);
  sub->add_option("--timeout", o->timeout, "Kill after this long (0: never)")
      ->capture_default_str();
  sub->callback([&ctx, o] { ctx.exit_code = exec(ctx, *o); });
}

}  // namespace

const TopCommand kExecCommand{
    "exec", nullptr,
    "Run a command in a sandbox, streaming its output; exits with its code (125 when abx "
    "itself fails). --json: one {\"exitCode\",\"stdout\",\"stderr\"} object at the end",
    fill_exec};

}  // namespace abx::cli
