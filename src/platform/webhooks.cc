#include "webhooks.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "abx/base/base64.h"
#include "abx/base/json.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/token/token.h"
#include "events.h"

namespace abx::platform {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kMaxUrl = 2048;
constexpr std::size_t kMaxName = 256;
constexpr std::size_t kMaxSecret = 256;
constexpr std::size_t kMaxBody = 16 * 1024;  // a webhook registration body
constexpr std::uint64_t kMaxResponse = 64 * 1024;

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

// A string field of the body, at most `max` bytes.
Result<std::string> bounded_string(const json::value& v, const char* name, std::size_t max,
                                   bool allow_empty) {
  ABX_ASSIGN_OR_RETURN(std::string s, json_as_string(v, name));
  if (s.size() > max)
    return invalid_argument(std::string(name) + " must be at most " + std::to_string(max) +
                            " bytes");
  if (!allow_empty && s.empty()) return invalid_argument(std::string(name) + " must not be empty");
  return s;
}

struct Target {
  bool tls = false;
  std::string host;  // IPv6 without brackets
  std::uint16_t port = 0;
  std::string authority;  // for Host:
  std::string path;       // origin form
};

Result<Target> parse_target(std::string_view text) {
  if (text.empty() || text.size() > kMaxUrl)
    return invalid_argument("url must be 1.." + std::to_string(kMaxUrl) + " bytes");
  auto u = boost::urls::parse_absolute_uri(text);
  if (!u) return invalid_argument("url is not an absolute URL");
  Target t;
  if (u->scheme() == "https") {
    t.tls = true;
  } else if (u->scheme() != "http") {
    return invalid_argument("url must be http:// or https://");
  }
  if (u->has_userinfo()) return invalid_argument("url must not carry user info");
  if (u->has_fragment()) return invalid_argument("url must not have a fragment");
  t.host = u->host_type() == boost::urls::host_type::ipv6 ? std::string(u->host_address())
                                                          : std::string(u->encoded_host());
  if (t.host.empty()) return invalid_argument("url has no host");
  if (t.host.find_first_of("%/\\ ") != std::string::npos)
    return invalid_argument("url host is not a name or an address");
  if (u->has_port()) {
    if (u->port_number() == 0) return invalid_argument("url port must be 1..65535");
    t.port = u->port_number();
  } else {
    t.port = t.tls ? 443 : 80;
  }
  t.authority = std::string(u->encoded_authority());
  t.path = std::string(u->encoded_path());
  if (t.path.empty()) t.path = "/";
  if (u->has_query()) t.path += "?" + std::string(u->encoded_query());
  return t;
}

bool is_private_v4(const asio::ip::address_v4& a) {
  const auto b = a.to_bytes();
  return b[0] == 0 || b[0] == 10 || b[0] == 127 || (b[0] == 169 && b[1] == 254) ||
         (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168) ||
         (b[0] == 100 && (b[1] & 0xc0) == 64) || b[0] >= 224;
}

bool is_private(const asio::ip::address& a) {
  if (a.is_v4()) return is_private_v4(a.to_v4());
  const auto v6 = a.to_v6();
  if (v6.is_v4_mapped()) return is_private_v4(asio::ip::make_address_v4(asio::ip::v4_mapped, v6));
  const auto b = v6.to_bytes();
  return v6.is_loopback() || v6.is_unspecified() || v6.is_link_local() || v6.is_multicast() ||
         (b[0] & 0xfe) == 0xfc;
}

// `t`'s addresses that may be dialled (not loopback or private unless `allow_private`),
// resolved within `budget`; the error's message says why there are none.
Result<std::vector<tcp::endpoint>> resolve_allowed(asio::io_context& ioc, const Target& t,
                                                   std::chrono::milliseconds budget,
                                                   bool allow_private) {
  tcp::resolver resolver(ioc);
  tcp::resolver::results_type endpoints;
  beast::error_code ec = asio::error::would_block;
  resolver.async_resolve(t.host, std::to_string(t.port),
                         [&](beast::error_code e, tcp::resolver::results_type r) {
                           ec = e;
                           endpoints = std::move(r);
                         });
  ioc.run_for(budget);
  if (ec == asio::error::would_block) {
    resolver.cancel();
    ioc.restart();
    ioc.run();
    return unavailable("resolving " + t.host + ": timed out");
  }
  if (ec) return unavailable("resolving " + t.host + ": " + ec.message());
  // Every address it resolves to is checked, and only checked ones are dialled.
  std::vector<tcp::endpoint> allowed;
  for (const auto& e : endpoints) {
    if (allow_private || !is_private(e.endpoint().address())) allowed.push_back(e.endpoint());
  }
  if (allowed.empty())
    return unavailable(t.host + " resolves only to loopback or private addresses (refused)");
  return allowed;
}

// The delivery's POST to `t`, signed both ways (E2B's e2b-signature, abx's timestamped one).
bhttp::request<bhttp::string_body> signed_request(const Target& t, const std::string& webhook_id,
                                                  const std::string& secret,
                                                  const std::string& delivery_id, int attempt,
                                                  const std::string& body) {
  const std::int64_t ts = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, t.path, 11};
  req.set(bhttp::field::host, t.authority);
  req.set(bhttp::field::user_agent, "abxd-webhooks");
  req.set(bhttp::field::content_type, "application/json");
  req.set("e2b-webhook-id", webhook_id);
  req.set("e2b-delivery-id", delivery_id);
  req.set("e2b-signature-version", "v1");
  req.set("e2b-signature", e2b_signature(secret, body));
  req.set("abx-timestamp", std::to_string(ts));
  req.set("abx-signature", abx_signature(secret, ts, body));
  req.set("abx-delivery-attempt", std::to_string(attempt));
  req.body() = body;
  req.prepare_payload();
  return req;
}

}  // namespace

