#include "cluster_tls.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <thread>
#include <vector>

#include "abx/base/log.h"
#include "abx/base/try.h"
#include "abx/http/openssl_error.h"

namespace abx::platform {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;
constexpr auto kTuple = asio::as_tuple(use_awaitable);

// --- StampingBackend ---

http::Response StampingBackend::handle_control(http::Request&& req) {
  req.set(kClusterTransportField, token_);
  return inner_.handle_control(std::move(req));
}
GatewayBackend::Admission StampingBackend::admit(
    const Route& route, const boost::beast::http::request_header<>& header) {
  return inner_.admit(route, header);
}
Result<UniqueFd> StampingBackend::connect_sandbox(const Route& route) {
  return inner_.connect_sandbox(route);
}
Result<UniqueFd> StampingBackend::sandbox_socket(const Route& route) {
  return inner_.sandbox_socket(route);
}
std::optional<Route> StampingBackend::signed_files_route(
    const boost::beast::http::request_header<>& h) {
  return inner_.signed_files_route(h);
}
Result<http::BodyPlan> StampingBackend::control_body_plan(const http::Request& header,
                                                          std::size_t default_max) {
  http::Request stamped(header.base());  // the header only: its body is not read yet
  stamped.set(kClusterTransportField, token_);
  return inner_.control_body_plan(stamped, default_max);
}
bool StampingBackend::serve_control(http::Request& req, const http::Responder& respond) {
  req.set(kClusterTransportField, token_);
  return inner_.serve_control(req, respond);
}

// --- ClusterTls ---

namespace {

constexpr std::chrono::seconds kHandshakeTimeout{10};
constexpr std::size_t kPipeBuffer = 64 * 1024;

// Asio opens, accepts and pairs sockets without SOCK_CLOEXEC: a process abxd starts (a sandbox's
// init) must not inherit them.
void set_cloexec(int fd) { (void)::fcntl(fd, F_SETFD, FD_CLOEXEC); }

// The node's certificate and key, and the cluster CA every peer's certificate must chain to;
// `server`: also asks each client for one and refuses a client without.
Status load_context(ssl::context& ctx, const cluster::TlsFiles& f, bool server) {
  SSL_CTX* raw = ctx.native_handle();
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(raw, f.ca.c_str(), nullptr) != 1)
    return invalid_argument("--cluster-ca " + f.ca + ": " + http::openssl_error_text());
  if (SSL_CTX_use_certificate_chain_file(raw, f.cert.c_str()) != 1)
    return invalid_argument("--cluster-cert " + f.cert + ": " + http::openssl_error_text());
  if (SSL_CTX_use_PrivateKey_file(raw, f.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return invalid_argument("--cluster-key " + f.key + ": " + http::openssl_error_text());
  if (SSL_CTX_check_private_key(raw) != 1)
    return invalid_argument("--cluster-key " + f.key + " does not match --cluster-cert " + f.cert);
  SSL_CTX_set_verify(
      raw, server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER, nullptr);
  if (server) {
    // No session tickets or cache: every connection proves its certificate afresh.
    SSL_CTX_set_session_cache_mode(raw, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(raw, SSL_OP_NO_TICKET);
  }
  return {};
}

// Copies `from` into `to` until either fails or ends, then closes both lowest layers (which ends
// the copy the other way).
template <class From, class To, class Close>
awaitable<void> copy(From& from, To& to, Close close, std::shared_ptr<void> keep) {
  std::vector<char> buf(kPipeBuffer);
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), kTuple);
    if (n > 0) {
      auto [wec, m] = co_await asio::async_write(to, asio::buffer(buf.data(), n), kTuple);
      (void)m;
      if (wec) break;
    }
    if (ec) break;
  }
  close();
}

// One piped connection: a TLS stream and a plain socket, on one strand.
template <class Plain>
struct Pipe : std::enable_shared_from_this<Pipe<Plain>> {
  Pipe(tcp::socket sock, ssl::context& ctx, Plain plain_sock)
      : tls(std::move(sock), ctx), plain(std::move(plain_sock)) {}
  ssl::stream<tcp::socket> tls;
  Plain plain;
  void close() {
    boost::system::error_code ec;
    tls.lowest_layer().shutdown(tcp::socket::shutdown_both, ec);
    tls.lowest_layer().close(ec);
    plain.shutdown(Plain::shutdown_both, ec);
    plain.close(ec);
  }
  void run() {
    auto self = this->shared_from_this();
    auto ex = tls.get_executor();
    asio::co_spawn(ex,
                   copy(
                       tls, plain, [self] { self->close(); }, self),
                   asio::detached);
    asio::co_spawn(ex,
                   copy(
                       plain, tls, [self] { self->close(); }, self),
                   asio::detached);
  }
};

}  // namespace

