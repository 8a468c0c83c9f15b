// The e2b SDK's Template builder against abxd (template_jobs.h): POST /v3/templates, the
// content-addressed uploads of /templates/{id}/files/{hash}, POST /v2/templates/{id}/builds/{b},
// the build's status and logs, and tags.
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <cmath>

#include "abx/base/json.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;
using http::Response;

namespace {

Status need_jobs(const Context& ctx) {
  if (!ctx.jobs || !ctx.builder) {
    return Error(ErrorCode::kUnimplemented, "template builds are not enabled in this abxd");
  }
  return {};
}

// The team's own template `id` (claimed by a build request): another team's, an unknown one and
// a catalog template are all not_found, as E2B answers for a template that is not yours.
Status check_own_template(const Context& ctx, const std::string& id) {
  auto owner = ctx.store.template_owner(id);
  if (!valid_template_name(id) || !owner.ok() || !owner->has_value() || **owner != ctx.team)
    return not_found("template '" + id + "' not found");
  return {};
}

Result<std::vector<std::string>> string_list(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return out;
  if (!v->is_array()) return invalid_argument(std::string(key) + " must be an array of strings");
  for (const auto& t : v->as_array()) {
    if (!t.is_string()) return invalid_argument(std::string(key) + " must be an array of strings");
    out.emplace_back(t.as_string());
  }
  return out;
}

Status check_tags(const std::vector<std::string>& tags) {
  for (const auto& t : tags) {
    if (!valid_template_name(t))
      return invalid_argument("tag '" + t + "' must match [a-z0-9][a-z0-9._-]{0,63}");
  }
  return {};
}

// "name[:tag]" -> {name, tag} (tag "default" when absent).
std::pair<std::string, std::string> split_name(const std::string& s) {
  auto colon = s.find(':');
  if (colon == std::string::npos) return {s, "default"};
  return {s.substr(0, colon), s.substr(colon + 1)};
}

constexpr std::int64_t kMaxBuildCpus = 64;
constexpr std::int64_t kMaxBuildMemoryMb = 1 << 20;  // 1 TiB
constexpr std::int64_t kMinBuildMemoryMb = 16;

// An optional positive integer field (absent or null: 0), at most `max`.
Result<std::int64_t> optional_count(const json::object& o, std::string_view key, std::int64_t max) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return 0;
  std::int64_t n = 0;
  if (v->is_int64()) {
    n = v->as_int64();
  } else if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(max)) {
    n = static_cast<std::int64_t>(v->as_uint64());
  } else if (v->is_double() && v->as_double() >= 1 && v->as_double() <= static_cast<double>(max) &&
             v->as_double() == std::floor(v->as_double())) {
    n = static_cast<std::int64_t>(v->as_double());
  } else {
    return invalid_argument(std::string(key) + " must be an integer");
  }
  if (n < 1 || n > max)
    return invalid_argument(std::string(key) + " must be between 1 and " + std::to_string(max));
  return n;
}

json::object entry_json(const BuildLogLine& l) {
  json::object o{{"timestamp", rfc3339_ms(l.ms)}, {"level", l.level}, {"message", l.message}};
  if (!l.step.empty()) o["step"] = l.step;
  return o;
}

}  // namespace

// POST /v3/templates {name: "name[:tag]", tags?, cpuCount?, memoryMB?, minFreeDiskMb?}: 202
// TemplateRequestResponseV3. The name becomes the team's as POST /templates/build makes it.
// cpuCount and memoryMB become the built template's resources (the defaults of its sandboxes,
// as E2B's); the build steps themselves run under the builder's own limits. minFreeDiskMb is
// accepted and not used.
Result<Response> request_template_build(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  ABX_ASSIGN_OR_RETURN(auto body, body_object(ctx.req));
  const auto* n = body.if_contains("name");
  if (!n || !n->is_string() || n->as_string().empty())
    return invalid_argument("name is required: {\"name\": \"my-template[:tag]\"}");
  auto [name, tag] = split_name(std::string(n->as_string()));
  if (!valid_template_name(name))
    return invalid_argument("template name '" + name + "' must match [a-z0-9][a-z0-9._-]{0,63}");
  if (name.starts_with("snapshot-"))
    return invalid_argument("template names starting with snapshot- are snapshots' ids");
  ABX_ASSIGN_OR_RETURN(auto extra, string_list(body, "tags"));
  std::vector<std::string> tags{tag};
  for (auto& t : extra)
    if (std::find(tags.begin(), tags.end(), t) == tags.end()) tags.push_back(std::move(t));
  ABX_TRY(check_tags(tags));
  ABX_ASSIGN_OR_RETURN(std::int64_t cpu, optional_count(body, "cpuCount", kMaxBuildCpus));
  ABX_ASSIGN_OR_RETURN(std::int64_t memory_mb, optional_count(body, "memoryMB", kMaxBuildMemoryMb));
  if (memory_mb != 0 && memory_mb < kMinBuildMemoryMb)
    return invalid_argument("memoryMB must be at least " + std::to_string(kMinBuildMemoryMb));
  if (!ctx.builder->is_built(name) && ctx.sandboxes.catalog()->get(name))
    return Error(ErrorCode::kAlreadyExists,
                 "template '" + name + "' exists and was not built by abx template build");
  ABX_TRY(ctx.store.claim_template(name, ctx.team));
  auto r = ctx.jobs->request(name, ctx.team, tags, static_cast<double>(cpu), memory_mb);
  json::array tj;
  for (const auto& t : r.tags) tj.emplace_back(t);
  return http::json_response(202, json::object{{"templateID", name},
                                               {"buildID", r.build_id},
                                               {"aliases", json::array{json::string(name)}},
                                               {"names", json::array{json::string(name)}},
                                               {"tags", std::move(tj)},
                                               {"public", false}});
}

