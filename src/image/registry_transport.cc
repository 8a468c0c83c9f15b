#include "registry_transport.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/file_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <optional>

#include "abx/base/try.h"

namespace abx::image::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kErrorBodyCap = 64 * 1024;

bool is_ipv6_literal(std::string_view host) { return host.find(':') != std::string_view::npos; }

}  // namespace

std::pair<std::string, std::uint16_t> split_host_port(std::string_view a) {
  std::string host;
  std::string_view rest;
  if (!a.empty() && a.front() == '[') {
    auto close = a.find(']');
    if (close == std::string_view::npos) return {std::string(a), 0};
    host = std::string(a.substr(1, close - 1));
    rest = a.substr(close + 1);
  } else if (auto colon = a.rfind(':'); colon != std::string_view::npos && a.find(':') == colon) {
    host = std::string(a.substr(0, colon));
    rest = a.substr(colon);
  } else {
    return {std::string(a), 0};
  }
  if (rest.size() < 2 || rest.front() != ':') return {host, 0};
  unsigned long port = 0;
  for (char c : rest.substr(1)) {
    if (c < '0' || c > '9' || port > 65535) return {host, 0};
    port = port * 10 + static_cast<unsigned long>(c - '0');
  }
  return {host, port > 65535 ? 0 : static_cast<std::uint16_t>(port)};
}

std::string Url::authority() const {
  std::string h = is_ipv6_literal(host) ? "[" + host + "]" : host;
  if (port != 0 && port != (tls ? 443 : 80)) h += ":" + std::to_string(port);
  return h;
}

std::string Url::str() const { return (tls ? "https://" : "http://") + authority() + target; }

Result<Url> parse_url(std::string_view text) {
  Url u;
  std::string_view rest;
  if (text.starts_with("https://")) {
    rest = text.substr(8);
  } else if (text.starts_with("http://")) {
    u.tls = false;
    rest = text.substr(7);
  } else {
    return invalid_argument("not an http(s) URL: '" + std::string(text) + "'");
  }
  auto slash = rest.find_first_of("/?");
  std::string_view auth = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    u.target = std::string(rest.substr(slash));
    if (u.target.front() == '?') u.target.insert(0, "/");
  }
  if (auth.empty() || auth.find('@') != std::string_view::npos) {
    return invalid_argument("URL without a usable host: '" + std::string(text) + "'");
  }
  std::tie(u.host, u.port) = split_host_port(auth);
  if (u.host.empty()) return invalid_argument("URL without a host: '" + std::string(text) + "'");
  if (auto hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
  return u;
}

Result<Url> resolve_url(const Url& base, std::string_view location) {
  if (location.starts_with("http://") || location.starts_with("https://")) {
    return parse_url(location);
  }
  Url u = base;
  if (location.starts_with("//")) {
    return parse_url(std::string(base.tls ? "https:" : "http:") + std::string(location));
  }
  if (location.starts_with("/")) {
    u.target = std::string(location);
    return u;
  }
  // Relative to the base path's directory (rare for registries, but legal).
  auto path_end = base.target.find('?');
  std::string path = base.target.substr(0, path_end);
  u.target = path.substr(0, path.rfind('/') + 1) + std::string(location);
  return u;
}

bool is_loopback_host(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  beast::error_code ec;
  auto addr = asio::ip::make_address(std::string(host), ec);
  return !ec && addr.is_loopback();
}

struct Transport::Impl {
  TransportOptions options;
  asio::ssl::context ssl{asio::ssl::context::tls_client};
};

Transport::Transport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transport::~Transport() = default;

Result<std::unique_ptr<Transport>> Transport::create(TransportOptions options) {
  auto impl = std::make_unique<Impl>();
  beast::error_code ec;
  impl->ssl.set_default_verify_paths(ec);
  if (ec) return internal_error("cannot load the system CA certificates: " + ec.message());
  if (!options.ca_file.empty()) {
    impl->ssl.load_verify_file(options.ca_file, ec);
    if (ec) {
      return invalid_argument("cannot load CA file '" + options.ca_file + "': " + ec.message());
    }
  }
  impl->ssl.set_verify_mode(asio::ssl::verify_peer);
  SSL_CTX_set_min_proto_version(impl->ssl.native_handle(), TLS1_2_VERSION);
  impl->options = std::move(options);
  return std::unique_ptr<Transport>(new Transport(std::move(impl)));
}

namespace {

// One connection: plain or TLS, driven synchronously on its own io_context with a deadline on
// every operation (tcp_stream's timer closes the socket when it passes).
class Conn {
 public:
  Conn(asio::ssl::context& ssl, bool tls) {
    if (tls) {
      tls_.emplace(ioc_, ssl);
    } else {
      plain_.emplace(ioc_);
    }
  }

