// abxd's one listener: the control API and the routing proxy to ports inside sandboxes.
//
// The gateway runs on the http::Server engine: accepting, deadlines, the limits and framing
// checks of the bad-input catalogue and error rendering are the server's. For every request
// header it routes the request (host_route.h) and then either
//   - control plane: lets the server read the body (1 MiB cap) and hands the complete request to
//     GatewayBackend::handle_control on a worker thread (it may touch SQLite or spawn sandboxes);
//   - sandbox plane: takes the connection over (http::Takeover) in a C++20 coroutine on the
//     connection's I/O thread (each thread has an io_context of its own and keeps its connections
//     and their upstream sockets: http::ServerOptions::context_per_thread), checks the sandbox's
//     token with the backend, gets a connection to the target port (see below), then relays the
//     request and the response through fixed 64
//     KiB buffers — unbuffered, with back-pressure, whatever the size or duration (chunked Connect
//     streams, uploads, downloads) — and turns into a byte tunnel after a `101 Switching Protocols`
//     (WebSocket). Hop-by-hop headers are dropped per RFC 9110 §7.6.1.
// Upstream connections: a client connection keeps the ones it made for its next requests; when
// it ends they wait, idle, for the next client connection of the same I/O thread (at most 256
// per thread, 30 s each, closed at once when the sandbox closes them; never reused across a
// checkpoint: Admission::epoch). A new one to a running sandbox is made on the I/O thread itself
// (sandbox_socket: a socket made in the sandbox's netns, connected there); to a paused one, or
// when that fails, by connect_sandbox on a worker thread.
// Sandbox-plane errors are answered as `{"code": <status>, "message": …, "sandboxId": …}` (502
// for an unknown or killed sandbox, a paused one without autoResume, or a closed port), which
// the e2b SDKs understand.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/http/server.h"
#include "abx/platform/host_route.h"

namespace abx::platform {

// The field in which the gateway hands a control-plane request's source to its backend: the
// peer address of the request's connection (e.g. "127.0.0.1"), set by the gateway on every
// control request; one a client sent is removed first, so the backend can trust it.
inline constexpr std::string_view kPeerAddressField = "Abx-Peer-Address";

class GatewayBackend {
 public:
  virtual ~GatewayBackend() = default;
  // A complete control-plane request (with kPeerAddressField); runs on a worker thread.
  virtual http::Response handle_control(http::Request&& req) = 0;
  // What the gateway asks for every proxied request, from one look-up of the sandbox. Runs on an
  // I/O thread, so it must not block (memory lookups only). `header` is the request's (method,
  // target and fields).
  struct Admission {
    // Whether the request's credentials may reach route.port of route.sandbox_id.
    // kFailedPrecondition means "allowed, but paused" (a sandbox created with autoResume): the
    // gateway then drops any pooled connection and calls connect_sandbox, which resumes the
    // sandbox. Errors: kNotFound (no such sandbox) and kUnavailable (paused without autoResume)
    // → 502 with {code, message, sandboxId}; kUnauthenticated → 401; kPermissionDenied → 403.
    Status status;
    // A number that changes whenever the sandbox's processes went through a checkpoint or were
    // replaced (fork, snapshot, pause to disk, resume): pooled upstream connections made under
    // another number are not reused (their sandbox end may be gone, or be a restored copy whose
    // peer is not this socket).
    std::uint64_t epoch = 0;
    // The Host header the sandbox's service gets instead of the client's (E2B's
    // maskRequestHost); empty keeps the client's.
    std::string masked_host;
  };
  virtual Admission admit(const Route& route,
                          const boost::beast::http::request_header<>& header) = 0;
  // A connected, non-blocking TCP socket to route.port inside the sandbox (resuming it if
  // paused); called on a worker thread after admit(), when no pooled connection is open.
  // Errors: kUnavailable (nothing listens there) and kDeadlineExceeded → 502.
  virtual Result<UniqueFd> connect_sandbox(const Route& route) = 0;
  // Optional, the fast way to a new connection: a non-blocking TCP socket, not connected yet,
  // made in the network namespace of the running sandbox (runtime::Sandbox::tcp_socket). The
  // gateway connects it to 127.0.0.1:route.port on its I/O thread, so this must not block
  // (memory lookups and a few syscalls). On any error (paused, gone, not supported: the
  // default), and when that connect is refused, the gateway calls connect_sandbox instead, whose
  // error is the one the client sees.
  virtual Result<UniqueFd> sandbox_socket(const Route& route) {
    return Error(ErrorCode::kUnimplemented, "no fast path");
  }
  // Optional. A request that names no sandbox (the API's own Host, no routing headers) but is
  // a signed file URL, GET or POST /files?…&signature=… (the SDK's downloadUrl / uploadUrl
  // under E2B_SANDBOX_URL: that URL carries no sandbox id): the route to envd of the sandbox
  // whose access token makes that signature, so the request is proxied there as if it had
  // named it; nullopt leaves the request to the control plane. Runs on an I/O thread (memory
  // lookups and hashing only).
  virtual std::optional<Route> signed_files_route(const boost::beast::http::request_header<>&) {
    return std::nullopt;
  }
  // Optional. How a control-plane request's body is received, decided from its header on an
  // I/O thread (memory lookups only): e.g. a larger limit and a spool file for an upload.
  // Default: in memory, up to `default_max` (GatewayOptions::limits). An Error answers at once.
  virtual Result<http::BodyPlan> control_body_plan(const http::Request& header,
                                                   std::size_t default_max) {
    return http::BodyPlan{default_max, {}};
  }
  // Optional. Runs on a worker thread before handle_control: returns true when it answered the
  // request itself through `respond` (a streamed response, a spooled body), false to leave it
  // to handle_control.
  virtual bool serve_control(http::Request& req, const http::Responder& respond) { return false; }
};

struct GatewayOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 3000;
  std::string domain = "localhost";
  int io_threads = 0;  // 0 = number of cores
  int workers = 8;     // threads for backend calls
  http::Limits limits;
};

class Gateway {
 public:
  // `backend` must outlive the gateway. Errors: kUnavailable (cannot listen).
  static Result<std::unique_ptr<Gateway>> start(GatewayOptions options, GatewayBackend& backend);
  ~Gateway();

  std::uint16_t port() const;
  const std::string& host() const;
  // Stops accepting, closes idle connections, waits up to `drain` for requests in progress
  // (streams included), then closes the rest. Idempotent.
  void shutdown(std::chrono::milliseconds drain);

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// {"code": status, "message": message} with that status: the E2B error shape.
http::Response e2b_error(unsigned status, const std::string& message, unsigned version = 11,
                         bool keep_alive = true);
http::Response e2b_error(const Error& error, unsigned version = 11, bool keep_alive = true);

}  // namespace abx::platform
