#include "api.h"

#include <openssl/sha.h>
#include <unistd.h>

#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/pct_string_view.hpp>
#include <boost/url/url_view.hpp>
#include <cctype>
#include <filesystem>
#include <iterator>
#include <optional>

#include "abx/auth/signing.h"
#include "abx/base/base64.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/token/token.h"
#include "api_routes.h"
#include "console.h"
#include "mcp_tools_abxd.h"
#include "volumes.h"

namespace abx::platform {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Response;

namespace {

using bhttp::verb;

// Every authenticated route but /mcp, first match wins. JS SDK >= 2.46 creates with
// POST /v2/sandboxes and connects with POST /v2/sandboxes/{id}/connect; both take and answer
// the v1 shapes. A path that matches no row is a 404 (never a 405: E2B answers 404 there).
constexpr api::RouteEntry kRoutes[] = {
    {verb::get, "/templates", api::list_templates},
    {verb::post, "/templates/tags", api::assign_template_tags},
    {verb::delete_, "/templates/tags", api::remove_template_tags},
    {verb::post, "/v3/templates", api::request_template_build},
    {verb::get, "/templates/{id}/files/{hash}", api::template_file_link},
    {verb::post, "/v2/templates/{id}/builds/{build}", api::start_template_build},
    {verb::get, "/templates/{id}/builds/{build}/status", api::template_build_status},
    {verb::get, "/templates/{id}/builds/{build}/logs", api::template_build_logs},
    {verb::get, "/templates/{id}/tags", api::list_template_tags},
    {verb::get, "/templates/aliases/{alias}", api::get_template_alias},
    {verb::get, "/templates/{id}", api::get_template},
    {verb::delete_, "/templates/{id}", api::delete_template},
    {verb::post, "/templates/{id}/push", api::push_template},
    {verb::get, "/templates/{id}/image", api::template_image},
    {verb::get, "/v2/sandboxes", api::list_sandboxes_v2},
    {verb::get, "/sandboxes", api::list_sandboxes_v1},
    {verb::post, "/sandboxes", api::create_sandbox},
    {verb::post, "/v2/sandboxes", api::create_sandbox},
    {verb::get, "/sandboxes/metrics", api::sandboxes_metrics},
    {verb::get, "/metrics", api::abxd_metrics},
    {verb::get, "/sandboxes/{id}", api::get_sandbox},
    {verb::delete_, "/sandboxes/{id}", api::kill_sandbox},
    {verb::post, "/sandboxes/{id}/timeout", api::set_sandbox_timeout},
    {verb::post, "/sandboxes/{id}/connect", api::connect_sandbox},
    {verb::post, "/v2/sandboxes/{id}/connect", api::connect_sandbox},
    {verb::post, "/sandboxes/{id}/resume", api::resume_sandbox},
    {verb::post, "/sandboxes/{id}/pause", api::pause_sandbox},
    {verb::post, "/sandboxes/{id}/fork", api::fork_sandbox},
    {verb::post, "/sandboxes/{id}/snapshots", api::create_snapshot},
    {verb::get, "/snapshots", api::list_snapshots},
    {verb::post, "/sandboxes/{id}/tokens", api::mint_token},
    {verb::get, "/sandboxes/{id}/metrics", api::sandbox_metrics},
    {verb::get, "/sandboxes/{id}/logs", api::sandbox_logs},
    {verb::get, "/events/webhooks", api::list_webhooks},
    {verb::post, "/events/webhooks", api::create_webhook},
    {verb::get, "/events/webhooks/{id}", api::get_webhook},
    {verb::patch, "/events/webhooks/{id}", api::update_webhook},
    {verb::delete_, "/events/webhooks/{id}", api::delete_webhook},
    {verb::get, "/events", api::list_events_abx},
    {verb::get, "/events/sandboxes", api::list_events_e2b},
    {verb::get, "/events/sandboxes/{id}", api::list_events_e2b},
    {verb::get, "/sandboxes/{id}/events", api::list_events_abx},
    {verb::get, "/v2/sandboxes/{id}/logs", api::sandbox_logs_v2},
    {verb::post, "/sandboxes/{id}/refreshes", api::refresh_sandbox},
    {verb::get, "/teams", api::list_teams},
    {verb::get, "/teams/{id}/metrics", api::team_metrics},
    {verb::get, "/teams/{id}/metrics/max", api::team_metrics_max},
    {verb::put, "/sandboxes/{id}/network", api::update_sandbox_network},
    {verb::get, "/sandboxes/{id}/network/audit", api::sandbox_network_audit},
    {verb::get, "/secrets", api::list_secrets},
    {verb::post, "/secrets", api::create_secret},
    {verb::get, "/secrets/{id}", api::get_secret},
    {verb::post, "/secrets/{id}", api::update_secret},
    {verb::delete_, "/secrets/{id}", api::delete_secret},
    {verb::get, "/volumes", api::list_volumes},
    {verb::post, "/volumes", api::create_volume},
    {verb::get, "/volumes/{id}", api::get_volume},
    {verb::delete_, "/volumes/{id}", api::delete_volume},
};

// A signed file URL (the SDK's downloadUrl / uploadUrl): GET or POST /files with a `signature`
// query parameter, which carries no X-Access-Token. envd checks the signature itself, in
// constant time and with its expiration (src/envd/envd.cc check_files_auth), so the proxy lets
// it through without a token. Only the literal parameter name counts: anything else is
// refused here, the safe side. Decoded as envd decodes its query ('+' is a space, the first of
// a repeated name wins); nullopt for any other request or a malformed query.
struct SignedFiles {
  const char* operation = "read";  // E2B's signing operation: read (GET) or write (POST)
  std::string path, username, signature, expiration;
};

std::optional<SignedFiles> signed_files_request(const bhttp::request_header<>& h) {
  if (h.method() != bhttp::verb::get && h.method() != bhttp::verb::post) return std::nullopt;
  std::string_view target = h.target();
  auto qm = target.find('?');
  if (qm == std::string_view::npos || target.substr(0, qm) != "/files") return std::nullopt;
  SignedFiles out;
  out.operation = h.method() == bhttp::verb::get ? "read" : "write";
  bool seen_sig = false, seen_path = false, seen_user = false, seen_exp = false;
  std::string_view q = target.substr(qm + 1);
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    auto eq = kv.find('=');
    auto key = api::query_unescape(kv.substr(0, eq));
    auto value = api::query_unescape(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
    if (!key || !value) return std::nullopt;
    auto take = [&](bool& seen, std::string& into) {
      if (!seen) into = std::move(*value);
      seen = true;
    };
    if (*key == "signature") take(seen_sig, out.signature);
    if (*key == "path") take(seen_path, out.path);
    if (*key == "username") take(seen_user, out.username);
    if (*key == "signature_expiration") take(seen_exp, out.expiration);
  }
  if (out.signature.empty()) return std::nullopt;
  return out;
}

// E2B's envd signature: "v1_" + unpadded base64 of sha256("<path>:<op>:<user>:<token>[:<exp>]")
// (envd/internal/api/auth.go generateSignature; the SDK's src/sandbox/signature.ts).
std::string files_signature(const SignedFiles& f, std::string_view access_token) {
  std::string material = f.path + ":" + f.operation + ":" + f.username + ":";
  material += access_token;
  if (!f.expiration.empty()) material += ":" + f.expiration;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  ::SHA256(reinterpret_cast<const unsigned char*>(material.data()), material.size(), digest);
  std::string sig =
      "v1_" + base64_encode(std::string_view(reinterpret_cast<char*>(digest), sizeof digest));
  while (sig.back() == '=') sig.pop_back();
  return sig;
}

}  // namespace

namespace api {

std::optional<std::string> query_unescape(std::string_view s) {
  auto pct = boost::urls::make_pct_string_view(s);
  if (!pct) return std::nullopt;
  boost::urls::encoding_opts opt;
  opt.space_as_plus = true;
  return pct->decode(opt);
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

bool match_pattern(std::string_view pattern, std::span<const std::string> parts,
                   std::vector<std::string>& params) {
  const auto want = split_path(pattern);
  if (want.size() != parts.size()) return false;
  const std::size_t before = params.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (want[i].starts_with('{')) {
      params.push_back(parts[i]);
    } else if (want[i] != parts[i]) {
      params.resize(before);
      return false;
    }
  }
  return true;
}

}  // namespace api

// A volume content request's token (api_volume_content.cc), under the same lockout of a source
// that failed too often as API keys: a wrong token counts as a failed attempt.
Status ControlApi::volume_credential(const Request& req) {
  const std::string source(req[kPeerAddressField]);
  if (auth_limiter_.locked_out(source, now_ms()))
    return Error(ErrorCode::kResourceExhausted, "too many failed authentication attempts");
  Status s = api::check_volume_content_credential(store_, req);
  if (!s.ok() && s.error().code() == ErrorCode::kUnauthenticated)
    auth_limiter_.failed(source, now_ms());
  return s;
}

Result<std::string> ControlApi::authenticate(const Request& req) {
  // A source that failed too often lately is refused before its credentials are looked at: a
  // key it guessed right does not work from there either (other sources are unaffected).
  const std::string source(req[kPeerAddressField]);
  if (auth_limiter_.locked_out(source, now_ms()))
    return Error(ErrorCode::kResourceExhausted, "too many failed authentication attempts");
  // The same API key in X-API-KEY and Authorization: Bearer is one credential (MCP clients send
  // both when a user configures both); different keys, or a key beside a signature, are refused.
  std::string_view key;
  std::size_t keys = 0;
  bool keys_differ = false;
  bool signed_request = false;
  auto take = [&](std::string_view k) {
    if (keys++ > 0 && !token::constant_time_equal(k, key)) keys_differ = true;
    key = k;
  };
  for (const auto& f : req) {
    if (boost::beast::iequals(f.name_string(), "x-api-key")) {
      take(f.value());
    } else if (f.name() == bhttp::field::authorization) {
      std::string_view v = f.value();
      if (v.size() > 7 && boost::beast::iequals(v.substr(0, 7), "bearer ")) {
        take(v.substr(7));
      } else if (v.substr(0, auth::kAlgorithm.size()) == auth::kAlgorithm) {
        signed_request = true;
      }
    }
  }
  if (keys_differ) {
    return invalid_argument("X-API-KEY and Authorization: Bearer carry different API keys");
  }
  if (signed_request && keys > 0) {
    return invalid_argument("send one credential (X-API-KEY, Bearer or a signature)");
  }
  const std::size_t count = signed_request ? 1 : keys;
  // The team of the credential: every object the request sees or touches is that team's.
  Result<std::string> result = std::string();
  if (signed_request) {
    result = verify_signature(req);
  } else if (count == 0) {
    result = Error(ErrorCode::kUnauthenticated,
                   "missing API key: send X-API-KEY (or Authorization: Bearer)");
  } else {
    auto v = store_.verify_api_key(key);
    if (v.ok()) {
      result = std::move(v->team_id);
    } else {
      result = Error(ErrorCode::kUnauthenticated, "invalid API key");
    }
  }
  if (!result.ok() && result.error().code() == ErrorCode::kUnauthenticated)
    auth_limiter_.failed(source, now_ms());
  return result;
}

Result<std::string> ControlApi::verify_signature(const Request& req) {
  auth::HttpRequest hr;
  hr.method = std::string(req.method_string());
  hr.target = std::string(req.target());
  for (const auto& f : req)
    if (!boost::beast::iequals(f.name_string(), kPeerAddressField))  // the gateway's, not signed
      hr.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  auth::VerifyOptions vo;
  vo.now_unix = now_ms() / 1000;
  std::string signer;  // the access key whose secret the signature was checked with
  vo.lookup_secret = [this, &signer](std::string_view ak) {
    signer = std::string(ak);
    return store_.access_key_secret(ak);
  };
  vo.remember_nonce = [this](std::string_view k, std::int64_t exp) {
    return store_.remember_nonce(k, exp * 1000, now_ms());
  };
  ABX_TRY(auth::verify(hr, req.body(), vo));
  ABX_ASSIGN_OR_RETURN(auto team, store_.access_key_team(signer));
  // Revoked between the two reads: refused as any unknown key is.
  if (!team) return Error(ErrorCode::kUnauthenticated, "invalid access key");
  return std::move(*team);
}

Response ControlApi::handle_control(Request&& req) {
  auto routed = route(req);
  // The one place a failed request becomes a status and the E2B error body.
  Response res = routed.ok() ? std::move(*routed) : e2b_error(routed.error());
  if (res.find(bhttp::field::content_type) == res.end() && !res.body().empty()) {
    res.set(bhttp::field::content_type, "application/json");
  }
  return res;
}

Result<Response> ControlApi::route(Request& req) {
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url) return invalid_argument("malformed request target");
  const std::string path = url->path();
  // /health and /mcp match the exact path with any method, as they always have; /health needs
  // no credentials.
  if (path == "/health") return http::json_response(200, json::object{{"status", "ok"}});
  // The web console's files (console.h) need no credentials: they hold no data, and the page
  // sends the API key on each call it makes. abxd --no-console: 404.
  if (console::is_console_path(path)) {
    if (!console_) return not_found("the console is turned off (abxd --no-console)");
    return console::serve(req, path);
  }
  // A signed file URL that no live sandbox's token signed (signed_files_route found none): what
  // envd answers a wrong signature, not the API's "missing API key".
  if (signed_files_request(req.base())) {
    auth_limiter_.failed(std::string(req[kPeerAddressField]), now_ms());
    return Error(ErrorCode::kUnauthenticated, "invalid signature");
  }
  // E2B's volume content API (the SDK's Volume file methods): its credential is the volume's
  // token, not an API key (api_volume_content.cc; serve_control answers it first).
  if (path.starts_with("/volumecontent/")) {
    ABX_TRY(volume_credential(req));
    return api::volume_content(store_, sandboxes_.options().home, req, "");
  }
  // A call another node of the cluster relayed carries the cluster secret and the team that
  // node authenticated (cluster_router.h); any other request authenticates here.
  std::optional<Result<std::string>> internal =
      cluster_ ? cluster_->internal_team(req) : std::nullopt;
  ABX_ASSIGN_OR_RETURN(std::string team, internal ? std::move(*internal) : authenticate(req));
  // MCP: mcp_tools.h
  if (path == "/mcp") return serve_platform_mcp(sandboxes_, store_, team, req);

