// A blocking HTTP/1.1 client connection on Boost.Beast, with keep-alive and deadlines.
//
// Used by tests, tools and (later) the SDK. One Connection is one TCP connection; requests on it
// are sent one after another. Errors: kUnavailable (connect/read/write failed or the peer
// closed), kDeadlineExceeded (the timeout passed), kInvalidArgument (bad address),
// kUnauthenticated (TLS: the server's certificate did not verify, or it refused ours).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/http/server.h"

namespace abx::http {

// TLS for client connections (abxd --cluster: etcd over https, node-to-node mutual TLS), on
// OpenSSL through Boost.Asio's ssl::stream. The server's certificate must chain to `ca_file`
// and name the host asked for (IP address or DNS name, in its subjectAltName); `cert_file` and
// `key_file` (both or neither) are the client's certificate, presented when the server asks.
struct TlsClientOptions {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

// A loaded client TLS context (certificates read once), shared by any number of connections
// and threads. Errors of load(): kInvalidArgument naming the file that cannot be read or used
// (a key that does not match its certificate included).
class TlsClient {
 public:
  static Result<std::shared_ptr<const TlsClient>> load(const TlsClientOptions& options);
  ~TlsClient();
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit TlsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> open(
      const std::string& host, std::uint16_t port,
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // The same over TLS: connects, then completes the handshake within `timeout`, verifying the
  // server's certificate against `tls` and the name `host` (or `server_name` when given, e.g. a
  // DNS name for an address). A certificate that does not verify is kUnauthenticated, with
  // OpenSSL's reason.
  static Result<std::unique_ptr<Connection>> open_tls(
      const std::string& host, std::uint16_t port, const TlsClient& tls,
      std::chrono::milliseconds timeout = std::chrono::seconds(10), std::string server_name = {});
  // A connection over a stream socket the caller already connected (e.g. one opened inside
  // another network namespace); `host` is the Host header sent when a request has none.
  // Errors: kInternal when the descriptor cannot be adopted.
  static Result<std::unique_ptr<Connection>> adopt(UniqueFd fd, std::string host);
  ~Connection();

  // Responses to send() with a body over `bytes` fail with kPayloadTooLarge (the connection is
  // then unusable). Default: no limit.
  void set_body_limit(std::uint64_t bytes);

  // Sends `req` (Host and Content-Length are filled in when missing) and reads the response.
  Result<Response> send(Request req, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Sends `req` and delivers the response body piece by piece as it arrives (chunked or sized),
  // for long-lived streams such as Connect server streams. `on_body` gets each piece and returns
  // false to stop reading (the connection is then unusable). `idle_timeout` bounds each read,
  // not the whole exchange. Returns the response header (with an empty body) once the body has
  // ended or `on_body` stopped it.
  using BodyCallback = std::function<bool(std::string_view piece)>;
  Result<Response> send_streaming(
      Request req, const BodyCallback& on_body,
      std::chrono::milliseconds idle_timeout = std::chrono::seconds(30));

  // Closes the socket from any thread; a blocked send/send_streaming fails with kUnavailable.
  void cancel();

  // Writes raw bytes and reads until the peer closes or `timeout` passes; for framing tests.
  Result<std::string> raw_exchange(std::string_view bytes,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(5));

  struct Impl;

 private:
  explicit Connection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Convenience for one-off calls: opens a connection (over TLS when `tls` is set), sends, closes.
Result<Response> fetch(const std::string& host, std::uint16_t port, Request req,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30),
                       const TlsClient* tls = nullptr);

// Builds a request with a JSON (or empty) body.
Request make_request(boost::beast::http::verb method, std::string target, std::string body = {},
                     std::string content_type = "application/json");

}  // namespace abx::http
