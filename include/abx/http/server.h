// A small HTTP/1.1 server on Boost.Beast/Asio shared by every abx server.
//
// One session object per connection (running on its own strand, or on the io_context of the one
// thread that runs it: ServerOptions::context_per_thread, or one I/O thread), a deadline armed
// before every read and write, header and body limits set on every parser, and the framing
// checks of the bad-input catalogue (§2.1) applied before a handler ever sees a request:
// conflicting Content-Length / Transfer-Encoding, transfer codings other than `chunked`,
// absolute-form targets, oversized request lines and header blocks, too many fields, and bodies
// over the limit (413 before the body is read). Framing errors are answered with a JSON error
// and the connection is closed.
//
// Handlers run on an I/O thread and must not block: they either answer at once or hand the work
// to another thread and answer later through the Responder, from any thread. Requests on one
// connection are answered in order (pipelined requests wait their turn).
//
// Two extensions serve bulk data in constant memory:
//  - Streaming responses: Responder::stream() sends the header at once and returns a
//    StreamWriter; the body follows chunk by chunk (chunked transfer coding, or raw bytes when
//    the header carries a Content-Length). The writer's queue is bounded by a high-water mark
//    and producers wait for it to drain, so a fast producer never grows the server's memory.
//  - Large request bodies: ServerOptions::body_policy sees each request's header before its
//    body is read and may raise the body limit for that request and have the body spooled to a
//    file (Responder::body_file()) instead of memory. Without a policy every request keeps the
//    default limit and an in-memory body, as before.
//
// A server that proxies (abxd's gateway) takes a connection over after a request header with
// ServerOptions::on_header: it gets the socket, the bytes already buffered and the parser holding
// the header (a Takeover), relays the request however it likes, and gives the connection back
// for the next request or lets it close. Accepting, limits, deadlines for headers and error
// rendering stay here, written once.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

namespace detail {
class Session;
struct StreamState;
}  // namespace detail

// Sends as much of `bufs` as `sock` takes at once, without blocking (the socket is put in
// non-blocking mode, as Asio's asynchronous operations keep it anyway), and advances `bufs` past
// what went. Would-block is not an error: `ec` is set only for a failed socket. A small message
// usually goes whole, with no write deadline to arm and no completion queued on the io_context;
// the caller writes what is left asynchronously.
void send_now(boost::asio::ip::tcp::socket& sock, std::span<boost::asio::const_buffer> bufs,
              boost::beast::error_code& ec);

// For a socket that turned readable while no request is expected (a response streaming out):
// whether its peer closed it (a peek reads 0 bytes, or fails with other than would-block).
// Bytes waiting are not a close (a next request sent early); nothing is consumed.
bool peer_closed(boost::asio::ip::tcp::socket& sock);

// The size line of one chunk ("<hex>\r\n"): room for any std::size_t.
using ChunkLine = std::array<char, 2 * sizeof(std::size_t) + 2>;

// Appends to bufs[nb...] one piece of a body as it goes on the wire and returns the new count
// (at most 3 buffers added). Chunked: `data` as one chunk (its size line, written into `line`,
// the data, its CRLF) and, when `last`, the last chunk after it (alone for empty data); else
// `data` as is. The stream writer and the gateway's relay frame their pieces with it.
std::size_t add_body_piece(std::span<boost::asio::const_buffer> bufs, std::size_t nb,
                           ChunkLine& line, boost::asio::const_buffer data, bool chunked,
                           bool last);

// Appends the header block of `h` (its start line, its fields, the empty line) to `out`, the
// bytes Beast's serializer writes for it. A message whose body is in memory then goes out in one
// writev of this block and the body, without the serializer's layered buffer sequences (the
// server's sized responses, the gateway's whole messages).
template <bool isRequest, class Fields>
void serialize_head(const boost::beast::http::header<isRequest, Fields>& h, std::string& out) {
  const unsigned v = h.version();
  const char version[] = {'H', 'T',
                          'T', 'P',
                          '/', static_cast<char>('0' + v / 10 % 10),
                          '.', static_cast<char>('0' + v % 10)};
  std::size_t size = 32;
  for (const auto& f : h) size += f.name_string().size() + f.value().size() + 4;
  if constexpr (isRequest) {
    out.reserve(out.size() + size + h.method_string().size() + h.target().size());
    out.append(h.method_string()).append(" ").append(h.target()).append(" ");
    out.append(version, sizeof version).append("\r\n");
  } else {
    std::string_view reason = h.reason();
    if (reason.empty()) reason = boost::beast::http::obsolete_reason(h.result());
    const unsigned status = h.result_int();
    const char code[] = {' ', static_cast<char>('0' + status / 100 % 10),
                         static_cast<char>('0' + status / 10 % 10),
                         static_cast<char>('0' + status % 10), ' '};
    out.reserve(out.size() + size + reason.size());
    out.append(version, sizeof version).append(code, sizeof code).append(reason).append("\r\n");
  }
  for (const auto& f : h) out.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
  out.append("\r\n");
}

