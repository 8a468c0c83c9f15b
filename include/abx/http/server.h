// A small HTTP/1.1 server on Boost.Beast/Asio shared by every abx server.
//
// One session object per connection (running on its own strand), a deadline armed before every
// read and write, header and body limits set on every parser, and the framing checks of the
// bad-input catalogue (§2.1) applied before a handler ever sees a request: conflicting
// Content-Length / Transfer-Encoding, transfer codings other than `chunked`, absolute-form
// targets, oversized request lines and header blocks, too many fields, and bodies over the limit
// (413 before the body is read). Framing errors are answered with a JSON error and the
// connection is closed.
//
// Handlers run on an I/O thread and must not block: they either answer at once or hand the work
// to another thread and answer later through the Responder, from any thread. Requests on one
// connection are answered in order (pipelined requests wait their turn).
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "abx/base/error.h"

namespace abx::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

struct Limits {
  std::size_t max_target_bytes = 8 * 1024;    // request target; over it: 414
  std::size_t max_header_bytes = 16 * 1024;   // whole header block; over it: 431
  std::size_t max_header_fields = 100;        // over it: 431
  std::size_t max_body_bytes = 1024 * 1024;   // over it: 413
  std::chrono::milliseconds header_timeout{10'000};  // a request's header must arrive within this
  std::chrono::milliseconds body_timeout{30'000};    // and its body within this
  std::chrono::milliseconds idle_timeout{60'000};    // keep-alive connection with no request
  std::chrono::milliseconds write_timeout{30'000};
  std::size_t max_connections = 4096;  // further connections get 503 and are closed
};

namespace detail {
class Session;
}

// Completes one request. Call it exactly once, from any thread; if it is destroyed without
// being called the client gets a 500 rather than a hung connection.
class Responder {
 public:
  explicit Responder(std::shared_ptr<detail::Session> session);
  void operator()(Response res) const;
  // The executor of the connection (for timers tied to this request).
  boost::asio::any_io_executor executor() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

using Handler = std::function<void(Request&& req, Responder respond)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0 picks a free port; see Server::port()
  int io_threads = 0;      // 0 = number of cores
  Limits limits;
  std::string server_header = "abx";
};

class Server {
 public:
  // Binds, listens and starts the I/O threads. Errors: kInvalidArgument (bad host),
  // kUnavailable (bind/listen failed, e.g. port in use) with the address in the message.
  static Result<std::unique_ptr<Server>> start(ServerOptions options, Handler handler);

  ~Server();  // shuts down with no drain time if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;
  const std::string& host() const;

  // Stops accepting, closes idle keep-alive connections, lets requests in progress finish for
  // up to `drain`, then closes the rest and joins the I/O threads. Idempotent.
  void shutdown(std::chrono::milliseconds drain);
  // True once shutdown() has begun: handlers should answer new work with 503.
  bool draining() const;
  // Blocks until shutdown() has completed (from another thread or a signal handler thread).
  void wait();

  std::size_t open_connections() const;
  boost::asio::any_io_executor executor() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The one mapping from Error to the wire: an HTTP status and {"error": message, "type": type}.
unsigned http_status(ErrorCode code);
Response error_response(const Error& error, unsigned version = 11, bool keep_alive = true);
Response json_response(unsigned status, const boost::json::value& body, unsigned version = 11,
                       bool keep_alive = true);

}  // namespace abx::http
