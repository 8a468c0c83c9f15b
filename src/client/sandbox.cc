// Sandbox lifecycle on the control plane, configuration, capabilities, templates.
#include "abx/client/sandbox.h"

#include <boost/json.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>

#include "abx/auth/signing.h"
#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/http/server.h"
#include "abx/token/token.h"
#include "state.h"

namespace abx::client {

namespace {

std::string env(const char* abx, const char* e2b = nullptr) {
  if (const char* v = std::getenv(abx); v && *v) return v;
  if (e2b != nullptr) {
    if (const char* v = std::getenv(e2b); v && *v) return v;
  }
  return {};
}

}  // namespace

ConnectionConfig ConnectionConfig::from_env() {
  ConnectionConfig c;
  if (auto d = env("ABX_DOMAIN", "E2B_DOMAIN"); !d.empty()) {
    c.domain = d;
    c.api_url = "https://api." + d;
  }
  if (auto u = env("ABX_API_URL", "E2B_API_URL"); !u.empty()) c.api_url = u;
  c.api_key = env("ABX_API_KEY", "E2B_API_KEY");
  c.access_key_id = env("ABX_ACCESS_KEY_ID");
  c.secret_access_key = env("ABX_SECRET_ACCESS_KEY");
  c.sandbox_url = env("ABX_SANDBOX_URL", "E2B_SANDBOX_URL");
  c.server_url = env("ABX_SERVER_URL");
  c.access_token = env("ABX_ACCESS_TOKEN");
  if (auto h = env("ABX_HOME"); !h.empty()) c.home = h;
  if (auto t = env("ABX_REQUEST_TIMEOUT_MS"); !t.empty()) {
    char* end = nullptr;
    long v = std::strtol(t.c_str(), &end, 10);
    if (end && *end == '\0' && v > 0) c.request_timeout = std::chrono::milliseconds(v);
  }
  if (auto r = env("ABX_MAX_RETRIES"); !r.empty()) {
    char* end = nullptr;
    long v = std::strtol(r.c_str(), &end, 10);
    if (end && *end == '\0' && v >= 0 && v <= 20) c.max_retries = static_cast<int>(v);
  }
  return c;
}

std::set<Capability> default_capabilities() {
  return {templates::kDefaultCapabilities.begin(), templates::kDefaultCapabilities.end()};
}

std::optional<Language> parse_language(std::string_view n) {
  if (n == "python" || n == "python3" || n == "py") return Language::kPython;
  if (n == "javascript" || n == "js" || n == "node") return Language::kJavaScript;
  if (n == "bash" || n == "sh" || n == "shell") return Language::kBash;
  return std::nullopt;
}

json::object SandboxInfo::to_json() const {
  json::object o;
  o["sandboxID"] = sandbox_id;
  o["templateID"] = template_id;
  if (!alias.empty()) o["alias"] = alias;
  o["clientID"] = client_id;
  o["envdVersion"] = envd_version;
  if (!domain.empty()) o["domain"] = domain;
  if (!state.empty()) o["state"] = state;
  if (!started_at.empty()) o["startedAt"] = started_at;
  if (!end_at.empty()) o["endAt"] = end_at;
  if (cpu_count) o["cpuCount"] = cpu_count;
  if (memory_mb) o["memoryMB"] = memory_mb;
  json::object md;
  for (const auto& [k, v] : metadata) md[k] = v;
  o["metadata"] = std::move(md);
  if (allow_internet_access) o["allowInternetAccess"] = *allow_internet_access;
  if (!allow_out.empty() || !deny_out.empty()) {
    json::array a, d;
    for (const auto& x : allow_out) a.emplace_back(x);
    for (const auto& x : deny_out) d.emplace_back(x);
    o["network"] = json::object{{"allowOut", std::move(a)}, {"denyOut", std::move(d)}};
  }
  return o;
}

namespace {
// A string field of a response: "" when absent or null; another type is an error.
Status read_string(const json::object& o, std::string_view key, std::string_view path,
                   std::string& out) {
  ABX_ASSIGN_OR_RETURN(auto s, json_optional_string(o, key, path));
  out = std::move(s).value_or("");
  return {};
}

Status read_int(const json::object& o, std::string_view key, std::string_view path, int& out) {
  ABX_ASSIGN_OR_RETURN(auto n, json_optional_int(o, key, path, std::numeric_limits<int>::min(),
                                                 std::numeric_limits<int>::max()));
  out = static_cast<int>(n.value_or(0));
  return {};
}
}  // namespace

Result<SandboxInfo> sandbox_info_from_json(const json::value& v) {
  ABX_ASSIGN_OR_RETURN(const json::object* op, json_as_object(v, "sandbox"));
  const json::object& o = *op;
  SandboxInfo i;
  ABX_ASSIGN_OR_RETURN(i.sandbox_id, json_required_string(o, "sandboxID", "sandbox"));
  if (i.sandbox_id.empty()) return invalid_argument("sandbox: missing sandboxID");
  ABX_TRY(read_string(o, "templateID", "sandbox", i.template_id));
  ABX_TRY(read_string(o, "alias", "sandbox", i.alias));
  ABX_TRY(read_string(o, "clientID", "sandbox", i.client_id));
  ABX_TRY(read_string(o, "envdVersion", "sandbox", i.envd_version));
  ABX_TRY(read_string(o, "envdAccessToken", "sandbox", i.envd_access_token));
  ABX_TRY(read_string(o, "domain", "sandbox", i.domain));
  ABX_TRY(read_string(o, "state", "sandbox", i.state));
  ABX_TRY(read_string(o, "startedAt", "sandbox", i.started_at));
  ABX_TRY(read_string(o, "endAt", "sandbox", i.end_at));
  ABX_TRY(read_int(o, "cpuCount", "sandbox", i.cpu_count));
  ABX_TRY(read_int(o, "memoryMB", "sandbox", i.memory_mb));
  ABX_ASSIGN_OR_RETURN(i.metadata, json_optional_string_map(o, "metadata", "sandbox"));
  ABX_ASSIGN_OR_RETURN(auto internet, json_optional_bool(o, "allowInternetAccess", "sandbox"));
  if (internet) i.allow_internet_access = *internet;
  ABX_ASSIGN_OR_RETURN(const json::object* n, json_optional_object(o, "network", "sandbox"));
  if (n != nullptr) {
    ABX_ASSIGN_OR_RETURN(i.allow_out, json_optional_string_list(*n, "allowOut", "sandbox.network"));
    ABX_ASSIGN_OR_RETURN(i.deny_out, json_optional_string_list(*n, "denyOut", "sandbox.network"));
  }
  return i;
}

namespace detail {

Result<http::Response> control_request(Transport& t, bhttp::verb method, std::string target,
                                       const json::value* body, bool idempotent) {
  const auto& cfg = t.config();
  ABX_ASSIGN_OR_RETURN(auto ep, parse_http_url(cfg.api_url));
  auto req = http::make_request(method, std::move(target), body ? to_json_string(*body) : "");
  Transport::SendOptions opts;
  opts.idempotent = idempotent;
  if (!cfg.access_key_id.empty() && !cfg.secret_access_key.empty()) {
    auth::Credentials creds{cfg.access_key_id, cfg.secret_access_key};
    opts.before_send = [creds](http::Request& r) -> Status {
      auth::HttpRequest hr;
      hr.method = std::string(r.method_string());
      hr.target = std::string(r.target());
      for (const auto& f : r)
        hr.headers.push_back({std::string(f.name_string()), std::string(f.value())});
      auth::SignOptions so;
      so.now_unix = std::time(nullptr);
      ABX_ASSIGN_OR_RETURN(auto headers, auth::sign(hr, r.body(), creds, so));
      for (const auto& h : headers) r.set(h.name, h.value);
      return {};
    };
  } else if (!cfg.api_key.empty()) {
    req.set("X-API-KEY", cfg.api_key);
  }
  return t.send(ep, std::move(req), opts);
}

Result<json::value> control_json(Transport& t, bhttp::verb method, std::string target,
                                 const json::value* body, bool idempotent, std::string_view what,
                                 unsigned* status) {
  ABX_ASSIGN_OR_RETURN(auto res, control_request(t, method, std::move(target), body, idempotent));
  if (res.result_int() / 100 != 2) return error_from_response(res, Plane::kControl, what);
  if (status) *status = res.result_int();
  if (res.body().empty()) return json::value(nullptr);
  auto v = parse_json_strict(res.body());
  if (!v.ok())
    return Error(ErrorCode::kInternal,
                 std::string(what) + ": bad JSON from the platform: " + v.error().message());
  return std::move(*v);
}

Result<bool> control_delete(Transport& t, std::string target, std::string_view what) {
  ABX_ASSIGN_OR_RETURN(auto res,
                       control_request(t, bhttp::verb::delete_, std::move(target), nullptr, true));
  if (res.result_int() / 100 == 2) return true;
  if (res.result_int() == 404) return false;
  return error_from_response(res, Plane::kControl, what);
}

Status control_list(Transport& t, std::string_view path,
                    std::vector<std::pair<std::string, std::string>> query, std::string_view what,
                    const std::function<Result<bool>(const json::value&)>& each) {
  for (;;) {
    std::string target(path);
    for (std::size_t i = 0; i < query.size(); ++i)
      target += (i ? "&" : "?") + query[i].first + "=" + url_encode(query[i].second);
    ABX_ASSIGN_OR_RETURN(auto res, control_request(t, bhttp::verb::get, target, nullptr, true));
    if (res.result_int() != 200) return error_from_response(res, Plane::kControl, what);
    auto v = parse_json_strict(res.body());
    if (!v.ok() || !v->is_array())
      return internal_error(std::string(what) + ": expected a JSON array");
    bool more = true;
    for (const auto& item : v->as_array()) {
      ABX_ASSIGN_OR_RETURN(bool go_on, each(item));
      more = more && go_on;
    }
    const std::string next(res["X-Next-Token"]);
    if (next.empty() || !more) return {};
    if (!query.empty() && query.back().first == "nextToken") query.pop_back();
    query.emplace_back("nextToken", next);
  }
}

std::filesystem::path abx_home(const ConnectionConfig& config) {
  if (!config.home.empty()) return config.home;
  if (const char* h = std::getenv("ABX_HOME"); h && *h) return h;
  if (const char* h = std::getenv("HOME"); h && *h) return std::filesystem::path(h) / ".abx";
  return ".abx";
}

templates::TemplateCatalog load_local_catalog(const ConnectionConfig& config) {
  return templates::TemplateCatalog::load(abx_home(config), templates::BuiltinOptions{});
}

const templates::Template* find_local_template(const templates::TemplateCatalog& catalog,
                                               std::string_view id) {
  return id.empty() ? nullptr : catalog.get(id);
}

Status SandboxState::check(Capability c) {
  ABX_ASSIGN_OR_RETURN(auto caps, resolve_capabilities(*this));
  if (caps.count(c)) return {};
  return Error(ErrorCode::kFailedPrecondition,
               "sandbox " + info.sandbox_id + " (template " +
                   (info.template_id.empty() ? std::string("?") : info.template_id) +
                   ") lacks the '" + std::string(capability_name(c)) + "' capability",
               "MissingCapability");
}

Result<Endpoint> SandboxState::plane_endpoint(std::uint16_t port) const {
  if (config.sandbox_dialer) {
    // The pool key (host:port) must not mix sandboxes.
    return Endpoint{"sandbox/" + info.sandbox_id, port, "", "localhost", info.sandbox_id};
  }
  const std::string& override_url = port == kCommandServerPort
                                        ? config.server_url
                                        : (port == kEnvdPort ? config.sandbox_url : std::string());
  return parse_http_url(override_url.empty() ? config.api_url : override_url);
}

void SandboxState::add_plane_headers(http::Request& req, std::uint16_t port) const {
  if (!config.sandbox_dialer) {  // a dialed socket reaches the port itself
    req.set("E2b-Sandbox-Id", info.sandbox_id);
    req.set("E2b-Sandbox-Port", std::to_string(port));
  }
  if (!access_token.empty()) req.set("X-Access-Token", access_token);
}

Result<http::Response> SandboxState::plane_send(std::uint16_t port, http::Request req,
                                                Transport::SendOptions opts) {
  ABX_ASSIGN_OR_RETURN(auto ep, plane_endpoint(port));
  add_plane_headers(req, port);
  return transport->send(ep, std::move(req), opts);
}

Result<json::value> SandboxState::connect_unary(std::string_view path, const json::value& body,
                                                bool idempotent) {
  auto req = http::make_request(bhttp::verb::post, std::string(path), to_json_string(body));
  req.set("Connect-Protocol-Version", "1");
  ABX_ASSIGN_OR_RETURN(auto res, plane_send(kEnvdPort, std::move(req), {.idempotent = idempotent}));
  if (res.result_int() != 200) return error_from_response(res, Plane::kEnvd, path.substr(1));
  auto v =
      parse_json_strict(res.body().empty() ? std::string_view("{}") : std::string_view(res.body()));
  if (!v.ok()) return Error(ErrorCode::kInternal, "envd sent bad JSON: " + v.error().message());
  return std::move(*v);
}

}  // namespace detail

using detail::control_json;

Result<Sandbox> Sandbox::create(std::string_view template_id, const CreateOptions& opts,
                                const ConnectionConfig& config) {
  json::object body;
  body["templateID"] = template_id;
  body["timeout"] = opts.timeout.count();
  body["secure"] = opts.secure;
  body["allow_internet_access"] = opts.allow_internet_access;
  if (!opts.allow_out.empty() || !opts.deny_out.empty()) {
    json::array allow, deny;
    for (const auto& a : opts.allow_out) allow.emplace_back(a);
    for (const auto& d : opts.deny_out) deny.emplace_back(d);
    body["network"] = json::object{{"allowOut", std::move(allow)}, {"denyOut", std::move(deny)}};
  }
  json::object md, envs;
  for (const auto& [k, v] : opts.metadata) md[k] = v;
  for (const auto& [k, v] : opts.envs) envs[k] = v;
  body["metadata"] = std::move(md);
  body["envVars"] = std::move(envs);
  detail::Transport t(config);
  json::value bv = body;
  ABX_ASSIGN_OR_RETURN(
      auto v, control_json(t, bhttp::verb::post, "/sandboxes", &bv, false, "create sandbox"));
  ABX_ASSIGN_OR_RETURN(auto info, sandbox_info_from_json(v));
  if (info.template_id.empty()) info.template_id = std::string(template_id);
  return Sandbox(std::make_shared<detail::SandboxState>(config, std::move(info)));
}

Result<Sandbox> Sandbox::connect(std::string_view sandbox_id, const ConnectionConfig& config,
                                 std::chrono::seconds timeout, bool* resumed) {
  detail::Transport t(config);
  json::object fields;
  if (timeout.count() > 0) fields["timeout"] = timeout.count();
  json::value body = std::move(fields);
  unsigned status = 0;
  ABX_ASSIGN_OR_RETURN(
      auto v, control_json(t, bhttp::verb::post,
                           "/sandboxes/" + detail::url_encode(sandbox_id) + "/connect", &body,
                           false, "connect to sandbox " + std::string(sandbox_id), &status));
  if (resumed) *resumed = status == 201;
  ABX_ASSIGN_OR_RETURN(auto info, sandbox_info_from_json(v));
  return Sandbox(std::make_shared<detail::SandboxState>(config, std::move(info)));
}

Sandbox Sandbox::attach(SandboxInfo info, const ConnectionConfig& config) {
  if (info.envd_access_token.empty()) info.envd_access_token = config.access_token;
  return Sandbox(std::make_shared<detail::SandboxState>(config, std::move(info)));
}

Sandbox Sandbox::attach(SandboxInfo info, const ConnectionConfig& config,
                        std::set<Capability> capabilities) {
  Sandbox s = attach(std::move(info), config);
  s.state_->capabilities = std::move(capabilities);
  return s;
}

Result<std::vector<SandboxInfo>> Sandbox::list(const ListFilters& f,
                                               const ConnectionConfig& config) {
  detail::Transport t(config);
  std::vector<std::pair<std::string, std::string>> q;
  if (!f.states.empty()) {
    std::string s;
    for (const auto& st : f.states) s += (s.empty() ? "" : ",") + st;
    q.emplace_back("state", s);
  }
  if (!f.metadata.empty()) {
    std::string m;
    for (const auto& [k, v] : f.metadata)
      m += (m.empty() ? "" : "&") + detail::url_encode(k) + "=" + detail::url_encode(v);
    q.emplace_back("metadata", m);
  }
  if (!f.template_id.empty()) q.emplace_back("template", f.template_id);
  if (f.limit > 0) q.emplace_back("limit", std::to_string(std::min(f.limit, 100)));
  std::vector<SandboxInfo> out;
  ABX_TRY(detail::control_list(t, "/v2/sandboxes", std::move(q), "list sandboxes",
                               [&](const json::value& item) -> Result<bool> {
                                 ABX_ASSIGN_OR_RETURN(auto i, sandbox_info_from_json(item));
                                 out.push_back(std::move(i));
                                 return f.limit <= 0 || static_cast<int>(out.size()) < f.limit;
                               }));
  if (f.limit > 0 && static_cast<int>(out.size()) > f.limit)
    out.resize(static_cast<std::size_t>(f.limit));
  return out;
}

Result<bool> Sandbox::kill(std::string_view sandbox_id, const ConnectionConfig& config) {
  detail::Transport t(config);
  return detail::control_delete(t, "/sandboxes/" + detail::url_encode(sandbox_id),
                                "kill sandbox " + std::string(sandbox_id));
}

const std::string& Sandbox::id() const { return state_->info.sandbox_id; }
const SandboxInfo& Sandbox::cached_info() const { return state_->info; }
const ConnectionConfig& Sandbox::config() const { return state_->config; }

Result<bool> Sandbox::kill() { return kill(id(), state_->config); }

Status Sandbox::set_timeout(std::chrono::seconds timeout) {
  json::value body = json::object{{"timeout", timeout.count()}};
  ABX_TRY(control_json(*state_->transport, bhttp::verb::post,
                       "/sandboxes/" + detail::url_encode(id()) + "/timeout", &body, true,
                       "set timeout of sandbox " + id()));
  return {};
}

namespace {
// "2026-11-30T14:39:30.123Z" (any fraction, or none) → Unix ms; 0 when malformed.
std::int64_t parse_rfc3339_ms(std::string_view ts) {
  std::tm tm{};
  int frac_pos = 0;
  std::string s(ts);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &frac_pos) != 6) {
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::int64_t ms = static_cast<std::int64_t>(::timegm(&tm)) * 1000;
  if (static_cast<std::size_t>(frac_pos) < s.size() && s[frac_pos] == '.') {
    int scale = 100;
    for (std::size_t i = frac_pos + 1; i < s.size() && std::isdigit(s[i]) && scale > 0; ++i) {
      ms += (s[i] - '0') * scale;
      scale /= 10;
    }
  }
  return ms;
}
}  // namespace

