#include "server/router.h"

#include <boost/beast/core/string.hpp>
#include <ctime>

#include "abx/registry/coerce.h"
#include "abx/token/token.h"

namespace abx::server {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Response;

namespace {

constexpr std::string_view kCommandsPrefix = "/commands/";

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

bool Caller::may_run(std::string_view name) const {
  if (!scoped) return true;
  for (const auto& c : commands) {
    if (c == name) return true;
  }
  return false;
}

Result<Caller> Router::authenticate(const Request& req) const {
  if (opt_.no_auth) return Caller{};
  std::string_view presented;
  std::size_t count = 0;
  for (const auto& f : req) {
    if (boost::beast::iequals(f.name_string(), "x-access-token")) {
      presented = f.value();
      ++count;
    } else if (f.name() == bhttp::field::authorization) {
      std::string_view v = f.value();
      if (v.size() > 7 && boost::beast::iequals(v.substr(0, 7), "bearer ")) {
        presented = v.substr(7);
        ++count;
      }
    }
  }
  if (count > 1) return invalid_argument("more than one access token in the request");
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
    return Caller{true, std::move(claims->commands)};
  }
  if (!token::constant_time_equal(presented, *opt_.access_token)) {
    return Error(ErrorCode::kUnauthenticated, "invalid access token");
  }
  return Caller{};
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

}  // namespace abx::server
