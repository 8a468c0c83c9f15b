// The HTTP/2 relay of an intercepted flow (egress_h2.h): two nghttp2 sessions fed from memory
// (mem_recv / mem_send), a reader and a writer coroutine per connection, all on the flow's
// strand. A writer drains its session into one batch, writes it, and sleeps on a timer that
// anything queueing frames for it cancels (kick). Callbacks of one session submit to the other.
#include "egress_h2.h"

#include <nghttp2/nghttp2.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "abx/egress/h2_request.h"

namespace abx::platform {

namespace asio = boost::asio;
using asio::awaitable;
using boost::system::error_code;
using egress::Header;

namespace {

constexpr std::uint32_t kMaxConcurrentStreams = 100;
constexpr std::size_t kMaxHeaderBlockBytes = 64 * 1024;
constexpr std::size_t kMaxHeaderFields = 256;
constexpr std::int32_t kStreamWindow = 256 * 1024;
constexpr std::int32_t kConnectionWindow = 1024 * 1024;
constexpr std::size_t kReadBuffer = 64 * 1024;
constexpr std::size_t kWriteBatch = 64 * 1024;

// One header block as it arrives, with the limits kept.
struct Block {
  std::vector<Header> fields;
  std::size_t bytes = 0;
  bool too_large = false;
  void clear() {
    fields.clear();
    bytes = 0;
    too_large = false;
  }
  void add(std::string_view k, std::string_view v) {
    if (too_large) return;
    bytes += k.size() + v.size() + 32;
    if (bytes > kMaxHeaderBlockBytes || fields.size() >= kMaxHeaderFields) {
      too_large = true;
      fields.clear();
      return;
    }
    fields.emplace_back(k, v);
  }
  const std::string* find(std::string_view k) const {
    for (const auto& f : fields)
      if (f.first == k) return &f.second;
    return nullptr;
  }
};

// One direction's body: what one session received and the other has not yet sent.
struct Body {
  std::string data;
  std::size_t off = 0;
  bool eof = false;
  std::vector<Header> trailers;
  std::size_t pending() const { return data.size() - off; }
};

// A sandbox's stream and the upstream stream carrying it (up_id 0: none, answered here).
struct Pair {
  std::int32_t down_id = 0;
  std::int32_t up_id = 0;
  Block req_block, resp_block;
  Body req, resp;
  bool down_closed = false, up_closed = false;
  bool responded = false;  // a final response was submitted to the sandbox
  bool reported = false;
  EgressTransformEvent ev;
};

std::vector<nghttp2_nv> to_nv(const std::vector<Header>& fields, std::size_t sensitive_from) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [k, v] = fields[i];
    nv.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(k.data())),
                  reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), k.size(), v.size(),
                  static_cast<std::uint8_t>(i >= sensitive_from ? NGHTTP2_NV_FLAG_NO_INDEX
                                                                : NGHTTP2_NV_FLAG_NONE)});
  }
  return nv;
}

std::string h2_error_name(std::uint32_t code) { return nghttp2_http2_strerror(code); }

class Bridge : public std::enable_shared_from_this<Bridge> {
 public:
  Bridge(H2TlsStream& down, H2TlsStream& up, H2BridgeHooks hooks)
      : down_io_(down),
        up_io_(up),
        hooks_(std::move(hooks)),
        down_wake_(down.get_executor()),
        up_wake_(down.get_executor()),
        all_done_(down.get_executor()) {}
  ~Bridge() {
    if (down_) nghttp2_session_del(down_);
    if (up_) nghttp2_session_del(up_);
  }
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  awaitable<void> run();

 private:
  enum Side { kDown, kUp };

  static nghttp2_session_callbacks* make_callbacks();  // trampolines into the members below
  bool setup();
  void spawn(awaitable<void> a);
  awaitable<void> reader(Side side);
  awaitable<void> writer(Side side);
  void kick() {
    down_wake_.cancel();
    up_wake_.cancel();
  }
  void stop();
  void end_down();
  void upstream_gone(const std::string& why);
  void goaway_down(std::uint32_t code);
  void goaway_up(std::uint32_t code);