// A header read straight on a socket (as Beast's async_read_header does, without its composed
// operations), in two steps the caller's read loop goes through: put_header feeds what `b` holds
// to `p` and takes the bytes it used, and says whether reading can stop (the header is whole, or
// `ec` says why the parser failed); header_eof is the error of a read that met EOF first
// (end_of_stream before any byte, partial_message within the header, as Beast says them).
// The bytes after the header stay in `b`. Used by the server's sessions and abxd's gateway.
constexpr std::size_t kHeaderReadSize = 64 * 1024;  // the most one read asks for (Beast's own)

template <class Parser>
bool put_header(Parser& p, boost::beast::flat_buffer& b, boost::beast::error_code& ec) {
  ec = {};
  if (b.size() == 0) return false;
  b.consume(p.put(b.data(), ec));
  if (ec == boost::beast::http::error::need_more) {
    ec = {};
    return false;
  }
  return ec || p.is_header_done();
}

template <class Parser>
boost::beast::error_code header_eof(const Parser& p) {
  return p.got_some() ? boost::beast::http::error::partial_message
                      : boost::beast::http::error::end_of_stream;
}

struct Limits {
  std::size_t max_target_bytes = 8 * 1024;           // request target; over it: 414
  std::size_t max_header_bytes = 16 * 1024;          // whole header block; over it: 431
  std::size_t max_header_fields = 100;               // over it: 431
  std::size_t max_body_bytes = 1024 * 1024;          // over it: 413
  std::chrono::milliseconds header_timeout{10'000};  // a request's header must arrive within this
  std::chrono::milliseconds body_timeout{30'000};    // and its body within this
  std::chrono::milliseconds idle_timeout{60'000};    // keep-alive connection with no request
  std::chrono::milliseconds write_timeout{30'000};
  std::size_t max_connections = 4096;  // further connections get 503 and are closed
  // A StreamWriter reports "not ready" once this many bytes wait to be sent, and "ready" again
  // below the low-water mark.
  std::size_t stream_high_water = 256 * 1024;
  std::size_t stream_low_water = 64 * 1024;
};

// How one request's body is received; chosen by ServerOptions::body_policy from the header.
struct BodyPlan {
  std::size_t max_bytes = 0;  // the body limit for this request (over it: 413)
  // Non-empty: the body is written to a new file in this directory (never held in memory) and
  // handed over as Responder::body_file(); the request's string body stays empty.
  std::string spool_dir;
};

// A request body spooled to disk. The file is unlinked when this object goes away unless its
// owner moved it elsewhere (rename) and called release().
class BodyFile {
 public:
  BodyFile(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  ~BodyFile();
  BodyFile(const BodyFile&) = delete;
  BodyFile& operator=(const BodyFile&) = delete;

  int fd() const { return fd_.get(); }  // O_RDWR | O_CLOEXEC, positioned at the end
  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  void release() { released_ = true; }  // the path no longer names our file

 private:
  friend class detail::Session;
  UniqueFd fd_;
  std::string path_;
  std::uint64_t size_ = 0;
  bool released_ = false;
};

// The body of a streaming response. Thread-safe; write() never blocks. Producers that may
// outrun the client check ready() after each write and, when it is false, wait: with
// when_ready() (a callback on the connection's executor) or wait_ready() (blocks the calling
// thread; never call it on an I/O thread).
class StreamWriter {
 public:
  explicit StreamWriter(std::shared_ptr<detail::StreamState> state);
  // Dropping a writer without finish() aborts the connection: the client must not mistake a
  // truncated body for a complete one.
  ~StreamWriter();
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // Queues `data` (one chunk). Returns false once the stream is closed (peer gone, write error
  // or deadline); the producer should stop then. Empty data is ignored.
  bool write(std::string data);
  // True while fewer than Limits::stream_high_water bytes are queued and the stream is open.
  bool ready() const;
  bool closed() const;
  // Runs `cb` once, on the connection's executor, when the queue drops below the low-water
  // mark or the stream closes (check closed() in the callback).
  void when_ready(std::function<void()> cb);
  // Blocks until ready, closed, or `timeout`; returns ready().
  bool wait_ready(std::chrono::milliseconds timeout);
  // Ends the body (the last chunk) once everything queued is sent. Idempotent.
  void finish();

 private:
  std::shared_ptr<detail::StreamState> state_;
};

// Completes one request. Call it exactly once, from any thread; if it is destroyed without
// being called the client gets a 500 rather than a hung connection.
class Responder {
 public:
  explicit Responder(std::shared_ptr<detail::Session> session);
  void operator()(Response res) const;
  // Answers with `header` (its body is ignored) and returns the writer for the body. If the
  // header sets Content-Length, exactly that many bytes must follow and go out unchunked;
  // otherwise the body is chunked (or, for an HTTP/1.0 client, ends with the connection).
  // Counts as the one answer.
  std::shared_ptr<StreamWriter> stream(Response header) const;
  // The executor of the connection (for timers tied to this request).
  boost::asio::any_io_executor executor() const;
  // The spooled body, when the body policy asked for one; null otherwise.
  std::shared_ptr<BodyFile> body_file() const;

 private:
  friend class detail::Session;
  struct State;
  std::shared_ptr<State> state_;
};

// The parser of a request whose header has been read and whose body has not.
using HeaderParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// A connection taken over after a request header (ServerOptions::on_header). Every accessor
// and the two hand-backs must be used on the connection's executor (stream().get_executor(), a
// strand, or the connection's own io_context with ServerOptions::context_per_thread). Move-only and
// allocation-free: it holds the session. Dropping it without resume() or respond() closes the
// connection.
class Takeover {
 public:
  Takeover(Takeover&&) noexcept = default;
  Takeover& operator=(Takeover&&) noexcept = default;
  ~Takeover();
  explicit operator bool() const { return session_ != nullptr; }

  boost::beast::tcp_stream& stream() const;
  // Bytes read past the header (the start of the body, or pipelined requests).
  boost::beast::flat_buffer& buffer() const;
  // Holds the header; the body is unread, so the parser may be moved into one of another body
  // type (e.g. buffer_body for relaying).
  HeaderParser& parser() const;
  const Limits& limits() const;
  // State the taker keeps for the life of the connection (e.g. a pool of upstream sockets).
  std::shared_ptr<void>& user_data() const;

  // Gives the connection back at a message boundary: the server reads the next request with the
  // usual deadlines (or closes it when draining).
  void resume() &&;
  // Gives the connection back with a response to write (the server adds Server, framing and a
  // write deadline); the connection closes after it unless `res` and the server keep it alive.
  // Such a close lingers: the request body may be unread, and what the client still sends is
  // discarded (bounded) so that the answer is not lost to a reset.
  void respond(Response res) &&;

 private:
  friend class detail::Session;
  explicit Takeover(std::shared_ptr<detail::Session> session) : session_(std::move(session)) {}
  std::shared_ptr<detail::Session> session_;
};

using Handler = std::function<void(Request&& req, Responder respond)>;
// Called with a request whose header is complete and whose body has not been read. Returning
// an Error answers it at once (e.g. 401 before a large upload) and closes the connection, after
// shutting its sending side and discarding what the client still sends (at most 1 MiB, 2 s), so
// that a client busy writing the body still reads the answer rather than a reset.
using BodyPolicy = std::function<Result<BodyPlan>(const Request& header)>;
// Sees every request header that passed the framing checks, on the connection's executor, before
// the body policy. Moving from `conn` takes the connection over (the server then does nothing
// more with it until the Takeover comes back); leaving it alone lets the request go on to the
// body policy and the handler. Returning an Error answers it (rendered) and closes the
// connection. Must not block.
using HeaderHook = std::function<Status(Takeover& conn)>;

// Renders an Error as a response, for servers whose protocol fixes the error body's shape.
// Accepts a callable (error, version) or (error, status, version); `status` is the one the
// server will send, which differs from http_status(error.code()) for 414 and 431.
class ErrorRenderer {
 public:
  using Fn = std::function<Response(const Error& error, unsigned status, unsigned version)>;
  ErrorRenderer() = default;
  template <class F>
  requires std::is_invocable_r_v<Response, F&, const Error&, unsigned, unsigned> ErrorRenderer(F f)
      : fn_(std::move(f)) {}  // NOLINT(google-explicit-constructor)
  template <class F>
  requires(std::is_invocable_r_v<Response, F&, const Error&, unsigned> &&
           !std::is_invocable_r_v<Response, F&, const Error&, unsigned, unsigned>)
      ErrorRenderer(F f)  // NOLINT(google-explicit-constructor)
      : fn_([f = std::move(f)](const Error& e, unsigned, unsigned version) {
          return f(e, version);
        }) {}
  explicit operator bool() const { return static_cast<bool>(fn_); }
  Response operator()(const Error& error, unsigned status, unsigned version) const {
    return fn_(error, status, version);
  }

 private:
  Fn fn_;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0 picks a free port; see Server::port()
  int io_threads = 0;      // 0 = abx::usable_cpus(): the CPUs this process may run on
  // false: the I/O threads share one io_context and every connection runs on a strand of it
  // (on the io_context itself when one thread runs it: io_threads 1, or one usable CPU).
  // true: each I/O thread runs an io_context of its own, listens on a socket of its own (all
  // bound to the address with SO_REUSEPORT, after a plain bind checked that nobody else has it;
  // the kernel spreads new connections over them) and keeps the connections it accepts, like
  // one event loop per core: a connection's steps, its accept too, never hop between threads
  // (no cross-thread wake-ups, no strand), which is what a proxy's per-request latency is made
  // of — but a handler that blocks stalls every connection of its thread, so only for servers
  // whose I/O threads never block (abxd's gateway). The connection's executor is then its
  // thread's io_context, which serialises its handlers as a strand would.
  bool context_per_thread = false;
  Limits limits;
  std::string server_header = "abx";
  // Optional: per-request body limits and spooling (see BodyPlan). Unset: every request gets
  // limits.max_body_bytes in memory.
  BodyPolicy body_policy;
  // Optional: the shape of errors the server itself produces (framing, limits, 500s). Unset:
  // error_response().
  ErrorRenderer error_renderer;
  // Optional: lets a proxy take connections over after the header (see Takeover).
  HeaderHook on_header;
};

// The listener part of ServerOptions (address, I/O threads, limits) taken from a component's
// own options, which spell those four fields the same way (GatewayOptions,
// CommandServerOptions), plus the Server header it answers with.
template <class ComponentOptions>
ServerOptions listener_options(const ComponentOptions& o, std::string server_header) {
  ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.io_threads = o.io_threads;
  so.limits = o.limits;
  so.server_header = std::move(server_header);
  return so;
}

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

// The framing checks every abx listener applies to a request header before anything else
// (catalogue §2.1): target length (414), header field count (431), Transfer-Encoding other than
// `chunked`, a missing (HTTP/1.1) or repeated Host, and a target that is not origin-form (400).
// Beast's parser already refuses conflicting Content-Length / Transfer-Encoding.
struct FramingError {
  unsigned status;
  Error error;
};
std::optional<FramingError> check_request_header(const boost::beast::http::request_header<>& req,
                                                 const Limits& limits);

// The one mapping from Error to the wire: an HTTP status and {"error": message, "type": type}.
unsigned http_status(ErrorCode code);
// The other way, for clients: an HTTP status as the canonical code (502/503 → kUnavailable; an
// unlisted 5xx → kInternal, 4xx → kInvalidArgument).
ErrorCode error_code_for_status(unsigned status);
Response error_response(const Error& error, unsigned version = 11, bool keep_alive = true);
Response json_response(unsigned status, const boost::json::value& body, unsigned version = 11,
                       bool keep_alive = true);
// The same for an object or an array, serialized as it is: passed to the value overload it would
// first be copied, whole, into a temporary value.
Response json_response(unsigned status, const boost::json::object& body, unsigned version = 11,
                       bool keep_alive = true);
Response json_response(unsigned status, const boost::json::array& body, unsigned version = 11,
                       bool keep_alive = true);
// A response with no body (202 Accepted, 204 No Content, ...).
Response empty_response(boost::beast::http::status status, unsigned version = 11,
                        bool keep_alive = true);

}  // namespace abx::http
