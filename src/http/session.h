// Private to abx::http: the server's shared state and one Session per connection.
//
// Split by concern: session.cc reads requests (header, framing, body policy, spooling) and writes
// plain responses; stream_writer.cc holds the streaming-response half of a Session and the
// StreamWriter its producers use; server.cc accepts connections and drains them; status.cc and
// framing.cc are stateless.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "abx/http/server.h"

namespace abx::http {

struct Server::Impl {
  // `ioc`'s concurrency hint: 1 when one thread runs it (context_per_thread, or one I/O thread),
  // which lets Asio queue what a handler posts to its own thread without the scheduler's lock.
  explicit Impl(int ioc_hint) : ioc(ioc_hint), one_thread(ioc_hint == 1) {}

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

  // ServerOptions::context_per_thread: the io_contexts of the I/O threads after the first (the
  // first runs `ioc`) and their work guards. Declared before `ioc`, so they outlive it.
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      contexts_work;
  boost::asio::io_context ioc;  // see Impl()
  // One thread runs `ioc` (and each of `contexts`): a connection's handlers cannot run
  // concurrently, so sessions run on the io_context's executor itself, without a strand.
  bool one_thread;
  // `ioc`'s listening socket; with context_per_thread, one more per context in `contexts`
  // (each declared after its context, so closed before it goes), all bound to the same address
  // with SO_REUSEPORT: the kernel gives each new connection to one of them, and the thread that
  // accepts it serves it (no hand-over to another thread, as nginx's workers). `acceptor` is on a
  // strand of `ioc`: with several threads running `ioc`, its accept handler (which re-arms it) and
  // shutdown's close must not run at once.
  boost::asio::ip::tcp::acceptor acceptor{boost::asio::make_strand(ioc)};
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> more_acceptors;
  // Keeps run() going while a handler holds a request on another thread and no I/O is pending.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{ioc.get_executor()};
  std::vector<std::thread> threads;

  // Live sessions, as strong references taken outside any destructor.
  std::vector<std::shared_ptr<detail::Session>> live_sessions();

  void do_accept(boost::asio::ip::tcp::acceptor& a);
  // Where a connection `a` accepts runs: a strand of `ioc` when several threads run it,
  // otherwise `a`'s own context (`ioc`, or with context_per_thread the thread's context).
  boost::asio::any_io_executor session_executor(boost::asio::ip::tcp::acceptor& a);
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
//
// Ownership: the StreamWriter (held by the producer) owns this state, and the state owns the
// session while the stream is open, so a stream with nothing in flight keeps its connection.
// The session owns the state back (sstate_) to drain it. That cycle is broken in one place,
// Session::drop_stream, which every way of ending a stream goes through: the last chunk sent, a
// write error, the producer giving up, and the connection closing (peer gone, server shutdown).
struct StreamState {
  std::shared_ptr<Session> session;  // cleared by Session::drop_stream
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

// One connection: reads a request, hands it to the handler (or to the header hook), writes the
// answer, and repeats. Every member below runs on the connection's strand unless it says
// "any thread".
class Session : public std::enable_shared_from_this<Session> {
 public:
  using ContextExecutor = boost::asio::io_context::executor_type;
  using Strand = boost::asio::strand<ContextExecutor>;
  Session(boost::asio::ip::tcp::socket&& socket, Server::Impl& server)
      : stream_(std::move(socket)), server_(server), header_timer_(stream_.get_executor()) {
    // target() points into the executor object: keep it alive while it is copied out.
    const boost::asio::any_io_executor ex = stream_.get_executor();
    if (const auto* s = ex.target<Strand>()) strand_.emplace(*s);
    if (const auto* c = ex.target<ContextExecutor>()) context_.emplace(*c);
  }
  ~Session() { server_.on_session_closed(this); }

  void start();
  boost::asio::any_io_executor executor() { return stream_.get_executor(); }

  // Called from Responder, on any thread.
  void respond(Response res);
  // Called from Responder::stream, on any thread.
  std::shared_ptr<StreamState> begin_stream(Response header);
  // Wakes the writer loop after a producer queued data or finished (any thread).
  void kick_stream();
  // The producer gave up without finish(): close so the client sees a truncated body (any
  // thread).
  void abort_stream();

