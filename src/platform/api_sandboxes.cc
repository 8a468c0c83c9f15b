// /sandboxes and /v2/sandboxes: create, list, get, kill, timeout, connect, resume, pause.
#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "abx/base/json.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/platform/gateway.h"
#include "api_routes.h"
#include "volumes.h"

namespace abx::platform::api {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Response;

namespace {

Response no_content() { return Response{bhttp::status::no_content, 11}; }

json::object sandbox_json(const LiveSandbox& sb) {
  json::object o{{"templateID", sb.record.template_id},
                 {"sandboxID", sb.record.id},
                 {"clientID", sb.record.client_id},
                 {"envdVersion", kEnvdVersion},
                 {"domain", sb.record.domain}};
  if (!sb.access_token.empty()) o["envdAccessToken"] = sb.access_token;
  o["trafficAccessToken"] =
      sb.traffic_token.empty() ? json::value(nullptr) : json::value(sb.traffic_token);
  return o;
}

json::object listed_json(const store::SandboxRecord& r) {
  json::object meta;
  for (const auto& [k, v] : r.metadata) meta[k] = v;
  return json::object{{"templateID", r.template_id},
                      {"sandboxID", r.id},
                      {"clientID", r.client_id},
                      {"startedAt", rfc3339_ms(r.created_at_ms)},
                      {"endAt", rfc3339_ms(r.end_at_ms)},
                      {"cpuCount", static_cast<std::int64_t>(r.cpu_count + 0.999)},
                      {"memoryMB", r.memory_mb},
                      {"diskSizeMB", r.disk_mb},
                      {"state", store::state_name(r.state)},
                      {"envdVersion", kEnvdVersion},
                      {"metadata", std::move(meta)},
                      {"volumeMounts", volume_mounts_json(r.volume_mounts)}};
}

// "running,paused": each must name a live state.
Status parse_states(const std::string& v, std::vector<store::SandboxState>& out) {
  std::size_t start = 0;
  while (start <= v.size()) {
    std::size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    auto st = store::parse_state(v.substr(start, end - start));
    if (!st || *st == store::SandboxState::kKilled) {
      return invalid_argument("state must be running and/or paused");
    }
    out.push_back(*st);
    start = end + 1;
  }
  return {};
}

// std::stol's grammar (leading blanks and a sign allowed), as the API has always accepted.
Result<std::size_t> parse_limit(const std::string& v) {
  try {
    std::size_t n = 0;
    long lim = std::stol(v, &n);
    if (n == v.size() && lim >= 1 && lim <= 100) return static_cast<std::size_t>(lim);
  } catch (const std::exception&) {
  }
  return invalid_argument("limit must be an integer between 1 and 100");
}

// One more level of URL decoding (api::query_unescape), a malformed escape an error.
Result<std::string> unescape(std::string_view s) {
  auto out = query_unescape(s);
  if (!out) return invalid_argument("malformed metadata filter");
  return std::move(*out);
}

// "k=v&k2=v2", itself URL-encoded inside the parameter, with each key and value URL-encoded
// before that (the JS SDK: encodeURIComponent on both, then URLSearchParams), as E2B's API
// decodes it: the query, then the pairs, then each key and value.
Status parse_metadata_filter(const std::string& v, std::map<std::string, std::string>& out) {
  std::string rel = "?" + v;
  auto inner = boost::urls::parse_relative_ref(rel);
  if (!inner) return invalid_argument("malformed metadata filter");
  for (auto kv : inner->params()) {
    ABX_ASSIGN_OR_RETURN(std::string key, unescape(kv.key));
    ABX_ASSIGN_OR_RETURN(std::string value, unescape(kv.has_value ? kv.value : ""));
    out[std::move(key)] = std::move(value);
  }
  return {};
}

// RFC 3339 as the SDK sends it (Date.toISOString(): "2026-11-30T14:39:30.123Z"); a numeric
// offset ("+02:00") and any number of fraction digits are accepted too.
Result<std::int64_t> parse_rfc3339_ms(const std::string& v) {
  const auto bad = [&] { return invalid_argument("startedAfter must be an RFC 3339 date-time"); };
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  if (std::sscanf(v.c_str(), "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec,
                  &used) != 6 ||
      used != 19 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
    return bad();
  }
  std::size_t i = 19;
  std::int64_t ms = 0;
  if (i < v.size() && v[i] == '.') {
    std::size_t digits = 0;
    for (++i; i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])); ++i, ++digits) {
      if (digits < 3) ms = ms * 10 + (v[i] - '0');
    }
    if (digits == 0) return bad();
    for (; digits < 3; ++digits) ms *= 10;
  }
  std::int64_t offset_s = 0;
  if (i < v.size() && (v[i] == 'Z' || v[i] == 'z')) {
    ++i;
  } else if (i + 6 == v.size() && (v[i] == '+' || v[i] == '-') && v[i + 3] == ':') {
    int oh = 0, om = 0;
    if (std::sscanf(v.c_str() + i + 1, "%2d:%2d", &oh, &om) != 2) return bad();
    offset_s = (v[i] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
    i += 6;
  } else {
    return bad();
  }
  if (i != v.size()) return bad();
  // Days from the civil date (Howard Hinnant's algorithm), so no locale or TZ is involved.
  const int yy = mo <= 2 ? y - 1 : y;
  const int era = (yy >= 0 ? yy : yy - 399) / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const std::int64_t days = static_cast<std::int64_t>(era) * 146097 + doe - 719468;
  return (days * 86400 + h * 3600 + mi * 60 + sec - offset_s) * 1000 + ms;
}

