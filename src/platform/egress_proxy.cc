// The transparent egress proxy (egress_proxy.h): one Flow object per redirected connection,
// living on its own strand, in three phases: sniff (read the first bytes under a deadline),
// connect (to the original destination, under a deadline) and relay (both ways, half-close
// passed on). Every timer is the flow's one `timer_`, re-armed per phase; every handler first
// checks that its phase is still current, so a late completion after a reset does nothing.
#include "egress_proxy.h"

#include <netinet/in.h>
#include <openssl/ssl.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "abx/base/ascii.h"
#include "abx/base/log.h"
#include "abx/base/try.h"
#include "abx/egress/sniff.h"
#include "abx/runtime/netns.h"
#include "egress_h2.h"

namespace abx::platform {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;

namespace {

constexpr std::size_t kRelayBuffer = 64 * 1024;
// Backoff when accept fails for lack of descriptors or memory (it would fail again at once).
constexpr std::chrono::milliseconds kAcceptBackoff{100};

std::string ip_str(std::uint32_t ip) { return asio::ip::address_v4(ip).to_string(); }

// IP_FREEBIND: a listener may be bound to an address before the host has it (a sandbox link's
// gateway address, before or between its links).
using Freebind = asio::detail::socket_option::boolean<IPPROTO_IP, IP_FREEBIND>;

// Closes with an RST instead of a FIN (SO_LINGER 0): the sandbox's client sees a refused or
// broken connection at once, and no half-open state lingers.
void reset(tcp::socket& s) {
  error_code ignored;
  if (!s.is_open()) return;
  s.set_option(asio::socket_base::linger(true, 0), ignored);
  s.close(ignored);
}

constexpr std::size_t kMaxHeaderBytes = 64 * 1024;  // one request's or response's header

// A Host header's name: lower case, without a :port or a trailing dot.
std::string host_name_of(std::string_view host) {
  auto colon = host.rfind(':');
  if (colon != std::string_view::npos &&
      host.find_first_not_of("0123456789", colon + 1) == std::string_view::npos)
    host = host.substr(0, colon);
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  return ascii_lower(host);
}

// One message (request or response) from `in` to `out`: the header as the parser holds it
// (changed by the caller), then the body as it arrives, re-framed by the serializer.
// `chunk` (kRelayBuffer bytes) is the flow's, reused by every message: no allocation per request.
template <bool isRequest, class In, class Out, class Touch>
awaitable<error_code> relay_message(In& in, beast::flat_buffer& buf,
                                    bhttp::parser<isRequest, bhttp::buffer_body>& p, Out& out,
                                    char* chunk, std::uint64_t& bytes, Touch touch) {
  error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  bhttp::serializer<isRequest, bhttp::buffer_body> sr{p.get()};
  do {
    if (!p.is_done()) {
      p.get().body().data = chunk;
      p.get().body().size = kRelayBuffer;
      co_await bhttp::async_read(in, buf, p, tok);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) co_return ec;
      p.get().body().size = kRelayBuffer - p.get().body().size;
      p.get().body().data = chunk;
      p.get().body().more = !p.is_done();
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
      p.get().body().more = false;  // else the serializer waits for a body that never comes
    }
    std::size_t n = co_await bhttp::async_write(out, sr, tok);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) co_return ec;
    bytes += n;
    touch();
  } while (!p.is_done() && !sr.is_done());
  co_return ec;
}

// Bytes from `in` to `out` until either fails or ends.
template <class In, class Out, class Touch>
awaitable<void> pump_bytes(In& in, Out& out, std::uint64_t& bytes, Touch touch) {
  error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  std::vector<char> buf(kRelayBuffer);
  for (;;) {
    std::size_t n = co_await in.async_read_some(asio::buffer(buf), tok);
    if (n > 0) {
      co_await asio::async_write(out, asio::buffer(buf.data(), n), tok);
      bytes += n;
      touch();
    }
    if (ec) co_return;
  }
}

// Upstream TLS sessions, so that the next flow to the same name and address resumes instead of
// repeating a full handshake (the upstream's signature, the proxy's chain verification): what a
// sandbox that opens a connection per request pays twice over otherwise. A session is taken out
// when offered (RFC 8446 C.4: a ticket is used once) and the server's new tickets are put back.
// Keyed by name and address, so a session verified for one name is never offered for another.
class UpstreamSessions {
 public:
  static constexpr std::size_t kMax = 1024;
  struct Free {
    void operator()(SSL_SESSION* s) const { SSL_SESSION_free(s); }
  };
  using Ptr = std::unique_ptr<SSL_SESSION, Free>;

  Ptr take(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return nullptr;
    Ptr s = std::move(it->second);
    by_key_.erase(it);
    return s;
  }
  void put(const std::string& key, Ptr s) {
    if (!s || SSL_SESSION_is_resumable(s.get()) != 1) return;
    std::lock_guard lock(mu_);
    if (by_key_.size() >= kMax && !by_key_.count(key)) by_key_.clear();
    by_key_[key] = std::move(s);
  }

