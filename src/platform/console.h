// abxd's web console (issue 42, docs/console.md): static HTML, CSS and JS modules under
// src/platform/console/web, plus @xterm/xterm from src/platform/console/package-lock.json,
// embedded in the binary at build time (cmake/EmbedAssets.cmake writes console_assets.cc).
// Nothing is fetched at run time; the page talks to the control API and, through the gateway's
// E2b-Sandbox-Id/-Port routing, to envd and the command server, all on abxd's own origin (no CORS).
//
// The pages need no credentials (they hold no data); every call they make sends the API key in
// X-API-Key, kept in the browser's sessionStorage. Each answer carries a strict CSP (no inline
// script or style, same-origin connections only, no framing), nosniff, no-referrer and no-store.
#pragma once

#include <span>
#include <string_view>

#include "abx/base/error.h"
#include "abx/http/server.h"

namespace abx::platform::console {

struct Asset {
  std::string_view path;  // "/console/app.js"; "/console/" is the page
  std::string_view content_type;
  std::string_view body;
};

// Every embedded file (console_assets.cc, generated).
std::span<const Asset> assets();

// The Content-Security-Policy every console answer carries.
inline constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

// True for "/console" and everything under "/console/".
bool is_console_path(std::string_view path);

// The answer to a request for `path` (is_console_path): the file for GET ("/console" and
// "/console/" are the page); not_found for a path with no file, invalid_argument for any other
// method.
Result<http::Response> serve(const http::Request& req, std::string_view path);

}  // namespace abx::platform::console
