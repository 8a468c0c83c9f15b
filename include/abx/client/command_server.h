// Registered commands: calling and listing the sandbox's command server (port 49982), and the
// command catalogue entries that discovery returns.
//
//   auto r = sandbox.server().call("demo", {{"x", 42}, {"y", "world"}});   // → "42: world"
//
// call() returns the `result` of `200 {"result": …}`. A failure response
// `{"error": "<message>", "type": "<class>"}` becomes an Error whose message() is the server's
// `error` and whose type() is the server's `type` (e.g. "std::domain_error"), with the code
// from the HTTP status (400 kInvalidArgument, 401 kUnauthenticated, 404 kNotFound, 500
// kInternal, 503 kUnavailable, 504 kDeadlineExceeded, …). Transport failures are kUnavailable
// or kDeadlineExceeded. Calls are POSTs and are not retried once sent (a command may have side
// effects); listing is retried like any idempotent request.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/client/export.h"
#include "abx/registry/arg_type.h"

namespace abx::client {

namespace detail {
struct SandboxState;
}

// Where a discovered command comes from:
//   kYaml        a template's custom_commands (local template.yaml, or the platform's template
//                metadata); runs as a shell command through commands().run
//   kRegistered  a command module introspected locally (dlopen); runs on the command server
//   kRemote      the running command server's GET /commands
enum class CommandSource { kYaml, kRegistered, kRemote };
ABX_EXPORT std::string_view command_source_name(
    CommandSource s);  // "yaml" | "registered" | "remote"

// A command argument's type: the registry's own enum (header-only), so the SDK and the command
// server agree by construction. arg_type_name / parse_arg_type give and read its wire name, and
// `spec.type == "integer"` compares a type with a name.
using ArgType = registry::ArgType;
using registry::arg_type_name;
using registry::parse_arg_type;

struct ABX_EXPORT ArgSpec {
  std::string name;
  ArgType type = ArgType::kString;
  bool required = false;
  boost::json::value default_value;  // null: none
  std::string description;
  // The inclusive range of an integer argument and the largest magnitude of a float one, when
  // known (a command module introspected locally: the C++ parameter's range). The command
  // server applies its own in any case.
  std::optional<std::int64_t> minimum;
  std::optional<std::int64_t> maximum;
  std::optional<double> max_magnitude;

  // Checks a value as the command server will (type, then range: the table in
  // abx/registry/coerce.h) and returns it normalised; kInvalidArgument naming the argument.
  Result<boost::json::value> check(const boost::json::value& v) const;
};

struct ABX_EXPORT CommandEntry {
  std::string name;
  std::string description;
  CommandSource source = CommandSource::kRemote;
  std::vector<ArgSpec> args;
  std::string command;  // the shell template, for kYaml entries

  const ArgSpec* find_arg(std::string_view arg_name) const;
};

// {"name","description","source","args":[{"name","type","required","default","description"}]}
// (+ "command" for yaml entries).
ABX_EXPORT boost::json::object to_json(const CommandEntry& entry);
// Parses one entry of GET /commands (or of a template's customCommands). Errors:
// kInvalidArgument naming the missing or mistyped field.
ABX_EXPORT Result<CommandEntry> command_entry_from_json(const boost::json::value& v,
                                                        CommandSource source);

class ABX_EXPORT CommandServer {
 public:
  explicit CommandServer(std::shared_ptr<detail::SandboxState> state) : state_(std::move(state)) {}

  // The command's result.
  Result<boost::json::value> call(std::string_view name, const boost::json::object& kwargs = {});
  // The whole success body, {"result": …} (what `abx run --json` prints).
  Result<boost::json::object> call_raw(std::string_view name, const boost::json::object& kwargs);
  // GET /commands: what this caller may run (a scoped token sees only its commands).
  Result<std::vector<CommandEntry>> list();

 private:
  std::shared_ptr<detail::SandboxState> state_;
};

}  // namespace abx::client