  // The upstream connection a new session belongs to: set on its SSL (ex_data) for the
  // connection's life (it lives in the flow's coroutine frame, before the stream).
  struct Slot {
    UpstreamSessions* sessions;
    std::string key;
  };
  static int slot_index() {
    static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return index;
  }
  // SSL_CTX_sess_set_new_cb. A copy is kept: OpenSSL marks the connection's own session not
  // resumable when the connection ends without a close_notify, which the proxy's do (it closes
  // both sides at once when a flow ends). 0: OpenSSL keeps and frees its reference.
  static int on_new_session(SSL* ssl, SSL_SESSION* session) {
    auto* slot = static_cast<Slot*>(SSL_get_ex_data(ssl, slot_index()));
    if (slot) slot->sessions->put(slot->key, Ptr(SSL_SESSION_dup(session)));
    return 0;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, Ptr> by_key_;  // guarded by mu_
};

}  // namespace

class Flow;

// One listening socket (an address of the proxy's).
struct Listener {
  explicit Listener(asio::io_context& io)
      : acceptor(asio::make_strand(io)), backoff(acceptor.get_executor()) {}
  tcp::acceptor acceptor;      // on its own strand
  asio::steady_timer backoff;  // same strand
};

struct EgressProxy::Impl : std::enable_shared_from_this<EgressProxy::Impl> {
  Impl(asio::io_context& io_, EgressProxyHooks hooks_, EgressProxyOptions opt_)
      : io(io_), hooks(std::move(hooks_)), opt(opt_) {}

  // A listener bound to `at` (IP_FREEBIND: the address need not be the host's yet).
  Result<std::shared_ptr<Listener>> open_listener(const tcp::endpoint& at);
  void accept(const std::shared_ptr<Listener>& l);
  void on_accept(const std::shared_ptr<Listener>& l, const error_code& ec, tcp::socket sock);
  static void close(const std::shared_ptr<Listener>& l);

  asio::io_context& io;
  const EgressProxyHooks hooks;
  const EgressProxyOptions opt;
  const Logger log{"egress-proxy"};
  std::uint16_t port = 0;
  UpstreamSessions upstream_sessions;

  std::mutex mu;
  // guarded by mu: the listening sockets, by address (host byte order)
  std::map<std::uint32_t, std::shared_ptr<Listener>> listeners;
  bool stopped = false;                                       // guarded by mu
  std::unordered_map<Flow*, std::weak_ptr<Flow>> flows;       // guarded by mu; every live flow
  std::unordered_map<std::uint32_t, std::size_t> per_source;  // guarded by mu; live flows each
};

class Flow : public std::enable_shared_from_this<Flow> {
 public:
  Flow(std::shared_ptr<EgressProxy::Impl> proxy, tcp::socket client, std::uint32_t source)
      : proxy_(std::move(proxy)),
        client_(std::move(client)),
        upstream_(client_.get_executor()),
        timer_(client_.get_executor()),
        source_(source) {}

  ~Flow() {
    std::lock_guard lock(proxy_->mu);
    if (proxy_->flows.erase(this) == 0) return;  // never admitted
    auto it = proxy_->per_source.find(source_);
    if (it != proxy_->per_source.end() && --it->second == 0) proxy_->per_source.erase(it);
  }
  Flow(const Flow&) = delete;
  Flow& operator=(const Flow&) = delete;

  tcp::socket::executor_type executor() { return client_.get_executor(); }

  // On the strand, once.
  void start();
  // Resets both sides; reports an allowed flow. On the strand; any phase.
  void abort(std::string_view why);
  // Refused before start (over the limit, or stopping): reset only.
  void refuse() { reset(client_); }

 private:
  enum class Phase { kSniff, kConnect, kRelay, kDone };

  // One direction of the relay.
  struct Pipe {
    tcp::socket* from;
    tcp::socket* to;
    std::uint64_t* bytes;
    std::unique_ptr<char[]> buf;
    bool done = false;
  };

  void read_head();
  void on_head(const error_code& ec, std::size_t n);
  void decide();
  void on_connect(const error_code& ec);
  void on_head_written(const error_code& ec, std::size_t n);
  void pump(Pipe& p);
  void on_read(Pipe& p, const error_code& ec, std::size_t n);
  void on_written(Pipe& p, const error_code& read_ec, const error_code& ec, std::size_t n);
  void end_of(Pipe& p, const error_code& ec);
  void arm_idle();
  std::chrono::milliseconds idle_limit() const;
  void report();

