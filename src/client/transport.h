// Internal: HTTP plumbing of libabx — URL parsing, name resolution, a keep-alive connection
// pool, retries with backoff for idempotent requests, and the mapping of each plane's error
// bodies to abx::Error.
#pragma once

#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/client/config.h"
#include "abx/http/client.h"

namespace abx::client::detail {

struct Endpoint {
  std::string host;  // as written in the URL
  std::uint16_t port = 0;
  std::string base_path;  // without a trailing slash; "" for the root
  std::string authority;  // host[:port] for the Host header
  // Set: connections come from config.sandbox_dialer(dial_sandbox, port), not from host.
  std::string dial_sandbox;
};

// http://host[:port][/base]. Errors: kUnimplemented for https (no TLS in this transport),
// kInvalidArgument otherwise.
Result<Endpoint> parse_http_url(std::string_view url);

// The canonical code for an HTTP status.
ErrorCode code_for_status(unsigned status);

// Which error body shape to expect.
enum class Plane {
  kControl,        // {"code": <int>, "message": "…"}
  kCommandServer,  // {"error": "…", "type": "…"}
  kEnvd,           // REST {"code": <int>, "message"} or Connect {"code": "<name>", "message"}
};
Error error_from_response(const http::Response& res, Plane plane, std::string_view what);

std::string url_encode(std::string_view s);

class Transport {
 public:
  explicit Transport(ConnectionConfig config) : config_(std::move(config)) {}

  struct SendOptions {
    bool idempotent = false;
    std::chrono::milliseconds timeout{0};  // 0: config.request_timeout
    // Runs on each attempt's copy of the request after Host and target are final (request
    // signing: a retry needs a fresh nonce and date).
    std::function<Status(http::Request&)> before_send;
  };
  // Sends on a pooled connection. The Host header is set from the endpoint; the target is
  // prefixed with its base path. Retries as described in config.h.
  Result<http::Response> send(const Endpoint& ep, http::Request req, SendOptions opts);

  // A fresh connection for a long-lived stream (never pooled).
  Result<std::shared_ptr<http::Connection>> open_stream(const Endpoint& ep);
  // Sets Host and the base path on a request (send() does this itself).
  void prepare(const Endpoint& ep, http::Request& req) const;

  const ConnectionConfig& config() const { return config_; }

 private:
  Result<std::string> resolve(const std::string& host);
  // A new connection to `ep`: TCP, or the sandbox dialer's socket.
  Result<std::unique_ptr<http::Connection>> dial(const Endpoint& ep);
  Result<std::unique_ptr<http::Connection>> checkout(const Endpoint& ep, bool* reused);
  void checkin(const Endpoint& ep, std::unique_ptr<http::Connection> c);

  ConnectionConfig config_;
  std::mutex mu_;
  std::map<std::string, std::string> resolved_;
  std::map<std::string, std::vector<std::unique_ptr<http::Connection>>> idle_;
};

}  // namespace abx::client::detail
