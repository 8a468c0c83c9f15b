#include "abx/platform/gateway.h"

#include <sys/socket.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "abx/base/log.h"

namespace abx::platform {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;

http::Response e2b_error(unsigned status, const std::string& message, unsigned version,
                         bool keep_alive) {
  return http::json_response(status, boost::json::object{{"code", status}, {"message", message}},
                             version, keep_alive);
}

http::Response e2b_error(const Error& error, unsigned version, bool keep_alive) {
  return e2b_error(http::http_status(error.code()), error.message(), version, keep_alive);
}

namespace {

constexpr std::size_t kRelayBuffer = 64 * 1024;

// RFC 9110 §7.6.1: Connection and the fields it lists, plus the classic hop-by-hop set, end at
// this hop. Transfer-Encoding is kept: the serializer re-frames the body the same way.
template <class Fields>
void strip_hop_by_hop(Fields& f, bool keep_upgrade) {
  std::vector<std::string> listed;
  for (auto it = f.find(bhttp::field::connection);
       it != f.end() && it->name() == bhttp::field::connection; ++it) {
    std::string_view v = it->value();
    std::size_t start = 0;
    while (start <= v.size()) {
      std::size_t end = v.find(',', start);
      if (end == std::string_view::npos) end = v.size();
      std::string_view tok = v.substr(start, end - start);
      while (!tok.empty() && tok.front() == ' ') tok.remove_prefix(1);
      while (!tok.empty() && tok.back() == ' ') tok.remove_suffix(1);
      if (!tok.empty()) listed.emplace_back(tok);
      start = end + 1;
    }
  }
  for (const auto& name : listed) {
    if (keep_upgrade && beast::iequals(name, "upgrade")) continue;
    if (beast::iequals(name, "transfer-encoding") || beast::iequals(name, "content-length")) {
      continue;  // framing fields are never dropped on a client's say-so
    }
    f.erase(name);
  }
  f.erase(bhttp::field::connection);
  f.erase(bhttp::field::keep_alive);
  f.erase(bhttp::field::proxy_connection);
  f.erase(bhttp::field::proxy_authorization);
  f.erase(bhttp::field::te);
  f.erase(bhttp::field::trailer);
  if (keep_upgrade) {
    f.set(bhttp::field::connection, "upgrade");
  } else {
    f.erase(bhttp::field::upgrade);
  }
}

// Relays one message whose header `p` has read from `in` to `out`, body included.
template <bool isRequest, class In, class Out>
awaitable<beast::error_code> relay(In& in, beast::flat_buffer& inbuf,
                                   bhttp::parser<isRequest, bhttp::buffer_body>& p, Out& out) {
  std::vector<char> buf(kRelayBuffer);
  bhttp::serializer<isRequest, bhttp::buffer_body> sr{p.get()};
  beast::error_code hec;
  [[maybe_unused]] auto hn =
      co_await bhttp::async_write_header(out, sr, asio::redirect_error(use_awaitable, hec));
  if (hec) co_return hec;
  while (!sr.is_done()) {
    if (!p.is_done()) {
      p.get().body().data = buf.data();
      p.get().body().size = buf.size();
      // read_some: forward whatever has arrived, so streams are not held back.
      beast::error_code ec;
      [[maybe_unused]] auto n =
          co_await bhttp::async_read_some(in, inbuf, p, asio::redirect_error(use_awaitable, ec));
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) co_return ec;
      p.get().body().size = buf.size() - p.get().body().size;
      p.get().body().data = buf.data();
      p.get().body().more = !p.is_done();
      if (p.get().body().size == 0 && !p.is_done()) continue;
      // An empty buffer must be null: Beast's chunked serializer turns a non-null empty
      // buffer with more=false into a "0\r\n\r\n" of its own, then adds the real last chunk,
      // and the doubled terminator reads as garbage at the start of the next message.
      if (p.get().body().size == 0) p.get().body().data = nullptr;
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
      p.get().body().more = false;
    }
    beast::error_code ec;
    [[maybe_unused]] auto n =
        co_await bhttp::async_write(out, sr, asio::redirect_error(use_awaitable, ec));
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) co_return ec;
  }
  co_return beast::error_code{};
}

