#include <cxxabi.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <typeinfo>

#include "abx/base/log.h"
#include "abx/base/try.h"
#include "abx/mcp/stdio.h"
#include "abx/registry/coerce.h"
#include "abx/registry/failure.h"
#include "abx/server/server.h"
#include "abx/token/token.h"
#include "mcp_endpoint.h"
#include "router.h"

namespace abx::server {

namespace {

// The class name of the exception in flight, demangled ("std::runtime_error").
std::string current_exception_type() {
  const std::type_info* t = abi::__cxa_current_exception_type();
  if (t == nullptr) return "unknown";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(t->name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(t->name());
}

}  // namespace

namespace asio = boost::asio;
namespace json = boost::json;
using http::Request;
using http::Responder;
using http::Response;

struct CommandServer::Impl {
  registry::CommandRegistry* registry = nullptr;
  CommandServerOptions opt;
  Logger log{"server"};
  std::unique_ptr<asio::thread_pool> pool;
  std::unique_ptr<http::Server> http;
  std::atomic<bool> draining{false};

  std::unique_ptr<Router> router;
  std::unique_ptr<McpEndpoint> mcp;

  void handle(Request&& req, Responder respond);
  // The one path that runs a command, for POST /commands/{name} and MCP tools/call alike: an
  // inline command (Execution::kInline) at once on the calling thread; any other on the worker
  // pool, with the call deadline armed on `ex`. `done` is called exactly once, with the return
  // value, kInternal typed with the exception's class, or kDeadlineExceeded.
  void run(const registry::RegisteredCommand& cmd, json::object kwargs, asio::any_io_executor ex,
           std::function<void(Result<json::value>)> done);
  Result<json::value> invoke(const registry::RegisteredCommand& cmd, const json::object& kwargs);
  Result<json::value> invoke_inline(const registry::RegisteredCommand& cmd,
                                    const json::object& kwargs);

