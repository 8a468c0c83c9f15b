#include "dns_forwarder.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/random.h>

#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>

#include "abx/base/log.h"
#include "abx/base/try.h"
#include "abx/egress/dns.h"

namespace abx::platform {
namespace {

namespace asio = boost::asio;
namespace dns = abx::egress::dns;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using udp = asio::ip::udp;
using Bytes = std::vector<std::uint8_t>;
using Strand = asio::strand<asio::io_context::executor_type>;

const Logger& dns_log() {
  static const Logger logger("dns");
  return logger;
}
// Per-query lines are debug: a sandbox decides how many there are.
bool debug_on() { return dns_log().enabled(LogLevel::kDebug); }

// IP_FREEBIND: a socket may be bound to an address before the host has it (a sandbox link's
// gateway address, before or between its links).
using Freebind = asio::detail::socket_option::boolean<IPPROTO_IP, IP_FREEBIND>;

// Asio opens sockets without SOCK_CLOEXEC; abxd spawns processes.
void set_cloexec(int fd) { ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC); }

std::uint32_t ipv4_of(const asio::ip::address& a) {
  if (a.is_v4()) return a.to_v4().to_uint();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_uint();
  }
  return 0;  // no sandbox has this address: may_resolve refuses it
}

// Upstream ids are unpredictable to anyone off the path (spoofed answers must guess them).
std::uint16_t random_id() {
  std::uint16_t id = 0;
  if (::getrandom(&id, sizeof id, 0) == static_cast<ssize_t>(sizeof id)) return id;
  static thread_local std::random_device rd;
  return static_cast<std::uint16_t>(rd());
}

void set_id(Bytes& msg, std::uint16_t id) {
  msg[0] = static_cast<std::uint8_t>(id >> 8);
  msg[1] = static_cast<std::uint8_t>(id & 0xff);
}

Bytes framed(const Bytes& msg) {
  Bytes out;
  out.reserve(msg.size() + 2);
  out.push_back(static_cast<std::uint8_t>(msg.size() >> 8));
  out.push_back(static_cast<std::uint8_t>(msg.size() & 0xff));
  out.insert(out.end(), msg.begin(), msg.end());
  return out;
}

// A client connection or an upstream query: what stop() closes.
class Closable {
 public:
  virtual ~Closable() = default;
  virtual void close() = 0;  // posts to the object's strand; any thread
};

}  // namespace

// The sockets of one listening address: UDP and TCP at the forwarder's port.
struct DnsListener {
  explicit DnsListener(asio::io_context& io)
      : udp_strand(asio::make_strand(io)),
        udp_socket(udp_strand),
        accept_strand(asio::make_strand(io)),
        acceptor(accept_strand) {}
  Strand udp_strand;
  udp::socket udp_socket;                                       // on udp_strand
  std::array<std::uint8_t, dns::kMaxUdpMessage + 1> udp_buf{};  // one over: oversized is seen
  udp::endpoint udp_from;
  Strand accept_strand;
  tcp::acceptor acceptor;  // on accept_strand

  // Both sockets bound to `at` (port 0: the kernel's choice for TCP, and the same for UDP).
  // IP_FREEBIND: the address need not be the host's yet.
  error_code open(const tcp::endpoint& at) {
    error_code ec;
    acceptor.open(at.protocol(), ec);
    if (!ec) set_cloexec(acceptor.native_handle());
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.set_option(Freebind(true), ec);
    if (!ec) acceptor.bind(at, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return ec;
    udp::endpoint udp_at(at.address(), acceptor.local_endpoint().port());
    udp_socket.open(udp_at.protocol(), ec);
    if (!ec) set_cloexec(udp_socket.native_handle());
    if (!ec) udp_socket.set_option(Freebind(true), ec);
    if (!ec) udp_socket.bind(udp_at, ec);
    if (!ec) udp_socket.non_blocking(true, ec);
    return ec;
  }
  // Closes both on their strands; any thread.
  static void close(const std::shared_ptr<DnsListener>& l) {
    asio::post(l->udp_strand, [l] {
      error_code ec;
      l->udp_socket.close(ec);
    });
    asio::post(l->accept_strand, [l] {
      error_code ec;
      l->acceptor.close(ec);
    });
  }
};

struct DnsForwarder::Impl : std::enable_shared_from_this<DnsForwarder::Impl> {
  Impl(asio::io_context& io_context, udp::endpoint up, DnsForwarderHooks h, DnsForwarderLimits l)
      : io(io_context),
        hooks(std::move(h)),
        limits(l),
        upstream_udp(up),
        upstream_tcp(up.address(), up.port()) {}

