#include "abx/image/registry.h"

#include <algorithm>
#include <atomic>
#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "abx/base/base64.h"
#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/image/digest.h"
#include "abx/image/manifest.h"
#include "registry_auth.h"
#include "registry_transport.h"

namespace abx::image {

namespace bhttp = boost::beast::http;
using detail::HttpRequest;
using detail::HttpResponse;
using detail::Url;

namespace {

constexpr std::uint64_t kSmallBody = 64 * 1024;

std::string percent_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string header(const HttpResponse& r, bhttp::field f) {
  auto it = r.headers.find(f);
  return it == r.headers.end() ? std::string() : std::string(it->value());
}

std::string media_type_of_header(const HttpResponse& r) {
  std::string t = header(r, bhttp::field::content_type);
  if (auto semi = t.find(';'); semi != std::string::npos) t.resize(semi);
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return t;
}

// The registry's own explanation, from {"errors":[{"code":..,"message":..}]}.
std::string registry_says(const HttpResponse& r) {
  auto doc = parse_json_strict(r.body);
  if (!doc.ok() || !doc->is_object()) return {};
  const auto* errors = doc->as_object().if_contains("errors");
  if (errors == nullptr || !errors->is_array() || errors->as_array().empty()) return {};
  const auto& first = errors->as_array().front();
  if (!first.is_object()) return {};
  std::string out;
  if (const auto* c = first.as_object().if_contains("code"); c != nullptr && c->is_string()) {
    out = std::string(c->as_string());
  }
  if (const auto* m = first.as_object().if_contains("message"); m != nullptr && m->is_string()) {
    out += (out.empty() ? "" : ": ") + std::string(m->as_string());
  }
  return out;
}

// A status the caller did not expect, as an Error. 401 is handled by Session (it knows whether
// credentials were sent).
Error status_error(const HttpResponse& r, const std::string& what) {
  std::string says = registry_says(r);
  std::string msg =
      what + ": HTTP " + std::to_string(r.status) + (says.empty() ? "" : " (" + says + ")");
  switch (r.status) {
    case 403:
      return Error(ErrorCode::kPermissionDenied, msg + "; the credentials do not allow this");
    case 404:
      return not_found(msg);
    case 429:
      return Error(ErrorCode::kResourceExhausted, msg + "; rate limited by the registry");
    default:
      break;
  }
  if (r.status >= 500) return unavailable(msg);
  return Error(ErrorCode::kInternal, msg);
}

// The registry API of one repository, with auth, redirects and the scheme decided once.
class Session {
 public:
  static Result<Session> open(const Reference& ref, const RegistryOptions& o, std::string actions) {
    Session s(ref, o, std::move(actions));
    ABX_ASSIGN_OR_RETURN(s.transport_,
                         detail::Transport::create({o.ca_file, o.connect_timeout, o.read_timeout}));
    ABX_ASSIGN_OR_RETURN(s.creds_, detail::find_credentials(
                                       detail::auth_file_candidates(o.auth_file), ref.registry));
    ABX_TRY(s.probe());
    return s;
  }

  // A second session on the same registry for another thread: its own transport, the scheme
  // and the credentials (and token) this one found.
  Result<Session> fork() const {
    Session s(ref_, options_, actions_);
    s.base_ = base_;
    s.creds_ = creds_;
    s.authorization_ = authorization_;
    ABX_ASSIGN_OR_RETURN(s.transport_,
                         detail::Transport::create(
                             {options_.ca_file, options_.connect_timeout, options_.read_timeout}));
    return s;
  }

  // A request to `path` ("/v2/...") on the registry, or to an absolute URL (upload locations).
  HttpRequest request(bhttp::verb method, const std::string& path) const {
    HttpRequest r;
    r.method = method;
    r.url = base_;
    r.url.target = path;
    return r;
  }