  // Interception (a transform rule matched): the rest of the flow, on its strand.
  static awaitable<void> intercept(std::shared_ptr<Flow> self);
  template <class Client, class Upstream>
  awaitable<void> serve_http(Client& client, Upstream& upstream, beast::flat_buffer& cbuf);
  // After a 101: bytes both ways (what was read ahead into `cbuf` and `ubuf` first) until
  // either side ends, which finishes the flow.
  template <class Client, class Upstream>
  awaitable<void> splice_upgraded(Client& client, Upstream& upstream, beast::flat_buffer& cbuf,
                                  beast::flat_buffer& ubuf);
  template <class Client, class Upstream>
  awaitable<void> respond_and_close(Client& client, Upstream& upstream, bhttp::status status,
                                    std::string why);
  void touch() { last_activity_ = std::chrono::steady_clock::now(); }
  void transform_event(EgressTransformEvent ev);
  void finish();

  std::shared_ptr<EgressProxy::Impl> proxy_;
  tcp::socket client_;
  tcp::socket upstream_;
  asio::steady_timer timer_;    // sniff deadline, then connect deadline, then idle check
  const std::uint32_t source_;  // the peer's address at accept (0: not IPv4), for the limits
  Phase phase_ = Phase::kSniff;
  EgressFlow flow_;
  bool allowed_ = false;
  bool timed_out_ = false;
  bool client_eof_ = false;
  bool intercept_ = false;  // a transform rule matched the flow's name: not a byte relay
  bool client_h2_ = false;  // the sandbox's ClientHello offered h2 (ALPN)
  std::string head_;        // the first bytes, up to kMaxSniffBytes, sent upstream before the relay
  std::size_t head_len_ = 0;
  std::uint64_t bytes_out_ = 0, bytes_in_ = 0;
  std::chrono::steady_clock::time_point last_activity_;
  Pipe up_{&client_, &upstream_, &bytes_out_, nullptr};
  Pipe down_{&upstream_, &client_, &bytes_in_, nullptr};
};

void Flow::start() {
  if (phase_ != Phase::kSniff) return;  // stop() got here first
  const auto& opt = proxy_->opt;
  const auto& hooks = proxy_->hooks;
  error_code ec;
  client_.set_option(tcp::no_delay(true), ec);
  tcp::endpoint peer = client_.remote_endpoint(ec);
  tcp::endpoint local = client_.local_endpoint(ec);
  if (ec || !peer.address().is_v4()) {
    abort("not an IPv4 connection");
    return;
  }
  flow_.src_ip = peer.address().to_v4().to_uint();
  int fd = client_.native_handle();
  auto dst = hooks.original_destination ? hooks.original_destination(fd)
                                        : runtime::original_destination(fd);
  if (!dst.ok()) {
    proxy_->log.warn("connection from " + ip_str(flow_.src_ip) +
                     " has no original destination: " + dst.error().message());
    abort("no original destination");
    return;
  }
  flow_.dst_ip = dst->first;
  flow_.dst_port = dst->second;
  // Conntrack reports an unrewritten connection's own destination: this listener. Relaying it
  // would connect the proxy to itself, over and over.
  if (local.address().is_v4() && flow_.dst_ip == local.address().to_v4().to_uint() &&
      flow_.dst_port == local.port()) {
    proxy_->log.warn("connection from " + ip_str(flow_.src_ip) +
                     " was not redirected (its destination is the proxy itself)");
    abort("not redirected");
    return;
  }
  if (flow_.dst_port != 80 && flow_.dst_port != 443) {
    decide();  // nothing to sniff; deciding now also serves server-speaks-first protocols
    return;
  }
  head_.resize(egress::kMaxSniffBytes);
  timer_.expires_after(opt.sniff_timeout);
  timer_.async_wait([self = shared_from_this()](const error_code& tec) {
    if (tec || self->phase_ != Phase::kSniff) return;
    self->timed_out_ = true;
    error_code ignored;
    self->client_.cancel(ignored);  // on_head decides with what has arrived
  });
  read_head();
}

void Flow::read_head() {
  client_.async_read_some(
      asio::buffer(head_.data() + head_len_, head_.size() - head_len_),
      [self = shared_from_this()](const error_code& ec, std::size_t n) { self->on_head(ec, n); });
}

void Flow::on_head(const error_code& ec, std::size_t n) {
  if (phase_ != Phase::kSniff) return;
  head_len_ += n;
  if (ec == asio::error::eof) {
    client_eof_ = true;
  } else if (ec && !(timed_out_ && ec == asio::error::operation_aborted)) {
    abort("client: " + ec.message());  // gone before a decision: nothing to report
    return;
  }
  std::string_view got(head_.data(), head_len_);
  egress::SniffResult r =
      flow_.dst_port == 443 ? egress::tls_server_name(got) : egress::http_host(got);
  if (r.kind == egress::SniffResult::Kind::kNeedMore && !timed_out_ && !client_eof_ &&
      head_len_ < head_.size()) {
    read_head();
    return;
  }
  client_h2_ = flow_.dst_port == 443 && r.alpn_h2;
  if (r.kind == egress::SniffResult::Kind::kFound) {
    flow_.domain = std::move(r.name);
  } else if (r.kind == egress::SniffResult::Kind::kMalformed) {
    proxy_->log.debug("flow " + ip_str(flow_.src_ip) + " -> " + ip_str(flow_.dst_ip) + ":" +
                      std::to_string(flow_.dst_port) + ": " + r.reason);
  }
  decide();
}