  // What to do with one message from a client.
  struct Decision {
    enum Kind { kDrop, kReply, kForward } kind = kDrop;
    Bytes reply;       // kReply
    dns::Query query;  // kReply, kForward
  };
  Decision decide(std::uint32_t src, std::span<const std::uint8_t> msg, std::size_t max_size);

  // A place among the in-flight upstream queries; false when a cap is reached or stopping.
  bool acquire(std::uint32_t src);
  void release(std::uint32_t src);

  // Registers a live object for stop(); 0 (and nothing registered) once stopping: the caller
  // closes it at once.
  std::uint64_t track(std::weak_ptr<Closable> obj);
  void untrack(std::uint64_t token);

  void udp_receive(const std::shared_ptr<DnsListener>& l);
  void on_udp(const std::shared_ptr<DnsListener>& l, std::size_t n);
  // From any thread.
  void send_udp(const std::shared_ptr<DnsListener>& l, const udp::endpoint& to, Bytes msg);
  void accept(const std::shared_ptr<DnsListener>& l);
  void serve(const std::shared_ptr<DnsListener>& l);  // starts both loops
  void forward(std::uint32_t src, Bytes request, dns::Query query, bool over_tcp,
               std::function<void(Bytes)> deliver);

  asio::io_context& io;
  const DnsForwarderHooks hooks;
  const DnsForwarderLimits limits;
  const udp::endpoint upstream_udp;
  const tcp::endpoint upstream_tcp;
  std::uint16_t port = 0;

  std::mutex mu;                                                    // guards what follows
  std::map<std::uint32_t, std::shared_ptr<DnsListener>> listeners;  // by address, host order
  bool stopped = false;
  std::size_t in_flight = 0;
  std::unordered_map<std::uint32_t, std::size_t> in_flight_by_source;
  std::size_t tcp_connections = 0;
  std::unordered_map<std::uint32_t, std::size_t> tcp_by_source;
  std::uint64_t next_token = 0;
  std::unordered_map<std::uint64_t, std::weak_ptr<Closable>> live;
};

namespace {

using Impl = DnsForwarder::Impl;

// One query relayed upstream, over UDP (a fresh connected socket: the kernel picks a random
// source port and drops datagrams from anyone but the upstream) or TCP (a fresh connection).
// All of it runs on its own strand; it ends exactly once: with the upstream's matching reply,
// with SERVFAIL at the timeout or on a transport error, or silently at stop().
class Exchange : public Closable, public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<Impl> impl, std::uint32_t src, Bytes request, dns::Query query,
           bool over_tcp, std::function<void(Bytes)> deliver)
      : impl_(std::move(impl)),
        strand_(asio::make_strand(impl_->io)),
        src_(src),
        request_(std::move(request)),
        query_(std::move(query)),
        over_tcp_(over_tcp),
        deliver_(std::move(deliver)),
        udp_(strand_),
        tcp_(strand_),
        timer_(strand_) {}

  ~Exchange() override { impl_->untrack(token_); }

  void start() {
    token_ = impl_->track(weak_from_this());
    if (token_ == 0) return close();
    asio::dispatch(strand_, [self = shared_from_this()] { self->run(); });
  }

  void close() override {
    asio::post(strand_, [self = shared_from_this()] { self->finish({}); });
  }