  // Sends `req`, answering one auth challenge and following redirects when asked. Returns the
  // final response whatever its status, except 401 (an error explaining the credentials).
  Result<HttpResponse> call(HttpRequest req, std::uint64_t limit,
                            const detail::BodySink* sink = nullptr, bool follow_redirects = false) {
    bool answered_challenge = false;
    for (int redirects = 0;;) {
      const bool to_registry = same_origin(req.url);
      HttpRequest sent = req;
      // Credentials go to the registry only, never to where it redirects (blob storage).
      if (to_registry && !authorization_.empty()) {
        sent.headers.emplace_back("Authorization", authorization_);
      }
      ABX_ASSIGN_OR_RETURN(auto res, transport_->send(sent, limit, sink));
      if (res.status == 401 && to_registry) {
        if (answered_challenge) return unauthorized(res);
        ABX_TRY(authenticate(res));
        answered_challenge = true;
        continue;
      }
      const bool redirect = res.status == 301 || res.status == 302 || res.status == 303 ||
                            res.status == 307 || res.status == 308;
      if (!redirect || !follow_redirects) return res;
      if (++redirects > options_.max_redirects) {
        return unavailable("more than " + std::to_string(options_.max_redirects) +
                           " redirects fetching " + req.url.target);
      }
      std::string location = header(res, bhttp::field::location);
      if (location.empty()) return unavailable("a redirect without a Location header");
      ABX_ASSIGN_OR_RETURN(auto next, detail::resolve_url(req.url, location));
      if (!next.tls && !plain_http_allowed(next.host, next.authority()) && !same_origin(next)) {
        return unavailable("refusing a redirect to plain HTTP: " + next.str());
      }
      req.url = std::move(next);
      if (res.status == 303) {
        req.method = bhttp::verb::get;
        req.body.clear();
        req.body_file.clear();
      }
    }
  }

  const std::string& repo_path() const { return repo_path_; }

 private:
  Session(const Reference& ref, const RegistryOptions& o, std::string actions)
      : options_(o), ref_(ref), actions_(std::move(actions)) {
    auto [host, port] = detail::split_host_port(ref.api_host());
    base_.host = host;
    base_.port = port;
    repo_path_ = "/v2/" + ref.repository;
  }

  bool same_origin(const Url& u) const {
    return u.host == base_.host && u.effective_port() == base_.effective_port() &&
           u.tls == base_.tls;
  }

  bool plain_http_allowed(const std::string& host, const std::string& authority) const {
    if (detail::is_loopback_host(host)) return true;
    for (const auto& r : options_.insecure_registries) {
      if (r == authority || r == host) return true;
    }
    return false;
  }

  // GET /v2/ over HTTPS; over plain HTTP when that is allowed and the host does not speak TLS
  // (a certificate that fails verification is never a reason to downgrade).
  Status probe() {
    auto req = request(bhttp::verb::get, "/v2/");
    auto res = transport_->send(req, kSmallBody);
    if (res.ok()) return {};
    if (transport_->last_failure() != detail::FailureKind::kTlsHandshake ||
        !plain_http_allowed(base_.host, ref_.registry)) {
      if (transport_->last_failure() == detail::FailureKind::kTlsVerify) {
        return Error(res.error().code(),
                     res.error().message() + (options_.ca_file.empty()
                                                  ? "; pass its CA with the CA file option"
                                                  : "; the CA file does not vouch for it"));
      }
      return res.error().with_context("registry " + ref_.registry + " is unreachable");
    }
    base_.tls = false;
    req.url.tls = false;
    auto plain = transport_->send(req, kSmallBody);
    if (!plain.ok()) {
      return plain.error().with_context("registry " + ref_.registry + " is unreachable");
    }
    return {};
  }

  std::string basic() const {
    return "Basic " + base64_encode(creds_->username + ":" + creds_->password);
  }

