// The command server (port 49982): POST /commands/{name}, GET /commands.
#include "abx/client/command_server.h"

#include <boost/json.hpp>
#include <ostream>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/registry/coerce.h"
#include "state.h"

namespace abx::client {

std::string_view command_source_name(CommandSource s) {
  switch (s) {
    case CommandSource::kYaml:
      return "yaml";
    case CommandSource::kRegistered:
      return "registered";
    case CommandSource::kRemote:
      return "remote";
  }
  return "?";
}

const ArgSpec* CommandEntry::find_arg(std::string_view arg_name) const {
  for (const auto& a : args) {
    if (a.name == arg_name) return &a;
  }
  return nullptr;
}

// The registry's coercion is the command server's; one table for both sides of the wire.
Result<json::value> ArgSpec::check(const json::value& v) const {
  registry::CommandArg arg;
  arg.name = name;
  arg.type = type;
  arg.required = required;
  arg.minimum = minimum;
  arg.maximum = maximum;
  arg.max_magnitude = max_magnitude;
  return registry::coerce_value(arg, v);
}

json::object to_json(const CommandEntry& e) {
  json::object o;
  o["name"] = e.name;
  o["description"] = e.description;
  o["source"] = command_source_name(e.source);
  json::array args;
  for (const auto& a : e.args) {
    args.push_back(json::object{{"name", a.name},
                                {"type", arg_type_name(a.type)},
                                {"required", a.required},
                                {"default", a.default_value},
                                {"description", a.description}});
  }
  o["args"] = std::move(args);
  if (e.source == CommandSource::kYaml && !e.command.empty()) o["command"] = e.command;
  return o;
}

Result<CommandEntry> command_entry_from_json(const json::value& v, CommandSource source) {
  if (!v.is_object()) return invalid_argument("command entry: expected an object");
  const auto& o = v.as_object();
  CommandEntry e;
  e.source = source;
  auto* name = o.if_contains("name");
  if (name == nullptr || !name->is_string()) return invalid_argument("command entry: missing name");
  e.name = name->as_string();
  if (auto* d = o.if_contains("description"); d && d->is_string()) e.description = d->as_string();
  if (auto* c = o.if_contains("command"); c && c->is_string()) e.command = c->as_string();
  if (auto* args = o.if_contains("args")) {
    if (!args->is_array()) return invalid_argument("command " + e.name + ": args is not an array");
    for (const auto& av : args->as_array()) {
      if (!av.is_object()) return invalid_argument("command " + e.name + ": bad argument entry");
      const auto& ao = av.as_object();
      ArgSpec a;
      auto* an = ao.if_contains("name");
      if (an == nullptr || !an->is_string())
        return invalid_argument("command " + e.name + ": argument without a name");
      a.name = an->as_string();
      if (auto* t = ao.if_contains("type"); t && t->is_string()) {
        auto type = parse_arg_type(t->as_string());
        if (!type)
          return invalid_argument("command " + e.name + ": argument " + a.name +
                                  " has unknown type '" + std::string(t->as_string()) + "'");
        a.type = *type;
      }
      if (auto* r = ao.if_contains("required"); r && r->is_bool()) a.required = r->as_bool();
      if (auto* d = ao.if_contains("default")) a.default_value = *d;
      if (auto* d = ao.if_contains("description"); d && d->is_string())
        a.description = d->as_string();
      e.args.push_back(std::move(a));
    }
  }
  return e;
}

Result<json::object> CommandServer::call_raw(std::string_view name, const json::object& kwargs) {
  auto req = http::make_request(bhttp::verb::post, "/commands/" + detail::url_encode(name),
                                json::serialize(kwargs));
  ABX_ASSIGN_OR_RETURN(auto res, state_->plane_send(kCommandServerPort, std::move(req), {}));
  if (res.result_int() != 200) {
    return detail::error_from_response(res, detail::Plane::kCommandServer,
                                       "command " + std::string(name));
  }
  auto v = parse_json_strict(res.body());
  if (!v.ok() || !v->is_object() || !v->as_object().contains("result")) {
    return internal_error("command " + std::string(name) +
                          ": the server's answer is not {\"result\": …}");
  }
  return std::move(v->as_object());
}

Result<json::value> CommandServer::call(std::string_view name, const json::object& kwargs) {
  ABX_ASSIGN_OR_RETURN(auto o, call_raw(name, kwargs));
  return std::move(o.at("result"));
}

Result<std::vector<CommandEntry>> CommandServer::list() {
  auto req = http::make_request(bhttp::verb::get, "/commands");
  ABX_ASSIGN_OR_RETURN(
      auto res, state_->plane_send(kCommandServerPort, std::move(req), {.idempotent = true}));
  if (res.result_int() != 200) {
    return detail::error_from_response(res, detail::Plane::kCommandServer, "list commands");
  }
  auto v = parse_json_strict(res.body());
  if (!v.ok() || !v->is_object()) return internal_error("GET /commands: expected a JSON object");
  auto* cmds = v->as_object().if_contains("commands");
  if (cmds == nullptr || !cmds->is_array())
    return internal_error("GET /commands: no commands array");
  std::vector<CommandEntry> out;
  for (const auto& c : cmds->as_array()) {
    ABX_ASSIGN_OR_RETURN(auto e, command_entry_from_json(c, CommandSource::kRemote));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace abx::client
