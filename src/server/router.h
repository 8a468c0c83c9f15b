// Routing of one command-server request, without I/O: authentication, lookup, method and
// content-type checks, and kwarg coercion. Either the answer is known at once (`immediate`) or
// a command is to run with the coerced kwargs. Kept pure so the fuzz target can drive it.
#pragma once

#include <boost/json/object.hpp>
#include <optional>
#include <string>
#include <vector>

#include "abx/http/server.h"
#include "abx/registry/registry.h"
#include "abx/server/server.h"
#include "abx/token/token.h"

namespace abx::server {

// /mcp answers errors in JSON-RPC shape ({"jsonrpc","id":null,"error"}, abx/mcp/mcp.h) with the
// HTTP status of the one Error->HTTP mapping.
http::Response mcp_error_response(const Error& e, unsigned version, bool keep_alive);

// Who is calling: everyone (full token or no auth) or a scoped set of commands.
struct Caller {
  bool scoped = false;
  std::vector<std::string> commands;
  std::string credential;  // the token presented (empty without auth); MCP sessions bind to it
  bool may_run(std::string_view name) const;
};

// /mcp requests (authenticated, method and content type checked) go to the MCP endpoint with
// their caller; everything else is an immediate answer or a command to run.
struct Routed {
  std::optional<http::Response> immediate;
  bool mcp = false;
  Caller caller;
  const registry::RegisteredCommand* command = nullptr;
  boost::json::object kwargs;
};

class Router {
 public:
  // `registry` must be frozen (lookups take no lock) and outlive the router.
  Router(const registry::CommandRegistry& registry, const CommandServerOptions& options)
      : registry_(&registry), opt_(options) {
    if (opt_.access_token) full_token_.emplace(*opt_.access_token);
  }

  Routed route(const http::Request& req, bool draining) const;
  Result<Caller> authenticate(const http::Request& req) const;
  // Whether a browser Origin header may reach /mcp (see CommandServerOptions).
  bool origin_allowed(std::string_view origin) const;

 private:
  Routed route_mcp(const http::Request& req, bool draining) const;
  const registry::CommandRegistry* registry_;
  CommandServerOptions opt_;
  std::optional<token::SecretMatcher> full_token_;  // set unless no_auth
};

}  // namespace abx::server
