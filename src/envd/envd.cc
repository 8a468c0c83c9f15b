// envd's routing, auth, the /files endpoint and lifecycle. The Connect services register their
// methods from process_service.cc and filesystem_service.cc.
#include "abx/envd/envd.h"

#include <openssl/sha.h>
#include <signal.h>
#include <sys/stat.h>

#include <boost/beast/core/string.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <cstdlib>
#include <map>
#include <mutex>

#include "abx/base/log.h"
#include "abx/base/try.h"
#include "abx/http/server.h"
#include "abx/token/token.h"
#include "connect.h"
#include "creds.h"
#include "envd_impl.h"
#include "files.h"
#include "fs.h"
#include "host_info.h"
#include "output_log.h"
#include "process.h"
#include "proto_json.h"
#include "users.h"

namespace abx::envd {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using http::Request;
using http::Responder;
using http::Response;

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Query decoding as Go's url.ParseQuery: %XX and '+' as space. A bad escape is an error.
Result<std::map<std::string, std::string>> parse_query(std::string_view q) {
  std::map<std::string, std::string> out;
  auto decode = [](std::string_view s) -> Result<std::string> {
    std::string r;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') {
        r += ' ';
      } else if (s[i] == '%') {
        int a = i + 1 < s.size() ? hex_value(s[i + 1]) : -1;
        int b = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
        if (a < 0 || b < 0) return invalid_argument("bad %-escape in query");
        r += static_cast<char>(a * 16 + b);
        i += 2;
      } else {
        r += s[i];
      }
    }
    return r;
  };
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (kv.empty()) continue;
    auto eq = kv.find('=');
    ABX_ASSIGN_OR_RETURN(auto k, decode(kv.substr(0, eq)));
    ABX_ASSIGN_OR_RETURN(
        auto v, decode(eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1)));
    out.emplace(std::move(k), std::move(v));  // first value wins
  }
  return out;
}

std::string query_value(const std::map<std::string, std::string>& q, const std::string& k) {
  auto it = q.find(k);
  return it == q.end() ? std::string() : it->second;
}

std::vector<std::pair<std::string_view, std::string_view>> header_pairs(const Request& req) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  for (const auto& f : req) out.emplace_back(f.name_string(), f.value());
  return out;
}

// The request body's coding: none or gzip (Content-Encoding, E2B's envd 0.5.7).
Result<Coding> upload_coding(const Request& h) {
  auto it = h.find(bhttp::field::content_encoding);
  if (it == h.end() || it->value().empty() || boost::beast::iequals(it->value(), "identity")) {
    return Coding::kIdentity;
  }
  if (boost::beast::iequals(it->value(), "gzip") || boost::beast::iequals(it->value(), "x-gzip")) {
    return Coding::kGzip;
  }
  return invalid_argument("Content-Encoding '" + std::string(it->value()) +
                          "' is not supported (gzip or identity)");
}

bool is_json_type(std::string_view ct, bool streaming) {
  auto semi = ct.find(';');
  std::string_view base = ct.substr(0, semi);
  while (!base.empty() && base.back() == ' ') base.remove_suffix(1);
  return boost::beast::iequals(base, streaming ? "application/connect+json" : "application/json");
}

}  // namespace

// ---- auth and users ----

Status Envd::Impl::check_token(const Request& req) const {
  auto want = access_token();
  if (!want) return {};
  auto it = req.find("X-Access-Token");
  if (it == req.end()) return Error(ErrorCode::kUnauthenticated, "missing X-Access-Token");
  if (it->value().size() > token::kMaxTokenBytes ||
      !token::constant_time_equal(it->value(), *want)) {
    return Error(ErrorCode::kUnauthenticated, "invalid access token");
  }
  return {};
}

