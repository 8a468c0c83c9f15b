// abxd's POST /mcp: the platform tools (abx/mcp/platform_tools.h) over the SandboxManager, served
// with the MCP Streamable HTTP transport (revision 2025-06-18, JSON responses only).
//
// Lifecycle goes through the SandboxManager and the store; work inside a sandbox (shell, files,
// commands) goes through libabx (client::Sandbox), whose sandbox dialer hands it a socket
// SandboxManager::connect() opens inside the sandbox's netns — straight to envd (49983) or the
// command server, with the sandbox's access token, exactly as the proxy would forward it, but
// without a loop back through abxd's own listener (which would tie up a gateway worker twice
// per call).
//
// Transport: the sessions and Origin check of abx/mcp/session.h, as on the command server's
// /mcp (docs/mcp.md): initialize opens a session and its answer carries Mcp-Session-Id; later
// messages must send it (400 without, 404 when unknown or opened with another API key);
// MCP-Protocol-Version must match when sent; DELETE ends a session; GET and other methods are
// 405. Requests with an Origin header that is not http(s) on localhost / 127.0.0.1 / [::1] are
// 403. Auth is the control API's (X-API-KEY, Bearer or a
// signed request), checked before this code runs.
//
// A tool call blocks the gateway worker that handles it until it finishes (a shell command up
// to its timeoutSeconds).
#pragma once

#include <memory>

#include "abx/http/server.h"
#include "abx/mcp/platform_tools.h"
#include "abx/store/store.h"
#include "sandboxes.h"

namespace abx::platform {

// The backend alone (for tests and other transports), acting for team `team`: its lists, creates
// and lookups see that team's sandboxes and templates only (another team's id is "not found").
std::unique_ptr<mcp::PlatformBackend> make_abxd_backend(SandboxManager& sandboxes,
                                                        store::Store& store, std::string team);

class PlatformMcpEndpoint {
 public:
  PlatformMcpEndpoint(SandboxManager& sandboxes, store::Store& store, std::string team);
  ~PlatformMcpEndpoint();
  // An authenticated request to /mcp (any method).
  http::Response handle(const http::Request& req);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The hook for ControlApi::route: one endpoint per (manager, store, team), made on first use;
// `team` is the request's credential's. (A function rather than a ControlApi member so that the
// control API's header stays as it is.)
http::Response serve_platform_mcp(SandboxManager& sandboxes, store::Store& store,
                                  const std::string& team, const http::Request& req);

}  // namespace abx::platform
