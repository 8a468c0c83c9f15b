// Two-layer command discovery and template custom commands.
//
// Layer 1 (local, no auth, no network): custom_commands of the local template.yaml and the
// commands a command module registers when loaded with dlopen (a Python one: when a worker
// imports it, abx/pyworker/pyworker.h). Layer 2 (remote, the same
// credentials as execution): the command server's GET /commands; when no command server
// answers, the platform's template metadata (customCommands). Auth failures are returned, never
// papered over with local results: discovery must not appear to work where execution fails.
#include <dlfcn.h>

#include <boost/json.hpp>
#include <map>
#include <mutex>
#include <set>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/client/sandbox.h"
#include "abx/pyworker/pyworker.h"
#include "abx/registry/registry.h"
#include "abx/templates/template.h"
#include "state.h"

namespace abx::client {

namespace {

CommandEntry entry_from_custom(const templates::CustomCommand& c) {
  CommandEntry e;
  e.name = c.name;
  e.description = c.description;
  e.source = CommandSource::kYaml;
  e.command = c.command;
  for (const auto& a : c.args) {
    ArgSpec s;
    s.name = a.name;
    s.type = a.type;
    s.required = a.required;
    s.default_value = a.default_value;
    s.description = a.description;
    s.minimum = a.minimum;
    s.maximum = a.maximum;
    s.max_magnitude = a.max_magnitude;
    e.args.push_back(std::move(s));
  }
  return e;
}

std::vector<CommandEntry> entries_of(const templates::Template& t) {
  std::vector<CommandEntry> out;
  for (const auto& c : t.custom_commands) out.push_back(entry_from_custom(c));
  return out;
}

bool is_auth_error(const Error& e) {
  return e.code() == ErrorCode::kUnauthenticated || e.code() == ErrorCode::kPermissionDenied;
}

// A platform template's customCommands as CustomCommands we can render. The text comes from
// the network, so it passes the same placeholder-safety check as a local file.
Result<std::vector<templates::CustomCommand>> remote_custom_commands(const json::object& tmpl) {
  std::vector<templates::CustomCommand> out;
  const json::value* list = tmpl.if_contains("customCommands");
  json::value parsed;
  if (list == nullptr) {  // E2B clients see it as a metadata string
    if (auto* md = tmpl.if_contains("metadata"); md && md->is_object()) {
      if (auto* s = md->as_object().if_contains("custom_commands"); s && s->is_string()) {
        auto p = parse_json_strict(s->as_string());
        if (p.ok()) {
          parsed = std::move(*p);
          list = &parsed;
        }
      }
    }
  }
  if (list == nullptr || !list->is_array()) return out;
  for (const auto& v : list->as_array()) {
    ABX_ASSIGN_OR_RETURN(auto e, command_entry_from_json(v, CommandSource::kYaml));
    templates::CustomCommand c;
    c.name = e.name;
    c.description = e.description;
    c.command = e.command;
    try {
      for (const auto& a : e.args)
        c.args.emplace_back(a.name, arg_type_name(a.type), a.required, a.default_value,
                            a.description);
    } catch (const std::exception& ex) {
      return invalid_argument("custom command " + c.name + ": " + ex.what());
    }
    ABX_TRY(templates::validate_custom_command(c));
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

Result<std::vector<CommandEntry>> load_command_module(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::vector<CommandEntry>> loaded;
  std::lock_guard lk(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".py") == 0) {
    // A Python command module: the image's python3 imports it in a worker that reports the
    // schema abx-server --python would serve (no server, no auth).
    auto cmds = pyworker::describe_module(path);
    if (!cmds.ok()) {
      return Error(ErrorCode::kInvalidArgument,
                   "command module " + path + ": " + cmds.error().message());
    }
    std::vector<CommandEntry> out;
    for (const auto& c : *cmds) {
      ABX_ASSIGN_OR_RETURN(auto e, command_entry_from_json(c, CommandSource::kRegistered));
      out.push_back(std::move(e));
    }
    loaded[path] = out;
    return out;
  }
  auto& reg = registry::default_registry();
  std::set<std::string> before;
  for (const auto* c : reg.list_all()) before.insert(c->name);
  auto errors_before = reg.errors().size();
  // RTLD_NOW: an unresolved symbol (a program that does not export the registry) fails here,
  // with a message, instead of crashing at the first call.
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = ::dlerror();
    return Error(ErrorCode::kInvalidArgument,
                 "cannot load command module " + path + ": " + (err ? err : "unknown error"));
  }
  auto errors = reg.errors();
  if (errors.size() > errors_before) {
    return invalid_argument("command module " + path + ": " + errors[errors_before]);
  }
  std::vector<CommandEntry> out;
  for (const auto* c : reg.list_all()) {
    if (before.count(c->name)) continue;
    auto e = command_entry_from_json(registry::describe(*c), CommandSource::kRegistered);
    if (!e.ok()) return e.error();
    // The wire form has no ranges; the module's own schema does (an int32 parameter's).
    for (std::size_t i = 0; i < e->args.size() && i < c->args.size(); ++i) {
      e->args[i].minimum = c->args[i].minimum;
      e->args[i].maximum = c->args[i].maximum;
      e->args[i].max_magnitude = c->args[i].max_magnitude;
    }
    out.push_back(std::move(*e));
  }
  loaded[path] = out;
  return out;
}

std::vector<CommandEntry> merge_commands(const std::vector<std::vector<CommandEntry>>& layers) {
  std::vector<CommandEntry> out;
  std::set<std::string> seen;
  for (const auto& layer : layers) {
    for (const auto& e : layer) {
      if (seen.insert(e.name).second) out.push_back(e);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CommandEntry& a, const CommandEntry& b) { return a.name < b.name; });
  return out;
}

Result<std::vector<CommandEntry>> discover_local(const ConnectionConfig& config,
                                                 std::string_view template_id,
                                                 const std::vector<std::string>& modules) {
  std::vector<CommandEntry> yaml;
  if (!template_id.empty()) {
    auto catalog = detail::load_local_catalog(config);
    const auto* t = catalog.get(template_id);
    if (t == nullptr) {
      std::string msg = "no local template '" + std::string(template_id) + "' under " +
                        (detail::abx_home(config) / "templates").string();
      for (const auto& e : catalog.errors()) {
        if (e.id_hint == template_id) msg += " (" + e.message + ")";
      }
      return not_found(msg);
    }
    yaml = entries_of(*t);
  }
  std::vector<CommandEntry> registered;
  for (const auto& m : modules) {
    ABX_ASSIGN_OR_RETURN(auto r, load_command_module(m));
    registered.insert(registered.end(), r.begin(), r.end());
  }
  return merge_commands({yaml, registered});
}

Result<std::vector<CommandEntry>> Sandbox::list_commands(const DiscoveryOptions& opts) {
  const std::string& tid = state_->info.template_id;
  std::vector<CommandEntry> yaml;
  bool have_local_template = false;
  {
    auto catalog = detail::load_local_catalog(state_->config);
    if (const auto* t = detail::find_local_template(catalog, tid)) {
      yaml = entries_of(*t);
      have_local_template = true;
    }
  }
  std::vector<CommandEntry> registered;
  for (const auto& m : opts.modules) {
    ABX_ASSIGN_OR_RETURN(auto r, load_command_module(m));
    registered.insert(registered.end(), r.begin(), r.end());
  }
  std::vector<CommandEntry> remote;
  if (opts.remote) {
    auto r = server().list();
    if (r.ok()) {
      remote = std::move(*r);
    } else if (r.error().code() == ErrorCode::kUnauthenticated) {
      // A bad token: execution would fail the same way, so discovery must too. (A 403 is not
      // this: abxd answers it for a port the template keeps private, i.e. no command server,
      // and the custom commands below stay runnable through the shell.)
      return r.error();
    }
    if (!have_local_template && !tid.empty()) {
      // The template's custom commands as the platform has them, whether or not a command
      // server answered: the same two layers abxd's /mcp merges (live server first, then the
      // template), so every client lists the same commands.
      auto t = get_template(tid, state_->config);
      if (t.ok()) {
        auto cc = remote_custom_commands(*t);
        if (cc.ok()) {
          for (const auto& c : *cc) yaml.push_back(entry_from_custom(c));
        }
      } else if (is_auth_error(t.error())) {
        return t.error();
      }
    }
  }
  return merge_commands({remote, yaml, registered});
}

Result<CommandResult> Sandbox::run(std::string_view name, const json::object& args,
                                   const CommandOptions& opts) {
  ABX_TRY(check_capability(Capability::kShell));
  const std::string& tid = state_->info.template_id;
  std::optional<templates::CustomCommand> cmd;
  {
    auto catalog = detail::load_local_catalog(state_->config);
    if (const auto* t = detail::find_local_template(catalog, tid)) {
      if (const auto* c = t->find_command(name)) cmd = *c;
    } else if (!tid.empty()) {
      auto remote = get_template(tid, state_->config);
      if (!remote.ok() && remote.error().code() != ErrorCode::kNotFound) return remote.error();
      if (remote.ok()) {
        ABX_ASSIGN_OR_RETURN(auto cc, remote_custom_commands(*remote));
        for (auto& c : cc) {
          if (c.name == name) cmd = std::move(c);
        }
      }
    }
  }
  if (!cmd) {
    return not_found("template '" + tid + "' has no custom command '" + std::string(name) + "'");
  }
  ABX_ASSIGN_OR_RETURN(auto rendered, templates::render_custom_command(*cmd, args));
  return commands().run(rendered, opts);
}

}  // namespace abx::client