// /files also accepts a signed URL: v1_ + base64(sha256("path:op:user:token[:exp]")), unpadded.
Status Envd::Impl::check_files_auth(const Request& req, const std::map<std::string, std::string>& q,
                                    const char* op) const {
  auto access = access_token();
  if (!access) return {};
  // E2B's envd (envd/internal/api/auth.go validateSigning): its checks in its order, with its
  // words; every failure is a 401.
  if (auto it = req.find("X-Access-Token"); it != req.end()) {
    if (it->value().size() > token::kMaxTokenBytes ||
        !token::constant_time_equal(it->value(), *access)) {
      return Error(ErrorCode::kUnauthenticated,
                   "access token present in header but does not match");
    }
    return {};
  }
  if (q.find("signature") == q.end()) {
    return Error(ErrorCode::kUnauthenticated, "missing signature query parameter");
  }
  std::string sig = query_value(q, "signature");
  std::string exp = query_value(q, "signature_expiration");
  const bool has_exp = q.find("signature_expiration") != q.end();
  // An integer parameter that is not one: the request is malformed (400, as E2B's generated
  // parameter binding answers), before any signature is computed.
  if (has_exp && (exp.empty() || exp.size() > 18 ||
                  exp.find_first_not_of("0123456789", exp[0] == '-' ? 1 : 0) != std::string::npos ||
                  exp == "-")) {
    return invalid_argument("Invalid format for parameter signature_expiration: '" +
                            exp.substr(0, 32) + "' is not an integer");
  }
  std::string material =
      query_value(q, "path") + ":" + op + ":" + query_value(q, "username") + ":" + *access;
  if (has_exp) material += ":" + exp;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  ::SHA256(reinterpret_cast<const unsigned char*>(material.data()), material.size(), digest);
  std::string want =
      "v1_" + base64_encode(std::string_view(reinterpret_cast<char*>(digest), sizeof digest));
  while (want.back() == '=') want.pop_back();
  if (!token::constant_time_equal(sig, want))
    return Error(ErrorCode::kUnauthenticated, "invalid signature");
  // The signature first, then its expiration: a forged URL with a past expiration is "invalid".
  if (has_exp && std::stoll(exp) < static_cast<long long>(std::time(nullptr))) {
    return Error(ErrorCode::kUnauthenticated, "signature is already expired");
  }
  return {};
}

Result<User> Envd::Impl::request_user(const Request& req,
                                      const std::map<std::string, std::string>& q) const {
  std::string name;
  if (auto it = req.find(bhttp::field::authorization); it != req.end()) {
    std::string_view v = it->value();
    if (v.size() > 6 && boost::beast::iequals(v.substr(0, 6), "basic ")) {
      auto dec = base64_decode(v.substr(6));
      if (!dec.ok()) return Error(ErrorCode::kUnauthenticated, "malformed Basic authorization");
      name = dec->substr(0, dec->find(':'));
    }
  }
  if (name.empty()) name = query_value(q, "username");
  return users.resolve(name);
}

std::chrono::milliseconds Envd::Impl::keepalive_of(const Request& req) const {
  auto it = req.find("Keepalive-Ping-Interval");
  if (it != req.end()) {
    std::string v(it->value());
    if (!v.empty() && v.size() < 7 && v.find_first_not_of("0123456789") == std::string::npos) {
      long s = std::stol(v);
      if (s > 0) return std::chrono::seconds(s);
    }
  }
  return opt.default_keepalive;
}

// ---- routing ----