void Flow::decide() {
  error_code ignored;
  timer_.cancel(ignored);
  const auto& hooks = proxy_->hooks;
  bool allowed = false;
  try {
    allowed = hooks.allow(flow_);
  } catch (const std::exception& e) {
    proxy_->log.error(std::string("egress allow hook threw: ") + e.what());
  }
  if (!allowed) {
    phase_ = Phase::kDone;
    report();
    reset(client_);
    return;
  }
  allowed_ = true;
  if (flow_.domain && hooks.transform &&
      (flow_.dst_port == 80 || (flow_.dst_port == 443 && hooks.server_tls && hooks.upstream_tls))) {
    try {
      intercept_ = hooks.transform(flow_, *flow_.domain).has_value();
    } catch (const std::exception& e) {
      proxy_->log.error(std::string("egress transform hook threw: ") + e.what());
      abort("transform hook");
      return;
    }
  }
  phase_ = Phase::kConnect;
  tcp::endpoint to = hooks.upstream
                         ? hooks.upstream(flow_)
                         : tcp::endpoint(asio::ip::address_v4(flow_.dst_ip), flow_.dst_port);
  timer_.expires_after(proxy_->opt.connect_timeout);
  timer_.async_wait([self = shared_from_this()](const error_code& tec) {
    if (tec || self->phase_ != Phase::kConnect) return;
    self->abort("connect timed out");
  });
  upstream_.async_connect(
      to, [self = shared_from_this()](const error_code& ec) { self->on_connect(ec); });
}

void Flow::on_connect(const error_code& ec) {
  if (phase_ != Phase::kConnect) return;
  if (ec) {
    abort("connect: " + ec.message());
    return;
  }
  error_code ignored;
  timer_.cancel(ignored);
  upstream_.set_option(tcp::no_delay(true), ignored);
  phase_ = Phase::kRelay;
  if (intercept_) {
    touch();
    arm_idle();
    asio::co_spawn(executor(), intercept(shared_from_this()),
                   [self = shared_from_this()](std::exception_ptr e) {
                     if (!e) return;
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& ex) {
                       self->proxy_->log.error(std::string("egress interception: ") + ex.what());
                     }
                     self->abort("interception failed");
                   });
    return;
  }
  up_.buf.reset(new char[kRelayBuffer]);
  down_.buf.reset(new char[kRelayBuffer]);
  last_activity_ = std::chrono::steady_clock::now();
  arm_idle();
  pump(down_);  // the destination may speak first
  if (head_len_ == 0) {
    on_head_written({}, 0);
    return;
  }
  asio::async_write(upstream_, asio::buffer(head_.data(), head_len_),
                    [self = shared_from_this()](const error_code& wec, std::size_t n) {
                      self->on_head_written(wec, n);
                    });
}

void Flow::on_head_written(const error_code& ec, std::size_t n) {
  if (phase_ != Phase::kRelay) return;
  if (ec) {
    abort("write to destination: " + ec.message());
    return;
  }
  bytes_out_ += n;
  head_ = std::string();  // done with it
  if (client_eof_) {
    end_of(up_, asio::error::eof);
  } else {
    pump(up_);
  }
}

void Flow::pump(Pipe& p) {
  p.from->async_read_some(asio::buffer(p.buf.get(), kRelayBuffer),
                          [self = shared_from_this(), &p](const error_code& ec, std::size_t n) {
                            self->on_read(p, ec, n);
                          });
}

void Flow::on_read(Pipe& p, const error_code& ec, std::size_t n) {
  if (phase_ != Phase::kRelay) return;
  last_activity_ = std::chrono::steady_clock::now();
  if (n == 0) {
    end_of(p, ec);
    return;
  }
  asio::async_write(*p.to, asio::buffer(p.buf.get(), n),
                    [self = shared_from_this(), &p, ec](const error_code& wec, std::size_t wn) {
                      self->on_written(p, ec, wec, wn);
                    });
}

void Flow::on_written(Pipe& p, const error_code& read_ec, const error_code& ec, std::size_t n) {
  if (phase_ != Phase::kRelay) return;
  if (ec) {
    abort("write: " + ec.message());
    return;
  }
  *p.bytes += n;
  last_activity_ = std::chrono::steady_clock::now();
  if (read_ec) {
    end_of(p, read_ec);
  } else {
    pump(p);
  }
}

// One direction ended: EOF passes on as a half-close (the other direction keeps going);
// anything else resets both.
void Flow::end_of(Pipe& p, const error_code& ec) {
  if (ec != asio::error::eof) {
    abort("read: " + ec.message());
    return;
  }
  error_code ignored;
  p.to->shutdown(tcp::socket::shutdown_send, ignored);
  p.done = true;
  if (!up_.done || !down_.done) {
    arm_idle();  // half-open now: the shorter limit applies from here
    return;
  }
  phase_ = Phase::kDone;
  timer_.cancel(ignored);
  client_.close(ignored);
  upstream_.close(ignored);
  report();
}

