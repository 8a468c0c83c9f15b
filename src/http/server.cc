// The acceptor, the Responder and draining; see session.h for how the rest is split.
#include "abx/http/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "abx/base/cpus.h"
#include "session.h"

namespace abx::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {
// Asio opens and accepts sockets without SOCK_CLOEXEC: set it at once, so a process the server's
// owner starts (envd starts other users' processes) never inherits the listener or a connection.
// A fork racing in between is what the spawners' close_range() after fork covers.
// FD_CLOEXEC is the only descriptor flag: set, not read and or'd in.
void set_cloexec(int fd) { (void)::fcntl(fd, F_SETFD, FD_CLOEXEC); }
}  // namespace

BodyFile::~BodyFile() {
  if (!released_) ::unlink(path_.c_str());
}

Responder::State::~State() {
  if (!done.load() && session) {
    auto res = session->render_error(internal_error("the handler did not answer"), 500, 11);
    res.keep_alive(false);
    session->respond(std::move(res));
  }
}

Responder::Responder(std::shared_ptr<detail::Session> session) : state_(std::make_shared<State>()) {
  state_->session = std::move(session);
}

void Responder::operator()(Response res) const {
  if (state_->done.exchange(true)) return;  // exactly once
  state_->session->respond(std::move(res));
}

asio::any_io_executor Responder::executor() const { return state_->session->executor(); }

std::shared_ptr<BodyFile> Responder::body_file() const { return state_->body_file; }

std::shared_ptr<StreamWriter> Responder::stream(Response header) const {
  if (state_->done.exchange(true)) return nullptr;  // already answered
  return std::make_shared<StreamWriter>(state_->session->begin_stream(std::move(header)));
}

asio::any_io_executor Server::Impl::session_executor(tcp::acceptor& a) {
  if (!one_thread) return asio::make_strand(ioc);
  if (&a == &acceptor) return ioc.get_executor();  // not its strand: one thread needs none
  return a.get_executor();
}

void Server::Impl::do_accept(tcp::acceptor& a) {
  a.async_accept(session_executor(a), [this, &a](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !a.is_open()) return;
      // EMFILE and friends: back off briefly instead of spinning.
      auto t =
          std::make_shared<asio::steady_timer>(a.get_executor(), std::chrono::milliseconds(50));
      t->async_wait([this, t, &a](beast::error_code) { do_accept(a); });
      return;
    }
    set_cloexec(socket.native_handle());
    if (connections.load() >= opt.limits.max_connections) {
      static const std::string kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Connection: close\r\nContent-Length: 62\r\n\r\n"
          "{\"error\":\"too many connections\",\"type\":\"ResourceExhausted\"}\n\n";
      beast::error_code wec;
      socket.non_blocking(true, wec);
      socket.write_some(asio::buffer(kBusy), wec);
      socket.close(wec);
    } else {
      beast::error_code nec;
      socket.set_option(tcp::no_delay(true), nec);
      // Non-blocking from the start, as the user's flag: send_now's writes need it, and with it
      // set Asio's first asynchronous operation does not set its own (one FIONBIO, not two).
      socket.non_blocking(true, nec);
      ++connections;
      std::make_shared<detail::Session>(std::move(socket), *this)->start();
    }
    do_accept(a);
  });
}

namespace {
// Opens `a` listening on `ep`; with `reuse_port`, SO_REUSEPORT (others may join it on `ep`).
beast::error_code listen_on(tcp::acceptor& a, const tcp::endpoint& ep, bool reuse_port) {
  beast::error_code ec;
  a.open(ep.protocol(), ec);
  if (!ec) set_cloexec(a.native_handle());
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec && reuse_port)
    a.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  return ec;
}
}  // namespace