// A pooled upstream connection the sandbox closed while idle reads as EOF: don't reuse it.
bool still_open(beast::tcp_stream& s) {
  char c;
  ssize_t n = ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Copies bytes one way until EOF or error, then half-closes the other side.
awaitable<void> pump(beast::tcp_stream& from, beast::flat_buffer& pending, beast::tcp_stream& to) {
  if (pending.size() > 0) {
    beast::error_code ec;
    [[maybe_unused]] auto n =
        co_await asio::async_write(to, pending.data(), asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    pending.consume(n);
  }
  std::vector<char> buf(kRelayBuffer);
  for (;;) {
    beast::error_code ec;
    [[maybe_unused]] auto n =
        co_await from.async_read_some(asio::buffer(buf), asio::redirect_error(use_awaitable, ec));
    if (n > 0) {
      beast::error_code wec;
      [[maybe_unused]] auto wn = co_await asio::async_write(
          to, asio::buffer(buf.data(), n), asio::redirect_error(use_awaitable, wec));
      if (wec) break;
    }
    if (ec) break;
  }
  beast::error_code ignored;
  to.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace

struct Gateway::Impl {
  GatewayOptions opt;
  GatewayBackend* backend = nullptr;
  Logger log{"gateway"};
  std::mutex mu;
  std::condition_variable cv;
  std::map<void*, std::weak_ptr<beast::tcp_stream>> clients;  // idle-closable client streams
  std::map<void*, bool> busy;                                 // guarded by mu
  std::atomic<bool> draining{false};
  bool stopped = false;

  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  asio::thread_pool pool;
  std::vector<std::thread> threads;
  std::uint16_t port = 0;

  explicit Impl(int workers) : pool(static_cast<std::size_t>(std::max(1, workers))) {}

  awaitable<void> accept_loop();
  using Upstreams = std::map<std::string, std::unique_ptr<beast::tcp_stream>>;

  awaitable<void> session(tcp::socket socket);
  awaitable<bool> serve_one(beast::tcp_stream& client, void* key, beast::flat_buffer& buf,
                            Upstreams& upstreams, bool first);
  // Takes an lvalue on purpose: see on_pool about temporaries in co_await expressions.
  awaitable<void> write_error(beast::tcp_stream& client, http::Response& res);
  awaitable<bool> proxy(beast::tcp_stream& client, beast::flat_buffer& buf,
                        bhttp::request_parser<bhttp::empty_body>& hp, const Route& route,
                        Upstreams& upstreams);
  void set_busy(void* key, bool b) {
    std::lock_guard lock(mu);
    busy[key] = b;
  }

  // Runs a blocking call on the worker pool; `co_await` yields std::optional<result> (always
  // engaged) back on the coroutine's own strand.
  // GCC 12 can destroy a non-trivial temporary of a full-expression that contains co_await
  // twice (found here with ASan). So: callers pass lambdas that capture only pointers, error
  // responses are named locals, and only trivially copyable values (two pointers) cross into
  // Asio's initiate coroutine; the callable travels in a heap job owned by the handlers.
  template <class F>
  auto on_pool(F f) {
    using R = std::invoke_result_t<F&>;
    auto* job = new F(std::move(f));
    return asio::async_initiate<const asio::use_awaitable_t<>&, void(std::optional<R>)>(
        [this, job](auto handler) {
          auto ex = asio::get_associated_executor(handler);
          asio::post(pool, [job, handler = std::move(handler), ex]() mutable {
            std::unique_ptr<F> owned(job);
            std::optional<R> r;
            r.emplace((*owned)());
            owned.reset();
            asio::post(ex, [handler = std::move(handler), r = std::move(r)]() mutable {
              std::move(handler)(std::move(r));
            });
          });
        },
        use_awaitable);
  }
};

awaitable<void> Gateway::Impl::accept_loop() {
  for (;;) {
    beast::error_code ec;
    [[maybe_unused]] auto socket = co_await acceptor.async_accept(
        asio::make_strand(ioc), asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open()) co_return;
      asio::steady_timer t(ioc, std::chrono::milliseconds(50));  // EMFILE: back off, no spin
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    beast::error_code nec;
    socket.set_option(tcp::no_delay(true), nec);
    auto ex = socket.get_executor();
    asio::co_spawn(ex, session(std::move(socket)), asio::detached);
  }
}

awaitable<void> Gateway::Impl::session(tcp::socket socket) {
  auto client = std::make_shared<beast::tcp_stream>(std::move(socket));
  void* key = client.get();
  {
    std::lock_guard lock(mu);
    clients[key] = client;
    busy[key] = false;
  }
  beast::flat_buffer buf;
  Upstreams upstreams;
  bool first = true;
  // One request per iteration; the work lives in serve_one so that no local of a request
  // outlives its iteration inside this coroutine frame.
  while (!draining.load()) {
    bool more = co_await serve_one(*client, key, buf, upstreams, first);
    first = false;
    if (!more) break;
  }
  beast::error_code ignored;
  client->socket().shutdown(tcp::socket::shutdown_send, ignored);
  client->close();
  {
    std::lock_guard lock(mu);
    clients.erase(key);
    busy.erase(key);
  }
  cv.notify_all();
}

awaitable<void> Gateway::Impl::write_error(beast::tcp_stream& client, http::Response& res) {
  res.keep_alive(false);
  res.set(bhttp::field::server, "abxd");
  res.prepare_payload();
  beast::error_code ignored;
  client.expires_after(opt.limits.write_timeout);
  co_await bhttp::async_write(client, res, asio::redirect_error(use_awaitable, ignored));
}

awaitable<bool> Gateway::Impl::serve_one(beast::tcp_stream& client, void* key,
                                         beast::flat_buffer& buf, Upstreams& upstreams,
                                         bool first) {
  bhttp::request_parser<bhttp::empty_body> hp;
  hp.header_limit(static_cast<std::uint32_t>(opt.limits.max_header_bytes));
  hp.body_limit(boost::none);
  set_busy(key, false);
  client.expires_after(first || buf.size() > 0 ? opt.limits.header_timeout
                                               : opt.limits.idle_timeout);
  beast::error_code ec;
  co_await bhttp::async_read_header(client, buf, hp, asio::redirect_error(use_awaitable, ec));
  set_busy(key, true);
  if (ec) {
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::eof || (ec == bhttp::error::partial_message && buf.size() == 0)) {
      co_return false;
    }
    unsigned status = ec == bhttp::error::header_limit ? 431 : 400;
    {
      http::Response err_res = e2b_error(status, "malformed HTTP request: " + ec.message());
      co_await write_error(client, err_res);
    }
    co_return false;
  }
  const unsigned version = hp.get().version();
  if (auto bad = http::check_request_header(hp.get(), opt.limits)) {
    {
      http::Response err_res = e2b_error(bad->status, bad->error.message(), version);
      co_await write_error(client, err_res);
    }
    co_return false;
  }
  auto route = route_request(hp.get()[bhttp::field::host], hp.get()["E2b-Sandbox-Id"],
                             hp.get()["E2b-Sandbox-Port"], opt.domain);
  if (!route.ok()) {
    {
      http::Response err_res = e2b_error(400, route.error().message(), version);
      co_await write_error(client, err_res);
    }
    co_return false;
  }
  if (route->kind == Route::Kind::kSandbox) {
    client.expires_never();  // streams may run as long as the process or watch they carry
    co_return co_await proxy(client, buf, hp, *route, upstreams);
  }

  // Control plane: a bounded body, then the backend on a worker thread.
  auto cl = hp.content_length();
  if (cl && *cl > opt.limits.max_body_bytes) {
    {
      http::Response err_res = e2b_error(413, "request body too large", version);
      co_await write_error(client, err_res);
    }
    co_return false;
  }
  bhttp::request_parser<bhttp::string_body> sp(std::move(hp));
  sp.body_limit(opt.limits.max_body_bytes);
  if (!sp.is_done()) {
    client.expires_after(opt.limits.body_timeout);
    co_await bhttp::async_read(client, buf, sp, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec != beast::error::timeout && ec != bhttp::error::end_of_stream) {
        unsigned st = ec == bhttp::error::body_limit ? 413 : 400;
        {
          http::Response err_res = e2b_error(st, "malformed request body: " + ec.message());
          co_await write_error(client, err_res);
        }
      }
      co_return false;
    }
  }
  client.expires_never();
  http::Request req = sp.release();
  bool keep_alive = req.keep_alive();
  http::Request* reqp = &req;  // the lambda captures pointers only (see on_pool)
  std::optional<http::Response> answered = co_await on_pool([this, reqp] {
    try {
      return backend->handle_control(std::move(*reqp));
    } catch (const std::exception& e) {
      return e2b_error(500, std::string("internal error: ") + e.what());
    }
  });
  http::Response& res = *answered;
  keep_alive = keep_alive && res.keep_alive() && !draining.load();
  res.keep_alive(keep_alive);
  res.version(version == 10 ? 10 : 11);
  res.set(bhttp::field::server, "abxd");
  res.prepare_payload();
  client.expires_after(opt.limits.write_timeout);
  co_await bhttp::async_write(client, res, asio::redirect_error(use_awaitable, ec));
  co_return !ec && keep_alive;
}

awaitable<bool> Gateway::Impl::proxy(beast::tcp_stream& client, beast::flat_buffer& buf,
                                     bhttp::request_parser<bhttp::empty_body>& hp,
                                     const Route& route, Upstreams& upstreams) {
  const unsigned version = hp.get().version();
  const bool client_keep_alive = hp.get().keep_alive();
  const bool head = hp.get().method() == bhttp::verb::head;
  const bool upgrade = hp.upgrade();
  std::string key = route.sandbox_id + ":" + std::to_string(route.port);

  // Credentials are checked on every request, reused connection or not.
  // authorize_sandbox only reads memory, so it runs right here (a hop to the worker pool and
  // back costs more than the check); connecting may block and goes to the pool.
  const Route* routep = &route;
  std::optional<Status> authorized;
  authorized.emplace(backend->authorize_sandbox(route, hp.get().base()));
  std::unique_ptr<beast::tcp_stream>& up = upstreams[key];
  if (!authorized->ok() && authorized->error().code() == ErrorCode::kFailedPrecondition) {
    // Paused: a pooled connection would hang on frozen tasks; connect_sandbox resumes it.
    authorized.emplace(Status{});
    up.reset();
  }
  if (authorized->ok() && up && !still_open(*up)) up.reset();
  Status connected;
  if (authorized->ok() && !up) {
    auto fd = co_await on_pool([this, routep] { return backend->connect_sandbox(*routep); });
    if (fd->ok()) {
      tcp::socket sock(client.get_executor());
      beast::error_code aec;
      sock.assign(tcp::v4(), (*fd)->release(), aec);
      if (aec) co_return false;
      // Header and body go out as separate writes: without TCP_NODELAY, Nagle's algorithm
      // holds the second until the first is acked (40 ms of delayed ACK on every request).
      sock.set_option(tcp::no_delay(true), aec);
      up = std::make_unique<beast::tcp_stream>(std::move(sock));
    } else {
      connected = fd->error();
    }
  }
  const Status& failed = !authorized->ok() ? *authorized : connected;
  if (!failed.ok()) {
    upstreams.erase(key);
    const Error& e = failed.error();
    unsigned status = e.code() == ErrorCode::kNotFound || e.code() == ErrorCode::kUnavailable ||
                              e.code() == ErrorCode::kDeadlineExceeded
                          ? 502
                          : http::http_status(e.code());
    // The request body (if any) is unread: close after answering.
    {
      http::Response err_res = e2b_error(status, e.message(), version, false);
      co_await write_error(client, err_res);
    }
    co_return false;
  }

  bhttp::request_parser<bhttp::buffer_body> rp(std::move(hp));
  strip_hop_by_hop(rp.get(), upgrade);
  rp.get().keep_alive(upgrade ? false : true);
  if (upgrade) rp.get().set(bhttp::field::connection, "upgrade");
  auto rec = co_await relay(client, buf, rp, *up);
  if (rec) {
    upstreams.erase(key);
    if (rec == bhttp::error::end_of_stream || rec == asio::error::eof) co_return false;
    // The upstream went away mid-request: tell the client if nothing was sent yet.
    {
      http::Response err_res =
          e2b_error(502, "sandbox connection failed: " + rec.message(), version, false);
      co_await write_error(client, err_res);
    }
    co_return false;
  }

  beast::flat_buffer upbuf;
  bhttp::response_parser<bhttp::buffer_body> resp;
  resp.body_limit(boost::none);
  resp.header_limit(64 * 1024);
  resp.skip(head);
  beast::error_code hec;
  [[maybe_unused]] auto hn =
      co_await bhttp::async_read_header(*up, upbuf, resp, asio::redirect_error(use_awaitable, hec));
  if (hec) {
    upstreams.erase(key);
    {
      http::Response err_res =
          e2b_error(502, "no response from the sandbox: " + hec.message(), version, false);
      co_await write_error(client, err_res);
    }
    co_return false;
  }
  const bool switching = resp.get().result() == bhttp::status::switching_protocols;
  const bool upstream_keep = resp.get().keep_alive();
  strip_hop_by_hop(resp.get(), switching);
  const bool keep = client_keep_alive && !switching && !draining.load();
  resp.get().keep_alive(keep);
  if (switching) resp.get().set(bhttp::field::connection, "upgrade");
  auto sec = co_await relay(*up, upbuf, resp, client);
  if (sec) {
    upstreams.erase(key);
    co_return false;
  }
  if (switching) {
    using namespace asio::experimental::awaitable_operators;
    co_await (pump(client, buf, *up) && pump(*up, upbuf, client));
    upstreams.erase(key);
    co_return false;
  }
  if (!upstream_keep || upbuf.size() > 0) upstreams.erase(key);
  co_return keep;
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<Gateway>> Gateway::start(GatewayOptions options, GatewayBackend& backend) {
  auto impl = std::make_unique<Impl>(options.workers);
  impl->opt = std::move(options);
  impl->backend = &backend;
  beast::error_code ec;
  auto addr = asio::ip::make_address(impl->opt.host, ec);
  if (ec) return invalid_argument("invalid listen address '" + impl->opt.host + "'");
  tcp::endpoint ep(addr, impl->opt.port);
  std::string where = impl->opt.host + ":" + std::to_string(impl->opt.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return unavailable("cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  asio::co_spawn(impl->ioc, impl->accept_loop(), asio::detached);
  int n = impl->opt.io_threads > 0
              ? impl->opt.io_threads
              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < n; ++i) impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

std::uint16_t Gateway::port() const { return impl_->port; }
const std::string& Gateway::host() const { return impl_->opt.host; }

void Gateway::shutdown(std::chrono::milliseconds drain) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
  }
  if (impl_->draining.exchange(true)) return;
  asio::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  auto close_where = [this](bool only_idle) {
    std::vector<std::shared_ptr<beast::tcp_stream>> victims;
    {
      std::lock_guard lock(impl_->mu);
      for (auto& [k, w] : impl_->clients) {
        if (only_idle && impl_->busy[k]) continue;
        if (auto s = w.lock()) victims.push_back(std::move(s));
      }
    }
    for (auto& s : victims) {
      asio::post(s->get_executor(), [s] { s->cancel(); });
    }
  };
  close_where(true);
  {
    std::unique_lock lock(impl_->mu);
    impl_->cv.wait_for(lock, drain, [this] { return impl_->clients.empty(); });
  }
  close_where(false);
  {
    std::unique_lock lock(impl_->mu);
    impl_->cv.wait_for(lock, std::chrono::milliseconds(500),
                       [this] { return impl_->clients.empty(); });
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->pool.join();
  std::lock_guard lock(impl_->mu);
  impl_->stopped = true;
}

}  // namespace abx::platform