// The idle limit now: shorter once a direction has ended (half-open).
std::chrono::milliseconds Flow::idle_limit() const {
  return up_.done || down_.done ? proxy_->opt.half_closed_idle_timeout : proxy_->opt.idle_timeout;
}

void Flow::arm_idle() {
  timer_.expires_at(last_activity_ + idle_limit());
  timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->phase_ != Phase::kRelay) return;
    if (std::chrono::steady_clock::now() - self->last_activity_ >= self->idle_limit()) {
      self->abort("idle");
    } else {
      self->arm_idle();
    }
  });
}

void Flow::abort(std::string_view why) {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  error_code ignored;
  timer_.cancel(ignored);
  reset(client_);
  reset(upstream_);
  if (allowed_) {
    proxy_->log.debug("flow " + ip_str(flow_.src_ip) + " -> " + ip_str(flow_.dst_ip) + ":" +
                      std::to_string(flow_.dst_port) + " reset: " + std::string(why));
    report();
  }
}

void Flow::transform_event(EgressTransformEvent ev) {
  const auto& hook = proxy_->hooks.on_transform;
  if (!hook) return;
  try {
    hook(flow_, ev);
  } catch (const std::exception& e) {
    proxy_->log.error(std::string("egress on_transform hook threw: ") + e.what());
  }
}

void Flow::finish() {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  error_code ignored;
  timer_.cancel(ignored);
  client_.shutdown(tcp::socket::shutdown_both, ignored);
  client_.close(ignored);
  upstream_.close(ignored);
  report();
}

