#include "abx/http/server.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace abx::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::optional<FramingError> check_request_header(const bhttp::request_header<>& req,
                                                 const Limits& lim) {
  auto bad = [](unsigned status, std::string msg) {
    return FramingError{status, invalid_argument(std::move(msg))};
  };
  if (req.target().size() > lim.max_target_bytes) {
    return bad(414,
               "request target longer than " + std::to_string(lim.max_target_bytes) + " bytes");
  }
  std::size_t fields = 0;
  std::size_t hosts = 0;
  for (const auto& f : req) {
    ++fields;
    if (f.name() == bhttp::field::host) ++hosts;
    if (f.name() == bhttp::field::transfer_encoding && !beast::iequals(f.value(), "chunked")) {
      return bad(400, "unsupported Transfer-Encoding '" + std::string(f.value()) +
                          "' (only chunked is accepted)");
    }
  }
  if (fields > lim.max_header_fields) {
    return bad(431, "more than " + std::to_string(lim.max_header_fields) + " header fields");
  }
  if (hosts > 1) return bad(400, "more than one Host header");
  if (req.version() >= 11 && hosts == 0) return bad(400, "missing Host header");
  auto target = req.target();
  if (target.empty() ||
      (target[0] != '/' && !(req.method() == bhttp::verb::options && target == "*"))) {
    return bad(400, "request target must be a path (origin-form)");
  }
  return std::nullopt;
}

ErrorCode error_code_for_status(unsigned status) {
  switch (status) {
    case 400:
      return ErrorCode::kInvalidArgument;
    case 401:
      return ErrorCode::kUnauthenticated;
    case 403:
      return ErrorCode::kPermissionDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 405:
      return ErrorCode::kMethodNotAllowed;
    case 409:
      return ErrorCode::kFailedPrecondition;
    case 413:
      return ErrorCode::kPayloadTooLarge;
    case 415:
      return ErrorCode::kUnsupportedMediaType;
    case 429:
      return ErrorCode::kResourceExhausted;
    case 501:
      return ErrorCode::kUnimplemented;
    case 502:
    case 503:
      return ErrorCode::kUnavailable;
    case 504:
      return ErrorCode::kDeadlineExceeded;
    case 507:
      return ErrorCode::kInsufficientStorage;
    default:
      return status >= 500 ? ErrorCode::kInternal : ErrorCode::kInvalidArgument;
  }
}

unsigned http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kMethodNotAllowed:
      return 405;
    case ErrorCode::kAlreadyExists:
      return 409;
    case ErrorCode::kFailedPrecondition:
      return 409;
    case ErrorCode::kPayloadTooLarge:
      return 413;
    case ErrorCode::kUnsupportedMediaType:
      return 415;
    case ErrorCode::kResourceExhausted:
      return 429;
    case ErrorCode::kInternal:
      return 500;
    case ErrorCode::kUnimplemented:
      return 501;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    case ErrorCode::kInsufficientStorage:
      return 507;
  }
  return 500;
}

Response json_response(unsigned status, const boost::json::value& body, unsigned version,
                       bool keep_alive) {
  Response res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = boost::json::serialize(body);
  res.keep_alive(keep_alive);
  return res;
}

Response error_response(const Error& error, unsigned version, bool keep_alive) {
  return json_response(http_status(error.code()),
                       boost::json::object{{"error", error.message()}, {"type", error.type()}},
                       version, keep_alive);
}

BodyFile::~BodyFile() {
  if (!released_) ::unlink(path_.c_str());
}

struct Server::Impl {
  // Declared before the io_context so they outlive it: destroying the io_context destroys
  // pending handlers, which may hold the last reference to a session.
  ServerOptions opt;
  Handler handler;
  std::mutex mu;  // guards sessions, stopped
  std::condition_variable cv;
  std::map<detail::Session*, std::weak_ptr<detail::Session>> sessions;
  bool stopped = false;
  std::atomic<bool> draining{false};
  std::atomic<std::size_t> connections{0};
  std::uint16_t port = 0;

  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  // Keeps run() going while a handler holds a request on another thread and no I/O is pending.
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  std::vector<std::thread> threads;

  // Live sessions, as strong references taken outside any destructor.
  std::vector<std::shared_ptr<detail::Session>> live_sessions();

  void do_accept();
  void on_session_closed(detail::Session* s);
};

struct Responder::State {
  std::shared_ptr<detail::Session> session;
  std::shared_ptr<BodyFile> body_file;
  std::atomic<bool> done{false};
  ~State();
};