Status Sandbox::update_network(std::string_view sandbox_id, const ConnectionConfig& config,
                               const std::vector<std::string>& allow_out,
                               const std::vector<std::string>& deny_out,
                               std::optional<bool> allow_internet_access) {
  json::array allow, deny;
  for (const auto& a : allow_out) allow.emplace_back(a);
  for (const auto& d : deny_out) deny.emplace_back(d);
  json::object body{{"allowOut", std::move(allow)}, {"denyOut", std::move(deny)}};
  if (allow_internet_access) body["allowInternetAccess"] = *allow_internet_access;
  json::value bv = std::move(body);
  detail::Transport t(config);
  ABX_ASSIGN_OR_RETURN(
      auto v, detail::control_json(t, bhttp::verb::put,
                                   "/sandboxes/" + detail::url_encode(sandbox_id) + "/network", &bv,
                                   true, "network of sandbox " + std::string(sandbox_id)));
  (void)v;
  return {};
}

Result<std::vector<NetworkEvent>> Sandbox::network_audit(std::string_view sandbox_id,
                                                         const ConnectionConfig& config,
                                                         std::int64_t start_ms) {
  detail::Transport t(config);
  ABX_ASSIGN_OR_RETURN(
      auto v,
      detail::control_json(t, bhttp::verb::get,
                           "/sandboxes/" + detail::url_encode(sandbox_id) +
                               "/network/audit?start=" + std::to_string(start_ms),
                           nullptr, true, "network audit of sandbox " + std::string(sandbox_id)));
  std::vector<NetworkEvent> out;
  ABX_ASSIGN_OR_RETURN(const json::object* body, json_as_object(v, "network audit"));
  ABX_ASSIGN_OR_RETURN(const json::array* events,
                       json_optional_array(*body, "events", "network audit"));
  if (events == nullptr) return out;
  for (std::size_t i = 0; i < events->size(); ++i) {
    const std::string at = json_path_index("network audit.events", i);
    ABX_ASSIGN_OR_RETURN(const json::object* o, json_as_object((*events)[i], at));
    NetworkEvent ne;
    ABX_ASSIGN_OR_RETURN(auto timestamp, json_optional_int(*o, "timestamp", at));
    ne.timestamp_ms = timestamp.value_or(0);
    ABX_TRY(read_string(*o, "protocol", at, ne.protocol));
    ABX_TRY(read_string(*o, "destination", at, ne.destination));
    ABX_TRY(read_int(*o, "port", at, ne.port));
    ABX_TRY(read_string(*o, "domain", at, ne.domain));
    ABX_TRY(read_string(*o, "verdict", at, ne.verdict));
    out.push_back(std::move(ne));
  }
  return out;
}