awaitable<void> Flow::intercept(std::shared_ptr<Flow> self) {
  namespace ssl = asio::ssl;
  const auto& hooks = self->proxy_->hooks;
  const std::string name = *self->flow_.domain;
  beast::flat_buffer cbuf;
  error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  if (self->flow_.dst_port == 80) {
    auto room = cbuf.prepare(self->head_len_);
    cbuf.commit(asio::buffer_copy(room, asio::buffer(self->head_.data(), self->head_len_)));
    self->head_ = std::string();
    co_await self->serve_http(self->client_, self->upstream_, cbuf);
    self->finish();
    co_return;
  }
  // The real server first, verified for the name: if it fails, the sandbox's handshake fails
  // too (its connection is reset), so a bad upstream is a TLS error inside, never a bypass.
  UpstreamSessions::Slot slot{
      &self->proxy_->upstream_sessions,
      name + "|" + ip_str(self->flow_.dst_ip) + ":" + std::to_string(self->flow_.dst_port)};
  ssl::stream<tcp::socket&> up(self->upstream_, *hooks.upstream_tls);
  // h2 is offered upstream only when the sandbox offered it: a sandbox speaking HTTP/1.1 to an
  // upstream speaking h2 would need a translation this proxy does not make.
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  static const unsigned char kH2Http11[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  if (self->client_h2_) {
    SSL_set_alpn_protos(up.native_handle(), kH2Http11, sizeof kH2Http11);
  } else {
    SSL_set_alpn_protos(up.native_handle(), kHttp11, sizeof kHttp11);
  }
  if (SSL_set_tlsext_host_name(up.native_handle(), name.c_str()) != 1) {
    self->abort("upstream SNI");
    co_return;
  }
  SSL_set_ex_data(up.native_handle(), UpstreamSessions::slot_index(), &slot);
  if (auto resumed = slot.sessions->take(slot.key))
    SSL_set_session(up.native_handle(), resumed.get());  // takes its own reference
  up.set_verify_mode(ssl::verify_peer);
  up.set_verify_callback(ssl::host_name_verification(name));
  co_await up.async_handshake(ssl::stream_base::client, tok);
  if (ec) {
    self->proxy_->log.info("egress " + ip_str(self->flow_.src_ip) + " -> " + name +
                           ": upstream TLS failed (" + ec.message() + "); sandbox's reset");
    self->transform_event({name, "", {}, 0, "upstream TLS: " + ec.message()});
    self->abort("upstream TLS");
    co_return;
  }
  self->touch();
  auto ctx = hooks.server_tls(name);
  if (!ctx) {
    self->proxy_->log.warn("certificate for " + name + ": " + ctx.error().message());
    self->abort("no certificate");
    co_return;
  }
  auto alpn_is_h2 = [](SSL* s) {
    const unsigned char* proto = nullptr;
    unsigned int len = 0;
    SSL_get0_alpn_selected(s, &proto, &len);
    return len == 2 && proto[0] == 'h' && proto[1] == '2';
  };
  const bool up_h2 = alpn_is_h2(up.native_handle());
  ssl::stream<tcp::socket&> down(self->client_, **ctx);
  static char h2_allowed = 1;
  SSL_set_ex_data(down.native_handle(), egress_alpn_h2_slot(), up_h2 ? &h2_allowed : nullptr);
  co_await down.async_handshake(ssl::stream_base::server,
                                asio::buffer(self->head_.data(), self->head_len_), tok);
  self->head_ = std::string();
  if (ec) {
    self->proxy_->log.debug("egress " + ip_str(self->flow_.src_ip) + " -> " + name +
                            ": the sandbox's TLS handshake failed: " + ec.message());
    self->abort("client TLS");
    co_return;
  }
  self->touch();
  if (up_h2 != alpn_is_h2(down.native_handle())) {
    // The sandbox offered h2 in the ClientHello the proxy read, so it was selected for it when
    // the upstream chose it: this would be a ClientHello other than the one sniffed.
    self->transform_event({name, "", {}, 0, "the sandbox did not take h2 after offering it"});
    self->abort("ALPN mismatch");
    co_return;
  }
  if (up_h2) {
    H2BridgeHooks h2;
    h2.name = name;
    h2.transform = [self, name] { return self->proxy_->hooks.transform(self->flow_, name); };
    h2.event = [self](const EgressTransformEvent& ev) { self->transform_event(ev); };
    h2.touch = [self] { self->touch(); };
    h2.bytes_out = &self->bytes_out_;
    h2.bytes_in = &self->bytes_in_;
    h2.log = &self->proxy_->log;
    co_await serve_h2(down, up, std::move(h2));
  } else {
    co_await self->serve_http(down, up, cbuf);
  }
  if (self->phase_ == Phase::kRelay) {
    // close_notify to the sandbox (a response framed by the connection's end is complete only
    // with it), waiting at most a second for the sandbox's own.
    bool shut = false;
    asio::steady_timer limit(self->executor());
    limit.expires_after(std::chrono::seconds(1));
    limit.async_wait([self, &shut](const error_code& lec) {
      if (!lec && !shut) self->abort("TLS shutdown timed out");
    });
    co_await down.async_shutdown(tok);
    shut = true;
    limit.cancel();
  }
  self->finish();
}

template <class Client, class Upstream>
awaitable<void> Flow::respond_and_close(Client& client, Upstream& upstream, bhttp::status status,
                                        std::string why) {
  error_code ec;
  bhttp::response<bhttp::string_body> res{status, 11};
  res.set(bhttp::field::content_type, "text/plain");
  res.set(bhttp::field::connection, "close");
  res.body() = "abx egress proxy: " + why + "\n";
  res.prepare_payload();
  co_await bhttp::async_write(client, res, asio::redirect_error(asio::use_awaitable, ec));
  (void)upstream;
}

// One function: a request's checks, its transform, the request and the responses up to the final
// one are awaits on one parser pair and two buffers, in the loop of a keep-alive connection.
template <class Client, class Upstream>
awaitable<void> Flow::serve_http(Client& client, Upstream& upstream, beast::flat_buffer& cbuf) {
  const auto self = shared_from_this();  // the flow outlives every await below
  const auto& hooks = proxy_->hooks;
  const std::string name = *flow_.domain;
  beast::flat_buffer ubuf;
  error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  auto touched = [this] { touch(); };
  // One body buffer for the flow's messages, both ways (they take turns), not zero-filled.
  std::unique_ptr<char[]> chunk(new char[kRelayBuffer]);
  for (;;) {
    bhttp::request_parser<bhttp::buffer_body> req;
    req.header_limit(kMaxHeaderBytes);
    req.body_limit(boost::none);
    co_await bhttp::async_read_header(client, cbuf, req, tok);
    if (ec) co_return;  // the sandbox closed (or sent what is not HTTP): done
    touch();
    auto& r = req.get();
    EgressTransformEvent ev;
    ev.host = host_name_of(r[bhttp::field::host]);
    const std::string_view target = r.target();
    if (target.empty() || (target.front() != '/' && target != "*")) {
      ev.refused = "request target is not a path";
      transform_event(ev);
      co_await respond_and_close(client, upstream, bhttp::status::bad_request,
                                 "a request through this connection names a path, not a URL");
      co_return;
    }
    if (ev.host != name) {
      ev.refused = "Host differs from the connection's name " + name;
      transform_event(ev);
      co_await respond_and_close(
          client, upstream, bhttp::status::misdirected_request,
          "the Host header must be " + name + ", the name this connection was opened to");
      co_return;
    }
    std::optional<EgressTransform> t;
    try {
      t = hooks.transform(flow_, name);
    } catch (const std::exception& e) {
      proxy_->log.error(std::string("egress transform hook threw: ") + e.what());
      co_return;
    }
    if (t && !t->refused.empty()) {
      ev.rule = t->rule;
      ev.refused = t->refused;
      transform_event(ev);
      co_await respond_and_close(client, upstream, bhttp::status::bad_gateway,
                                 "abxd cannot apply this host's network.rules: " + t->refused);
      co_return;
    }
    if (t) {
      ev.rule = t->rule;
      for (const auto& [k, v] : t->headers) {
        r.set(k, v);
        ev.header_names.push_back(k);
      }
    }
    const bool head = r.method() == bhttp::verb::head;
    const bool request_keep_alive = req.keep_alive();
    ec = co_await relay_message(client, cbuf, req, upstream, chunk.get(), bytes_out_, touched);
    if (ec) {
      ev.refused = "request: " + ec.message();
      transform_event(ev);
      co_return;
    }
    bool response_keep_alive = false;
    for (;;) {  // 1xx responses, then the final one
      bhttp::response_parser<bhttp::buffer_body> res;
      res.header_limit(kMaxHeaderBytes);
      res.body_limit(boost::none);
      if (head) res.skip(true);
      co_await bhttp::async_read_header(upstream, ubuf, res, tok);
      if (ec) {
        ev.refused = "response: " + ec.message();
        transform_event(ev);
        co_return;
      }
      ev.upstream_status = res.get().result_int();
      response_keep_alive = res.keep_alive();
      ec = co_await relay_message(upstream, ubuf, res, client, chunk.get(), bytes_in_, touched);
      if (ec) {
        transform_event(ev);
        co_return;
      }
      if (ev.upstream_status / 100 != 1 || ev.upstream_status == 101) break;
    }
    transform_event(ev);
    if (ev.upstream_status == 101) {
      co_await splice_upgraded(client, upstream, cbuf, ubuf);
      co_return;
    }
    if (!request_keep_alive || !response_keep_alive) co_return;
  }
}

template <class Client, class Upstream>
awaitable<void> Flow::splice_upgraded(Client& client, Upstream& upstream, beast::flat_buffer& cbuf,
                                      beast::flat_buffer& ubuf) {
  auto self = shared_from_this();
  error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  auto touched = [this] { touch(); };
  // An upgrade (WebSocket): bytes both ways from here, what was read ahead first.
  if (cbuf.size()) {
    co_await asio::async_write(upstream, cbuf.data(), tok);
    cbuf.consume(cbuf.size());
  }
  if (ubuf.size()) {
    co_await asio::async_write(client, ubuf.data(), tok);
    ubuf.consume(ubuf.size());
  }
  if (ec) co_return;
  // One direction on its own coroutine: whichever ends first closes the flow (finish()),
  // which ends the other.
  // The streams live in this frame: it waits for the other direction before returning.
  asio::steady_timer other_done(executor(), std::chrono::steady_clock::time_point::max());
  bool other_finished = false;
  asio::co_spawn(
      executor(),
      [self, &client, &upstream, touched, &other_done, &other_finished]() -> awaitable<void> {
        co_await pump_bytes(upstream, client, self->bytes_in_, touched);
        self->finish();
        other_finished = true;
        other_done.cancel();
      },
      asio::detached);
  co_await pump_bytes(client, upstream, bytes_out_, touched);
  finish();
  if (!other_finished) co_await other_done.async_wait(tok);
}

void Flow::report() {
  const auto& on_flow = proxy_->hooks.on_flow;
  if (!on_flow) return;
  try {
    on_flow(flow_, allowed_, bytes_out_, bytes_in_);
  } catch (const std::exception& e) {
    proxy_->log.error(std::string("egress on_flow hook threw: ") + e.what());
  }
}

Result<std::shared_ptr<Listener>> EgressProxy::Impl::open_listener(const tcp::endpoint& at) {
  auto l = std::make_shared<Listener>(io);
  error_code ec;
  l->acceptor.open(at.protocol(), ec);
  if (!ec) l->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) l->acceptor.set_option(Freebind(true), ec);
  if (!ec) l->acceptor.bind(at, ec);
  if (!ec) l->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return unavailable("egress proxy on " + at.address().to_string() + ":" +
                       std::to_string(at.port()) + ": " + ec.message());
  return l;
}

