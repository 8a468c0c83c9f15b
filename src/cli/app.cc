// The abx command line: global flags, subcommands, parse errors → exit 2.
#include <csignal>
#include <iostream>

#include "cli.h"

namespace abx::cli {

void add_mcp(CLI::App& app, Context& ctx);  // mcp.cc: `abx mcp` (stdio MCP server)

int run_main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  Context ctx;
  CLI::App app{
      "abx: local-first agent sandboxes. Create sandboxes, run processes and registered "
      "commands, move files, discover commands.\n"
      "Configuration: ABX_API_URL, ABX_API_KEY, ABX_DOMAIN (or E2B_*), ABX_HOME; flags below "
      "override them.\n"
      "Exit codes: 0 ok, 1 error, 2 usage or bad command arguments, 3 auth, 4 not found, "
      "5 unreachable or timed out, 6 missing capability or wrong state; `abx exec` and custom "
      "commands exit with the command's code (exec: 125 when abx itself fails).",
      "abx"};
  app.set_version_flag("--version", std::string("abx ") + ABX_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  auto& f = ctx.flags;
  app.add_flag("--json", f.json, "Machine-readable JSON output");
  app.add_option("--api-url", f.api_url, "Control plane URL (ABX_API_URL)");
  app.add_option("--api-key", f.api_key, "API key (ABX_API_KEY)");
  app.add_option("--domain", f.domain, "Sandbox domain (ABX_DOMAIN)");
  app.add_option("--sandbox-url", f.sandbox_url, "envd URL for every sandbox (ABX_SANDBOX_URL)");
  app.add_option("--server-url", f.server_url, "Command server URL (ABX_SERVER_URL)");
  app.add_option("--access-token", f.access_token,
                 "Sandbox access token; with --server-url/--sandbox-url: direct mode, no "
                 "control plane (ABX_ACCESS_TOKEN)");
  app.add_option("--home", f.home, "Local templates root (ABX_HOME, default ~/.abx)");
  app.add_option("--template", f.template_id, "Template id for local discovery / direct mode");

  add_sandbox(app, ctx);
  add_exec(app, ctx);
  add_files(app, ctx);
  add_template(app, ctx);
  add_commands(app, ctx);
  add_run(app, ctx);
  add_token(app, ctx);
  add_up(app, ctx);
  add_completion(app, ctx);
  add_mcp(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  return ctx.exit_code;
}

}  // namespace abx::cli
