// The control API's routing pieces, private to abxd: the request context a handler sees, the
// path matcher, the JSON field decoders shared by the resources, and one handler per route.
//
// Every handler returns Result<http::Response>; an Error becomes the E2B error body through
// e2b_error() in ControlApi, the one mapping from canonical code to status. Handlers and
// decoders therefore never spell a status for a failure: invalid_argument is 400, not_found 404,
// kFailedPrecondition 409 and so on (abx/base/error.h).
//
// One file per resource: api_sandboxes.cc (lifecycle and listing), api_templates.cc,
// api_tokens.cc (scoped command tokens), api_metrics.cc (with teams), api_logs.cc,
// api_secrets.cc, api_volumes.cc; the table itself is in api.cc.
#pragma once

#include <boost/beast/http/verb.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <boost/url/url_view.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/egress/transform.h"
#include "abx/http/server.h"
#include "abx/image/store.h"
#include "abx/store/store.h"
#include "sandboxes.h"
#include "secrets.h"
#include "template_build.h"
#include "template_jobs.h"

namespace abx::platform::api {

// One authenticated control-plane request, as a handler sees it.
struct Context {
  const http::Request& req;
  boost::urls::url_view url;
  std::vector<std::string> params;  // the pattern's {captures}, in order
  SandboxManager& sandboxes;
  store::Store& store;
  // The team of the request's credential: handlers see and touch this team's objects only.
  std::string team;
  // Template builds and the image store; null when abxd runs without them (then the build,
  // delete, push and image routes answer kUnimplemented).
  TemplateBuilder* builder = nullptr;
  image::Store* images = nullptr;
  // Secrets (secrets.h); null when abxd runs without them (then /secrets answers kUnimplemented
  // and rules naming a secret are refused).
  SecretVault* secrets = nullptr;
  std::size_t max_secrets = kDefaultMaxSecretsPerTeam;  // per team
  // The e2b SDK's Template builds (template_jobs.h); null when builds are off.
  TemplateJobs* jobs = nullptr;
};

using Handler = Result<http::Response> (*)(Context&);

struct RouteEntry {
  boost::beast::http::verb method;
  std::string_view pattern;  // "/sandboxes/{id}/timeout": literal segments and {captures}
  Handler handler;
};

// The decoded path split at '/', without the leading empty segment and a trailing empty one
// ("/sandboxes/" and "/sandboxes" are the same route, as they always were).
std::vector<std::string> split_path(std::string_view path);
// True if `parts` matches `pattern` segment for segment; {captures} are appended to `params`.
bool match_pattern(std::string_view pattern, std::span<const std::string> parts,
                   std::vector<std::string>& params);

// --- JSON decoders shared by the resources (every error is invalid_argument) ---

// The request body as an object; an empty or all-whitespace body is {}.
Result<boost::json::object> body_object(const http::Request& req);
// (Fields are read with abx/base/json.h's readers; these are the API's own rules on top.)
// o["timeout"] in [0, max] if present (null is an error).
Result<std::optional<std::int64_t>> optional_timeout(const boost::json::object& o,
                                                     std::int64_t max_seconds);
// o[key] as an object of strings (metadata, envVars), bounded in entries and bytes; null or
// absent is {}.
Result<std::map<std::string, std::string>> string_map(const boost::json::object& o,
                                                      std::string_view key);

// ?key=N as a non-negative integer capped at `max`; `dflt` when absent or empty.
Result<std::int64_t> query_number(const Context& ctx, const char* key, std::int64_t dflt,
                                  std::int64_t max);
// E2B's LogLevel order: debug 0, info 1, warn 2, error 3 (anything else ranks as info).
int level_rank(std::string_view level);

// A page of E2B's cursor-paged logs (v2 sandbox logs, template build logs):
// ?direction=forward|backward (forward: entries at or after `cursor`, default 0, oldest first;
// backward: at or before it, default now, newest first), ?level= (that level and above),
// ?search= (a substring of the message), ?limit= (`default_limit`, at most `max_limit`).
struct LogPage {
  bool backward = false;
  std::int64_t cursor = 0, limit = 0;
  int min_rank = 0;
  std::string search;
  // Whether an entry at `ms`, of `level`, with `message`, is on the page (before the limit).
  bool wants(std::int64_t ms, std::string_view level, std::string_view message) const;
};
Result<LogPage> log_page(const Context& ctx, std::int64_t default_limit, std::int64_t max_limit);

// --- Sandbox lookups shared by the {id} routes ---

// The id in params[0]: the real API accepts <id> or <id>-<clientID>.
Result<std::string> sandbox_id(const Context& ctx);
// The live sandbox for params[0]; not_found if there is none or it is another team's (the same
// error either way: another team's id is indistinguishable from an unknown one).
Result<std::shared_ptr<LiveSandbox>> live_sandbox(const Context& ctx);
// Whether the request's team may see template `id`: one it built, or one no team owns (the
// built-in and catalog templates; a build from before teams is the default team's).
bool template_visible(const Context& ctx, const std::string& id);
// not_found("template '<id>' not found") unless template_visible.
Status check_template_visible(const Context& ctx, const std::string& id);

// What every POST /sandboxes/{id}/<op> checks first, in this order: the id (400), the sandbox
// (404), the body as a JSON object (400) — whether or not the op reads a body.
struct SandboxPost {
  std::string id;
  std::shared_ptr<LiveSandbox> sb;
  boost::json::object body;
};
Result<SandboxPost> sandbox_post(const Context& ctx);

// --- Handlers (api_sandboxes.cc) ---
Result<http::Response> create_sandbox(Context& ctx);
Result<http::Response> list_sandboxes_v1(Context& ctx);
Result<http::Response> list_sandboxes_v2(Context& ctx);
Result<http::Response> get_sandbox(Context& ctx);
Result<http::Response> update_sandbox_network(Context& ctx);
Result<http::Response> sandbox_network_audit(Context& ctx);
Result<http::Response> kill_sandbox(Context& ctx);
Result<http::Response> set_sandbox_timeout(Context& ctx);
Result<http::Response> refresh_sandbox(Context& ctx);
Result<http::Response> connect_sandbox(Context& ctx);
Result<http::Response> resume_sandbox(Context& ctx);
Result<http::Response> pause_sandbox(Context& ctx);
Result<http::Response> fork_sandbox(Context& ctx);
Result<http::Response> create_snapshot(Context& ctx);
Result<http::Response> list_snapshots(Context& ctx);
// Path shapes under /sandboxes/{id} that no route takes: the checks every {id} route makes
// first, so that a bad id is a 400 and an unknown sandbox a 404 whatever follows it.
Status check_unrouted_sandbox_path(Context& ctx, std::span<const std::string> parts);

// --- Handlers (api_templates.cc, api_tokens.cc, api_metrics.cc) ---
Result<http::Response> list_templates(Context& ctx);
Result<http::Response> get_template(Context& ctx);
Result<http::Response> get_template_alias(Context& ctx);  // GET /templates/aliases/{alias}
Result<http::Response> delete_template(Context& ctx);
Result<http::Response> push_template(Context& ctx);
Result<http::Response> template_image(Context& ctx);
// POST /templates/build: the body (the context tar) is in `body` (spooled); the answer is an
// NDJSON stream of progress events ending in {"type":"done"} or {"type":"error"}. Errors
// before the stream starts (name, query, a build already running) are returned.
// `drop_context` runs once the build no longer needs `context_tar`, before the final event goes
// out: a client that has read the answer finds no upload left behind.
Status build_template(Context& ctx, const std::string& context_tar,
                      const std::function<void()>& drop_context, const http::Responder& respond);
// api_template_builds.cc: the e2b SDK's Template builder (template_jobs.h).
Result<http::Response> request_template_build(Context& ctx);  // POST /v3/templates
Result<http::Response> template_file_link(Context& ctx);      // GET /templates/{id}/files/{hash}
Result<http::Response> start_template_build(Context& ctx);    // POST /v2/templates/{id}/builds/{b}
Result<http::Response> template_build_status(Context& ctx);   // GET …/builds/{b}/status
Result<http::Response> template_build_logs(Context& ctx);     // GET …/builds/{b}/logs
Result<http::Response> assign_template_tags(Context& ctx);    // POST /templates/tags
Result<http::Response> remove_template_tags(Context& ctx);    // DELETE /templates/tags
Result<http::Response> list_template_tags(Context& ctx);      // GET /templates/{id}/tags
// PUT /templates/{id}/files/{hash}?token=…: the upload URL file_link handed out. `path` is the
// spooled body. The token is the credential (the SDK sends no API key there).
Result<http::Response> accept_template_files(TemplateJobs& jobs, const http::Request& req,
                                             const std::string& path);
Result<http::Response> mint_token(Context& ctx);
Result<http::Response> sandbox_metrics(Context& ctx);
Result<http::Response> sandboxes_metrics(Context& ctx);  // GET /sandboxes/metrics
Result<http::Response> abxd_metrics(Context& ctx);       // GET /metrics (Prometheus text)
Result<http::Response> list_teams(Context& ctx);         // GET /teams
Result<http::Response> team_metrics(Context& ctx);       // GET /teams/{teamID}/metrics
Result<http::Response> team_metrics_max(Context& ctx);   // GET /teams/{teamID}/metrics/max
Result<http::Response> sandbox_logs(Context& ctx);       // api_logs.cc
// api_events.cc: GET /events/sandboxes[/{id}] (E2B's, JSON unless a stream is asked for) and
// GET /events, /sandboxes/{id}/events (abx's, a stream unless JSON is asked for).
Result<http::Response> list_events_e2b(Context& ctx);
Result<http::Response> list_events_abx(Context& ctx);
// Whether `parts` is one of the four event routes; `sse_default` says which kind.
bool is_events_route(std::span<const std::string> parts, bool& sse_default);
// Whether the request asks for the stream (Accept, ?stream=), decided before authentication.
bool events_stream_requested(const http::Request& req, boost::urls::url_view url, bool sse_default);
// Answers with an SSE stream of the team's events (ctx.params: the sandbox id, if any).
Status stream_events(Context& ctx, bool sse_default, const http::Responder& respond);
Result<http::Response> sandbox_logs_v2(Context& ctx);  // GET /v2/sandboxes/{id}/logs
// api_events.cc: E2B's webhook resource, /events/webhooks[/{id}] (webhooks.h).
Result<http::Response> create_webhook(Context& ctx);  // POST /events/webhooks
Result<http::Response> list_webhooks(Context& ctx);   // GET /events/webhooks
Result<http::Response> get_webhook(Context& ctx);     // GET /events/webhooks/{id}
Result<http::Response> update_webhook(Context& ctx);  // PATCH /events/webhooks/{id}
Result<http::Response> delete_webhook(Context& ctx);  // DELETE /events/webhooks/{id}

// api_secrets.cc: E2B's secrets, /secrets[/{secretID}] (secrets.h).
Result<http::Response> create_secret(Context& ctx);  // POST /secrets
Result<http::Response> list_secrets(Context& ctx);   // GET /secrets
Result<http::Response> get_secret(Context& ctx);     // GET /secrets/{secretID}
Result<http::Response> update_secret(Context& ctx);  // POST /secrets/{secretID}
Result<http::Response> delete_secret(Context& ctx);  // DELETE /secrets/{secretID}
// Every ${e2b.secrets.<name>} of `rules` names one of the team's secrets; else invalid_argument
// naming the header's field (under `field`: "network.rules" at create, "rules" in a PUT).
Status check_secret_references(const Context& ctx, const egress::TransformRules& rules,
                               std::string_view field);

// api_volumes.cc: E2B's volumes, /volumes[/{volumeID}] (volumes.h).
Result<http::Response> create_volume(Context& ctx);  // POST /volumes
Result<http::Response> list_volumes(Context& ctx);   // GET /volumes
Result<http::Response> get_volume(Context& ctx);     // GET /volumes/{volumeID}
Result<http::Response> delete_volume(Context& ctx);  // DELETE /volumes/{volumeID}
// Sets each mount's volume_id from its name (one of the team's volumes); else invalid_argument
// naming the mount.
Status resolve_volume_mounts(const Context& ctx, std::vector<store::VolumeMount>& mounts);

// api_volume_content.cc: E2B's volume content API, /volumecontent/{volumeID}/{dir|path|file}
// (the SDK's Volume file methods), on <home>/volumes/<id>; its credential is the volume's token.
bool is_volume_content(const http::Request& req);
// The token check alone, for a request's header (before its body is read).
Status check_volume_content_credential(store::Store& store, const http::Request& header);
// Answers the request; `body_path` is a PUT's spooled body ("": the body is in `req`).
Result<http::Response> volume_content(store::Store& store, const std::string& home,
                                      const http::Request& req, const std::string& body_path);

// The typed requests and their decoders (api_sandboxes.cc, api_tokens.cc).
// parse_create is where a create's fields are checked (its timeout within 1..max_timeout: the
// manager only asserts it); `default_internet` is SandboxManager::default_internet().
Result<CreateRequest> parse_create(const boost::json::object& body, std::int64_t max_timeout,
                                   bool default_internet = true);
Result<store::SandboxFilter> parse_list_query(boost::urls::params_view params, bool v1);

struct TokenRequest {
  std::vector<std::string> commands;
  std::int64_t ttl_seconds = 3600;
};
Result<TokenRequest> parse_token_request(const boost::json::object& body);

// One more level of URL decoding of a query key or value ('+' is a space, as Go's
// url.QueryUnescape has it); nullopt for a malformed %-escape.
std::optional<std::string> query_unescape(std::string_view s);

}  // namespace abx::platform::api
