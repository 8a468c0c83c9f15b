#include "transport.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json.hpp>
#include <random>
#include <thread>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/connect/connect.h"

namespace abx::client::detail {

namespace bhttp = boost::beast::http;
namespace json = boost::json;

Result<Endpoint> parse_http_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.starts_with("https://")) {
    return Error(ErrorCode::kUnimplemented,
                 "'" + std::string(url) +
                     "': https is not supported by this client; use http:// "
                     "(a local abxd) or a TLS-terminating proxy");
  }
  if (!rest.starts_with("http://")) {
    return invalid_argument("'" + std::string(url) + "' is not an http:// URL");
  }
  rest.remove_prefix(7);
  Endpoint ep;
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    ep.base_path = std::string(rest.substr(slash));
    while (!ep.base_path.empty() && ep.base_path.back() == '/') ep.base_path.pop_back();
  }
  if (authority.empty()) return invalid_argument("'" + std::string(url) + "' has no host");
  ep.authority = std::string(authority);
  ep.port = 80;
  std::string_view host = authority;
  std::string_view port_part;
  if (authority.front() == '[') {  // [v6]:port
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return invalid_argument("bad IPv6 host in " + ep.authority);
    host = authority.substr(1, close - 1);
    port_part = authority.substr(close + 1);
    if (!port_part.empty() && port_part.front() != ':')
      return invalid_argument("bad authority '" + ep.authority + "'");
  } else if (auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port_part = authority.substr(colon);
  }
  authority = port_part;
  if (!authority.empty()) {  // ":port"
    std::string_view p = authority.substr(1);
    unsigned v = 0;
    if (p.empty() || p.size() > 5)
      return invalid_argument("bad port in '" + std::string(url) + "'");
    for (char ch : p) {
      if (ch < '0' || ch > '9') return invalid_argument("bad port in '" + std::string(url) + "'");
      v = v * 10 + static_cast<unsigned>(ch - '0');
    }
    if (v == 0 || v > 65535) return invalid_argument("bad port in '" + std::string(url) + "'");
    ep.port = static_cast<std::uint16_t>(v);
  }
  if (host.empty()) return invalid_argument("'" + std::string(url) + "' has no host");
  ep.host = std::string(host);
  return ep;
}

Error error_from_response(const http::Response& res, Plane plane, std::string_view what) {
  unsigned status = res.result_int();
  ErrorCode code = http::error_code_for_status(status);
  std::string message;
  std::string type;
  auto body = parse_json_strict(res.body());
  if (body.ok() && body->is_object()) {
    const auto& o = body->as_object();
    if (auto* e = o.if_contains("error"); e && e->is_string()) message = e->as_string().c_str();
    if (auto* m = o.if_contains("message"); m && m->is_string() && message.empty())
      message = m->as_string().c_str();
    if (plane == Plane::kCommandServer) {
      if (auto* t = o.if_contains("type"); t && t->is_string()) type = t->as_string().c_str();
    }
    if (auto* c = o.if_contains("code"); c && c->is_string()) {
      code = connect::code_from_connect(c->as_string());
    }
  } else if (!res.body().empty() && res.body().size() < 512) {
    message = res.body();
  }
  if (message.empty()) message = std::string(res.reason());
  std::string full = std::string(what) + ": " + std::to_string(status) + " " + message;
  if (plane == Plane::kCommandServer && !type.empty()) {
    // The server's own words, unprefixed: callers match on error/type.
    return Error(code, message, type);
  }
  return Error(code, full);
}

std::string url_encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

void Transport::prepare(const Endpoint& ep, http::Request& req) const {
  req.set(bhttp::field::host, ep.authority);
  if (!ep.base_path.empty()) req.target(ep.base_path + std::string(req.target()));
  req.set(bhttp::field::user_agent, "libabx/0.1");
  req.keep_alive(true);
}

Result<std::string> Transport::resolve(const std::string& host) {
  {
    std::lock_guard lk(mu_);
    if (auto it = resolved_.find(host); it != resolved_.end()) return it->second;
  }
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (!ec) return host;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, "", ec);
  if (ec || results.empty())
    return unavailable("cannot resolve host '" + host + "': " + ec.message());
  std::string addr;
  for (const auto& r : results) {  // IPv4 first: abxd listens on 127.0.0.1 by default
    if (r.endpoint().address().is_v4()) {
      addr = r.endpoint().address().to_string();
      break;
    }
  }
  if (addr.empty()) addr = results.begin()->endpoint().address().to_string();
  std::lock_guard lk(mu_);
  resolved_[host] = addr;
  return addr;
}

