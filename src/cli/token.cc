// abx token create <id> --command demo [--command …] [--ttl 1h]
#include <boost/json.hpp>
#include <iostream>

#include "cli.h"

namespace abx::cli {

namespace {

struct TokenOpts {
  std::string id, ttl = "1h";
  std::vector<std::string> commands;
};

int create(Context& ctx, const TokenOpts& o) {
  auto ttl = parse_duration(o.ttl);
  if (!ttl.ok()) return ctx.fail(ttl.error());
  auto sbx = ctx.open_sandbox(o.id);
  if (!sbx.ok()) return ctx.fail(sbx.error());
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

}  // namespace

void add_token(CLI::App& app, Context& ctx) {
  auto* tok = app.add_subcommand("token", "Scoped access tokens for a sandbox's command server");
  tok->require_subcommand(1);
  auto o = std::make_shared<TokenOpts>();
  auto* c = add_sandbox_subcommand(
      *tok, "create", "Mint a token that can discover and run only the given commands", o->id);
  c->add_option("--command", o->commands, "A command the token may run (repeatable)")
      ->allow_extra_args(false)
      ->required();
  c->add_option("--ttl", o->ttl, "Lifetime: 90s, 30m, 1h, 2d")->capture_default_str();
  c->callback([&ctx, o] { ctx.exit_code = create(ctx, *o); });
}

}  // namespace abx::cli
