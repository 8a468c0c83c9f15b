// The registry client's HTTP(S) transport: one request per connection, TLS through OpenSSL
// (Boost.Beast ssl_stream: system CAs plus an optional CA file, SNI, host name verification,
// TLS 1.2+), a deadline before every connect, handshake, read and write, and response bodies
// either collected (bounded) or streamed piece by piece to a sink.
//
// Why not abx::http::Connection: abx::http is linked into the in-sandbox binaries, which must
// depend on glibc alone; OpenSSL there would break that. Registry traffic also needs DNS names,
// absolute URLs (token realms, redirects to blob storage) and request bodies streamed from
// files, none of which the loopback-oriented abx::http client has.
//
// One connection per request keeps the failure modes simple (no stale keep-alive connection to
// retry on); a pull makes a handful of requests per layer, so the handshakes are noise next to
// the layer bytes.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"

namespace abx::image::detail {

struct Url {
  bool tls = true;
  std::string host;  // a name or an address; IPv6 without brackets
  std::uint16_t port = 0;
  std::string target = "/";  // origin form: path and query

  std::uint16_t effective_port() const { return port != 0 ? port : (tls ? 443 : 80); }
  // host[:port] as sent in Host: (brackets around IPv6, the port only when not the default).
  std::string authority() const;
  std::string str() const;
};

// "http(s)://authority/path?query"; invalid_argument otherwise.
Result<Url> parse_url(std::string_view text);
// A Location header against the URL it came from: absolute, or a path ("/v2/...").
Result<Url> resolve_url(const Url& base, std::string_view location);
// localhost, 127.0.0.0/8, ::1 (with or without brackets).
bool is_loopback_host(std::string_view host);
// Splits "host[:port]" / "[v6]:port"; port 0 when absent.
std::pair<std::string, std::uint16_t> split_host_port(std::string_view authority);

struct TransportOptions {
  std::string ca_file;
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds read_timeout{60'000};
};

struct HttpRequest {
  boost::beast::http::verb method = boost::beast::http::verb::get;
  Url url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;       // sent as is (Content-Length), unless body_file is set
  std::string body_file;  // a file streamed as the body (Content-Length = its size)
};

struct HttpResponse {
  unsigned status = 0;
  boost::beast::http::fields headers;
  // A collected body; for a streamed 2xx response, empty. Other statuses keep at most 64 KiB.
  std::string body;
};

// Receives a 2xx response body piece by piece; an error stops the transfer.
using BodySink = std::function<Status(std::string_view piece)>;

// Why a request failed before any response, for callers that react to it (the scheme probe).
enum class FailureKind { kNone, kConnect, kTlsVerify, kTlsHandshake, kOther };

class Transport {
 public:
  // Errors: the CA file cannot be loaded (invalid_argument).
  static Result<std::unique_ptr<Transport>> create(TransportOptions options);
  ~Transport();

  // Sends `req` on a new connection. A 2xx body goes to `sink` when given (at most `body_limit`
  // bytes, else kPayloadTooLarge), else into HttpResponse::body (same limit). Errors:
  // kUnavailable (resolve, connect, TLS, I/O), kDeadlineExceeded; last_failure() says which.
  Result<HttpResponse> send(const HttpRequest& req, std::uint64_t body_limit,
                            const BodySink* sink = nullptr);
  FailureKind last_failure() const { return last_failure_; }

  struct Impl;

 private:
  explicit Transport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  FailureKind last_failure_ = FailureKind::kNone;
};

}  // namespace abx::image::detail
