// E2B's secrets resource, /secrets[/{secretID}] (secrets.h): values go in, metadata comes out.
#include <algorithm>
#include <boost/json.hpp>

#include "abx/base/ascii.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/egress/transform.h"
#include "abx/token/token.h"
#include "api_routes.h"
#include "secrets.h"

namespace abx::platform::api {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using http::Response;

namespace {

Result<SecretVault*> vault(const Context& ctx) {
  if (ctx.secrets == nullptr)
    return Error(ErrorCode::kUnimplemented, "secrets are not enabled in this abxd");
  return ctx.secrets;
}

// The {secretID} of the path: an id (sec_…) or a name (any case, as E2B lower-cases names).
Result<std::string> secret_key(const Context& ctx) {
  std::string key = ascii_lower(ctx.params.at(0));
  const bool id = key.starts_with("sec_") && key.size() == 28 &&
                  key.find_first_not_of("0123456789abcdef", 4) == std::string::npos;
  if (!id && !egress::valid_secret_name(key)) return invalid_argument("invalid secret id or name");
  return key;
}

// The team's live sandboxes (running or paused) whose network.rules name secret `name`.
std::vector<std::string> sandboxes_using(const Context& ctx, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& sb : ctx.sandboxes.all()) {
    if (sb->record.team_id != ctx.team) continue;
    std::lock_guard lock(sb->mu);
    if (sb->network.transforms.references(name)) out.push_back(sb->record.id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::size_t> secret_list_limit(std::string_view v) {
  if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoul(std::string(v)) < 1 || std::stoul(std::string(v)) > 100)
    return invalid_argument("limit must be an integer between 1 and 100");
  return std::stoul(std::string(v));
}

}  // namespace

Status check_secret_references(const Context& ctx, const egress::TransformRules& rules,
                               std::string_view field) {
  for (const auto& ref : rules.secret_references(field)) {
    if (ctx.secrets == nullptr)
      return invalid_argument(ref.field + ": names secret '" + ref.name +
                              "', but secrets are not enabled in this abxd");
    auto s = ctx.store.get_secret(ctx.team, ref.name);
    if (!s.ok() && s.error().code() == ErrorCode::kNotFound)
      return invalid_argument(ref.field + ": secret '" + ref.name +
                              "' not found (POST /secrets creates it)");
    if (!s.ok()) return s.error();
  }
  return {};
}

// POST /secrets: 201 Secret.
Result<Response> create_secret(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SecretVault * v, vault(ctx));
  ABX_ASSIGN_OR_RETURN(json::object body, body_object(ctx.req));
  ABX_ASSIGN_OR_RETURN(SecretSpec spec, parse_secret_body(body, true));
  ABX_ASSIGN_OR_RETURN(std::string hex, token::random_hex(12));
  store::SecretRecord r;
  r.id = "sec_" + hex;
  r.team_id = ctx.team;
  r.name = spec.name;
  r.metadata = spec.metadata.value_or(std::map<std::string, std::string>{});
  r.version = 1;
  r.created_at_ms = r.updated_at_ms = now_ms();
  ABX_ASSIGN_OR_RETURN(r.sealed, v->seal(r.team_id, r.id, spec.value));
  if (Status s = ctx.store.create_secret(r, ctx.max_secrets); !s) {
    if (s.error().code() == ErrorCode::kAlreadyExists)
      return Error(ErrorCode::kAlreadyExists,
                   "name: a secret named '" + r.name +
                       "' exists already (POST /secrets/{secretID} writes a new value)");
    if (s.error().code() == ErrorCode::kResourceExhausted)
      return Error(ErrorCode::kResourceExhausted, s.error().message());
    return s.error();
  }
  return http::json_response(201, secret_json(r));
}

// GET /secrets?limit&nextToken: 200 [Secret] by name, X-Next-Token while more follow.
Result<Response> list_secrets(Context& ctx) {
  ABX_TRY(vault(ctx));
  std::size_t limit = 100;
  std::string after;
  for (auto p : ctx.url.params()) {
    const std::string val = p.has_value ? std::string(p.value) : std::string();
    if (p.key == "limit") {
      ABX_ASSIGN_OR_RETURN(limit, secret_list_limit(val));
    } else if (p.key == "nextToken") {
      if (!egress::valid_secret_name(val)) return invalid_argument("malformed nextToken");
      after = val;
    }
  }
  ABX_ASSIGN_OR_RETURN(store::SecretPage page, ctx.store.list_secrets(ctx.team, after, limit));
  json::array out;
  for (const auto& r : page.items) out.push_back(secret_json(r));
  Response res = http::json_response(200, out);
  if (!page.next_token.empty()) res.set("X-Next-Token", page.next_token);
  return res;
}

// GET /secrets/{secretID}: 200 Secret (by id or name), with abx's `usedBy`.
Result<Response> get_secret(Context& ctx) {
  ABX_TRY(vault(ctx));
  ABX_ASSIGN_OR_RETURN(std::string key, secret_key(ctx));
  ABX_ASSIGN_OR_RETURN(store::SecretRecord r, ctx.store.get_secret(ctx.team, key));
  json::object o = secret_json(r);
  json::array used;
  for (auto& id : sandboxes_using(ctx, r.name)) used.emplace_back(id);
  o["usedBy"] = std::move(used);
  return http::json_response(200, o);
}

// POST /secrets/{secretID}: a new value (and metadata, when given); 200 Secret.
Result<Response> update_secret(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SecretVault * v, vault(ctx));
  ABX_ASSIGN_OR_RETURN(std::string key, secret_key(ctx));
  ABX_ASSIGN_OR_RETURN(json::object body, body_object(ctx.req));
  ABX_ASSIGN_OR_RETURN(SecretSpec spec, parse_secret_body(body, false));
  ABX_ASSIGN_OR_RETURN(store::SecretRecord cur, ctx.store.get_secret(ctx.team, key));
  ABX_ASSIGN_OR_RETURN(std::string sealed, v->seal(cur.team_id, cur.id, spec.value));
  ABX_ASSIGN_OR_RETURN(store::SecretRecord r,
                       ctx.store.update_secret(ctx.team, cur.id, sealed, spec.metadata, now_ms()));
  return http::json_response(200, secret_json(r));
}

// DELETE /secrets/{secretID}: 204; 409 while a live sandbox's network.rules name it.
Result<Response> delete_secret(Context& ctx) {
  ABX_TRY(vault(ctx));
  ABX_ASSIGN_OR_RETURN(std::string key, secret_key(ctx));
  ABX_ASSIGN_OR_RETURN(store::SecretRecord r, ctx.store.get_secret(ctx.team, key));
  if (auto used = sandboxes_using(ctx, r.name); !used.empty()) {
    std::string ids;
    for (const auto& id : used) ids += (ids.empty() ? "" : ", ") + id;
    return Error(ErrorCode::kFailedPrecondition,
                 "secret '" + r.name + "' is named by the network.rules of sandbox(es) " + ids +
                     ": change their rules (PUT /sandboxes/{id}/network) or kill them first");
  }
  ABX_TRY(ctx.store.delete_secret(ctx.team, r.id));
  return Response{bhttp::status::no_content, 11};
}

}  // namespace abx::platform::api
