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

namespace abx::server {

// Who is calling: everyone (full token or no auth) or a scoped set of commands.
struct Caller {
  bool scoped = false;
  std::vector<std::string> commands;
  bool may_run(std::string_view name) const;
};

struct Routed {
  std::optional<http::Response> immediate;
  const registry::RegisteredCommand* command = nullptr;
  boost::json::object kwargs;
};

class Router {
 public:
  // `registry` must be frozen (lookups take no lock) and outlive the router.
  Router(const registry::CommandRegistry& registry, const CommandServerOptions& options)
      : registry_(&registry), opt_(options) {}

  Routed route(const http::Request& req, bool draining) const;
  Result<Caller> authenticate(const http::Request& req) const;

 private:
  const registry::CommandRegistry* registry_;
  CommandServerOptions opt_;
};

}  // namespace abx::server