// GET /templates/{id}/files/{hash}: 201 {present: true} when the tar of that hash is here; else
// {present: false, url} where url is a one-time PUT on this abxd (the Host the client used).
Result<Response> template_file_link(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  const std::string& id = ctx.params.at(0);
  const std::string& hash = ctx.params.at(1);
  ABX_TRY(check_own_template(ctx, id));
  if (ctx.jobs->has_file(id, hash))
    return http::json_response(201, json::object{{"present", true}});
  ABX_ASSIGN_OR_RETURN(auto tok, ctx.jobs->upload_token(id, hash));
  std::string host(ctx.req[boost::beast::http::field::host]);
  if (host.empty() || host.find_first_of("/?#@ ") != std::string::npos)
    return invalid_argument("the request has no usable Host header for the upload URL");
  return http::json_response(201, json::object{{"present", false},
                                               {"url", "http://" + host + "/templates/" + id +
                                                           "/files/" + hash + "?token=" + tok}});
}

Result<Response> accept_template_files(TemplateJobs& jobs, const http::Request& req,
                                       const std::string& path) {
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url) return invalid_argument("malformed request target");
  const auto parts = split_path(url->path());
  std::string tok;
  for (auto p : url->params())
    if (p.key == "token") tok = p.value;
  if (parts.size() != 4) return not_found("no route");
  ABX_TRY(jobs.accept_upload(parts[1], parts[3], tok, path));
  return http::empty_response(boost::beast::http::status::ok, req.version());
}

// POST /v2/templates/{id}/builds/{buildID} (TemplateBuildStartV2): 202 once the build runs.
Result<Response> start_template_build(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  const std::string& id = ctx.params.at(0);
  const std::string& build_id = ctx.params.at(1);
  ABX_TRY(check_own_template(ctx, id));
  if (auto r = ctx.jobs->get(id, build_id, ctx.team); !r.ok()) return r.error();
  ABX_ASSIGN_OR_RETURN(auto body, body_object(ctx.req));
  ABX_ASSIGN_OR_RETURN(auto tt, translate_template(body));
  // A template of the catalog the team may use: never a registry lookup of the name.
  if (!tt.from_template.empty() &&
      (!template_visible(ctx, tt.from_template) || !ctx.sandboxes.catalog()->get(tt.from_template)))
    return invalid_argument("fromTemplate: template '" + tt.from_template + "' not found");
  store::Store* store = &ctx.store;
  ABX_TRY(ctx.jobs->start(id, build_id, std::move(tt), [store, team = ctx.team](const auto& name) {
    return template_visible_to(*store, name, team);
  }));
  return http::empty_response(boost::beast::http::status::accepted, ctx.req.version());
}

// GET /templates/{id}/builds/{buildID}/status?logsOffset=&limit=&level=: TemplateBuildInfo, the
// log entries from logsOffset on (at most limit, default 100) at or above level.
Result<Response> template_build_status(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  const std::string& id = ctx.params.at(0);
  ABX_ASSIGN_OR_RETURN(auto r, ctx.jobs->get(id, ctx.params.at(1), ctx.team));
  ABX_ASSIGN_OR_RETURN(std::int64_t offset, query_number(ctx, "logsOffset", 0, INT64_MAX));
  ABX_ASSIGN_OR_RETURN(std::int64_t limit, query_number(ctx, "limit", 100, 100));
  std::string level;
  for (auto p : ctx.url.params())
    if (p.key == "level") level = p.value;
  const int min_rank = level.empty() ? 0 : level_rank(level);
  json::array entries, lines;
  std::int64_t seen = 0;
  for (const auto& l : r.logs) {
    if (level_rank(l.level) < min_rank) continue;
    if (seen++ < offset) continue;
    if (static_cast<std::int64_t>(entries.size()) >= limit) break;
    entries.push_back(entry_json(l));
    lines.emplace_back(rfc3339_ms(l.ms) + " " + l.message);
  }
  json::object out{{"templateID", r.template_id},
                   {"buildID", r.build_id},
                   {"status", r.status},
                   {"logEntries", std::move(entries)},
                   {"logs", std::move(lines)}};
  if (r.status == "error") {
    json::object reason{{"message", r.reason}};
    if (!r.reason_step.empty()) reason["step"] = r.reason_step;
    json::array errs;
    for (const auto& l : r.logs)
      if (l.level == "error") errs.push_back(entry_json(l));
    reason["logEntries"] = std::move(errs);
    out["reason"] = std::move(reason);
  }
  return http::json_response(200, out);
}

