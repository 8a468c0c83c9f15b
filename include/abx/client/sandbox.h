// libabx — the C++ SDK for abx (and any E2B-compatible platform).
//
//   auto cfg = abx::client::ConnectionConfig::from_env();
//   auto sbx = abx::client::Sandbox::create("demo", {}, cfg);
//   auto out = sbx->commands().run("echo hi");                 // envd process.Process/Start
//   sbx->files().write("/tmp/a", "data");                      // envd /files
//   auto r = sbx->server().call("demo", {{"x", 42}});          // command server, port 49982
//   auto ex = sbx->code().run("1 + 1");                       // code interpreter, port 49999
//   auto cmds = sbx->list_commands();                          // two-layer discovery
//
// A Sandbox is a cheap handle (copies share one connection pool and caches). Control-plane
// calls go to ConnectionConfig::api_url with X-API-KEY (or AK/SK signatures); sandbox-plane
// calls (envd, command server) carry the sandbox's access token as X-Access-Token and the
// E2b-Sandbox-Id / E2b-Sandbox-Port routing headers, so one abxd listener serves both.
//
// Capabilities (`shell`, `files`, `code`, `ports`; default shell, files, code) come from the
// local template ($ABX_HOME/templates/**/template.yaml or a built-in), else from the
// platform's GET /templates/{id}, else the defaults. Every API that needs one checks first and
// fails with kFailedPrecondition: "sandbox <id> (template <t>) lacks the 'files' capability".
//
// Persistence (abxd with CRIU; docs/persistence.md): pause() writes a sandbox to disk, connect()
// resumes it, fork() clones a running one, create_snapshot() keeps its state under a
// "snapshot-…" id. Creating a sandbox from a snapshot is just Sandbox::create(snapshot_id).
//
// Errors: control-plane responses {"code","message"} map by HTTP status (401
// kUnauthenticated, 404 kNotFound, 409 kFailedPrecondition, 429 kResourceExhausted, 5xx
// kUnavailable/kInternal, …), with the platform's message.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/client/code.h"
#include "abx/client/command_server.h"
#include "abx/client/commands.h"
#include "abx/client/config.h"
#include "abx/client/export.h"
#include "abx/client/files.h"
#include "abx/templates/capability.h"

namespace abx::client {

// The one capability enum (templates owns it, header-only); the names are part of the SDK's API.
using Capability = templates::Capability;
using templates::capability_name;
using templates::parse_capability;
// shell, files, code.
ABX_EXPORT std::set<Capability> default_capabilities();

struct ABX_EXPORT SandboxInfo {
  std::string sandbox_id;
  std::string template_id;
  std::string alias;
  std::string client_id;
  std::string envd_version;
  std::string envd_access_token;
  std::string domain;
  std::string state;  // running | paused (list/info only)
  std::string started_at;
  std::string end_at;
  int cpu_count = 0;
  int memory_mb = 0;
  std::map<std::string, std::string> metadata;
  // GET /sandboxes/{id} only: allowInternetAccess (absent: not reported) and network's lists.
  std::optional<bool> allow_internet_access;
  std::vector<std::string> allow_out, deny_out;