struct ClusterTls::Impl {
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{
      ioc.get_executor()};
  ssl::context server_ctx{ssl::context::tls_server};
  ssl::context client_ctx{ssl::context::tls_client};
  std::unique_ptr<tcp::acceptor> acceptor;
  std::string upstream_host;
  std::uint16_t upstream_port = 0;
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};
  Logger log{"cluster-tls"};

  awaitable<void> serve(tcp::socket sock);
  void accept();
};

void ClusterTls::Impl::accept() {
  acceptor->async_accept(
      asio::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket sock) {
        if (ec) {
          if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
          auto t = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(50));
          t->async_wait([this, t](boost::system::error_code) { accept(); });
          return;
        }
        set_cloexec(sock.native_handle());
        // TLS records of a request or an answer go out as they are made: without TCP_NODELAY
        // the second small write waits for the ACK of the first (40 ms of delayed ACK a call).
        sock.set_option(tcp::no_delay(true), ec);
        auto ex = sock.get_executor();
        asio::co_spawn(ex, serve(std::move(sock)), asio::detached);
        accept();
      });
}

// A connection to the internal endpoint: the handshake (with its deadline), which refuses a
// client without a certificate of the cluster CA, then the pipe to the internal gateway.
awaitable<void> ClusterTls::Impl::serve(tcp::socket sock) {
  boost::system::error_code ec;
  const auto peer = sock.remote_endpoint(ec);
  const std::string who = ec ? std::string("unknown") : peer.address().to_string();
  auto ex = sock.get_executor();
  tcp::socket up(ex);
  auto pipe = std::make_shared<Pipe<tcp::socket>>(std::move(sock), server_ctx, std::move(up));
  asio::steady_timer deadline(ex, kHandshakeTimeout);
  deadline.async_wait([pipe](boost::system::error_code e) {
    if (!e) pipe->close();  // a handshake that takes too long is dropped
  });
  auto [hec] = co_await pipe->tls.async_handshake(ssl::stream_base::server, kTuple);
  deadline.cancel();
  if (hec) {
    const long verify = SSL_get_verify_result(pipe->tls.native_handle());
    log.warn(
        "internal endpoint: refused " + who + " in the TLS handshake: " +
        (verify != X509_V_OK ? std::string(X509_verify_cert_error_string(verify)) : hec.message()));
    pipe->close();
    co_return;
  }
  std::string subject = "?";
  if (X509* cert = SSL_get1_peer_certificate(pipe->tls.native_handle())) {
    char buf[256];
    X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
    subject = buf;
    X509_free(cert);
  }
  log.debug("internal endpoint: node " + subject + " from " + who);
  tcp::endpoint target(asio::ip::make_address(upstream_host, ec), upstream_port);
  auto [cec] = co_await pipe->plain.async_connect(target, kTuple);
  if (cec) {
    log.warn("internal endpoint: the internal gateway cannot be reached: " + cec.message());
    pipe->close();
    co_return;
  }
  set_cloexec(pipe->plain.native_handle());
  pipe->plain.set_option(tcp::no_delay(true), ec);
  pipe->run();
}

