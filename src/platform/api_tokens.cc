// POST /sandboxes/{id}/tokens: a scoped token that reaches only the listed commands of the
// sandbox's command server (abx's addition to the E2B API; see abx/token/token.h).
#include <boost/json.hpp>

#include "abx/base/json.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/token/token.h"
#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;
using http::Response;

namespace {

constexpr std::int64_t kMaxTokenTtlSeconds = 30 * 24 * 3600;

}  // namespace

Result<TokenRequest> parse_token_request(const json::object& body) {
  TokenRequest tr;
  const json::value* cmds = body.if_contains("commands");
  if (cmds == nullptr || !cmds->is_array() || cmds->get_array().empty()) {
    return invalid_argument("commands must be a non-empty array of command names");
  }
  for (const auto& c : cmds->get_array()) {
    if (!c.is_string()) return invalid_argument("commands must be strings");
    tr.commands.emplace_back(c.get_string());
  }
  if (const json::value* ttl = body.if_contains("ttlSeconds")) {  // null is refused
    ABX_ASSIGN_OR_RETURN(tr.ttl_seconds, json_as_int(*ttl, "ttlSeconds", 1, kMaxTokenTtlSeconds));
  }
  return tr;
}

Result<Response> mint_token(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  if (op.sb->access_token.empty()) {
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox '" + op.id + "' was created with secure=false: it has no token");
  }
  ABX_ASSIGN_OR_RETURN(TokenRequest tr, parse_token_request(op.body));
  token::ScopedClaims claims;
  claims.commands = std::move(tr.commands);
  claims.expires_at = now_ms() / 1000 + tr.ttl_seconds;
  ABX_ASSIGN_OR_RETURN(std::string tok, token::mint_scoped(op.sb->access_token, claims));
  return http::json_response(
      201, json::object{{"token", tok}, {"expiresAt", rfc3339_ms(claims.expires_at * 1000)}});
}

}  // namespace abx::platform::api
