// The command registry: typed commands that a sandbox's command server publishes.
//
// A RegisteredCommand is a name, a direct callable, an argument schema (CommandArg, one of four
// scalar types) and a description. Nothing is compiled or evaluated from source text. The
// registry is filled at start-up — by ABX_REGISTER (see abx/registry/register.h), by the
// command(...) builder or by register_command() — then frozen when the server starts; after
// freeze() every registration throws RegistryError. default_registry() is the process-wide
// instance; command modules loaded with dlopen register into the same one (they bind to the
// host executable's exported symbol, see docs/commands.md).
//
// This module has no I/O: it depends on the standard library and Boost.JSON only.
#pragma once

#include <atomic>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/registry/arg_type.h"

namespace abx::registry {

// Thrown for registration mistakes (bad names or types, duplicates, registering when frozen).
// Registration happens at start-up, where a mistake is a programming error and should be loud.
class RegistryError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct CommandArg {
  std::string name;
  ArgType type = ArgType::kString;
  bool required = false;
  boost::json::value default_value;  // null when there is no default
  std::string description;
  // Inclusive range an integer argument must lie in (ABX_REGISTER sets the C++ type's range).
  std::optional<std::int64_t> minimum;
  std::optional<std::int64_t> maximum;
  // Largest magnitude a float argument may have (FLT_MAX for a C++ float parameter).
  std::optional<double> max_magnitude;

  CommandArg() = default;
  // Builds and validates an argument; an unknown `type` or a default that does not match it
  // throws RegistryError, so a malformed schema never reaches the wire.
  CommandArg(std::string name, std::string_view type, bool required = false,
             boost::json::value default_value = nullptr, std::string description = {});
  CommandArg(std::string name, ArgType type, bool required = false,
             boost::json::value default_value = nullptr, std::string description = {});
};

// Hints for clients (MCP tool annotations); unset means "not stated". The default member
// initializers let callers name only some fields ({.read_only = true}) without a
// -Wmissing-field-initializers warning.
struct CommandHints {
  std::optional<bool> read_only = std::nullopt;
  std::optional<bool> destructive = std::nullopt;
  std::optional<bool> idempotent = std::nullopt;
};

// Where the command server runs a command's body (docs/command-server.md, "Where commands run").
enum class Execution {
  // On the worker pool, under the call deadline: the default, and required for anything that
  // may block (I/O, sleeps, locks held by other calls, subprocesses) or run for long.
  kWorkerPool,
  // On the I/O thread that read the request, with no thread hop and no deadline timer: for
  // quick, non-blocking commands (microseconds). A command that blocks here stalls the other
  // connections served by that thread; the server warns when an inline call takes over 10 ms.
  kInline,
};

// Receives the coerced keyword arguments (every declared argument present, defaults applied;
// an optional argument without a default is absent when not given) and returns the result.
// May throw: the server reports the exception's class and message.
using CommandFn = std::function<boost::json::value(const boost::json::object& kwargs)>;

struct RegisteredCommand {
  std::string name;
  CommandFn fn;
  std::vector<CommandArg> args;
  std::string description;
  CommandHints hints;
  Execution execution = Execution::kWorkerPool;

  const CommandArg* find_arg(std::string_view arg_name) const;
};

// {"name","description","args":[{"name","type","required","default","description"}]}
boost::json::object describe(const RegisteredCommand& cmd);

class CommandRegistry;

// Decorator-style registration:
//   reg.command("add").description("Add two integers.")
//      .arg("a", "first addend").arg("b", "second addend", 2)
//      .bind([](std::int64_t a, std::int64_t b) { return a + b; });
// The callable's parameter types give the argument types (see register.h for the mapping);
// arg() gives names in order, with an optional default that makes the argument optional.
class CommandBuilder {
 public:
  CommandBuilder(CommandRegistry& reg, std::string name) : reg_(reg) {
    cmd_.name = std::move(name);
  }

