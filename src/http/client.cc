#include "abx/http/client.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <limits>

#include "abx/base/try.h"
#include "abx/http/openssl_error.h"

namespace abx::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;

struct TlsClient::Impl {
  ssl::context ctx{ssl::context::tls_client};
};

TlsClient::TlsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsClient::~TlsClient() = default;

std::string openssl_error_text() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

Result<std::shared_ptr<const TlsClient>> TlsClient::load(const TlsClientOptions& o) {
  if (o.ca_file.empty()) return invalid_argument("TLS: a CA bundle is required");
  if (o.cert_file.empty() != o.key_file.empty())
    return invalid_argument("TLS: a client certificate and its key go together");
  auto impl = std::make_unique<Impl>();
  SSL_CTX* raw = impl->ctx.native_handle();
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(raw, o.ca_file.c_str(), nullptr) != 1)
    return invalid_argument("TLS: cannot load the CA bundle " + o.ca_file + ": " +
                            openssl_error_text());
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(raw, o.cert_file.c_str()) != 1)
      return invalid_argument("TLS: cannot load the certificate " + o.cert_file + ": " +
                              openssl_error_text());
    if (SSL_CTX_use_PrivateKey_file(raw, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return invalid_argument("TLS: cannot load the key " + o.key_file + ": " +
                              openssl_error_text());
    if (SSL_CTX_check_private_key(raw) != 1)
      return invalid_argument("TLS: the key " + o.key_file + " does not match the certificate " +
                              o.cert_file);
  }
  SSL_CTX_set_verify(raw, SSL_VERIFY_PEER, nullptr);
  return std::shared_ptr<const TlsClient>(new TlsClient(std::move(impl)));
}

struct Connection::Impl {
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  // Set for a TLS connection: every read and write goes through it (its timeouts are the tcp
  // stream's, armed by run()).
  std::unique_ptr<ssl::stream<beast::tcp_stream&>> tls;
  beast::flat_buffer buffer;
  std::string host;
  std::uint16_t port = 0;
  std::uint64_t body_limit = std::numeric_limits<std::uint64_t>::max();
  std::atomic<bool> cancelled{false};