  boost::json::object to_json() const;  // E2B field names (sandboxID, templateID, …)
};
// Parses a Sandbox / ListedSandbox / SandboxDetail object. Errors: kInvalidArgument.
ABX_EXPORT Result<SandboxInfo> sandbox_info_from_json(const boost::json::value& v);

// One line of GET /sandboxes/{id}/logs (E2B's logEntries): what the sandbox's start command or
// command server printed, their supervisor's events, or the platform's lifecycle events.
struct ABX_EXPORT LogEntry {
  std::string timestamp;  // RFC 3339
  std::int64_t timestamp_ms = 0;
  std::string level;    // info | warn | error
  std::string message;  // the line, without its newline
  std::string source;   // "start command", "command server", "abxd", … (fields.source)
  std::string stream;   // "stdout", "stderr", "event" (fields.stream)
};

struct ABX_EXPORT CreateOptions {
  std::chrono::seconds timeout{300};
  std::map<std::string, std::string> envs;
  std::map<std::string, std::string> metadata;
  bool secure = true;
  bool allow_internet_access = true;
  // E2B's network rules: addresses, CIDRs and (allow only) domains; allow wins over deny.
  std::vector<std::string> allow_out, deny_out;
};

// One outbound flow or DNS question of a sandbox with its verdict (abx logs --network).
struct ABX_EXPORT NetworkEvent {
  std::int64_t timestamp_ms = 0;
  std::string protocol;     // tcp | udp | icmp | dns
  std::string destination;  // address (dns: the record type asked)
  int port = 0;
  std::string domain;   // SNI, Host or the DNS question, when known
  std::string verdict;  // allow | deny | blocked
};

struct ABX_EXPORT ListFilters {
  std::vector<std::string> states;  // running, paused; empty: both
  std::map<std::string, std::string> metadata;
  std::string template_id;
  int limit = 0;  // 0: every page
};

// A snapshot of a sandbox (POST /sandboxes/{id}/snapshots, GET /snapshots). Its id is a
// template id: Sandbox::create(id) starts a sandbox from it.
struct ABX_EXPORT SnapshotInfo {
  std::string id;  // "snapshot-…"
  std::vector<std::string> names;
  std::string sandbox_id;   // the sandbox it was taken from (list only)
  std::string template_id;  // that sandbox's template (list only)
  std::string created_at;   // RFC 3339 (list only)
};

struct ABX_EXPORT DiscoveryOptions {
  // Command modules (.so) to introspect locally (Layer 1, source "registered").
  std::vector<std::string> modules;
  // Layer 2: the command server's GET /commands, then the platform's template metadata.
  bool remote = true;
};

// Results of run_code.
enum class Language { kPython, kJavaScript, kBash };
ABX_EXPORT std::optional<Language> parse_language(std::string_view name);

class ABX_EXPORT Sandbox {
 public:
  // POST /sandboxes (201).
  static Result<Sandbox> create(std::string_view template_id, const CreateOptions& opts = {},
                                const ConnectionConfig& config = ConnectionConfig::from_env());
  // POST /sandboxes/{id}/connect: resumes a paused sandbox, extends a running one's timeout
  // to at least `timeout` (0: leaves its deadline as it is), and returns its access token.
  // `resumed` (if given) is set to whether the sandbox was paused (the platform answered 201)
  // rather than running (200).
  static Result<Sandbox> connect(std::string_view sandbox_id,
                                 const ConnectionConfig& config = ConnectionConfig::from_env(),
                                 std::chrono::seconds timeout = std::chrono::seconds(300),
                                 bool* resumed = nullptr);
  // Direct mode, no control plane: a handle from what the caller already knows (id, template,
  // access token; config.server_url / sandbox_url point at the servers). Used to talk to a
  // standalone abx-server or abx-envd, e.g. while developing a command module.
  static Sandbox attach(SandboxInfo info, const ConnectionConfig& config);
  // The same, when the caller already knows the template's capabilities (abxd does): they are
  // used as they are, never looked up.
  static Sandbox attach(SandboxInfo info, const ConnectionConfig& config,
                        std::set<Capability> capabilities);
  // GET /v2/sandboxes, following X-Next-Token.
  static Result<std::vector<SandboxInfo>> list(
      const ListFilters& filters = {},
      const ConnectionConfig& config = ConnectionConfig::from_env());
  // DELETE /sandboxes/{id}: true when killed, false when there was no such sandbox.
  static Result<bool> kill(std::string_view sandbox_id, const ConnectionConfig& config);
  // GET /sandboxes/{id}/logs?start=&limit=: entries at or after `start_ms` (Unix ms), oldest
  // first, at most `limit`. Does not resume a paused sandbox. Errors: kNotFound, kUnauthenticated.
  static Result<std::vector<LogEntry>> logs(std::string_view sandbox_id,
                                            const ConnectionConfig& config,
                                            std::int64_t start_ms = 0, int limit = 1000);

  // PUT /sandboxes/{id}/network: replaces the sandbox's outbound rules. `allow_internet_access`
  // false denies everything not in `allow_out`. Errors: kNotFound, kInvalidArgument (a bad
  // entry, named), kFailedPrecondition (paused, or a sandbox without network).
  static Status update_network(std::string_view sandbox_id, const ConnectionConfig& config,
                               const std::vector<std::string>& allow_out,
                               const std::vector<std::string>& deny_out,
                               std::optional<bool> allow_internet_access = std::nullopt);
  // GET /sandboxes/{id}/network/audit: flows and DNS questions at or after `start_ms`.
  static Result<std::vector<NetworkEvent>> network_audit(std::string_view sandbox_id,
                                                         const ConnectionConfig& config,
                                                         std::int64_t start_ms = 0);

  const std::string& id() const;
  const SandboxInfo& cached_info() const;
  const ConnectionConfig& config() const;

  Result<bool> kill();
  Status set_timeout(std::chrono::seconds timeout);
  Result<SandboxInfo> info();  // GET /sandboxes/{id}
  Result<bool> pause();        // false when already paused

  // POST /sandboxes/{id}/fork: `count` (1..64) children of this running sandbox, each with its
  // own id, access token and writable layer; the parent runs on. One entry per child: a usable
  // handle, or that child's error (its HTTP status mapped like any control-plane error).
  // `timeout`: the children's lifetime (absent: the platform's default). Errors of the call
  // itself: kInvalidArgument (count), kNotFound, kFailedPrecondition (paused, no CRIU, …).
  Result<std::vector<Result<Sandbox>>> fork(int count = 1,
                                            std::optional<std::chrono::seconds> timeout = {});
  // POST /sandboxes/{id}/snapshots: keeps the sandbox's state (it runs on) under a new
  // "snapshot-…" id, with `name` (if given) among its names. Create sandboxes from it with
  // Sandbox::create(snapshot.id). Errors: kNotFound, kFailedPrecondition, kInvalidArgument.
  Result<SnapshotInfo> create_snapshot(std::string_view name = {});
  // GET /snapshots, newest first, following X-Next-Token; only those of `sandbox_id` and/or
  // carrying `name` when given.
  static Result<std::vector<SnapshotInfo>> list_snapshots(const ConnectionConfig& config,
                                                          std::string_view sandbox_id = {},
                                                          std::string_view name = {});
  // DELETE /templates/{snapshot_id}: true when deleted, false when there was no such snapshot.
  static Result<bool> delete_snapshot(std::string_view snapshot_id, const ConnectionConfig& config);