  const auto parts = api::split_path(path);
  auto local = [&]() -> Result<Response> {
    api::Context ctx{req,      *url,    {},       sandboxes_,   store_, team,
                     builder_, images_, secrets_, max_secrets_, jobs_};
    for (const auto& r : kRoutes) {
      if (r.method != req.method()) continue;
      ctx.params.clear();
      if (api::match_pattern(r.pattern, parts, ctx.params)) return r.handler(ctx);
    }
    ABX_TRY(api::check_unrouted_sandbox_path(ctx, parts));
    return not_found("no route for " + std::string(req.method_string()) + " " + path);
  };
  if (cluster_) return cluster_->handle(req, path, parts, team, internal.has_value(), local);
  return local();
}

void ControlApi::enable_builds(TemplateBuilder& builder, image::Store& images,
                               std::string upload_dir, TemplateJobs* jobs,
                               std::uint64_t max_upload_bytes) {
  builder_ = &builder;
  jobs_ = jobs;
  images_ = &images;
  upload_dir_ = std::move(upload_dir);
  max_upload_bytes_ = max_upload_bytes;
  std::error_code ec;
  std::filesystem::create_directories(upload_dir_, ec);
}

namespace {
bool is_build_request(const Request& req) {
  if (req.method() != verb::post) return false;
  auto url = boost::urls::parse_origin_form(req.target());
  return url && url->path() == "/templates/build";
}

// PUT /templates/{id}/files/{hash}?token=…: an upload URL of the e2b SDK's Template builder
// (template_jobs.h). Its token is its credential; the path's id and hash come back in `parts`.
bool is_files_upload(const Request& req, std::string* token = nullptr,
                     std::vector<std::string>* parts = nullptr) {
  if (req.method() != verb::put) return false;
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url) return false;
  auto p = api::split_path(url->path());
  if (p.size() != 4 || p[0] != "templates" || p[2] != "files") return false;
  if (token) {
    for (auto q : url->params())
      if (q.key == "token") *token = q.value;
  }
  if (parts) *parts = std::move(p);
  return true;
}
}  // namespace