Result<std::vector<LogEntry>> Sandbox::logs(std::string_view sandbox_id,
                                            const ConnectionConfig& config, std::int64_t start_ms,
                                            int limit) {
  detail::Transport t(config);
  ABX_ASSIGN_OR_RETURN(
      auto v, detail::control_json(t, bhttp::verb::get,
                                   "/sandboxes/" + detail::url_encode(sandbox_id) + "/logs?start=" +
                                       std::to_string(start_ms) + "&limit=" + std::to_string(limit),
                                   nullptr, true, "logs of sandbox " + std::string(sandbox_id)));
  std::vector<LogEntry> out;
  ABX_ASSIGN_OR_RETURN(const json::object* body, json_as_object(v, "logs"));
  ABX_ASSIGN_OR_RETURN(const json::array* entries,
                       json_optional_array(*body, "logEntries", "logs"));
  if (entries == nullptr) return out;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const std::string at = json_path_index("logs.logEntries", i);
    ABX_ASSIGN_OR_RETURN(const json::object* o, json_as_object((*entries)[i], at));
    LogEntry le;
    ABX_TRY(read_string(*o, "timestamp", at, le.timestamp));
    le.timestamp_ms = parse_rfc3339_ms(le.timestamp);
    ABX_TRY(read_string(*o, "level", at, le.level));
    ABX_TRY(read_string(*o, "message", at, le.message));
    ABX_ASSIGN_OR_RETURN(const json::object* f, json_optional_object(*o, "fields", at));
    if (f != nullptr) {
      const std::string fat = json_path_key(at, "fields");
      ABX_TRY(read_string(*f, "source", fat, le.source));
      ABX_TRY(read_string(*f, "stream", fat, le.stream));
    }
    out.push_back(std::move(le));
  }
  return out;
}

