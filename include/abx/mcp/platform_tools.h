// The platform's MCP tools: one MCP server that gives an agent a whole sandbox platform.
//
//   create_sandbox  {template?, timeoutSeconds?, envs?, metadata?} -> {sandboxId, templateId, …}
//   list_sandboxes  {}                                  -> {sandboxes: [{sandboxId, …, state}]}
//   kill_sandbox    {sandboxId}                         -> {sandboxId, killed}
//   run_shell       {sandboxId, command, cwd?, timeoutSeconds?, envs?}
//                                                       -> {exitCode, stdout, stderr, …}
//   read_file       {sandboxId, path}                   -> {path, content, encoding, size}
//   write_file      {sandboxId, path, content, encoding?} -> {path, size}
//   list_files      {sandboxId, path, depth?}           -> {entries: [{name, path, type, size}]}
//   list_commands   {sandboxId}                         -> {commands: [{name, description,
//                                                           source, args: […]}]}
//   call_command    {sandboxId, name, arguments?}       -> {result: …}
//   run_code        {sandboxId, code, contextId?, language?, envs?, timeoutSeconds?}
//                                                       -> {stdout, stderr, text, results,
//                                                           error?, executionCount}, and each
//                                                           PNG/JPEG result as an image item
//
// The tools are the same wherever they are served (abxd's POST /mcp over its SandboxManager,
// `abx mcp` over stdio through libabx), so this part knows nothing of either: it owns the
// schemas, checks arguments strictly against them and turns a PlatformBackend's answers into
// tool results. It is part of abx::mcp (no platform code), so the CLI links it without the rest
// of the platform.
//
// Errors follow MCP's split: arguments that do not fit a tool's schema (missing, unknown,
// mistyped, out of range) and unknown tools are protocol errors (-32602); anything the backend
// reports (no such sandbox, a command that failed, a file that is missing) is a tool result
// with isError set and the message as text, so the model can read it and try again. A shell
// command that exits non-zero is a plain result: the exit code is data. Code that raised
// (run_code) is a result with isError set: its text holds the error and traceback.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/mcp/mcp.h"

namespace abx::mcp {

// Output of run_shell larger than this (per stream) is cut, and the result says so: a model's
// context is the wrong place for megabytes of output.
inline constexpr std::size_t kMaxShellOutputBytes = 256 * 1024;
// read_file refuses files larger than this (use run_shell with head/tail instead).
inline constexpr std::size_t kMaxReadFileBytes = 4 * 1024 * 1024;

struct SandboxSpec {
  std::string template_id = "base";
  std::optional<std::int64_t> timeout_seconds;  // unset: the template's / platform's default
  std::map<std::string, std::string> envs;
  std::map<std::string, std::string> metadata;
};

// What the tools say about a sandbox (no access token: the tools act on the agent's behalf,
// the model never needs it).
struct SandboxSummary {
  std::string sandbox_id;
  std::string template_id;
  std::string state;  // running | paused
  std::string started_at;
  std::string end_at;
  std::map<std::string, std::string> metadata;
};

struct ShellRequest {
  std::string command;  // run by /bin/bash -l -c
  std::string cwd;      // empty: the user's home
  std::chrono::seconds timeout{60};
  std::map<std::string, std::string> envs;
};

struct ShellResult {
  int exit_code = 0;
  std::string stdout_data;
  std::string stderr_data;
  std::string error;  // envd's end.error, e.g. "exit status 1"
};

// run_code: stateful code in the sandbox's code interpreter (docs/code-interpreter.md).
struct CodeRequest {
  std::string code;
  std::string context_id;  // empty: the language's default context
  std::string language;    // empty: python
  std::map<std::string, std::string> envs;
  std::chrono::seconds timeout{60};
};

struct FileEntry {
  std::string name;
  std::string path;
  std::string type;  // file | dir | symlink | unknown
  std::int64_t size = 0;
};

struct CommandArgInfo {
  std::string name;
  std::string type = "string";  // string | integer | float | boolean
  bool required = false;
  boost::json::value default_value;  // null: none
  std::string description;
};

struct CommandInfo {
  std::string name;
  std::string description;
  std::string source;  // remote (the command server's GET /commands) | yaml (custom_commands)
  std::vector<CommandArgInfo> args;
};

// Where the tools get their work done. Every call may block (it talks to sandboxes); errors are
// reported to the model as tool errors, so their messages should name the sandbox or path.
class PlatformBackend {
 public:
  virtual ~PlatformBackend() = default;
  virtual Result<SandboxSummary> create_sandbox(const SandboxSpec& spec) = 0;
  virtual Result<std::vector<SandboxSummary>> list_sandboxes() = 0;
  // False when there was no such sandbox.
  virtual Result<bool> kill_sandbox(const std::string& id) = 0;
  // A non-zero exit is a ShellResult, not an error; kDeadlineExceeded when the timeout passed.
  virtual Result<ShellResult> run_shell(const std::string& id, const ShellRequest& req) = 0;
  virtual Result<std::string> read_file(const std::string& id, const std::string& path) = 0;
  virtual Status write_file(const std::string& id, const std::string& path,
                            const std::string& data) = 0;
  virtual Result<std::vector<FileEntry>> list_files(const std::string& id, const std::string& path,
                                                    int depth) = 0;
  // Two-layer discovery, merged by name.
  virtual Result<std::vector<CommandInfo>> list_commands(const std::string& id) = 0;
  // The command's result: a registered command's return value, or for a template's custom
  // (shell) command {"exitCode","stdout","stderr"}.
  virtual Result<boost::json::value> call_command(const std::string& id, const std::string& name,
                                                  const boost::json::object& arguments) = 0;
  // The execution in E2B's JSON shape (libabx's to_json(Execution): results, logs.stdout,
  // logs.stderr, error, executionCount). Code that raised is a result (error set), not an Error;
  // kFailedPrecondition when the template has no code interpreter, kDeadlineExceeded when the
  // timeout passed (the code is interrupted).
  virtual Result<boost::json::object> run_code(const std::string& id, const CodeRequest& req) = 0;
};

// The tools over a backend. call_tool runs the backend call on the calling thread and calls
// `done` before returning. Thread-safe when the backend is.
class PlatformTools : public ToolProvider {
 public:
  explicit PlatformTools(PlatformBackend& backend);
  std::vector<Tool> list_tools() override;
  void call_tool(std::string_view name, const boost::json::object& arguments,
                 ToolDone done) override;

 private:
  PlatformBackend& backend_;
  std::vector<Tool> tools_;
};

// The tool list alone (names, schemas, annotations), ordered by name.
const std::vector<Tool>& platform_tools();

// What the platform's MCP servers say about themselves in initialize.
ServerInfo platform_server_info(std::string name);

// "<type>: <message>" as a tool error's text.
ToolResult tool_error(const Error& e);

}  // namespace abx::mcp
