// abx run <id> <command> -a name=value … [--json] [--module lib.so]
//
// Finds the command by discovery (remote GET /commands, the template's custom commands, local
// modules), converts every -a value to its declared type, then runs it: a registered command
// on the command server (prints the result; --json prints {"result": …}), a custom command
// through commands.run (streams its output and exits with its code).
#include <boost/json.hpp>
#include <iostream>

#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

struct RunOpts {
  std::string id, command;
  std::vector<std::string> args, modules;
};

int run(Context& ctx, const RunOpts& o) {
  auto sbx = ctx.open_sandbox(o.id);
  if (!sbx.ok()) return ctx.fail(sbx.error());
  auto cmds = sbx->list_commands({.modules = o.modules});
  if (!cmds.ok()) return ctx.fail(cmds.error());
  const client::CommandEntry* entry = nullptr;
  std::string names;
  for (const auto& e : *cmds) {
    if (e.name == o.command) entry = &e;
    names += (names.empty() ? "" : ", ") + e.name;
  }
  if (entry == nullptr) {
    return ctx.fail(not_found("sandbox " + o.id + " has no command '" + o.command +
                              "' (available: " + (names.empty() ? "none" : names) + ")"));
  }
  auto kwargs = parse_command_args(*entry, o.args);
  if (!kwargs.ok()) return ctx.fail(kwargs.error());

  if (entry->source == client::CommandSource::kYaml) {
    client::CommandOptions opts;
    opts.timeout = std::chrono::milliseconds(0);
    if (!ctx.flags.json) {
      opts.on_stdout = [](std::string_view d) {
        std::cout.write(d.data(), static_cast<std::streamsize>(d.size())).flush();
      };
      opts.on_stderr = [](std::string_view d) {
        std::cerr.write(d.data(), static_cast<std::streamsize>(d.size())).flush();
      };
    }
    auto r = sbx->run(o.command, *kwargs, opts);
    if (!r.ok()) return ctx.fail(r.error());
    if (ctx.flags.json) {
      ctx.print_json(json::object{{"result", json::object{{"exit_code", r->exit_code},
                                                          {"stdout", r->stdout_data},
                                                          {"stderr", r->stderr_data}}}});
    }
    return r->exit_code;
  }
  auto r = sbx->server().call_raw(o.command, *kwargs);
  if (!r.ok()) return ctx.fail(r.error());
  if (ctx.flags.json) {
    ctx.print_json(*r);
  } else {
    const auto& v = r->at("result");
    if (v.is_string())
      std::cout << v.as_string().c_str() << "\n";
    else
      std::cout << json_text(v) << "\n";
  }
  return kExitOk;
}

void fill_run(CLI::App* sub, Context& ctx) {
  auto o = std::make_shared<RunOpts>();
  add_sandbox_arg(*sub, o->id);
  sub->add_option("command", o->command, "Command name (see `abx commands list <id>`)")->required();
  sub->add_option("-a,--arg", o->args, "Argument NAME=VALUE (repeatable)")->allow_extra_args(false);
  sub->add_option("--module", o->modules,
                  "Also discover commands of this local module (.so, or a Python module .py)")
      ->allow_extra_args(false);
  sub->callback([&ctx, o] { ctx.exit_code = run(ctx, *o); });
}

}  // namespace

const TopCommand kRunCommand{
    "run", nullptr,
    "Run a command in a sandbox: a registered command on its command server, or a "
    "template custom command. Values are converted to the declared argument types.",
    fill_run};

}  // namespace abx::cli
