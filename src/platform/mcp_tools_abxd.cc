#include "mcp_tools_abxd.h"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "abx/base/os.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/client/sandbox.h"
#include "abx/mcp/session.h"
#include "abx/platform/host_route.h"
#include "abx/registry/registry.h"
#include "abx/store/sandbox_id.h"
#include "abx/templates/template.h"

namespace abx::platform {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Response;
using mcp::CommandArgInfo;
using mcp::CommandInfo;
using mcp::FileEntry;
using mcp::kMaxReadFileBytes;
using mcp::PlatformBackend;
using mcp::PlatformTools;
using mcp::SandboxSpec;
using mcp::SandboxSummary;
using mcp::ShellRequest;
using mcp::ShellResult;

namespace {

constexpr std::size_t kMaxSessions = 1024;
// No answer from inside a sandbox is buffered past this (read_file's own cap is lower).
constexpr std::uint64_t kMaxResponseBytes = 64u << 20;
// Unary requests into the sandbox; a registered command may run this long.
constexpr std::chrono::seconds kRequestTimeout{300};
// The command server starts just after envd: a call that finds nothing listening on its port yet
// waits this long for it.
constexpr std::chrono::seconds kCommandServerStartWait{5};
constexpr std::chrono::milliseconds kDialRetry{25};

SandboxSummary summary_of(const store::SandboxRecord& r, bool paused) {
  return {r.id,
          r.template_id,
          paused ? "paused" : "running",
          rfc3339(r.created_at_ms / 1000, 0),
          rfc3339(r.end_at_ms / 1000, 0),
          r.metadata};
}

// Connections into a sandbox's network namespace instead of through abxd's own listener (which
// would tie up a gateway worker twice per call). libabx addresses the command server as
// kCommandServerPort and the code interpreter as kCodeInterpreterPort; `server_port` and
// `interp_port` are where this sandbox's template puts them.
client::ConnectionConfig::SandboxDialer dialer(SandboxManager& sandboxes, std::uint16_t server_port,
                                               std::uint16_t interp_port) {
  return [&sandboxes, server_port, interp_port](const std::string& id,
                                                std::uint16_t port) -> Result<UniqueFd> {
    const bool server = port == client::kCommandServerPort;
    if (server) port = server_port;
    if (port == client::kCodeInterpreterPort) port = interp_port;
    const auto until = std::chrono::steady_clock::now() +
                       (server ? kCommandServerStartWait : std::chrono::seconds(0));
    Result<UniqueFd> got =
        unavailable("nothing listens on port " + std::to_string(port) + " in sandbox '" + id + "'");
    os::poll_until(until, os::Backoff{kDialRetry, kDialRetry}, [&] {
      auto fd = sandboxes.connect(id, port);
      if (fd.ok())
        got = UniqueFd(fd->release());
      else if (fd.error().code() != ErrorCode::kUnavailable)
        got = fd.error();
      else
        return false;
      return true;
    });
    return got;
  };
}

std::set<client::Capability> capabilities_of(const templates::Template* t) {
  std::set<client::Capability> out;
  for (auto c : {client::Capability::kShell, client::Capability::kFiles, client::Capability::kCode,
                 client::Capability::kPorts}) {
    // A sandbox without a template (none today) is not restricted. client::Capability is the
    // templates enum, so no name round trip is needed.
    if (t == nullptr || t->has(c)) out.insert(c);
  }
  return out;
}

CommandInfo info_of(const client::CommandEntry& e) {
  CommandInfo ci{e.name, e.description, std::string(client::command_source_name(e.source)), {}};
  for (const auto& a : e.args) {
    ci.args.push_back(CommandArgInfo{a.name, std::string(client::arg_type_name(a.type)), a.required,
                                     a.default_value, a.description});
  }
  return ci;
}

CommandInfo info_of(const templates::CustomCommand& cc) {
  CommandInfo ci{cc.name, cc.description, "yaml", {}};
  for (const auto& a : cc.args) {
    ci.args.push_back({a.name, std::string(registry::arg_type_name(a.type)), a.required,
                       a.default_value, a.description});
  }
  return ci;
}

using mcp::CodeRequest;

ShellResult shell_result(client::CommandResult r) {
  return {r.exit_code, std::move(r.stdout_data), std::move(r.stderr_data), std::move(r.error)};
}

// Lifecycle through the SandboxManager and the store; work inside a sandbox through libabx
// (client::Sandbox) over sockets the manager opens in the sandbox's netns, with its access token.
class AbxdBackend : public PlatformBackend {
 public:
  AbxdBackend(SandboxManager& sandboxes, store::Store& store, std::string team)
      : sandboxes_(sandboxes), store_(store), team_(std::move(team)) {}