std::vector<std::shared_ptr<detail::Session>> Server::Impl::live_sessions() {
  std::vector<std::shared_ptr<detail::Session>> out;
  std::lock_guard lock(mu);
  for (auto& [raw, weak] : sessions) {
    if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;  // dropped by the caller outside the lock (a last reference runs ~Session)
}

void Server::Impl::on_session_closed(detail::Session* s) {
  {
    std::lock_guard lock(mu);
    sessions.erase(s);
    --connections;
    // Under the lock: shutdown() returns (and ~Server destroys `cv`) once it sees `sessions`
    // empty, which it can only see after this notify has finished.
    cv.notify_all();
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<Server>> Server::start(ServerOptions options, Handler handler) {
  const int n = options.io_threads > 0 ? options.io_threads : static_cast<int>(usable_cpus());
  const bool one_thread_runs_ioc = options.context_per_thread || n == 1;
  auto impl = std::make_unique<Impl>(one_thread_runs_ioc ? 1 : BOOST_ASIO_CONCURRENCY_HINT_DEFAULT);
  impl->opt = std::move(options);
  impl->handler = std::move(handler);
  beast::error_code ec;
  auto addr = asio::ip::make_address(impl->opt.host, ec);
  if (ec) return invalid_argument("invalid listen address '" + impl->opt.host + "'");
  tcp::endpoint ep(addr, impl->opt.port);
  std::string where = impl->opt.host + ":" + std::to_string(impl->opt.port);
  const bool per_thread = impl->opt.context_per_thread && n > 1;
  if (per_thread) {
    // SO_REUSEPORT would let a second server (of this user) share the address and take part of
    // its connections without an error: a listener without it, bound first, gets the address
    // (or the error) and the port when it is 0; the group then binds in its place.
    tcp::acceptor probe(impl->ioc);
    if (beast::error_code pec = listen_on(probe, ep, false))
      return unavailable("cannot listen on " + where + ": " + pec.message());
    ep.port(probe.local_endpoint().port());
    probe.close(ec);
  }
  ec = listen_on(impl->acceptor, ep, per_thread);
  if (ec) return unavailable("cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  if (impl->opt.context_per_thread) {
    for (int i = 1; i < n; ++i) {
      impl->contexts.push_back(std::make_unique<asio::io_context>(1));
      impl->contexts_work.push_back(asio::make_work_guard(*impl->contexts.back()));
      auto& a = impl->more_acceptors.emplace_back(
          std::make_unique<tcp::acceptor>(*impl->contexts.back()));
      if (beast::error_code aec = listen_on(*a, ep, true))
        return unavailable("cannot listen on " + where + ": " + aec.message());
    }
    impl->do_accept(impl->acceptor);
    for (auto& a : impl->more_acceptors) impl->do_accept(*a);
    impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
    for (auto& c : impl->contexts) impl->threads.emplace_back([io = c.get()] { io->run(); });
  } else {
    impl->do_accept(impl->acceptor);
    for (int i = 0; i < n; ++i) {
      impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
    }
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

std::uint16_t Server::port() const { return impl_->port; }
const std::string& Server::host() const { return impl_->opt.host; }
bool Server::draining() const { return impl_->draining.load(); }
std::size_t Server::open_connections() const { return impl_->connections.load(); }
asio::any_io_executor Server::executor() const { return impl_->ioc.get_executor(); }

void Server::shutdown(std::chrono::milliseconds drain) {
  if (impl_->draining.exchange(true)) {
    wait();
    return;
  }
  // On the acceptor's strand: an accept handler re-arming it on another thread runs there too.
  asio::post(impl_->acceptor.get_executor(), [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  for (auto& a : impl_->more_acceptors) {
    asio::post(a->get_executor(), [a = a.get()] {
      beast::error_code ec;
      a->close(ec);
    });
  }
  for (auto& s : impl_->live_sessions()) s->close_if_idle();
  {
    std::unique_lock lock(impl_->mu);
    impl_->cv.wait_for(lock, drain, [this] { return impl_->sessions.empty(); });
  }
  for (auto& s : impl_->live_sessions()) s->force_close();
  {
    // Give forced closes a moment to run their completion handlers, then stop.
    std::unique_lock lock(impl_->mu);
    impl_->cv.wait_for(lock, std::chrono::milliseconds(200),
                       [this] { return impl_->sessions.empty(); });
  }
  impl_->work.reset();
  impl_->contexts_work.clear();
  impl_->ioc.stop();
  for (auto& c : impl_->contexts) c->stop();
  for (auto& t : impl_->threads) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopped = true;
    impl_->cv.notify_all();
  }
}

void Server::wait() {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [this] { return impl_->stopped; });
}

}  // namespace abx::http