namespace detail {

// The shared state of one streaming response: filled by producers on any thread, drained by
// the session on its strand.
struct StreamState {
  std::shared_ptr<Session> session;  // cleared when the stream ends, breaking the cycle
  std::size_t high_water = 0;
  std::size_t low_water = 0;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> queue;
  std::size_t queued = 0;
  bool closed = false;     // ended (cleanly or not): writes are refused
  bool finishing = false;  // finish() called: send the last chunk after the queue
  std::vector<std::function<void()>> waiters;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Server::Impl& server)
      : stream_(std::move(socket)), server_(server) {}

  void start() {
    {
      std::lock_guard lock(server_.mu);
      server_.sessions.emplace(this, weak_from_this());
    }
    asio::dispatch(stream_.get_executor(),
                   beast::bind_front_handler(&Session::read_header, shared_from_this()));
  }

  ~Session() { server_.on_session_closed(this); }

  asio::any_io_executor executor() { return stream_.get_executor(); }

  // Called from Responder, on any thread.
  void respond(Response res) {
    asio::dispatch(
        stream_.get_executor(),
        [self = shared_from_this(), r = std::move(res)]() mutable { self->write(std::move(r)); });
  }

  // Called from Responder::stream, on any thread.
  std::shared_ptr<StreamState> begin_stream(Response header) {
    auto st = std::make_shared<StreamState>();
    st->session = shared_from_this();
    st->high_water = server_.opt.limits.stream_high_water;
    st->low_water = std::min(server_.opt.limits.stream_low_water, st->high_water);
    asio::dispatch(stream_.get_executor(),
                   [self = shared_from_this(), st, h = std::move(header)]() mutable {
                     self->write_stream_header(st, std::move(h));
                   });
    return st;
  }