// A build context may be large: spooled to disk under its own limit. A build request without a
// credential is refused before its body is read; the credential itself is checked in full
// (authenticate) before the body is used.
Result<http::BodyPlan> ControlApi::control_body_plan(const Request& header,
                                                     std::size_t default_max) {
  std::string token;
  std::vector<std::string> parts;
  if (cluster_ && header.method() == verb::post && header.target() == kMoveInPath) {
    // Another node moves a sandbox here (its checkpoint): the secret before a byte of the body.
    auto team = cluster_->internal_team(header);
    if (!team) return Error(ErrorCode::kUnauthenticated, "a move needs the cluster credential");
    if (!team->ok()) return team->error();
    const std::string dir = sandboxes_.options().home + "/uploads";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    return http::BodyPlan{static_cast<std::size_t>(kMaxMoveBytes), dir};
  }
  if (api::is_volume_content(header)) {
    // The volume's token, before a byte of the body: a write is spooled to disk up to its limit.
    ABX_TRY(volume_credential(header));
    if (header.method() != verb::put) return http::BodyPlan{default_max, {}};
    const std::string dir = sandboxes_.options().home + "/uploads";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    return http::BodyPlan{static_cast<std::size_t>(kMaxVolumeWriteBytes), dir};
  }
  if (jobs_ && is_files_upload(header, &token, &parts)) {
    // Refused before the upload is read unless the URL's token is live.
    if (!jobs_->upload_allowed(parts[1], parts[3], token))
      return Error(ErrorCode::kUnauthenticated, "invalid or expired upload URL");
    return http::BodyPlan{static_cast<std::size_t>(max_upload_bytes_), upload_dir_};
  }
  if (!builder_ || !is_build_request(header)) return http::BodyPlan{default_max, {}};
  if (header["X-API-KEY"].empty() && header[bhttp::field::authorization].empty()) {
    // Refused before the upload is read.
    return Error(ErrorCode::kUnauthenticated,
                 "missing API key: send X-API-KEY (or Authorization: Bearer)");
  }
  return http::BodyPlan{static_cast<std::size_t>(max_upload_bytes_), upload_dir_};
}