  Response render_error(const Error& err, unsigned status, unsigned version);
  // Called when the server starts draining: close now if waiting for a request (any thread).
  void close_if_idle();
  void force_close();  // any thread

 private:
  friend class abx::http::Takeover;

  // session.cc: requests in, plain responses out.
  void read_header();
  void arm_header_timer();
  void on_header_timer(boost::beast::error_code ec);
  void continue_header(bool after_read);
  void on_header(boost::beast::error_code ec, std::size_t);
  void read_body();
  void on_body(boost::beast::error_code ec, std::size_t);
  void read_body_piece();
  void on_body_piece(boost::beast::error_code ec, std::size_t);
  void dispatch_request();
  void on_read_error(boost::beast::error_code ec);
  void fail(const Error& err, unsigned status = 0);
  void write(Response res);
  void on_written(boost::beast::error_code ec, bool keep);
  void close();
  void linger_close();
  void linger_read();

  // stream_writer.cc: the streaming response in progress.
  void write_stream_header(std::shared_ptr<StreamState> st, Response h);
  void pump_stream();
  void write_stream_rest(const std::shared_ptr<StreamState>& st,
                         std::span<const boost::asio::const_buffer> rest, std::size_t n, bool last);
  bool stream_piece_sent(boost::beast::error_code ec, std::size_t n, bool last);
  void end_stream(bool clean);
  void drop_stream();
  // While stream `st` is open, a close by the peer ends it at once, not at the next write: a
  // producer with nothing to say (a silent cell, a long build step) learns that its client left.
  void watch_peer_close(const std::shared_ptr<StreamState>& st);

  boost::beast::tcp_stream stream_;
  Server::Impl& server_;
  // The deadline of the header being waited for (session.cc, arm_header_timer), kept lazily.
  boost::asio::steady_timer header_timer_;
  std::chrono::steady_clock::time_point header_deadline_{};
  // What the armed timer waits for; max() when it is not armed.
  std::chrono::steady_clock::time_point header_timer_at_ =
      std::chrono::steady_clock::time_point::max();
  bool waiting_header_ = false;  // between read_header and on_header
  // stream_'s executor, as its concrete type: a strand when several threads run the server's
  // io_context, otherwise the executor of the io_context (of one thread) the connection is on.
  std::optional<Strand> strand_;
  std::optional<ContextExecutor> context_;
  // True on the thread that runs this connection's handlers, inside one of them.
  bool on_own_executor() const {
    return strand_ ? strand_->running_in_this_thread()
                   : context_ && context_->running_in_this_thread();
  }
  boost::beast::flat_buffer buffer_;
  // The plain response being written: its header block (reused from call to call) and the
  // response, whose body is sent from where it is.
  std::string head_;
  Response out_;
  std::optional<HeaderParser> parser_;
  // Spooled bodies: the parser after the header, the file and the piece buffer.
  std::optional<boost::beast::http::request_parser<boost::beast::http::buffer_body>> file_parser_;
  std::shared_ptr<BodyFile> body_file_;
  std::vector<char> spool_buf_;
  std::size_t body_limit_ = 0;
  // The header hook's per-connection state (Takeover::user_data).
  std::shared_ptr<void> user_data_;
  // The streaming response in progress, if any.
  std::shared_ptr<StreamState> sstate_;
  // The most of the queued frames one send carries (one chunk).
  static constexpr std::size_t kMaxPiece = 64 * 1024;
  // The header block (in head_) has not gone out yet: it leaves with the first piece.
  bool stream_head_pending_ = false;
  // The piece being sent: the queued frames, coalesced; its chunk-size line; and, while the
  // socket has not taken it all, the list of what is left (async_write keeps only a view).
  std::string stream_out_;
  ChunkLine stream_line_{};
  std::array<boost::asio::const_buffer, 5> stream_bufs_{};
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
  // An error was answered before the request body was read: close with linger_close().
  bool linger_ = false;
  std::size_t linger_left_ = 0;  // bytes linger_close() still discards
};

}  // namespace detail
}  // namespace abx::http