Result<std::unique_ptr<http::Connection>> Transport::dial(const Endpoint& ep) {
  std::unique_ptr<http::Connection> c;
  if (!ep.dial_sandbox.empty()) {
    if (!config_.sandbox_dialer) return internal_error("no sandbox dialer configured");
    ABX_ASSIGN_OR_RETURN(auto fd, config_.sandbox_dialer(ep.dial_sandbox, ep.port));
    ABX_ASSIGN_OR_RETURN(c, http::Connection::adopt(std::move(fd), ep.authority));
  } else {
    ABX_ASSIGN_OR_RETURN(auto addr, resolve(ep.host));
    ABX_ASSIGN_OR_RETURN(c, http::Connection::open(addr, ep.port, config_.connect_timeout));
  }
  if (config_.max_response_bytes > 0) c->set_body_limit(config_.max_response_bytes);
  return c;
}

Result<std::unique_ptr<http::Connection>> Transport::checkout(const Endpoint& ep, bool* reused) {
  std::string key = ep.host + ":" + std::to_string(ep.port);
  {
    std::lock_guard lk(mu_);
    auto& v = idle_[key];
    if (!v.empty()) {
      auto c = std::move(v.back());
      v.pop_back();
      *reused = true;
      return c;
    }
  }
  *reused = false;
  return dial(ep);
}

void Transport::checkin(const Endpoint& ep, std::unique_ptr<http::Connection> c) {
  std::lock_guard lk(mu_);
  auto& v = idle_[ep.host + ":" + std::to_string(ep.port)];
  if (v.size() < 64) v.push_back(std::move(c));
}

Result<std::shared_ptr<http::Connection>> Transport::open_stream(const Endpoint& ep) {
  ABX_ASSIGN_OR_RETURN(auto c, dial(ep));
  return std::shared_ptr<http::Connection>(std::move(c));
}

namespace {
bool retryable_status(unsigned s) { return s == 429 || s == 502 || s == 503 || s == 504; }
}  // namespace

Result<http::Response> Transport::send(const Endpoint& ep, http::Request req, SendOptions opts) {
  prepare(ep, req);
  auto timeout = opts.timeout.count() > 0 ? opts.timeout : config_.request_timeout;
  thread_local std::minstd_rand rng{std::random_device{}()};
  auto backoff = config_.retry_backoff;
  bool stale_retry_used = false;
  for (int attempt = 0;; ++attempt) {
    http::Request attempt_req = req;
    if (opts.before_send) {
      ABX_TRY(opts.before_send(attempt_req));
    }
    bool reused = false;
    auto conn = checkout(ep, &reused);
    bool retry = false;
    std::optional<Error> err;
    if (!conn.ok()) {
      err = conn.error();
      // Nothing was sent, so even a POST may be tried again.
      retry = conn.error().code() == ErrorCode::kUnavailable;
    } else {
      auto res = (*conn)->send(std::move(attempt_req), timeout);
      if (res.ok()) {
        unsigned s = res->result_int();
        if (opts.idempotent && retryable_status(s) && attempt < config_.max_retries) {
          retry = true;
          err = error_from_response(*res, Plane::kControl, "request");
        } else {
          if (res->keep_alive()) checkin(ep, std::move(*conn));
          return res;
        }
      } else {
        err = res.error();
        // A pooled keep-alive connection the server already closed fails at once: try a fresh
        // one immediately, once, without counting it as an attempt.
        if (reused && !stale_retry_used && res.error().code() == ErrorCode::kUnavailable) {
          stale_retry_used = true;
          --attempt;
          continue;
        }
        retry = opts.idempotent && res.error().code() == ErrorCode::kUnavailable;
      }
    }
    if (!retry || attempt >= config_.max_retries) return *err;
    std::uniform_int_distribution<int> jitter(0, static_cast<int>(backoff.count() / 2 + 1));
    std::this_thread::sleep_for(backoff + std::chrono::milliseconds(jitter(rng)));
    backoff *= 2;
  }
}

}  // namespace abx::client::detail
