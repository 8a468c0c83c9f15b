#include "abx/registry/registry.h"

#include <algorithm>
#include <cctype>

namespace abx::registry {
namespace json = boost::json;

namespace {

bool default_matches(ArgType t, const json::value& v) {
  switch (t) {
    case ArgType::kString:
      return v.is_string();
    case ArgType::kInteger:
      return v.is_int64();
    case ArgType::kFloat:
      return v.is_double() || v.is_int64();
    case ArgType::kBoolean:
      return v.is_bool();
  }
  return false;
}

bool valid_identifier(std::string_view name, bool allow_dash) {
  if (name.empty() || name.size() > 64) return false;
  auto c0 = static_cast<unsigned char>(name[0]);
  if (!(std::isalpha(c0) || c0 == '_')) return false;
  return std::all_of(name.begin(), name.end(), [&](char ch) {
    auto c = static_cast<unsigned char>(ch);
    return c < 0x80 && (std::isalnum(c) || c == '_' || (allow_dash && c == '-'));
  });
}

}  // namespace

bool valid_command_name(std::string_view name) { return valid_identifier(name, true); }
bool valid_arg_name(std::string_view name) { return valid_identifier(name, false); }

CommandArg::CommandArg(std::string n, ArgType t, bool req, json::value def, std::string desc)
    : name(std::move(n)),
      type(t),
      required(req),
      default_value(std::move(def)),
      description(std::move(desc)) {
  if (!valid_arg_name(name)) {
    throw RegistryError("invalid argument name '" + name + "': use [A-Za-z_][A-Za-z0-9_]{0,63}");
  }
  if (!default_value.is_null()) {
    if (!default_matches(type, default_value)) {
      throw RegistryError("default of argument '" + name + "' does not match its type " +
                          std::string(arg_type_name(type)));
    }
    if (type == ArgType::kFloat && default_value.is_int64()) {
      default_value = static_cast<double>(default_value.as_int64());
    }
  }
}

CommandArg::CommandArg(std::string n, std::string_view t, bool req, json::value def,
                       std::string desc)
    : CommandArg(
          std::move(n),
          [&] {
            auto parsed = parse_arg_type(t);
            if (!parsed) {
              throw RegistryError("unsupported argument type '" + std::string(t) +
                                  "': use string, integer, float or boolean");
            }
            return *parsed;
          }(),
          req, std::move(def), std::move(desc)) {}

const CommandArg* RegisteredCommand::find_arg(std::string_view arg_name) const {
  for (const auto& a : args) {
    if (a.name == arg_name) return &a;
  }
  return nullptr;
}

json::object describe(const RegisteredCommand& cmd) {
  json::array args;
  args.reserve(cmd.args.size());
  for (const auto& a : cmd.args) {
    args.push_back(json::object{{"name", a.name},
                                {"type", arg_type_name(a.type)},
                                {"required", a.required},
                                {"default", a.default_value},
                                {"description", a.description}});
  }
  return json::object{
      {"name", cmd.name}, {"description", cmd.description}, {"args", std::move(args)}};
}

void CommandRegistry::register_command(RegisteredCommand cmd) {
  if (!valid_command_name(cmd.name)) {
    throw RegistryError("invalid command name '" + cmd.name +
                        "': use [A-Za-z_][A-Za-z0-9_-]{0,63}");
  }
  if (!cmd.fn) throw RegistryError("command '" + cmd.name + "' has no function");
  for (std::size_t i = 0; i < cmd.args.size(); ++i) {
    const auto& a = cmd.args[i];
    if (!valid_arg_name(a.name)) {
      throw RegistryError("command '" + cmd.name + "': invalid argument name '" + a.name + "'");
    }
    if (a.required && !a.default_value.is_null()) {
      throw RegistryError("command '" + cmd.name + "': required argument '" + a.name +
                          "' cannot have a default");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (cmd.args[j].name == a.name) {
        throw RegistryError("command '" + cmd.name + "': argument '" + a.name + "' declared twice");
      }
    }
  }
  std::lock_guard lock(mu_);
  if (frozen()) {
    throw RegistryError("cannot register command '" + cmd.name +
                        "': the registry is frozen (the server has started)");
  }
  if (commands_.count(cmd.name) != 0) {
    throw RegistryError("command '" + cmd.name + "' is already registered");
  }
  std::string key = cmd.name;
  commands_.emplace(std::move(key), std::move(cmd));
}

void CommandRegistry::register_command(std::string name, CommandFn fn, std::vector<CommandArg> args,
                                       std::string description) {
  RegisteredCommand cmd;
  cmd.name = std::move(name);
  cmd.fn = std::move(fn);
  cmd.args = std::move(args);
  cmd.description = std::move(description);
  register_command(std::move(cmd));
}

void CommandRegistry::freeze() {
  std::lock_guard lock(mu_);
  frozen_.store(true, std::memory_order_release);
}

const RegisteredCommand* CommandRegistry::get(std::string_view name) const {
  if (frozen()) {  // immutable from here on: no lock on the hot path
    auto it = commands_.find(name);
    return it == commands_.end() ? nullptr : &it->second;
  }
  std::lock_guard lock(mu_);
  auto it = commands_.find(name);
  return it == commands_.end() ? nullptr : &it->second;
}

std::vector<const RegisteredCommand*> CommandRegistry::list_all() const {
  std::unique_lock lock(mu_, std::defer_lock);
  if (!frozen()) lock.lock();
  std::vector<const RegisteredCommand*> out;
  out.reserve(commands_.size());
  for (const auto& kv : commands_) out.push_back(&kv.second);
  return out;
}

std::size_t CommandRegistry::size() const {
  std::lock_guard lock(mu_);
  return commands_.size();
}

void CommandRegistry::record_error(std::string message) {
  std::lock_guard lock(mu_);
  errors_.push_back(std::move(message));
}

std::vector<std::string> CommandRegistry::errors() const {
  std::lock_guard lock(mu_);
  return errors_;
}

CommandRegistry& default_registry() {
  // Function-local static: safe to use from other translation units' static initialisers and
  // from dlopen'ed modules, which bind to this (exported) definition.
  static CommandRegistry instance;
  return instance;
}

}  // namespace abx::registry
