// Streaming responses: the producer-facing StreamWriter and the Session's half that drains it
// onto the socket (bounded queue, chunk coalescing, wake-ups below the low-water mark).
#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <span>

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
  auto& hdr = h.base();
  stream_sized_ = h.has_content_length();
  stream_expected_ = 0;
  if (stream_sized_) {
    stream_expected_ = std::stoull(std::string(hdr[bhttp::field::content_length]));
  }
  stream_sent_ = 0;
  hdr.version(version_ == 10 ? 10 : 11);
  stream_chunked_ = !stream_sized_ && version_ != 10;
  // Without a length or chunking, the body ends with the connection.
  stream_keep_ = keep_alive_ && h.keep_alive() && (stream_sized_ || stream_chunked_);
  if (stream_chunked_) h.chunked(true);
  h.keep_alive(stream_keep_);
  hdr.set(bhttp::field::server, server_.opt.server_header);
  head_.clear();
  serialize_head(hdr, head_);
  stream_out_.clear();
  // The header block waits for the first piece of the body written before this strand runs
  // again, and leaves in one send with it: envd's Process/Start writes its start event right
  // after Responder::stream (one segment, one wake-up of the client or proxy, instead of two).
  // With nothing written by then, the posted pump sends it alone.
  stream_head_pending_ = true;
  asio::post(stream_.get_executor(), [self = shared_from_this()] { self->pump_stream(); });
  watch_peer_close(st);
}

// The socket turning readable during a stream means the peer closed (a read of 0 bytes, or an
// error such as a reset) or sent its next request early (bytes waiting: left for read_header,
// and the watch ends). Peeked, never read. A wait that outlives its stream (the next request
// arrives on a kept connection) finds another stream, or none, and does nothing.
void Session::watch_peer_close(const std::shared_ptr<StreamState>& st) {
  stream_.socket().async_wait(
      asio::socket_base::wait_read,
      [weak = weak_from_this(), w = std::weak_ptr<StreamState>(st)](beast::error_code ec) {
        auto self = weak.lock();
        if (!self || ec || !self->sstate_ || self->sstate_ != w.lock()) return;
        // Gone: the producer sees closed() and write() false.
        if (peer_closed(self->stream_.socket())) self->end_stream(false);
      });
  // A close that came before the wait was armed never wakes it: asio's epoll is edge-triggered
  // and it does not try a wait at once, so an edge with no operation queued is gone. Looked for
  // now, after arming: a close is seen either here or by the wait. (peer_closed must not block.)
  beast::error_code ec;
  if (!stream_.socket().non_blocking()) stream_.socket().non_blocking(true, ec);
  if (!ec && peer_closed(stream_.socket())) end_stream(false);
}

// Sends what the producers queued, as long as the socket takes it at once (http::send_now);
// what it does not take goes out asynchronously, and the completion pumps again. Each send
// carries the header block while it is pending, the queued frames coalesced into one chunk (up
// to kMaxPiece), and when the producer has finished and nothing else is queued, the last chunk:
// a stream's last frames and its end leave in one send.
void Session::pump_stream() {
  for (;;) {
    auto st = sstate_;
    if (!st || stream_writing_) return;
    bool last = false;
    {
      std::lock_guard lock(st->mu);
      if (st->closed) return;
      while (!st->queue.empty() &&
             (stream_out_.empty() || stream_out_.size() + st->queue.front().size() <= kMaxPiece)) {
        if (stream_out_.empty()) {
          stream_out_ = std::move(st->queue.front());
        } else {
          stream_out_.append(st->queue.front());
        }
        st->queue.pop_front();
      }
      last = st->finishing && st->queue.empty();
    }
    const std::size_t n = stream_out_.size();
    if (n == 0 && !last && !stream_head_pending_) return;
    // Up to five pieces: the header block, the chunk's size line, its data, its CRLF and the
    // last chunk.
    std::array<asio::const_buffer, 5> bufs{};
    std::size_t nb = 0;
    if (stream_head_pending_) bufs[nb++] = asio::buffer(head_);
    nb = add_body_piece(bufs, nb, stream_line_, asio::buffer(stream_out_), stream_chunked_, last);
    const std::span<asio::const_buffer> piece(bufs.data(), nb);
    beast::error_code ec;
    send_now(stream_.socket(), piece, ec);
    if (!ec && asio::buffer_size(piece) > 0) return write_stream_rest(st, piece, n, last);
    if (!stream_piece_sent(ec, n, last)) return;
  }
}

// What send_now left of a piece, asynchronously. The buffers point into the session or at
// constants, and their list is copied into the session too: all outlive pump_stream's frame.
void Session::write_stream_rest(const std::shared_ptr<StreamState>& st,
                                std::span<const asio::const_buffer> rest, std::size_t n,
                                bool last) {
  stream_writing_ = true;
  stream_.expires_after(server_.opt.limits.write_timeout);
  std::copy(rest.begin(), rest.end(), stream_bufs_.begin());
  asio::async_write(stream_, std::span<const asio::const_buffer>(stream_bufs_.data(), rest.size()),
                    [self = shared_from_this(), st, n, last](beast::error_code ec, std::size_t) {
                      self->stream_writing_ = false;
                      // close() (a forced close at shutdown, or the producer aborting) can be
                      // queued on the strand ahead of a completion whose write had succeeded:
                      // only the stream this write was for goes on.
                      if (self->sstate_ != st) return;
                      if (self->stream_piece_sent(ec, n, last)) self->pump_stream();
                    });
}

// A piece (n bytes of body) is out, or failed with `ec`. Returns whether the stream goes on.
bool Session::stream_piece_sent(beast::error_code ec, std::size_t n, bool last) {
  stream_head_pending_ = false;
  stream_out_.clear();
  stream_sent_ += n;
  if (ec) {
    end_stream(false);
    return false;
  }
  if (last) {
    end_stream(stream_chunked_ || (stream_sized_ && stream_sent_ == stream_expected_));
    return false;
  }
  auto st = sstate_;
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard lock(st->mu);
    st->queued -= n;
    if (st->queued < st->low_water) wake.swap(st->waiters);
  }
  st->cv.notify_all();
  for (auto& w : wake) asio::post(stream_.get_executor(), std::move(w));
  return true;
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
