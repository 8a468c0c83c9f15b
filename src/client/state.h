// Internal: what a Sandbox handle and its Commands/Files/CommandServer views share.
#pragma once

#include <boost/json/value.hpp>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "abx/client/sandbox.h"
#include "abx/templates/template.h"
#include "transport.h"

namespace abx::client {
// The two namespaces every file of libabx speaks, named once.
namespace bhttp = boost::beast::http;
namespace json = boost::json;
}  // namespace abx::client

namespace abx::client::detail {

// The control plane: api_url, with X-API-KEY or an AK/SK signature on every attempt.
Result<http::Response> control_request(Transport& t, boost::beast::http::verb method,
                                       std::string target, const boost::json::value* body,
                                       bool idempotent);
// Parses a 2xx JSON body, or turns anything else into the platform's error. `status` (if given)
// gets the 2xx status.
Result<boost::json::value> control_json(Transport& t, boost::beast::http::verb method,
                                        std::string target, const boost::json::value* body,
                                        bool idempotent, std::string_view what,
                                        unsigned* status = nullptr);
// DELETE `target`: true on 2xx, false on 404, else the platform's error.
Result<bool> control_delete(Transport& t, std::string target, std::string_view what);
// GET `path` with `query` (name, value; values URL-encoded here), following X-Next-Token: each
// page must be a JSON array, and `each` gets its items in order; it returns false to stop after
// that page.
Status control_list(Transport& t, std::string_view path,
                    std::vector<std::pair<std::string, std::string>> query, std::string_view what,
                    const std::function<Result<bool>(const boost::json::value&)>& each);

std::filesystem::path abx_home(const ConnectionConfig& config);
// The local template catalogue ($ABX_HOME/templates plus the built-ins).
const templates::Template* find_local_template(const templates::TemplateCatalog& catalog,
                                               std::string_view id);
templates::TemplateCatalog load_local_catalog(const ConnectionConfig& config);

struct SandboxState {
  SandboxState(ConnectionConfig cfg, SandboxInfo i)
      : config(cfg),
        transport(std::make_shared<Transport>(std::move(cfg))),
        info(std::move(i)),
        access_token(info.envd_access_token) {}
  SandboxState(const SandboxState& other, std::string token)
      : config(other.config),
        transport(other.transport),
        info(other.info),
        access_token(std::move(token)) {}

  ConnectionConfig config;
  std::shared_ptr<Transport> transport;
  SandboxInfo info;
  std::string access_token;  // sent as X-Access-Token on the sandbox plane (full or scoped)

  std::mutex mu;
  std::optional<std::set<Capability>> capabilities;
  std::optional<bool> interpreter;  // the template runs a code interpreter

  Status check(Capability c);
  // envd (kEnvdPort) or the command server (kCommandServerPort): the override URL when one is
  // configured, else the API URL with routing headers.
  Result<Endpoint> plane_endpoint(std::uint16_t port) const;
  void add_plane_headers(http::Request& req, std::uint16_t port) const;
  // A sandbox-plane request with its headers, sent through the pool.
  Result<http::Response> plane_send(std::uint16_t port, http::Request req,
                                    Transport::SendOptions opts);
  // A unary Connect call to envd, e.g. "/filesystem.Filesystem/Stat".
  Result<boost::json::value> connect_unary(std::string_view path, const boost::json::value& body,
                                           bool idempotent);
};

// Capabilities of the sandbox's template, resolved once (local template, then the platform's
// GET /templates/{id}, then the defaults) and cached in the state.
Result<std::set<Capability>> resolve_capabilities(SandboxState& state);
// Whether the template has a code interpreter, resolved the same way and cached.
Result<bool> resolve_interpreter(SandboxState& state);

}  // namespace abx::client::detail