 private:
  void run() {
    if (done_) return;
    id_ = random_id();
    set_id(request_, id_);
    timer_.expires_after(impl_->limits.upstream_timeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->fail("upstream timeout");
    });
    error_code ec;
    if (over_tcp_) {
      tcp_.open(impl_->upstream_tcp.protocol(), ec);
      if (ec) return fail("socket: " + ec.message());
      set_cloexec(tcp_.native_handle());
      tcp_.async_connect(impl_->upstream_tcp, [self = shared_from_this()](error_code cec) {
        if (cec) return self->fail("connect: " + cec.message());
        self->out_ = framed(self->request_);
        asio::async_write(self->tcp_, asio::buffer(self->out_),
                          [self](error_code wec, std::size_t) {
                            if (wec) return self->fail("write: " + wec.message());
                            self->tcp_read();
                          });
      });
      return;
    }
    udp_.open(impl_->upstream_udp.protocol(), ec);
    if (!ec) set_cloexec(udp_.native_handle());
    if (!ec) udp_.connect(impl_->upstream_udp, ec);
    if (ec) return fail("udp socket: " + ec.message());
    udp_.async_send(asio::buffer(request_),
                    [self = shared_from_this()](error_code sec, std::size_t) {
                      if (sec) return self->fail("send: " + sec.message());
                      self->buf_.resize(dns::kMaxTcpMessage + 1);
                      self->udp_read();
                    });
  }

  void udp_read() {
    udp_.async_receive(asio::buffer(buf_),
                       [self = shared_from_this()](error_code ec, std::size_t n) {
                         if (self->done_) return;
                         // ECONNREFUSED (an ICMP port unreachable) is not worth waiting out the
                         // timeout for.
                         if (ec) return self->fail("receive: " + ec.message());
                         if (!self->matched(std::span(self->buf_.data(), n))) self->udp_read();
                       });
  }

  void tcp_read() {
    asio::async_read(
        tcp_, asio::buffer(len_), [self = shared_from_this()](error_code ec, std::size_t) {
          if (ec) return self->fail("read: " + ec.message());
          self->buf_.resize((std::size_t{self->len_[0]} << 8) | self->len_[1]);
          asio::async_read(self->tcp_, asio::buffer(self->buf_),
                           [self](error_code rec, std::size_t) {
                             if (rec) return self->fail("read: " + rec.message());
                             // On a connection only the upstream can answer; anything else is a
                             // broken upstream.
                             if (!self->matched(std::span(self->buf_.data(), self->buf_.size()))) {
                               self->fail("reply does not match the query");
                             }
                           });
        });
  }

  // The upstream's reply if it answers our query; then it goes to the client.
  bool matched(std::span<const std::uint8_t> msg) {
    auto r = dns::parse_response(msg, dns::kMaxTcpMessage);
    if (!r || r->id != id_ || !r->question.same(query_.question)) {
      if (debug_on()) {
        dns_log().debug("ignoring a reply that does not match " + query_.question.name);
      }
      return false;
    }
    if (r->rcode() == dns::Rcode::kNoError && !r->a.empty() && impl_->hooks.on_answer) {
      impl_->hooks.on_answer(src_, query_.question.name, r->a, r->min_ttl);
    }
    Bytes reply(msg.begin(), msg.end());
    set_id(reply, query_.id);
    finish(std::move(reply));
    return true;
  }

  void fail(const std::string& why) {
    if (done_) return;
    if (debug_on()) dns_log().debug("SERVFAIL for " + query_.question.name + ": " + why);
    finish(dns::build_reply(query_, dns::Rcode::kServFail));
  }

  // An empty reply: nobody is told (stop()).
  void finish(Bytes reply) {
    if (done_) return;
    done_ = true;
    error_code ec;
    timer_.cancel();
    udp_.close(ec);
    tcp_.close(ec);
    impl_->release(src_);
    if (!reply.empty()) deliver_(std::move(reply));
  }

  std::shared_ptr<Impl> impl_;
  Strand strand_;
  std::uint32_t src_;
  Bytes request_;
  dns::Query query_;
  bool over_tcp_;
  std::function<void(Bytes)> deliver_;
  udp::socket udp_;
  tcp::socket tcp_;
  asio::steady_timer timer_;
  std::uint16_t id_ = 0;
  bool done_ = false;
  std::uint64_t token_ = 0;
  std::array<std::uint8_t, 2> len_{};
  Bytes out_;
  Bytes buf_;
};