  Error unauthorized(const HttpResponse& res) const {
    if (creds_) {
      return Error(ErrorCode::kUnauthenticated,
                   "registry " + ref_.registry + " rejected the credentials for user '" +
                       creds_->username + "' (from " + creds_->source + ")");
    }
    std::string files;
    for (const auto& f : detail::auth_file_candidates(options_.auth_file)) {
      files += (files.empty() ? "" : ", ") + f;
    }
    return Error(ErrorCode::kUnauthenticated,
                 "registry " + ref_.registry +
                     " requires credentials and there are none for it in " + files);
  }

  Status authenticate(const HttpResponse& res) {
    std::string www = header(res, bhttp::field::www_authenticate);
    if (www.empty()) return unauthorized(res);
    ABX_ASSIGN_OR_RETURN(auto challenge, detail::parse_challenge(www));
    if (challenge.scheme == "basic") {
      if (!creds_) return unauthorized(res);
      authorization_ = basic();
      return {};
    }
    if (challenge.scheme != "bearer") {
      return Error(ErrorCode::kUnimplemented, "registry " + ref_.registry +
                                                  " asks for unsupported auth scheme '" +
                                                  challenge.scheme + "'");
    }
    auto realm = challenge.params["realm"];
    if (realm.empty()) return unavailable("registry's Bearer challenge has no realm");
    ABX_ASSIGN_OR_RETURN(auto url, detail::parse_url(realm));
    if (!url.tls && !plain_http_allowed(url.host, url.authority())) {
      return unavailable("refusing to fetch a token over plain HTTP from " + realm);
    }
    std::string scope = challenge.params["scope"];
    if (scope.empty()) scope = "repository:" + ref_.repository + ":" + actions_;
    std::string query;
    if (auto s = challenge.params.find("service"); s != challenge.params.end()) {
      query += "service=" + percent_encode(s->second);
    }
    query += std::string(query.empty() ? "" : "&") + "scope=" + percent_encode(scope);
    url.target += (url.target.find('?') == std::string::npos ? "?" : "&") + query;
    HttpRequest treq;
    treq.url = url;
    if (creds_) treq.headers.emplace_back("Authorization", basic());
    auto tres = transport_->send(treq, kSmallBody);
    if (!tres.ok()) return tres.error().with_context("token server " + url.authority());
    if (tres->status == 401 || tres->status == 403) return unauthorized(*tres);
    if (tres->status != 200) return status_error(*tres, "token server " + url.authority());
    auto doc = parse_json_strict(tres->body);
    std::string token;
    if (doc.ok() && doc->is_object()) {
      for (const char* k : {"token", "access_token"}) {
        if (const auto* t = doc->as_object().if_contains(k); t != nullptr && t->is_string()) {
          token = std::string(t->as_string());
          break;
        }
      }
    }
    if (token.empty()) {
      return unavailable("token server " + url.authority() + " answered without a token");
    }
    authorization_ = "Bearer " + token;
    return {};
  }