bool is_private_address(std::string_view address) {
  boost::system::error_code ec;
  auto a = asio::ip::make_address(std::string(address), ec);
  return !ec && is_private(a);
}

Status check_webhook_url(std::string_view url, bool allow_private) {
  ABX_ASSIGN_OR_RETURN(Target t, parse_target(url));
  if (allow_private) return {};
  if (t.host == "localhost" || t.host.ends_with(".localhost") || is_private_address(t.host))
    return invalid_argument("url '" + t.host +
                            "' is a loopback or private address (abxd --webhook-allow-private "
                            "permits those)");
  return {};
}

Result<WebhookSpec> parse_webhook_body(std::string_view body, bool create) {
  if (body.size() > kMaxBody)
    return invalid_argument("webhook body over " + std::to_string(kMaxBody) + " bytes");
  ABX_ASSIGN_OR_RETURN(json::value v,
                       parse_json_strict(body.find_first_not_of(" \t\r\n") == std::string::npos
                                             ? std::string_view("{}")
                                             : body));
  if (!v.is_object()) return invalid_argument("webhook body must be a JSON object");
  const json::object& o = v.as_object();
  WebhookSpec w;
  for (const auto& [key, value] : o) {
    if (key == "name") {
      ABX_ASSIGN_OR_RETURN(w.name, bounded_string(value, "name", kMaxName, true));
    } else if (key == "url") {
      ABX_ASSIGN_OR_RETURN(w.url, bounded_string(value, "url", kMaxUrl, false));
    } else if (key == "signatureSecret") {
      ABX_ASSIGN_OR_RETURN(w.secret, bounded_string(value, "signatureSecret", kMaxSecret, false));
    } else if (key == "enabled") {
      ABX_ASSIGN_OR_RETURN(w.enabled, json_as_bool(value, "enabled"));
    } else if (key == "events") {
      if (!value.is_array()) return invalid_argument("events must be an array of event types");
      const auto& a = value.as_array();
      if (a.size() > 32) return invalid_argument("events: at most 32 types");
      std::vector<std::string> types;
      for (const auto& t : a) {
        if (!t.is_string() || !known_event_type(t.as_string()))
          return invalid_argument("events: unknown event type " + json::serialize(t).substr(0, 80));
        std::string s(t.as_string());
        if (std::find(types.begin(), types.end(), s) == types.end()) types.push_back(std::move(s));
      }
      w.events = std::move(types);
    } else if (key == "id" || key == "teamID" || key == "teamId" || key == "createdAt") {
      // Read-only fields a client may echo back from a GET: ignored.
    } else {
      return invalid_argument("unknown webhook field '" + std::string(key).substr(0, 64) + "'");
    }
  }
  if (create && !w.url) return invalid_argument("url is required");
  if (create && !w.secret) return invalid_argument("signatureSecret is required");
  return w;
}