  // The MCP edge of a create: the tool's schema bounds timeoutSeconds below (1); abxd's own
  // maximum is checked here (SandboxManager::create asserts the request's timeout is in range).
  Result<SandboxSummary> create_sandbox(const SandboxSpec& spec) override {
    if (spec.timeout_seconds && *spec.timeout_seconds > sandboxes_.options().max_timeout_seconds) {
      return invalid_argument("timeoutSeconds must be at most " +
                              std::to_string(sandboxes_.options().max_timeout_seconds));
    }
    CreateRequest cr;
    cr.template_id = spec.template_id;
    cr.timeout_seconds = spec.timeout_seconds;
    cr.metadata = spec.metadata;
    cr.env_vars = spec.envs;
    cr.team_id = team_;
    auto teardowns_wait = sandboxes_.hold_teardowns();
    ABX_ASSIGN_OR_RETURN(auto sb, sandboxes_.create(cr));
    return summary_of(sb->record, false);
  }

  Result<std::vector<SandboxSummary>> list_sandboxes() override {
    std::vector<SandboxSummary> out;
    store::SandboxFilter f;
    f.team_id = team_;
    f.states = {store::SandboxState::kRunning, store::SandboxState::kPaused};
    f.limit = 100;
    do {
      ABX_ASSIGN_OR_RETURN(auto page, store_.list_sandboxes(f));
      for (const auto& r : page.items) {
        out.push_back(summary_of(r, r.state == store::SandboxState::kPaused));
      }
      f.page_token = page.next_token;
    } while (!f.page_token.empty() && out.size() < 10'000);
    return out;
  }

  Result<bool> kill_sandbox(const std::string& id) override {
    if (!find(id).ok()) return false;  // unknown, or another team's
    Status s = sandboxes_.kill(id);
    if (s.ok()) return true;
    if (s.error().code() == ErrorCode::kNotFound) return false;
    return s.error();
  }

  Result<ShellResult> run_shell(const std::string& id, const ShellRequest& req) override {
    ABX_ASSIGN_OR_RETURN(auto sbx, open(id));
    client::CommandOptions o;
    o.envs = req.envs;
    o.cwd = req.cwd;
    o.timeout = req.timeout;
    ABX_ASSIGN_OR_RETURN(auto r, sbx.commands().run(req.command, o));
    return shell_result(std::move(r));
  }

  Result<std::string> read_file(const std::string& id, const std::string& path) override {
    // Bounded while reading: a larger file is refused without being held in memory.
    ABX_ASSIGN_OR_RETURN(auto sbx, open(id, kMaxReadFileBytes));
    auto r = sbx.files().read(path);
    if (!r.ok() && r.error().code() == ErrorCode::kPayloadTooLarge) {
      return Error(ErrorCode::kPayloadTooLarge,
                   path +
                       " is over the 4 MiB read_file limit: read parts of it with run_shell "
                       "(head, tail, sed -n)");
    }
    return r;
  }

  Status write_file(const std::string& id, const std::string& path,
                    const std::string& data) override {
    ABX_ASSIGN_OR_RETURN(auto sbx, open(id));
    ABX_TRY(sbx.files().write(path, data));
    return {};
  }

  Result<std::vector<FileEntry>> list_files(const std::string& id, const std::string& path,
                                            int depth) override {
    ABX_ASSIGN_OR_RETURN(auto sbx, open(id));
    ABX_ASSIGN_OR_RETURN(auto entries, sbx.files().list(path, static_cast<std::uint32_t>(depth)));
    std::vector<FileEntry> out;
    for (const auto& e : entries) out.push_back({e.name, e.path, e.type, e.size});
    return out;
  }

  Result<std::vector<CommandInfo>> list_commands(const std::string& id) override {
    ABX_ASSIGN_OR_RETURN(auto live, find(id));
    std::vector<CommandInfo> out;
    std::set<std::string> seen;
    // Layer 2 first: what the running command server says wins over the template's YAML.
    if (live->tmpl && live->tmpl->server) {
      ABX_ASSIGN_OR_RETURN(auto remote, handle(*live).server().list());
      for (const auto& e : remote) {
        if (seen.insert(e.name).second) out.push_back(info_of(e));
      }
    }
    if (live->tmpl) {
      for (const auto& cc : live->tmpl->custom_commands) {
        if (seen.insert(cc.name).second) out.push_back(info_of(cc));
      }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
  }

  Result<json::value> call_command(const std::string& id, const std::string& name,
                                   const json::object& arguments) override {
    ABX_ASSIGN_OR_RETURN(auto live, find(id));
    client::Sandbox sbx = handle(*live);
    const templates::Template* t = live->tmpl.get();
    const templates::CustomCommand* custom = nullptr;
    if (t) {
      for (const auto& cc : t->custom_commands) {
        if (cc.name == name) custom = &cc;
      }
    }
    if (t && t->server && registry::valid_command_name(name)) {
      auto r = sbx.server().call(name, arguments);
      // Unknown to the server: maybe a custom command of the template (the lower layer).
      if (r.ok() || !(r.error().code() == ErrorCode::kNotFound && custom != nullptr)) return r;
    }
    if (custom == nullptr) {
      return not_found("sandbox '" + id + "' has no command '" + name.substr(0, 64) +
                       "' (see list_commands)");
    }
    ABX_TRY(sbx.check_capability(client::Capability::kShell));
    ABX_ASSIGN_OR_RETURN(auto rendered,
                         templates::render_custom_command(*custom, json::value(arguments)));
    client::CommandOptions o;
    o.timeout = std::chrono::seconds(300);
    ABX_ASSIGN_OR_RETURN(auto r, sbx.commands().run_argv({"/bin/sh", "-c", rendered}, o));
    return json::value(json::object{
        {"exitCode", r.exit_code}, {"stdout", r.stdout_data}, {"stderr", r.stderr_data}});
  }

  Result<json::object> run_code(const std::string& id, const CodeRequest& req) override {
    ABX_ASSIGN_OR_RETURN(auto live, find(id));
    if (!live->tmpl || !live->tmpl->interpreter) {
      return Error(ErrorCode::kFailedPrecondition,
                   "sandbox " + id +
                       "'s template has no code interpreter (use template "
                       "code-interpreter)");
    }
    client::RunCodeOptions o;
    o.context_id = req.context_id;
    o.language = req.language;
    o.envs = req.envs;
    o.timeout = req.timeout;
    ABX_ASSIGN_OR_RETURN(auto ex, handle(*live).code().run(req.code, o));
    return client::to_json(ex);
  }

 private:
  Result<std::shared_ptr<LiveSandbox>> find(const std::string& id) {
    std::shared_ptr<LiveSandbox> sb =
        store::SandboxId::routable(id) ? sandboxes_.find(id) : nullptr;
    if (!sb || sb->record.team_id != team_)
      return not_found("sandbox '" + id.substr(0, 64) + "' not found");
    return sb;
  }

  // A libabx handle on a live sandbox, made per call: its connection pool goes with it.
  client::Sandbox handle(const LiveSandbox& sb, std::uint64_t max_response = kMaxResponseBytes) {
    client::ConnectionConfig config;
    config.request_timeout = kRequestTimeout;
    config.max_retries = 0;
    config.max_response_bytes = max_response;
    config.sandbox_dialer = dialer(
        sandboxes_, sb.tmpl && sb.tmpl->server ? sb.tmpl->server->port : client::kCommandServerPort,
        sb.tmpl && sb.tmpl->interpreter ? sb.tmpl->interpreter->port
                                        : client::kCodeInterpreterPort);
    client::SandboxInfo info;
    info.sandbox_id = sb.record.id;
    info.template_id = sb.record.template_id;
    info.envd_access_token = sb.access_token;
    return client::Sandbox::attach(std::move(info), config, capabilities_of(sb.tmpl.get()));
  }

  Result<client::Sandbox> open(const std::string& id,
                               std::uint64_t max_response = kMaxResponseBytes) {
    ABX_ASSIGN_OR_RETURN(auto live, find(id));
    return handle(*live, max_response);
  }

  SandboxManager& sandboxes_;
  store::Store& store_;
  const std::string team_;
};

// --- Streamable HTTP ---

// The credential a session is bound to: the API key, or the access key of a signed request.
std::string credential_of(const Request& req) {
  if (auto k = req["X-API-KEY"]; !k.empty()) return "key:" + std::string(k);
  std::string_view a = req[bhttp::field::authorization];
  if (a.size() > 7 && beast::iequals(a.substr(0, 7), "bearer ")) {
    return "key:" + std::string(a.substr(7));
  }
  if (auto c = a.find("Credential="); c != std::string_view::npos) {
    auto rest = a.substr(c + 11);
    return "ak:" + std::string(rest.substr(0, rest.find_first_of(", ")));
  }
  return {};
}

Response rpc_error_response(const Error& e, unsigned version, bool keep_alive) {
  return http::json_response(http::http_status(e.code()), mcp::error_response(e, nullptr), version,
                             keep_alive);
}

}  // namespace

std::unique_ptr<PlatformBackend> make_abxd_backend(SandboxManager& sandboxes, store::Store& store,
                                                   std::string team) {
  return std::make_unique<AbxdBackend>(sandboxes, store, std::move(team));
}

struct PlatformMcpEndpoint::Impl {
  Impl(SandboxManager& sm, store::Store& st, std::string team)
      : backend(sm, st, std::move(team)),
        tools(backend),
        dispatcher(mcp::platform_server_info("abxd")),
        sessions(kMaxSessions) {}

