// The in-sandbox command server: publishes a CommandRegistry over HTTP.
//
//   GET  /health            200 {"status":"ok"}                     (no auth)
//   GET  /commands          200 {"commands":[schema...]}             (only the caller's scope)
//   POST /commands/{name}   200 {"result": ...}  or {"error","type"}  with 400/401/404/405/413/
//                           415/500/503/504 (see docs/command-server.md)
//   POST /mcp, DELETE /mcp  the same commands as MCP tools (Streamable HTTP transport, JSON
//                           responses, sessions; see docs/mcp.md)
//
// Auth: the full access token, or a scoped token derived from it (abx/token/token.h), in
// `X-Access-Token` or `Authorization: Bearer`. A scoped caller sees and runs only its commands;
// every other command is a 404 to it. Commands run on a worker pool, so a slow command never
// blocks other calls; a call past its deadline gets 504 (the command's thread is not killed —
// C++ cannot cancel it — and its late result is dropped). A command registered inline
// (registry::Execution::kInline) runs on the I/O thread instead: no hop and no deadline, for
// quick commands that never block (docs/command-server.md, "Where commands run").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/json.h"
#include "abx/http/server.h"
#include "abx/registry/registry.h"

namespace abx::server {

inline constexpr std::uint16_t kDefaultPort = 49982;

struct CommandServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = kDefaultPort;
  // The sandbox's access token. Required unless no_auth is set.
  std::optional<std::string> access_token;
  bool no_auth = false;
  std::chrono::milliseconds call_timeout{30'000};  // 0 = no deadline
  int workers = 16;                                // threads that run pool commands
  int io_threads = 0;                              // 0 = number of cores
  http::Limits limits;
  JsonLimits json;
  // /mcp: browsers send Origin; requests whose Origin is not a loopback host (localhost,
  // 127.0.0.1, [::1]) or listed here (exact "scheme://host[:port]", or "*" for any) get 403,
  // against DNS rebinding. Requests without Origin (non-browser clients) are not affected.
  std::vector<std::string> mcp_allowed_origins;
  // Live MCP sessions; when full, initialize evicts the least recently used one (its client
  // then gets 404 and starts over, as the transport specifies).
  std::size_t mcp_max_sessions = 1024;
};

class CommandServer {
 public:
  // Freezes `registry` and starts serving it. Errors: kFailedPrecondition when the registry
  // recorded registration mistakes (listed in the message) or when there is no token and
  // no_auth is not set; kUnavailable when the address cannot be bound.
  static Result<std::unique_ptr<CommandServer>> start(registry::CommandRegistry& registry,
                                                      CommandServerOptions options);
  // start(), with `before_serving` run once the worker threads exist and before the registry
  // is checked and frozen and the port bound; its error is start()'s. abx-server registers a
  // Python module's commands there, so its worker's start overlaps the server's own (issue 37).
  static Result<std::unique_ptr<CommandServer>> start(
      registry::CommandRegistry& registry, CommandServerOptions options,
      const std::function<Status()>& before_serving);
  ~CommandServer();

  std::uint16_t port() const;
  const std::string& host() const;
  // Answers new calls with 503, lets calls in progress finish for up to `drain`, then closes.
  void shutdown(std::chrono::milliseconds drain);

  struct Impl;

 private:
  explicit CommandServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Serves the registry's commands as MCP tools over stdio (newline-delimited JSON-RPC on in_fd /
// out_fd, abx/mcp/stdio.h) until end of input: one session, no token (the process that launched
// this one is the client), the same coercion, worker pool and call deadline as the HTTP server.
// Returns once calls in progress have answered and the workers are idle, so a command running
// past its deadline delays the return. Errors: kFailedPrecondition for registration mistakes,
// kUnavailable when stdio fails.
Status serve_mcp_stdio(registry::CommandRegistry& registry, CommandServerOptions options,
                       int in_fd = 0, int out_fd = 1);

// The whole `abx-server` program: flags (see --help), module loading, signals. A user binary
// that links abx::server can call this from main() to serve the commands it registered.
int serve_main(int argc, char** argv);

}  // namespace abx::server
