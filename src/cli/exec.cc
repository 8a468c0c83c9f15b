// abx exec <id> [--cwd D] [--env K=V] [--user U] [--timeout 0] -- cmd args…
//
// Streams stdout/stderr as they arrive and exits with the command's exit code; when abx itself
// fails (cannot reach the sandbox, auth, capability) it exits 125, like `docker run`.
#include <iostream>

#include "abx/templates/template.h"
#include "cli.h"

namespace abx::cli {

namespace {

struct ExecOpts {
  std::string id, cwd, user, timeout = "0";
  std::vector<std::string> envs, argv;
};

int exec(Context& ctx, const ExecOpts& o) {
  auto fail = [&](const Error& e) {
    ctx.fail(e);
    return kExitExecFailed;
  };
  if (o.argv.empty()) {
    ctx.usage("nothing to run: abx exec <id> -- cmd args…");
    return kExitExecFailed;
  }
  auto t = parse_duration(o.timeout);
  if (!t.ok()) return fail(t.error());
  auto envs = parse_pairs(o.envs, "--env");
  if (!envs.ok()) return fail(envs.error());
  auto sbx = ctx.open_sandbox(o.id);
  if (!sbx.ok()) return fail(sbx.error());
  // One argument is a shell command line as typed; several are quoted word by word.
  std::string cmd;
  if (o.argv.size() == 1) {
    cmd = o.argv[0];
  } else {
    for (const auto& a : o.argv) cmd += (cmd.empty() ? "" : " ") + templates::shell_quote(a);
  }
  client::CommandOptions opts;
  opts.cwd = o.cwd;
  opts.user = o.user;
  opts.envs = *envs;
  opts.timeout = *t;
  opts.on_stdout = [](std::string_view d) {
    std::cout.write(d.data(), static_cast<std::streamsize>(d.size())).flush();
  };
  opts.on_stderr = [](std::string_view d) {
    std::cerr.write(d.data(), static_cast<std::streamsize>(d.size())).flush();
  };
  auto r = sbx->commands().run(cmd, opts);
  if (!r.ok()) return fail(r.error());
  return r->exit_code;
}

}  // namespace

void add_exec(CLI::App& app, Context& ctx) {
  auto o = std::make_shared<ExecOpts>();
  auto* sub = add_sandbox_subcommand(
      app, "exec",
      "Run a shell command in a sandbox, streaming its output; exits with its code "
      "(125 when abx itself fails)",
      o->id);
  sub->add_option("command", o->argv, "Command and arguments (after --)")->required();
  sub->add_option("--cwd", o->cwd, "Working directory");
  sub->add_option("--user", o->user, "User to run as");
  sub->add_option("--env", o->envs, "Environment KEY=VALUE (repeatable)");
  sub->add_option("--timeout", o->timeout, "Kill after this long (0: never)")
      ->capture_default_str();
  sub->callback([&ctx, o] { ctx.exit_code = exec(ctx, *o); });
}

}  // namespace abx::cli