std::string e2b_signature(std::string_view secret, std::string_view body) {
  std::string msg;
  msg.reserve(secret.size() + body.size());
  msg.append(secret).append(body);
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), d);
  std::string b64 = base64_encode(std::string_view(reinterpret_cast<const char*>(d), sizeof d));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return b64;
}

std::string abx_signature(std::string_view secret, std::int64_t unix_seconds,
                          std::string_view body) {
  const std::string msg = std::to_string(unix_seconds) + "." + std::string(body);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
  return "v1=" + hex(mac, len);
}

json::object webhook_json(const store::WebhookRecord& w) {
  json::array events;
  for (const auto& e : w.events) events.emplace_back(e);
  return json::object{{"id", w.id},
                      {"teamID", w.team_id},
                      {"teamId", w.team_id},
                      {"name", w.name},
                      {"createdAt", rfc3339_ms(w.created_at_ms)},
                      {"enabled", w.enabled},
                      {"url", w.url},
                      {"events", std::move(events)}};
}

// --- the dispatcher ---

WebhookDispatcher::WebhookDispatcher(store::Store& store, WebhookOptions options)
    : store_(store), opt_(options) {
  for (int i = 0; i < std::max(1, opt_.workers); ++i) threads_.emplace_back([this] { work(); });
}

WebhookDispatcher::~WebhookDispatcher() { stop(); }

void WebhookDispatcher::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void WebhookDispatcher::drain(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] {
    return stopping_ || (in_flight_ == 0 && (queue_.empty() || queue_.begin()->first > deadline));
  });
}

WebhookDispatcher::Stats WebhookDispatcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void WebhookDispatcher::dispatch(const store::EventRecord& e) {
  auto hooks = store_.list_webhooks(e.team_id);
  if (!hooks.ok()) {
    log_.warn("webhooks of team " + e.team_id + ": " + hooks.error().message());
    return;
  }
  std::string body;
  for (const auto& w : *hooks) {
    if (!w.enabled) continue;
    if (!w.events.empty() && std::find(w.events.begin(), w.events.end(), e.type) == w.events.end())
      continue;
    if (body.empty()) body = json::serialize(EventLog::to_json(e));
    Delivery d;
    d.webhook_id = w.id;
    d.team_id = w.team_id;
    d.delivery_id = "evt" + std::to_string(e.id) + "-" + w.id.substr(0, 12);
    d.body = body;
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (queue_.size() >= opt_.max_queue) {
      ++stats_.dropped;
      log_.warn("webhook " + w.id + ": event " + std::to_string(e.id) +
                " dropped (the delivery queue is full)");
      continue;
    }
    queue_.emplace(std::chrono::steady_clock::now(), std::move(d));
    cv_.notify_all();
  }
}

void WebhookDispatcher::work() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stopping_) return;
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto due = queue_.begin()->first;
    if (due > std::chrono::steady_clock::now()) {
      cv_.wait_until(lock, due);
      continue;
    }
    Delivery d = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    ++in_flight_;
    lock.unlock();
    const bool ok = attempt(d);
    lock.lock();
    --in_flight_;
    cv_.notify_all();  // drain() watches the queue and what is in flight
    if (ok) {
      ++stats_.delivered;
      continue;
    }
    ++stats_.failed_attempts;
    if (d.attempt > opt_.retries) {
      ++stats_.given_up;
      log_.warn("webhook " + d.webhook_id + ": delivery " + d.delivery_id + " given up after " +
                std::to_string(d.attempt) + " attempts");
      continue;
    }
    const auto delay = opt_.retry_delay * (1LL << std::min(d.attempt - 1, 20));
    ++d.attempt;
    queue_.emplace(std::chrono::steady_clock::now() + delay, std::move(d));
    cv_.notify_all();
  }
}