void Envd::Impl::handle(Request&& req, Responder respond) {
  std::string_view target = req.target();
  auto qm = target.find('?');
  std::string_view path = target.substr(0, qm);
  auto q = parse_query(qm == std::string_view::npos ? std::string_view() : target.substr(qm + 1));
  unsigned v = req.version();
  if (!q.ok()) return respond(rest_error_response(q.error(), v));
  if (path == "/health") {
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      return respond(rest_error_response(Error(ErrorCode::kMethodNotAllowed, "use GET"), v));
    }
    Response res{bhttp::status::no_content, v};
    res.keep_alive(req.keep_alive());
    return respond(std::move(res));
  }
  if (path == "/files") return handle_files(std::move(req), std::move(respond), *q);
  if (path == "/logs") {  // abx: the start command's and command server's output (output_log.h)
    if (auto s = check_token(req); !s.ok()) return respond(rest_error_response(s.error(), v));
    auto body = logs_query_json(OutputLog::instance(), *q);
    if (!body.ok()) return respond(rest_error_response(body.error(), v));
    auto res = http::json_response(200, *body, v);
    res.keep_alive(req.keep_alive());
    return respond(std::move(res));
  }
  if (path == "/envs" || path == "/metrics") {  // E2B's envd: token required, GET only
    if (auto s = check_token(req); !s.ok()) return respond(rest_error_response(s.error(), v));
    if (req.method() != bhttp::verb::get) {
      return respond(rest_error_response(Error(ErrorCode::kMethodNotAllowed, "use GET"), v));
    }
    json::object body;
    if (path == "/envs") {
      for (const auto& [k, val] : default_environment()) body[k] = val;
    } else {
      auto m = metrics_json(cpu);
      if (!m.ok()) return respond(rest_error_response(m.error(), v));
      body = std::move(*m);
    }
    auto res = http::json_response(200, body, v);
    res.set(bhttp::field::cache_control, "no-store");
    res.keep_alive(req.keep_alive());
    return respond(std::move(res));
  }
  if (path.size() > 1 && path.find('/', 1) != std::string_view::npos &&
      (path.starts_with("/process.") || path.starts_with("/filesystem."))) {
    return handle_rpc(std::move(req), std::move(respond), path);
  }
  // Everything else needs the token too, so an unauthenticated caller learns nothing.
  if (auto s = check_token(req); !s.ok()) return respond(rest_error_response(s.error(), v));
  respond(connect_error_response(
      Error(ErrorCode::kUnimplemented, "no such route: " + std::string(path)), v));
}

Result<http::BodyPlan> Envd::Impl::body_policy(const Request& h) {
  std::string_view target = h.target();
  auto qm = target.find('?');
  if (target.substr(0, qm) != "/files" || h.method() != bhttp::verb::post) {
    return http::BodyPlan{1024 * 1024, {}};
  }
  // Refuse early, before a large body is read.
  ABX_ASSIGN_OR_RETURN(auto q, parse_query(qm == std::string_view::npos ? std::string_view()
                                                                        : target.substr(qm + 1)));
  ABX_TRY(check_files_auth(h, q, "write"));
  ABX_ASSIGN_OR_RETURN(auto user, request_user(h, q));
  std::string ct(h[bhttp::field::content_type]);
  bool octet = is_json_type(ct, false)
                   ? false
                   : boost::beast::iequals(ct.substr(0, ct.find(';')), "application/octet-stream");
  bool multipart = boost::beast::iequals(ct.substr(0, ct.find(';')), "multipart/form-data");
  if (!octet && !multipart) {
    return invalid_argument("POST /files needs multipart/form-data or application/octet-stream");
  }
  ABX_ASSIGN_OR_RETURN(auto coding, upload_coding(h));
  if (coding == Coding::kGzip && !octet) {
    return invalid_argument("Content-Encoding gzip needs an application/octet-stream body");
  }
  if (auto md = upload_metadata(header_pairs(h)); !md.ok()) return md.error();
  std::string target_dir = opt.spool_dir;
  std::string qpath = query_value(q, "path");
  if (octet && qpath.empty())
    return invalid_argument("octet-stream upload needs the path query parameter");
  if (!qpath.empty()) {
    ABX_ASSIGN_OR_RETURN(auto p, resolve_path(qpath, user));
    target_dir = p.substr(0, std::max<std::size_t>(1, p.rfind('/')));
    ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(user));
    ABX_TRY(make_upload_dirs(target_dir, user));
  }
  // Staged on the target's mount: an octet-stream body is then renamed into place, no copy.
  ABX_ASSIGN_OR_RETURN(auto spool, staging_dir_for(target_dir, opt.spool_dir, user));
  return http::BodyPlan{opt.max_upload_bytes, spool};
}

void Envd::Impl::handle_files(Request&& req, Responder respond,
                              const std::map<std::string, std::string>& q) {
  auto s = serve_files(req, respond, q);
  if (!s.ok()) respond(rest_error_response(s.error(), req.version()));
}