// One client TCP connection: 2-byte length framing (RFC 7766), one query at a time, a deadline
// armed before every read and write.
class Session : public Closable, public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Impl> impl, tcp::socket socket, std::uint32_t src)
      : impl_(std::move(impl)),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        src_(src) {}

  ~Session() override {
    impl_->untrack(token_);
    std::lock_guard lock(impl_->mu);
    --impl_->tcp_connections;
    auto mine = impl_->tcp_by_source.find(src_);
    if (mine != impl_->tcp_by_source.end() && --mine->second == 0) impl_->tcp_by_source.erase(mine);
  }

  void start() {
    token_ = impl_->track(weak_from_this());
    if (token_ == 0) return close();
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

  void close() override {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->shut(); });
  }

 private:
  void arm() {
    const auto gen = ++timer_gen_;
    timer_.expires_after(impl_->limits.tcp_timeout);
    timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (!ec && gen == self->timer_gen_) self->shut();
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void read() {
    arm();
    asio::async_read(socket_, asio::buffer(len_),
                     [self = shared_from_this()](error_code ec, std::size_t) {
                       if (ec) return self->shut();
                       const std::size_t n = (std::size_t{self->len_[0]} << 8) | self->len_[1];
                       if (n < dns::kHeaderSize) return self->shut();
                       self->msg_.resize(n);
                       asio::async_read(self->socket_, asio::buffer(self->msg_),
                                        [self](error_code rec, std::size_t) {
                                          if (rec) return self->shut();
                                          self->disarm();
                                          self->process();
                                        });
                     });
  }

  void process() {
    auto d = impl_->decide(src_, msg_, dns::kMaxTcpMessage);
    switch (d.kind) {
      case Impl::Decision::kDrop:
        return shut();
      case Impl::Decision::kReply:
        return write(std::move(d.reply));
      case Impl::Decision::kForward:
        // No read deadline while the upstream works: the exchange has its own.
        impl_->forward(src_, std::move(msg_), std::move(d.query), true,
                       [self = shared_from_this()](Bytes reply) {
                         asio::post(
                             self->socket_.get_executor(),
                             [self, r = std::move(reply)]() mutable { self->write(std::move(r)); });
                       });
        return;
    }
  }

  void write(Bytes reply) {
    if (!socket_.is_open()) return;
    out_ = framed(reply);
    arm();
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        if (ec) return self->shut();
                        self->read();
                      });
  }

  void shut() {
    disarm();
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  std::shared_ptr<Impl> impl_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::uint32_t src_;
  std::uint64_t timer_gen_ = 0;
  std::uint64_t token_ = 0;
  std::array<std::uint8_t, 2> len_{};
  Bytes msg_;
  Bytes out_;
};

}  // namespace

Impl::Decision Impl::decide(std::uint32_t src, std::span<const std::uint8_t> msg,
                            std::size_t max_size) {
  Decision d;
  auto q = dns::parse_query(msg, max_size);
  if (!q) {
    if (debug_on()) {
      dns_log().debug("dropping a malformed query from " + asio::ip::address_v4(src).to_string() +
                      ": " + q.error().message());
    }
    return d;
  }
  const dns::Question& question = q->question;
  std::optional<dns::Rcode> refuse;
  if (!hooks.may_resolve || !hooks.may_resolve(src, question.name)) {
    refuse = dns::Rcode::kRefused;
  } else if (q->opcode() != 0) {
    refuse = dns::Rcode::kNotImp;
  } else if (question.qclass != dns::kClassIn || question.qtype == dns::kTypeAxfr ||
             question.qtype == dns::kTypeIxfr) {
    refuse = dns::Rcode::kRefused;  // zone transfers would need multi-message relaying
  } else if (!acquire(src)) {
    refuse = dns::Rcode::kRefused;
    if (debug_on()) {
      dns_log().debug("too many queries in flight; refusing " + question.name + " from " +
                      asio::ip::address_v4(src).to_string());
    }
  }
  if (hooks.on_query) hooks.on_query(src, question.name, question.qtype, !refuse);
  if (refuse) {
    d.kind = Decision::kReply;
    d.reply = dns::build_reply(*q, *refuse);
  } else {
    d.kind = Decision::kForward;
  }
  d.query = std::move(*q);
  return d;
}

