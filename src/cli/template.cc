// abx template list|info <id> [--local] [--json]
// abx template build [-f Dockerfile] [-t NAME] [--build-arg K=V]… [CONTEXT]
// abx template inspect NAME | rm NAME | push NAME REF
//
// list and info read the platform (GET /templates, GET /templates/{id}); --local reads
// $ABX_HOME/templates and the built-ins instead, with no network. build, inspect, rm and push
// are abxd's extensions (abx/client/templates.h).
#include "abx/templates/template.h"

#include <unistd.h>

#include <boost/json.hpp>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "abx/base/ascii.h"
#include "abx/client/templates.h"
#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

struct TemplateOpts {
  std::string id;
  bool local = false;
  // build
  std::string dockerfile;
  std::string context = ".";
  std::vector<std::string> build_args;
  // push
  std::string ref;
  bool bare = false;
};

std::string str(const json::object& o, std::string_view k) {
  if (auto* v = o.if_contains(k)) {
    if (v->is_string()) return std::string(v->as_string());
    if (v->is_number() || v->is_bool()) return json_text(*v);
    if (v->is_array()) {
      std::string s;
      for (const auto& e : v->as_array())
        s += (s.empty() ? "" : ",") + (e.is_string() ? std::string(e.as_string()) : json_text(e));
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

std::string human_size(std::int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

int build(Context& ctx, const TemplateOpts& o) {
  client::BuildOptions bo;
  bo.name = o.id;
  if (bo.name.empty()) {
    // Default name: the context directory's name, lowercased.
    std::error_code ec;
    auto abs = std::filesystem::weakly_canonical(o.context, ec);
    bo.name = ascii_lower(abs.filename().string());
  }
  bo.dockerfile = o.dockerfile;
  auto args = parse_pairs(o.build_args, "--build-arg");
  if (!args.ok()) return ctx.fail(args.error());
  bo.build_args = *args;
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  auto on_event = [&](const client::BuildEvent& e) {
    if (ctx.flags.json) {
      ctx.print_json(e.raw);
      std::cout.flush();
      return;
    }
    if (e.type == "step") {
      if (tty) {
        std::cout << "\033[1m[" << e.step << "/" << e.total << "]\033[0m " << e.instruction
                  << (e.cached ? "  \033[32mCACHED\033[0m" : "") << std::endl;
      } else {
        std::cout << "Step " << e.step << "/" << e.total << " : " << e.instruction
                  << (e.cached ? " CACHED" : "") << std::endl;
      }
    } else if (e.type == "context") {
      std::cout << "Sending the build context: " << human_size(e.bytes) << std::endl;
    } else if (e.type == "layer") {
      std::cout << "  -> layer of " << human_size(e.bytes) << std::endl;
    } else if (e.type == "log") {
      std::cout << (tty ? "\033[2m  | " : "  ") << e.line << (tty ? "\033[0m" : "") << std::endl;
    }
  };
  auto t = client::build_template(o.context, bo, on_event, ctx.config());
  if (!t.ok()) return ctx.fail(t.error());
  if (!ctx.flags.json) {
    std::cout << "built template " << str(*t, "templateID") << " (" << str(*t, "manifestDigest")
              << ")" << std::endl;
  }
  return kExitOk;
}

int inspect(Context& ctx, const TemplateOpts& o) {
  auto r = client::template_image(o.id, ctx.config());
  if (!r.ok()) return ctx.fail(r.error());
  if (ctx.flags.json) {
    ctx.print_json(*r);
    return kExitOk;
  }
  const auto& t = *r;
  std::cout << "template:  " << str(t, "templateID") << "\n"
            << "manifest:  " << str(t, "manifestDigest") << "\n"
            << "config:    " << str(t, "configDigest") << "\n";
  std::int64_t size = 0;
  if (auto* v = t.if_contains("size"); v && v->is_int64()) size = v->as_int64();
  std::cout << "size:      " << human_size(size) << "\n";
  if (auto* ls = t.if_contains("layers"); ls && ls->is_array()) {
    std::cout << "layers:    " << ls->as_array().size() << "\n";
    for (const auto& l : ls->as_array()) {
      if (!l.is_object()) continue;
      std::int64_t n = 0;
      if (auto* v = l.as_object().if_contains("size"); v && v->is_int64()) n = v->as_int64();
      std::cout << "  " << str(l.as_object(), "digest") << "  " << human_size(n) << "\n";
    }
  }
  if (auto* c = t.if_contains("config"); c && c->is_object()) {
    std::cout << "image config:\n";
    for (const char* k : {"entrypoint", "cmd", "workingDir", "user", "env"}) {
      auto v = str(c->as_object(), k);
      if (!v.empty()) std::cout << "  " << k << ": " << v << "\n";
    }
    if (auto* l = c->as_object().if_contains("labels"); l && l->is_object()) {
      for (const auto& [k, v] : l->as_object())
        std::cout << "  label " << std::string(k) << "="
                  << (v.is_string() ? std::string(v.as_string()) : json_text(v)) << "\n";
    }
  }
  return kExitOk;
}

int remove(Context& ctx, const TemplateOpts& o) {
  auto s = client::delete_template(o.id, ctx.config());
  if (!s.ok()) return ctx.fail(s.error());
  if (ctx.flags.json) {
    ctx.print_json(json::object{{"removed", o.id}});
  } else {
    std::cout << "removed template " << o.id << "\n";
  }
  return kExitOk;
}

int push(Context& ctx, const TemplateOpts& o) {
  auto r = client::push_template(o.id, o.ref, ctx.config(), o.bare);
  if (!r.ok()) return ctx.fail(r.error());
  if (ctx.flags.json) {
    ctx.print_json(*r);
  } else {
    std::cout << "pushed " << o.id << " to " << str(*r, "ref") << " (" << str(*r, "digest")
              << ")\n";
  }
  return kExitOk;
}

void fill_template(CLI::App* tp, Context& ctx) {
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

  auto* b = tp->add_subcommand(
      "build", "Build a template from a Dockerfile and a context directory on the platform");
  b->add_option("context", o->context, "Context directory: COPY/ADD sources (default .)");
  b->add_option("-f,--file", o->dockerfile, "Dockerfile (default CONTEXT/Dockerfile)");
  b->add_option("-t,--tag", o->id,
                "Template name [a-z0-9][a-z0-9._-]{0,63} (default: the context's folder name)");
  b->add_option("--build-arg", o->build_args, "ARG value NAME=VALUE (repeatable)")
      ->allow_extra_args(false);
  b->footer(
      "Progress: the context's size, one line per step (CACHED when reused) with the size of the "
      "layer it adds, and the RUN output; --json prints the "
      "platform's NDJSON events ({\"type\":\"step\"|\"layer\"|\"log\"|\"done\"|\"error\"}; "
      "\"context\" is the CLI's own). A "
      "template.yaml in the context supplies the template's server, capabilities, resources and "
      "custom_commands.");
  b->callback([&ctx, o] { ctx.exit_code = build(ctx, *o); });

  auto* ins = tp->add_subcommand("inspect", "Show a template's image: layers, size, config");
  ins->add_option("template", o->id, "Template id")->required();
  ins->callback([&ctx, o] { ctx.exit_code = inspect(ctx, *o); });

  auto* rm = tp->add_subcommand("rm", "Remove a built template (then unused layers are freed)");
  rm->alias("remove");
  rm->add_option("template", o->id, "Template id")->required();
  rm->callback([&ctx, o] { ctx.exit_code = remove(ctx, *o); });

  auto* p = tp->add_subcommand("push", "Push a template's image to an OCI registry");
  p->add_option("template", o->id, "Template id")->required();
  p->add_option("ref", o->ref, "Destination host[:port]/repo:tag")->required();
  p->add_flag("--bare", o->bare,
              "Push the image as built, without abx's runtime layer (/opt/abx, abx-envd "
              "entrypoint) that lets other OCI runtimes serve it");
  p->footer(
      "Credentials and insecure registries: abxd's (--registry-auth, Docker's auths format).");
  p->callback([&ctx, o] { ctx.exit_code = push(ctx, *o); });
}

}  // namespace

const TopCommand kTemplateCommand{"template", "templates", "Templates on the platform (or --local)",
                                  fill_template};

}  // namespace abx::cli
