#include "server/mcp_endpoint.h"

#include <boost/beast/http/status.hpp>
#include <boost/json.hpp>

#include "abx/mcp/registry_tools.h"
#include "abx/registry/coerce.h"
#include "abx/token/token.h"

namespace abx::server {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Responder;
using http::Response;

namespace {

constexpr std::string_view kSessionHeader = "Mcp-Session-Id";
constexpr std::string_view kVersionHeader = "MCP-Protocol-Version";
constexpr std::size_t kSessionIdBytes = 16;  // 128 random bits, hex

Response empty_response(bhttp::status status, unsigned version, bool keep_alive) {
  Response r{status, version};
  r.keep_alive(keep_alive);
  r.prepare_payload();
  return r;
}

}  // namespace

CallerTools::CallerTools(const registry::CommandRegistry& reg, const std::vector<mcp::Tool>& all,
                         Caller caller, boost::asio::any_io_executor ex, const CommandRunner& run)
    : reg_(reg), all_(all), caller_(std::move(caller)), ex_(std::move(ex)), run_(run) {}

std::vector<mcp::Tool> CallerTools::list_tools() {
  std::vector<mcp::Tool> out;
  for (const auto& t : all_) {
    if (caller_.may_run(t.name)) out.push_back(t);
  }
  return out;
}

void CallerTools::call_tool(std::string_view name, const json::object& arguments,
                            mcp::ToolDone done) {
  const registry::RegisteredCommand* cmd =
      registry::valid_command_name(name) ? reg_.get(name) : nullptr;
  if (cmd == nullptr || !caller_.may_run(name)) {
    std::string shown =
        name.size() > 64 ? std::string(name.substr(0, 64)) + "..." : std::string(name);
    return done(not_found("unknown tool '" + shown + "'"));
  }
  // The same strict coercion as POST /commands/{name}; its errors name the argument.
  auto kwargs = registry::coerce_kwargs(*cmd, json::value(arguments));
  if (!kwargs.ok()) return done(kwargs.error());
  run_(*cmd, std::move(*kwargs), ex_, [done = std::move(done)](Result<json::value> r) {
    done(r.ok() ? mcp::command_result(std::move(*r)) : mcp::command_failure(r.error()));
  });
}

std::vector<mcp::Tool> tools_of(const registry::CommandRegistry& registry) {
  std::vector<mcp::Tool> out;
  for (const auto* cmd : registry.list_all()) out.push_back(mcp::tool_from_command(*cmd));
  return out;
}

void McpSessions::insert(std::shared_ptr<McpSession> s) {
  std::lock_guard lock(mu_);
  while (lru_.size() >= cap_) {
    by_id_.erase(lru_.back()->id);
    lru_.pop_back();
  }
  lru_.push_front(s);
  by_id_[s->id] = lru_.begin();
}

std::shared_ptr<McpSession> McpSessions::find(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return *it->second;
}

bool McpSessions::erase(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  lru_.erase(it->second);
  by_id_.erase(it);
  return true;
}

std::size_t McpSessions::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

McpEndpoint::McpEndpoint(const registry::CommandRegistry& registry,
                         const CommandServerOptions& options, CommandRunner run)
    : registry_(&registry),
      dispatcher_(command_server_info(),
                  mcp::DecodeLimits{options.limits.max_body_bytes, options.json}),
      run_(std::move(run)),
      sessions_(options.mcp_max_sessions),
      tools_(tools_of(registry)) {}

void McpEndpoint::handle(const Request& req, Caller caller, Responder respond) {
  if (req.method() == bhttp::verb::delete_) return end_session(req, caller, std::move(respond));
  post(req, std::move(caller), std::move(respond));
}

Result<std::shared_ptr<McpSession>> McpEndpoint::session_of(const Request& req,
                                                            const Caller& caller) {
  auto id = req[kSessionHeader];
  if (id.empty()) {
    return mcp::invalid_request(
        "Mcp-Session-Id header is required (send initialize first to open a session)");
  }
  auto s = sessions_.find(std::string(id));
  // A session opened with another credential is as unknown as a made-up id.
  if (s == nullptr || !token::constant_time_equal(s->credential, caller.credential)) {
    return mcp::session_not_found("unknown or ended MCP session (send initialize again)");
  }
  return s;
}

void McpEndpoint::end_session(const Request& req, const Caller& caller, Responder respond) {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  auto s = session_of(req, caller);
  if (!s.ok()) return respond(mcp_error_response(s.error(), v, ka));
  sessions_.erase((*s)->id);
  respond(empty_response(bhttp::status::no_content, v, ka));
}

void McpEndpoint::post(const Request& req, Caller caller, Responder respond) {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  mcp::Decoded d = mcp::decode(req.body(), dispatcher_.limits());
  if (!d.message) return respond(http::json_response(400, *d.error_reply, v, ka));
  const mcp::Message& m = *d.message;
  const bool init = m.kind == mcp::Message::Kind::kRequest && m.method == "initialize";

  std::shared_ptr<McpSession> session;
  if (init) {
    if (!req[kSessionHeader].empty()) {
      return respond(mcp_error_response(
          mcp::invalid_request("initialize opens a new session: send it without Mcp-Session-Id"), v,
          ka));
    }
    // Not shared until initialize succeeds, so the core may write its state unlocked.
    session = std::make_shared<McpSession>();
    session->credential = caller.credential;
  } else {
    auto s = session_of(req, caller);
    if (!s.ok()) return respond(mcp_error_response(s.error(), v, ka));
    session = std::move(*s);
    auto version = req[kVersionHeader];
    if (!version.empty() && version != session->state.protocol_version) {
      return respond(mcp_error_response(
          mcp::invalid_request(
              "MCP-Protocol-Version '" +
              std::string(version.substr(0, std::min<std::size_t>(version.size(), 32))) +
              "' is not this session's (" + session->state.protocol_version + ")"),
          v, ka));
    }
  }

  auto tools = std::make_shared<CallerTools>(*registry_, tools_, std::move(caller),
                                             respond.executor(), run_);
  dispatcher_.dispatch(
      m, session->state, *tools,
      [this, tools, session, init, v, ka, respond](std::optional<json::object> reply) {
        if (!reply) return respond(empty_response(bhttp::status::accepted, v, ka));
        Response r = http::json_response(200, *reply, v, ka);
        if (init && session->state.initialized.load()) {
          auto id = token::random_hex(kSessionIdBytes);
          if (!id.ok()) {
            return respond(mcp_error_response(id.error(), v, ka));
          }
          session->id = std::move(*id);
          sessions_.insert(session);
          r.set(kSessionHeader, session->id);
        }
        respond(std::move(r));
      });
}

}  // namespace abx::server
