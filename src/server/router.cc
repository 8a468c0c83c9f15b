#include "router.h"

#include <boost/beast/core/string.hpp>
#include <ctime>

#include "abx/mcp/mcp.h"
#include "abx/mcp/session.h"
#include "abx/registry/coerce.h"
#include "abx/token/token.h"

namespace abx::server {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Response;

namespace {

constexpr std::string_view kCommandsPrefix = "/commands/";
constexpr std::string_view kMcpPath = "/mcp";

std::string_view path_of(std::string_view target) {
  auto q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

bool is_json_content_type(std::string_view ct) {
  auto semi = ct.find(';');
  std::string_view mime = ct.substr(0, semi);
  while (!mime.empty() && mime.back() == ' ') mime.remove_suffix(1);
  if (boost::beast::iequals(mime, "application/json")) return true;
  // application/<something>+json
  return mime.size() > 17 && boost::beast::iequals(mime.substr(0, 12), "application/") &&
         boost::beast::iequals(mime.substr(mime.size() - 5), "+json");
}

}  // namespace

http::Response mcp_error_response(const Error& e, unsigned version, bool keep_alive) {
  return http::json_response(http::http_status(e.code()), mcp::error_response(e, nullptr), version,
                             keep_alive);
}

bool Router::origin_allowed(std::string_view origin) const {
  return mcp::origin_allowed(origin, opt_.mcp_allowed_origins);
}

bool Caller::may_run(std::string_view name) const {
  if (!scoped) return true;
  for (const auto& c : commands) {
    if (c == name) return true;
  }
  return false;
}

Result<Caller> Router::authenticate(const Request& req) const {
  if (opt_.no_auth) return Caller{};
  // The token may come in X-Access-Token, Authorization: Bearer or both (the MCP TypeScript SDK
  // sends both when a user configures both); copies must agree (compared in constant time).
  std::string_view presented;
  std::size_t count = 0;
  bool differ = false;
  auto take = [&](std::string_view t) {
    if (count++ > 0 && !token::constant_time_equal(t, presented)) differ = true;
    presented = t;
  };
  for (const auto& f : req) {
    if (boost::beast::iequals(f.name_string(), "x-access-token")) {
      take(f.value());
    } else if (f.name() == bhttp::field::authorization) {
      std::string_view v = f.value();
      if (v.size() > 7 && boost::beast::iequals(v.substr(0, 7), "bearer ")) take(v.substr(7));
    }
  }
  if (differ) {
    return invalid_argument(
        "the request carries different access tokens (X-Access-Token and Authorization: Bearer "
        "must agree)");
  }
  if (count == 0 || presented.empty()) {
    return Error(ErrorCode::kUnauthenticated,
                 "missing access token (send it in X-Access-Token or Authorization: Bearer)");
  }
  if (presented.size() > token::kMaxTokenBytes) {
    return Error(ErrorCode::kUnauthenticated, "invalid access token");
  }
  if (token::looks_scoped(presented)) {
    auto claims = token::verify_scoped(*opt_.access_token, presented,
                                       static_cast<std::int64_t>(std::time(nullptr)));
    if (!claims.ok()) return claims.error();
    return Caller{true, std::move(claims->commands), std::string(presented)};
  }
  if (!full_token_ || !full_token_->matches(presented)) {
    return Error(ErrorCode::kUnauthenticated, "invalid access token");
  }
  return Caller{false, {}, std::string(presented)};
}

Routed Router::route(const Request& req, bool draining) const {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  auto respond = [](Response r) {
    Routed out;
    out.immediate = std::move(r);
    return out;
  };
  auto fail = [&](const Error& e) { return respond(http::error_response(e, v, ka)); };
  std::string_view path = path_of(req.target());

  if (path == "/health") {
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      Response r =
          http::error_response(Error(ErrorCode::kMethodNotAllowed, "use GET /health"), v, ka);
      r.set(bhttp::field::allow, "GET, HEAD");
      return respond(std::move(r));
    }
    return respond(http::json_response(200, json::object{{"status", "ok"}}, v, ka));
  }
  if (path == kMcpPath) return route_mcp(req, draining);
  const bool list = path == "/commands" || path == "/commands/";
  const bool run = !list && path.substr(0, kCommandsPrefix.size()) == kCommandsPrefix;
  if (!list && !run) return fail(not_found("no route for " + std::string(path)));
  if (draining) return fail(unavailable("the command server is shutting down"));