// Errors are returned before anything is sent; handle_files() renders them.
Status Envd::Impl::serve_files(const Request& req, const Responder& respond,
                               const std::map<std::string, std::string>& q) {
  bool get = req.method() == bhttp::verb::get;
  if (!get && req.method() != bhttp::verb::post) {
    return Error(ErrorCode::kMethodNotAllowed, "use GET or POST");
  }
  ABX_TRY(check_files_auth(req, q, get ? "read" : "write"));
  ABX_ASSIGN_OR_RETURN(auto user, request_user(req, q));
  std::string qpath = query_value(q, "path");
  if (get) {
    if (qpath.empty()) return invalid_argument("missing path query parameter");
    ABX_ASSIGN_OR_RETURN(auto p, resolve_path(qpath, user));
    auto coding = download_coding(req[bhttp::field::accept_encoding]);
    if (!coding) {
      respond(not_acceptable_response("Accept-Encoding '" +
                                          std::string(req[bhttp::field::accept_encoding]) +
                                          "' accepts neither gzip nor identity",
                                      req.version()));
      return {};
    }
    return serve_download(p, user, req.version(), *coding, respond);
  }
  auto body = respond.body_file();
  if (!body) return internal_error("upload body was not spooled");
  ABX_ASSIGN_OR_RETURN(auto written, store_upload(req, *body, user, qpath));
  Response res{bhttp::status::ok, req.version()};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = json::serialize(written);
  respond(std::move(res));
  return {};
}

// Places each `file` part (or the whole octet-stream body) at its path; returns the written
// entries, as E2B's envd answers POST /files.
Result<json::array> Envd::Impl::store_upload(const Request& req, http::BodyFile& body,
                                             const User& user, const std::string& qpath) {
  json::array written;
  PlaceOptions po;
  ABX_ASSIGN_OR_RETURN(po.coding, upload_coding(req));
  ABX_ASSIGN_OR_RETURN(po.metadata, upload_metadata(header_pairs(req)));
  po.max_decoded = opt.max_upload_bytes;
  json::object metadata;
  for (const auto& [k, val] : po.metadata) metadata[k] = val;
  auto place = [&](const std::string& raw_path, std::uint64_t off, std::uint64_t len) -> Status {
    ABX_ASSIGN_OR_RETURN(auto p, resolve_path(raw_path, user));
    ABX_TRY(place_file(body, off, len, p, user, opt.spool_dir, po));
    json::object entry{{"path", p}, {"name", p.substr(p.rfind('/') + 1)}, {"type", "file"}};
    if (!metadata.empty()) entry["metadata"] = metadata;
    written.push_back(std::move(entry));
    return {};
  };
  std::string ct(req[bhttp::field::content_type]);
  if (!boost::beast::iequals(ct.substr(0, ct.find(';')), "multipart/form-data")) {
    ABX_TRY(place(qpath, 0, body.size()));
    return written;
  }
  ABX_ASSIGN_OR_RETURN(auto parts, parse_multipart(body.fd(), body.size(), ct));
  for (const auto& part : parts) {
    if (part.name != "file") continue;
    std::string target = !qpath.empty() ? qpath : part.filename;
    if (target.empty()) return invalid_argument("a file part has neither a filename nor a path");
    ABX_TRY(place(target, part.offset, part.length));
  }
  if (written.empty()) return invalid_argument("no part named 'file' in the upload");
  return written;
}