  // nghttp2 callbacks (static trampolines below call these).
  int on_begin_headers(nghttp2_session* s, const nghttp2_frame* f);
  int on_header(nghttp2_session* s, const nghttp2_frame* f, std::string_view k, std::string_view v);
  int on_frame_recv(nghttp2_session* s, const nghttp2_frame* f);
  int on_data_chunk(nghttp2_session* s, std::int32_t id, const std::uint8_t* data, std::size_t len);
  int on_stream_close(nghttp2_session* s, std::int32_t id, std::uint32_t code);
  ssize_t read_body(nghttp2_session* s, std::int32_t id, std::uint8_t* buf, std::size_t len,
                    std::uint32_t* flags);

  void on_request(const std::shared_ptr<Pair>& p, bool end_stream);
  void on_response(const std::shared_ptr<Pair>& p, bool end_stream);
  void refuse(const std::shared_ptr<Pair>& p, int status, const std::string& why);
  void reset_down(const std::shared_ptr<Pair>& p, std::uint32_t code);
  void end_req(const std::shared_ptr<Pair>& p);
  void end_resp(const std::shared_ptr<Pair>& p);
  void maybe_report(const std::shared_ptr<Pair>& p);
  void report(const std::shared_ptr<Pair>& p);
  std::shared_ptr<Pair> pair_of(Side side, std::int32_t id) {
    auto& m = side == kDown ? by_down_ : by_up_;
    auto it = m.find(id);
    return it == m.end() ? nullptr : it->second;
  }
  Side side_of(nghttp2_session* s) const { return s == down_ ? kDown : kUp; }

  H2TlsStream& down_io_;
  H2TlsStream& up_io_;
  H2BridgeHooks hooks_;
  nghttp2_session* down_ = nullptr;  // server, toward the sandbox
  nghttp2_session* up_ = nullptr;    // client, toward the upstream
  std::map<std::int32_t, std::shared_ptr<Pair>> by_down_, by_up_;
  std::vector<std::shared_ptr<Pair>> all_;  // every pair not yet reported
  asio::steady_timer down_wake_, up_wake_, all_done_;
  int live_ = 0;  // coroutines running
  bool stopping_ = false;
  bool down_done_ = false;  // the sandbox's session is over: stop once the upstream is flushed
  bool up_gone_ = false;    // the upstream's connection ended or its session is done
  bool up_goaway_ = false;  // the upstream sent GOAWAY: no new streams
  bool down_goaway_sent_ = false;
  bool up_goaway_sent_ = false;
};

Bridge* bridge(void* user) { return static_cast<Bridge*>(user); }

bool Bridge::setup() {
  nghttp2_session_callbacks* cbs = make_callbacks();
  if (!cbs) return false;
  nghttp2_option* opt = nullptr;
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cbs);
    return false;
  }
  // Windows open only when the other side took the bytes (nghttp2_session_consume).
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_send_header_block_length(opt, 2 * kMaxHeaderBlockBytes);
  nghttp2_option_set_peer_max_concurrent_streams(opt, kMaxConcurrentStreams);
  int rv = nghttp2_session_server_new2(&down_, cbs, this, opt);
  if (rv == 0) rv = nghttp2_session_client_new2(&up_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) return false;
  const nghttp2_settings_entry down_settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderBlockBytes},
  };
  const nghttp2_settings_entry up_settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, kMaxHeaderBlockBytes},
  };
  if (nghttp2_submit_settings(down_, NGHTTP2_FLAG_NONE, down_settings, std::size(down_settings)) ||
      nghttp2_submit_settings(up_, NGHTTP2_FLAG_NONE, up_settings, std::size(up_settings)) ||
      nghttp2_session_set_local_window_size(down_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow) ||
      nghttp2_session_set_local_window_size(up_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow))
    return false;
  return true;
}

void Bridge::spawn(awaitable<void> a) {
  ++live_;
  asio::co_spawn(down_io_.get_executor(), std::move(a),
                 [self = shared_from_this()](std::exception_ptr e) {
                   if (e) {
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& ex) {
                       self->hooks_.log->error(std::string("egress h2: ") + ex.what());
                     }
                     self->stop();
                   }
                   if (--self->live_ == 0) self->all_done_.cancel();
                 });
}

