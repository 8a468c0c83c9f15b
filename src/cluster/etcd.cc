#include "abx/cluster/etcd.h"

#include <boost/beast/http/verb.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <thread>

#include "abx/base/base64.h"
#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/http/client.h"

namespace abx::cluster {

namespace json = boost::json;

namespace {

constexpr std::size_t kMaxEndpoints = 16;
// An answer bigger than this is refused: abx's keys are small, and a range of all sandboxes of
// a large cluster stays far below it.
constexpr std::uint64_t kMaxAnswerBytes = 64ull << 20;

// proto3's JSON writes int64 as a string ("7587868"); a plain number is accepted too.
Result<std::int64_t> int64_field(const json::object& o, std::string_view key,
                                 std::string_view path) {
  const json::value* v = json_find(o, key);
  if (!v) return std::int64_t{0};
  if (v->is_string()) {
    const json::string& s = v->get_string();
    std::int64_t out = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty())
      return invalid_argument(json_path_key(path, key) + ": not an int64");
    return out;
  }
  return json_as_int(*v, json_path_key(path, key));
}

Result<std::string> bytes_field(const json::object& o, std::string_view key,
                                std::string_view path) {
  ABX_ASSIGN_OR_RETURN(auto s, json_optional_string(o, key, path));
  if (!s) return std::string();
  auto d = base64_decode(*s);
  if (!d) return invalid_argument(json_path_key(path, key) + ": not base64");
  return std::move(*d);
}

Error from_grpc(std::int64_t code, std::string message) {
  message = "etcd: " + message;
  switch (code) {
    case 5:
      return not_found(std::move(message));
    case 14:
    case 4:  // deadline exceeded inside etcd (no leader yet): try again later
      return unavailable(std::move(message));
    case 3:
    case 11:
      return invalid_argument(std::move(message));
    default:
      return internal_error(std::move(message));
  }
}

// The answer as an object, or the gateway's error: {"error": "...", "code": N, "message": "..."}
// (unary) or {"error": {"grpc_code": N, "message": "..."}} (a stream's).
Result<json::object> answer_object(std::string_view body) {
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r' || body.back() == ' '))
    body.remove_suffix(1);
  auto v = parse_json_strict(body);
  if (!v) return internal_error("etcd answer: " + v.error().message());
  if (!v->is_object()) return internal_error("etcd answer: not an object");
  json::object& o = v->get_object();
  if (const json::value* e = json_find(o, "error")) {
    if (e->is_object()) {
      const json::object& eo = e->get_object();
      auto code = int64_field(eo, "grpc_code", "error");
      auto msg = json_optional_string(eo, "message", "error");
      return from_grpc(code ? *code : 2, msg && *msg ? **msg : std::string("error"));
    }
    auto code = int64_field(o, "code", "");
    std::string msg = e->is_string() ? std::string(e->get_string()) : "error";
    return from_grpc(code ? *code : 2, std::move(msg));
  }
  return std::move(o);
}

Result<json::object> checked(std::string_view body) { return answer_object(body); }

Error bad_answer(const Error& e) { return internal_error("etcd answer: " + e.message()); }

}  // namespace

// One request to one member.
static Result<http::Response> attempt(const Endpoint& ep, std::string_view path,
                                      const std::string& body, std::chrono::milliseconds timeout,
                                      const http::TlsClient* tls) {
  if (ep.tls && !tls) return invalid_argument("etcd endpoint " + ep.url() + ": no TLS settings");
  auto opened = ep.tls ? http::Connection::open_tls(ep.host, ep.port, *tls, timeout)
                       : http::Connection::open(ep.host, ep.port, timeout);
  if (!opened.ok() && opened.error().code() == ErrorCode::kUnauthenticated)
    return Error(ErrorCode::kUnauthenticated,
                 "etcd endpoint " + ep.url() + ": " + opened.error().message());
  ABX_ASSIGN_OR_RETURN(auto conn, std::move(opened));
  conn->set_body_limit(kMaxAnswerBytes);
  return conn->send(http::make_request(boost::beast::http::verb::post, std::string(path), body),
                    timeout);
}