Result<SandboxInfo> Sandbox::info() {
  ABX_ASSIGN_OR_RETURN(auto v, control_json(*state_->transport, bhttp::verb::get,
                                            "/sandboxes/" + detail::url_encode(id()), nullptr, true,
                                            "sandbox " + id()));
  return sandbox_info_from_json(v);
}

Result<bool> Sandbox::pause() {
  json::value body = json::object{{"memory", true}};
  auto res =
      detail::control_request(*state_->transport, bhttp::verb::post,
                              "/sandboxes/" + detail::url_encode(id()) + "/pause", &body, false);
  if (!res.ok()) return res.error();
  if (res->result_int() / 100 == 2) return true;
  if (res->result_int() == 409) return false;
  return detail::error_from_response(*res, detail::Plane::kControl, "pause sandbox " + id());
}

Result<std::vector<Result<Sandbox>>> Sandbox::fork(int count,
                                                   std::optional<std::chrono::seconds> timeout) {
  json::object body{{"count", count}};
  if (timeout) body["timeout"] = timeout->count();
  json::value bv = std::move(body);
  const std::string what = "fork sandbox " + id();
  ABX_ASSIGN_OR_RETURN(
      auto v, control_json(*state_->transport, bhttp::verb::post,
                           "/sandboxes/" + detail::url_encode(id()) + "/fork", &bv, false, what));
  if (!v.is_array()) return internal_error(what + ": expected a JSON array");
  std::vector<Result<Sandbox>> out;
  for (const auto& entry : v.as_array()) {
    const json::object* o = entry.if_object();
    if (const json::value* sb = o ? o->if_contains("sandbox") : nullptr) {
      auto info = sandbox_info_from_json(*sb);
      if (!info.ok()) {
        out.emplace_back(info.error());
        continue;
      }
      if (info->template_id.empty()) info->template_id = state_->info.template_id;
      out.emplace_back(
          Sandbox(std::make_shared<detail::SandboxState>(state_->config, std::move(*info))));
      continue;
    }
    const json::value* err = o ? o->if_contains("error") : nullptr;
    if (err == nullptr || !err->is_object()) {
      out.emplace_back(internal_error(what + ": a child entry with neither sandbox nor error"));
      continue;
    }
    unsigned status = 500;
    if (const json::value* c = err->as_object().if_contains("code"); c && c->is_number()) {
      if (auto n = c->to_number<std::int64_t>(); n >= 100 && n <= 599)
        status = static_cast<unsigned>(n);
    }
    // Only shown: a child's error without a message is still its status.
    std::string message(json_string_or_empty(err->as_object(), "message"));
    out.emplace_back(Error(http::error_code_for_status(status),
                           what + ": " + std::to_string(status) + " " + message));
  }
  return out;
}

