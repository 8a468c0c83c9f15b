// abx commands list [<id>] [--template T] [--module lib.so] [--json]
//
// Without a sandbox id: Layer 1 only (local template custom commands and modules, no network).
// With one: the sandbox's merged discovery (remote GET /commands, template, modules).
#include <boost/json.hpp>
#include <iostream>

#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

struct ListOpts {
  std::string id;
  std::vector<std::string> modules;
};

std::string describe_args(const client::CommandEntry& e) {
  std::string s;
  for (const auto& a : e.args) {
    if (!s.empty()) s += " ";
    s += a.name + ":" + std::string(client::arg_type_name(a.type));
    if (!a.default_value.is_null())
      s += "=" + json_text(a.default_value);
    else if (!a.required)
      s += "?";
  }
  return s;
}

int list(Context& ctx, const ListOpts& o) {
  Result<std::vector<client::CommandEntry>> cmds = std::vector<client::CommandEntry>{};
  if (o.id.empty()) {
    if (ctx.flags.template_id.empty() && o.modules.empty())
      return ctx.usage("give a sandbox id, --template or --module");
    cmds = client::discover_local(ctx.config(), ctx.flags.template_id, o.modules);
  } else {
    auto sbx = ctx.open_sandbox(o.id);
    if (!sbx.ok()) return ctx.fail(sbx.error());
    cmds = sbx->list_commands({.modules = o.modules});
  }
  if (!cmds.ok()) return ctx.fail(cmds.error());
  if (ctx.flags.json) {
    json::array a;
    for (const auto& e : *cmds) a.push_back(client::to_json(e));
    ctx.print_json(json::object{{"commands", std::move(a)}});
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : *cmds) {
    rows.push_back({e.name, std::string(client::command_source_name(e.source)), describe_args(e),
                    e.description});
  }
  print_table({"NAME", "SOURCE", "ARGS", "DESCRIPTION"}, rows);
  return kExitOk;
}

void fill_commands(CLI::App* cmds, Context& ctx) {
  cmds->require_subcommand(1);
  auto o = std::make_shared<ListOpts>();
  auto* ls = cmds->add_subcommand(
      "list",
      "List commands with typed arguments. Without a sandbox id only local sources are "
      "read (--template, --module); with one, the sandbox's command server too.");
  ls->add_option("sandbox", o->id, "Sandbox id");
  ls->add_option(
        "--module", o->modules,
        "Introspect a command module (.so, or a Python module .py run by python3); repeatable")
      ->allow_extra_args(false);
  ls->callback([&ctx, o] { ctx.exit_code = list(ctx, *o); });
}

}  // namespace

const TopCommand kCommandsCommand{"commands", nullptr, "Discover commands (local and remote)",
                                  fill_commands};

}  // namespace abx::cli