Result<std::vector<Endpoint>> parse_endpoints(std::string_view list) {
  std::vector<Endpoint> out;
  while (!list.empty()) {
    auto comma = list.find(',');
    std::string_view one = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    const bool tls = one.starts_with("https://");
    if (tls)
      one.remove_prefix(8);
    else if (one.starts_with("http://"))
      one.remove_prefix(7);
    if (one.find("://") != std::string_view::npos)
      return invalid_argument("etcd endpoint '" + std::string(one) +
                              "': the scheme must be http:// or https://");
    if (!out.empty() && out.front().tls != tls)
      return invalid_argument("etcd endpoint '" + std::string(one) +
                              "': every endpoint must be https:// or none (a mix is refused)");
    while (!one.empty() && one.back() == '/') one.remove_suffix(1);
    auto colon = one.rfind(':');
    if (one.empty() || colon == std::string_view::npos || colon == 0)
      return invalid_argument("etcd endpoint '" + std::string(one) + "': expected HOST:PORT");
    unsigned port = 0;
    std::string_view p = one.substr(colon + 1);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535)
      return invalid_argument("etcd endpoint '" + std::string(one) + "': bad port");
    std::string_view host = one.substr(0, colon);
    if (host.find_first_of("/@?# ") != std::string_view::npos)
      return invalid_argument("etcd endpoint '" + std::string(one) + "': expected HOST:PORT");
    out.push_back({std::string(host), static_cast<std::uint16_t>(port), tls});
    if (out.size() > kMaxEndpoints) return invalid_argument("more than 16 etcd endpoints");
  }
  if (out.empty()) return invalid_argument("no etcd endpoint given");
  return out;
}

Result<std::vector<KeyValue>> parse_range_response(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(RangeResult r, parse_range(body));
  return std::move(r.kvs);
}

Result<RangeResult> parse_range(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(json::object o, checked(body));
  RangeResult r;
  auto count = int64_field(o, "count", "");
  if (!count) return bad_answer(count.error());
  if (*count < 0) return internal_error("etcd answer: count: negative");
  r.count = *count;
  auto header = json_optional_object(o, "header", "");
  if (!header) return bad_answer(header.error());
  if (*header) {
    auto rev = int64_field(**header, "revision", "header");
    if (!rev) return bad_answer(rev.error());
    r.revision = *rev;
  }
  std::vector<KeyValue>& out = r.kvs;
  auto kvs = json_optional_array(o, "kvs", "");
  if (!kvs) return internal_error("etcd answer: " + kvs.error().message());
  if (!*kvs) return r;
  for (std::size_t i = 0; i < (*kvs)->size(); ++i) {
    const std::string path = json_path_index("kvs", i);
    auto kv = json_as_object((**kvs)[i], path);
    if (!kv) return internal_error("etcd answer: " + kv.error().message());
    KeyValue item;
    auto key = bytes_field(**kv, "key", path);
    if (!key) return bad_answer(key.error());
    auto value = bytes_field(**kv, "value", path);
    if (!value) return bad_answer(value.error());
    auto lease = int64_field(**kv, "lease", path);
    if (!lease) return bad_answer(lease.error());
    auto created = int64_field(**kv, "create_revision", path);
    if (!created) return bad_answer(created.error());
    auto modified = int64_field(**kv, "mod_revision", path);
    if (!modified) return bad_answer(modified.error());
    item.key = std::move(*key);
    item.value = std::move(*value);
    item.lease = *lease;
    item.create_revision = *created;
    item.mod_revision = *modified;
    out.push_back(std::move(item));
  }
  return r;
}

Result<bool> parse_txn_response(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(json::object o, checked(body));
  auto ok = json_optional_bool(o, "succeeded", "");
  if (!ok) return internal_error("etcd answer: " + ok.error().message());
  return ok->value_or(false);
}

Result<std::int64_t> parse_delete_response(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(json::object o, checked(body));
  auto n = int64_field(o, "deleted", "");
  if (!n) return internal_error("etcd answer: " + n.error().message());
  return *n;
}

Result<std::int64_t> parse_lease_grant(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(json::object o, checked(body));
  auto id = int64_field(o, "ID", "");
  if (!id) return internal_error("etcd answer: " + id.error().message());
  if (*id == 0) return internal_error("etcd answer: a lease grant without an ID");
  return *id;
}

Result<std::int64_t> parse_keepalive(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(json::object o, checked(body));
  auto result = json_optional_object(o, "result", "");
  if (!result) return internal_error("etcd answer: " + result.error().message());
  if (!*result) return internal_error("etcd answer: a keepalive without a result");
  auto ttl = int64_field(**result, "TTL", "result");
  if (!ttl) return internal_error("etcd answer: " + ttl.error().message());
  if (*ttl <= 0) return not_found("etcd: the lease expired or was revoked");
  return *ttl;
}

Status parse_ok(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(json::object o, checked(body));
  (void)o;
  return {};
}

EtcdClient::EtcdClient(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout,
                       std::shared_ptr<const http::TlsClient> tls)
    : endpoints_(std::move(endpoints)), timeout_(timeout), tls_(std::move(tls)) {}

Endpoint EtcdClient::current() const {
  std::lock_guard lock(mu_);
  return endpoints_.empty() ? Endpoint{} : endpoints_[current_];
}

