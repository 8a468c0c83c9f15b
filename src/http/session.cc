// One Session per connection: reading requests (header deadline, framing checks, body policy,
// spooling) and writing plain responses. The streaming half is in stream_writer.cc.
#include "session.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "abx/base/os.h"

namespace abx::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

// What linger_close() reads and discards at most before it closes anyway.
constexpr std::size_t kLingerBytes = 1024 * 1024;
constexpr std::chrono::seconds kLingerTime{2};

// The spool is the server's own business: a failure there is internal whatever its errno (a
// request cannot provoke EACCES or ENOENT in it), except a full disk, which the client can wait
// out. On top of os::code_for_errno, which is where "full" is decided.
ErrorCode spool_code_for_errno(int err) {
  return os::code_for_errno(err) == ErrorCode::kInsufficientStorage
             ? ErrorCode::kInsufficientStorage
             : ErrorCode::kInternal;
}

Result<std::shared_ptr<BodyFile>> open_spool_file(const std::string& dir) {
  std::string tmpl = dir + "/.abx-body-XXXXXX";
  UniqueFd fd(::mkostemp(tmpl.data(), O_CLOEXEC));
  if (!fd) {
    int e = errno;
    return Error(spool_code_for_errno(e),
                 "cannot create a spool file in " + dir + ": " + std::strerror(e));
  }
  return std::make_shared<BodyFile>(std::move(fd), std::move(tmpl));
}

}  // namespace

void Session::start() {
  {
    std::lock_guard lock(server_.mu);
    server_.sessions.emplace(this, weak_from_this());
  }
  asio::dispatch(stream_.get_executor(),
                 beast::bind_front_handler(&Session::read_header, shared_from_this()));
}

void Session::respond(Response res) {
  // On the connection's executor already (an inline command answering from its handler): write
  // at once, without asio::dispatch's type-erased executor round trip.
  if (on_own_executor()) return write(std::move(res));
  asio::dispatch(stream_.get_executor(), [self = shared_from_this(), r = std::move(res)]() mutable {
    self->write(std::move(r));
  });
}

Response Session::render_error(const Error& err, unsigned status, unsigned version) {
  if (server_.opt.error_renderer) {
    Response res = server_.opt.error_renderer(err, status, version);
    res.result(status);
    return res;
  }
  Response res = error_response(err, version, false);
  res.result(status);
  return res;
}

void Session::close_if_idle() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    if (!self->busy_) self->close();
  });
}

void Session::force_close() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
}

void Session::read_header() {
  if (server_.draining.load()) return close();
  busy_ = false;
  linger_ = false;
  parser_.emplace();
  file_parser_.reset();
  body_file_.reset();
  parser_->header_limit(static_cast<std::uint32_t>(server_.opt.limits.max_header_bytes));
  // No limit while the header is read: Beast would reject a large Content-Length before the
  // body policy has had its say. on_header applies the limit chosen for this request.
  parser_->body_limit(boost::none);
  // The first request on a connection, or a request already partly buffered, gets the header
  // deadline; an idle keep-alive connection gets the idle deadline (for its whole header).
  const auto limit = buffer_.size() > 0 || first_ ? server_.opt.limits.header_timeout
                                                  : server_.opt.limits.idle_timeout;
  first_ = false;
  header_deadline_ = std::chrono::steady_clock::now() + limit;
  waiting_header_ = true;
  if (header_deadline_ < header_timer_at_) arm_header_timer();
  continue_header(false);
}

// The header deadline is kept lazily: read_header moves a time point (no syscall) and the timer
// is armed only when it is not, or is armed for later than the new deadline. When it fires it
// closes the connection if it still waits for a header past the deadline, and otherwise re-arms
// for the deadline then in force. One timer wait per idle period instead of a deadline per
// request on the stream (a timerfd update and an aborted wait each). The wait holds the session
// weakly: a closed connection does not live on until its deadline.
void Session::arm_header_timer() {
  header_timer_at_ = header_deadline_;
  header_timer_.expires_at(header_deadline_);
  header_timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
    if (auto self = weak.lock()) self->on_header_timer(ec);
  });
}