  static constexpr std::chrono::milliseconds kInlineWarnAfter{10};
  std::mutex warned_mu;
  std::set<std::string> warned_inline;  // inline commands already reported as slow
};

namespace {

// 200 {"result": ...}, or the error mapping. The envelope is written around the serialised
// value rather than built as a json::object first (one object and its allocation per call less).
Response result_response(const Result<json::value>& result, unsigned version, bool keep_alive) {
  if (!result.ok()) return http::error_response(result.error(), version, keep_alive);
  Response res{boost::beast::http::status::ok, version};
  res.set(boost::beast::http::field::content_type, "application/json");
  std::string& body = res.body();
  body = "{\"result\":";
  body += json::serialize(*result);
  body += '}';
  res.keep_alive(keep_alive);
  return res;
}

}  // namespace

void CommandServer::Impl::handle(Request&& req, Responder respond) {
  Routed r = router->route(req, draining.load());
  if (r.immediate) return respond(std::move(*r.immediate));
  if (r.mcp) return mcp->handle(req, std::move(r.caller), std::move(respond));
  const unsigned version = req.version();
  const bool keep_alive = req.keep_alive();
  if (r.command->execution == registry::Execution::kInline) {
    return respond(result_response(invoke_inline(*r.command, r.kwargs), version, keep_alive));
  }
  auto ex = respond.executor();
  run(*r.command, std::move(r.kwargs), std::move(ex),
      [respond = std::move(respond), version, keep_alive](Result<json::value> result) {
        respond(result_response(result, version, keep_alive));
      });
}

// Calls the command's body, turning an exception into kInternal typed with its class.
Result<json::value> CommandServer::Impl::invoke(const registry::RegisteredCommand& cmd,
                                                const json::object& kwargs) {
  try {
    return cmd.fn(kwargs);
  } catch (const registry::CommandFailure& e) {
    return e.error();  // the command chose its status and type (e.g. a Python exception's class)
  } catch (const std::exception& e) {
    std::string type = current_exception_type();
    log.info("command '" + cmd.name + "' threw " + type + ": " + e.what());
    return Error(ErrorCode::kInternal, e.what(), type);
  } catch (...) {
    return Error(ErrorCode::kInternal, "command '" + cmd.name + "' threw a non-standard exception",
                 current_exception_type());
  }
}

// An inline command runs on the calling (I/O) thread: no hop, no timer. Its duration is taken
// anyway (two clock reads) so that a command wrongly registered inline is reported once.
Result<json::value> CommandServer::Impl::invoke_inline(const registry::RegisteredCommand& cmd,
                                                       const json::object& kwargs) {
  auto t0 = std::chrono::steady_clock::now();
  Result<json::value> out = invoke(cmd, kwargs);
  auto took = std::chrono::steady_clock::now() - t0;
  if (took > kInlineWarnAfter) {
    std::lock_guard lock(warned_mu);
    if (warned_inline.insert(cmd.name).second) {
      log.warn("inline command '" + cmd.name + "' held an I/O thread for " +
               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
               " ms; register it without run_inline/ABX_INLINE so it runs on the worker pool");
    }
  }
  return out;
}

void CommandServer::Impl::run(const registry::RegisteredCommand& cmd, json::object kwargs,
                              asio::any_io_executor ex,
                              std::function<void(Result<json::value>)> done) {
  if (cmd.execution == registry::Execution::kInline) return done(invoke_inline(cmd, kwargs));
  // One call's shared state: whoever flips `done` first (the worker or the deadline) answers.
  struct Call {
    std::function<void(Result<json::value>)> done;
    std::atomic<bool> finished{false};
    std::optional<asio::steady_timer> timer;
    asio::any_io_executor ex;
  };
  auto c = std::make_shared<Call>();
  c->done = std::move(done);
  c->ex = std::move(ex);
  if (opt.call_timeout.count() > 0) {
    c->timer.emplace(c->ex, opt.call_timeout);
    c->timer->async_wait([c, name = cmd.name, ms = opt.call_timeout.count(),
                          this](boost::system::error_code ec) {
      if (ec || c->finished.exchange(true)) return;
      log.warn("command '" + name + "' exceeded its deadline of " + std::to_string(ms) + " ms");
      c->done(Error(ErrorCode::kDeadlineExceeded,
                    "command '" + name + "' did not finish within " + std::to_string(ms) + " ms"));
    });
  }
  asio::post(*pool, [c, &cmd, kwargs = std::move(kwargs), this] {
    Result<json::value> out = invoke(cmd, kwargs);
    if (c->finished.exchange(true)) return;  // the deadline answered already
    if (c->timer) {
      asio::post(c->ex, [c] { c->timer->cancel(); });
    }
    c->done(std::move(out));
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
  return start(reg, std::move(options), [] { return Status{}; });
}

Result<std::unique_ptr<CommandServer>> CommandServer::start(
    registry::CommandRegistry& reg, CommandServerOptions options,
    const std::function<Status()>& before_serving) {
  if (!options.no_auth && (!options.access_token || options.access_token->empty())) {
    return Error(ErrorCode::kFailedPrecondition,
                 "no access token: set ABX_ACCESS_TOKEN or --token-file (or pass --no-auth to "
                 "serve without authentication)");
  }
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  impl->pool =
      std::make_unique<asio::thread_pool>(static_cast<std::size_t>(std::max(1, impl->opt.workers)));
  ABX_TRY(before_serving());
  auto errors = reg.errors();
  if (!errors.empty()) {
    std::string msg = "command registration failed:";
    for (const auto& e : errors) msg += "\n  " + e;
    return Error(ErrorCode::kFailedPrecondition, msg);
  }
  reg.freeze();
  impl->registry = &reg;
  impl->router = std::make_unique<Router>(reg, impl->opt);
  Impl* self = impl.get();
  impl->mcp = std::make_unique<McpEndpoint>(
      reg, impl->opt,
      [self](const registry::RegisteredCommand& cmd, json::object kwargs, asio::any_io_executor ex,
             std::function<void(Result<json::value>)> done) {
        self->run(cmd, std::move(kwargs), std::move(ex), std::move(done));
      });
  http::ServerOptions hopt = http::listener_options(impl->opt, "abx-server");
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

Status serve_mcp_stdio(registry::CommandRegistry& reg, CommandServerOptions options, int in_fd,
                       int out_fd) {
  auto errors = reg.errors();
  if (!errors.empty()) {
    std::string msg = "command registration failed:";
    for (const auto& e : errors) msg += "\n  " + e;
    return Error(ErrorCode::kFailedPrecondition, msg);
  }
  reg.freeze();
  CommandServer::Impl impl;
  impl.registry = &reg;
  impl.opt = std::move(options);
  impl.pool =
      std::make_unique<asio::thread_pool>(static_cast<std::size_t>(std::max(1, impl.opt.workers)));
  // Deadlines need a thread of their own: the workers may all be busy with slow commands.
  asio::io_context timers;
  auto guard = asio::make_work_guard(timers);
  std::thread timer_thread([&] { timers.run(); });
  std::vector<mcp::Tool> tools = tools_of(reg);
  CommandRunner run = [&impl](const registry::RegisteredCommand& cmd, json::object kwargs,
                              asio::any_io_executor ex,
                              std::function<void(Result<json::value>)> done) {
    impl.run(cmd, std::move(kwargs), std::move(ex), std::move(done));
  };
  CallerTools provider(reg, tools, Caller{}, timers.get_executor(), run);
  mcp::Dispatcher dispatcher(command_server_info(),
                             mcp::DecodeLimits{impl.opt.limits.max_body_bytes, impl.opt.json});
  Status st = mcp::serve_stdio(dispatcher, provider, in_fd, out_fd);
  impl.pool->join();
  guard.reset();
  timers.stop();
  timer_thread.join();
  return st;
}

std::uint16_t CommandServer::port() const { return impl_->http->port(); }
const std::string& CommandServer::host() const { return impl_->http->host(); }

void CommandServer::shutdown(std::chrono::milliseconds drain) {
  impl_->draining.store(true);
  impl_->http->shutdown(drain);
}

}  // namespace abx::server