Result<std::string> EtcdClient::call(std::string_view path, std::string body) {
  if (endpoints_.empty()) return unavailable("no etcd endpoint");
  std::size_t start;
  {
    std::lock_guard lock(mu_);
    start = current_;
  }
  // Up to three rounds over the members, a short pause between rounds: a member that is down
  // is skipped at once, and one without a leader (an election after a member died takes a
  // second or two) answers 503/504, worth asking again. Anything else etcd answers ends the call.
  constexpr int kRounds = 3;
  std::string failures;
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(300 * round));
    failures.clear();
    for (std::size_t n = 0; n < endpoints_.size(); ++n) {
      const std::size_t i = (start + n) % endpoints_.size();
      const Endpoint& ep = endpoints_[i];
      Result<http::Response> res = attempt(ep, path, body, timeout_, tls_.get());
      if (res.ok() && res->result_int() != 503 && res->result_int() != 504) {
        std::lock_guard lock(mu_);
        current_ = i;
        return std::move(res->body());
      }
      if (!res.ok() && res.error().code() != ErrorCode::kUnavailable &&
          res.error().code() != ErrorCode::kDeadlineExceeded)
        return res.error();
      failures += (failures.empty() ? "" : "; ") + ep.str() + ": " +
                  (res.ok() ? std::to_string(res->result_int()) + " " + res->body()
                            : res.error().message());
    }
  }
  return unavailable("no etcd member answered (" + failures + ")");
}

Status EtcdClient::put(std::string_view key, std::string_view value, std::int64_t lease) {
  json::object b{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) b["lease"] = std::to_string(lease);
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/kv/put", json::serialize(b)));
  return parse_ok(ans);
}

Result<std::optional<KeyValue>> EtcdClient::get(std::string_view key) {
  json::object b{{"key", base64_encode(key)}};
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/kv/range", json::serialize(b)));
  ABX_ASSIGN_OR_RETURN(auto kvs, parse_range_response(ans));
  for (auto& kv : kvs)
    if (kv.key == key) return std::optional<KeyValue>(std::move(kv));
  return std::optional<KeyValue>();
}

namespace {
// The end of a prefix range: the prefix with its last byte below 0xff incremented.
std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}
}  // namespace

Result<std::vector<KeyValue>> EtcdClient::get_prefix(std::string_view prefix, std::int64_t limit) {
  json::object b{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}};
  if (limit > 0) b["limit"] = std::to_string(limit);
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/kv/range", json::serialize(b)));
  return parse_range_response(ans);
}

Result<RangeResult> EtcdClient::range_prefix(std::string_view prefix, std::int64_t min_mod_revision,
                                             bool keys_only) {
  json::object b{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}};
  if (min_mod_revision > 0) b["min_mod_revision"] = std::to_string(min_mod_revision);
  if (keys_only) b["keys_only"] = true;
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/kv/range", json::serialize(b)));
  return parse_range(ans);
}

Result<std::int64_t> EtcdClient::erase(std::string_view key) {
  json::object b{{"key", base64_encode(key)}};
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/kv/deleterange", json::serialize(b)));
  return parse_delete_response(ans);
}

Result<bool> EtcdClient::put_if_absent(std::string_view key, std::string_view value,
                                       std::int64_t lease) {
  json::object put{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  json::object b{
      {"compare", json::array{json::object{{"key", base64_encode(key)},
                                           {"target", "CREATE"},
                                           {"result", "EQUAL"},
                                           {"create_revision", "0"}}}},
      {"success", json::array{json::object{{"request_put", std::move(put)}}}},
  };
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/kv/txn", json::serialize(b)));
  return parse_txn_response(ans);
}

Result<bool> EtcdClient::put_if_revision(std::string_view key, std::string_view value,
                                         std::int64_t mod_revision) {
  if (mod_revision <= 0) return invalid_argument("mod_revision must be positive");
  json::object b{
      {"compare", json::array{json::object{{"key", base64_encode(key)},
                                           {"target", "MOD"},
                                           {"result", "EQUAL"},
                                           {"mod_revision", std::to_string(mod_revision)}}}},
      {"success",
       json::array{json::object{{"request_put", json::object{{"key", base64_encode(key)},
                                                             {"value", base64_encode(value)}}}}}},
  };
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/kv/txn", json::serialize(b)));
  return parse_txn_response(ans);
}

Result<std::int64_t> EtcdClient::grant_lease(std::int64_t ttl_seconds) {
  if (ttl_seconds < 1 || ttl_seconds > 3600)
    return invalid_argument("lease TTL must be 1..3600 seconds");
  json::object b{{"TTL", std::to_string(ttl_seconds)}};
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/lease/grant", json::serialize(b)));
  return parse_lease_grant(ans);
}

Result<std::int64_t> EtcdClient::keep_alive(std::int64_t lease) {
  json::object b{{"ID", std::to_string(lease)}};
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/lease/keepalive", json::serialize(b)));
  return parse_keepalive(ans);
}

Status EtcdClient::revoke_lease(std::int64_t lease) {
  json::object b{{"ID", std::to_string(lease)}};
  ABX_ASSIGN_OR_RETURN(std::string ans, call("/v3/lease/revoke", json::serialize(b)));
  return parse_ok(ans);
}

}  // namespace abx::cluster