void Session::on_header_timer(beast::error_code ec) {
  if (ec == asio::error::operation_aborted) return;  // re-armed (or closed): not this wait's call
  header_timer_at_ = std::chrono::steady_clock::time_point::max();  // not armed
  if (ec || !waiting_header_) return;  // busy with a request: the next read_header re-arms
  if (std::chrono::steady_clock::now() < header_deadline_) return arm_header_timer();
  // Past the deadline with no whole header: the read ends as aborted, and on_read_error closes.
  stream_.socket().cancel(ec);
}

// Parses what is buffered, then reads more, until the header is whole (put_header, header_eof):
// straight on the socket, as Beast's async_read_header would through the stream, whose composed
// operations and timer bookkeeping were a measurable part of a call (docs/command-server.md).
// `after_read`: called from a read's completion.
void Session::continue_header(bool after_read) {
  if (beast::error_code ec; put_header(*parser_, buffer_, ec)) {
    if (after_read) return on_header(ec, 0);
    // Whole from bytes already buffered (a pipelined request): completed through the executor,
    // as Beast does, so a long pipeline does not nest read_header -> on_header -> answer ->
    // read_header ... on the stack.
    return asio::post(stream_.get_executor(),
                      [self = shared_from_this(), ec] { self->on_header(ec, 0); });
  }
  stream_.socket().async_read_some(
      buffer_.prepare(beast::read_size(buffer_, kHeaderReadSize)),
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->buffer_.commit(n);
        if (ec == asio::error::eof) ec = header_eof(*self->parser_);
        if (ec) return self->on_header(ec, 0);
        self->continue_header(true);
      });
}

// The order is the contract of server.h: framing checks, then the header hook (which may take
// the connection), then the body policy, then Expect: 100-continue, then the body.
void Session::on_header(beast::error_code ec, std::size_t) {
  busy_ = true;
  waiting_header_ = false;
  if (ec) return on_read_error(ec);
  const auto& req = parser_->get();
  if (auto bad = check_request_header(req.base(), server_.opt.limits)) {
    status_override_ = bad->status;
    return fail(bad->error);
  }
  if (server_.opt.on_header) {
    Takeover conn(shared_from_this());
    Status hooked = internal_error("header hook failed");
    try {
      hooked = server_.opt.on_header(conn);
    } catch (const std::exception& e) {
      hooked = internal_error(std::string("header hook failed: ") + e.what());
    }
    if (!conn) return;      // taken over: the Takeover owns the connection now
    conn.session_.reset();  // not taken: no close on the way out
    if (!hooked.ok()) return fail(hooked.error());
  }
  BodyPlan plan{server_.opt.limits.max_body_bytes, {}};
  if (server_.opt.body_policy) {
    Result<BodyPlan> chosen = Error(ErrorCode::kInternal, "body policy failed");
    try {
      chosen = server_.opt.body_policy(req);
    } catch (const std::exception& e) {
      chosen = internal_error(std::string("body policy failed: ") + e.what());
    }
    if (!chosen.ok()) return fail(chosen.error());
    plan = std::move(*chosen);
  }
  body_limit_ = plan.max_bytes;
  parser_->body_limit(plan.max_bytes);
  auto cl = parser_->content_length();
  if (cl && *cl > plan.max_bytes) {
    return fail(Error(ErrorCode::kPayloadTooLarge, "request body of " + std::to_string(*cl) +
                                                       " bytes exceeds the limit of " +
                                                       std::to_string(plan.max_bytes)));
  }
  if (!plan.spool_dir.empty()) {
    auto file = open_spool_file(plan.spool_dir);
    if (!file.ok()) return fail(file.error());
    body_file_ = std::move(*file);
  }
  if (parser_->is_done()) return dispatch_request();
  // A small request usually arrives whole: its body is in buffer_ already. Parse it here rather
  // than through async_read, which would complete through the executor and re-arm the deadline
  // for bytes already read (a sized body only; chunked and spooled ones take the general path,
  // and so does Expect: 100-continue, which is answered 100 first as before).
  const bool expect_continue = beast::iequals(req[bhttp::field::expect], "100-continue");
  if (!body_file_ && !expect_continue && cl && buffer_.size() >= *cl) {
    beast::error_code pec;
    std::size_t used = parser_->put(buffer_.data(), pec);
    if (pec) return on_read_error(pec);
    buffer_.consume(used);
    if (parser_->is_done()) return dispatch_request();
  }
  if (expect_continue) {
    auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_,
                                                                     req.version());
    stream_.expires_after(server_.opt.limits.write_timeout);
    return bhttp::async_write(
        stream_, *cont, [self = shared_from_this(), cont](beast::error_code wec, std::size_t) {
          if (wec) return self->close();
          self->read_body();
        });
  }
  read_body();
}