awaitable<void> Bridge::run() {
  if (!setup()) {
    hooks_.log->error("egress h2 " + hooks_.name + ": nghttp2 session setup failed");
    co_return;
  }
  all_done_.expires_at(asio::steady_timer::time_point::max());
  spawn(reader(kDown));
  spawn(reader(kUp));
  spawn(writer(kDown));
  spawn(writer(kUp));
  error_code ec;
  while (live_ > 0) co_await all_done_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  for (auto& p : std::vector<std::shared_ptr<Pair>>(all_)) {
    if (p->ev.refused.empty() && !(p->resp.eof && p->responded && p->resp.pending() == 0))
      p->ev.refused = "connection closed before the stream ended";
    report(p);
  }
}

// The sandbox's session is over (its GOAWAY with no stream left, or its connection closed).
// What the upstream is still owed — the GOAWAY with the sandbox's code — is written first: the
// upstream's writer stops the bridge once it has nothing more to send.
void Bridge::end_down() {
  if (!stopping_ && !up_gone_ && up_ != nullptr && nghttp2_session_want_write(up_) != 0) {
    down_done_ = true;
    up_wake_.cancel();
    return;
  }
  stop();
}

void Bridge::stop() {
  if (stopping_) return;
  stopping_ = true;
  error_code ignored;
  down_wake_.cancel();
  up_wake_.cancel();
  down_io_.next_layer().cancel(ignored);
  up_io_.next_layer().cancel(ignored);
}

awaitable<void> Bridge::reader(Side side) {
  auto self = shared_from_this();
  H2TlsStream& io = side == kDown ? down_io_ : up_io_;
  std::unique_ptr<std::uint8_t[]> buf(new std::uint8_t[kReadBuffer]);
  error_code ec;
  for (;;) {
    std::size_t n = co_await io.async_read_some(asio::buffer(buf.get(), kReadBuffer),
                                                asio::redirect_error(asio::use_awaitable, ec));
    if (stopping_) co_return;
    if (n > 0) {
      hooks_.touch();
      nghttp2_session* s = side == kDown ? down_ : up_;
      ssize_t rv = nghttp2_session_mem_recv(s, buf.get(), n);
      if (rv < 0) {
        hooks_.log->debug("egress h2 " + hooks_.name + ": " +
                          (side == kDown ? "the sandbox's" : "the upstream's") +
                          " HTTP/2 is broken: " + nghttp2_strerror(static_cast<int>(rv)));
        if (side == kDown) {
          stop();
        } else {
          upstream_gone("the upstream's HTTP/2 is broken");
        }
        co_return;
      }
      kick();
    }
    if (ec) {
      if (side == kDown) {
        end_down();  // the sandbox is gone: nothing left to deliver to it
      } else {
        upstream_gone("the upstream closed the connection");
      }
      co_return;
    }
  }
}