bool Impl::acquire(std::uint32_t src) {
  std::lock_guard lock(mu);
  if (stopped || in_flight >= limits.max_in_flight) return false;
  auto& mine = in_flight_by_source[src];
  if (mine >= limits.max_in_flight_per_source) {
    if (mine == 0) in_flight_by_source.erase(src);
    return false;
  }
  ++mine;
  ++in_flight;
  return true;
}

void Impl::release(std::uint32_t src) {
  std::lock_guard lock(mu);
  --in_flight;
  auto it = in_flight_by_source.find(src);
  if (it != in_flight_by_source.end() && --it->second == 0) in_flight_by_source.erase(it);
}

std::uint64_t Impl::track(std::weak_ptr<Closable> obj) {
  std::lock_guard lock(mu);
  if (stopped) return 0;
  const std::uint64_t token = ++next_token;
  live.emplace(token, std::move(obj));
  return token;
}

void Impl::untrack(std::uint64_t token) {
  if (token == 0) return;
  std::lock_guard lock(mu);
  live.erase(token);
}

void Impl::forward(std::uint32_t src, Bytes request, dns::Query query, bool over_tcp,
                   std::function<void(Bytes)> deliver) {
  std::make_shared<Exchange>(shared_from_this(), src, std::move(request), std::move(query),
                             over_tcp, std::move(deliver))
      ->start();
}

void Impl::udp_receive(const std::shared_ptr<DnsListener>& l) {
  l->udp_socket.async_receive_from(
      asio::buffer(l->udp_buf), l->udp_from,
      [self = shared_from_this(), l](error_code ec, std::size_t n) {
        if (ec == asio::error::operation_aborted || !l->udp_socket.is_open()) return;
        if (!ec) self->on_udp(l, n);  // other errors are one datagram's (e.g. an ICMP report)
        self->udp_receive(l);
      });
}

void Impl::on_udp(const std::shared_ptr<DnsListener>& l, std::size_t n) {
  const std::uint32_t src = ipv4_of(l->udp_from.address());
  auto d = decide(src, std::span(l->udp_buf.data(), n), dns::kMaxUdpMessage);
  switch (d.kind) {
    case Decision::kDrop:
      return;
    case Decision::kReply:
      return send_udp(l, l->udp_from, std::move(d.reply));
    case Decision::kForward:
      forward(src, Bytes(l->udp_buf.begin(), l->udp_buf.begin() + static_cast<std::ptrdiff_t>(n)),
              std::move(d.query), false,
              [self = shared_from_this(), l, to = l->udp_from](Bytes reply) {
                self->send_udp(l, to, std::move(reply));
              });
      return;
  }
}

void Impl::send_udp(const std::shared_ptr<DnsListener>& l, const udp::endpoint& to, Bytes msg) {
  // The socket is non-blocking: a full send buffer drops the reply (the client asks again)
  // rather than stalling the strand.
  asio::dispatch(l->udp_strand, [l, to, m = std::move(msg)] {
    error_code ec;
    if (l->udp_socket.is_open()) l->udp_socket.send_to(asio::buffer(m), to, 0, ec);
  });
}

void Impl::serve(const std::shared_ptr<DnsListener>& l) {
  asio::post(l->udp_strand, [self = shared_from_this(), l] { self->udp_receive(l); });
  asio::post(l->accept_strand, [self = shared_from_this(), l] { self->accept(l); });
}

void Impl::accept(const std::shared_ptr<DnsListener>& l) {
  l->acceptor.async_accept(asio::make_strand(io), [self = shared_from_this(), l](
                                                      error_code ec, tcp::socket socket) {
    if (!l->acceptor.is_open()) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // EMFILE and friends: back off briefly instead of spinning.
      auto t =
          std::make_shared<asio::steady_timer>(l->accept_strand, std::chrono::milliseconds(50));
      t->async_wait([self, t, l](error_code) { self->accept(l); });
      return;
    }
    set_cloexec(socket.native_handle());
    error_code rec;
    auto remote = socket.remote_endpoint(rec);
    const std::uint32_t src = rec ? 0 : ipv4_of(remote.address());
    bool admit = false;
    {
      std::lock_guard lock(self->mu);
      auto mine = self->tcp_by_source.find(src);
      admit = !rec && !self->stopped && self->tcp_connections < self->limits.max_tcp_connections &&
              (mine == self->tcp_by_source.end() ||
               mine->second < self->limits.max_tcp_connections_per_source);
      if (admit) {
        ++self->tcp_connections;
        ++self->tcp_by_source[src];
      }
    }
    if (!admit) {
      socket.close(rec);
    } else {
      std::make_shared<Session>(self, std::move(socket), src)->start();
    }
    self->accept(l);
  });
}