  // Resolved once and cached (see the header comment).
  Result<std::set<Capability>> capabilities();
  Status check_capability(Capability c);

  Commands commands();
  Files files();
  CommandServer server();

  // "<port>-<id>.<domain>" (no scheme). Needs `ports`.
  Result<std::string> get_host(std::uint16_t port);

  // The sandbox's code interpreter (stateful contexts; code.h). Its calls need a template with
  // an interpreter (e.g. `code-interpreter`): elsewhere they fail with kFailedPrecondition.
  CodeInterpreter code();
  // Whether the template runs a code interpreter: the local template's `interpreter`, else the
  // platform's GET /templates/{id} (`interpreter` not null); false when neither says. Resolved
  // once and cached, like capabilities().
  Result<bool> has_code_interpreter();

  // Runs `code` once. Needs `code`. Python on a template with a code interpreter runs in the
  // interpreter's default context (state persists between calls, as with code().run()): the
  // CommandResult's stdout is the stdout chunks followed by the main result's text (a newline
  // after it), stderr the stderr chunks followed by the error's traceback (or "Name: value"),
  // exit_code 1 when the code raised, else 0; error holds "Name: value". opts.envs are the
  // execution's env vars, opts.timeout its timeout (0: none), on_stdout/on_stderr get the
  // chunks. Otherwise (JavaScript, bash, no interpreter, or opts.cwd, user, stdin or pty set:
  // a context has none of them) a fresh process through the process API: python3 -c, node -e,
  // bash -c, its exit code and output as they are.
  Result<CommandResult> run_code(std::string_view code, Language language,
                                 const CommandOptions& opts = {});

  // Runs the template's custom command `name` (custom_commands in template.yaml, local or from
  // the platform): arguments are type-checked against its schema, each value shell-quoted into
  // the {placeholders}, then run through commands(). Needs `shell`. Errors: kNotFound (no such
  // custom command), kInvalidArgument (unknown, missing or mistyped argument).
  Result<CommandResult> run(std::string_view name, const boost::json::object& args,
                            const CommandOptions& opts = {});

  // Two-layer discovery, merged by name (remote > yaml > registered). Layer 1 (local, no
  // network): the template's custom_commands and the given command modules. Layer 2 (remote,
  // same credentials as execution): GET /commands of the command server; when no command
  // server answers (or abxd keeps its port private: 403), the platform's template metadata. An
  // authentication failure (401) in Layer 2 is returned,
  // not hidden: discovery never reaches further than execution.
  Result<std::vector<CommandEntry>> list_commands(const DiscoveryOptions& opts = {});

  // A token for the command server limited to `commands`, valid for `ttl`. Minted locally
  // (HMAC keyed by the access token, exactly as the platform does) when this handle holds the
  // full access token, else by POST /sandboxes/{id}/tokens.
  Result<std::string> scoped_token(const std::vector<std::string>& commands,
                                   std::chrono::seconds ttl);

  // Copies that share state; `with_access_token` makes one that authenticates with another
  // token (e.g. a scoped one) on the sandbox plane.
  Sandbox with_access_token(std::string token) const;

  explicit Sandbox(std::shared_ptr<detail::SandboxState> state) : state_(std::move(state)) {}

 private:
  Result<CommandResult> run_code_in_interpreter(std::string_view src, const CommandOptions& opts);

  std::shared_ptr<detail::SandboxState> state_;
};

// Templates on the platform (GET /templates, GET /templates/{id}), as JSON objects.
ABX_EXPORT Result<boost::json::array> list_templates(const ConnectionConfig& config);
ABX_EXPORT Result<boost::json::object> get_template(std::string_view template_id,
                                                    const ConnectionConfig& config);

// Layer 1 alone (no sandbox, no network): the custom commands of local template `template_id`
// (empty: none) and the commands registered by `modules`. Errors: kNotFound for an unknown
// template id, kUnavailable/kInvalidArgument when a module does not load (dlerror() text).
ABX_EXPORT Result<std::vector<CommandEntry>> discover_local(
    const ConnectionConfig& config, std::string_view template_id,
    const std::vector<std::string>& modules);

// Loads a command module with dlopen and returns the commands it registered. The program must
// export the registry (link abx_registry whole-archive and export its symbols: -rdynamic, as
// abx-server does, or src/cli/module-exports.list, as abx does); otherwise the module's symbols do
// not resolve and this fails with dlerror()'s text. Loading the same path again returns the same
// commands.
ABX_EXPORT Result<std::vector<CommandEntry>> load_command_module(const std::string& path);

// Merges discovery layers by name: the first list wins for a name present in several.
ABX_EXPORT std::vector<CommandEntry> merge_commands(
    const std::vector<std::vector<CommandEntry>>& layers);

}  // namespace abx::client
