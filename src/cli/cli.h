// The abx CLI: a thin shell over libabx (CLI11), one file per subcommand.
//
// Every top-level command is a TopCommand (below) whose fill function adds its arguments and
// subcommands; the selected one sets ctx.exit_code. Failures print "abx: <message>" on stderr
// (and, with --json, an {"error","type","code"} object on stdout) and exit with the code of
// exit_code_for(); the codes are documented in docs/cli.md.
#pragma once

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/client/sandbox.h"

namespace abx::cli {

// Exit codes (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;         // any other failure
inline constexpr int kExitUsage = 2;         // bad flags, unknown/bad/missing command arguments
inline constexpr int kExitAuth = 3;          // unauthenticated / permission denied
inline constexpr int kExitNotFound = 4;      // no such sandbox, template, command, file
inline constexpr int kExitUnavailable = 5;   // cannot reach the platform or sandbox; timed out
inline constexpr int kExitPrecondition = 6;  // the sandbox lacks a capability; wrong state
inline constexpr int kExitExecFailed = 125;  // `abx exec`: abx itself failed (not the command)

struct GlobalFlags {
  std::string api_url, api_key, domain, sandbox_url, server_url, access_token, home, template_id;
  bool json = false;
};

struct Context {
  GlobalFlags flags;
  int exit_code = kExitOk;

  // The environment overlaid with the global flags. With no API key (nor AK/SK) given and an
  // API URL on this host, the key abxd wrote to api_key_file() is used.
  client::ConnectionConfig config() const;
  // --home, else $ABX_HOME, else ~/.abx (as abxd resolves its home).
  std::filesystem::path home() const;
  std::filesystem::path api_key_file() const { return home() / "api_key"; }
  // Where the API key came from: "--api-key", "ABX_API_KEY", "E2B_API_KEY", the key file's path,
  // "ABX_ACCESS_KEY_ID" (signing), or "" when there is none.
  std::string api_key_source() const;
  // For a refused or missing API key: what to do about it, naming ABX_API_KEY, --api-key and
  // the key file; "" for other errors.
  std::string auth_hint(const Error& e) const;
  // Direct mode (a server/envd URL and an access token given, no control plane) attaches;
  // otherwise POST /sandboxes/{id}/connect.
  Result<client::Sandbox> open_sandbox(const std::string& id) const;

  // Prints the error (with --json, also its JSON object on stdout) and returns its exit code.
  int fail(const Error& e) const;
  // The error's line on stderr only, for a command that reports it inside its own JSON
  // (error_json); returns its exit code.
  int report(const Error& e) const;
  // {"error", "type", "code"}: how --json spells an error.
  boost::json::object error_json(const Error& e) const;
  int usage(const std::string& message) const;  // exit 2
  void print_json(const boost::json::value& v) const;
};

int exit_code_for(const Error& e);

// "90", "90s", "5m", "1h", "2d" → seconds. Errors: kInvalidArgument.
Result<std::chrono::seconds> parse_duration(std::string_view s);
// "K=V" pairs. Errors: kInvalidArgument naming the bad item.
Result<std::map<std::string, std::string>> parse_pairs(const std::vector<std::string>& items,
                                                       std::string_view what);

// JSON text as JSON.stringify writes it: numbers as 0.25, 2.5, 1e+21 (Boost.JSON's serialize
// gives 2.5E-1), NaN and infinities as null.
std::string json_text(const boost::json::value& v);

// Writes all of `d` to `fd` (streamed command output) with os::write_all; stops quietly once
// the descriptor is gone (e.g. a closed pipe).
void write_all(int fd, std::string_view d);

// A table with a header row, columns padded to the widest cell.
void print_table(const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

// `-a name=value` items converted to a command's declared types (see run.cc). Errors:
// kInvalidArgument with a message naming the argument (unknown, malformed, bad value, missing
// required, given twice).
Result<boost::json::object> parse_command_args(const client::CommandEntry& entry,
                                               const std::vector<std::string>& items);

// `abx sandbox kill` and `abx snapshot rm`: `remove` on each id (true: removed, false: there was
// none, reported as not_found "no <noun> <id>"), printing "<done> <id>" for each (with --json,
// one {"<id>": "<verb>"} object once all went). Returns the last failure's exit code.
int remove_each(Context& ctx, const std::vector<std::string>& ids, std::string_view noun,
                std::string_view done, std::string_view verb,
                const std::function<Result<bool>(const std::string&)>& remove);

// The sandbox id argument of a command that acts on one sandbox: its first argument, required
// (into `id`), spelled and explained the same way by every such command.
void add_sandbox_arg(CLI::App& cmd, std::string& id);
// A subcommand of `parent` that acts on one sandbox (add_sandbox_arg).
CLI::App* add_sandbox_subcommand(CLI::App& parent, const std::string& name, const std::string& help,
                                 std::string& id);

// A top-level command: its name, alias and help line, and `fill`, which adds its arguments,
// subcommands and callback to it. run_main() fills only the command that argv names (all of
// them when argv names none it knows), so start-up does not build the whole tree.
struct TopCommand {
  const char* name;
  const char* alias;  // nullptr: none
  const char* help;
  void (*fill)(CLI::App* cmd, Context& ctx);
};
// Every top-level command, in the order --help lists them (app.cc).
std::span<const TopCommand* const> top_commands();
extern const TopCommand kSandboxCommand;           // sandbox.cc: `abx sandbox`
extern const TopCommand kExecCommand;              // exec.cc: `abx exec`
extern const TopCommand kCodeCommand;              // code.cc: `abx code`
extern const TopCommand kFilesCommand;             // files.cc (+ files_cp.cc): `abx files`
extern const TopCommand kLogsCommand;              // logs.cc: `abx logs`
extern const TopCommand kTemplateCommand;          // template.cc: `abx template`
extern const TopCommand kSnapshotCommand;          // snapshot.cc: `abx snapshot`
extern const TopCommand kCommandsCommand;          // commands.cc: `abx commands`
extern const TopCommand kRunCommand;               // run.cc: `abx run`
extern const TopCommand kTokenCommand;             // token.cc: `abx token`
extern const TopCommand kUpCommand;                // up.cc: `abx up`
extern const TopCommand kEnvCommand;               // up.cc: `abx env`
extern const TopCommand kCompletionCommand;        // completion.cc: `abx completion`
extern const TopCommand kMcpCommand;               // mcp.cc: `abx mcp`
void add_files_cp(CLI::App& files, Context& ctx);  // files_cp.cc: `abx files cp`

// A snapshot as the platform spells it (snapshotID, names, sandboxID, templateID, createdAt).
boost::json::object snapshot_json(const client::SnapshotInfo& s);

// Runs the CLI (main() is this plus nothing).
int run_main(int argc, char** argv);

}  // namespace abx::cli
