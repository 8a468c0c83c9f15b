// JSON field decoders and {id} lookups shared by the control API's resources.
#include <boost/json.hpp>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/platform/host_route.h"
#include "abx/store/sandbox_id.h"
#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;

namespace {

constexpr std::size_t kMaxMetadataEntries = 64;
constexpr std::size_t kMaxMetadataBytes = 1024;

}  // namespace

Result<json::object> body_object(const http::Request& req) {
  if (req.body().find_first_not_of(" \t\r\n") == std::string::npos) return json::object{};
  ABX_ASSIGN_OR_RETURN(json::value v, parse_json_strict(req.body()));
  if (!v.is_object()) return invalid_argument("request body must be a JSON object");
  return std::move(v.get_object());
}

Result<std::int64_t> int_field(const json::object& o, const char* name, std::int64_t lo,
                               std::int64_t hi) {
  const json::value* v = o.if_contains(name);
  if (v == nullptr || !v->is_int64())
    return invalid_argument(std::string(name) + " must be an integer");
  std::int64_t i = v->as_int64();
  if (i < lo || i > hi) {
    return invalid_argument(std::string(name) + " must be between " + std::to_string(lo) + " and " +
                            std::to_string(hi));
  }
  return i;
}

Result<std::optional<std::int64_t>> optional_timeout(const json::object& o,
                                                     std::int64_t max_seconds) {
  if (!o.contains("timeout")) return std::optional<std::int64_t>();
  ABX_ASSIGN_OR_RETURN(std::int64_t t, int_field(o, "timeout", 0, max_seconds));
  return std::optional<std::int64_t>(t);
}

Result<std::map<std::string, std::string>> string_map(const json::value* v, const char* what) {
  std::map<std::string, std::string> out;
  if (v == nullptr || v->is_null()) return out;
  if (!v->is_object()) return invalid_argument(std::string(what) + " must be an object of strings");
  if (v->get_object().size() > kMaxMetadataEntries) {
    return invalid_argument(std::string(what) + " has more than " +
                            std::to_string(kMaxMetadataEntries) + " entries");
  }
  for (const auto& kv : v->get_object()) {
    if (!kv.value().is_string()) {
      return invalid_argument(std::string(what) + "." + std::string(kv.key()) +
                              " must be a string");
    }
    if (kv.key().size() + kv.value().get_string().size() > kMaxMetadataBytes) {
      return invalid_argument(std::string(what) + " entry too large");
    }
    out.emplace(std::string(kv.key()), std::string(kv.value().get_string()));
  }
  return out;
}

Result<std::string> sandbox_id(const Context& ctx) {
  std::string id = ctx.params.at(0);
  if (auto dash = id.find('-'); dash != std::string::npos) id = id.substr(0, dash);
  if (!store::SandboxId::routable(id)) return invalid_argument("invalid sandbox id");
  return id;
}

Result<std::shared_ptr<LiveSandbox>> live_sandbox(const Context& ctx) {
  ABX_ASSIGN_OR_RETURN(std::string id, sandbox_id(ctx));
  auto sb = ctx.sandboxes.find(id);
  // Another team's sandbox is not there, as far as this request can tell.
  if (!sb || sb->record.team_id != ctx.team) return not_found("sandbox '" + id + "' not found");
  return sb;
}

bool template_visible(const Context& ctx, const std::string& id) {
  return template_visible_to(ctx.store, id, ctx.team);
}

Status check_template_visible(const Context& ctx, const std::string& id) {
  if (!template_visible(ctx, id)) return not_found("template '" + id + "' not found");
  return {};
}

Result<SandboxPost> sandbox_post(const Context& ctx) {
  SandboxPost op;
  ABX_ASSIGN_OR_RETURN(op.id, sandbox_id(ctx));
  ABX_ASSIGN_OR_RETURN(op.sb, live_sandbox(ctx));
  ABX_ASSIGN_OR_RETURN(op.body, body_object(ctx.req));
  return op;
}

}  // namespace abx::platform::api