void Session::read_body() {
  if (body_file_) {
    // Move the header into a parser that hands us the body piece by piece.
    file_parser_.emplace(std::move(*parser_));
    parser_.reset();
    file_parser_->body_limit(body_limit_);
    spool_buf_.resize(64 * 1024);
    return read_body_piece();
  }
  stream_.expires_after(server_.opt.limits.body_timeout);
  bhttp::async_read(stream_, buffer_, *parser_,
                    beast::bind_front_handler(&Session::on_body, shared_from_this()));
}

void Session::on_body(beast::error_code ec, std::size_t) {
  if (ec) return on_read_error(ec);
  dispatch_request();
}

// A spooled body may be large: the deadline is per piece (an inactivity timeout), not for
// the whole body. Writes to the spool file are synchronous; they go to the page cache.
void Session::read_body_piece() {
  auto& b = file_parser_->get().body();
  b.data = spool_buf_.data();
  b.size = spool_buf_.size();
  b.more = true;
  stream_.expires_after(server_.opt.limits.body_timeout);
  bhttp::async_read_some(stream_, buffer_, *file_parser_,
                         beast::bind_front_handler(&Session::on_body_piece, shared_from_this()));
}

void Session::on_body_piece(beast::error_code ec, std::size_t) {
  if (ec == bhttp::error::need_buffer) ec = {};
  if (ec) return on_read_error(ec);
  std::size_t got = spool_buf_.size() - file_parser_->get().body().size;
  if (int e = os::write_all_errno(body_file_->fd(), std::string_view(spool_buf_.data(), got));
      e != 0) {
    return fail(Error(spool_code_for_errno(e),
                      std::string("cannot store the request body: ") + std::strerror(e)));
  }
  body_file_->size_ += got;
  if (file_parser_->is_done()) return dispatch_request();
  read_body_piece();
}

void Session::dispatch_request() {
  Request req;
  if (file_parser_) {
    req = Request(file_parser_->release().base());
    file_parser_.reset();
  } else {
    req = parser_->release();
  }
  version_ = req.version();
  keep_alive_ = req.keep_alive();
  stream_.expires_never();  // the handler may take its time; the write re-arms a deadline
  Responder responder(shared_from_this());
  responder.state_->body_file = std::move(body_file_);
  try {
    server_.handler(std::move(req), responder);
  } catch (const std::exception& e) {
    Error err = internal_error(std::string("handler failed: ") + e.what());
    responder(render_error(err, 500, version_));
  }
}

void Session::on_read_error(beast::error_code ec) {
  // A peer closing or timing out between requests is normal; say nothing.
  if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
      ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
      ec == asio::error::eof) {
    return close();
  }
  if (ec == bhttp::error::partial_message && !busy_) return close();
  if (ec == bhttp::error::header_limit) {
    return fail(Error(ErrorCode::kInvalidArgument, "request header block too large"), 431);
  }
  if (ec == bhttp::error::body_limit) {
    return fail(Error(ErrorCode::kPayloadTooLarge,
                      "request body exceeds the limit of " +
                          std::to_string(server_.opt.limits.max_body_bytes) + " bytes"));
  }
  fail(invalid_argument("malformed HTTP request: " + ec.message()));
}

// Answers a framing error and closes the connection (the stream may be desynchronised).
void Session::fail(const Error& err, unsigned status) {
  if (status == 0) status = status_override_;
  if (status == 0) status = http_status(err.code());
  Response res = render_error(err, status, 11);
  keep_alive_ = false;
  linger_ = (parser_ && !parser_->is_done()) || (file_parser_ && !file_parser_->is_done());
  write(std::move(res));
}

