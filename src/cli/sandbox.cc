// abx sandbox create|list|info|kill|timeout|connect|pause|resume|fork|snapshot|network
#include <boost/json.hpp>
#include <iostream>
#include <optional>

#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

struct SandboxOpts {
  std::string id, template_id = "base", timeout = "300", state, limit;
  std::string fork_timeout, name;  // fork --timeout (empty: the platform's default), --name
  int count = 1;
  std::vector<std::string> ids, envs, metadata, allow_out, deny_out;
  bool no_internet = false;
};

void print_info(const Context& ctx, const client::SandboxInfo& i) {
  if (ctx.flags.json) {
    ctx.print_json(i.to_json());
    return;
  }
  std::vector<std::vector<std::string>> rows = {{"id", i.sandbox_id}, {"template", i.template_id},
                                                {"state", i.state},   {"started", i.started_at},
                                                {"ends", i.end_at},   {"envd", i.envd_version},
                                                {"domain", i.domain}};
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (i.allow_internet_access) {
    rows.push_back({"internet", *i.allow_internet_access ? "allowed" : "denied"});
    rows.push_back({"allowOut", join(i.allow_out)});
    rows.push_back({"denyOut", join(i.deny_out)});
  }
  for (const auto& r : rows) {
    if (!r[1].empty())
      std::cout << r[0] << ":" << std::string(10 - r[0].size(), ' ') << r[1] << "\n";
  }
}

int create(Context& ctx, const SandboxOpts& o) {
  client::CreateOptions co;
  auto t = parse_duration(o.timeout);
  if (!t.ok()) return ctx.fail(t.error());
  if (t->count() <= 0) {
    return ctx.fail(
        invalid_argument("--timeout must be at least 1s: a sandbox with no lifetime "
                         "would be removed as soon as it is created"));
  }
  co.timeout = *t;
  auto envs = parse_pairs(o.envs, "--env");
  if (!envs.ok()) return ctx.fail(envs.error());
  auto md = parse_pairs(o.metadata, "--metadata");
  if (!md.ok()) return ctx.fail(md.error());
  co.envs = *envs;
  co.metadata = *md;
  co.allow_out = o.allow_out;
  co.deny_out = o.deny_out;
  co.allow_internet_access = !o.no_internet;
  if (!ctx.flags.json) std::cerr << "creating a sandbox from template " << o.template_id << "…\n";
  auto s = client::Sandbox::create(o.template_id, co, ctx.config());
  if (!s.ok()) return ctx.fail(s.error());
  if (ctx.flags.json) {
    auto j = s->cached_info().to_json();
    j["envdAccessToken"] = s->cached_info().envd_access_token;
    ctx.print_json(j);
  } else {
    std::cout << s->id() << "\n";
  }
  return kExitOk;
}

int list(Context& ctx, const SandboxOpts& o) {
  client::ListFilters f;
  if (!o.state.empty()) {
    std::string_view rest = o.state;
    while (!rest.empty()) {
      auto c = rest.find(',');
      f.states.emplace_back(rest.substr(0, c));
      if (c == std::string_view::npos) break;
      rest.remove_prefix(c + 1);
    }
  }
  auto md = parse_pairs(o.metadata, "--metadata");
  if (!md.ok()) return ctx.fail(md.error());
  f.metadata = *md;
  if (!o.limit.empty()) {
    try {
      f.limit = std::stoi(o.limit);
    } catch (const std::exception&) {
      return ctx.usage("--limit must be a number");
    }
  }
  auto l = client::Sandbox::list(f, ctx.config());
  if (!l.ok()) return ctx.fail(l.error());
  if (ctx.flags.json) {
    json::array a;
    for (const auto& i : *l) a.push_back(i.to_json());
    ctx.print_json(a);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& i : *l)
    rows.push_back({i.sandbox_id, i.template_id, i.state, i.started_at, i.end_at});
  print_table({"ID", "TEMPLATE", "STATE", "STARTED", "ENDS"}, rows);
  return kExitOk;
}

int info(Context& ctx, const SandboxOpts& o) {
  auto cfg = ctx.config();
  client::SandboxInfo si;
  si.sandbox_id = o.id;
  auto s = client::Sandbox::attach(si, cfg);
  auto i = s.info();
  if (!i.ok()) return ctx.fail(i.error());
  print_info(ctx, *i);
  return kExitOk;
}

int kill(Context& ctx, const SandboxOpts& o) {
  const auto cfg = ctx.config();
  return remove_each(ctx, o.ids, "sandbox", "killed", "killed",
                     [&](const std::string& id) { return client::Sandbox::kill(id, cfg); });
}

int timeout(Context& ctx, const SandboxOpts& o) {
  auto t = parse_duration(o.timeout);
  if (!t.ok()) return ctx.fail(t.error());
  client::SandboxInfo si;
  si.sandbox_id = o.id;
  auto st = client::Sandbox::attach(si, ctx.config()).set_timeout(*t);
  if (!st.ok()) return ctx.fail(st.error());
  if (ctx.flags.json)
    ctx.print_json(json::object{{"sandboxID", o.id}, {"timeout", t->count()}});
  else
    std::cout << o.id << " now ends in " << t->count() << "s\n";
  return kExitOk;
}