DnsForwarder::DnsForwarder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

DnsForwarder::~DnsForwarder() { stop(); }

Result<std::unique_ptr<DnsForwarder>> DnsForwarder::start(asio::io_context& io,
                                                          tcp::endpoint listen,
                                                          udp::endpoint upstream,
                                                          DnsForwarderHooks hooks,
                                                          DnsForwarderLimits limits) {
  if (!listen.address().is_v4()) return invalid_argument("DNS forwarder: IPv4 addresses only");
  auto impl = std::make_shared<Impl>(io, upstream, std::move(hooks), limits);
  const std::string where = listen.address().to_string() + ":" + std::to_string(listen.port());
  // Port 0: the TCP port the kernel picks may be taken for UDP; try a few.
  std::shared_ptr<DnsListener> l;
  error_code ec;
  for (int attempt = 0; attempt < 16; ++attempt) {
    l = std::make_shared<DnsListener>(io);
    ec = l->open(listen);
    if (!ec || listen.port() != 0 || ec != asio::error::address_in_use) break;
  }
  if (ec) return unavailable("DNS forwarder cannot listen on " + where + ": " + ec.message());
  impl->port = l->acceptor.local_endpoint().port();
  impl->listeners.emplace(listen.address().to_v4().to_uint(), l);
  impl->serve(l);
  dns_log().info("DNS forwarder on " + listen.address().to_string() + ":" +
                 std::to_string(impl->port) + " (udp+tcp), upstream " +
                 upstream.address().to_string() + ":" + std::to_string(upstream.port()));
  return std::unique_ptr<DnsForwarder>(new DnsForwarder(std::move(impl)));
}

Status DnsForwarder::listen_on(std::uint32_t ip) {
  const Error stopped(ErrorCode::kUnavailable, "DNS forwarder: stopped");
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return stopped;
    if (impl_->listeners.count(ip)) return {};
  }
  auto l = std::make_shared<DnsListener>(impl_->io);
  const tcp::endpoint at(asio::ip::address_v4(ip), impl_->port);
  if (error_code ec = l->open(at)) {
    DnsListener::close(l);
    return unavailable("DNS forwarder cannot listen on " + at.address().to_string() + ":" +
                       std::to_string(at.port()) + ": " + ec.message());
  }
  {
    std::lock_guard lock(impl_->mu);
    const bool was_stopped = impl_->stopped;
    if (was_stopped || !impl_->listeners.emplace(ip, l).second) {
      DnsListener::close(l);  // stopped meanwhile, or another call got there first
      if (was_stopped) return stopped;
      return {};
    }
  }
  impl_->serve(l);
  return {};
}

void DnsForwarder::stop_listening(std::uint32_t ip) {
  std::shared_ptr<DnsListener> l;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->listeners.find(ip);
    if (it == impl_->listeners.end()) return;
    l = std::move(it->second);
    impl_->listeners.erase(it);
  }
  DnsListener::close(l);
}

std::uint16_t DnsForwarder::port() const { return impl_->port; }

void DnsForwarder::stop() {
  std::vector<std::shared_ptr<Closable>> open;
  std::map<std::uint32_t, std::shared_ptr<DnsListener>> listeners;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (auto& [token, weak] : impl_->live) {
      if (auto obj = weak.lock()) open.push_back(std::move(obj));
    }
    listeners.swap(impl_->listeners);
  }
  for (auto& [ip, l] : listeners) DnsListener::close(l);
  for (auto& obj : open) obj->close();
  // `open` is dropped here, outside the lock: a last reference runs a destructor that takes it.
}

}  // namespace abx::platform