namespace {

Result<SnapshotInfo> snapshot_info_from_json(const json::value& v) {
  ABX_ASSIGN_OR_RETURN(const json::object* op, json_as_object(v, "snapshot"));
  const json::object& o = *op;
  SnapshotInfo s;
  ABX_ASSIGN_OR_RETURN(s.id, json_required_string(o, "snapshotID", "snapshot"));
  if (s.id.empty()) return invalid_argument("snapshot: missing snapshotID");
  ABX_ASSIGN_OR_RETURN(s.names, json_optional_string_list(o, "names", "snapshot"));
  ABX_TRY(read_string(o, "sandboxID", "snapshot", s.sandbox_id));
  ABX_TRY(read_string(o, "templateID", "snapshot", s.template_id));
  ABX_TRY(read_string(o, "createdAt", "snapshot", s.created_at));
  return s;
}
}  // namespace

Result<SnapshotInfo> Sandbox::create_snapshot(std::string_view name) {
  json::object body;
  if (!name.empty()) body["name"] = name;
  json::value bv = std::move(body);
  const std::string what = "snapshot sandbox " + id();
  ABX_ASSIGN_OR_RETURN(auto v, control_json(*state_->transport, bhttp::verb::post,
                                            "/sandboxes/" + detail::url_encode(id()) + "/snapshots",
                                            &bv, false, what));
  auto s = snapshot_info_from_json(v);
  if (!s.ok()) return internal_error(what + ": " + s.error().message());
  if (s->sandbox_id.empty()) s->sandbox_id = id();
  if (s->template_id.empty()) s->template_id = state_->info.template_id;
  return s;
}

