// abx template list|info <id> [--local] [--json]
//
// From the platform (GET /templates, GET /templates/{id}); --local reads $ABX_HOME/templates
// and the built-ins instead, with no network.
#include "abx/templates/template.h"

#include <boost/json.hpp>
#include <iostream>

#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

struct TemplateOpts {
  std::string id;
  bool local = false;
};

std::string str(const json::object& o, std::string_view k) {
  if (auto* v = o.if_contains(k)) {
    if (v->is_string()) return std::string(v->as_string());
    if (v->is_number() || v->is_bool()) return json::serialize(*v);
    if (v->is_array()) {
      std::string s;
      for (const auto& e : v->as_array())
        s += (s.empty() ? "" : ",") +
             (e.is_string() ? std::string(e.as_string()) : json::serialize(e));
      return s;
    }
  }
  return {};
}

Result<json::array> fetch_all(const Context& ctx, bool local) {
  if (!local) return client::list_templates(ctx.config());
  auto cfg = ctx.config();
  std::filesystem::path home = cfg.home;
  if (home.empty()) {
    const char* h = std::getenv("HOME");
    home = std::filesystem::path(h ? h : ".") / ".abx";
  }
  auto catalog = templates::TemplateCatalog::load(home, templates::BuiltinOptions{});
  for (const auto& e : catalog.errors()) std::cerr << "abx: skipped " << e.message << "\n";
  json::array a;
  for (const auto* t : catalog.list()) a.push_back(t->to_json());
  return a;
}

int list(Context& ctx, const TemplateOpts& o) {
  auto all = fetch_all(ctx, o.local);
  if (!all.ok()) return ctx.fail(all.error());
  if (ctx.flags.json) {
    ctx.print_json(*all);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : *all) {
    if (!t.is_object()) continue;
    const auto& o2 = t.as_object();
    rows.push_back({str(o2, "templateID"), str(o2, "capabilities"), str(o2, "cpuCount"),
                    str(o2, "memoryMB"), str(o2, "description")});
  }
  print_table({"ID", "CAPABILITIES", "CPU", "MEMORY_MB", "DESCRIPTION"}, rows);
  return kExitOk;
}

int info(Context& ctx, const TemplateOpts& o) {
  json::object t;
  if (o.local) {
    auto all = fetch_all(ctx, true);
    if (!all.ok()) return ctx.fail(all.error());
    for (const auto& v : *all) {
      if (v.is_object() && str(v.as_object(), "templateID") == o.id) t = v.as_object();
    }
    if (t.empty()) return ctx.fail(not_found("no local template '" + o.id + "'"));
  } else {
    auto r = client::get_template(o.id, ctx.config());
    if (!r.ok()) return ctx.fail(r.error());
    t = std::move(*r);
  }
  if (ctx.flags.json) {
    ctx.print_json(t);
    return kExitOk;
  }
  for (const char* k : {"templateID", "description", "capabilities", "cpuCount", "memoryMB",
                        "diskSizeMB", "network", "timeout", "envdVersion"}) {
    auto v = str(t, k);
    if (!v.empty())
      std::cout << k << ":" << std::string(14 - std::string_view(k).size(), ' ') << v << "\n";
  }
  if (auto* cc = t.if_contains("customCommands"); cc && cc->is_array() && !cc->as_array().empty()) {
    std::cout << "customCommands:\n";
    for (const auto& c : cc->as_array()) {
      if (c.is_object())
        std::cout << "  " << str(c.as_object(), "name") << "  " << str(c.as_object(), "description")
                  << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void add_template(CLI::App& app, Context& ctx) {
  auto* tp = app.add_subcommand("template", "Templates on the platform (or --local)");
  tp->alias("templates");
  tp->require_subcommand(1);
  auto o = std::make_shared<TemplateOpts>();
  auto* l = tp->add_subcommand("list", "List templates");
  l->alias("ls");
  l->add_flag("--local", o->local, "Read $ABX_HOME/templates and the built-ins, no network");
  l->callback([&ctx, o] { ctx.exit_code = list(ctx, *o); });
  auto* i = tp->add_subcommand("info", "Show a template: resources, capabilities, custom commands");
  i->add_option("template", o->id, "Template id")->required();
  i->add_flag("--local", o->local, "Read $ABX_HOME/templates and the built-ins, no network");
  i->callback([&ctx, o] { ctx.exit_code = info(ctx, *o); });
}

}  // namespace abx::cli