void EgressProxy::Impl::close(const std::shared_ptr<Listener>& l) {
  asio::post(l->acceptor.get_executor(), [l] {
    error_code ignored;
    l->acceptor.close(ignored);
    l->backoff.cancel(ignored);
  });
}

void EgressProxy::Impl::accept(const std::shared_ptr<Listener>& l) {
  l->acceptor.async_accept(asio::any_io_executor(asio::make_strand(io)),
                           [self = shared_from_this(), l](const error_code& ec, tcp::socket sock) {
                             self->on_accept(l, ec, std::move(sock));
                           });
}

void EgressProxy::Impl::on_accept(const std::shared_ptr<Listener>& l, const error_code& ec,
                                  tcp::socket sock) {
  if (ec == asio::error::operation_aborted || !l->acceptor.is_open()) return;
  if (ec) {
    log.warn("accept: " + ec.message());
    l->backoff.expires_after(kAcceptBackoff);
    l->backoff.async_wait([self = shared_from_this(), l](const error_code& bec) {
      if (!bec && l->acceptor.is_open()) self->accept(l);
    });
    return;
  }
  error_code pec;
  const tcp::endpoint peer = sock.remote_endpoint(pec);
  const std::uint32_t source =
      !pec && peer.address().is_v4() ? peer.address().to_v4().to_uint() : 0;
  auto flow = std::make_shared<Flow>(shared_from_this(), std::move(sock), source);
  bool admitted = false;
  bool full = false, source_full = false;
  {
    std::lock_guard lock(mu);
    full = flows.size() >= opt.max_flows;
    auto it = per_source.find(source);
    source_full = it != per_source.end() && it->second >= opt.max_flows_per_source;
    admitted = !stopped && !full && !source_full;
    if (admitted) {
      flows.emplace(flow.get(), flow);
      ++per_source[source];
    }
  }
  if (admitted) {
    asio::dispatch(flow->executor(), [flow] { flow->start(); });
  } else {
    if (full) log.warn("over " + std::to_string(opt.max_flows) + " flows: connection reset");
    if (source_full && !full)
      log.debug("over " + std::to_string(opt.max_flows_per_source) + " flows from " +
                ip_str(source) + ": connection reset");
    flow->refuse();
  }
  accept(l);
}