void Session::write(Response res) {
  bool keep = keep_alive_ && res.keep_alive() && !server_.draining.load();
  res.keep_alive(keep);
  res.version(version_ == 10 ? 10 : 11);
  res.set(bhttp::field::server, server_.opt.server_header);
  res.prepare_payload();
  if (res.chunked()) {  // a handler asked for chunked framing: Beast's serializer does it
    stream_.expires_after(server_.opt.limits.write_timeout);
    auto sp = std::make_shared<Response>(std::move(res));
    return bhttp::async_write(
        stream_, *sp, [self = shared_from_this(), sp, keep](beast::error_code ec, std::size_t) {
          self->on_written(ec, keep);
        });
  }
  // A sized response goes out in one writev, header block and body, as the bytes Beast's
  // serializer would write: its layered write ops and buffer-sequence iterators were ~5% of the
  // command server's CPU per call (docs/command-server.md, "Performance").
  head_.clear();
  serialize_head(res.base(), head_);
  out_ = std::move(res);
  std::array<asio::const_buffer, 2> bufs{asio::buffer(head_), asio::buffer(out_.body())};
  // First a non-blocking send: an answer the socket takes whole (the usual case) needs no write
  // deadline and no completion queued on the io_context (a timerfd update and a reactor pass per
  // call). on_written may then run from here: it only starts the next asynchronous read.
  beast::error_code wec;
  send_now(stream_.socket(), bufs, wec);
  if (wec || bufs[0].size() + bufs[1].size() == 0) {
    out_ = Response{};
    return on_written(wec, keep);
  }
  stream_.expires_after(server_.opt.limits.write_timeout);
  asio::async_write(stream_, bufs,
                    [self = shared_from_this(), keep](beast::error_code ec, std::size_t) {
                      self->out_ = Response{};  // the body's memory goes now
                      self->on_written(ec, keep);
                    });
}

void Session::on_written(beast::error_code ec, bool keep) {
  if (ec) return close();
  if (!keep) return linger_ ? linger_close() : close();
  status_override_ = 0;
  read_header();
}

// Closing a socket with unread data makes the kernel send an RST, and a client still writing the
// body (a proxy relaying an upload) then fails its write and may lose the answer with it. So the
// send side is shut first (the client sees the answer, then EOF) and what the client still sends
// is read and discarded, bounded in bytes and time, before the socket is closed.
void Session::linger_close() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  busy_ = false;  // a draining server may close it at once
  linger_left_ = kLingerBytes > buffer_.size() ? kLingerBytes - buffer_.size() : 0;
  buffer_.clear();
  spool_buf_.resize(64 * 1024);
  stream_.expires_after(kLingerTime);  // for all the reads below together
  linger_read();
}

void Session::linger_read() {
  if (linger_left_ == 0) return close();
  stream_.async_read_some(
      asio::buffer(spool_buf_.data(), std::min(spool_buf_.size(), linger_left_)),
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        if (ec) return self->close();  // EOF, timeout, reset or a forced close
        self->linger_left_ -= std::min(n, self->linger_left_);
        self->linger_read();
      });
}

void Session::close() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.close();
  header_timer_.cancel();
  // A stream still open here would keep this session alive through its StreamState forever.
  drop_stream();
}

}  // namespace abx::http::detail

namespace abx::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

Takeover::~Takeover() {
  if (session_) session_->close();
}

beast::tcp_stream& Takeover::stream() const { return session_->stream_; }
beast::flat_buffer& Takeover::buffer() const { return session_->buffer_; }
HeaderParser& Takeover::parser() const { return *session_->parser_; }
const Limits& Takeover::limits() const { return session_->server_.opt.limits; }
std::shared_ptr<void>& Takeover::user_data() const { return session_->user_data_; }

void Takeover::resume() && {
  auto session = std::move(session_);
  session->status_override_ = 0;
  session->read_header();
}

bool peer_closed(tcp::socket& sock) {
  char byte;
  beast::error_code ec;
  const std::size_t n = sock.receive(asio::buffer(&byte, 1), asio::socket_base::message_peek, ec);
  return ec ? ec != asio::error::would_block : n == 0;
}

void send_now(tcp::socket& sock, std::span<asio::const_buffer> bufs, beast::error_code& ec) {
  ec = {};
  if (!sock.non_blocking()) sock.non_blocking(true, ec);
  std::size_t sent = ec ? 0 : sock.write_some(bufs, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  for (auto& b : bufs) {
    const std::size_t n = std::min(sent, b.size());
    b += n;
    sent -= n;
  }
}

void Takeover::respond(Response res) && {
  auto session = std::move(session_);
  session->version_ = res.version();
  session->keep_alive_ = true;
  // The taker may have left part of the body unread (a proxy whose upstream refused it).
  session->linger_ = !res.keep_alive();
  session->write(std::move(res));
}

}  // namespace abx::http