void Envd::Impl::handle_rpc(Request&& req, Responder respond, std::string_view path) {
  unsigned v = req.version();
  std::string method(path.substr(1));
  auto u = unary.find(method);
  auto st = streaming.find(method);
  if (auto s = check_token(req); !s.ok()) return respond(connect_error_response(s.error(), v));
  if (u == unary.end() && st == streaming.end()) {
    return respond(
        connect_error_response(Error(ErrorCode::kUnimplemented, "unknown method " + method), v));
  }
  bool is_stream = st != streaming.end();
  auto fail = [&](const Error& e) {
    respond(is_stream ? connect_stream_error_response(e, v) : connect_error_response(e, v));
  };
  if (req.method() != bhttp::verb::post) {
    return respond(
        connect_error_response(Error(ErrorCode::kMethodNotAllowed, "Connect calls use POST"), v));
  }
  if (!is_json_type(req[bhttp::field::content_type], is_stream)) {
    Error e(ErrorCode::kUnsupportedMediaType,
            "unsupported content type '" + std::string(req[bhttp::field::content_type]) +
                "'; expected " + (is_stream ? "application/connect+json" : "application/json"));
    Response res = connect_error_response(e, v);
    res.result(bhttp::status::unsupported_media_type);
    return respond(std::move(res));
  }
  std::string_view payload = req.body();
  if (is_stream) {
    auto one = parse_single_request(req.body());
    if (!one.ok()) return fail(one.error());
    payload = *one;
  }
  auto msg = parse_message(payload.empty() ? std::string_view("{}") : payload);
  if (!msg.ok()) return fail(msg.error());
  auto user = request_user(req, {});
  if (!user.ok()) return fail(user.error());
  Call call{std::move(req), respond, std::move(*user), std::move(*msg), opt.default_workdir};
  if (is_stream) {
    auto s = st->second(call);
    if (!s.ok()) fail(s.error());
    return;
  }
  auto out = u->second(call);
  if (!out.ok()) return fail(out.error());
  Response res{bhttp::status::ok, v};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = json::serialize(*out);
  res.keep_alive(call.req.keep_alive());
  respond(std::move(res));
}

http::Response connect_stream_header(unsigned version) {
  Response h{bhttp::status::ok, version};
  h.set(bhttp::field::content_type, "application/connect+json");
  return h;
}

// ---- lifecycle ----

Envd::Envd(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Envd::~Envd() { shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<Envd>> Envd::start(EnvdOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  if (impl->opt.access_token) {
    impl->token = std::make_shared<const std::string>(std::move(*impl->opt.access_token));
    impl->opt.access_token.reset();  // one copy, the one set_access_token() replaces
  }
  std::map<std::string, User> overrides;
  for (const auto& [name, u] : impl->opt.users) overrides[name] = User{name, u.uid, u.gid, u.home};
  impl->users = Users(impl->opt.default_user, std::move(overrides));
  if (impl->opt.spool_dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    impl->opt.spool_dir = t && *t ? t : "/tmp";
  }
  impl->procs = std::make_unique<ProcessManager>(Reaper::instance());
  register_process_service(*impl);
  register_filesystem_service(*impl);
  http::ServerOptions so;
  so.host = impl->opt.host;
  so.port = impl->opt.port;
  so.io_threads = impl->opt.io_threads;
  so.server_header = "abx-envd";
  so.limits.stream_high_water = impl->opt.stream_high_water;
  so.limits.stream_low_water = impl->opt.stream_high_water / 4;
  // Process streams may be silent for long stretches between keepalives.
  so.limits.idle_timeout = std::chrono::minutes(10);
  Impl* raw = impl.get();
  so.body_policy = [raw](const Request& h) { return raw->body_policy(h); };
  so.error_renderer = [](const Error& e, unsigned version) {
    return rest_error_response(e, version);
  };
  auto server = http::Server::start(so, [raw](Request&& req, Responder respond) {
    raw->handle(std::move(req), std::move(respond));
  });
  if (!server.ok()) return server.error();
  impl->server = std::move(*server);
  return std::unique_ptr<Envd>(new Envd(std::move(impl)));
}

std::uint16_t Envd::port() const { return impl_->server->port(); }
const std::string& Envd::host() const { return impl_->server->host(); }
void Envd::signal_processes(int sig) { impl_->procs->signal_all(sig); }

Status Envd::set_access_token(std::string token) {
  if (token.empty()) return invalid_argument("empty access token");
  auto next = std::make_shared<const std::string>(std::move(token));
  std::lock_guard lock(impl_->token_mu);
  if (!impl_->token) return Error(ErrorCode::kFailedPrecondition, "envd serves without a token");
  impl_->token = std::move(next);
  return {};
}

void Envd::shutdown(std::chrono::milliseconds drain) {
  if (!impl_->server) return;
  // Processes first: their streams then end cleanly within the drain time.
  impl_->procs->signal_all(SIGKILL);
  impl_->server->shutdown(drain);
  {
    std::lock_guard lock(impl_->watch_mu);
    impl_->poll_watchers.clear();
    impl_->stream_watchers.clear();
  }
  impl_->procs.reset();
  impl_->server.reset();
}

}  // namespace abx::envd