bool WebhookDispatcher::attempt(const Delivery& d) {
  // The webhook as it is now: deleted or disabled meanwhile, no attempt.
  auto w = store_.get_webhook(d.team_id, d.webhook_id);
  if (!w.ok() || !w->enabled) return true;
  auto fail = [&](const std::string& why) {
    log_.info("webhook " + d.webhook_id + " (" + w->url + "): attempt " +
              std::to_string(d.attempt) + " of delivery " + d.delivery_id + " failed: " + why);
    return false;
  };
  auto target = parse_target(w->url);
  if (!target.ok()) return fail(target.error().message());
  const Target& t = *target;

  asio::io_context ioc;
  const auto deadline = std::chrono::steady_clock::now() + opt_.attempt_timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()));
  };
  auto resolved = resolve_allowed(ioc, t, left(), opt_.allow_private);
  if (!resolved.ok()) return fail(resolved.error().message());
  const std::vector<tcp::endpoint>& allowed = *resolved;
  beast::error_code ec;

  bhttp::request<bhttp::string_body> req =
      signed_request(t, w->id, w->secret, d.delivery_id, d.attempt, d.body);

  // Runs one async step to completion or the deadline (the stream's timer closes the socket).
  auto run = [&](beast::tcp_stream& lowest, auto&& op) -> beast::error_code {
    beast::error_code r = asio::error::would_block;
    lowest.expires_after(left());
    op([&](beast::error_code e, auto&&...) { r = e; });
    ioc.restart();
    ioc.run();
    return r;
  };
  auto exchange = [&](auto& stream, beast::tcp_stream& lowest) -> Result<unsigned> {
    auto e = run(lowest, [&](auto done) { bhttp::async_write(stream, req, done); });
    if (e) return unavailable("sending: " + e.message());
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxResponse);
    e = run(lowest, [&](auto done) { bhttp::async_read(stream, buf, parser, done); });
    // A receiver that answers 2xx with more than we read is still a delivery.
    if (e && e != bhttp::error::body_limit)
      return unavailable("reading the answer: " + e.message());
    return parser.get().result_int();
  };

  Result<unsigned> status = internal_error("no attempt");
  if (t.tls) {
    asio::ssl::context ssl(asio::ssl::context::tls_client);
    ssl.set_default_verify_paths();
    ssl.set_verify_mode(asio::ssl::verify_peer);
    SSL_CTX_set_min_proto_version(ssl.native_handle(), TLS1_2_VERSION);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ssl);
    auto& lowest = beast::get_lowest_layer(stream);
    ec = run(lowest, [&](auto done) { lowest.async_connect(allowed, done); });
    if (ec) return fail("connecting: " + ec.message());
    boost::system::error_code not_an_address;
    asio::ip::make_address(t.host, not_an_address);
    if (not_an_address && !SSL_set_tlsext_host_name(stream.native_handle(), t.host.c_str()))
      return fail("cannot set the TLS server name");
    stream.set_verify_callback(asio::ssl::host_name_verification(t.host));
    ec = run(lowest,
             [&](auto done) { stream.async_handshake(asio::ssl::stream_base::client, done); });
    if (ec) return fail("TLS handshake: " + ec.message());
    status = exchange(stream, lowest);
  } else {
    beast::tcp_stream stream(ioc);
    ec = run(stream, [&](auto done) { stream.async_connect(allowed, done); });
    if (ec) return fail("connecting: " + ec.message());
    status = exchange(stream, stream);
  }
  if (!status.ok()) return fail(status.error().message());
  if (*status < 200 || *status > 299) return fail("answered " + std::to_string(*status));
  return true;
}

}  // namespace abx::platform
