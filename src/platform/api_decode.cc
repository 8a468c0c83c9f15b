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

Result<std::optional<std::int64_t>> optional_timeout(const json::object& o,
                                                     std::int64_t max_seconds) {
  // A null timeout is refused, not read as "not given", as it always was.
  const json::value* v = o.if_contains("timeout");
  if (v == nullptr) return std::optional<std::int64_t>();
  ABX_ASSIGN_OR_RETURN(std::int64_t t, json_as_int(*v, "timeout", 0, max_seconds));
  return std::optional<std::int64_t>(t);
}

Result<std::map<std::string, std::string>> string_map(const json::object& o, std::string_view key) {
  ABX_ASSIGN_OR_RETURN(const json::object* m, json_optional_object(o, key, ""));
  if (m != nullptr && m->size() > kMaxMetadataEntries) {
    return invalid_argument(std::string(key) + " has more than " +
                            std::to_string(kMaxMetadataEntries) + " entries");
  }
  ABX_ASSIGN_OR_RETURN(auto out, json_optional_string_map(o, key, ""));
  for (const auto& [k, v] : out) {
    if (k.size() + v.size() > kMaxMetadataBytes) {
      return invalid_argument(json_path_key(key, k) + ": entry too large");
    }
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