  RegistryOptions options_;
  Reference ref_;
  std::string actions_;
  Url base_;
  std::string repo_path_;
  std::unique_ptr<detail::Transport> transport_;
  std::optional<detail::Credentials> creds_;
  std::string authorization_;
};

// A manifest or index as the registry served it.
struct Fetched {
  std::string bytes;
  std::string digest;        // of the bytes, verified
  std::string content_type;  // without parameters
};

// GET a manifest by tag or digest; verifies the digest of the bytes against the one asked for
// and against the registry's Docker-Content-Digest.
Result<Fetched> get_manifest(Session& s, const std::string& tag_or_digest,
                             const RegistryOptions& o) {
  auto req = s.request(bhttp::verb::get, s.repo_path() + "/manifests/" + tag_or_digest);
  req.headers.emplace_back("Accept", std::string(kManifestAccept));
  auto res = s.call(req, o.max_manifest_bytes);
  if (!res.ok()) {
    if (res.error().code() == ErrorCode::kPayloadTooLarge) {
      return Error(ErrorCode::kPayloadTooLarge,
                   "manifest " + tag_or_digest + " is over the limit of " +
                       std::to_string(o.max_manifest_bytes) + " bytes");
    }
    return res.error();
  }
  if (res->status == 404) {
    std::string says = registry_says(*res);
    return not_found((valid_digest(tag_or_digest) ? "manifest " : "tag '") + tag_or_digest +
                     (valid_digest(tag_or_digest) ? "" : "'") + " not found" +
                     (says.empty() ? "" : " (" + says + ")"));
  }
  if (res->status != 200) return status_error(*res, "GET manifest " + tag_or_digest);
  std::string digest = sha256_digest(res->body);
  if (valid_digest(tag_or_digest) && digest != tag_or_digest) {
    return invalid_argument("manifest digest mismatch: asked for " + tag_or_digest +
                            ", the registry sent " + digest);
  }
  auto it = res->headers.find("Docker-Content-Digest");
  if (it != res->headers.end() && valid_digest(std::string_view(it->value())) &&
      it->value() != digest) {
    return invalid_argument("manifest digest mismatch: the registry says " +
                            std::string(it->value()) + ", its bytes hash to " + digest);
  }
  return Fetched{std::move(res->body), std::move(digest), media_type_of_header(*res)};
}

std::string megabytes(std::int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(n) / 1e6);
  return buf;
}

// GET one blob into `writer` (a BlobWriter or a LayerWriter), reporting its bytes every
// progress_interval; `stop` (when given and set) abandons the transfer.
template <class Writer>
Status fetch_into(Session& s, Writer& writer, const Descriptor& d, const RegistryOptions& o,
                  const std::function<void(const std::string&)>& progress,
                  const std::atomic<bool>* stop) {
  progress("pulling " + d.digest + " (" + std::to_string(d.size) + " bytes)");
  using Clock = std::chrono::steady_clock;
  auto last = Clock::now();
  detail::BodySink sink = [&](std::string_view piece) -> Status {
    if (stop != nullptr && stop->load()) return Error(ErrorCode::kUnavailable, "abandoned");
    ABX_TRY(writer.write(piece));
    if (auto now = Clock::now(); now - last >= o.progress_interval) {
      last = now;
      progress(d.digest.substr(0, 19) + ": " + megabytes(writer.written()) + " of " +
               megabytes(d.size));
    }
    return {};
  };
  auto res = s.call(s.request(bhttp::verb::get, s.repo_path() + "/blobs/" + d.digest),
                    static_cast<std::uint64_t>(d.size), &sink, /*follow_redirects=*/true);
  if (!res.ok()) {
    if (res.error().code() == ErrorCode::kPayloadTooLarge) {
      return invalid_argument("blob " + d.digest + " is larger than the " + std::to_string(d.size) +
                              " bytes its manifest gives");
    }
    return res.error().with_context("blob " + d.digest);
  }
  if (res->status != 200) return status_error(*res, "GET blob " + d.digest);
  if (auto st = writer.commit(); !st.ok()) return st.error().with_context("blob " + d.digest);
  progress("done " + d.digest + " (" + std::to_string(d.size) + " bytes)");
  return {};
}

Status fetch_blob(Session& s, Store& store, const Descriptor& d, const RegistryOptions& o,
                  const std::function<void(const std::string&)>& progress) {
  ABX_ASSIGN_OR_RETURN(auto writer, store.blob_writer(d.digest, d.size));
  return fetch_into(s, writer, d, o, progress, nullptr);
}

// The layers, up to o.parallel_layers at a time, each extracted while it downloads (a
// LayerWriter). The first failure stops the others and is the one returned; every layer that
// failed or was abandoned leaves nothing behind.
Status fetch_layers(Session& first, Store& store, const std::vector<Descriptor>& layers,
                    const RegistryOptions& o,
                    const std::function<void(const std::string&)>& progress) {
  if (layers.empty()) return {};
  const std::size_t workers = std::min<std::size_t>(layers.size(), std::max(1, o.parallel_layers));
  std::vector<Session> sessions;
  for (std::size_t i = 1; i < workers; ++i) {
    ABX_ASSIGN_OR_RETURN(auto s, first.fork());
    sessions.push_back(std::move(s));
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::optional<Error> failure;
  auto work = [&](Session& s) {
    for (std::size_t i; !stop.load() && (i = next++) < layers.size();) {
      const Descriptor& d = layers[i];
      Status st = [&]() -> Status {
        ABX_ASSIGN_OR_RETURN(auto writer, store.layer_writer(d.digest, d.size));
        return fetch_into(s, writer, d, o, progress, &stop);
      }();
      if (!st.ok()) {
        std::lock_guard l(mu);
        if (!failure) failure = st.error();  // later ones were abandoned because of it
        stop = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (auto& s : sessions) threads.emplace_back([&work, &s] { work(s); });
  work(first);
  for (auto& t : threads) t.join();
  if (failure) return *failure;
  return {};
}

Result<Image> pull_impl(Store& store, const Reference& ref, const RegistryOptions& o) {
  ABX_ASSIGN_OR_RETURN(auto session, Session::open(ref, o, "pull"));
  ABX_ASSIGN_OR_RETURN(auto f, get_manifest(session, ref.digest.empty() ? ref.tag : ref.digest, o));
  ABX_ASSIGN_OR_RETURN(auto kind, manifest_kind(f.bytes, f.content_type));
  if (kind == ManifestKind::kIndex) {
    ABX_ASSIGN_OR_RETURN(auto index, parse_index(f.bytes, f.content_type));
    ABX_ASSIGN_OR_RETURN(auto chosen, select_platform(index, "linux", "amd64"));
    ABX_ASSIGN_OR_RETURN(f, get_manifest(session, chosen.digest, o));
  }
  ABX_ASSIGN_OR_RETURN(auto m, parse_manifest(f.bytes, f.content_type));
  // Refuse what we could not unpack before fetching any of it.
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    if (auto c = layer_compression(m.layers[i].media_type); !c.ok()) {
      return Error(ErrorCode::kUnsupportedMediaType,
                   "layer " + std::to_string(i) + ": " + c.error().message());
    }
  }
  // Progress lines come from several threads: one at a time to the caller.
  std::mutex progress_mu;
  std::function<void(const std::string&)> progress = [&](const std::string& line) {
    if (!o.progress) return;
    std::lock_guard l(progress_mu);
    o.progress(line);
  };
  std::vector<Descriptor> missing;  // layers to fetch, each once
  std::set<std::string> seen;
  for (const auto& d : m.layers) {
    if (!seen.insert(d.digest).second) continue;
    if (store.has_blob(d.digest)) {
      progress("have " + d.digest);  // add_image extracts it if it is not yet
      continue;
    }
    missing.push_back(d);
  }
  if (store.has_blob(m.config.digest)) {
    progress("have " + m.config.digest);
  } else {
    ABX_TRY(fetch_blob(session, store, m.config, o, progress));
  }
  ABX_TRY(fetch_layers(session, store, missing, o, progress));
  ABX_ASSIGN_OR_RETURN(auto stored, store.put_blob(f.bytes));
  if (stored != f.digest) return internal_error("the store filed the manifest under " + stored);
  ABX_ASSIGN_OR_RETURN(auto image, store.add_image(f.digest, o.progress));
  ABX_TRY(store.tag(ref.str(), f.digest));
  return image;
}

Status push_blob(Session& s, Store& store, const Descriptor& d, const RegistryOptions& o) {
  auto progress = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };
  ABX_ASSIGN_OR_RETURN(auto head,
                       s.call(s.request(bhttp::verb::head, s.repo_path() + "/blobs/" + d.digest),
                              kSmallBody, nullptr, /*follow_redirects=*/true));
  if (head.status == 200) {
    progress("exists " + d.digest);
    return {};
  }
  if (head.status != 404) return status_error(head, "HEAD blob " + d.digest);
  if (!store.has_blob(d.digest)) return not_found("blob " + d.digest + " is not in the store");
  progress("pushing " + d.digest + " (" + std::to_string(d.size) + " bytes)");
  ABX_ASSIGN_OR_RETURN(
      auto start,
      s.call(s.request(bhttp::verb::post, s.repo_path() + "/blobs/uploads/"), kSmallBody));
  if (start.status != 202) return status_error(start, "start upload of " + d.digest);
  std::string location = header(start, bhttp::field::location);
  if (location.empty()) return unavailable("upload of " + d.digest + ": no Location");
  auto put = s.request(bhttp::verb::put, "/");
  ABX_ASSIGN_OR_RETURN(put.url, detail::resolve_url(put.url, location));
  put.url.target += (put.url.target.find('?') == std::string::npos ? "?" : "&") +
                    std::string("digest=") + percent_encode(d.digest);
  put.headers.emplace_back("Content-Type", "application/octet-stream");
  put.body_file = store.blob_path(d.digest);
  ABX_ASSIGN_OR_RETURN(auto done, s.call(put, kSmallBody));
  if (done.status != 201) return status_error(done, "upload of " + d.digest);
  progress("done " + d.digest);
  return {};
}

Status push_impl(Store& store, std::string_view manifest_digest, const Reference& dest,
                 const RegistryOptions& o) {
  if (!valid_digest(manifest_digest)) {
    return invalid_argument("not a manifest digest: '" + std::string(manifest_digest) + "'");
  }
  if (!dest.digest.empty() && dest.digest != manifest_digest) {
    return invalid_argument("the destination names digest " + dest.digest + ", the image is " +
                            std::string(manifest_digest));
  }
  ABX_ASSIGN_OR_RETURN(auto bytes, store.read_blob(manifest_digest, o.max_manifest_bytes));
  ABX_ASSIGN_OR_RETURN(auto kind, manifest_kind(bytes));
  if (kind == ManifestKind::kIndex) {
    return Error(ErrorCode::kUnimplemented, "pushing an image index is not supported");
  }
  // Whatever layer media types the manifest names are copied as they are.
  ABX_ASSIGN_OR_RETURN(auto m, parse_manifest(bytes));
  std::vector<Descriptor> blobs{m.config};
  blobs.insert(blobs.end(), m.layers.begin(), m.layers.end());
  ABX_ASSIGN_OR_RETURN(auto session, Session::open(dest, o, "pull,push"));
  for (const auto& d : blobs) ABX_TRY(push_blob(session, store, d, o));
  std::string name = dest.digest.empty() ? dest.tag : dest.digest;
  auto req = session.request(bhttp::verb::put, session.repo_path() + "/manifests/" + name);
  req.headers.emplace_back("Content-Type", m.media_type);
  req.body = std::move(bytes);
  ABX_ASSIGN_OR_RETURN(auto res, session.call(req, kSmallBody));
  if (res.status != 201) return status_error(res, "PUT manifest " + name);
  auto it = res.headers.find("Docker-Content-Digest");
  if (it != res.headers.end() && it->value() != manifest_digest) {
    return internal_error("the registry filed the manifest under " + std::string(it->value()) +
                          ", expected " + std::string(manifest_digest));
  }
  return {};
}

}  // namespace

Result<Image> pull(Store& store, const Reference& ref, const RegistryOptions& options) {
  if (ref.transport != Transport::kRegistry) {
    return invalid_argument("pull " + ref.str() + ": not a registry reference (use Store::import)");
  }
  auto r = pull_impl(store, ref, options);
  if (!r.ok()) return r.error().with_context("pull " + ref.str());
  return r;
}

Status push(Store& store, std::string_view manifest_digest, const Reference& dest,
            const RegistryOptions& options) {
  if (dest.transport != Transport::kRegistry) {
    return invalid_argument("push to " + dest.str() + ": not a registry reference");
  }
  auto st = push_impl(store, manifest_digest, dest, options);
  if (!st.ok()) return st.error().with_context("push to " + dest.str());
  return st;
}

}  // namespace abx::image
