#include "platform/api.h"

#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <ctime>
#include <fstream>

#include "abx/auth/signing.h"
#include "abx/base/json.h"
#include "abx/token/token.h"
#include "platform/mcp_tools_abxd.h"

namespace abx::platform {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Response;

namespace {

constexpr std::size_t kMaxMetadataEntries = 64;
constexpr std::size_t kMaxMetadataBytes = 1024;

std::string rfc3339(std::int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
}

Response error(unsigned status, const std::string& msg) { return e2b_error(status, msg); }
Response error(const Error& e) { return e2b_error(e); }
Response no_content() {
  Response r{bhttp::status::no_content, 11};
  return r;
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> out;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    out.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
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

json::object sandbox_json(const LiveSandbox& sb) {
  json::object o{{"templateID", sb.record.template_id},
                 {"sandboxID", sb.record.id},
                 {"clientID", sb.record.client_id},
                 {"envdVersion", kEnvdVersion},
                 {"domain", sb.record.domain}};
  if (!sb.access_token.empty()) o["envdAccessToken"] = sb.access_token;
  return o;
}

json::object listed_json(const store::SandboxRecord& r) {
  json::object meta;
  for (const auto& [k, v] : r.metadata) meta[k] = v;
  return json::object{{"templateID", r.template_id},
                      {"sandboxID", r.id},
                      {"clientID", r.client_id},
                      {"startedAt", rfc3339(r.created_at_ms)},
                      {"endAt", rfc3339(r.end_at_ms)},
                      {"cpuCount", static_cast<std::int64_t>(r.cpu_count + 0.999)},
                      {"memoryMB", r.memory_mb},
                      {"diskSizeMB", r.disk_mb},
                      {"state", store::state_name(r.state)},
                      {"envdVersion", kEnvdVersion},
                      {"metadata", std::move(meta)}};
}

Result<json::object> body_object(const Request& req) {
  if (req.body().find_first_not_of(" \t\r\n") == std::string::npos) return json::object{};
  auto v = parse_json_strict(req.body());
  if (!v.ok()) return v.error();
  if (!v->is_object()) return invalid_argument("request body must be a JSON object");
  return v->get_object();
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

std::int64_t read_cgroup_number(const std::string& path) {
  std::ifstream in(path);
  std::int64_t v = 0;
  in >> v;
  return v;
}

}  // namespace

Status ControlApi::authenticate(const Request& req) {
  std::string_view key;
  std::size_t count = 0;
  bool signed_request = false;
  for (const auto& f : req) {
    if (boost::beast::iequals(f.name_string(), "x-api-key")) {
      key = f.value();
      ++count;
    } else if (f.name() == bhttp::field::authorization) {
      std::string_view v = f.value();
      if (v.size() > 7 && boost::beast::iequals(v.substr(0, 7), "bearer ")) {
        key = v.substr(7);
        ++count;
      } else if (v.substr(0, auth::kAlgorithm.size()) == auth::kAlgorithm) {
        signed_request = true;
        ++count;
      }
    }
  }
  if (count > 1) return invalid_argument("send one credential (X-API-KEY, Bearer or a signature)");
  Status result;
  if (signed_request) {
    auth::HttpRequest hr;
    hr.method = std::string(req.method_string());
    hr.target = std::string(req.target());
    for (const auto& f : req)
      hr.headers.push_back({std::string(f.name_string()), std::string(f.value())});
    auth::VerifyOptions vo;
    vo.now_unix = now_ms() / 1000;
    vo.lookup_secret = [this](std::string_view ak) { return store_.access_key_secret(ak); };
    vo.remember_nonce = [this](std::string_view k, std::int64_t exp) {
      return store_.remember_nonce(k, exp * 1000, now_ms());
    };
    auto v = auth::verify(hr, req.body(), vo);
    if (!v.ok()) result = v.error();
  } else if (count == 0) {
    result = Error(ErrorCode::kUnauthenticated,
                   "missing API key: send X-API-KEY (or Authorization: Bearer)");
  } else {
    auto v = store_.verify_api_key(key);
    if (!v.ok()) result = Error(ErrorCode::kUnauthenticated, "invalid API key");
  }
  if (!result.ok() && result.error().code() == ErrorCode::kUnauthenticated) {
    // Failed-auth rate limiting: after 20 failures in a second, further failures get 429.
    std::lock_guard lock(auth_mu_);
    std::int64_t now = now_ms();
    if (now - fail_window_start_ms_ > 1000) {
      fail_window_start_ms_ = now;
      fails_in_window_ = 0;
    }
    if (++fails_in_window_ > 20) {
      return Error(ErrorCode::kResourceExhausted, "too many failed authentication attempts");
    }
  }
  return result;
}

Response ControlApi::handle_control(Request&& req) {
  Response res = route(req);
  if (res.find(bhttp::field::content_type) == res.end() && !res.body().empty()) {
    res.set(bhttp::field::content_type, "application/json");
  }
  return res;
}

Response ControlApi::route(Request& req) {
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url) return error(400, "malformed request target");
  std::string path = url->path();
  auto parts = split_path(path);
  const auto method = req.method();
  // JS SDK >= 2.46 creates with POST /v2/sandboxes and connects with
  // POST /v2/sandboxes/{id}/connect; both take and answer the v1 shapes.
  if (method == bhttp::verb::post && parts.size() >= 2 && parts[0] == "v2" &&
      parts[1] == "sandboxes" &&
      (parts.size() == 2 || (parts.size() == 4 && parts[3] == "connect"))) {
    parts.erase(parts.begin());
  }

  if (path == "/health") return http::json_response(200, json::object{{"status", "ok"}});
  if (Status s = authenticate(req); !s) return error(s.error());
  if (path == "/mcp") return serve_platform_mcp(sandboxes_, store_, req);  // MCP: mcp_tools.h

  // /templates
  if (!parts.empty() && parts[0] == "templates" && method == bhttp::verb::get) {
    const auto& cat = sandboxes_.catalog();
    if (parts.size() == 1) {
      json::array out;
      for (const auto* t : cat.list()) {
        json::object o = t->to_json();
        o["envdVersion"] = kEnvdVersion;
        o["buildID"] = t->id;
        out.push_back(std::move(o));
      }
      return http::json_response(200, out);
    }
    if (parts.size() == 2) {
      if (const auto* t = cat.get(parts[1])) {
        json::object o = t->to_json();
        o["envdVersion"] = kEnvdVersion;
        o["buildID"] = t->id;
        o["builds"] = json::array{};
        return http::json_response(200, o);
      }
      for (const auto& e : cat.errors()) {
        if (e.id_hint == parts[1]) {
          return error(404, "template '" + parts[1] + "' failed to load: " + e.message);
        }
      }
      return error(404, "template '" + parts[1] + "' not found");
    }
  }

  // /v2/sandboxes and /sandboxes (list)
  bool v2_list = parts.size() == 2 && parts[0] == "v2" && parts[1] == "sandboxes";
  bool v1_list = parts.size() == 1 && parts[0] == "sandboxes" && method == bhttp::verb::get;
  if ((v2_list && method == bhttp::verb::get) || v1_list) {
    store::SandboxFilter f;
    f.limit = 100;
    if (v1_list) f.states = {store::SandboxState::kRunning};
    for (auto param : url->params()) {
      std::string k = param.key;
      std::string v = param.has_value ? std::string(param.value) : std::string();
      if (k == "state") {
        std::size_t start = 0;
        while (start <= v.size()) {
          std::size_t end = v.find(',', start);
          if (end == std::string::npos) end = v.size();
          auto st = store::parse_state(v.substr(start, end - start));
          if (!st || *st == store::SandboxState::kKilled) {
            return error(400, "state must be running and/or paused");
          }
          f.states.push_back(*st);
          start = end + 1;
        }
      } else if (k == "template") {
        f.template_id = v;
      } else if (k == "limit") {
        try {
          std::size_t n = 0;
          long lim = std::stol(v, &n);
          if (n != v.size() || lim < 1 || lim > 100) throw std::out_of_range("limit");
          f.limit = static_cast<std::size_t>(lim);
        } catch (const std::exception&) {
          return error(400, "limit must be an integer between 1 and 100");
        }
      } else if (k == "nextToken") {
        f.page_token = v;
      } else if (k == "order") {
        if (v != "asc" && v != "desc") return error(400, "order must be asc or desc");
        f.descending = v == "desc";
      } else if (k == "metadata") {
        // "k=v&k2=v2", itself URL-encoded inside the parameter.
        std::string rel = "?" + v;
        auto inner = boost::urls::parse_relative_ref(rel);
        if (!inner) return error(400, "malformed metadata filter");
        for (auto kv : inner->params()) {
          f.metadata[std::string(kv.key)] = kv.has_value ? std::string(kv.value) : "";
        }
      }
    }
    if (f.states.empty()) f.states = {store::SandboxState::kRunning, store::SandboxState::kPaused};
    auto page = store_.list_sandboxes(f);
    if (!page.ok()) {
      if (page.error().code() == ErrorCode::kInvalidArgument) return error(page.error());
      return error(page.error());
    }
    json::array out;
    for (const auto& r : page->items) out.push_back(listed_json(r));
    Response res = http::json_response(200, out);
    if (!page->next_token.empty()) res.set("X-Next-Token", page->next_token);
    return res;
  }

  if (parts.size() == 1 && parts[0] == "sandboxes" && method == bhttp::verb::post) {
    auto body = body_object(req);
    if (!body.ok()) return error(400, body.error().message());
    CreateRequest cr;
    if (const json::value* t = body->if_contains("templateID")) {
      if (!t->is_string()) return error(400, "templateID must be a string");
      cr.template_id = std::string(t->get_string());
    }
    if (body->if_contains("timeout")) {
      auto t = int_field(*body, "timeout", 0, sandboxes_.options().max_timeout_seconds);
      if (!t.ok()) return error(400, t.error().message());
      cr.timeout_seconds = *t;
    }
    auto meta = string_map(body->if_contains("metadata"), "metadata");
    if (!meta.ok()) return error(400, meta.error().message());
    cr.metadata = std::move(*meta);
    auto envs = string_map(body->if_contains("envVars"), "envVars");
    if (!envs.ok()) return error(400, envs.error().message());
    cr.env_vars = std::move(*envs);
    if (const json::value* s = body->if_contains("secure")) {
      if (!s->is_bool()) return error(400, "secure must be a boolean");
      cr.secure = s->as_bool();
    }
    auto sb = sandboxes_.create(cr);
    if (!sb.ok()) return error(sb.error());
    return http::json_response(201, sandbox_json(**sb));
  }

  if (parts.size() >= 2 && parts[0] == "sandboxes") {
    // The real API accepts <id> or <id>-<clientID>.
    std::string id = parts[1];
    if (auto dash = id.find('-'); dash != std::string::npos) id = id.substr(0, dash);
    if (!valid_sandbox_id(id)) return error(400, "invalid sandbox id");
    auto sb = sandboxes_.find(id);
    if (parts.size() == 2) {
      if (method == bhttp::verb::get) {
        if (!sb) return error(404, "sandbox '" + id + "' not found");
        json::object o = listed_json(sb->record);
        o["state"] = sb->paused ? "paused" : "running";
        if (!sb->access_token.empty()) o["envdAccessToken"] = sb->access_token;
        o["domain"] = sb->record.domain;
        o["allowInternetAccess"] = false;
        o["lifecycle"] = json::object{{"autoResume", true}, {"onTimeout", "kill"}};
        return http::json_response(200, o);
      }
      if (method == bhttp::verb::delete_) {
        Status s = sandboxes_.kill(id);
        if (!s.ok()) return error(s.error());
        return no_content();
      }
    }
    if (parts.size() == 3 && method == bhttp::verb::post) {
      const std::string& op = parts[2];
      if (!sb) return error(404, "sandbox '" + id + "' not found");
      auto body = body_object(req);
      if (!body.ok()) return error(400, body.error().message());
      if (op == "timeout") {
        auto t = int_field(*body, "timeout", 0, sandboxes_.options().max_timeout_seconds);
        if (!t.ok()) return error(400, t.error().message());
        Status s = sandboxes_.set_timeout(id, *t);
        if (!s.ok()) return error(s.error());
        return no_content();
      }
      if (op == "connect" || op == "resume") {
        auto resumed = sandboxes_.resume(id);
        if (!resumed.ok()) return error(resumed.error());
        if (op == "resume" && !*resumed)
          return error(409, "sandbox '" + id + "' is already running");
        if (body->if_contains("timeout")) {
          auto t = int_field(*body, "timeout", 0, sandboxes_.options().max_timeout_seconds);
          if (!t.ok()) return error(400, t.error().message());
          if (Status s = sandboxes_.set_timeout(id, *t); !s) return error(s.error());
        }
        return http::json_response(*resumed ? 201 : 200, sandbox_json(*sb));
      }
      if (op == "pause") {
        Status s = sandboxes_.pause(id);
        if (!s.ok()) {
          if (s.error().code() == ErrorCode::kFailedPrecondition && sb->paused) {
            return error(409, s.error().message());
          }
          return error(s.error());
        }
        return no_content();
      }
      if (op == "tokens") {
        if (sb->access_token.empty()) {
          return error(409, "sandbox '" + id + "' was created with secure=false: it has no token");
        }
        token::ScopedClaims claims;
        const json::value* cmds = body->if_contains("commands");
        if (cmds == nullptr || !cmds->is_array() || cmds->get_array().empty()) {
          return error(400, "commands must be a non-empty array of command names");
        }
        for (const auto& c : cmds->get_array()) {
          if (!c.is_string()) return error(400, "commands must be strings");
          claims.commands.emplace_back(c.get_string());
        }
        std::int64_t ttl = 3600;
        if (body->if_contains("ttlSeconds")) {
          auto t = int_field(*body, "ttlSeconds", 1, 30 * 24 * 3600);
          if (!t.ok()) return error(400, t.error().message());
          ttl = *t;
        }
        claims.expires_at = now_ms() / 1000 + ttl;
        auto tok = token::mint_scoped(sb->access_token, claims);
        if (!tok.ok()) return error(400, tok.error().message());
        return http::json_response(
            201, json::object{{"token", *tok}, {"expiresAt", rfc3339(claims.expires_at * 1000)}});
      }
    }
    if (parts.size() == 3 && parts[2] == "metrics" && method == bhttp::verb::get) {
      if (!sb) return error(404, "sandbox '" + id + "' not found");
      const auto& cg = sb->sandbox.cgroups();
      std::int64_t mem = 0;
      if (auto d = cg.dir_for("memory"); !d.empty()) {
        mem = read_cgroup_number(d + "/memory.usage_in_bytes");
        if (mem == 0) mem = read_cgroup_number(d + "/memory.current");
      }
      json::object m{{"timestamp", rfc3339(now_ms())},
                     {"timestampUnix", now_ms() / 1000},
                     {"cpuCount", static_cast<std::int64_t>(sb->record.cpu_count + 0.999)},
                     {"cpuUsedPct", 0.0},
                     {"memUsed", mem},
                     {"memTotal", sb->record.memory_mb << 20},
                     {"diskUsed", 0},
                     {"diskTotal", sb->record.disk_mb << 20}};
      return http::json_response(200, json::array{m});
    }
    return error(404, "no route for " + std::string(req.method_string()) + " " + path);
  }
  return error(404, "no route for " + std::string(req.method_string()) + " " + path);
}

Status ControlApi::authorize_sandbox(const Route& route, const bhttp::fields& headers) {
  auto sb = sandboxes_.find(route.sandbox_id);
  if (!sb) return not_found("sandbox '" + route.sandbox_id + "' not found");
  const bool envd = route.port == kEnvdPort;
  const bool server = sb->tmpl && sb->tmpl->server && route.port == sb->tmpl->server->port;
  if (!envd && !server && !(sb->tmpl && sb->tmpl->has(templates::Capability::kPorts))) {
    return Error(ErrorCode::kPermissionDenied,
                 "port " + std::to_string(route.port) +
                     " of this sandbox is private (its template lacks the `ports` capability)");
  }
  if (sb->access_token.empty()) {  // secure=false: open, as in E2B
    return sb->paused ? Status(Error(ErrorCode::kFailedPrecondition, "paused")) : Status();
  }
  std::string_view presented = headers["X-Access-Token"];
  if (presented.empty()) {
    std::string_view a = headers[bhttp::field::authorization];
    if (a.size() > 7 && boost::beast::iequals(a.substr(0, 7), "bearer ")) presented = a.substr(7);
  }
  if (presented.empty()) {
    return Error(ErrorCode::kUnauthenticated,
                 "missing X-Access-Token for sandbox '" + sb->record.id + "'");
  }
  // Allowed but paused: the gateway reconnects through connect_sandbox, which resumes it.
  const Status allowed =
      sb->paused ? Status(Error(ErrorCode::kFailedPrecondition, "paused")) : Status();
  if (token::constant_time_equal(presented, sb->access_token)) return allowed;
  // A scoped token reaches the command server only; the server enforces its command list.
  if (server && token::looks_scoped(presented) &&
      token::verify_scoped(sb->access_token, presented, now_ms() / 1000).ok()) {
    return allowed;
  }
  return Error(ErrorCode::kUnauthenticated,
               "invalid access token for sandbox '" + sb->record.id + "'");
}

Result<runtime::UniqueFd> ControlApi::connect_sandbox(const Route& route) {
  auto fd = sandboxes_.connect(route.sandbox_id, route.port);
  if (!fd.ok() && fd.error().code() == ErrorCode::kUnavailable) {
    return unavailable("nothing listens on port " + std::to_string(route.port) + " in sandbox '" +
                       route.sandbox_id + "'");
  }
  return fd;
}

}  // namespace abx::platform
