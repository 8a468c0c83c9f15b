#include "abx/platform/gateway.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "abx/auth/signing.h"
#include "abx/base/log.h"
#include "abx/base/try.h"

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
// The most of the upstream's read buffer a connection keeps between requests.
constexpr std::size_t kKeptUpstreamBuffer = 16 * 1024;

// RFC 9110 §7.6.1: Connection and the fields it lists, plus the classic hop-by-hop set, end at
// this hop. Transfer-Encoding is kept: relay() re-frames the body the same way.
template <class Fields>
void strip_hop_by_hop(Fields& f, bool keep_upgrade) {
  // Usually none is there (a call's request and answer): one pass over the fields comparing
  // their enum instead of a case-insensitive tree lookup for each name below.
  const bool any = std::any_of(f.begin(), f.end(), [](const auto& field) {
    switch (field.name()) {
      case bhttp::field::connection:
      case bhttp::field::keep_alive:
      case bhttp::field::proxy_connection:
      case bhttp::field::proxy_authorization:
      case bhttp::field::te:
      case bhttp::field::trailer:
      case bhttp::field::upgrade:
        return true;
      default:
        return false;
    }
  });
  if (!any && !keep_upgrade) return;
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

// Platform credentials end at abxd (issue 11): the API key (X-API-KEY, or Authorization: Bearer
// e2b_...) and an abx request signature authenticate a caller to the control plane and must
// never reach code inside a sandbox. X-Access-Token and any other Authorization (envd's Basic
// username, a sandbox token as Bearer for the command server's /mcp) pass: the sandbox checks
// those itself.
template <class Fields>
void strip_platform_credentials(Fields& f) {
  // One pass to find both (Authorization by its enum, X-API-KEY by name).
  auto it = f.end();
  bool api_key = false;
  for (auto i = f.begin(); i != f.end(); ++i) {
    if (i->name() == bhttp::field::authorization) {
      if (it == f.end()) it = i;
    } else if (i->name_string().size() == 9 && beast::iequals(i->name_string(), "x-api-key")) {
      api_key = true;
    }
  }
  if (api_key) f.erase("X-API-KEY");
  if (it == f.end()) return;
  std::string_view v = it->value();
  auto starts_with_nocase = [&](std::string_view prefix) {
    return v.size() >= prefix.size() && beast::iequals(v.substr(0, prefix.size()), prefix);
  };
  if (starts_with_nocase("Bearer e2b_") || starts_with_nocase(auth::kAlgorithm)) {
    f.erase(bhttp::field::authorization);
  }
}

// The size of the body of the message whose header `p` has read, when that body is already whole
// in `inbuf` (0: it has none); nullopt when it is chunked, unsized or still arriving.
template <bool isRequest>
std::optional<std::size_t> whole_body(const bhttp::parser<isRequest, bhttp::buffer_body>& p,
                                      const beast::flat_buffer& inbuf) {
  if (p.is_done()) return 0;
  if (p.chunked() || !p.content_length() || *p.content_length() > inbuf.size()) return std::nullopt;
  return static_cast<std::size_t>(*p.content_length());
}

struct IdleWatch;  // below

// A pooled connection to one sandbox port, made in the sandbox's checkpoint epoch `epoch`.
struct Upstream {
  std::string sandbox_id;
  std::uint16_t port = 0;
  std::uint64_t epoch = 0;
  std::unique_ptr<beast::tcp_stream> stream;  // null: none open
  bool in_use = false;                        // a request is on it (never pooled then)
  // Between two requests of its client connection, and until the answer to the next one starts
  // to arrive: watch_idle()'s wait. Null when no wait is armed.
  std::shared_ptr<IdleWatch> watch;
};

// "sandbox <id> port <n>", for the log lines of a relay.
std::string where(const Route& route) {
  return "sandbox " + route.sandbox_id + " port " + std::to_string(route.port);
}

// A pooled upstream connection the sandbox closed while idle reads as EOF: don't reuse it.
bool still_open(beast::tcp_stream& s) {
  char c;
  ssize_t n = ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// watch_idle()'s wait on a kept upstream connection, and what it saw. Armed once an answer is
// relayed, it first tells the next request whether the sandbox closed the connection meanwhile
// (readable while idle: EOF, or bytes no request asked for). The wait then stays armed while the
// request goes upstream and becomes the way its answer is awaited (await_answer()): the I/O
// thread sleeps in epoll right after sending the request, and wakes to a read that finds the
// answer, as nginx does with its cached connections. Reading at once instead tried a receive
// that found nothing after every send (the sandbox cannot have answered yet), and cancelling the
// wait posted its aborted completion, which cost one more epoll_wait: both right after the
// request's send, when the sandbox's server has just been woken to answer it, often on this core.
struct IdleWatch {
  bool fired = false;    // the wait completed
  beast::error_code ec;  // how: success when readable
  // A request's await_answer(), resumed from the wait's completion: true when readable.
  std::optional<asio::any_completion_handler<void(bool)>> waiter;
};

// Arms the wait on `u`'s connection for the time until its client connection's next request.
// The check this replaces, still_open()'s MSG_PEEK, was a syscall between a request's arrival and
// its send upstream; the wait's epoll_ctl comes after the answer is on its way to the client.
void watch_idle(Upstream& u) {
  u.watch = std::make_shared<IdleWatch>();
  u.stream->socket().async_wait(tcp::socket::wait_read, [w = u.watch](beast::error_code ec) {
    w->fired = true;
    w->ec = ec;
    if (w->waiter) {
      auto waiter = std::move(*w->waiter);
      w->waiter.reset();
      std::move(waiter)(!ec);
    }
  });
}

// Before a request goes out on `u`: drops the connection when the sandbox closed it while it was
// idle (watch_idle()'s wait fired). A connection kept without a wait is checked with
// still_open(). An armed wait stays armed, for await_answer().
void end_watch(Upstream& u) {
  if (!u.stream) {
    u.watch.reset();
    return;
  }
  if (!u.watch) {
    if (!still_open(*u.stream)) u.stream.reset();
    return;
  }
  if (u.watch->fired) {
    u.watch.reset();
    u.stream.reset();
  }
}

// After a request went out on `u`: waits until its answer can be read, on watch_idle()'s wait
// when that is still armed. True when the socket is readable now (read it without waiting).
awaitable<bool> await_answer(Upstream& u) {
  std::shared_ptr<IdleWatch> w = std::move(u.watch);
  if (!w) co_return false;
  if (w->fired) co_return !w->ec;
  // From here the wait's handler owns the watch, and the watch this coroutine: a wait destroyed
  // without running (its io_context going away) takes the coroutine with it, where a reference
  // held here would make a cycle that nothing frees.
  IdleWatch* raw = w.get();  // only trivially copyable values into the initiation (see on_pool)
  w.reset();
  const bool readable = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(bool)>(
      [raw](auto handler) { raw->waiter.emplace(std::move(handler)); }, use_awaitable);
  co_return readable;
}

// The idle upstream connections of one I/O thread, which its client connections share: a new
// client connection's first call to a sandbox port takes one that an ended client connection
// left, instead of connecting (nginx's upstream keepalive). Each waits for readability while
// idle: the sandbox closing it (its server's idle timeout, a kill, a checkpoint) removes it at
// once. One whose end goes away without a FIN (a checkpoint of established connections may do
// that) is closed after kIdleTime, so it keeps a dead sandbox's network namespace no longer
// than that; an epoch that moved on is never reused. Used only on its own thread.
class IdleUpstreams {
 public:
  // At most this many per I/O thread; the oldest is closed to make room.
  static constexpr std::size_t kMax = 256;
  // How long one waits for a client connection (the sandbox's own servers close theirs after 60 s).
  static constexpr std::chrono::seconds kIdleTime{30};

  explicit IdleUpstreams(const asio::any_io_executor& ex) : owner_(std::this_thread::get_id()) {
    sweep_.emplace(ex);
  }

  // An open idle connection to the port of `u` made in its epoch (moved into u.stream), if any.
  void take(Upstream& u) {
    for (std::size_t i = idle_.size(); i-- > 0;) {
      Idle& c = idle_[i];
      if (c.up.port != u.port || c.up.sandbox_id != u.sandbox_id) continue;
      std::unique_ptr<beast::tcp_stream> stream = std::move(c.up.stream);
      const bool same_epoch = c.up.epoch == u.epoch;
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
      beast::error_code ec;
      stream->socket().cancel(ec);  // its wait ends with operation_aborted
      if (same_epoch && still_open(*stream)) {
        u.stream = std::move(stream);
        u.watch.reset();
        return;
      }
    }
  }

  // Keeps `u`'s connection for another client connection of this thread. Dropped (closed)
  // when called from another thread or with a request on it.
  void give(Upstream&& u) {
    if (!u.stream || u.in_use || std::this_thread::get_id() != owner_ || !sweep_) return;
    if (idle_.size() >= kMax) idle_.erase(idle_.begin());
    const std::uint64_t serial = ++serial_;
    beast::tcp_stream& s = *u.stream;
    idle_.push_back(Idle{std::move(u), serial, std::chrono::steady_clock::now()});
    s.socket().async_wait(tcp::socket::wait_read, [this, serial](beast::error_code ec) {
      if (ec == asio::error::operation_aborted) return;  // taken (or closed)
      std::erase_if(idle_, [serial](const Idle& c) { return c.serial == serial; });
    });
    if (!sweeping_) sweep_after(kIdleTime);
  }

  // Closes every idle connection and stops the sweep, for good: called once the I/O thread has
  // stopped and before its io_context goes. Client connections that end after it (destroyed
  // with the io_context, on another thread) give theirs to no one.
  void close() {
    idle_.clear();
    sweep_.reset();
  }

 private:
  struct Idle {
    Upstream up;
    std::uint64_t serial = 0;
    std::chrono::steady_clock::time_point since;
  };

  // Closes what has waited kIdleTime, then waits for the next oldest one's turn.
  void sweep_after(std::chrono::steady_clock::duration d) {
    sweeping_ = true;
    sweep_->expires_after(d);
    sweep_->async_wait([this](beast::error_code ec) {
      if (ec) return;  // the pool is going away
      const auto now = std::chrono::steady_clock::now();
      std::erase_if(idle_, [now](const Idle& c) { return now - c.since >= kIdleTime; });
      sweeping_ = !idle_.empty();
      if (sweeping_) sweep_after(idle_.front().since + kIdleTime - now);
    });
  }

  std::vector<Idle> idle_;  // oldest first
  std::uint64_t serial_ = 0;
  std::thread::id owner_;
  std::optional<asio::steady_timer> sweep_;  // none once closed
  bool sweeping_ = false;
};

// What the proxy keeps per client connection (Takeover::user_data), reused across its requests.
struct ConnState {
  // Its upstream connections go to its I/O thread's idle ones when it ends.
  IdleUpstreams* idle = nullptr;
  ConnState() = default;
  ConnState(const ConnState&) = delete;
  ConnState& operator=(const ConnState&) = delete;
  ~ConnState() {
    if (idle == nullptr) return;
    for (Upstream& u : upstreams) idle->give(std::move(u));
  }

  // Upstream connections, one per sandbox port this client reached (usually one or two: a
  // vector scanned without building a key beats a map keyed by "sandbox:port:epoch").
  std::vector<Upstream> upstreams;
  // The relay buffer of a streamed body (kRelayBuffer bytes), made on first need: a call and its
  // answer, sized and whole, never touch it. Kept for the connection's later streams, since
  // malloc and free of a 64 KiB block per request cost more than the relay itself (the free
  // consolidates the heap).
  std::unique_ptr<char[]> piece;
  std::string head;  // the header block being written, reused from message to message
  // What the upstream sent, read from it per response; kept (empty) for its capacity.
  beast::flat_buffer upbuf;

  char* relay_buffer() {
    if (!piece) piece.reset(new char[kRelayBuffer]);
    return piece.get();
  }

  // The slot of `route`'s sandbox port; its connection is dropped when it is from before the
  // sandbox's last checkpoint (`epoch` moved on). Slots without a connection are forgotten first,
  // so the list holds only live ones (and the slot returned). Requests on one client connection
  // run one at a time: the reference stays valid for the request.
  Upstream& slot(const Route& route, std::uint64_t epoch) {
    std::erase_if(upstreams, [](const Upstream& u) { return !u.stream; });
    for (Upstream& u : upstreams) {
      if (u.port != route.port || u.sandbox_id != route.sandbox_id) continue;
      if (u.epoch != epoch) u.stream.reset();
      u.epoch = epoch;
      return u;
    }
    return upstreams.emplace_back(Upstream{route.sandbox_id, route.port, epoch, nullptr});
  }
};

// Reads into `b` from `s` until `p` has parsed a whole header (http::put_header,
// http::header_eof): straight on the socket, without the stream's timer bookkeeping and Beast's
// three composed operations, each of which copies the type-erased executor for its work guard.
// `ready`: the socket is readable (await_answer): the first read is tried at once, without the
// io_context (a read that completes at once is still handed to the scheduler, which polls epoll
// first), and only a read that finds nothing waits.
template <bool isRequest>
awaitable<beast::error_code> read_header(tcp::socket& s, beast::flat_buffer& b,
                                         bhttp::parser<isRequest, bhttp::buffer_body>& p,
                                         bool ready = false) {
  for (;;) {
    beast::error_code ec;
    if (http::put_header(p, b, ec)) co_return ec;
    if (ready) {
      ready = false;
      if (!s.non_blocking()) s.non_blocking(true, ec);
      const std::size_t got =
          ec ? 0 : s.read_some(b.prepare(beast::read_size(b, http::kHeaderReadSize)), ec);
      b.commit(got);
      if (ec == asio::error::eof) co_return http::header_eof(p);
      if (!ec || ec == asio::error::would_block) continue;
      co_return ec;
    }
    const std::size_t n =
        co_await s.async_read_some(b.prepare(beast::read_size(b, http::kHeaderReadSize)),
                                   asio::redirect_error(use_awaitable, ec));
    b.commit(n);
    if (ec == asio::error::eof) co_return http::header_eof(p);
    if (ec) co_return ec;
  }
}

// Parses what `inbuf` holds into `p`'s body buffer, element by element and without reading:
// whatever has already arrived joins the piece being relayed (a stream's last event, its end
// message and the final chunk often come in one segment). need_more and need_buffer are not
// errors: the piece is as big as what arrived, or as the buffer.
template <bool isRequest>
beast::error_code put_buffered(bhttp::parser<isRequest, bhttp::buffer_body>& p,
                               beast::flat_buffer& inbuf) {
  while (!p.is_done() && inbuf.size() > 0 && p.get().body().size > 0) {
    beast::error_code ec;
    const std::size_t used = p.put(inbuf.data(), ec);
    inbuf.consume(used);
    if (ec == bhttp::error::need_more || ec == bhttp::error::need_buffer) return {};
    if (ec || used == 0) return ec;
  }
  return {};
}

// Writes what is left of `bufs` after http::send_now, when the socket did not take it all at
// once. Only then: a coroutine call per message (its frame is a malloc) where one send usually
// does.
template <class Out>
awaitable<beast::error_code> write_rest(Out& out, std::span<asio::const_buffer> bufs) {
  beast::error_code ec;
  [[maybe_unused]] auto n =
      co_await asio::async_write(out.socket(), bufs, asio::redirect_error(use_awaitable, ec));
  co_return ec;
}

// When `out` turns readable while `relaying` lives: a read of 0 bytes or an error (peeked,
// never read) means its peer closed, and `in`'s pending read is cancelled so that the relay
// ends and the upstream connection with it; the sandbox's server then sees its client go (an
// abandoned runCode is interrupted, issue 38). Bytes waiting (a next request sent early) are
// left alone. Both sockets are on the connection's strand, as this completion is.
void watch_out_close(tcp::socket& out, tcp::socket& in, const std::shared_ptr<bool>& relaying) {
  out.async_wait(asio::socket_base::wait_read,
                 [alive = std::weak_ptr<bool>(relaying), &out, &in](beast::error_code ec) {
                   if (ec || !alive.lock() || !http::peer_closed(out)) return;
                   beast::error_code ignored;
                   in.cancel(ignored);
                 });
}

// Relays one message whose header `p` has read from `in` to `out`, body included.
// A streamed body goes through cs.relay_buffer(): one piece in flight, so a slow reader holds
// back the writer. On an error, `*out_failed` says whether it was writing to `out` (else reading
// from `in`).
// With `end_on_out_close`, `out` closing while a streamed body waits for `in` (a silent stream:
// a cell computing, a watch with no events) ends the relay at once (see watch_out_close).
// One function, not a coroutine per path: it is every call's hot path, and each awaited
// sub-coroutine would allocate a frame per message.
template <bool isRequest, class In, class Out>
awaitable<beast::error_code> relay(In& in, beast::flat_buffer& inbuf,
                                   bhttp::parser<isRequest, bhttp::buffer_body>& p, Out& out,
                                   ConnState& cs, bool* out_failed = nullptr,
                                   bool end_on_out_close = false) {
  bool ignored = false;
  if (out_failed == nullptr) out_failed = &ignored;
  *out_failed = false;
  // A whole message (no body, or a sized one already read, as a call's JSON and its answer are)
  // goes out in one write of its header block and body: no serializer, and the body's bytes
  // are taken from `inbuf` as the parser would have (the next message's bytes stay there).
  if (auto body = whole_body(p, inbuf)) {
    cs.head.clear();
    http::serialize_head(p.get().base(), cs.head);
    std::array<asio::const_buffer, 2> bufs{asio::buffer(cs.head),
                                           asio::buffer(inbuf.data().data(), *body)};
    beast::error_code ec;
    http::send_now(out.socket(), bufs, ec);
    if (!ec && asio::buffer_size(bufs) > 0) ec = co_await write_rest(out, bufs);
    *out_failed = static_cast<bool>(ec);
    if (!ec) inbuf.consume(*body);
    co_return ec;
  }
  // A streamed body (chunked, unsized, or not all here yet) goes piece by piece as it arrives,
  // framed as its header says: chunked, each piece as one chunk and the last chunk after the
  // end; otherwise as is. Framed and sent here, as for a whole message, rather than through
  // Beast's serializer and composed read and write operations: each of those completed through
  // the io_context (a scheduler round, often an extra epoll_wait, per piece) and copied the
  // type-erased executor for its work guard.
  char* const buf = cs.relay_buffer();
  const bool chunked = p.get().chunked();
  // Alive while this relay is: a watch that completes after it returned touches nothing.
  std::shared_ptr<bool> relaying;
  if (end_on_out_close) {
    relaying = std::make_shared<bool>(true);
    watch_out_close(out.socket(), in.socket(), relaying);
  }
  cs.head.clear();
  http::serialize_head(p.get().base(), cs.head);
  for (bool head_sent = false;; head_sent = true) {
    std::size_t size = 0;
    // The header goes out on its own only while none of the body has arrived (a stream that has
    // not started yet, a request waiting for 100 Continue): otherwise it leaves in one write
    // with the body's first piece, one send instead of two.
    const bool head_alone = !head_sent && inbuf.size() == 0;
    if (!p.is_done() && !head_alone) {
      p.get().body().data = buf;
      p.get().body().size = kRelayBuffer;
      // The socket is read only when what is buffered gave nothing: reading before forwarding
      // what is parsed would hold it back until more arrives.
      for (;;) {
        if (beast::error_code ec = put_buffered(p, inbuf)) co_return ec;
        if (p.is_done() || p.get().body().size < kRelayBuffer) break;
        beast::error_code ec;
        const std::size_t n = co_await in.socket().async_read_some(
            inbuf.prepare(beast::read_size(inbuf, kRelayBuffer)),
            asio::redirect_error(use_awaitable, ec));
        inbuf.commit(n);
        if (ec == asio::error::eof) p.put_eof(ec);  // a body that runs to the close ends here
        if (ec) co_return ec;
      }
      size = kRelayBuffer - p.get().body().size;  // > 0 unless the body just ended
    }
    const bool last = p.is_done();
    // Up to four pieces: the header (if not sent yet), the chunk's size line, its data, and the
    // chunk's CRLF (with the last chunk after it at the end).
    std::array<asio::const_buffer, 4> bufs{};
    std::size_t nb = 0;
    if (!head_sent) bufs[nb++] = asio::buffer(cs.head);
    http::ChunkLine line;
    nb = http::add_body_piece(bufs, nb, line, asio::buffer(buf, size), chunked, last);
    const std::span<asio::const_buffer> piece(bufs.data(), nb);
    beast::error_code ec;
    http::send_now(out.socket(), piece, ec);
    if (!ec && asio::buffer_size(piece) > 0) ec = co_await write_rest(out, piece);
    *out_failed = static_cast<bool>(ec);
    if (ec) co_return ec;
    if (last) break;
  }
  co_return beast::error_code{};
}

// The sandbox stopped taking a request body and closed: envd refuses an upload (a bad or
// expired signature, a bad path) from its header, answers and closes with the body unread, and
// our next write fails on its RST. Its answer usually sits in our receive queue still (Linux
// keeps received data readable after a reset), so it is read, bounded in size and time, and
// relayed instead of a 502 that hides it.
constexpr std::size_t kEarlyAnswerLimit = 64 * 1024;
constexpr std::chrono::seconds kEarlyAnswerTime{2};

awaitable<std::optional<http::Response>> read_early_answer(beast::tcp_stream& up, bool head) {
  up.expires_after(kEarlyAnswerTime);
  beast::flat_buffer b;
  for (int interim = 0; interim < 4; ++interim) {  // skipping a 100 Continue
    bhttp::response_parser<bhttp::string_body> p;
    p.header_limit(kEarlyAnswerLimit);
    p.body_limit(kEarlyAnswerLimit);
    p.skip(head);
    beast::error_code ec;
    [[maybe_unused]] auto n =
        co_await bhttp::async_read(up, b, p, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return std::nullopt;
    unsigned status = p.get().result_int();
    if (status == 100 || status == 102 || status == 103) continue;
    if (status < 200) co_return std::nullopt;  // 101: never relayed outside a tunnel
    http::Response res = p.release();
    strip_hop_by_hop(res, false);
    co_return res;
  }
  co_return std::nullopt;
}

// How long a new upstream connection may take (as connect_sandbox's open_tcp).
constexpr std::chrono::seconds kConnectTimeout{2};

// Copies bytes one way until EOF or error, then half-closes the other side.
awaitable<void> pump(beast::tcp_stream& from, beast::flat_buffer& pending, beast::tcp_stream& to,
                     char* buf) {
  if (pending.size() > 0) {
    beast::error_code ec;
    [[maybe_unused]] auto n =
        co_await asio::async_write(to, pending.data(), asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    pending.consume(n);
  }
  for (;;) {
    beast::error_code ec;
    [[maybe_unused]] auto n = co_await from.async_read_some(
        asio::buffer(buf, kRelayBuffer), asio::redirect_error(use_awaitable, ec));
    if (n > 0) {
      beast::error_code wec;
      [[maybe_unused]] auto wn = co_await asio::async_write(
          to, asio::buffer(buf, n), asio::redirect_error(use_awaitable, wec));
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
  asio::thread_pool pool;
  // One per I/O thread (idle_upstreams()). Closed by shutdown() while the server's io_contexts
  // are still there; kept (empty) until after the server, whose client connections, destroyed
  // with its io_contexts, still look at them.
  std::mutex idle_mu;
  std::vector<std::unique_ptr<IdleUpstreams>> idle_by_thread;
  std::unique_ptr<http::Server> server;
  std::atomic<bool> stopped{false};

  explicit Impl(int workers) : pool(static_cast<std::size_t>(std::max(1, workers))) {}

  Status on_header(http::Takeover& conn);
  IdleUpstreams& idle_upstreams(const asio::any_io_executor& ex);
  awaitable<std::unique_ptr<beast::tcp_stream>> connect_here(const Route* route);
  void handle_control(http::Request&& req, http::Responder respond);
  awaitable<void> proxy(http::Takeover conn, Route route);

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

// The calling I/O thread's idle upstream connections.
IdleUpstreams& Gateway::Impl::idle_upstreams(const asio::any_io_executor& ex) {
  thread_local std::pair<const Impl*, IdleUpstreams*> mine{nullptr, nullptr};
  if (mine.first == this) return *mine.second;
  std::lock_guard lock(idle_mu);
  idle_by_thread.push_back(std::make_unique<IdleUpstreams>(ex));
  mine = {this, idle_by_thread.back().get()};
  return *mine.second;
}

// A new upstream connection made on this I/O thread: the backend's socket in the sandbox's
// netns, connected to its port here. Through connect_sandbox it took the worker pool and the
// hops between threads that go with it (bench/README.md, "A call on a new connection"). Null when
// the backend cannot make the socket here or the connect fails (refused, timed out, connected
// to itself): connect_sandbox then tries, and its error is the one the client gets.
awaitable<std::unique_ptr<beast::tcp_stream>> Gateway::Impl::connect_here(const Route* route) {
  Result<UniqueFd> made = backend->sandbox_socket(*route);
  if (!made.ok()) co_return nullptr;
  auto up = std::make_unique<beast::tcp_stream>(tcp::socket(co_await asio::this_coro::executor));
  beast::error_code ec;
  up->socket().assign(tcp::v4(), made->release(), ec);
  if (ec) co_return nullptr;
  const tcp::endpoint port(asio::ip::address_v4::loopback(), route->port);
  up->expires_after(kConnectTimeout);
  co_await up->async_connect(port, asio::redirect_error(use_awaitable, ec));
  up->expires_never();
  // Nothing listens on a port of the ephemeral range that the kernel picked as the source too:
  // TCP's simultaneous open connects the socket to itself (runtime::connect_loopback).
  if (ec) co_return nullptr;
  if (const tcp::endpoint local = up->socket().local_endpoint(ec); ec || local == port)
    co_return nullptr;
  up->socket().set_option(tcp::no_delay(true), ec);  // see proxy(): Nagle would hold the body
  // The connect waited for writability, which left EPOLLOUT in the socket's epoll registration for
  // good: every later wait on it (watch_idle between requests, the idle pool's) re-arms that
  // edge-triggered event, true at once, and wakes this thread for nothing after each answer.
  // Registered afresh (one epoll_ctl DEL and ADD per connection), it waits for reads only.
  const int fd = up->socket().release(ec);
  if (ec) co_return nullptr;
  up->socket().assign(tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    co_return nullptr;
  }
  co_return up;
}

// Every request header, on its connection's strand: control-plane requests stay with the http
// server (bounded body, then handle_control); sandbox-plane requests take the connection over
// for the relay.
Status Gateway::Impl::on_header(http::Takeover& conn) {
  auto& h = conn.parser().get();
  auto route =
      route_request(h[bhttp::field::host], h["E2b-Sandbox-Id"], h["E2b-Sandbox-Port"], opt.domain);
  if (!route.ok()) return invalid_argument(route.error().message());
  if (route->kind == Route::Kind::kControl) {
    if (auto signed_route = backend->signed_files_route(h.base())) route = std::move(*signed_route);
  }
  if (route->kind == Route::Kind::kControl) {
    // The backend limits failed authentication per source: the source is this connection's
    // peer, whatever the client wrote.
    h.erase(kPeerAddressField);
    boost::system::error_code ec;
    const auto peer = conn.stream().socket().remote_endpoint(ec);
    h.set(kPeerAddressField, ec ? std::string("unknown") : peer.address().to_string());
    return {};
  }
  auto ex = conn.stream().get_executor();
  // An exception out of the relay closes the client's connection unanswered (the browser's
  // "Failed to fetch"): never silently. Nothing is copied for it per request (the route has gone
  // with the coroutine's frame by then).
  asio::co_spawn(ex, proxy(std::move(conn), std::move(*route)), [this](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      log.error(std::string("a sandbox relay failed: ") + x.what());
    } catch (...) {
      log.error("a sandbox relay failed with an unknown exception");
    }
  });
  return {};
}

// The backend may touch SQLite or spawn sandboxes: never on an I/O thread.
void Gateway::Impl::handle_control(http::Request&& req, http::Responder respond) {
  asio::post(pool, [this, req = std::move(req), respond = std::move(respond)]() mutable {
    try {
      if (backend->serve_control(req, respond)) return;
      respond(backend->handle_control(std::move(req)));
    } catch (const std::exception& e) {
      respond(e2b_error(500, std::string("internal error: ") + e.what()));
    }
  });
}

// One proxied request (and its response, or the tunnel after a 101) on a connection taken over
// after its header. Gives the connection back for the next request when both sides keep it
// alive; answers errors through the server; otherwise lets it close.
// Longer than 80 lines on purpose: the steps (authorize, connect, relay up, relay down, tunnel)
// share the upstream slot and the client's framing facts, and every extra coroutine frame is a
// hop on the hot path and one more place for GCC 12's co_await temporaries bug (see on_pool).
awaitable<void> Gateway::Impl::proxy(http::Takeover conn, Route route) {
  beast::tcp_stream& client = conn.stream();
  beast::flat_buffer& buf = conn.buffer();
  http::HeaderParser& hp = conn.parser();
  client.expires_never();  // streams may run as long as the process or watch they carry
  if (!conn.user_data()) {
    auto made = std::make_shared<ConnState>();
    made->idle = &idle_upstreams(client.get_executor());
    conn.user_data() = std::move(made);
  }
  ConnState& cs = *static_cast<ConnState*>(conn.user_data().get());

  const unsigned version = hp.get().version();
  const bool client_keep_alive = hp.get().keep_alive();
  const bool head = hp.get().method() == bhttp::verb::head;
  const bool upgrade = hp.upgrade();
  // Credentials are checked on every request, reused connection or not. admit() only reads
  // memory, so it runs right here (a hop to the worker pool and back costs more than the
  // check); connecting may block and goes to the pool. One look-up of the sandbox gives the
  // check, its epoch and its masked Host.
  GatewayBackend::Admission admission = backend->admit(route, hp.get().base());
  // Connections to this sandbox port from before its last checkpoint are not reused.
  Upstream& slot = cs.slot(route, admission.epoch);
  std::unique_ptr<beast::tcp_stream>& up = slot.stream;
  slot.in_use = true;  // until the answer is relayed: only then may the pool have it

  const Route* routep = &route;
  std::optional<Status> authorized;
  authorized.emplace(std::move(admission.status));
  bool paused = false;
  if (!authorized->ok() && authorized->error().code() == ErrorCode::kFailedPrecondition) {
    // Paused: a pooled connection would hang on frozen tasks; connect_sandbox resumes it.
    authorized.emplace(Status{});
    up.reset();
    paused = true;
  }
  if (authorized->ok()) end_watch(slot);
  // A running sandbox: an idle connection another client connection of this thread left, or a
  // new one made right here. A paused one's (connect_sandbox resumes it), or one refused here,
  // is made on the worker pool.
  if (authorized->ok() && !up && !paused) {
    cs.idle->take(slot);
    if (!up) up = co_await connect_here(routep);
  }
  Status connected;
  if (authorized->ok() && !up) {
    auto fd = co_await on_pool([this, routep] { return backend->connect_sandbox(*routep); });
    if (fd->ok()) {
      tcp::socket sock(client.get_executor());
      beast::error_code aec;
      sock.assign(tcp::v4(), (*fd)->release(), aec);
      if (aec) {
        log.warn(where(route) + ": taking the connection failed: " + aec.message());
        co_return;
      }
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
    up.reset();
    const Error& e = failed.error();
    unsigned status = e.code() == ErrorCode::kNotFound || e.code() == ErrorCode::kUnavailable ||
                              e.code() == ErrorCode::kDeadlineExceeded
                          ? 502
                          : http::http_status(e.code());
    // E2B's proxy names the sandbox in its error body (`sandboxId`, beside code and message).
    // The request body (if any) is unread: close after answering.
    http::Response res = http::json_response(
        status,
        boost::json::object{
            {"code", status}, {"message", e.message()}, {"sandboxId", route.sandbox_id}},
        version, false);
    std::move(conn).respond(std::move(res));
    co_return;
  }

  // One relay buffer for both directions (they take turns); a tunnel adds a second one.
  bhttp::request_parser<bhttp::buffer_body> rp(std::move(hp));
  strip_hop_by_hop(rp.get(), upgrade);
  strip_platform_credentials(rp.get());
  if (!admission.masked_host.empty()) rp.get().set(bhttp::field::host, admission.masked_host);
  rp.get().keep_alive(upgrade ? false : true);
  if (upgrade) rp.get().set(bhttp::field::connection, "upgrade");
  bool up_failed = false;
  auto rec = co_await relay(client, buf, rp, *up, cs, &up_failed);
  if (rec && up_failed) {
    auto early = co_await read_early_answer(*up, head);
    if (early) {
      up.reset();
      // The rest of the client's body is unread: the connection closes after this answer.
      early->version(version);
      early->keep_alive(false);
      std::move(conn).respond(std::move(*early));
      co_return;
    }
  }
  if (rec) {
    up.reset();
    if (rec == bhttp::error::end_of_stream || rec == asio::error::eof) {
      // The client closed before its request was whole.
      log.debug(where(route) + ": the client closed mid-request");
      co_return;
    }
    // The upstream went away mid-request: tell the client if nothing was sent yet.
    std::move(conn).respond(
        e2b_error(502, "sandbox connection failed: " + rec.message(), version, false));
    co_return;
  }

  beast::flat_buffer& upbuf = cs.upbuf;
  upbuf.clear();
  if (upbuf.capacity() > kKeptUpstreamBuffer) upbuf = beast::flat_buffer{};  // a stream grew it
  bhttp::response_parser<bhttp::buffer_body> resp;
  resp.body_limit(boost::none);
  resp.header_limit(64 * 1024);
  resp.skip(head);
  const bool answer_ready = co_await await_answer(slot);
  beast::error_code hec = co_await read_header(up->socket(), upbuf, resp, answer_ready);
  if (hec) {
    up.reset();
    std::move(conn).respond(
        e2b_error(502, "no response from the sandbox: " + hec.message(), version, false));
    co_return;
  }
  const bool switching = resp.get().result() == bhttp::status::switching_protocols;
  if (switching && !upgrade) {
    // A 101 the client did not ask for would turn its connection into a tunnel it does not
    // know about: its next request (for another sandbox, with that sandbox's token) would land
    // in this one. Refuse it and close both sides.
    up.reset();
    std::move(conn).respond(
        e2b_error(502, "the sandbox answered 101 Switching Protocols to a request without Upgrade",
                  version, false));
    co_return;
  }
  const bool upstream_keep = resp.get().keep_alive();
  strip_hop_by_hop(resp.get(), switching);
  // A body with neither length nor chunks runs until the sandbox closes (RFC 9112 §6.3): the
  // client too can see its end only as a close, so its connection is not kept.
  const bool to_close = !resp.is_done() && !resp.chunked() && !resp.content_length();
  const bool keep = client_keep_alive && !switching && !to_close && !server->draining();
  resp.get().keep_alive(keep);
  if (switching) resp.get().set(bhttp::field::connection, "upgrade");
  auto sec = co_await relay(*up, upbuf, resp, client, cs, nullptr, /*end_on_out_close=*/true);
  if (sec) {
    // Either side went away mid-answer (a client's abort, a sandbox's kill): the client's
    // connection closes, which it reads as a truncated answer.
    log.debug(where(route) + ": relaying the answer ended early: " + sec.message());
    up.reset();
    co_return;
  }
  if (switching) {
    using namespace asio::experimental::awaitable_operators;
    std::unique_ptr<char[]> back(new char[kRelayBuffer]);
    co_await (pump(client, buf, *up, cs.relay_buffer()) && pump(*up, upbuf, client, back.get()));
    up.reset();
    co_return;
  }
  if (!upstream_keep || upbuf.size() > 0) up.reset();
  slot.in_use = false;
  if (up) watch_idle(slot);
  if (keep) std::move(conn).resume();
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() { shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<Gateway>> Gateway::start(GatewayOptions options, GatewayBackend& backend) {
  auto impl = std::make_unique<Impl>(options.workers);
  impl->opt = std::move(options);
  impl->opt.domain = normalise_domain(impl->opt.domain);  // once, not per request
  impl->backend = &backend;
  Impl* raw = impl.get();
  http::ServerOptions so = http::listener_options(raw->opt, "abxd");
  so.error_renderer = [](const Error& e, unsigned status, unsigned version) {
    return e2b_error(status, e.message(), version, false);
  };
  // The proxy never blocks an I/O thread (backend calls that may go to the worker pool), so
  // each thread keeps its connections and their upstreams: no hops between threads.
  so.context_per_thread = true;
  so.on_header = [raw](http::Takeover& conn) { return raw->on_header(conn); };
  // Only control-plane requests get this far (the proxy took the others over in on_header).
  so.body_policy = [raw](const http::Request& header) {
    return raw->backend->control_body_plan(header, raw->opt.limits.max_body_bytes);
  };
  ABX_ASSIGN_OR_RETURN(
      impl->server,
      http::Server::start(std::move(so), [raw](http::Request&& req, http::Responder respond) {
        raw->handle_control(std::move(req), std::move(respond));
      }));
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

std::uint16_t Gateway::port() const { return impl_->server->port(); }
const std::string& Gateway::host() const { return impl_->opt.host; }

// The server drains and joins its I/O threads first; the pool then finishes the control calls
// in flight (their answers go nowhere) before the backend may go away.
void Gateway::shutdown(std::chrono::milliseconds drain) {
  if (impl_->stopped.exchange(true)) return;
  impl_->server->shutdown(drain);
  {
    std::lock_guard lock(impl_->idle_mu);
    for (auto& idle : impl_->idle_by_thread) idle->close();
  }
  impl_->pool.join();
}

}  // namespace abx::platform
