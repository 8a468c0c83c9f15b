// The transparent egress proxy (egress_proxy.h): one Flow object per redirected connection,
// living on its own strand, in three phases: sniff (read the first bytes under a deadline),
// connect (to the original destination, under a deadline) and relay (both ways, half-close
// passed on). Every timer is the flow's one `timer_`, re-armed per phase; every handler first
// checks that its phase is still current, so a late completion after a reset does nothing.
#include "egress_proxy.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "abx/base/log.h"
#include "abx/egress/sniff.h"
#include "abx/runtime/netns.h"

namespace abx::platform {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::size_t kRelayBuffer = 64 * 1024;
// Backoff when accept fails for lack of descriptors or memory (it would fail again at once).
constexpr std::chrono::milliseconds kAcceptBackoff{100};

std::string ip_str(std::uint32_t ip) { return asio::ip::address_v4(ip).to_string(); }

// Closes with an RST instead of a FIN (SO_LINGER 0): the sandbox's client sees a refused or
// broken connection at once, and no half-open state lingers.
void reset(tcp::socket& s) {
  error_code ignored;
  if (!s.is_open()) return;
  s.set_option(asio::socket_base::linger(true, 0), ignored);
  s.close(ignored);
}

}  // namespace

class Flow;

struct EgressProxy::Impl : std::enable_shared_from_this<EgressProxy::Impl> {
  Impl(asio::io_context& io_, EgressProxyHooks hooks_, EgressProxyOptions opt_)
      : io(io_),
        hooks(std::move(hooks_)),
        opt(opt_),
        acceptor(asio::make_strand(io_)),
        backoff(acceptor.get_executor()) {}

  void accept();
  void on_accept(const error_code& ec, tcp::socket sock);

  asio::io_context& io;
  const EgressProxyHooks hooks;
  const EgressProxyOptions opt;
  const Logger log{"egress-proxy"};
  tcp::acceptor acceptor;      // on its own strand
  asio::steady_timer backoff;  // same strand
  std::uint16_t port = 0;

  std::mutex mu;
  bool stopped = false;                                  // guarded by mu
  std::unordered_map<Flow*, std::weak_ptr<Flow>> flows;  // guarded by mu; every live flow
};

class Flow : public std::enable_shared_from_this<Flow> {
 public:
  Flow(std::shared_ptr<EgressProxy::Impl> proxy, tcp::socket client)
      : proxy_(std::move(proxy)),
        client_(std::move(client)),
        upstream_(client_.get_executor()),
        timer_(client_.get_executor()) {}

  ~Flow() {
    std::lock_guard lock(proxy_->mu);
    proxy_->flows.erase(this);
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
  void report();

  std::shared_ptr<EgressProxy::Impl> proxy_;
  tcp::socket client_;
  tcp::socket upstream_;
  asio::steady_timer timer_;  // sniff deadline, then connect deadline, then idle check
  Phase phase_ = Phase::kSniff;
  EgressFlow flow_;
  bool allowed_ = false;
  bool timed_out_ = false;
  bool client_eof_ = false;
  std::string head_;  // the first bytes, up to kMaxSniffBytes, sent upstream before the relay
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
  if (!up_.done || !down_.done) return;
  phase_ = Phase::kDone;
  timer_.cancel(ignored);
  client_.close(ignored);
  upstream_.close(ignored);
  report();
}

void Flow::arm_idle() {
  timer_.expires_at(last_activity_ + proxy_->opt.idle_timeout);
  timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->phase_ != Phase::kRelay) return;
    if (std::chrono::steady_clock::now() - self->last_activity_ >= self->proxy_->opt.idle_timeout) {
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

void Flow::report() {
  const auto& on_flow = proxy_->hooks.on_flow;
  if (!on_flow) return;
  try {
    on_flow(flow_, allowed_, bytes_out_, bytes_in_);
  } catch (const std::exception& e) {
    proxy_->log.error(std::string("egress on_flow hook threw: ") + e.what());
  }
}

void EgressProxy::Impl::accept() {
  acceptor.async_accept(asio::any_io_executor(asio::make_strand(io)),
                        [self = shared_from_this()](const error_code& ec, tcp::socket sock) {
                          self->on_accept(ec, std::move(sock));
                        });
}

void EgressProxy::Impl::on_accept(const error_code& ec, tcp::socket sock) {
  if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {
    log.warn("accept: " + ec.message());
    backoff.expires_after(kAcceptBackoff);
    backoff.async_wait([self = shared_from_this()](const error_code& bec) {
      if (!bec && self->acceptor.is_open()) self->accept();
    });
    return;
  }
  auto flow = std::make_shared<Flow>(shared_from_this(), std::move(sock));
  bool admitted = false;
  bool full = false;
  {
    std::lock_guard lock(mu);
    full = flows.size() >= opt.max_flows;
    admitted = !stopped && !full;
    if (admitted) flows.emplace(flow.get(), flow);
  }
  if (admitted) {
    asio::dispatch(flow->executor(), [flow] { flow->start(); });
  } else {
    if (full) log.warn("over " + std::to_string(opt.max_flows) + " flows: connection reset");
    flow->refuse();
  }
  accept();
}

EgressProxy::EgressProxy(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

EgressProxy::~EgressProxy() { stop(); }

Result<std::unique_ptr<EgressProxy>> EgressProxy::start(asio::io_context& io, tcp::endpoint listen,
                                                        EgressProxyHooks hooks,
                                                        EgressProxyOptions options) {
  if (!hooks.allow) return invalid_argument("egress proxy: the allow hook is required");
  auto impl = std::make_shared<Impl>(io, std::move(hooks), options);
  error_code ec;
  std::string where =
      "egress proxy on " + listen.address().to_string() + ":" + std::to_string(listen.port());
  impl->acceptor.open(listen.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(listen, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return unavailable(where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint(ec).port();
  // The first accept is started on the acceptor's strand like every later one.
  asio::post(impl->acceptor.get_executor(), [impl] { impl->accept(); });
  return std::unique_ptr<EgressProxy>(new EgressProxy(std::move(impl)));
}

std::uint16_t EgressProxy::port() const { return impl_->port; }

std::size_t EgressProxy::active_flows() const {
  std::lock_guard lock(impl_->mu);
  return impl_->flows.size();
}

void EgressProxy::stop() {
  std::vector<std::shared_ptr<Flow>> live;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (auto& [raw, weak] : impl_->flows) {
      if (auto f = weak.lock()) live.push_back(std::move(f));
    }
  }
  asio::post(impl_->acceptor.get_executor(), [impl = impl_] {
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->backoff.cancel(ignored);
  });
  for (auto& f : live) {
    auto ex = f->executor();
    asio::post(ex, [f = std::move(f)] { f->abort("proxy stopped"); });
  }
}

}  // namespace abx::platform
