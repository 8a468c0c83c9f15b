// E2B's volumes resource, /volumes[/{volumeID}] (volumes.h).
#include <algorithm>
#include <boost/json.hpp>

#include "abx/base/json.h"
#include "abx/base/log.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/token/token.h"
#include "api_routes.h"
#include "volumes.h"

namespace abx::platform::api {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using http::Response;

namespace {

// The {volumeID} of the path: an id (E2B's) or, as abx also takes, a name.
Result<std::string> volume_key(const Context& ctx) {
  const std::string& key = ctx.params.at(0);
  if (!valid_volume_id(key) && !valid_volume_name(key))
    return invalid_argument("Invalid volume ID");
  return key;
}

Result<store::VolumeRecord> team_volume(const Context& ctx) {
  ABX_ASSIGN_OR_RETURN(std::string key, volume_key(ctx));
  auto v = ctx.store.get_volume(ctx.team, key);
  if (!v && v.error().code() == ErrorCode::kNotFound) return not_found("Volume not found");
  return v;
}

// The team's live sandboxes (running or paused) that mount volume `id`.
std::vector<std::string> sandboxes_mounting(const Context& ctx, std::string_view id) {
  std::vector<std::string> out;
  for (const auto& sb : ctx.sandboxes.all()) {
    if (sb->record.team_id != ctx.team) continue;
    for (const auto& m : sb->record.volume_mounts) {
      if (m.volume_id == id) {
        out.push_back(sb->record.id);
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Status resolve_volume_mounts(const Context& ctx, std::vector<store::VolumeMount>& mounts) {
  for (std::size_t i = 0; i < mounts.size(); ++i) {
    auto v = ctx.store.get_volume(ctx.team, mounts[i].name);
    if (!v && v.error().code() == ErrorCode::kNotFound)
      return invalid_argument(json_path_index("volumeMounts", i) + ".name: volume '" +
                              mounts[i].name + "' not found (POST /volumes creates it)");
    if (!v) return v.error();
    mounts[i].volume_id = v->id;
  }
  return {};
}

// POST /volumes: 201 VolumeAndToken.
Result<Response> create_volume(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(json::object body, body_object(ctx.req));
  ABX_ASSIGN_OR_RETURN(std::string name, json_required_string(body, "name", ""));
  if (!valid_volume_name(name)) return invalid_argument("Invalid volume name");
  store::VolumeRecord v;
  v.id = token::random_uuid();
  v.team_id = ctx.team;
  v.name = std::move(name);
  ABX_ASSIGN_OR_RETURN(v.token, token::random_hex(24));
  v.created_at_ms = now_ms();
  const std::string& home = ctx.sandboxes.options().home;
  ABX_TRY(make_volume_dir(home, v.id, ctx.sandboxes.options().volume_bytes));
  if (Status s = ctx.store.create_volume(v, kDefaultMaxVolumesPerTeam); !s) {
    (void)remove_volume_dir(home, v.id);
    if (s.error().code() == ErrorCode::kAlreadyExists)
      return invalid_argument("Volume with name '" + v.name + "' already exists");
    return s.error();
  }
  return http::json_response(201, volume_json(v, true));
}

// GET /volumes: 200 [Volume], oldest first.
Result<Response> list_volumes(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto all, ctx.store.list_volumes(ctx.team));
  json::array out;
  for (const auto& v : all) out.push_back(volume_json(v, false));
  return http::json_response(200, out);
}

// GET /volumes/{volumeID}: 200 VolumeAndToken.
Result<Response> get_volume(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(store::VolumeRecord v, team_volume(ctx));
  return http::json_response(200, volume_json(v, true));
}

// DELETE /volumes/{volumeID}: 204, the volume's files gone; 409 while a running or paused
// sandbox mounts it (E2B deletes it under them; abx refuses rather than pull a live mount).
Result<Response> delete_volume(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(store::VolumeRecord v, team_volume(ctx));
  if (auto used = sandboxes_mounting(ctx, v.id); !used.empty()) {
    std::string ids;
    for (const auto& id : used) ids += (ids.empty() ? "" : ", ") + id;
    return Error(ErrorCode::kFailedPrecondition,
                 "volume '" + v.name + "' is mounted by sandbox(es) " + ids + ": kill them first");
  }
  ABX_TRY(ctx.store.delete_volume(ctx.team, v.id));
  if (Status s = remove_volume_dir(ctx.sandboxes.options().home, v.id); !s)
    Logger("volumes").warn("volume " + v.id +
                           " deleted, its files not all: " + s.error().message());
  return Response{bhttp::status::no_content, 11};
}

}  // namespace abx::platform::api