bool ControlApi::serve_control(Request& req, const http::Responder& respond) {
  auto fail = [&](const Error& e) {
    Response res = e2b_error(e);
    res.set(bhttp::field::content_type, "application/json");
    respond(std::move(res));
    return true;
  };
  if (req.method() == verb::get) {
    // An event stream (api_events.cc): answered here, on this worker, which it leaves at once
    // (the event log's thread writes the stream). The JSON form goes through the route table.
    auto url = boost::urls::parse_origin_form(req.target());
    if (!url) return false;
    const auto parts = api::split_path(url->path());
    bool sse_default = false;
    if (!api::is_events_route(parts, sse_default) ||
        !api::events_stream_requested(req, *url, sse_default))
      return false;
    auto team = authenticate(req);
    if (!team.ok()) return fail(team.error());
    api::Context ctx{req,      *url,    {},       sandboxes_,  store_, std::move(*team),
                     builder_, images_, secrets_, max_secrets_};
    if (parts.size() == 3) ctx.params.push_back(parts[0] == "sandboxes" ? parts[1] : parts[2]);
    Status s = api::stream_events(ctx, sse_default, respond);
    if (!s.ok()) return fail(s.error());
    return true;
  }
  if (cluster_ && req.method() == verb::post && req.target() == kMoveInPath) {
    auto team = cluster_->internal_team(req);
    if (!team)
      return fail(Error(ErrorCode::kUnauthenticated, "a move needs the cluster credential"));
    if (!team->ok()) return fail(team->error());
    std::shared_ptr<http::BodyFile> body = respond.body_file();
    std::string path;
    std::optional<std::filesystem::path> own_tmp;
    if (body) {
      path = body->path();
    } else {
      std::string tmpl = sandboxes_.options().home + "/uploads/move-XXXXXX";
      int fd = ::mkstemp(tmpl.data());
      if (fd < 0) return fail(internal_error("cannot spool the move"));
      bool ok = os::write_all_errno(fd, req.body()) == 0;
      ::close(fd);
      own_tmp = tmpl;
      path = tmpl;
      if (!ok) {
        std::filesystem::remove(tmpl);
        return fail(internal_error("cannot spool the move"));
      }
    }
    auto res = cluster_->move_in(path, req.version());
    std::error_code ec;
    if (own_tmp) std::filesystem::remove(*own_tmp, ec);
    if (!res.ok()) return fail(res.error());
    respond(std::move(*res));
    return true;
  }
  if (api::is_volume_content(req) && req.method() == verb::put) {
    std::shared_ptr<http::BodyFile> body = respond.body_file();
    auto res = api::volume_content(store_, sandboxes_.options().home, req,
                                   body ? body->path() : std::string());
    if (!res.ok()) return fail(res.error());
    respond(std::move(*res));
    return true;
  }
  if (jobs_ && is_files_upload(req)) {
    std::string path;
    std::optional<std::filesystem::path> own_tmp;
    if (auto f = respond.body_file()) {
      path = f->path();
      f->release();  // accept_upload moves it, or it is removed below
    } else {
      std::string tmpl = upload_dir_ + "/files-XXXXXX";
      int fd = ::mkstemp(tmpl.data());
      if (fd < 0) return fail(internal_error("cannot spool the upload"));
      bool ok = os::write_all_errno(fd, req.body()) == 0;
      ::close(fd);
      path = tmpl;
      if (!ok) {
        std::filesystem::remove(tmpl);
        return fail(internal_error("cannot spool the upload"));
      }
    }
    auto res = api::accept_template_files(*jobs_, req, path);
    std::error_code ec;
    std::filesystem::remove(path, ec);  // still there when the upload was refused
    if (!res.ok()) return fail(res.error());
    respond(std::move(*res));
    return true;
  }
  if (!is_build_request(req)) return false;
  auto team = authenticate(req);
  if (!team.ok()) return fail(team.error());
  if (!builder_) return fail(Error(ErrorCode::kUnimplemented, "template builds are not enabled"));
  auto url = boost::urls::parse_origin_form(req.target());
  api::Context ctx{req,      *url,    {},       sandboxes_,  store_, std::move(*team),
                   builder_, images_, secrets_, max_secrets_};
  std::string context_tar;
  std::optional<std::filesystem::path> own_tmp;
  if (auto f = respond.body_file()) {
    context_tar = f->path();
  } else {
    // A small body that stayed in memory (no credential header at the plan stage cannot get
    // here: authenticate() refused it). Written out for libarchive.
    std::string tmpl = upload_dir_ + "/ctx-XXXXXX";
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0) return fail(internal_error("cannot spool the build context"));
    bool ok = os::write_all_errno(fd, req.body()) == 0;
    ::close(fd);
    own_tmp = tmpl;
    if (!ok) {
      std::filesystem::remove(tmpl);
      return fail(internal_error("cannot spool the build context"));
    }
    context_tar = tmpl;
  }
  // The spooled or written-out context goes before the build's last event (and in any case).
  auto drop_context = [&] {
    std::error_code ec;
    if (auto f = respond.body_file()) {
      std::filesystem::remove(f->path(), ec);
      f->release();
    }
    if (own_tmp) std::filesystem::remove(*own_tmp, ec);
    own_tmp.reset();
  };
  Status s = api::build_template(ctx, context_tar, drop_context, respond);
  drop_context();
  if (!s.ok()) return fail(s.error());
  return true;
}