  auto caller = authenticate(req);
  if (!caller.ok()) return fail(caller.error());

  if (list) {
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      Response r = http::error_response(
          Error(ErrorCode::kMethodNotAllowed, "use GET /commands to list commands"), v, ka);
      r.set(bhttp::field::allow, "GET, HEAD");
      return respond(std::move(r));
    }
    json::array out;
    for (const auto* cmd : registry_->list_all()) {
      if (caller->may_run(cmd->name)) out.push_back(registry::describe(*cmd));
    }
    return respond(http::json_response(200, json::object{{"commands", std::move(out)}}, v, ka));
  }

  std::string_view name = path.substr(kCommandsPrefix.size());
  const registry::RegisteredCommand* cmd =
      registry::valid_command_name(name) ? registry_->get(name) : nullptr;
  // Out of scope looks exactly like absent: discovery never shows more than execution allows.
  if (cmd == nullptr || !caller->may_run(name)) {
    std::string shown =
        name.size() > 64 ? std::string(name.substr(0, 64)) + "..." : std::string(name);
    return fail(not_found("unknown command '" + shown + "'"));
  }
  if (req.method() != bhttp::verb::post) {
    Response r = http::error_response(
        Error(ErrorCode::kMethodNotAllowed, "use POST /commands/" + cmd->name + " to run it"), v,
        ka);
    r.set(bhttp::field::allow, "POST");
    return respond(std::move(r));
  }
  auto ct = req[bhttp::field::content_type];
  bool empty_body = req.body().find_first_not_of(" \t\r\n") == std::string::npos;
  if (!(ct.empty() && empty_body) && !is_json_content_type(ct)) {
    return fail(Error(ErrorCode::kUnsupportedMediaType,
                      "send the arguments as JSON (Content-Type: application/json), got '" +
                          std::string(ct) + "'"));
  }
  auto kwargs = registry::parse_kwargs(*cmd, req.body(), opt_.json);
  if (!kwargs.ok()) return fail(kwargs.error());
  Routed out;
  out.command = cmd;
  out.kwargs = std::move(*kwargs);
  return out;
}

// /mcp: the same refusals as the REST routes, in JSON-RPC shape. Origin is checked before the
// token so that a page on a foreign origin learns nothing, not even whether a token works.
Routed Router::route_mcp(const Request& req, bool draining) const {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  auto fail = [&](const Error& e) {
    Routed out;
    out.immediate = mcp_error_response(e, v, ka);
    return out;
  };
  if (draining) return fail(unavailable("the command server is shutting down"));
  if (Status st = mcp::check_origin(req[bhttp::field::origin], opt_.mcp_allowed_origins,
                                    " (see --mcp-allow-origin)");
      !st.ok()) {
    return fail(st.error());
  }
  auto caller = authenticate(req);
  if (!caller.ok()) return fail(caller.error());
  if (req.method() != bhttp::verb::post && req.method() != bhttp::verb::delete_) {
    // GET would open a server-to-client SSE stream; this server never sends requests or
    // notifications of its own, so it offers none (the transport allows 405 here).
    Routed out = fail(Error(ErrorCode::kMethodNotAllowed,
                            "use POST /mcp for messages and DELETE /mcp to end a session"));
    out.immediate->set(bhttp::field::allow, "POST, DELETE");
    return out;
  }
  if (req.method() == bhttp::verb::post && !is_json_content_type(req[bhttp::field::content_type])) {
    return fail(Error(ErrorCode::kUnsupportedMediaType,
                      "send JSON-RPC messages as application/json, got '" +
                          std::string(req[bhttp::field::content_type]) + "'"));
  }
  Routed out;
  out.mcp = true;
  out.caller = std::move(*caller);
  return out;
}

}  // namespace abx::server