// E2B's create fields: `autoPause` (true: the deadline pauses instead of killing; the SDK sends
// it for lifecycle.onTimeout), `autoResume: {enabled}` (traffic wakes a paused sandbox),
// `autoPauseMemory` (false: the deadline's pause is filesystem-only, which traffic cannot wake:
// refused with autoResume, as E2B's API refuses it). The shape GET /sandboxes/{id} reports,
// `lifecycle: {onTimeout, autoResume}`, is accepted too.
Status parse_lifecycle(const json::object& body, CreateRequest& cr) {
  ABX_ASSIGN_OR_RETURN(auto pause, json_optional_bool(body, "autoPause", ""));
  cr.pause_on_timeout = pause.value_or(false);
  ABX_ASSIGN_OR_RETURN(auto memory, json_optional_bool(body, "autoPauseMemory", ""));
  cr.pause_keeps_memory = memory.value_or(true);
  if (const json::value* ar = json_find(body, "autoResume")) {
    if (ar->is_bool()) {
      cr.auto_resume = ar->as_bool();
    } else if (ar->is_object()) {
      ABX_ASSIGN_OR_RETURN(auto enabled,
                           json_optional_bool(ar->as_object(), "enabled", "autoResume"));
      cr.auto_resume = enabled.value_or(false);
    } else {
      return invalid_argument("autoResume must be an object {\"enabled\": <boolean>}");
    }
  }
  ABX_ASSIGN_OR_RETURN(const json::object* lc, json_optional_object(body, "lifecycle", ""));
  if (lc != nullptr) {
    ABX_ASSIGN_OR_RETURN(auto on_timeout, json_optional_string(*lc, "onTimeout", "lifecycle"));
    if (on_timeout) {
      if (*on_timeout != "kill" && *on_timeout != "pause") {
        return invalid_argument("lifecycle.onTimeout must be \"kill\" or \"pause\"");
      }
      cr.pause_on_timeout = *on_timeout == "pause";
    }
    ABX_ASSIGN_OR_RETURN(auto auto_resume, json_optional_bool(*lc, "autoResume", "lifecycle"));
    if (auto_resume) cr.auto_resume = *auto_resume;
  }
  if (!cr.pause_keeps_memory && cr.auto_resume) {
    return invalid_argument(
        "autoResume cannot be combined with autoPauseMemory false: a sandbox paused without its "
        "memory (filesystem-only) is not woken by traffic, only by connect or resume");
  }
  return {};
}

Result<Response> list_sandboxes(Context& ctx, bool v1) {
  ABX_ASSIGN_OR_RETURN(store::SandboxFilter f, parse_list_query(ctx.url.params(), v1));
  f.team_id = ctx.team;
  ABX_ASSIGN_OR_RETURN(store::SandboxPage page, ctx.store.list_sandboxes(f));
  json::array out;
  for (const auto& r : page.items) out.push_back(listed_json(r));
  Response res = http::json_response(200, out);
  if (!page.next_token.empty()) res.set("X-Next-Token", page.next_token);
  return res;
}