  CommandBuilder& description(std::string d) {
    cmd_.description = std::move(d);
    return *this;
  }
  CommandBuilder& arg(std::string name, std::string description = {}) {
    names_.push_back({std::move(name), std::move(description), std::nullopt});
    return *this;
  }
  CommandBuilder& arg(std::string name, std::string description, boost::json::value default_value) {
    names_.push_back({std::move(name), std::move(description), std::move(default_value)});
    return *this;
  }
  CommandBuilder& hints(CommandHints h) {
    cmd_.hints = h;
    return *this;
  }
  // Runs the command on the I/O thread (Execution::kInline): only for quick, non-blocking ones.
  CommandBuilder& run_inline() {
    cmd_.execution = Execution::kInline;
    return *this;
  }
  // Registers the command; throws RegistryError on any mistake. Defined in register.h.
  template <class F>
  void bind(F&& fn);

 private:
  struct Named {
    std::string name;
    std::string description;
    std::optional<boost::json::value> default_value;
  };
  CommandRegistry& reg_;
  RegisteredCommand cmd_;
  std::vector<Named> names_;
};

class CommandRegistry {
 public:
  CommandRegistry() = default;
  CommandRegistry(const CommandRegistry&) = delete;
  CommandRegistry& operator=(const CommandRegistry&) = delete;

  // Adds a command. Throws RegistryError if the registry is frozen, the name is malformed
  // (must match [A-Za-z_][A-Za-z0-9_-]{0,63}) or taken, an argument name is malformed or
  // repeated, a required argument has a default, or fn is empty.
  void register_command(RegisteredCommand cmd);
  void register_command(std::string name, CommandFn fn, std::vector<CommandArg> args,
                        std::string description = {});
  CommandBuilder command(std::string name) { return CommandBuilder(*this, std::move(name)); }

  // Sets the client hints (MCP tool annotations) of a command registered earlier; ABX_HINTS
  // (register.h) calls it for macro registrations. Throws RegistryError when the registry is
  // frozen or there is no such command. Inline so that a command module built against these
  // headers needs no new symbol from the runner that loads it.
  void set_hints(std::string_view name, CommandHints hints) {
    std::lock_guard lock(mu_);
    if (frozen()) {
      throw RegistryError("cannot set hints of '" + std::string(name) +
                          "': the registry is frozen (the server has started)");
    }
    auto it = commands_.find(name);
    if (it == commands_.end()) {
      throw RegistryError("hints for unknown command '" + std::string(name) + "'");
    }
    it->second.hints = hints;
  }

  // Sets where a command registered earlier runs; ABX_INLINE (register.h) calls it. Throws
  // RegistryError like set_hints; inline for the same reason.
  void set_execution(std::string_view name, Execution execution) {
    std::lock_guard lock(mu_);
    if (frozen()) {
      throw RegistryError("cannot set how '" + std::string(name) +
                          "' runs: the registry is frozen (the server has started)");
    }
    auto it = commands_.find(name);
    if (it == commands_.end()) {
      throw RegistryError("execution for unknown command '" + std::string(name) + "'");
    }
    it->second.execution = execution;
  }

  // After freeze() the set of commands never changes, and lookups take no lock.
  void freeze();
  bool frozen() const { return frozen_.load(std::memory_order_acquire); }

  // nullptr when there is no such command.
  const RegisteredCommand* get(std::string_view name) const;
  // Every command, ordered by name.
  std::vector<const RegisteredCommand*> list_all() const;
  std::size_t size() const;

  // Registration mistakes found during static initialisation (where throwing would abort the
  // process before main) are recorded here; servers refuse to start while any exist.
  void record_error(std::string message);
  std::vector<std::string> errors() const;

 private:
  mutable std::mutex mu_;
  std::atomic<bool> frozen_{false};
  std::map<std::string, RegisteredCommand, std::less<>> commands_;
  std::vector<std::string> errors_;
};

// The process-wide registry that ABX_REGISTER fills.
CommandRegistry& default_registry();

// True if `name` is a valid command name.
bool valid_command_name(std::string_view name);
// True if `name` is a valid argument name ([A-Za-z_][A-Za-z0-9_]{0,63}).
bool valid_arg_name(std::string_view name);

}  // namespace abx::registry

// CommandBuilder::bind and ABX_REGISTER are defined here, so including either header is enough.
#include "abx/registry/register.h"  // IWYU pragma: export