namespace {
// The code interpreter's context management (list, create, restart, remove contexts) and its
// health check: @e2b/code-interpreter sends these without X-Access-Token (E2B's ports are public
// unless allowPublicTraffic is false, and then the SDK sends the traffic token, checked above).
// They start no kernel and run no code; /execute, which does, always needs the token.
bool interpreter_management_request(const bhttp::request_header<>& h) {
  std::string_view target = h.target();
  std::string_view path = target.substr(0, target.find('?'));
  // No dot segments or escapes: a server that normalised "/contexts/../execute" would run it.
  if (path.find("/.") != std::string_view::npos || path.find('%') != std::string_view::npos)
    return false;
  return path == "/health" || path == "/contexts" || path.starts_with("/contexts/");
}
}  // namespace

// A signed URL names its sandbox only through the token that signed it: each live sandbox's
// token is tried (one SHA-256 each), compared in constant time. envd checks it again, with its
// expiration. A secure=false sandbox has no token and the SDK signs nothing for it.
std::optional<Route> ControlApi::signed_files_route(const bhttp::request_header<>& headers) {
  auto f = signed_files_request(headers);
  if (!f) return std::nullopt;
  for (const auto& sb : sandboxes_.all()) {
    if (sb->access_token.empty()) continue;
    if (token::constant_time_equal(f->signature, files_signature(*f, sb->access_token)))
      return Route{Route::Kind::kSandbox, sb->record.id, kEnvdPort};
  }
  return std::nullopt;
}

