// The control API (E2B-compatible REST) and the proxy's authorisation, as a GatewayBackend.
//
// Routes (shapes as in e2b-protocol.md §2; errors are {"code": status, "message": …}):
//   GET    /health                         200, no auth
//   GET    /console, /console/<file>       200, no auth: the web console (console.h); 404 if off
//   POST   /sandboxes                      201 Sandbox
//   GET    /v2/sandboxes                   200 [ListedSandbox], X-Next-Token paging
//   GET    /sandboxes                      200 [ListedSandbox] (v1: running only)
//   GET    /sandboxes/{id}                 200 SandboxDetail | 404
//   DELETE /sandboxes/{id}                 204 | 404
//   POST   /sandboxes/{id}/timeout         204 | 404
//   POST   /sandboxes/{id}/connect         200 running | 201 resumed | 404
//   POST   /sandboxes/{id}/pause           204 | 409 already paused | 404
//   POST   /sandboxes/{id}/resume          201 | 409 not paused | 404
//   GET    /sandboxes/{id}/metrics         200 [SandboxMetric]
//   POST   /sandboxes/{id}/tokens          201 {"token","expiresAt"} (abx: scoped command token)
//   GET    /templates, /templates/{id}     200 (with capabilities and customCommands)
//   POST   /templates/build?name=N&dockerfile=P   200 NDJSON progress (abx: body = context tar)
//   DELETE /templates/{id}                 204 | 404 (abx: built templates only; then store gc)
//   POST   /templates/{id}/push            200 {"ref","digest"} (abx:
//   {"ref":"host/repo:tag","bare"}) GET    /templates/{id}/image           200
//   {"manifestDigest","layers",…} (abx: inspect)
//   GET    /secrets                        200 [Secret], X-Next-Token paging (never a value)
//   POST   /secrets                        201 Secret | 409 name taken | 429 too many
//   GET    /secrets/{id or name}           200 Secret (abx: + usedBy) | 404
//   POST   /secrets/{id or name}           200 Secret (a new value: version + 1) | 404
//   DELETE /secrets/{id or name}           204 | 404 | 409 a live sandbox's rules name it
// Auth: X-API-KEY, Authorization: Bearer <key>, or Authorization: ABX-HMAC-SHA256 (signed).
// Tenants: the credential's team scopes every route. A sandbox, snapshot or built template of
// another team answers exactly as an unknown id does (404, same body); lists hold the team's
// objects only; built-in and catalog templates are every team's. The proxy (sandbox traffic)
// is not scoped by team: the sandbox's access token is the credential there.
//
// The routes are a table in api.cc, their handlers one file per resource (api_routes.h); a
// handler's Error becomes the status and body above through e2b_error() alone.
#pragma once

#include <atomic>

#include "abx/base/log.h"
#include "abx/platform/gateway.h"
#include "abx/store/store.h"
#include "auth_limiter.h"
#include "cluster_router.h"
#include "sandboxes.h"
#include "secrets.h"
#include "template_build.h"
#include "template_jobs.h"

namespace abx::platform {

class ControlApi : public GatewayBackend {
 public:
  ControlApi(SandboxManager& sandboxes, store::Store& store)
      : sandboxes_(sandboxes), store_(store) {}

  // Turns on template builds (POST /templates/build, DELETE and push of templates, their image
  // metadata). Both must outlive the API. Uploads are spooled under `upload_dir`, at most
  // `max_upload_bytes` each.
  // `jobs` (may be null) serves the e2b SDK's Template builder (template_jobs.h) and must
  // outlive the API's requests.
  void enable_builds(TemplateBuilder& builder, image::Store& images, std::string upload_dir,
                     TemplateJobs* jobs = nullptr, std::uint64_t max_upload_bytes = 2ull << 30);

  // Turns on /secrets and ${e2b.secrets.<name>} in network.rules (secrets.h). The vault must
  // outlive the API.
  void enable_secrets(SecretVault& vault, std::size_t max_per_team = kDefaultMaxSecretsPerTeam) {
    secrets_ = &vault;
    max_secrets_ = max_per_team;
  }

  // abxd --cluster: requests for sandboxes of other nodes go there (cluster_router.h). The
  // router must outlive the API's requests.
  void enable_cluster(ClusterRouter& router) { cluster_ = &router; }

  // Whether GET /console serves the web console (console.h); on unless abxd --no-console.
  void set_console(bool enabled) { console_ = enabled; }

  http::Response handle_control(http::Request&& req) override;
  Result<UniqueFd> connect_sandbox(const Route& route) override;
  Result<UniqueFd> sandbox_socket(const Route& route) override;
  Admission admit(const Route& route, const boost::beast::http::request_header<>& headers) override;
  std::optional<Route> signed_files_route(
      const boost::beast::http::request_header<>& headers) override;
  Result<http::BodyPlan> control_body_plan(const http::Request& header,
                                           std::size_t default_max) override;
  bool serve_control(http::Request& req, const http::Responder& respond) override;

 private:
  // The team of the request's credential (API key or access key).
  Result<std::string> authenticate(const http::Request& req);
  Status volume_credential(const http::Request& req);
  // admit()'s status for a sandbox already looked up (`sb` null: none).
  Status authorize(const LiveSandbox* sb, const Route& route,
                   const boost::beast::http::request_header<>& headers);
  Result<std::string> verify_signature(const http::Request& req);
  Result<http::Response> route(http::Request& req);

  SandboxManager& sandboxes_;
  store::Store& store_;
  TemplateBuilder* builder_ = nullptr;
  TemplateJobs* jobs_ = nullptr;
  image::Store* images_ = nullptr;
  SecretVault* secrets_ = nullptr;
  std::size_t max_secrets_ = kDefaultMaxSecretsPerTeam;
  std::string upload_dir_;
  std::uint64_t max_upload_bytes_ = 0;
  Logger log_{"api"};
  AuthLimiter auth_limiter_;          // failed authentication, per source (kPeerAddressField)
  bool console_ = true;               // GET /console serves the web console (set_console)
  ClusterRouter* cluster_ = nullptr;  // abxd --cluster (enable_cluster)
};

}  // namespace abx::platform
