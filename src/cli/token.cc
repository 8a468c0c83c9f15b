// abx token create <id> --command demo [--command …] [--ttl 1h]
#include <boost/json.hpp>
#include <iostream>
#include <set>

#include "cli.h"

namespace abx::cli {

namespace {

struct TokenOpts {
  std::string id, ttl = "1h";
  std::vector<std::string> commands;
  bool no_check = false;
};

// Every name must be one the sandbox's command server serves (its GET /commands): a token for a
// misspelt command would mint fine and then open nothing.
Status check_commands(client::Sandbox& sbx, const std::vector<std::string>& names) {
  auto served = sbx.server().list();
  if (!served.ok()) {
    return Error(served.error().code(),
                 "cannot check the command names against sandbox " + sbx.id() +
                     "'s command server (GET /commands): " + served.error().message() +
                     " (--no-check mints the token without checking)");
  }
  std::set<std::string> known;
  for (const auto& c : *served) known.insert(c.name);
  for (const auto& n : names) {
    if (known.count(n)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    return not_found("sandbox " + sbx.id() + " serves no command '" + n +
                     "'; its commands: " + (list.empty() ? "(none)" : list));
  }
  return {};
}

int create(Context& ctx, const TokenOpts& o) {
  auto ttl = parse_duration(o.ttl);
  if (!ttl.ok()) return ctx.fail(ttl.error());
  auto sbx = ctx.open_sandbox(o.id);
  if (!sbx.ok()) return ctx.fail(sbx.error());
  if (!o.no_check) {
    if (auto st = check_commands(*sbx, o.commands); !st.ok()) return ctx.fail(st.error());
  }
  auto tok = sbx->scoped_token(o.commands, *ttl);
  if (!tok.ok()) return ctx.fail(tok.error());
  if (ctx.flags.json) {
    boost::json::array cmds;
    for (const auto& c : o.commands) cmds.emplace_back(c);
    ctx.print_json(boost::json::object{
        {"token", *tok}, {"commands", std::move(cmds)}, {"ttlSeconds", ttl->count()}});
  } else {
    std::cout << *tok << "\n";
  }
  return kExitOk;
}

void fill_token(CLI::App* tok, Context& ctx) {
  tok->require_subcommand(1);
  auto o = std::make_shared<TokenOpts>();
  auto* c = add_sandbox_subcommand(
      *tok, "create", "Mint a token that can discover and run only the given commands", o->id);
  c->add_option("--command", o->commands, "A command the token may run (repeatable)")
      ->allow_extra_args(false)
      ->required();
  c->add_option("--ttl", o->ttl, "Lifetime: 90s, 30m, 1h, 2d")->capture_default_str();
  c->add_flag("--no-check", o->no_check,
              "Do not check the names against the command server's GET /commands");
  c->callback([&ctx, o] { ctx.exit_code = create(ctx, *o); });
}

}  // namespace

const TopCommand kTokenCommand{"token", nullptr,
                               "Scoped access tokens for a sandbox's command server", fill_token};

}  // namespace abx::cli