  // Wakes the writer loop after a producer queued data or finished (any thread).
  void kick_stream() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->pump_stream(); });
  }

  // The producer gave up without finish(): close so the client sees a truncated body.
  void abort_stream() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->sstate_) self->end_stream(false);
    });
  }

  Response render_error(const Error& err, unsigned version) {
    if (server_.opt.error_renderer) return server_.opt.error_renderer(err, version);
    return error_response(err, version, false);
  }

  // Called when the server starts draining: close now if waiting for a request.
  void close_if_idle() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) self->close();
    });
  }

  void force_close() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

 private:
  void read_header() {
    if (server_.draining.load()) return close();
    busy_ = false;
    parser_.emplace();
    file_parser_.reset();
    body_file_.reset();
    parser_->header_limit(static_cast<std::uint32_t>(server_.opt.limits.max_header_bytes));
    // No limit while the header is read: Beast would reject a large Content-Length before the
    // body policy has had its say. on_header applies the limit chosen for this request.
    parser_->body_limit(boost::none);
    // The first request on a connection, or a request already partly buffered, gets the header
    // deadline; an idle keep-alive connection gets the idle deadline until bytes arrive.
    stream_.expires_after(buffer_.size() > 0 || first_ ? server_.opt.limits.header_timeout
                                                       : server_.opt.limits.idle_timeout);
    first_ = false;
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, std::size_t) {
    busy_ = true;
    if (ec) return on_read_error(ec);
    const auto& req = parser_->get();
    if (auto bad = check_request_header(req.base(), server_.opt.limits)) {
      status_override_ = bad->status;
      return fail(bad->error);
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
    if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
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

  static Result<std::shared_ptr<BodyFile>> open_spool_file(const std::string& dir) {
    std::string tmpl = dir + "/.abx-body-XXXXXX";
    int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      return Error(
          e == ENOSPC || e == EDQUOT ? ErrorCode::kInsufficientStorage : ErrorCode::kInternal,
          "cannot create a spool file in " + dir + ": " + std::strerror(e));
    }
    return std::make_shared<BodyFile>(UniqueFd(fd), std::move(tmpl));
  }

  void read_body() {
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

  void on_body(beast::error_code ec, std::size_t) {
    if (ec) return on_read_error(ec);
    dispatch_request();
  }

  // A spooled body may be large: the deadline is per piece (an inactivity timeout), not for
  // the whole body. Writes to the spool file are synchronous; they go to the page cache.
  void read_body_piece() {
    auto& b = file_parser_->get().body();
    b.data = spool_buf_.data();
    b.size = spool_buf_.size();
    b.more = true;
    stream_.expires_after(server_.opt.limits.body_timeout);
    bhttp::async_read_some(stream_, buffer_, *file_parser_,
                           beast::bind_front_handler(&Session::on_body_piece, shared_from_this()));
  }

  void on_body_piece(beast::error_code ec, std::size_t) {
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) return on_read_error(ec);
    std::size_t got = spool_buf_.size() - file_parser_->get().body().size;
    const char* p = spool_buf_.data();
    std::size_t left = got;
    while (left > 0) {
      ssize_t w = ::write(body_file_->fd(), p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        int e = errno;
        bool full = e == ENOSPC || e == EDQUOT;
        return fail(Error(full ? ErrorCode::kInsufficientStorage : ErrorCode::kInternal,
                          std::string("cannot store the request body: ") + std::strerror(e)));
      }
      p += w;
      left -= static_cast<std::size_t>(w);
    }
    body_file_->size_ += got;
    if (file_parser_->is_done()) return dispatch_request();
    read_body_piece();
  }

  void dispatch_request() {
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
      responder(render_error(internal_error(std::string("handler failed: ") + e.what()), version_));
    }
  }

  void on_read_error(beast::error_code ec) {
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
  void fail(const Error& err, unsigned status = 0) {
    if (status == 0 && status_override_ != 0) status = status_override_;
    Response res = render_error(err, 11);
    if (status != 0) res.result(status);
    keep_alive_ = false;
    write(std::move(res));
  }

  void write(Response res) {
    bool keep = keep_alive_ && res.keep_alive() && !server_.draining.load();
    res.keep_alive(keep);
    res.version(version_ == 10 ? 10 : 11);
    res.set(bhttp::field::server, server_.opt.server_header);
    res.prepare_payload();
    auto sp = std::make_shared<Response>(std::move(res));
    stream_.expires_after(server_.opt.limits.write_timeout);
    bhttp::async_write(stream_, *sp,
                       [self = shared_from_this(), sp, keep](beast::error_code ec, std::size_t) {
                         if (ec || !keep) return self->close();
                         self->status_override_ = 0;
                         self->read_header();
                       });
  }

  void write_stream_header(std::shared_ptr<StreamState> st, Response h) {
    sstate_ = st;
    stream_header_ = std::make_shared<bhttp::response<bhttp::empty_body>>(std::move(h.base()));
    auto& hdr = *stream_header_;
    stream_sized_ = hdr.has_content_length();
    stream_expected_ = 0;
    if (stream_sized_) {
      stream_expected_ = std::stoull(std::string(hdr[bhttp::field::content_length]));
    }
    stream_sent_ = 0;
    hdr.version(version_ == 10 ? 10 : 11);
    stream_chunked_ = !stream_sized_ && version_ != 10;
    // Without a length or chunking, the body ends with the connection.
    stream_keep_ = keep_alive_ && hdr.keep_alive() && (stream_sized_ || stream_chunked_);
    if (stream_chunked_) hdr.chunked(true);
    hdr.keep_alive(stream_keep_);
    hdr.set(bhttp::field::server, server_.opt.server_header);
    stream_writing_ = true;
    stream_.expires_after(server_.opt.limits.write_timeout);
    auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(hdr);
    bhttp::async_write_header(
        stream_, *sr,
        [self = shared_from_this(), sr, h = stream_header_](beast::error_code ec, std::size_t) {
          self->stream_writing_ = false;
          if (ec) return self->end_stream(false);
          self->pump_stream();
        });
  }

  void pump_stream() {
    auto st = sstate_;
    if (!st || stream_writing_) return;
    auto data = std::make_shared<std::string>();
    bool last = false;
    {
      std::lock_guard lock(st->mu);
      if (st->closed) return;
      // Coalesce small frames into one chunk (one syscall) up to 64 KiB.
      while (!st->queue.empty() &&
             (data->empty() || data->size() + st->queue.front().size() <= 64 * 1024)) {
        if (data->empty()) {
          *data = std::move(st->queue.front());
        } else {
          data->append(st->queue.front());
        }
        st->queue.pop_front();
      }
      if (data->empty()) {
        if (!st->finishing) return;
        last = true;
      }
    }
    stream_writing_ = true;
    stream_.expires_after(server_.opt.limits.write_timeout);
    if (last) {
      if (!stream_chunked_) {
        stream_writing_ = false;
        return end_stream(stream_sized_ && stream_sent_ == stream_expected_);
      }
      return asio::async_write(stream_, bhttp::make_chunk_last(),
                               [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                 self->stream_writing_ = false;
                                 self->end_stream(!ec);
                               });
    }
    auto done = [self = shared_from_this(), data](beast::error_code ec, std::size_t) {
      self->stream_writing_ = false;
      self->stream_sent_ += data->size();
      if (ec) return self->end_stream(false);
      self->on_stream_sent(data->size());
    };
    if (stream_chunked_) {
      asio::async_write(stream_, bhttp::make_chunk(asio::buffer(*data)), std::move(done));
    } else {
      asio::async_write(stream_, asio::buffer(*data), std::move(done));
    }
  }

  void on_stream_sent(std::size_t n) {
    auto st = sstate_;
    std::vector<std::function<void()>> wake;
    {
      std::lock_guard lock(st->mu);
      st->queued -= n;
      if (st->queued < st->low_water) wake.swap(st->waiters);
    }
    st->cv.notify_all();
    for (auto& w : wake) asio::post(stream_.get_executor(), std::move(w));
    pump_stream();
  }

  // The stream is over: `clean` means the whole body went out and the connection may serve the
  // next request.
  void end_stream(bool clean) {
    auto st = std::move(sstate_);
    sstate_.reset();
    std::vector<std::function<void()>> wake;
    if (st) {
      {
        std::lock_guard lock(st->mu);
        st->closed = true;
        st->queue.clear();
        st->queued = 0;
        wake.swap(st->waiters);
        st->session.reset();
      }
      st->cv.notify_all();
    }
    for (auto& w : wake) asio::post(stream_.get_executor(), std::move(w));
    if (!clean || !stream_keep_ || server_.draining.load()) return close();
    status_override_ = 0;
    read_header();
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  Server::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  // Spooled bodies: the parser after the header, the file and the piece buffer.
  std::optional<bhttp::request_parser<bhttp::buffer_body>> file_parser_;
  std::shared_ptr<BodyFile> body_file_;
  std::vector<char> spool_buf_;
  std::size_t body_limit_ = 0;
  // The streaming response in progress, if any (strand only).
  std::shared_ptr<StreamState> sstate_;
  std::shared_ptr<bhttp::response<bhttp::empty_body>> stream_header_;
  bool stream_writing_ = false;
  bool stream_chunked_ = false;
  bool stream_sized_ = false;
  bool stream_keep_ = false;
  std::uint64_t stream_expected_ = 0;
  std::uint64_t stream_sent_ = 0;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool busy_ = false;  // between the first byte of a request and its response
  bool first_ = true;
  unsigned status_override_ = 0;
};

}  // namespace detail

