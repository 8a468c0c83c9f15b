// Streaming responses: the producer-facing StreamWriter and the Session's half that drains it
// onto the socket (bounded queue, chunk coalescing, wake-ups below the low-water mark).
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include "session.h"

namespace abx::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace detail {

std::shared_ptr<StreamState> Session::begin_stream(Response header) {
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

void Session::kick_stream() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->pump_stream(); });
}

void Session::abort_stream() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    if (self->sstate_) self->end_stream(false);
  });
}

void Session::write_stream_header(std::shared_ptr<StreamState> st, Response h) {
  if (!stream_.socket().is_open()) {
    // Closed between Responder::stream and now (shutdown): end the stream at once, or it would
    // keep this session alive.
    sstate_ = std::move(st);
    return drop_stream();
  }
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
      [self = shared_from_this(), sr, h = stream_header_, st](beast::error_code ec, std::size_t) {
        self->stream_writing_ = false;
        if (self->sstate_ != st) return;  // closed while the write was in flight
        if (ec) return self->end_stream(false);
        self->pump_stream();
      });
}

void Session::pump_stream() {
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
                             [self = shared_from_this(), st](beast::error_code ec, std::size_t) {
                               self->stream_writing_ = false;
                               if (self->sstate_ != st) return;  // closed meanwhile
                               self->end_stream(!ec);
                             });
  }
  // A write's completion may run after close() dropped the stream: close() (a forced close at
  // shutdown, or the producer aborting) can be queued on the strand ahead of a completion whose
  // write had already succeeded, so the completion sees ec == success and no stream. The
  // handlers therefore check that the stream they wrote for is still this session's.
  auto done = [self = shared_from_this(), data, st](beast::error_code ec, std::size_t) {
    self->stream_writing_ = false;
    if (self->sstate_ != st) return;
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

void Session::on_stream_sent(std::size_t n) {
  auto st = sstate_;
  if (!st) return;
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
void Session::end_stream(bool clean) {
  drop_stream();
  if (!clean || !stream_keep_ || server_.draining.load()) return close();
  status_override_ = 0;
  read_header();
}

// Marks the stream closed for its producers, wakes them, and breaks the StreamState ->
// Session -> StreamState cycle (see StreamState).
void Session::drop_stream() {
  auto st = std::move(sstate_);
  sstate_.reset();
  if (!st) return;
  std::vector<std::function<void()>> wake;
  std::shared_ptr<Session> self;  // released after the lock: it may be the last reference
  {
    std::lock_guard lock(st->mu);
    st->closed = true;
    st->queue.clear();
    st->queued = 0;
    wake.swap(st->waiters);
    self = std::move(st->session);
  }
  st->cv.notify_all();
  for (auto& w : wake) asio::post(stream_.get_executor(), std::move(w));
}

}  // namespace detail

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

}  // namespace abx::http
