#include <cxxabi.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <ctime>
#include <memory>
#include <typeinfo>

#include "abx/base/log.h"
#include "abx/registry/coerce.h"
#include "abx/server/server.h"
#include "abx/token/token.h"

namespace abx::server {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Responder;
using http::Response;

namespace {

constexpr std::string_view kCommandsPrefix = "/commands/";

// Who is calling: everyone (full token or no auth) or a scoped set of commands.
struct Caller {
  bool scoped = false;
  std::vector<std::string> commands;
  bool may_run(std::string_view name) const {
    if (!scoped) return true;
    for (const auto& c : commands) {
      if (c == name) return true;
    }
    return false;
  }
};

// The class name of the exception in flight, demangled ("std::runtime_error").
std::string current_exception_type() {
  const std::type_info* t = abi::__cxa_current_exception_type();
  if (t == nullptr) return "unknown";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(t->name(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(t->name());
}

std::string_view path_of(std::string_view target) {
  auto q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

bool is_json_content_type(std::string_view ct) {
  auto semi = ct.find(';');
  std::string_view mime = ct.substr(0, semi);
  while (!mime.empty() && mime.back() == ' ') mime.remove_suffix(1);
  if (boost::beast::iequals(mime, "application/json")) return true;
  // application/<something>+json
  return mime.size() > 17 && boost::beast::iequals(mime.substr(0, 12), "application/") &&
         boost::beast::iequals(mime.substr(mime.size() - 5), "+json");
}

}  // namespace

struct CommandServer::Impl {
  registry::CommandRegistry* registry = nullptr;
  CommandServerOptions opt;
  Logger log{"server"};
  std::unique_ptr<asio::thread_pool> pool;
  std::unique_ptr<http::Server> http;
  std::atomic<bool> draining{false};

  void handle(Request&& req, Responder respond);
  Result<Caller> authenticate(const Request& req) const;
  void call(const registry::RegisteredCommand& cmd, json::object kwargs, unsigned version,
            bool keep_alive, Responder respond);
};

Result<Caller> CommandServer::Impl::authenticate(const Request& req) const {
  if (opt.no_auth) return Caller{};
  std::string_view presented;
  std::size_t count = 0;
  for (const auto& f : req) {
    if (boost::beast::iequals(f.name_string(), "x-access-token")) {
      presented = f.value();
      ++count;
    } else if (f.name() == bhttp::field::authorization) {
      std::string_view v = f.value();
      if (v.size() > 7 && boost::beast::iequals(v.substr(0, 7), "bearer ")) {
        presented = v.substr(7);
        ++count;
      }
    }
  }
  if (count > 1) return invalid_argument("more than one access token in the request");
  if (count == 0 || presented.empty()) {
    return Error(ErrorCode::kUnauthenticated,
                 "missing access token (send it in X-Access-Token or Authorization: Bearer)");
  }
  if (presented.size() > token::kMaxTokenBytes) {
    return Error(ErrorCode::kUnauthenticated, "invalid access token");
  }
  if (token::looks_scoped(presented)) {
    auto claims = token::verify_scoped(*opt.access_token, presented,
                                       static_cast<std::int64_t>(std::time(nullptr)));
    if (!claims.ok()) return claims.error();
    return Caller{true, std::move(claims->commands)};
  }
  if (!token::constant_time_equal(presented, *opt.access_token)) {
    return Error(ErrorCode::kUnauthenticated, "invalid access token");
  }
  return Caller{};
}

void CommandServer::Impl::handle(Request&& req, Responder respond) {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  auto fail = [&](const Error& e) { respond(http::error_response(e, v, ka)); };
  std::string_view path = path_of(req.target());

  if (path == "/health") {
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      Response r = http::error_response(
          Error(ErrorCode::kMethodNotAllowed, "use GET /health"), v, ka);
      r.set(bhttp::field::allow, "GET, HEAD");
      return respond(std::move(r));
    }
    return respond(http::json_response(200, json::object{{"status", "ok"}}, v, ka));
  }
  const bool list = path == "/commands" || path == "/commands/";
  const bool run = !list && path.substr(0, kCommandsPrefix.size()) == kCommandsPrefix;
  if (!list && !run) return fail(not_found("no route for " + std::string(path)));
  if (draining.load()) return fail(unavailable("the command server is shutting down"));

  auto caller = authenticate(req);
  if (!caller.ok()) return fail(caller.error());

  if (list) {
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      Response r = http::error_response(
          Error(ErrorCode::kMethodNotAllowed, "use GET /commands to list commands"), v, ka);
      r.set(bhttp::field::allow, "GET, HEAD");
      return respond(std::move(r));
    }
    json::array out;
    for (const auto* cmd : registry->list_all()) {
      if (caller->may_run(cmd->name)) out.push_back(registry::describe(*cmd));
    }
    return respond(http::json_response(200, json::object{{"commands", std::move(out)}}, v, ka));
  }

  std::string_view name = path.substr(kCommandsPrefix.size());
  const registry::RegisteredCommand* cmd =
      registry::valid_command_name(name) ? registry->get(name) : nullptr;
  // Out of scope looks exactly like absent: discovery never shows more than execution allows.
  if (cmd == nullptr || !caller->may_run(name)) {
    std::string shown = name.size() > 64 ? std::string(name.substr(0, 64)) + "..." : std::string(name);
    return fail(not_found("unknown command '" + shown + "'"));
  }
  if (req.method() != bhttp::verb::post) {
    Response r = http::error_response(
        Error(ErrorCode::kMethodNotAllowed, "use POST /commands/" + cmd->name + " to run it"), v,
        ka);
    r.set(bhttp::field::allow, "POST");
    return respond(std::move(r));
  }
  auto ct = req[bhttp::field::content_type];
  bool empty_body = req.body().find_first_not_of(" \t\r\n") == std::string::npos;
  if (!(ct.empty() && empty_body) && !is_json_content_type(ct)) {
    return fail(Error(ErrorCode::kUnsupportedMediaType,
                      "send the arguments as JSON (Content-Type: application/json), got '" +
                          std::string(ct) + "'"));
  }
  auto kwargs = registry::parse_kwargs(*cmd, req.body(), opt.json);
  if (!kwargs.ok()) return fail(kwargs.error());
  call(*cmd, std::move(*kwargs), v, ka, std::move(respond));
}

void CommandServer::Impl::call(const registry::RegisteredCommand& cmd, json::object kwargs,
                               unsigned version, bool keep_alive, Responder respond) {
  // One call's shared state: whoever flips `done` first (the worker or the deadline) answers.
  struct Call {
    Responder respond;
    std::atomic<bool> done{false};
    std::optional<asio::steady_timer> timer;
    explicit Call(Responder r) : respond(std::move(r)) {}
  };
  auto c = std::make_shared<Call>(std::move(respond));
  if (opt.call_timeout.count() > 0) {
    c->timer.emplace(c->respond.executor(), opt.call_timeout);
    c->timer->async_wait([c, version, keep_alive, name = cmd.name,
                          ms = opt.call_timeout.count(), this](boost::system::error_code ec) {
      if (ec || c->done.exchange(true)) return;
      log.warn("command '" + name + "' exceeded its deadline of " + std::to_string(ms) + " ms");
      c->respond(http::error_response(
          Error(ErrorCode::kDeadlineExceeded,
                "command '" + name + "' did not finish within " + std::to_string(ms) + " ms"),
          version, keep_alive));
    });
  }
  asio::post(*pool, [c, &cmd, kwargs = std::move(kwargs), version, keep_alive, this] {
    Response res;
    try {
      json::value result = cmd.fn(kwargs);
      res = http::json_response(200, json::object{{"result", std::move(result)}}, version,
                                keep_alive);
    } catch (const std::exception& e) {
      std::string type = current_exception_type();
      log.info("command '" + cmd.name + "' threw " + type + ": " + e.what());
      res = http::error_response(Error(ErrorCode::kInternal, e.what(), type), version, keep_alive);
    } catch (...) {
      std::string type = current_exception_type();
      res = http::error_response(
          Error(ErrorCode::kInternal, "command '" + cmd.name + "' threw a non-standard exception",
                type),
          version, keep_alive);
    }
    if (c->done.exchange(true)) return;  // the deadline answered already
    if (c->timer) {
      asio::post(c->respond.executor(), [c] { c->timer->cancel(); });
    }
    c->respond(std::move(res));
  });
}

CommandServer::CommandServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CommandServer::~CommandServer() {
  impl_->draining.store(true);
  impl_->http->shutdown(std::chrono::milliseconds(0));
  // Workers may still hold Responders; they must finish before the HTTP server goes away.
  impl_->pool->join();
}

Result<std::unique_ptr<CommandServer>> CommandServer::start(registry::CommandRegistry& reg,
                                                            CommandServerOptions options) {
  auto errors = reg.errors();
  if (!errors.empty()) {
    std::string msg = "command registration failed:";
    for (const auto& e : errors) msg += "\n  " + e;
    return Error(ErrorCode::kFailedPrecondition, msg);
  }
  if (!options.no_auth && (!options.access_token || options.access_token->empty())) {
    return Error(ErrorCode::kFailedPrecondition,
                 "no access token: set ABX_ACCESS_TOKEN or --token-file (or pass --no-auth to "
                 "serve without authentication)");
  }
  reg.freeze();
  auto impl = std::make_unique<Impl>();
  impl->registry = &reg;
  impl->opt = std::move(options);
  impl->pool = std::make_unique<asio::thread_pool>(
      static_cast<std::size_t>(std::max(1, impl->opt.workers)));
  http::ServerOptions hopt;
  hopt.host = impl->opt.host;
  hopt.port = impl->opt.port;
  hopt.io_threads = impl->opt.io_threads;
  hopt.limits = impl->opt.limits;
  hopt.server_header = "abx-server";
  Impl* raw = impl.get();
  auto http = http::Server::start(hopt, [raw](Request&& req, Responder respond) {
    raw->handle(std::move(req), std::move(respond));
  });
  if (!http.ok()) return http.error();
  impl->http = std::move(*http);
  if (impl->opt.no_auth) {
    impl->log.warn("serving WITHOUT authentication (--no-auth): anyone who can reach " +
                   impl->opt.host + ":" + std::to_string(impl->http->port()) +
                   " can run every command");
  }
  return std::unique_ptr<CommandServer>(new CommandServer(std::move(impl)));
}

std::uint16_t CommandServer::port() const { return impl_->http->port(); }
const std::string& CommandServer::host() const { return impl_->http->host(); }

void CommandServer::shutdown(std::chrono::milliseconds drain) {
  impl_->draining.store(true);
  impl_->http->shutdown(drain);
}

}  // namespace abx::server