  beast::tcp_stream& lowest() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }

  template <class F>
  auto with_stream(F&& f) {
    if (tls_) return f(*tls_);
    return f(*plain_);
  }

  template <class Op>
  beast::error_code run(std::chrono::milliseconds timeout, Op&& op) {
    beast::error_code result = asio::error::would_block;
    lowest().expires_after(timeout);
    op([&](beast::error_code ec, std::size_t = 0) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  // Resolution has no stream to time it out: bound it with run_for and cancel the resolver.
  beast::error_code resolve(const std::string& host, std::uint16_t port,
                            std::chrono::milliseconds timeout, tcp::resolver::results_type& out) {
    tcp::resolver resolver(ioc_);
    beast::error_code result = asio::error::would_block;
    resolver.async_resolve(host, std::to_string(port),
                           [&](beast::error_code ec, tcp::resolver::results_type r) {
                             result = ec;
                             out = std::move(r);
                           });
    ioc_.restart();
    ioc_.run_for(timeout);
    if (result == asio::error::would_block) {
      resolver.cancel();
      ioc_.restart();
      ioc_.run();
      return beast::error::timeout;
    }
    return result;
  }

  std::optional<beast::ssl_stream<beast::tcp_stream>>& tls() { return tls_; }

 private:
  asio::io_context ioc_;
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
};

bool is_verify_failure(const beast::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED;
}

template <class Message>
void add_headers(Message& m, const HttpRequest& req) {
  m.set(bhttp::field::host, req.url.authority());
  m.set(bhttp::field::user_agent, "abx");
  for (const auto& [k, v] : req.headers) m.set(k, v);
}

// `what` `where` failed with `ec`: kDeadlineExceeded for a timeout, else kUnavailable.
Error io_failure(const std::string& what, const std::string& where, beast::error_code ec) {
  if (ec == beast::error::timeout) {
    return Error(ErrorCode::kDeadlineExceeded, what + " " + where + ": timed out");
  }
  return unavailable(what + " " + where + ": " + ec.message());
}

// Resolves, connects and (for https) shakes hands with the request's host; `failure` says
// which step failed.
Status open_conn(Conn& conn, const HttpRequest& req, const TransportOptions& opt,
                 FailureKind& failure) {
  const std::string where = req.url.authority();
  auto io_error = [&](const std::string& what, beast::error_code ec) -> Error {
    return io_failure(what, where, ec);
  };
  tcp::resolver::results_type endpoints;
  auto ec = conn.resolve(req.url.host, req.url.effective_port(), opt.connect_timeout, endpoints);
  if (ec) {
    failure = FailureKind::kConnect;
    return io_error("cannot resolve", ec);
  }
  ec = conn.run(opt.connect_timeout, [&](auto done) {
    conn.lowest().async_connect(endpoints,
                                [done](beast::error_code e, const tcp::endpoint&) { done(e); });
  });
  if (ec) {
    failure = FailureKind::kConnect;
    return io_error("cannot connect to", ec);
  }
  if (auto& tls = conn.tls()) {
    // An address is not a server name (RFC 6066 §3): SNI only for names.
    beast::error_code not_an_address;
    asio::ip::make_address(req.url.host, not_an_address);
    if (not_an_address && !SSL_set_tlsext_host_name(tls->native_handle(), req.url.host.c_str())) {
      return internal_error("cannot set the TLS server name for " + where);
    }
    tls->set_verify_callback(asio::ssl::host_name_verification(req.url.host));
    ec = conn.run(opt.connect_timeout,
                  [&](auto done) { tls->async_handshake(asio::ssl::stream_base::client, done); });
    if (ec) {
      if (is_verify_failure(ec)) {
        failure = FailureKind::kTlsVerify;
        return unavailable("TLS with " + where +
                           ": the server's certificate is not trusted or does not name the host (" +
                           ec.message() + ")");
      }
      failure = FailureKind::kTlsHandshake;
      return io_error("TLS handshake with", ec);
    }
  }
  return {};
}

// Writes the request (its body from req.body_file or req.body).
Status write_request(Conn& conn, const HttpRequest& req, std::chrono::milliseconds read_timeout) {
  const std::string where = req.url.authority();
  beast::error_code ec;
  // The request: written piece by piece so that the deadline bounds each write, not the whole
  // upload of a large blob.
  auto write_all = [&](auto& msg) -> beast::error_code {
    bhttp::serializer<true, typename std::decay_t<decltype(msg)>::body_type> sr(msg);
    while (!sr.is_done()) {
      auto e = conn.run(read_timeout, [&](auto done) {
        conn.with_stream([&](auto& s) { bhttp::async_write_some(s, sr, done); });
      });
      if (e) return e;
    }
    return {};
  };
  if (!req.body_file.empty()) {
    bhttp::request<bhttp::file_body> msg{req.method, req.url.target, 11};
    add_headers(msg, req);
    msg.body().open(req.body_file.c_str(), beast::file_mode::scan, ec);
    if (ec) return internal_error("cannot open '" + req.body_file + "': " + ec.message());
    msg.prepare_payload();
    ec = write_all(msg);
  } else {
    bhttp::request<bhttp::string_body> msg{req.method, req.url.target, 11};
    add_headers(msg, req);
    msg.body() = req.body;
    msg.prepare_payload();
    ec = write_all(msg);
  }
  if (ec) return io_failure("cannot send to", where, ec);
  return {};
}

}  // namespace

// The response stays here: reading its header and body sets last_failure_ at each exit.
Result<HttpResponse> Transport::send(const HttpRequest& req, std::uint64_t body_limit,
                                     const BodySink* sink) {
  last_failure_ = FailureKind::kOther;
  const auto& opt = impl_->options;
  const std::string where = req.url.authority();
  auto io_error = [&](const std::string& what, beast::error_code ec) -> Error {
    return io_failure(what, where, ec);
  };

  Conn conn(impl_->ssl, req.url.tls);
  ABX_TRY(open_conn(conn, req, opt, last_failure_));
  ABX_TRY(write_request(conn, req, opt.read_timeout));

  // The response. The parser's own limit only guards framing; our limit is counted below so
  // that a non-2xx body can be cut off at kErrorBodyCap instead of failing the parse.
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(std::max<std::uint64_t>(body_limit, kErrorBodyCap));
  parser.skip(req.method == bhttp::verb::head);
  beast::error_code ec = conn.run(opt.read_timeout, [&](auto done) {
    conn.with_stream([&](auto& s) { bhttp::async_read_header(s, buffer, parser, done); });
  });
  if (ec == bhttp::error::body_limit) {
    last_failure_ = FailureKind::kNone;
    return Error(ErrorCode::kPayloadTooLarge, "response from " + where +
                                                  " is over the size limit of " +
                                                  std::to_string(body_limit) + " bytes");
  }
  if (ec) return io_error("cannot read the response from", ec);

  HttpResponse res;
  res.status = parser.get().result_int();
  res.headers = parser.get().base();
  const bool ok = res.status / 100 == 2;
  const std::uint64_t limit = ok ? body_limit : kErrorBodyCap;
  std::uint64_t received = 0;
  // Beast sizes each read by the buffer's free capacity (at least 512 bytes, at most 64 KiB):
  // without room, a blob would arrive in 512-byte reads, each a recvmsg, a timer and a sink call.
  buffer.reserve(buffer.size() + 64 * 1024);
  std::string buf(64 * 1024, '\0');
  while (!parser.is_done()) {
    parser.get().body().data = buf.data();
    parser.get().body().size = buf.size();
    ec = conn.run(opt.read_timeout, [&](auto done) {
      conn.with_stream([&](auto& s) { bhttp::async_read_some(s, buffer, parser, done); });
    });
    if (ec == bhttp::error::need_buffer) ec = {};
    std::size_t n = buf.size() - parser.get().body().size;
    if (n > 0) {
      std::string_view piece(buf.data(), n);
      if (!ok) {
        res.body.append(piece.substr(0, kErrorBodyCap - std::min(res.body.size(), kErrorBodyCap)));
        if (res.body.size() >= kErrorBodyCap) break;  // enough to explain the error
      } else {
        received += n;
        if (received > limit) {
          last_failure_ = FailureKind::kNone;
          return Error(ErrorCode::kPayloadTooLarge, "response from " + where +
                                                        " is over the size limit of " +
                                                        std::to_string(limit) + " bytes");
        }
        if (sink != nullptr) {
          if (auto st = (*sink)(piece); !st.ok()) {
            last_failure_ = FailureKind::kNone;
            return st.error();
          }
        } else {
          res.body.append(piece);
        }
      }
    }
    if (ec == bhttp::error::body_limit) {
      last_failure_ = FailureKind::kNone;
      return Error(ErrorCode::kPayloadTooLarge, "response from " + where +
                                                    " is over the size limit of " +
                                                    std::to_string(limit) + " bytes");
    }
    if (ec) return io_error("cannot read the response body from", ec);
  }
  last_failure_ = FailureKind::kNone;
  return res;
}

}  // namespace abx::image::detail
