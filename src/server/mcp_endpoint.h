// The command server's /mcp: the MCP Streamable HTTP transport (revision 2025-06-18) over the
// core in abx/mcp, serving the registry's commands as tools.
//
// Every POST carries one JSON-RPC message. A request is answered with 200 and one JSON body
// (never an SSE stream: the server sends no requests or notifications of its own); a
// notification or response with 202 and no body. `initialize` opens a session and its answer
// carries `Mcp-Session-Id`; every later message must send it back (400 without, 404 for an
// unknown, ended or evicted session — or one opened with another credential), and may send
// `MCP-Protocol-Version`, which must be the session's negotiated version (else 400); the
// sessions are abx/mcp/session.h's. DELETE /mcp ends a session. Auth, Origin, method and content
// type are checked by the Router.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "abx/http/server.h"
#include "abx/mcp/mcp.h"
#include "abx/mcp/session.h"
#include "abx/registry/registry.h"
#include "abx/server/server.h"
#include "router.h"

namespace abx::server {

// Runs a command with the server's deadline; `done` gets its return value or an Error
// (kInternal typed with the exception class when it threw, kDeadlineExceeded). Called on the
// connection's executor `ex` for the deadline timer; `done` may run on any thread.
using CommandRunner = std::function<void(
    const registry::RegisteredCommand& cmd, boost::json::object kwargs,
    boost::asio::any_io_executor ex, std::function<void(Result<boost::json::value>)> done)>;

// The registry's commands as seen by one caller: a scoped caller lists and calls only its
// commands, and every other name is an unknown tool (as on the REST routes: 404 there). Cheap
// to build per request; `all`, `run` and the registry must outlive it.
class CallerTools : public mcp::ToolProvider {
 public:
  CallerTools(const registry::CommandRegistry& reg, const std::vector<mcp::Tool>& all,
              Caller caller, boost::asio::any_io_executor ex, const CommandRunner& run);
  std::vector<mcp::Tool> list_tools() override;
  void call_tool(std::string_view name, const boost::json::object& arguments,
                 mcp::ToolDone done) override;

 private:
  const registry::CommandRegistry& reg_;
  const std::vector<mcp::Tool>& all_;
  Caller caller_;
  boost::asio::any_io_executor ex_;
  const CommandRunner& run_;
};

// Every command of a frozen registry as a tool, ordered by name.
std::vector<mcp::Tool> tools_of(const registry::CommandRegistry& registry);

// What abx-server says about itself in initialize.
inline mcp::ServerInfo command_server_info() { return {"abx-server", "0.1.0", ""}; }

class McpEndpoint {
 public:
  // `registry` is frozen and outlives the endpoint.
  McpEndpoint(const registry::CommandRegistry& registry, const CommandServerOptions& options,
              CommandRunner run);

  // A request the Router passed on (Routed::mcp): POST or DELETE, authenticated as `caller`.
  void handle(const http::Request& req, Caller caller, http::Responder respond);

  std::size_t session_count() const { return sessions_.size(); }

 private:
  void post(const http::Request& req, Caller caller, http::Responder respond);
  void end_session(const http::Request& req, const Caller& caller, http::Responder respond);

  const registry::CommandRegistry* registry_;
  mcp::Dispatcher dispatcher_;
  CommandRunner run_;
  mcp::SessionStore sessions_;
  std::vector<mcp::Tool> tools_;  // every command as a tool, by name; built once (frozen)
};

}  // namespace abx::server
