#include "mcp_endpoint.h"

#include <boost/beast/http/status.hpp>
#include <boost/json.hpp>

#include "abx/mcp/registry_tools.h"
#include "abx/registry/coerce.h"

namespace abx::server {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Responder;
using http::Response;

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
  auto kwargs = registry::coerce_kwargs(*cmd, arguments);
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

void McpEndpoint::end_session(const Request& req, const Caller& caller, Responder respond) {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  if (Status st = sessions_.end(req[mcp::kSessionIdHeader], caller.credential); !st.ok()) {
    return respond(mcp_error_response(st.error(), v, ka));
  }
  respond(http::empty_response(bhttp::status::no_content, v, ka));
}

void McpEndpoint::post(const Request& req, Caller caller, Responder respond) {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  // The message is parsed into an arena on this stack frame: nothing of it outlives the dispatch
  // (a tool's arguments are coerced into a new object before the command runs, and the
  // dispatcher copies the id it answers with). A small message does not outgrow the first block.
  unsigned char first_block[2048];
  json::monotonic_resource arena(first_block, sizeof first_block);
  mcp::Decoded d = mcp::decode(req.body(), dispatcher_.limits(), &arena);
  if (!d.message) return respond(http::json_response(400, *d.error_reply, v, ka));
  const mcp::Message& m = *d.message;
  auto s = sessions_.session_for(m, req[mcp::kSessionIdHeader], req[mcp::kProtocolVersionHeader],
                                 caller.credential);
  if (!s.ok()) return respond(mcp_error_response(s.error(), v, ka));
  std::shared_ptr<mcp::Session> session = std::move(*s);

  auto tools = std::make_shared<CallerTools>(*registry_, tools_, std::move(caller),
                                             respond.executor(), run_);
  dispatcher_.dispatch(m, session->state, *tools,
                       [this, tools, session, v, ka, respond](std::optional<json::object> reply) {
                         if (!reply)
                           return respond(http::empty_response(bhttp::status::accepted, v, ka));
                         Response r = http::json_response(200, *reply, v, ka);
                         // A new session (no id yet) whose initialize succeeded is stored now.
                         if (session->id.empty() && session->state.initialized.load()) {
                           auto id = sessions_.open(session);
                           if (!id.ok()) return respond(mcp_error_response(id.error(), v, ka));
                           r.set(mcp::kSessionIdHeader, *id);
                         }
                         respond(std::move(r));
                       });
}

}  // namespace abx::server