// connect answers 200 (running) or 201 (resumed); resume insists on a paused sandbox. E2B's
// `memory: false` (the SDK's connect onResume 'reboot'): resume from the files alone (see
// SandboxManager::ResumeOptions).
Result<Response> resume_or_connect(Context& ctx, bool must_be_paused) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  ABX_ASSIGN_OR_RETURN(auto memory, json_optional_bool(op.body, "memory", ""));
  ABX_ASSIGN_OR_RETURN(
      bool resumed,
      ctx.sandboxes.resume(op.id, SandboxManager::ResumeOptions{.memory = memory.value_or(true)}));
  if (must_be_paused && !resumed) {
    return Error(ErrorCode::kFailedPrecondition, "sandbox '" + op.id + "' is already running");
  }
  // The timeout is read after resuming, as it always was (a bad one still leaves it resumed).
  ABX_ASSIGN_OR_RETURN(auto timeout,
                       optional_timeout(op.body, ctx.sandboxes.options().max_timeout_seconds));
  // E2B: connect only ever extends the deadline; POST .../timeout is the way to shorten it.
  if (timeout) ABX_TRY(ctx.sandboxes.extend_timeout(op.id, *timeout));
  return http::json_response(resumed ? 201 : 200, sandbox_json(*op.sb));
}

// Whether a create asks for an optional E2B feature: `key` is there with something in it (the
// SDKs send null, {} or [] for "not used").
bool asked_for(const json::object& body, std::string_view key) {
  const json::value* v = body.if_contains(key);
  if (v == nullptr || v->is_null()) return false;
  if (v->is_object()) return !v->get_object().empty();
  if (v->is_array()) return !v->get_array().empty();
  return true;
}

// E2B's "name:tag": the template's build that carries the tag. abx keeps one image per template
// (its latest ready build), so the tag must name that build; an older build's tag is refused
// with the build it names. "name:default" is the template itself.
Status resolve_template_tag(const Context& ctx, std::string& template_id) {
  const auto colon = template_id.find(':');
  if (colon == std::string::npos) return {};
  const std::string name = template_id.substr(0, colon);
  const std::string tag = template_id.substr(colon + 1);
  if (!valid_template_name(name) || !valid_template_name(tag))
    return invalid_argument("templateID '" + template_id.substr(0, 140) +
                            "' must be name or name:tag");
  if (tag == "default" || !ctx.jobs) {
    if (tag != "default")
      return not_found("template '" + template_id + "' not found (no template builds here)");
    template_id = name;
    return {};
  }
  const auto builds = ctx.jobs->builds_of(name, ctx.team);
  const TemplateBuildRecord* latest = nullptr;  // the ready build the template's image is
  for (const auto& b : builds) {
    if (b.status == "ready") {
      latest = &b;
      break;
    }
  }
  for (const auto& b : builds) {
    if (b.status != "ready" || std::find(b.tags.begin(), b.tags.end(), tag) == b.tags.end())
      continue;
    if (&b != latest)
      return Error(ErrorCode::kFailedPrecondition,
                   "template '" + name + "': tag '" + tag + "' names build " + b.build_id +
                       ", which a later build replaced (abxd keeps the latest build's image "
                       "only): build it again or assign the tag to the latest build");
    template_id = name;
    return {};
  }
  return not_found("template '" + template_id + "' not found (no build of '" + name +
                   "' is tagged '" + tag + "')");
}

}  // namespace