GatewayBackend::Admission ControlApi::admit(const Route& route,
                                            const bhttp::request_header<>& headers) {
  const std::shared_ptr<LiveSandbox> sb = sandboxes_.find(route.sandbox_id);
  if (!sb && cluster_) {
    // Another node's (the owner checks the credentials): a known one over a pooled or new
    // connection to that node; an unknown one through connect_sandbox on a worker thread,
    // which asks the cluster (the I/O thread must not wait for etcd).
    if (cluster_->known_remote(route.sandbox_id)) return Admission{};
    return Admission{Error(ErrorCode::kFailedPrecondition, "ask the cluster")};
  }
  Admission a{authorize(sb.get(), route, headers)};
  if (!sb) return a;
  a.epoch = sb->epoch.load();
  // E2B's placeholder: ${PORT} becomes the port the request was routed to.
  a.masked_host = sb->mask_host;
  for (auto at = a.masked_host.find("${PORT}"); at != std::string::npos;
       at = a.masked_host.find("${PORT}"))
    a.masked_host.replace(at, 7, std::to_string(route.port));
  return a;
}

Status ControlApi::authorize(const LiveSandbox* sb, const Route& route,
                             const bhttp::request_header<>& headers) {
  if (!sb) return not_found("sandbox '" + route.sandbox_id + "' not found");
  const bool envd = route.port == kEnvdPort;
  const bool server = sb->tmpl && sb->tmpl->server && route.port == sb->tmpl->server->port;
  const bool interp =
      sb->tmpl && sb->tmpl->interpreter && route.port == sb->tmpl->interpreter->port;
  if (!envd && !server && !interp && !(sb->tmpl && sb->tmpl->has(templates::Capability::kPorts))) {
    return Error(ErrorCode::kPermissionDenied,
                 "port " + std::to_string(route.port) +
                     " of this sandbox is private (its template lacks the `ports` capability)");
  }
  // Paused: with autoResume the gateway reconnects through connect_sandbox, which resumes it;
  // without, the proxy answers 502 as E2B's does (the SDK's isRunning() reads it as false).
  const Status allowed = !sb->paused ? Status()
                         : sb->record.auto_resume
                             ? Status(Error(ErrorCode::kFailedPrecondition, "paused"))
                             : Status(unavailable("sandbox '" + sb->record.id + "' is paused"));
  // allowPublicTraffic false (E2B): the sandbox's own ports need its traffic token, and it is
  // enough for them; envd and the command server keep their access-token rules.
  if (!envd && !server && !sb->traffic_token.empty()) {
    std::string_view traffic = headers["e2b-traffic-access-token"];
    if (traffic.empty() || !token::constant_time_equal(traffic, sb->traffic_token))
      return Error(ErrorCode::kPermissionDenied,
                   "sandbox '" + sb->record.id +
                       "' was created with allowPublicTraffic false: its ports need the "
                       "e2b-traffic-access-token header (trafficAccessToken)");
    return allowed;
  }
  if (sb->access_token.empty()) return allowed;  // secure=false: open, as in E2B
  std::string_view presented = headers["X-Access-Token"];
  if (presented.empty()) {
    std::string_view a = headers[bhttp::field::authorization];
    if (a.size() > 7 && boost::beast::iequals(a.substr(0, 7), "bearer ")) presented = a.substr(7);
  }
  if (presented.empty() && envd && signed_files_request(headers)) return allowed;
  if (presented.empty() && interp && interpreter_management_request(headers)) return allowed;
  if (presented.empty()) {
    return Error(ErrorCode::kUnauthenticated,
                 "missing X-Access-Token for sandbox '" + sb->record.id + "'");
  }
  if (sb->access_matcher.matches(presented)) return allowed;
  // A scoped token reaches the command server only; the server enforces its command list.
  if (server && token::looks_scoped(presented) &&
      token::verify_scoped(sb->access_token, presented, now_ms() / 1000).ok()) {
    return allowed;
  }
  return Error(ErrorCode::kUnauthenticated,
               "invalid access token for sandbox '" + sb->record.id + "'");
}

Result<UniqueFd> ControlApi::sandbox_socket(const Route& route) {
  return sandboxes_.tcp_socket(route.sandbox_id);
}

Result<UniqueFd> ControlApi::connect_sandbox(const Route& route) {
  if (cluster_ && !sandboxes_.find(route.sandbox_id))
    return cluster_->connect_owner(route.sandbox_id);
  auto fd = sandboxes_.connect(route.sandbox_id, route.port);
  if (!fd.ok() && fd.error().code() == ErrorCode::kFailedPrecondition) {
    return unavailable(fd.error().message());  // paused (again) without autoResume: 502
  }
  if (!fd.ok() && fd.error().code() == ErrorCode::kUnavailable) {
    return unavailable("nothing listens on port " + std::to_string(route.port) + " in sandbox '" +
                       route.sandbox_id + "'");
  }
  return fd;
}

}  // namespace abx::platform