ClusterTls::ClusterTls(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterTls::~ClusterTls() { stop(); }

Result<std::unique_ptr<ClusterTls>> ClusterTls::start(const cluster::TlsFiles& files) {
  auto impl = std::make_unique<Impl>();
  ABX_TRY(load_context(impl->server_ctx, files, true));
  ABX_TRY(load_context(impl->client_ctx, files, false));
  ABX_ASSIGN_OR_RETURN(auto client, http::TlsClient::load({files.ca, files.cert, files.key}));
  for (int i = 0; i < 2; ++i) impl->threads.emplace_back([ioc = &impl->ioc] { ioc->run(); });
  std::unique_ptr<ClusterTls> out(new ClusterTls(std::move(impl)));
  out->client_ = std::move(client);
  return out;
}

Result<std::uint16_t> ClusterTls::listen(const std::string& host, std::uint16_t port,
                                         const std::string& upstream_host,
                                         std::uint16_t upstream_port) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument("--cluster-listen: invalid address '" + host + "'");
  const std::string where = host + ":" + std::to_string(port);
  auto a = std::make_unique<tcp::acceptor>(impl_->ioc);
  tcp::endpoint ep(addr, port);
  a->open(ep.protocol(), ec);
  if (!ec) a->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a->bind(ep, ec);
  if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return unavailable("--cluster-listen: cannot listen on " + where + ": " + ec.message());
  set_cloexec(a->native_handle());
  const std::uint16_t bound = a->local_endpoint().port();
  impl_->upstream_host = upstream_host;
  impl_->upstream_port = upstream_port;
  impl_->acceptor = std::move(a);
  asio::post(impl_->acceptor->get_executor(), [impl = impl_.get()] { impl->accept(); });
  return bound;
}

Result<UniqueFd> ClusterTls::tunnel(const std::string& host, std::uint16_t port,
                                    std::chrono::milliseconds timeout) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument("node address '" + host + "' is not an IP address");
  const std::string where = host + ":" + std::to_string(port);
  auto strand = asio::make_strand(impl_->ioc);
  asio::local::stream_protocol::socket mine(strand);
  asio::local::stream_protocol::socket theirs(impl_->ioc);
  asio::local::connect_pair(mine, theirs, ec);
  if (ec) return internal_error("socketpair: " + ec.message());
  set_cloexec(mine.native_handle());
  set_cloexec(theirs.native_handle());
  auto pipe = std::make_shared<Pipe<asio::local::stream_protocol::socket>>(
      tcp::socket(strand), impl_->client_ctx, std::move(mine));
  SSL_set_verify(pipe->tls.native_handle(), SSL_VERIFY_PEER, nullptr);
  pipe->tls.set_verify_callback(ssl::host_name_verification(host));
  auto done = std::make_shared<std::promise<Status>>();
  auto result = done->get_future();
  asio::co_spawn(
      strand,
      [pipe, ep = tcp::endpoint(addr, port), timeout, done, where]() -> awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        asio::steady_timer deadline(ex, timeout);
        deadline.async_wait([pipe](boost::system::error_code e) {
          if (!e) pipe->close();
        });
        auto [cec] = co_await pipe->tls.lowest_layer().async_connect(ep, kTuple);
        if (cec) {
          deadline.cancel();
          done->set_value(unavailable("connect to " + where + ": " + cec.message()));
          co_return;
        }
        boost::system::error_code nec;
        set_cloexec(pipe->tls.lowest_layer().native_handle());
        pipe->tls.lowest_layer().set_option(tcp::no_delay(true), nec);
        auto [hec] = co_await pipe->tls.async_handshake(ssl::stream_base::client, kTuple);
        const bool expired = deadline.expiry() <= std::chrono::steady_clock::now();
        deadline.cancel();
        if (hec) {
          const long verify = SSL_get_verify_result(pipe->tls.native_handle());
          done->set_value(
              verify != X509_V_OK
                  ? Error(ErrorCode::kUnauthenticated,
                          "TLS to " + where + ": the node's certificate did not verify (" +
                              X509_verify_cert_error_string(verify) + ")")
                  : Error(expired ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnauthenticated,
                          "TLS to " + where + ": " + hec.message()));
          pipe->close();
          co_return;
        }
        done->set_value(Status{});
        pipe->run();
      },
      asio::detached);
  // The coroutine answers within `timeout` (its deadline closes the socket); a stopped
  // io_context never runs it.
  if (result.wait_for(timeout + std::chrono::seconds(5)) != std::future_status::ready)
    return unavailable("TLS to " + where + ": the tunnel thread did not answer (shutting down?)");
  Status s = result.get();
  if (!s.ok()) return s.error();
  theirs.non_blocking(true, ec);
  return UniqueFd(theirs.release());
}

void ClusterTls::stop() {
  if (impl_->stopped.exchange(true)) return;
  if (impl_->acceptor) {
    asio::post(impl_->ioc, [impl = impl_.get()] {
      boost::system::error_code ec;
      impl->acceptor->close(ec);
    });
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
}

}  // namespace abx::platform