  AbxdBackend backend;
  PlatformTools tools;
  mcp::Dispatcher dispatcher;
  mcp::SessionStore sessions;
};

PlatformMcpEndpoint::PlatformMcpEndpoint(SandboxManager& sandboxes, store::Store& store,
                                         std::string team)
    : impl_(std::make_unique<Impl>(sandboxes, store, std::move(team))) {}
PlatformMcpEndpoint::~PlatformMcpEndpoint() = default;

Response PlatformMcpEndpoint::handle(const Request& req) {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  if (Status st = mcp::check_origin(req[bhttp::field::origin]); !st.ok()) {
    return rpc_error_response(st.error(), v, ka);
  }
  if (req.method() != bhttp::verb::post && req.method() != bhttp::verb::delete_) {
    Response r = rpc_error_response(
        Error(ErrorCode::kMethodNotAllowed,
              "/mcp takes POST (messages) and DELETE (end a session); this server sends no "
              "messages of its own, so there is no GET stream"),
        v, ka);
    r.set(bhttp::field::allow, "POST, DELETE");
    return r;
  }
  const std::string credential = credential_of(req);
  if (req.method() == bhttp::verb::delete_) {
    if (Status st = impl_->sessions.end(req[mcp::kSessionIdHeader], credential); !st.ok()) {
      return rpc_error_response(st.error(), v, ka);
    }
    return http::empty_response(bhttp::status::no_content, v, ka);
  }
  if (auto ct = req[bhttp::field::content_type];
      !ct.empty() && !beast::iequals(ct.substr(0, ct.find(';')), "application/json")) {
    return rpc_error_response(
        Error(ErrorCode::kUnsupportedMediaType, "/mcp takes application/json"), v, ka);
  }

  mcp::Decoded d = mcp::decode(req.body(), impl_->dispatcher.limits());
  if (!d.message) return http::json_response(400, *d.error_reply, v, ka);
  auto s = impl_->sessions.session_for(*d.message, req[mcp::kSessionIdHeader],
                                       req[mcp::kProtocolVersionHeader], credential);
  if (!s.ok()) return rpc_error_response(s.error(), v, ka);
  std::shared_ptr<mcp::Session> session = std::move(*s);

  // Tools run on this (worker) thread, so the reply is ready when dispatch returns; the
  // promise keeps that an implementation detail of PlatformTools.
  std::promise<std::optional<json::object>> reply;
  auto fut = reply.get_future();
  impl_->dispatcher.dispatch(
      *d.message, session->state, impl_->tools,
      [&reply](std::optional<json::object> r) { reply.set_value(std::move(r)); });
  auto r = fut.get();
  if (!r) return http::empty_response(bhttp::status::accepted, v, ka);
  Response res = http::json_response(200, *r, v, ka);
  // A new session (no id yet) whose initialize succeeded is stored now.
  if (session->id.empty() && session->state.initialized.load()) {
    auto id = impl_->sessions.open(session);
    if (!id.ok()) return rpc_error_response(id.error(), v, ka);
    res.set(mcp::kSessionIdHeader, *id);
  }
  return res;
}

Response serve_platform_mcp(SandboxManager& sandboxes, store::Store& store, const std::string& team,
                            const Request& req) {
  static std::mutex mu;
  // One endpoint (backend, sessions) per team: a team's tools never see another's sandboxes,
  // and a session id is only ever found by its own team's endpoint.
  static std::map<std::tuple<SandboxManager*, store::Store*, std::string>,
                  std::unique_ptr<PlatformMcpEndpoint>>
      endpoints;
  PlatformMcpEndpoint* ep = nullptr;
  {
    std::lock_guard lock(mu);
    auto& slot = endpoints[{&sandboxes, &store, team}];
    if (!slot) slot = std::make_unique<PlatformMcpEndpoint>(sandboxes, store, team);
    ep = slot.get();
  }
  return ep->handle(req);
}

}  // namespace abx::platform
