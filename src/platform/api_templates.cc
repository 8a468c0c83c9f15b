// /templates and /templates/{id}: the catalog, with each template's capabilities and commands.
#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/image/compose.h"
#include "abx/image/registry.h"
#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;
using http::Response;

namespace {

json::object template_json(const templates::Template& t) {
  json::object o = t.to_json();
  o["envdVersion"] = kEnvdVersion;
  o["buildID"] = t.id;
  return o;
}

}  // namespace

Result<Response> list_templates(Context& ctx) {
  json::array out;
  auto cat = ctx.sandboxes.catalog();
  for (const auto* t : cat->list()) {
    if (template_visible(ctx, t->id)) out.push_back(template_json(*t));
  }
  return http::json_response(200, out);
}

Result<Response> get_template(Context& ctx) {
  auto cat = ctx.sandboxes.catalog();
  const std::string& id = ctx.params.at(0);
  ABX_TRY(check_template_visible(ctx, id));
  if (const auto* t = cat->get(id)) {
    json::object o = template_json(*t);
    o["builds"] = json::array{};
    return http::json_response(200, o);
  }
  for (const auto& e : cat->errors()) {
    if (e.id_hint == id) return not_found("template '" + id + "' failed to load: " + e.message);
  }
  return not_found("template '" + id + "' not found");
}

// E2B's alias lookup (the JS template builder's Template.exists / aliasExists): 200
// {templateID, public} when a template answers to the name, 404 when none does. Another team's
// template is a 404 too, never E2B's 403 ("exists, not yours"): an id of another team is
// indistinguishable from an unknown one everywhere. An abx template's only alias is its id.
Result<Response> get_template_alias(Context& ctx) {
  auto cat = ctx.sandboxes.catalog();
  const std::string& alias = ctx.params.at(0);
  if (!template_visible(ctx, alias)) return not_found("template alias '" + alias + "' not found");
  if (const auto* t = cat->get(alias)) {
    return http::json_response(200, json::object{{"templateID", t->id}, {"public", true}});
  }
  for (const auto& e : cat->errors()) {
    if (e.id_hint == alias)
      return not_found("template '" + alias + "' failed to load: " + e.message);
  }
  return not_found("template alias '" + alias + "' not found");
}

}  // namespace abx::platform::api

// --- abx extensions: builds, removal, push, image metadata ---