int connect(Context& ctx, const SandboxOpts& o) {
  auto t = parse_duration(o.timeout);
  if (!t.ok()) return ctx.fail(t.error());
  auto s = client::Sandbox::connect(o.id, ctx.config(), *t);
  if (!s.ok()) return ctx.fail(s.error());
  print_info(ctx, s->cached_info());
  return kExitOk;
}

int pause(Context& ctx, const SandboxOpts& o) {
  client::SandboxInfo si;
  si.sandbox_id = o.id;
  auto p = client::Sandbox::attach(si, ctx.config()).pause();
  if (!p.ok()) return ctx.fail(p.error());
  if (ctx.flags.json)
    ctx.print_json(json::object{{"sandboxID", o.id}, {"paused", *p}});
  else
    std::cout << (*p ? "paused " : "already paused ") << o.id << "\n";
  return kExitOk;
}

// POST /sandboxes/{id}/connect, saying whether the sandbox was paused (resumed: 201) or
// running (200).
int resume(Context& ctx, const SandboxOpts& o) {
  auto t = parse_duration(o.timeout);
  if (!t.ok()) return ctx.fail(t.error());
  bool resumed = false;
  auto s = client::Sandbox::connect(o.id, ctx.config(), *t, &resumed);
  if (!s.ok()) return ctx.fail(s.error());
  if (ctx.flags.json)
    ctx.print_json(json::object{{"sandboxID", o.id}, {"resumed", resumed}});
  else
    std::cout << (resumed ? "resumed " : "already running ") << o.id << "\n";
  return kExitOk;
}

int fork(Context& ctx, const SandboxOpts& o) {
  if (o.count < 1 || o.count > 64) return ctx.usage("-n must be between 1 and 64");
  std::optional<std::chrono::seconds> timeout;
  if (!o.fork_timeout.empty()) {
    auto t = parse_duration(o.fork_timeout);
    if (!t.ok()) return ctx.fail(t.error());
    if (t->count() <= 0) return ctx.usage("--timeout must be at least 1s");
    timeout = *t;
  }
  client::SandboxInfo si;
  si.sandbox_id = o.id;
  auto children = client::Sandbox::attach(si, ctx.config()).fork(o.count, timeout);
  if (!children.ok()) return ctx.fail(children.error());
  int code = kExitOk;
  json::array out;
  for (const auto& child : *children) {
    if (!child.ok()) {
      code = ctx.report(child.error());
      out.push_back(ctx.error_json(child.error()));
      continue;
    }
    if (ctx.flags.json) {
      auto j = child->cached_info().to_json();
      j["envdAccessToken"] = child->cached_info().envd_access_token;
      out.push_back(std::move(j));
    } else {
      std::cout << child->id() << "\n";
    }
  }
  if (ctx.flags.json) ctx.print_json(out);
  return code;
}

int snapshot(Context& ctx, const SandboxOpts& o) {
  client::SandboxInfo si;
  si.sandbox_id = o.id;
  auto s = client::Sandbox::attach(si, ctx.config()).create_snapshot(o.name);
  if (!s.ok()) return ctx.fail(s.error());
  if (ctx.flags.json)
    ctx.print_json(snapshot_json(*s));
  else
    std::cout << s->id << "\n";
  return kExitOk;
}

int network(Context& ctx, const SandboxOpts& o) {
  std::optional<bool> internet = !o.no_internet;
  if (Status s =
          client::Sandbox::update_network(o.id, ctx.config(), o.allow_out, o.deny_out, internet);
      !s)
    return ctx.fail(s.error());
  if (!ctx.flags.json)
    std::cerr << "network rules of " << o.id << " replaced (allowOut " << o.allow_out.size()
              << ", denyOut " << o.deny_out.size() << (o.no_internet ? ", no internet" : "")
              << ")\n";
  return kExitOk;
}

// abx sandbox create
void add_sandbox_create(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* c = sandbox.add_subcommand("create", "Create a sandbox from a template; prints its id");
  c->add_option("template", o->template_id, "Template id")->capture_default_str();
  c->add_option("--timeout", o->timeout, "Lifetime: 300, 5m, 1h")->capture_default_str();
  c->add_option("--env", o->envs, "Environment variable KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--metadata", o->metadata, "Metadata KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--allow-out", o->allow_out,
                "Allow outbound traffic to an address, CIDR or domain (*.example.com); wins over "
                "--deny-out (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--deny-out", o->deny_out,
                "Deny outbound traffic to an address or CIDR; 0.0.0.0/0 denies all (repeatable)")
      ->allow_extra_args(false);
  c->add_flag("--no-internet", o->no_internet,
              "No outbound access except --allow-out (E2B's allowInternetAccess: false)");
  c->callback([&ctx, o] { ctx.exit_code = create(ctx, *o); });
}