Result<std::vector<SnapshotInfo>> Sandbox::list_snapshots(const ConnectionConfig& config,
                                                          std::string_view sandbox_id,
                                                          std::string_view name) {
  detail::Transport t(config);
  std::vector<std::pair<std::string, std::string>> q;
  if (!sandbox_id.empty()) q.emplace_back("sandboxID", sandbox_id);
  if (!name.empty()) q.emplace_back("name", name);
  std::vector<SnapshotInfo> out;
  ABX_TRY(detail::control_list(t, "/snapshots", std::move(q), "list snapshots",
                               [&](const json::value& item) -> Result<bool> {
                                 auto s = snapshot_info_from_json(item);
                                 if (!s.ok())
                                   return internal_error("list snapshots: " + s.error().message());
                                 out.push_back(std::move(*s));
                                 return true;
                               }));
  return out;
}

Result<bool> Sandbox::delete_snapshot(std::string_view snapshot_id,
                                      const ConnectionConfig& config) {
  detail::Transport t(config);
  return detail::control_delete(t, "/templates/" + detail::url_encode(snapshot_id),
                                "delete snapshot " + std::string(snapshot_id));
}

namespace {
// The platform's template JSON: a "capabilities" array, else metadata.capabilities
// ("shell,files"), else nothing.
std::optional<std::set<Capability>> capabilities_from_template_json(const json::value& v) {
  if (!v.is_object()) return std::nullopt;
  const auto& o = v.as_object();
  std::set<Capability> caps;
  if (auto* a = o.if_contains("capabilities"); a && a->is_array()) {
    for (const auto& c : a->as_array()) {
      if (c.is_string()) {
        if (auto cap = parse_capability(c.as_string())) caps.insert(*cap);
      }
    }
    return caps;
  }
  if (auto* md = o.if_contains("metadata"); md && md->is_object()) {
    if (auto* s = md->as_object().if_contains("capabilities"); s && s->is_string()) {
      std::string_view rest = s->as_string();
      while (!rest.empty()) {
        auto comma = rest.find(',');
        auto item = rest.substr(0, comma);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        if (auto cap = parse_capability(item)) caps.insert(*cap);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
      return caps;
    }
  }
  return std::nullopt;
}

// The platform's template JSON: "interpreter": {command, port} or null.
bool interpreter_from_template_json(const json::value& v) {
  if (!v.is_object()) return false;
  auto* i = v.as_object().if_contains("interpreter");
  return i != nullptr && i->is_object();
}
}  // namespace

namespace detail {
Result<std::set<Capability>> resolve_capabilities(SandboxState& st) {
  {
    std::lock_guard lk(st.mu);
    if (st.capabilities) return *st.capabilities;
  }
  std::set<Capability> caps = default_capabilities();
  const std::string& tid = st.info.template_id;
  auto catalog = detail::load_local_catalog(st.config);
  std::optional<bool> interpreter;
  if (const auto* t = detail::find_local_template(catalog, tid)) {
    caps.clear();
    caps.insert(t->capabilities.begin(), t->capabilities.end());
    interpreter = t->interpreter.has_value();
  } else if (!tid.empty()) {
    auto v = get_template(tid, st.config);
    if (v.ok()) {
      if (auto c = capabilities_from_template_json(*v)) caps = *c;
      interpreter = interpreter_from_template_json(*v);
    } else if (v.error().code() == ErrorCode::kUnauthenticated) {
      return v.error();
    }
    // Unreachable platform or unknown template: the defaults, as the design records say.
  }
  std::lock_guard lk(st.mu);
  st.capabilities = caps;
  if (interpreter && !st.interpreter) st.interpreter = interpreter;
  return caps;
}

Result<bool> resolve_interpreter(SandboxState& st) {
  {
    std::lock_guard lk(st.mu);
    if (st.interpreter) return *st.interpreter;
  }
  bool interpreter = false;
  const std::string& tid = st.info.template_id;
  auto catalog = detail::load_local_catalog(st.config);
  if (const auto* t = detail::find_local_template(catalog, tid)) {
    interpreter = t->interpreter.has_value();
  } else if (!tid.empty()) {
    auto v = get_template(tid, st.config);
    if (v.ok()) {
      interpreter = interpreter_from_template_json(*v);
    } else if (v.error().code() == ErrorCode::kUnauthenticated) {
      return v.error();
    }
    // Unreachable platform or unknown template: no interpreter known.
  }
  std::lock_guard lk(st.mu);
  st.interpreter = interpreter;
  return interpreter;
}
}  // namespace detail

Result<std::set<Capability>> Sandbox::capabilities() {
  return detail::resolve_capabilities(*state_);
}

Status Sandbox::check_capability(Capability c) { return state_->check(c); }

Commands Sandbox::commands() { return Commands(state_); }
Files Sandbox::files() { return Files(state_); }
CommandServer Sandbox::server() { return CommandServer(state_); }
CodeInterpreter Sandbox::code() { return CodeInterpreter(state_); }

Result<bool> Sandbox::has_code_interpreter() { return detail::resolve_interpreter(*state_); }

Result<std::string> Sandbox::get_host(std::uint16_t port) {
  ABX_TRY(check_capability(Capability::kPorts));
  const std::string& domain =
      state_->info.domain.empty() ? state_->config.domain : state_->info.domain;
  return std::to_string(port) + "-" + id() + "." + domain;
}

namespace {
// The one-shot shape of an execution in the interpreter's default context (sandbox.h).
CommandResult command_result_of(const Execution& ex) {
  CommandResult r;
  r.stdout_data = ex.stdout_text();
  if (std::string main = ex.text(); !main.empty()) r.stdout_data += main + "\n";
  r.stderr_data = ex.stderr_text();
  if (ex.error) {
    r.exit_code = 1;
    r.error = ex.error->name + ": " + ex.error->value;
    if (!r.stderr_data.empty() && r.stderr_data.back() != '\n') r.stderr_data += "\n";
    r.stderr_data += (ex.error->traceback.empty() ? r.error : ex.error->traceback) + "\n";
  }
  return r;
}
}  // namespace

Result<CommandResult> Sandbox::run_code_in_interpreter(std::string_view src,
                                                       const CommandOptions& opts) {
  RunCodeOptions ro;
  ro.envs = opts.envs;
  ro.timeout = opts.timeout;
  ro.on_stdout = opts.on_stdout;
  ro.on_stderr = opts.on_stderr;
  ABX_ASSIGN_OR_RETURN(auto ex, code().run(src, ro));
  return command_result_of(ex);
}

Result<CommandResult> Sandbox::run_code(std::string_view code, Language language,
                                        const CommandOptions& opts) {
  ABX_TRY(check_capability(Capability::kCode));
  if (language == Language::kPython && opts.cwd.empty() && opts.user.empty() && !opts.stdin &&
      !opts.pty) {
    auto has = has_code_interpreter();
    if (has.ok() && *has) return run_code_in_interpreter(code, opts);
  }
  std::vector<std::string> argv;
  switch (language) {
    case Language::kPython:
      argv = {"python3", "-c", std::string(code)};
      break;
    case Language::kJavaScript:
      argv = {"node", "-e", std::string(code)};
      break;
    case Language::kBash:
      argv = {"bash", "-c", std::string(code)};
      break;
  }
  return commands().run_argv(argv, opts);
}

Result<std::string> Sandbox::scoped_token(const std::vector<std::string>& commands,
                                          std::chrono::seconds ttl) {
  if (ttl.count() <= 0) return invalid_argument("scoped token: ttl must be positive");
  const std::string& full = state_->access_token;
  if (!full.empty() && !token::looks_scoped(full)) {
    return token::mint_scoped(
        full, {commands, static_cast<std::int64_t>(std::time(nullptr)) + ttl.count()});
  }
  json::array cmds;
  for (const auto& c : commands) cmds.emplace_back(c);
  json::value body = json::object{{"commands", std::move(cmds)}, {"ttlSeconds", ttl.count()}};
  ABX_ASSIGN_OR_RETURN(
      auto v, control_json(*state_->transport, bhttp::verb::post,
                           "/sandboxes/" + detail::url_encode(id()) + "/tokens", &body, false,
                           "mint a scoped token for sandbox " + id()));
  if (!v.is_object()) return internal_error("mint token: expected an object");
  auto tok = json_optional_string(v.as_object(), "token", "mint token");
  if (!tok.ok()) return internal_error(tok.error().message());
  if (!tok->has_value() || (*tok)->empty())
    return internal_error("mint token: the platform sent no token");
  return **tok;
}

Sandbox Sandbox::with_access_token(std::string tok) const {
  auto s = std::make_shared<detail::SandboxState>(*state_, std::move(tok));
  std::lock_guard lk(state_->mu);
  s->capabilities = state_->capabilities;
  s->interpreter = state_->interpreter;
  return Sandbox(std::move(s));
}

Result<json::array> list_templates(const ConnectionConfig& config) {
  detail::Transport t(config);
  ABX_ASSIGN_OR_RETURN(
      auto v, control_json(t, bhttp::verb::get, "/templates", nullptr, true, "list templates"));
  if (!v.is_array()) return internal_error("list templates: expected a JSON array");
  return v.as_array();
}

Result<json::object> get_template(std::string_view template_id, const ConnectionConfig& config) {
  detail::Transport t(config);
  ABX_ASSIGN_OR_RETURN(
      auto v, control_json(t, bhttp::verb::get, "/templates/" + detail::url_encode(template_id),
                           nullptr, true, "template " + std::string(template_id)));
  if (!v.is_object()) return internal_error("template: expected a JSON object");
  return v.as_object();
}

}  // namespace abx::client