Responder::State::~State() {
  if (!done.load() && session) {
    auto res = session->render_error(internal_error("the handler did not answer"), 11);
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

StreamWriter::StreamWriter(std::shared_ptr<detail::StreamState> state) : state_(std::move(state)) {}

StreamWriter::~StreamWriter() {
  std::shared_ptr<detail::Session> session;
  {
    std::lock_guard lock(state_->mu);
    if (state_->closed || state_->finishing) return;
    session = state_->session;
  }
  if (session) session->abort_stream();
}

bool StreamWriter::write(std::string data) {
  if (data.empty()) return !closed();
  std::shared_ptr<detail::Session> session;
  {
    std::lock_guard lock(state_->mu);
    if (state_->closed || state_->finishing) return false;
    state_->queued += data.size();
    state_->queue.push_back(std::move(data));
    session = state_->session;
  }
  if (session) session->kick_stream();
  return true;
}

bool StreamWriter::ready() const {
  std::lock_guard lock(state_->mu);
  return !state_->closed && state_->queued < state_->high_water;
}

bool StreamWriter::closed() const {
  std::lock_guard lock(state_->mu);
  return state_->closed;
}

void StreamWriter::when_ready(std::function<void()> cb) {
  std::shared_ptr<detail::Session> session;
  {
    std::lock_guard lock(state_->mu);
    if (!state_->closed && state_->queued >= state_->low_water) {
      state_->waiters.push_back(std::move(cb));
      return;
    }
    session = state_->session;
  }
  if (session) {
    asio::post(session->executor(), std::move(cb));
  } else {
    cb();  // the stream is over and its connection may be gone: run here
  }
}

bool StreamWriter::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mu);
  state_->cv.wait_for(lock, timeout,
                      [&] { return state_->closed || state_->queued < state_->low_water; });
  return !state_->closed && state_->queued < state_->high_water;
}

void StreamWriter::finish() {
  std::shared_ptr<detail::Session> session;
  {
    std::lock_guard lock(state_->mu);
    if (state_->closed || state_->finishing) return;
    state_->finishing = true;
    session = state_->session;
  }
  if (session) session->kick_stream();
}

void Server::Impl::do_accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      // EMFILE and friends: back off briefly instead of spinning.
      auto t = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(50));
      t->async_wait([this, t](beast::error_code) { do_accept(); });
      return;
    }
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
      ++connections;
      std::make_shared<detail::Session>(std::move(socket), *this)->start();
    }
    do_accept();
  });
}

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
  }
  cv.notify_all();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<Server>> Server::start(ServerOptions options, Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  impl->handler = std::move(handler);
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
  impl->do_accept();
  int n = impl->opt.io_threads > 0
              ? impl->opt.io_threads
              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < n; ++i) {
    impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
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
  asio::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
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
  impl_->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopped = true;
  }
  impl_->cv.notify_all();
}

void Server::wait() {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [this] { return impl_->stopped; });
}

}  // namespace abx::http