// abx sandbox list
void add_sandbox_list(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* l = sandbox.add_subcommand("list", "List sandboxes");
  l->alias("ls");
  l->add_option("--state", o->state, "running, paused or running,paused");
  l->add_option("--metadata", o->metadata, "Only sandboxes with this KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  l->add_option("--limit", o->limit, "At most this many");
  l->callback([&ctx, o] { ctx.exit_code = list(ctx, *o); });
}

// abx sandbox info
void add_sandbox_info(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* i = add_sandbox_subcommand(sandbox, "info", "Show a sandbox", o->id);
  i->callback([&ctx, o] { ctx.exit_code = info(ctx, *o); });
}

// abx sandbox kill
void add_sandbox_kill(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* k = sandbox.add_subcommand("kill", "Stop and remove sandboxes");
  k->add_option("sandbox", o->ids, "Sandbox ids")->required();
  k->callback([&ctx, o] { ctx.exit_code = kill(ctx, *o); });
}

// abx sandbox timeout
void add_sandbox_timeout(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* t = add_sandbox_subcommand(sandbox, "timeout", "Set a sandbox's remaining lifetime", o->id);
  t->add_option("duration", o->timeout, "From now: 300, 5m, 1h")->required();
  t->callback([&ctx, o] { ctx.exit_code = timeout(ctx, *o); });
}

// abx sandbox connect
void add_sandbox_connect(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* cn = add_sandbox_subcommand(sandbox, "connect",
                                    "Resume or keep alive a sandbox and show it", o->id);
  cn->add_option("--timeout", o->timeout, "Keep it for at least this long")->capture_default_str();
  cn->callback([&ctx, o] { ctx.exit_code = connect(ctx, *o); });
}

// abx sandbox network
void add_sandbox_network(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* nw = add_sandbox_subcommand(
      sandbox, "network",
      "Replace a running sandbox's outbound rules (no flags: allow everything again)", o->id);
  nw->add_option("--allow-out", o->allow_out, "Address, CIDR or domain to allow (repeatable)")
      ->allow_extra_args(false);
  nw->add_option("--deny-out", o->deny_out, "Address or CIDR to deny (repeatable)")
      ->allow_extra_args(false);
  nw->add_flag("--no-internet", o->no_internet, "Deny everything not in --allow-out");
  nw->callback([&ctx, o] { ctx.exit_code = network(ctx, *o); });
}

// abx sandbox pause
void add_sandbox_pause(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* p = add_sandbox_subcommand(sandbox, "pause", "Pause a sandbox", o->id);
  p->callback([&ctx, o] { ctx.exit_code = pause(ctx, *o); });
}

// abx sandbox resume
void add_sandbox_resume(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* r = add_sandbox_subcommand(sandbox, "resume",
                                   "Resume a paused sandbox (POST /sandboxes/{id}/connect)", o->id);
  r->add_option("--timeout", o->timeout, "Keep it for at least this long")->capture_default_str();
  r->callback([&ctx, o] { ctx.exit_code = resume(ctx, *o); });
}

// abx sandbox fork
void add_sandbox_fork(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* f = add_sandbox_subcommand(
      sandbox, "fork",
      "Clone a running sandbox into new ones (needs CRIU); prints the children's ids, one a line",
      o->id);
  f->add_option("-n,--count", o->count, "How many children, 1..64")->capture_default_str();
  f->add_option("--timeout", o->fork_timeout,
                "The children's lifetime: 300, 5m, 1h (default: the platform's)");
  f->callback([&ctx, o] { ctx.exit_code = fork(ctx, *o); });
}

// abx sandbox snapshot
void add_sandbox_snapshot(CLI::App& sandbox, Context& ctx) {
  auto o = std::make_shared<SandboxOpts>();
  auto* sn = add_sandbox_subcommand(
      sandbox, "snapshot",
      "Keep a sandbox's state as a snapshot (needs CRIU); prints its id, a template id for "
      "`abx sandbox create`",
      o->id);
  sn->add_option("--name", o->name, "A name for the snapshot");
  sn->callback([&ctx, o] { ctx.exit_code = snapshot(ctx, *o); });
}

void fill_sandbox(CLI::App* sb, Context& ctx) {
  sb->require_subcommand(1);
  add_sandbox_create(*sb, ctx);
  add_sandbox_list(*sb, ctx);
  add_sandbox_info(*sb, ctx);
  add_sandbox_kill(*sb, ctx);
  add_sandbox_timeout(*sb, ctx);
  add_sandbox_connect(*sb, ctx);
  add_sandbox_network(*sb, ctx);
  add_sandbox_pause(*sb, ctx);
  add_sandbox_resume(*sb, ctx);
  add_sandbox_fork(*sb, ctx);
  add_sandbox_snapshot(*sb, ctx);
}

}  // namespace

const TopCommand kSandboxCommand{"sandbox", "sbx", "Create, list, inspect and stop sandboxes",
                                 fill_sandbox};

}  // namespace abx::cli