// GET /templates/{id}/builds/{buildID}/logs?cursor=&limit=&direction=&level=&search=: {logs}, as
// the sandbox logs page: forward from cursor (ms, default 0) oldest first, backward from cursor
// (default now) newest first; limit default 100, at most 1000.
Result<Response> template_build_logs(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  ABX_ASSIGN_OR_RETURN(auto r, ctx.jobs->get(ctx.params.at(0), ctx.params.at(1), ctx.team));
  ABX_ASSIGN_OR_RETURN(LogPage page, log_page(ctx, 100, 1000));
  if (page.backward) std::reverse(r.logs.begin(), r.logs.end());
  json::array logs;
  for (const auto& l : r.logs) {
    if (static_cast<std::int64_t>(logs.size()) >= page.limit) break;
    if (page.wants(l.ms, l.level, l.message)) logs.push_back(entry_json(l));
  }
  return http::json_response(200, json::object{{"logs", std::move(logs)}});
}

// POST /templates/tags {target: "name:tag", tags}: the build `target` names gets `tags`
// (moved from any other build of the template). 201 {buildID, tags}.
Result<Response> assign_template_tags(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  ABX_ASSIGN_OR_RETURN(auto body, body_object(ctx.req));
  const auto* t = body.if_contains("target");
  if (!t || !t->is_string() || t->as_string().empty())
    return invalid_argument("target is required: {\"target\": \"name:tag\", \"tags\": […]}");
  ABX_ASSIGN_OR_RETURN(auto tags, string_list(body, "tags"));
  if (tags.empty()) return invalid_argument("tags must name at least one tag");
  ABX_TRY(check_tags(tags));
  auto [name, tag] = split_name(std::string(t->as_string()));
  ABX_TRY(check_own_template(ctx, name));
  for (const auto& r : ctx.jobs->builds_of(name, ctx.team)) {
    if (r.status != "ready" || std::find(r.tags.begin(), r.tags.end(), tag) == r.tags.end())
      continue;
    ctx.jobs->set_tags(name, r.build_id, tags);
    json::array tj;
    for (const auto& x : tags) tj.emplace_back(x);
    return http::json_response(201, json::object{{"buildID", r.build_id}, {"tags", std::move(tj)}});
  }
  return not_found("template '" + name + "' has no build tagged '" + tag + "'");
}

// DELETE /templates/tags {name, tags}: 204.
Result<Response> remove_template_tags(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  ABX_ASSIGN_OR_RETURN(auto body, body_object(ctx.req));
  const auto* n = body.if_contains("name");
  if (!n || !n->is_string() || n->as_string().empty())
    return invalid_argument("name is required: {\"name\": \"my-template\", \"tags\": […]}");
  ABX_ASSIGN_OR_RETURN(auto tags, string_list(body, "tags"));
  if (tags.empty()) return invalid_argument("tags must name at least one tag");
  const std::string name = split_name(std::string(n->as_string())).first;
  ABX_TRY(check_own_template(ctx, name));
  ABX_TRY(ctx.jobs->remove_tags(name, tags));
  return http::empty_response(boost::beast::http::status::no_content, ctx.req.version());
}

// GET /templates/{id}/tags: [{tag, buildID, createdAt}] of the template's builds.
Result<Response> list_template_tags(Context& ctx) {
  ABX_TRY(need_jobs(ctx));
  const std::string& id = ctx.params.at(0);
  ABX_TRY(check_own_template(ctx, id));
  json::array out;
  for (const auto& r : ctx.jobs->builds_of(id, ctx.team)) {
    if (r.status != "ready") continue;
    for (const auto& t : r.tags) {
      out.push_back(json::object{
          {"tag", t}, {"buildID", r.build_id}, {"createdAt", rfc3339_ms(r.created_ms)}});
    }
  }
  return http::json_response(200, out);
}

}  // namespace abx::platform::api