awaitable<void> Bridge::writer(Side side) {
  auto self = shared_from_this();
  H2TlsStream& io = side == kDown ? down_io_ : up_io_;
  asio::steady_timer& wake = side == kDown ? down_wake_ : up_wake_;
  std::uint64_t* bytes = side == kDown ? hooks_.bytes_in : hooks_.bytes_out;
  std::string batch;
  error_code ec;
  for (;;) {
    if (stopping_) co_return;
    nghttp2_session* s = side == kDown ? down_ : up_;
    if (side == kUp && up_gone_) co_return;
    batch.clear();
    while (batch.size() < kWriteBatch) {
      const std::uint8_t* data = nullptr;
      ssize_t n = nghttp2_session_mem_send(s, &data);
      if (n < 0) {
        hooks_.log->debug("egress h2 " + hooks_.name + ": " +
                          nghttp2_strerror(static_cast<int>(n)));
        if (side == kDown) {
          stop();
        } else {
          upstream_gone("HTTP/2 toward the upstream failed");
        }
        co_return;
      }
      if (n == 0) break;
      batch.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (!batch.empty()) {
      kick();  // sending may have consumed the other session's data: its window updates
      co_await asio::async_write(io, asio::buffer(batch),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (stopping_) co_return;
      if (ec) {
        if (side == kDown) {
          stop();
        } else {
          upstream_gone("writing to the upstream failed");
        }
        co_return;
      }
      *bytes += batch.size();
      hooks_.touch();
      continue;
    }
    if (side == kUp && down_done_) {
      stop();  // what the upstream was owed after the sandbox's end is written
      co_return;
    }
    if (!nghttp2_session_want_read(s) && !nghttp2_session_want_write(s)) {
      if (side == kDown) {
        end_down();  // the sandbox's session is over (GOAWAY, no streams left)
      } else {
        upstream_gone("the upstream's session ended");
      }
      co_return;
    }
    wake.expires_at(asio::steady_timer::time_point::max());
    co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

// The upstream cannot carry more: streams without their whole response are reset (or answered
// 502 before one started), the sandbox gets a GOAWAY, and its session ends when what it has
// received is delivered.
void Bridge::upstream_gone(const std::string& why) {
  if (up_gone_) return;
  up_gone_ = true;
  up_wake_.cancel();
  for (auto& [id, p] : std::map<std::int32_t, std::shared_ptr<Pair>>(by_up_)) {
    p->up_closed = true;
    if (!p->resp.eof && !p->down_closed) {
      if (p->ev.refused.empty()) p->ev.refused = why;
      if (!p->responded) {
        refuse(p, 502, why);
      } else {
        reset_down(p, NGHTTP2_INTERNAL_ERROR);
      }
    }
    maybe_report(p);
  }
  by_up_.clear();
  goaway_down(NGHTTP2_NO_ERROR);
  kick();
}

void Bridge::goaway_down(std::uint32_t code) {
  if (down_goaway_sent_) return;
  down_goaway_sent_ = true;
  nghttp2_submit_goaway(down_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(down_),
                        code, nullptr, 0);
}

void Bridge::goaway_up(std::uint32_t code) {
  if (up_goaway_sent_ || up_gone_) return;
  up_goaway_sent_ = true;
  nghttp2_submit_goaway(up_, NGHTTP2_FLAG_NONE, 0, code, nullptr, 0);  // no pushed streams
}

int Bridge::on_begin_headers(nghttp2_session* s, const nghttp2_frame* f) {
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  const std::int32_t id = f->hd.stream_id;
  if (side_of(s) == kDown) {
    if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
      auto p = std::make_shared<Pair>();
      p->down_id = id;
      p->ev.host = hooks_.name;
      by_down_[id] = p;
      all_.push_back(p);
    } else if (auto p = pair_of(kDown, id)) {
      p->req_block.clear();
    }
  } else if (auto p = pair_of(kUp, id)) {
    p->resp_block.clear();
  }
  return 0;
}

int Bridge::on_header(nghttp2_session* s, const nghttp2_frame* f, std::string_view k,
                      std::string_view v) {
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  const Side side = side_of(s);
  if (auto p = pair_of(side, f->hd.stream_id))
    (side == kDown ? p->req_block : p->resp_block).add(k, v);
  return 0;
}

int Bridge::on_frame_recv(nghttp2_session* s, const nghttp2_frame* f) {
  const Side side = side_of(s);
  if (f->hd.type == NGHTTP2_GOAWAY) {
    if (side == kDown) {
      hooks_.log->debug("egress h2 " + hooks_.name + ": the sandbox sent GOAWAY (code " +
                        std::to_string(f->goaway.error_code) + ")" +
                        (up_gone_ ? ", the upstream is gone" : "") +
                        (up_goaway_sent_ ? ", the upstream has one" : ""));
      goaway_up(f->goaway.error_code);
    } else {
      up_goaway_ = true;
      goaway_down(f->goaway.error_code);
    }
    return 0;
  }
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
  auto p = pair_of(side, f->hd.stream_id);
  if (!p) return 0;
  const bool end_stream = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (f->hd.type == NGHTTP2_HEADERS) {
    if (side == kDown) {
      if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        on_request(p, end_stream);
        return 0;
      }
      // Trailers.
      if (p->req_block.too_large) {
        p->ev.refused = "request trailers over the limits";
        reset_down(p, NGHTTP2_REFUSED_STREAM);
        return 0;
      }
      p->req.trailers = std::move(p->req_block.fields);
      p->req_block.clear();
    } else {
      if (p->resp_block.too_large || p->resp_block.find(":status")) {
        on_response(p, end_stream);
        return 0;
      }
      p->resp.trailers = std::move(p->resp_block.fields);
      p->resp_block.clear();
    }
  }
  if (end_stream) {
    if (side == kDown) {
      end_req(p);
    } else {
      end_resp(p);
    }
  }
  return 0;
}

void Bridge::on_request(const std::shared_ptr<Pair>& p, bool end_stream) {
  Block block = std::move(p->req_block);
  p->req_block.clear();
  if (block.too_large) {
    p->ev.refused = "request header over 64 KiB or 256 fields";
    refuse(p, 431, "the request's header is over 64 KiB or 256 fields");
    return;
  }
  std::string host;
  if (auto no = egress::check_h2_request(block.fields, hooks_.name, &host)) {
    if (!host.empty()) p->ev.host = host;
    p->ev.refused = no->reason;
    refuse(p, no->status,
           no->status == 421 ? "the :authority (and Host) must be " + hooks_.name +
                                   ", the name this connection was opened to"
                             : no->reason);
    return;
  }
  std::optional<EgressTransform> t;
  try {
    t = hooks_.transform();
  } catch (const std::exception& e) {
    hooks_.log->error(std::string("egress transform hook threw: ") + e.what());
    p->ev.refused = "transform hook failed";
    reset_down(p, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  if (t && !t->refused.empty()) {
    p->ev.rule = t->rule;
    p->ev.refused = t->refused;
    refuse(p, 502, "abxd cannot apply this host's network.rules: " + t->refused);
    return;
  }
  std::size_t sensitive = block.fields.size();
  if (t) {
    p->ev.rule = t->rule;
    for (const auto& h : t->headers) p->ev.header_names.push_back(h.first);
    sensitive = egress::apply_h2_headers(block.fields, t->headers);
  }
  if (up_gone_ || up_goaway_) {
    p->ev.refused = "the upstream is closing the connection (GOAWAY)";
    reset_down(p, NGHTTP2_REFUSED_STREAM);
    return;
  }
  p->req.eof = end_stream;
  auto nv = to_nv(block.fields, sensitive);
  nghttp2_data_provider prd;
  prd.source.ptr = nullptr;
  prd.read_callback = [](nghttp2_session* s, std::int32_t id, std::uint8_t* buf, std::size_t len,
                         std::uint32_t* flags, nghttp2_data_source*, void* user) -> ssize_t {
    return bridge(user)->read_body(s, id, buf, len, flags);
  };
  std::int32_t id = nghttp2_submit_request(up_, nullptr, nv.data(), nv.size(),
                                           end_stream ? nullptr : &prd, nullptr);
  if (id < 0) {
    p->ev.refused = std::string("upstream stream: ") + nghttp2_strerror(id);
    reset_down(p, NGHTTP2_REFUSED_STREAM);
    return;
  }
  p->up_id = id;
  by_up_[id] = p;
}

void Bridge::on_response(const std::shared_ptr<Pair>& p, bool end_stream) {
  Block block = std::move(p->resp_block);
  p->resp_block.clear();
  if (p->down_closed) return;
  if (block.too_large) {
    p->ev.refused = "the upstream's response header is over 64 KiB or 256 fields";
    nghttp2_submit_rst_stream(up_, NGHTTP2_FLAG_NONE, p->up_id, NGHTTP2_CANCEL);
    if (!p->responded) {
      refuse(p, 502, p->ev.refused);
    } else {
      reset_down(p, NGHTTP2_INTERNAL_ERROR);
    }
    return;
  }
  const std::string* status = block.find(":status");
  const int code = status ? std::atoi(status->c_str()) : 0;
  auto nv = to_nv(block.fields, block.fields.size());
  if (code / 100 == 1) {  // 100 Continue, 103 Early Hints: passed on, the final one follows
    nghttp2_submit_headers(down_, NGHTTP2_FLAG_NONE, p->down_id, nullptr, nv.data(), nv.size(),
                           nullptr);
    return;
  }
  p->ev.upstream_status = code;
  p->responded = true;
  p->resp.eof = end_stream;
  nghttp2_data_provider prd;
  prd.source.ptr = nullptr;
  prd.read_callback = [](nghttp2_session* s, std::int32_t id, std::uint8_t* buf, std::size_t len,
                         std::uint32_t* flags, nghttp2_data_source*, void* user) -> ssize_t {
    return bridge(user)->read_body(s, id, buf, len, flags);
  };
  if (nghttp2_submit_response(down_, p->down_id, nv.data(), nv.size(),
                              end_stream ? nullptr : &prd) != 0) {
    reset_down(p, NGHTTP2_INTERNAL_ERROR);
  }
}

// The proxy's own answer: `status` with a one-line text body; nothing goes upstream.
void Bridge::refuse(const std::shared_ptr<Pair>& p, int status, const std::string& why) {
  if (p->down_closed) return;
  p->responded = true;
  p->resp.data = "abx egress proxy: " + why + "\n";
  p->resp.off = 0;
  p->resp.eof = true;
  p->resp.trailers.clear();
  const std::vector<Header> fields = {{":status", std::to_string(status)},
                                      {"content-type", "text/plain"},
                                      {"content-length", std::to_string(p->resp.data.size())}};
  auto nv = to_nv(fields, fields.size());
  nghttp2_data_provider prd;
  prd.source.ptr = nullptr;
  prd.read_callback = [](nghttp2_session* s, std::int32_t id, std::uint8_t* buf, std::size_t len,
                         std::uint32_t* flags, nghttp2_data_source*, void* user) -> ssize_t {
    return bridge(user)->read_body(s, id, buf, len, flags);
  };
  if (nghttp2_submit_response(down_, p->down_id, nv.data(), nv.size(), &prd) != 0)
    reset_down(p, NGHTTP2_INTERNAL_ERROR);
}

void Bridge::reset_down(const std::shared_ptr<Pair>& p, std::uint32_t code) {
  if (p->down_closed) return;
  nghttp2_submit_rst_stream(down_, NGHTTP2_FLAG_NONE, p->down_id, code);
}

void Bridge::end_req(const std::shared_ptr<Pair>& p) {
  p->req.eof = true;
  if (p->up_id > 0 && !p->up_closed) nghttp2_session_resume_data(up_, p->up_id);
}

void Bridge::end_resp(const std::shared_ptr<Pair>& p) {
  p->resp.eof = true;
  if (p->responded && !p->down_closed) nghttp2_session_resume_data(down_, p->down_id);
}

int Bridge::on_data_chunk(nghttp2_session* s, std::int32_t id, const std::uint8_t* data,
                          std::size_t len) {
  hooks_.touch();
  const Side side = side_of(s);
  auto p = pair_of(side, id);
  if (side == kDown) {
    if (!p || p->up_id == 0 || p->up_closed) {
      nghttp2_session_consume(s, id, len);  // nowhere to go: dropped, the window kept open
      return 0;
    }
    p->req.data.append(reinterpret_cast<const char*>(data), len);
    nghttp2_session_resume_data(up_, p->up_id);
  } else {
    if (!p || p->down_closed || !p->responded || p->resp.eof) {
      nghttp2_session_consume(s, id, len);
      return 0;
    }
    p->resp.data.append(reinterpret_cast<const char*>(data), len);
    nghttp2_session_resume_data(down_, p->down_id);
  }
  return 0;
}

// The body of `id` on session `s`: the request's toward the upstream, the response's toward the
// sandbox. Bytes handed over are consumed on the session they came from (its window reopens).
ssize_t Bridge::read_body(nghttp2_session* s, std::int32_t id, std::uint8_t* buf, std::size_t len,
                          std::uint32_t* flags) {
  const Side side = side_of(s);
  auto p = pair_of(side, id);
  if (!p) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  Body& b = side == kUp ? p->req : p->resp;
  const std::size_t n = std::min(len, b.pending());
  if (n > 0) {
    std::memcpy(buf, b.data.data() + b.off, n);
    b.off += n;
    if (b.off == b.data.size()) {
      b.data.clear();
      b.off = 0;
    }
    if (side == kUp) {
      nghttp2_session_consume(down_, p->down_id, n);
    } else if (p->up_id > 0 && !up_gone_) {
      nghttp2_session_consume(up_, p->up_id, n);
    }
  }
  if (b.pending() == 0 && b.eof) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!b.trailers.empty()) {
      auto nv = to_nv(b.trailers, b.trailers.size());
      if (nghttp2_submit_trailer(s, id, nv.data(), nv.size()) == 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      b.trailers.clear();
    }
    return static_cast<ssize_t>(n);
  }
  if (n == 0) return NGHTTP2_ERR_DEFERRED;
  return static_cast<ssize_t>(n);
}

int Bridge::on_stream_close(nghttp2_session* s, std::int32_t id, std::uint32_t code) {
  const Side side = side_of(s);
  auto p = pair_of(side, id);
  if (!p) return 0;
  if (side == kDown) {
    p->down_closed = true;
    by_down_.erase(id);
    if (p->up_id > 0 && !p->up_closed) {
      // The sandbox reset it, or its response was refused here: the upstream stops too. A
      // stream that ended normally has nothing left upstream but what is already queued.
      if (code != NGHTTP2_NO_ERROR || !p->resp.eof)
        nghttp2_submit_rst_stream(up_, NGHTTP2_FLAG_NONE, p->up_id,
                                  code != NGHTTP2_NO_ERROR ? code : std::uint32_t{NGHTTP2_CANCEL});
    }
    if (code != NGHTTP2_NO_ERROR && p->ev.refused.empty())
      p->ev.refused = "the sandbox reset the stream (" + h2_error_name(code) + ")";
  } else {
    p->up_closed = true;
    by_up_.erase(id);
    if (code != NGHTTP2_NO_ERROR && !p->down_closed) {
      if (p->ev.refused.empty())
        p->ev.refused = "the upstream reset the stream (" + h2_error_name(code) + ")";
      reset_down(p, code);
    }
  }
  maybe_report(p);
  return 0;
}

void Bridge::maybe_report(const std::shared_ptr<Pair>& p) {
  if (p->down_closed && (p->up_id == 0 || p->up_closed)) report(p);
}

void Bridge::report(const std::shared_ptr<Pair>& p) {
  if (p->reported) return;
  p->reported = true;
  if (p->ev.upstream_status == 0 && p->ev.refused.empty())
    p->ev.refused = "the stream ended without a response";
  std::erase(all_, p);
  try {
    hooks_.event(p->ev);
  } catch (const std::exception& e) {
    hooks_.log->error(std::string("egress on_transform hook threw: ") + e.what());
  }
}

nghttp2_session_callbacks* Bridge::make_callbacks() {
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return nullptr;
  nghttp2_session_callbacks_set_on_begin_headers_callback(
      cbs, [](nghttp2_session* s, const nghttp2_frame* f, void* user) {
        return bridge(user)->on_begin_headers(s, f);
      });
  nghttp2_session_callbacks_set_on_header_callback(
      cbs, [](nghttp2_session* s, const nghttp2_frame* f, const std::uint8_t* k, std::size_t kl,
              const std::uint8_t* v, std::size_t vl, std::uint8_t, void* user) {
        return bridge(user)->on_header(s, f, std::string_view(reinterpret_cast<const char*>(k), kl),
                                       std::string_view(reinterpret_cast<const char*>(v), vl));
      });
  nghttp2_session_callbacks_set_on_frame_recv_callback(
      cbs, [](nghttp2_session* s, const nghttp2_frame* f, void* user) {
        return bridge(user)->on_frame_recv(s, f);
      });
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      cbs,
      [](nghttp2_session* s, std::uint8_t, std::int32_t id, const std::uint8_t* data,
         std::size_t len, void* user) { return bridge(user)->on_data_chunk(s, id, data, len); });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      cbs, [](nghttp2_session* s, std::int32_t id, std::uint32_t code, void* user) {
        return bridge(user)->on_stream_close(s, id, code);
      });
  return cbs;
}

}  // namespace

awaitable<void> serve_h2(H2TlsStream& down, H2TlsStream& up, H2BridgeHooks hooks) {
  auto b = std::make_shared<Bridge>(down, up, std::move(hooks));
  co_await b->run();
}

}  // namespace abx::platform