  // Runs the io_context until `done` or the deadline; Beast's own timeout closes the socket.
  template <class Op>
  beast::error_code run(std::chrono::milliseconds timeout, Op&& op) {
    beast::error_code result = asio::error::would_block;
    if (cancelled.load()) return asio::error::operation_aborted;
    stream.expires_after(timeout);
    op([&](beast::error_code ec, std::size_t = 0) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }
  // Calls `f` with the stream to read and write: the TLS one when there is one.
  template <class F>
  void io(F&& f) {
    if (tls)
      f(*tls);
    else
      f(stream);
  }
};

Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;

namespace {
Error io_error(const std::string& what, beast::error_code ec) {
  if (ec == beast::error::timeout) return Error(ErrorCode::kDeadlineExceeded, what + ": timed out");
  if (ec.category() == asio::error::get_ssl_category() ||
      ec.category() == ssl::error::get_stream_category())
    return Error(ErrorCode::kUnavailable, what + ": TLS: " + ec.message());
  if (ec == bhttp::error::body_limit) {
    return Error(ErrorCode::kPayloadTooLarge, what + ": the body is over the size limit");
  }
  return unavailable(what + ": " + ec.message());
}
}  // namespace

Result<std::unique_ptr<Connection>> Connection::open(const std::string& host, std::uint16_t port,
                                                     std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->host = host;
  impl->port = port;
  beast::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument("invalid address '" + host + "'");
  tcp::endpoint ep(addr, port);
  ec = impl->run(timeout, [&](auto done) { impl->stream.async_connect(ep, done); });
  if (ec) return io_error("connect to " + host + ":" + std::to_string(port), ec);
  impl->stream.socket().set_option(tcp::no_delay(true), ec);
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

Result<std::unique_ptr<Connection>> Connection::open_tls(const std::string& host,
                                                         std::uint16_t port, const TlsClient& tls,
                                                         std::chrono::milliseconds timeout,
                                                         std::string server_name) {
  ABX_ASSIGN_OR_RETURN(auto c, open(host, port, timeout));
  Impl& impl = *c->impl_;
  if (server_name.empty()) server_name = host;
  impl.tls = std::make_unique<ssl::stream<beast::tcp_stream&>>(impl.stream, tls.impl().ctx);
  SSL* ssl_handle = impl.tls->native_handle();
  beast::error_code ec;
  (void)asio::ip::make_address(server_name, ec);
  if (ec) SSL_set_tlsext_host_name(ssl_handle, server_name.c_str());  // a DNS name (RFC 6066 SNI)
  impl.tls->set_verify_mode(ssl::verify_peer);
  impl.tls->set_verify_callback(ssl::host_name_verification(server_name));
  const std::string where = host + ":" + std::to_string(port);
  ec = impl.run(timeout,
                [&](auto done) { impl.tls->async_handshake(ssl::stream_base::client, done); });
  if (ec) {
    const long verify = SSL_get_verify_result(ssl_handle);
    if (verify != X509_V_OK)
      return Error(ErrorCode::kUnauthenticated, "TLS to " + where +
                                                    ": the server's certificate did not verify (" +
                                                    X509_verify_cert_error_string(verify) +
                                                    "; expected name " + server_name + ")");
    if (ec.category() == asio::error::get_ssl_category())
      return Error(ErrorCode::kUnauthenticated,
                   "TLS to " + where + ": the handshake failed: " + ec.message());
    return io_error("TLS handshake with " + where, ec);
  }
  return c;
}

Result<std::unique_ptr<Connection>> Connection::adopt(UniqueFd fd, std::string host) {
  auto impl = std::make_unique<Impl>();
  impl->host = std::move(host);
  beast::error_code ec;
  impl->stream.socket().assign(tcp::v4(), fd.get(), ec);
  if (ec) return internal_error("cannot adopt a socket: " + ec.message());
  (void)fd.release();  // the socket owns it now
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

void Connection::set_body_limit(std::uint64_t bytes) { impl_->body_limit = bytes; }

Result<Response> Connection::send(Request req, std::chrono::milliseconds timeout) {
  if (req.find(bhttp::field::host) == req.end()) {
    req.set(bhttp::field::host,
            impl_->port == 0 ? impl_->host : impl_->host + ":" + std::to_string(impl_->port));
  }
  req.prepare_payload();
  auto ec = impl_->run(
      timeout, [&](auto done) { impl_->io([&](auto& s) { bhttp::async_write(s, req, done); }); });
  if (ec) return io_error("send request", ec);
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(impl_->body_limit);
  parser.skip(req.method() == bhttp::verb::head);
  ec = impl_->run(timeout, [&](auto done) {
    impl_->io([&](auto& s) { bhttp::async_read(s, impl_->buffer, parser, done); });
  });
  if (ec) return io_error("read response", ec);
  return parser.release();
}

Result<Response> Connection::send_streaming(Request req, const BodyCallback& on_body,
                                            std::chrono::milliseconds idle_timeout) {
  if (req.find(bhttp::field::host) == req.end()) {
    req.set(bhttp::field::host,
            impl_->port == 0 ? impl_->host : impl_->host + ":" + std::to_string(impl_->port));
  }
  req.prepare_payload();
  auto ec = impl_->run(idle_timeout, [&](auto done) {
    impl_->io([&](auto& s) { bhttp::async_write(s, req, done); });
  });
  if (ec) return io_error("send request", ec);
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  parser.skip(req.method() == bhttp::verb::head);
  ec = impl_->run(idle_timeout, [&](auto done) {
    impl_->io([&](auto& s) { bhttp::async_read_header(s, impl_->buffer, parser, done); });
  });
  if (ec) return io_error("read response header", ec);
  // read_some rather than read: a stream's pieces must reach the caller as they arrive, not
  // when a buffer fills.
  char buf[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = buf;
    parser.get().body().size = sizeof buf;
    ec = impl_->run(idle_timeout, [&](auto done) {
      impl_->io([&](auto& s) { bhttp::async_read_some(s, impl_->buffer, parser, done); });
    });
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) return io_error("read response body", ec);
    std::size_t n = sizeof buf - parser.get().body().size;
    if (n > 0 && !on_body(std::string_view(buf, n))) {
      beast::error_code ignored;
      impl_->stream.socket().close(ignored);
      break;
    }
  }
  return Response(std::move(parser.get().base()));
}

void Connection::cancel() {
  impl_->cancelled = true;
  // The socket belongs to whichever thread runs the io_context; closing it there is the only
  // thread-safe way to wake a blocked read.
  asio::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    impl->stream.socket().close(ignored);
  });
}

Result<std::string> Connection::raw_exchange(std::string_view bytes,
                                             std::chrono::milliseconds timeout) {
  auto ec = impl_->run(timeout, [&](auto done) {
    impl_->io(
        [&](auto& s) { asio::async_write(s, asio::buffer(bytes.data(), bytes.size()), done); });
  });
  if (ec) return io_error("write", ec);
  std::string out;
  char buf[4096];
  for (;;) {
    std::size_t n = 0;
    ec = impl_->run(timeout, [&](auto done) {
      impl_->io([&](auto& s) {
        s.async_read_some(asio::buffer(buf), [&, done](beast::error_code e, std::size_t k) {
          n = k;
          done(e);
        });
      });
    });
    out.append(buf, n);
    if (ec == asio::error::eof || ec == asio::error::connection_reset) break;
    if (ec == beast::error::timeout) break;  // the caller inspects what arrived
    if (ec) return io_error("read", ec);
  }
  return out;
}

Result<Response> fetch(const std::string& host, std::uint16_t port, Request req,
                       std::chrono::milliseconds timeout, const TlsClient* tls) {
  auto c =
      tls ? Connection::open_tls(host, port, *tls, timeout) : Connection::open(host, port, timeout);
  if (!c.ok()) return c.error();
  return (*c)->send(std::move(req), timeout);
}

Request make_request(bhttp::verb method, std::string target, std::string body,
                     std::string content_type) {
  Request req{method, target, 11};
  if (!body.empty() || method == bhttp::verb::post || method == bhttp::verb::put) {
    req.set(bhttp::field::content_type, content_type);
  }
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

}  // namespace abx::http