int egress_alpn_h2_slot() {
  static const int slot = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return slot;
}

EgressProxy::EgressProxy(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

EgressProxy::~EgressProxy() { stop(); }

Result<std::unique_ptr<EgressProxy>> EgressProxy::start(asio::io_context& io, tcp::endpoint listen,
                                                        EgressProxyHooks hooks,
                                                        EgressProxyOptions options) {
  if (!hooks.allow) return invalid_argument("egress proxy: the allow hook is required");
  if (!listen.address().is_v4()) return invalid_argument("egress proxy: IPv4 addresses only");
  if (hooks.upstream_tls) {
    // Upstream sessions are kept by the proxy (UpstreamSessions), not OpenSSL's internal cache,
    // which a client never looks up by itself.
    SSL_CTX* raw = hooks.upstream_tls->native_handle();
    SSL_CTX_set_session_cache_mode(raw, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(raw, &UpstreamSessions::on_new_session);
  }
  auto impl = std::make_shared<Impl>(io, std::move(hooks), options);
  ABX_ASSIGN_OR_RETURN(std::shared_ptr<Listener> l, impl->open_listener(listen));
  error_code ec;
  impl->port = l->acceptor.local_endpoint(ec).port();
  impl->listeners.emplace(listen.address().to_v4().to_uint(), l);
  // The first accept is started on the acceptor's strand like every later one.
  asio::post(l->acceptor.get_executor(), [impl, l] { impl->accept(l); });
  return std::unique_ptr<EgressProxy>(new EgressProxy(std::move(impl)));
}

Status EgressProxy::listen_on(std::uint32_t ip) {
  const Error stopped(ErrorCode::kUnavailable, "egress proxy: stopped");
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return stopped;
    if (impl_->listeners.count(ip)) return {};
  }
  ABX_ASSIGN_OR_RETURN(std::shared_ptr<Listener> l,
                       impl_->open_listener({asio::ip::address_v4(ip), impl_->port}));
  bool was_stopped = false;
  {
    std::lock_guard lock(impl_->mu);
    was_stopped = impl_->stopped;
    if (was_stopped || !impl_->listeners.emplace(ip, l).second) {
      Impl::close(l);  // stopped meanwhile, or another call got there first
      if (was_stopped) return stopped;
      return {};
    }
  }
  asio::post(l->acceptor.get_executor(), [impl = impl_, l] { impl->accept(l); });
  return {};
}

void EgressProxy::stop_listening(std::uint32_t ip) {
  std::shared_ptr<Listener> l;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->listeners.find(ip);
    if (it == impl_->listeners.end()) return;
    l = std::move(it->second);
    impl_->listeners.erase(it);
  }
  Impl::close(l);
}

std::uint16_t EgressProxy::port() const { return impl_->port; }

std::size_t EgressProxy::active_flows() const {
  std::lock_guard lock(impl_->mu);
  return impl_->flows.size();
}

std::size_t EgressProxy::active_flows_from(std::uint32_t src_ip) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->per_source.find(src_ip);
  return it == impl_->per_source.end() ? 0 : it->second;
}

void EgressProxy::stop() {
  std::vector<std::shared_ptr<Flow>> live;
  std::map<std::uint32_t, std::shared_ptr<Listener>> listeners;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (auto& [raw, weak] : impl_->flows) {
      if (auto f = weak.lock()) live.push_back(std::move(f));
    }
    listeners.swap(impl_->listeners);
  }
  for (auto& [ip, l] : listeners) Impl::close(l);
  for (auto& f : live) {
    auto ex = f->executor();
    asio::post(ex, [f = std::move(f)] { f->abort("proxy stopped"); });
  }
}

}  // namespace abx::platform