Result<CreateRequest> parse_create(const json::object& body, std::int64_t max_timeout,
                                   bool default_internet) {
  CreateRequest cr;
  // templateID and secure: a null is refused, not read as "not given", as it always was.
  if (const json::value* t = body.if_contains("templateID")) {
    ABX_ASSIGN_OR_RETURN(cr.template_id, json_as_string(*t, "templateID"));
  }
  ABX_ASSIGN_OR_RETURN(cr.timeout_seconds, optional_timeout(body, max_timeout));
  if (cr.timeout_seconds == 0) {
    return invalid_argument("timeout must be at least 1 second (0 would end the sandbox at once)");
  }
  ABX_ASSIGN_OR_RETURN(cr.metadata, string_map(body, "metadata"));
  ABX_ASSIGN_OR_RETURN(cr.env_vars, string_map(body, "envVars"));
  if (const json::value* s = body.if_contains("secure")) {
    ABX_ASSIGN_OR_RETURN(cr.secure, json_as_bool(*s, "secure"));
  }
  ABX_TRY(parse_lifecycle(body, cr));
  // E2B's MCP gateway (the SDK's `mcp` option, which also picks its `mcp-gateway` template) is
  // not part of abxd: refused, not ignored. abx's own MCP servers are abxd's /mcp and a
  // template's command server (docs/mcp.md).
  if (asked_for(body, "mcp")) {
    return invalid_argument("mcp is not supported by abxd (E2B's MCP gateway is not available)");
  }
  ABX_ASSIGN_OR_RETURN(cr.volume_mounts, parse_volume_mounts(body));
  if (body.contains("network") || body.contains("allowInternetAccess") ||
      body.contains("allow_internet_access")) {
    ABX_ASSIGN_OR_RETURN(SandboxNetworkSpec net, parse_network_request(body, default_internet));
    cr.network = std::move(net);
  }
  return cr;
}

Result<store::SandboxFilter> parse_list_query(boost::urls::params_view params, bool v1) {
  store::SandboxFilter f;
  f.limit = 100;
  // v1 lists running sandboxes; a state parameter adds to that rather than replacing it.
  if (v1) f.states = {store::SandboxState::kRunning};
  // v2 lists newest first, as E2B's API does; v1 keeps its oldest-first order.
  f.descending = !v1;
  for (auto param : params) {
    std::string k = param.key;
    std::string v = param.has_value ? std::string(param.value) : std::string();
    if (k == "state") {
      ABX_TRY(parse_states(v, f.states));
    } else if (k == "template") {
      f.template_id = v;
    } else if (k == "limit") {
      ABX_ASSIGN_OR_RETURN(f.limit, parse_limit(v));
    } else if (k == "nextToken") {
      f.page_token = v;
    } else if (k == "order") {
      if (v != "asc" && v != "desc") return invalid_argument("order must be asc or desc");
      f.descending = v == "desc";
    } else if (k == "metadata") {
      ABX_TRY(parse_metadata_filter(v, f.metadata));
    } else if (k == "startedAfter") {
      ABX_ASSIGN_OR_RETURN(f.started_after_ms, parse_rfc3339_ms(v));
    }
  }
  if (f.states.empty()) f.states = {store::SandboxState::kRunning, store::SandboxState::kPaused};
  return f;
}

Result<Response> create_sandbox(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(json::object body, body_object(ctx.req));
  ABX_ASSIGN_OR_RETURN(CreateRequest cr,
                       parse_create(body, ctx.sandboxes.options().max_timeout_seconds,
                                    ctx.sandboxes.default_internet()));
  // A ${e2b.secrets.<name>} must name a secret of the team (resolved per request later).
  if (cr.network) ABX_TRY(check_secret_references(ctx, cr.network->transforms, "network.rules"));
  cr.team_id = ctx.team;  // the manager refuses another team's template or snapshot (404)
  ABX_TRY(resolve_template_tag(ctx, cr.template_id));
  ABX_TRY(resolve_volume_mounts(ctx, cr.volume_mounts));
  auto teardowns_wait = ctx.sandboxes.hold_teardowns();
  ABX_ASSIGN_OR_RETURN(auto sb, ctx.sandboxes.create(cr));
  json::object o = sandbox_json(*sb);
  // network.rules for hosts the sandbox may not reach are kept (E2B) and reported here.
  if (cr.network && !cr.network->warnings.empty()) {
    json::array w;
    for (const auto& m : cr.network->warnings) w.emplace_back(m);
    o["warnings"] = std::move(w);
  }
  return http::json_response(201, o);
}

Result<Response> list_sandboxes_v1(Context& ctx) { return list_sandboxes(ctx, true); }
Result<Response> list_sandboxes_v2(Context& ctx) { return list_sandboxes(ctx, false); }