namespace abx::platform::api {

namespace {

Status need_builds(const Context& ctx) {
  if (!ctx.builder || !ctx.images) {
    return Error(ErrorCode::kUnimplemented, "template builds are not enabled in this abxd");
  }
  return {};
}

// The image behind template `id`: the store tag of a built template, else the catalog's image
// reference (abx:NAME or the reference a pull tagged).
Result<image::Image> image_of(Context& ctx, const std::string& id) {
  ABX_TRY(check_template_visible(ctx, id));
  if (auto img = ctx.images->get(id); img.ok()) return img;
  const auto catalog = ctx.sandboxes.catalog();  // held: t points into it
  const auto* t = catalog->get(id);
  if (!t) return not_found("template '" + id + "' not found");
  if (t->image.empty())
    return not_found("template '" + id + "' has no image (rootfs: " + t->rootfs + ")");
  if (t->image.starts_with("abx:")) {
    auto img = ctx.images->get(t->image.substr(4));
    if (!img.ok())
      return not_found("template '" + id + "': image " + t->image + " is not in the store");
    return img;
  }
  ABX_ASSIGN_OR_RETURN(auto ref, image::parse_reference(t->image));
  auto img = ctx.images->get(ref.str());
  if (!img.ok()) {
    return not_found("template '" + id + "': image " + ref.str() +
                     " has not been pulled yet (create a sandbox of it first)");
  }
  return img;
}

json::array strings(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

}  // namespace

Result<Response> template_image(Context& ctx) {
  ABX_TRY(need_builds(ctx));
  const std::string& id = ctx.params.at(0);
  ABX_ASSIGN_OR_RETURN(auto img, image_of(ctx, id));
  json::array layers;
  ABX_ASSIGN_OR_RETURN(auto manifest_text, ctx.images->read_blob(img.manifest_digest));
  auto manifest = parse_json_strict(manifest_text);
  const json::value* ls = manifest.ok() && manifest->is_object()
                              ? manifest->as_object().if_contains("layers")
                              : nullptr;
  for (std::size_t i = 0; i < img.layers.size(); ++i) {
    json::object l{{"digest", img.layers[i]}};
    if (ls && ls->is_array() && i < ls->as_array().size() && ls->as_array()[i].is_object()) {
      const auto& d = ls->as_array()[i].as_object();
      if (auto* s = d.if_contains("size")) l["size"] = *s;
      if (auto* m = d.if_contains("mediaType")) l["mediaType"] = *m;
    }
    layers.push_back(std::move(l));
  }
  json::object labels;
  for (const auto& [k, v] : img.config.labels) labels[k] = v;
  json::object config{
      {"env", strings(img.config.env)}, {"entrypoint", strings(img.config.entrypoint)},
      {"cmd", strings(img.config.cmd)}, {"workingDir", img.config.working_dir},
      {"user", img.config.user},        {"labels", std::move(labels)}};
  json::object out{{"templateID", id},
                   {"manifestDigest", img.manifest_digest},
                   {"configDigest", img.config_digest},
                   {"size", img.size},
                   {"built", ctx.builder->is_built(id)},
                   {"layers", std::move(layers)},
                   {"config", std::move(config)}};
  return http::json_response(200, out);
}

Result<Response> delete_template(Context& ctx) {
  const std::string& id = ctx.params.at(0);
  // E2B deletes a snapshot as a template (the SDK's deleteSnapshot).
  if (id.starts_with("snapshot-")) {
    const auto snaps = ctx.sandboxes.list_snapshots("", "");
    if (std::none_of(snaps.begin(), snaps.end(), [&](const SandboxManager::SnapshotInfo& s) {
          return s.id == id && s.team_id == ctx.team;
        }))
      return not_found("snapshot '" + id + "' not found");
    ABX_TRY(ctx.sandboxes.delete_snapshot(id));
    return Response{boost::beast::http::status::no_content, ctx.req.version()};
  }
  ABX_TRY(need_builds(ctx));
  ABX_TRY(check_template_visible(ctx, id));
  if (!ctx.builder->is_built(id)) {
    if (ctx.sandboxes.catalog()->get(id)) {
      return Error(ErrorCode::kFailedPrecondition,
                   "template '" + id + "' was not built by abx template build; remove its " +
                       "template.yaml instead");
    }
    // A name the team took with a build that never finished: the name is given back.
    if (auto owner = ctx.store.template_owner(id); owner.ok() && *owner == ctx.team) {
      ABX_TRY(ctx.store.release_template(id));
      if (ctx.jobs) ctx.jobs->forget(id);
      return Response{boost::beast::http::status::no_content, ctx.req.version()};
    }
    return not_found("template '" + id + "' not found");
  }
  ABX_TRY(ctx.builder->remove(id));
  ABX_TRY(ctx.store.release_template(id));
  if (ctx.jobs) ctx.jobs->forget(id);
  Response res{boost::beast::http::status::no_content, ctx.req.version()};
  return res;
}

Result<Response> push_template(Context& ctx) {
  ABX_TRY(need_builds(ctx));
  const std::string& id = ctx.params.at(0);
  ABX_ASSIGN_OR_RETURN(auto body, body_object(ctx.req));
  auto* ref_v = body.if_contains("ref");
  if (!ref_v || !ref_v->is_string() || ref_v->as_string().empty()) {
    return invalid_argument("push: body must be {\"ref\": \"host/repo:tag\"}");
  }
  ABX_ASSIGN_OR_RETURN(auto dest, image::parse_reference(std::string(ref_v->as_string())));
  if (dest.transport != image::Transport::kRegistry) {
    return invalid_argument("push: " + dest.str() + " is not a registry reference");
  }
  bool bare = false;
  if (auto* b = body.if_contains("bare")) {
    if (!b->is_bool()) return invalid_argument("push: \"bare\" must be a boolean");
    bare = b->as_bool();
  }
  ABX_ASSIGN_OR_RETURN(auto img, image_of(ctx, id));
  const auto& mo = ctx.sandboxes.options();
  if (!bare) {
    // Portable: abx's runtime layer at /opt/abx and abx-envd as the entrypoint, so any OCI
    // runtime serves the E2B protocol from it (as `abxd image push` does).
    if (mo.binaries.bundle.empty()) {
      return Error(ErrorCode::kFailedPrecondition,
                   "push: abxd has no /opt/abx bundle (--bundle) to add; push with bare");
    }
    ABX_ASSIGN_OR_RETURN(img, image::with_runtime(*ctx.images, img, mo.binaries.bundle));
  }
  image::RegistryOptions ro;
  ro.auth_file = mo.registry_auth_file;
  ro.insecure_registries = mo.insecure_registries;
  ABX_TRY(image::push(*ctx.images, img, dest, ro));
  return http::json_response(200,
                             json::object{{"ref", dest.str()}, {"digest", img.manifest_digest}});
}

Status build_template(Context& ctx, const std::string& context_tar,
                      const std::function<void()>& drop_context, const http::Responder& respond) {
  ABX_TRY(need_builds(ctx));
  BuildRequest req;
  req.context_tar = context_tar;
  for (const auto& p : ctx.url.params()) {
    if (p.key == "name") {
      req.name = p.value;
    } else if (p.key == "dockerfile") {
      req.dockerfile = p.value;
    } else if (p.key == "buildarg") {
      auto eq = p.value.find('=');
      if (eq == std::string::npos || eq == 0) {
        return invalid_argument("buildarg must be NAME=VALUE, got '" + p.value + "'");
      }
      req.build_args[p.value.substr(0, eq)] = p.value.substr(eq + 1);
    } else {
      return invalid_argument("unknown query parameter '" + p.key + "'");
    }
  }
  if (req.name.empty())
    return invalid_argument("name is required: POST /templates/build?name=NAME");
  if (!valid_template_name(req.name)) {
    return invalid_argument("template name '" + req.name +
                            "' must match [a-z0-9][a-z0-9._-]{0,63}");
  }
  if (req.dockerfile.empty()) return invalid_argument("dockerfile must not be empty");
  // The name becomes the team's before the build starts and stays so (a failed build, a rebuild
  // by the same team) until DELETE /templates/{name}; another team's name is refused, as E2B
  // refuses an alias in use. (Giving it back on a failed build would race a second build of the
  // same name waiting for the first.)
  if (req.name.starts_with("snapshot-"))
    return invalid_argument("template names starting with snapshot- are snapshots' ids");
  const bool existed = ctx.builder->is_built(req.name);
  // A template.yaml or built-in template of that name is every team's: no team may replace it.
  if (!existed && ctx.sandboxes.catalog()->get(req.name))
    return Error(ErrorCode::kAlreadyExists,
                 "template '" + req.name + "' exists and was not built by abx template build");
  ABX_TRY(ctx.store.claim_template(req.name, ctx.team));
  req.may_use = [&ctx](const std::string& name) { return template_visible(ctx, name); };

  Response header{boost::beast::http::status::ok, ctx.req.version()};
  header.set(boost::beast::http::field::content_type, "application/x-ndjson");
  header.set(boost::beast::http::field::cache_control, "no-store");
  header.keep_alive(ctx.req.keep_alive());
  auto out = respond.stream(std::move(header));
  if (!out) return {};
  // One JSON object per line; a slow reader makes the build wait (never the server's memory).
  auto send = [&out](const json::object& ev) {
    if (out->closed()) return;
    out->write(json::serialize(ev) + "\n");
    if (!out->ready()) out->wait_ready(std::chrono::seconds(60));
  };
  req.cancelled = [&out] { return out->closed(); };  // the client went away
  auto result = ctx.builder->build(req, send);
  drop_context();
  if (result.ok()) {
    json::object t;
    const auto catalog = ctx.sandboxes.catalog();
    if (const auto* tmpl = catalog->get(req.name)) {
      t = tmpl->to_json();
    } else {
      t["templateID"] = req.name;
    }
    t["manifestDigest"] = result->image.manifest_digest;
    t["layers"] = result->image.layers.size();
    t["size"] = result->image.size;
    send(json::object{{"type", "done"},
                      {"template", std::move(t)},
                      {"steps", result->steps},
                      {"cached", result->cached}});
  } else {
    send(json::object{{"type", "error"},
                      {"message", result.error().message()},
                      {"code", std::string(error_code_name(result.error().code()))}});
  }
  out->finish();
  return {};
}

}  // namespace abx::platform::api