Result<Response> get_sandbox(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  json::object o = listed_json(sb->record);
  o["state"] = sb->paused ? "paused" : "running";
  if (!sb->access_token.empty()) o["envdAccessToken"] = sb->access_token;
  o["domain"] = sb->record.domain;
  {
    std::lock_guard lock(sb->mu);
    // Moved to another node (a drain) while this waited: not here (the cluster asks that node).
    if (sb->moved) return not_found("sandbox '" + sb->record.id + "' not found");
    // E2B: allowInternetAccess is null when the sandbox has no say (here: no network at all).
    if (sb->network.enabled) {
      o["allowInternetAccess"] = sb->network.allow_internet_access;
      o["network"] = sb->network.to_json();
    } else {
      o["allowInternetAccess"] = false;
    }
  }
  o["lifecycle"] = json::object{{"autoResume", sb->record.auto_resume},
                                {"onTimeout", sb->record.pause_on_timeout ? "pause" : "kill"}};
  return http::json_response(200, o);
}

Result<Response> kill_sandbox(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  ABX_TRY(ctx.sandboxes.kill(sb->record.id));
  return no_content();
}

Result<Response> set_sandbox_timeout(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  ABX_ASSIGN_OR_RETURN(
      std::int64_t t,
      json_required_int(op.body, "timeout", "", 0, ctx.sandboxes.options().max_timeout_seconds));
  ABX_TRY(ctx.sandboxes.set_timeout(op.id, t));
  return no_content();
}

// POST /sandboxes/{id}/refreshes {"duration"?: s}: E2B's keep-alive. The deadline becomes at
// least now + duration (default and minimum 15 s, E2B's SandboxTimeoutDefault); it never
// shortens it.
Result<Response> refresh_sandbox(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  const std::int64_t max_timeout = ctx.sandboxes.options().max_timeout_seconds;
  ABX_ASSIGN_OR_RETURN(auto duration, json_optional_int(op.body, "duration", "", 0, max_timeout));
  const std::int64_t seconds = std::max<std::int64_t>(duration.value_or(15), 15);
  // Only an abxd whose maximum is under the 15 s minimum gets here.
  if (seconds > max_timeout) {
    return invalid_argument("timeout must be between 0 and " + std::to_string(max_timeout) +
                            " seconds");
  }
  ABX_TRY(ctx.sandboxes.extend_timeout(op.id, seconds));
  return no_content();
}

Result<Response> connect_sandbox(Context& ctx) { return resume_or_connect(ctx, false); }
Result<Response> resume_sandbox(Context& ctx) { return resume_or_connect(ctx, true); }

// E2B's body `{"memory": <bool>}` (the SDK's keepMemory): true or absent keeps the processes
// with their memory (to disk, or in RAM — SandboxManager::pause); false is E2B's
// filesystem-only pause (the files kept, the processes ended; a resume boots it again).
Result<Response> pause_sandbox(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  ABX_ASSIGN_OR_RETURN(auto memory, json_optional_bool(op.body, "memory", ""));
  // kFailedPrecondition (409) if already paused.
  ABX_TRY(ctx.sandboxes.pause(op.id, "requested", memory.value_or(true)));
  return no_content();
}

// POST /sandboxes/{id}/fork {"timeout": s, "count": n}: 201 with one entry per child,
// {"sandbox": <as create answers>} or {"error": {"code", "message"}} (E2B's shape).
Result<Response> fork_sandbox(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  const std::int64_t max_timeout = ctx.sandboxes.options().max_timeout_seconds;
  ABX_ASSIGN_OR_RETURN(auto timeout, optional_timeout(op.body, max_timeout));
  ABX_ASSIGN_OR_RETURN(auto count_field, json_optional_int(op.body, "count", ""));
  // The ranges SandboxManager::fork asserts, count first (the order they were checked in).
  const std::int64_t count = count_field.value_or(1);
  if (count < 1 || count > SandboxManager::kMaxForkCount) {
    return invalid_argument("count must be between 1 and " +
                            std::to_string(SandboxManager::kMaxForkCount));
  }
  if (timeout == 0) {
    return invalid_argument("timeout must be between 1 and " + std::to_string(max_timeout) +
                            " seconds");
  }
  ABX_ASSIGN_OR_RETURN(auto children, ctx.sandboxes.fork(op.id, static_cast<int>(count), timeout));
  json::array out;
  for (const auto& child : children) {
    if (child.ok()) {
      out.push_back(json::object{{"sandbox", sandbox_json(**child)}});
    } else {
      out.push_back(
          json::object{{"error", json::object{{"code", http::http_status(child.error().code())},
                                              {"message", child.error().message()}}}});
    }
  }
  return http::json_response(201, out);
}

// POST /sandboxes/{id}/snapshots {"name"?}: 201 {"snapshotID", "names"}.
Result<Response> create_snapshot(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  std::string name;
  if (const json::value* n = op.body.if_contains("name"); n && !n->is_null()) {
    if (!n->is_string()) return invalid_argument("name must be a string");
    name = std::string(n->as_string());
  }
  ABX_ASSIGN_OR_RETURN(auto snap, ctx.sandboxes.create_snapshot(op.id, name));
  json::array names;
  for (const auto& n : snap.names) names.emplace_back(n);
  return http::json_response(201,
                             json::object{{"snapshotID", snap.id}, {"names", std::move(names)}});
}

// GET /snapshots?sandboxID&name&limit&nextToken: newest first; nextToken is the offset.
Result<Response> list_snapshots(Context& ctx) {
  std::string sandbox, name;
  std::size_t limit = 100, offset = 0;
  for (auto p : ctx.url.params()) {
    const std::string v = p.has_value ? std::string(p.value) : std::string();
    if (p.key == "sandboxID") {
      sandbox = v;
    } else if (p.key == "name") {
      name = v;
    } else if (p.key == "limit") {
      ABX_ASSIGN_OR_RETURN(limit, parse_limit(v));
    } else if (p.key == "nextToken") {
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
        return invalid_argument("malformed nextToken");
      offset = std::stoul(v);
    }
  }
  auto all = ctx.sandboxes.list_snapshots(sandbox, name);
  std::erase_if(all, [&](const SandboxManager::SnapshotInfo& s) { return s.team_id != ctx.team; });
  json::array out;
  for (std::size_t i = offset; i < all.size() && out.size() < limit; ++i) {
    json::array names;
    for (const auto& n : all[i].names) names.emplace_back(n);
    out.push_back(json::object{{"snapshotID", all[i].id},
                               {"names", std::move(names)},
                               {"sandboxID", all[i].sandbox_id},
                               {"templateID", all[i].template_id},
                               {"createdAt", rfc3339_ms(all[i].created_at_ms)}});
  }
  Response res = http::json_response(200, out);
  if (offset + limit < all.size()) res.set("X-Next-Token", std::to_string(offset + limit));
  return res;
}

// PUT /sandboxes/{id}/network: E2B's updateNetwork. The body's rules replace the old ones.
// 204 as in E2B; 200 with `warnings` when some network.rules cannot take effect yet.
Result<Response> update_sandbox_network(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(SandboxPost op, sandbox_post(ctx));
  {
    // The secrets the new rules name must exist (the manager parses the body again, under the
    // sandbox's lock, and a bad body fails there the same way).
    SandboxNetworkSpec current;
    {
      std::lock_guard lock(op.sb->mu);
      current = op.sb->network;
    }
    if (auto next = parse_network_update(op.body, current); next.ok())
      ABX_TRY(check_secret_references(ctx, next->transforms, "rules"));
  }
  ABX_ASSIGN_OR_RETURN(std::vector<std::string> warnings,
                       ctx.sandboxes.update_network(op.id, op.body));
  if (warnings.empty()) return no_content();
  json::array w;
  for (const auto& m : warnings) w.emplace_back(m);
  return http::json_response(200, json::object{{"warnings", std::move(w)}});
}

Status check_unrouted_sandbox_path(Context& ctx, std::span<const std::string> parts) {
  if (parts.size() < 2 || parts[0] != "sandboxes") return {};
  ctx.params = {parts[1]};
  if (parts.size() == 3 && ctx.req.method() == bhttp::verb::post) {
    ABX_TRY(sandbox_post(ctx));
    return {};
  }
  ABX_TRY(sandbox_id(ctx));
  return {};
}

}  // namespace abx::platform::api
