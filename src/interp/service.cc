// abx-interp's HTTP service (service.h): contexts, each a lazily started Jupyter kernel, and
// E2B's streamed /execute on top of kernel.h.
//
// Threads: the HTTP server's I/O thread parses requests and answers the quick ones; anything
// that may block (starting, restarting or shutting down a kernel) runs on a small worker pool,
// one strand per context so a context's operations happen in order; kernel output arrives on
// the kernel's own thread and goes straight into the response's StreamWriter (thread-safe).
#include "abx/interp/service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

#include "abx/base/ascii.h"
#include "abx/base/json.h"
#include "abx/base/log.h"
#include "abx/interp/kernel.h"
#include "abx/token/token.h"

extern char** environ;

namespace abx::interp {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
namespace asio = boost::asio;

namespace {

constexpr std::size_t kMaxCodeBytes = 8 * 1024 * 1024;
constexpr std::size_t kMaxEnvVars = 256;

// ---- E2B events -------------------------------------------------------------------------

// Jupyter mime bundle -> E2B result fields (E2B's Result model); what no field names goes
// into `extra`.
json::object result_event(const json::object& data, bool main) {
  static const std::pair<std::string_view, std::string_view> kFields[] = {
      {"text/plain", "text"},        {"text/html", "html"},
      {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
      {"image/png", "png"},          {"image/jpeg", "jpeg"},
      {"application/pdf", "pdf"},    {"text/latex", "latex"},
      {"application/json", "json"},  {"application/javascript", "javascript"},
      {"e2b/data", "data"},          {"e2b/chart", "chart"},
  };
  json::object out{{"type", "result"}};
  json::object extra;
  for (const auto& kv : data) {
    std::string_view mime = kv.key();
    std::string_view field;
    for (const auto& [m, f] : kFields) {
      if (m == mime) field = f;
    }
    if (field.empty()) {
      extra[mime] = kv.value();
    } else if (field == "text" && kv.value().is_string()) {
      // E2B shows a string result without the quotes of its repr: 'abc' -> abc.
      std::string_view t = kv.value().get_string();
      if (t.size() >= 2 &&
          ((t.front() == '\'' && t.back() == '\'') || (t.front() == '"' && t.back() == '"'))) {
        t = t.substr(1, t.size() - 2);
      }
      out["text"] = t;
    } else {
      out[field] = kv.value();
    }
  }
  out["extra"] = std::move(extra);
  out["is_main_result"] = main;
  return out;
}

std::string join_traceback(const json::value* tb) {
  std::string out;
  if (tb == nullptr || !tb->is_array()) return out;
  for (const auto& line : tb->get_array()) {
    if (!line.is_string()) continue;
    if (!out.empty()) out += '\n';
    out += line.get_string();
  }
  return out;
}

}  // namespace

// A kernel's message fields are read leniently, as the Jupyter protocol requires (interp/wire.h).
std::optional<json::object> e2b_event(const Message& msg, bool& errored) {
  std::string_view type = msg.msg_type();
  const json::object& c = msg.content;
  if (type == "stream") {
    std::string_view name = json_string_or_empty(c, "name");
    if (name != "stdout" && name != "stderr") return std::nullopt;
    return json::object{{"type", name},
                        {"text", json_string_or_empty(c, "text")},
                        {"timestamp", json_string_or_empty(msg.header, "date")}};
  }
  if (type == "execute_input") {
    const json::value* n = c.if_contains("execution_count");
    if (n == nullptr || !n->is_int64()) return std::nullopt;
    return json::object{{"type", "number_of_executions"}, {"execution_count", n->get_int64()}};
  }
  if (type == "execute_result" || type == "display_data") {
    const json::value* data = c.if_contains("data");
    if (data == nullptr || !data->is_object()) return std::nullopt;
    return result_event(data->get_object(), type == "execute_result");
  }
  if (type == "error") {
    if (errored) return std::nullopt;
    errored = true;
    return json::object{{"type", "error"},
                        {"name", json_string_or_empty(c, "ename")},
                        {"value", json_string_or_empty(c, "evalue")},
                        {"traceback", join_traceback(c.if_contains("traceback"))}};
  }
  return std::nullopt;
}

namespace {

std::string b64(std::string_view s) {
  std::string out(boost::beast::detail::base64::encoded_size(s.size()), '\0');
  out.resize(boost::beast::detail::base64::encode(out.data(), s.data(), s.size()));
  return out;
}

// Python that applies `set` to os.environ and removes `unset`, with every name and value carried
// as base64 of JSON: nothing the caller sends is ever parsed as Python.
std::string env_code(const json::object& set, const json::array& unset) {
  std::string code =
      "__import__('os').environ.update(__import__('json').loads(__import__('base64')."
      "b64decode('" +
      b64(json::serialize(set)) + "')))";
  if (!unset.empty()) {
    code +=
        "\n[__import__('os').environ.pop(k, None) for k in __import__('json').loads("
        "__import__('base64').b64decode('" +
        b64(json::serialize(unset)) + "'))]";
  }
  return code;
}

bool valid_env_name(std::string_view k) {
  if (k.empty() || k.size() > 1024) return false;
  for (char c : k) {
    if (c == '=' || c == '\0') return false;
  }
  return true;
}

http::Response text_response(unsigned status, std::string body, unsigned version) {
  http::Response res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

http::Response error_text(const Error& e, unsigned version) {
  return text_response(http::http_status(e.code()), e.message(), version);
}

std::string normalize_language(std::string_view lang) {
  std::string out;
  for (char c : lang) {
    if (!ascii_space(c)) out += ascii_lower(c);
  }
  if (out.empty() || out == "python3") return "python";
  return out;
}

Status check_language(const std::string& lang) {
  if (lang == "python") return {};
  return invalid_argument("language '" + lang +
                          "' is not supported: this sandbox's kernels run python (run shell "
                          "commands through the process API, e.g. sandbox.commands.run)");
}

}  // namespace

// ---- contexts -----------------------------------------------------------------------------

struct Context {
  std::string id, language, cwd;
  asio::strand<asio::thread_pool::executor_type> strand;
  std::shared_ptr<Kernel> kernel;  // started on first use; touched on the strand only
  bool removed = false;            // on the strand only

  Context(std::string i, std::string l, std::string c, asio::thread_pool& pool)
      : id(std::move(i)), language(std::move(l)), cwd(std::move(c)), strand(pool.get_executor()) {}
  json::object to_json() const { return {{"id", id}, {"language", language}, {"cwd", cwd}}; }
};

// One /execute: its stream, whether its code is running, and what was sent.
struct ExecuteStream : std::enable_shared_from_this<ExecuteStream> {
  std::shared_ptr<http::StreamWriter> out;
  std::shared_ptr<Kernel> kernel;
  std::unique_ptr<asio::steady_timer> keepalive;
  std::atomic<bool> running{false};
  std::atomic<bool> done{false};
  std::atomic<bool> wrote{false};  // since the last keepalive tick
  std::atomic<bool> interrupted{false};
  bool errored = false;  // kernel thread only

  void send(const json::object& ev) {
    wrote = true;
    if (!out->write(json::serialize(ev) + "\n")) client_gone();
  }
  // The client left (timeout or abort): stop the code it no longer waits for.
  void client_gone() {
    if (running && !done && !interrupted.exchange(true) && kernel) (void)kernel->interrupt();
  }
  void tick(std::chrono::milliseconds every) {
    keepalive->expires_after(every);
    keepalive->async_wait([self = shared_from_this(), every](boost::system::error_code ec) {
      if (ec || self->done) return;
      if (!self->wrote.exchange(false)) {
        if (!self->out->write("{\"type\":\"keepalive\"}\n")) self->client_gone();
      } else if (self->out->closed()) {
        self->client_gone();
      }
      self->tick(every);
    });
  }
};

struct Service::Impl {
  ServiceOptions opt;
  Logger log{"interp"};
  asio::thread_pool pool{2};
  std::unique_ptr<http::Server> server;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Context>, std::less<>> contexts;  // by id
  std::map<std::string, std::string, std::less<>> defaults;               // language -> id
  std::vector<std::string> base_env;
  std::atomic<bool> stopping{false};

  std::shared_ptr<Context> find(std::string_view id) {
    std::lock_guard lock(mu);
    auto it = contexts.find(id);
    return it == contexts.end() ? nullptr : it->second;
  }

  Result<std::shared_ptr<Context>> add_context(const std::string& language, std::string cwd) {
    std::lock_guard lock(mu);
    if (contexts.size() >= opt.max_contexts) {
      return Error(ErrorCode::kResourceExhausted,
                   "too many contexts (" + std::to_string(opt.max_contexts) +
                       "): remove one first (DELETE /contexts/{id})");
    }
    auto ctx = std::make_shared<Context>(token::random_uuid(), language, std::move(cwd), pool);
    contexts[ctx->id] = ctx;
    return ctx;
  }

  // The default context of a language, made on first use (E2B: one per language).
  Result<std::shared_ptr<Context>> default_context(const std::string& language) {
    {
      std::lock_guard lock(mu);
      auto d = defaults.find(language);
      if (d != defaults.end()) {
        auto it = contexts.find(d->second);
        if (it != contexts.end()) return it->second;
      }
    }
    auto ctx = add_context(language, opt.default_cwd);
    if (!ctx.ok()) return ctx;
    std::lock_guard lock(mu);
    auto d = defaults.find(language);
    if (d != defaults.end() && contexts.count(d->second)) {  // another request won the race
      contexts.erase((*ctx)->id);
      return contexts[d->second];
    }
    defaults[language] = (*ctx)->id;
    return ctx;
  }

  // On the context's strand: the running kernel, started (or restarted after a crash) if needed.
  Result<std::shared_ptr<Kernel>> ensure_kernel(Context& ctx) {
    if (ctx.removed) return not_found("Context " + ctx.id + " not found");
    if (ctx.kernel && ctx.kernel->alive()) return ctx.kernel;
    if (ctx.kernel) {
      log.warn("context " + ctx.id + ": kernel exited; starting a new one (its state is lost)");
      ctx.kernel->shutdown();
      ctx.kernel.reset();
    }
    KernelOptions ko;
    ko.argv = opt.python_argv;
    ko.cwd = ctx.cwd;
    ko.env = base_env;
    ko.runtime_dir = opt.runtime_dir;
    ko.start_timeout = opt.kernel_start_timeout;
    auto k = Kernel::start(std::move(ko));
    if (!k.ok()) {
      log.error("context " + ctx.id + ": " + k.error().message());
      return Error(ErrorCode::kUnavailable, "the " + ctx.language + " kernel of context " + ctx.id +
                                                " did not start: " + k.error().message());
    }
    ctx.kernel = std::shared_ptr<Kernel>(std::move(*k));
    log.info("context " + ctx.id + ": kernel started (pid " + std::to_string(ctx.kernel->pid()) +
             ")");
    return ctx.kernel;
  }

  void handle(http::Request&& req, http::Responder respond);
  void execute(http::Request&& req, http::Responder respond);
  void create_context(http::Request&& req, http::Responder respond);
  void list_contexts(const http::Request& req, http::Responder respond);
  void restart_context(std::shared_ptr<Context> ctx, unsigned version, http::Responder respond);
  void remove_context(std::shared_ptr<Context> ctx, unsigned version, http::Responder respond);
};

namespace {

Result<json::object> parse_object(const http::Request& req) {
  auto v = parse_json_strict(req.body());
  if (!v.ok()) return invalid_argument("malformed JSON body: " + v.error().message());
  if (!v->is_object()) return invalid_argument("the body must be a JSON object");
  return std::move(v->as_object());
}

Status only_keys(const json::object& o, std::initializer_list<std::string_view> keys) {
  for (const auto& kv : o) {
    bool known = false;
    for (auto k : keys) known = known || kv.key() == k;
    if (!known) return invalid_argument("unknown field '" + std::string(kv.key()) + "'");
  }
  return {};
}

// POST /execute's body: {"code", "context_id"?, "language"?, "env_vars"?}, checked.
struct ExecuteRequest {
  std::string code;
  std::optional<std::string> context_id, language;
  json::object env;
};

Result<ExecuteRequest> parse_execute(const http::Request& req) {
  if (req.body().size() > kMaxCodeBytes) {
    return Error(ErrorCode::kPayloadTooLarge, "the body is over 8 MiB");
  }
  auto o = parse_object(req);
  if (!o.ok()) return o.error();
  if (Status s = only_keys(*o, {"code", "context_id", "language", "env_vars"}); !s.ok())
    return s.error();
  auto code = json_required_string(*o, "code", "");
  if (!code.ok()) return code.error();
  auto context_id = json_optional_string(*o, "context_id", "");
  if (!context_id.ok()) return context_id.error();
  auto lang = json_optional_string(*o, "language", "");
  if (!lang.ok()) return lang.error();
  if (*context_id && *lang) {
    return invalid_argument("Only one of context_id or language can be provided");
  }
  ExecuteRequest out;
  auto env_vars = json_optional_object(*o, "env_vars", "");
  if (!env_vars.ok()) return env_vars.error();
  if (const json::object* ev = *env_vars) {
    if (ev->size() > kMaxEnvVars) {
      return invalid_argument("at most " + std::to_string(kMaxEnvVars) + " env_vars");
    }
    for (const auto& kv : *ev) {
      if (!valid_env_name(kv.key())) {
        return invalid_argument("env var name '" + std::string(kv.key()) +
                                "' is empty, too long or contains '=' or NUL");
      }
      auto value = json_as_string(kv.value(), json_path_key("env_vars", kv.key()));
      if (!value.ok()) return value.error();
      if (value->find('\0') != std::string::npos) {
        return invalid_argument("env var '" + std::string(kv.key()) +
                                "' must be a string without NUL");
      }
    }
    out.env = *ev;
  }
  out.code = std::move(*code);
  out.context_id = std::move(*context_id);
  out.language = std::move(*lang);
  return out;
}

// The execution's end (its reply, or why there is none): the error event the stream has not
// sent yet, then end_of_execution, and the keepalive stops.
void end_execution(const std::shared_ptr<ExecuteStream>& ex, Result<json::object> r) {
  ex->done = true;  // from here a closed stream interrupts nothing (the code has ended)
  if (!r.ok()) {
    bool cancelled = r.error().code() == ErrorCode::kFailedPrecondition;
    if (!ex->errored) {
      ex->errored = true;
      ex->send(cancelled ? json::object{{"type", "error"},
                                        {"name", "ContextRestarting"},
                                        {"value", "Context was restarted"},
                                        {"traceback", ""}}
                         : json::object{{"type", "error"},
                                        {"name", "KernelDied"},
                                        {"value", r.error().message()},
                                        {"traceback", ""}});
    }
  } else if (json_string_or_empty(*r, "status") == "error" && !ex->errored) {
    // An interrupt that lands between two statements can end the cell with no `error`
    // message (IPython's formatter fails); the reply still names the exception.
    ex->errored = true;
    ex->send(json::object{{"type", "error"},
                          {"name", json_string_or_empty(*r, "ename")},
                          {"value", json_string_or_empty(*r, "evalue")},
                          {"traceback", join_traceback(r->if_contains("traceback"))}});
  } else if (json_string_or_empty(*r, "status") == "aborted" && !ex->errored) {
    ex->errored = true;
    ex->send(json::object{{"type", "error"},
                          {"name", "ExecutionAborted"},
                          {"value", "Execution was aborted"},
                          {"traceback", ""}});
  }
  ex->out->write("{\"type\":\"end_of_execution\"}\n");
  ex->out->finish();
  asio::post(ex->keepalive->get_executor(), [ex] { ex->keepalive->cancel(); });
}

}  // namespace

void Service::Impl::handle(http::Request&& req, http::Responder respond) {
  const unsigned version = req.version();
  // Routes match the raw path (no percent-decoding: ids are plain [0-9a-f-]); the query is
  // ignored (the SDK may add ?source=...).
  std::string_view target = req.target();
  std::string path(target.substr(0, target.find('?')));
  const auto method = req.method();
  auto wrong_method = [&] { respond(text_response(405, "method not allowed", version)); };
  if (path == "/health") {
    if (method != bhttp::verb::get) return wrong_method();
    return respond(http::json_response(200, json::value("OK"), version));
  }
  if (stopping) return respond(text_response(503, "shutting down", version));
  if (path == "/execute") {
    if (method != bhttp::verb::post) return wrong_method();
    return execute(std::move(req), std::move(respond));
  }
  if (path == "/contexts") {
    if (method == bhttp::verb::get) return list_contexts(req, std::move(respond));
    if (method == bhttp::verb::post) return create_context(std::move(req), std::move(respond));
    return wrong_method();
  }
  constexpr std::string_view kPrefix = "/contexts/";
  if (path.starts_with(kPrefix)) {
    std::string_view rest = std::string_view(path).substr(kPrefix.size());
    bool restart = false;
    if (rest.ends_with("/restart")) {
      rest.remove_suffix(8);
      restart = true;
    }
    if (rest.empty() || rest.find('/') != std::string_view::npos) {
      return respond(text_response(404, "not found", version));
    }
    auto ctx = find(rest);
    if (!ctx)
      return respond(text_response(404, "Context " + std::string(rest) + " not found", version));
    if (restart) {
      if (method != bhttp::verb::post) return wrong_method();
      return restart_context(std::move(ctx), version, std::move(respond));
    }
    if (method != bhttp::verb::delete_) return wrong_method();
    return remove_context(std::move(ctx), version, std::move(respond));
  }
  respond(text_response(404, "not found", version));
}

void Service::Impl::list_contexts(const http::Request& req, http::Responder respond) {
  json::array out;
  {
    std::lock_guard lock(mu);
    for (const auto& [id, ctx] : contexts) out.push_back(ctx->to_json());
  }
  respond(http::json_response(200, out, req.version()));
}

void Service::Impl::create_context(http::Request&& req, http::Responder respond) {
  const unsigned version = req.version();
  auto fail = [&](const Error& e) { respond(error_text(e, version)); };
  json::object body;
  if (!req.body().empty()) {
    auto o = parse_object(req);
    if (!o.ok()) return fail(o.error());
    body = std::move(*o);
  }
  if (Status s = only_keys(body, {"language", "cwd"}); !s.ok()) return fail(s.error());
  auto lang = json_optional_string(body, "language", "");
  if (!lang.ok()) return fail(lang.error());
  auto cwd = json_optional_string(body, "cwd", "");
  if (!cwd.ok()) return fail(cwd.error());
  std::string language = normalize_language(lang->value_or(""));
  if (Status s = check_language(language); !s.ok()) return fail(s.error());
  std::string dir = cwd->value_or("").empty() ? opt.default_cwd : **cwd;
  struct stat st {};
  if (dir.front() != '/' || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return fail(
        invalid_argument("cwd '" + dir + "' is not an existing directory (an absolute path)"));
  }
  auto ctx = add_context(language, dir);
  if (!ctx.ok()) return fail(ctx.error());
  log.info("context " + (*ctx)->id + " created (" + language + ", cwd " + dir + ")");
  respond(http::json_response(200, (*ctx)->to_json(), version));
}

void Service::Impl::restart_context(std::shared_ptr<Context> ctx, unsigned version,
                                    http::Responder respond) {
  asio::post(ctx->strand, [this, ctx, version, respond = std::move(respond)] {
    if (ctx->removed)
      return respond(text_response(404, "Context " + ctx->id + " not found", version));
    if (ctx->kernel && ctx->kernel->alive()) {
      if (Status s = ctx->kernel->restart(); !s.ok()) {
        log.error("context " + ctx->id + ": restart failed: " + s.error().message());
        ctx->kernel->shutdown();
        ctx->kernel.reset();  // the next execution starts a fresh one
        return respond(text_response(
            500, "Failed to restart context " + ctx->id + ": " + s.error().message(), version));
      }
    } else if (ctx->kernel) {
      ctx->kernel->shutdown();
      ctx->kernel.reset();  // dead anyway: the next use starts a fresh kernel
    }
    log.info("context " + ctx->id + " restarted");
    respond(http::json_response(200, nullptr, version));
  });
}

void Service::Impl::remove_context(std::shared_ptr<Context> ctx, unsigned version,
                                   http::Responder respond) {
  {
    std::lock_guard lock(mu);
    contexts.erase(ctx->id);
    for (auto it = defaults.begin(); it != defaults.end();) {
      it = it->second == ctx->id ? defaults.erase(it) : std::next(it);
    }
  }
  asio::post(ctx->strand, [this, ctx, version, respond = std::move(respond)] {
    ctx->removed = true;
    if (ctx->kernel) ctx->kernel->shutdown();
    ctx->kernel.reset();
    log.info("context " + ctx->id + " removed");
    respond(http::json_response(200, nullptr, version));
  });
}

void Service::Impl::execute(http::Request&& req, http::Responder respond) {
  const unsigned version = req.version();
  auto fail = [&](const Error& e) { respond(error_text(e, version)); };
  auto parsed = parse_execute(req);
  if (!parsed.ok()) return fail(parsed.error());
  std::string& code = parsed->code;
  const std::optional<std::string>& context_id = parsed->context_id;
  const std::optional<std::string>& lang = parsed->language;
  json::object& env = parsed->env;
  std::shared_ptr<Context> ctx;
  if (context_id) {
    ctx = find(*context_id);
    if (!ctx) return respond(text_response(404, "Context " + *context_id + " not found", version));
  } else {
    std::string language = normalize_language(lang.value_or(""));
    if (Status s = check_language(language); !s.ok()) return fail(s.error());
    auto d = default_context(language);
    if (!d.ok()) return fail(d.error());
    ctx = *d;
  }
  // What restores the kernel's environment afterwards: each variable back to the value abx-interp
  // started with (the sandbox's), or removed.
  json::object restore;
  json::array unset;
  for (const auto& kv : env) {
    const char* before = ::getenv(std::string(kv.key()).c_str());
    if (before) {
      restore[kv.key()] = before;
    } else {
      unset.emplace_back(kv.key());
    }
  }
  asio::post(ctx->strand, [this, ctx, version, env = std::move(env), restore = std::move(restore),
                           unset = std::move(unset), code = std::move(code),
                           respond = std::move(respond)]() mutable {
    auto kernel = ensure_kernel(*ctx);
    if (!kernel.ok()) {
      return respond(error_text(kernel.error(), version));
    }
    http::Response header{bhttp::status::ok, version};
    header.set(bhttp::field::content_type, "application/x-ndjson");
    header.set(bhttp::field::cache_control, "no-store");
    auto ex = std::make_shared<ExecuteStream>();
    ex->kernel = *kernel;
    ex->keepalive = std::make_unique<asio::steady_timer>(respond.executor());
    ex->out = respond.stream(std::move(header));
    auto quiet = [this, id = ctx->id](const char* what) {
      return ExecuteCallbacks{
          [](const Message&) {},
          [this, id, what](Result<json::object> r) {
            if (!r.ok()) {
              log.warn("context " + id + ": " + what + ": " + r.error().message());
            } else if (json_string_or_empty(*r, "status") != "ok") {
              log.warn("context " + id + ": " + what + " failed: " + json::serialize(*r));
            }
          }};
    };
    const bool has_env = !env.empty();
    if (has_env) ex->kernel->execute(env_code(env, {}), true, quiet("setting env_vars"));
    ExecuteCallbacks cb;
    cb.on_output = [ex](const Message& m) {
      if (m.msg_type() == "execute_input") ex->running = true;
      if (ex->out->closed()) {
        ex->client_gone();  // gone before its code even started
        return;
      }
      if (auto ev = e2b_event(m, ex->errored)) ex->send(*ev);
    };
    cb.on_done = [ex](Result<json::object> r) { end_execution(ex, std::move(r)); };
    ex->tick(opt.keepalive_interval);
    ex->kernel->execute(std::move(code), false, std::move(cb));
    if (has_env) ex->kernel->execute(env_code(restore, unset), true, quiet("restoring env_vars"));
  });
}

// ---- Service ------------------------------------------------------------------------------

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Service::~Service() { shutdown(std::chrono::milliseconds(0)); }

Result<std::unique_ptr<Service>> Service::start(ServiceOptions options) {
  auto impl = std::make_unique<Impl>();
  if (options.default_cwd.empty()) {
    const char* home = ::getenv("HOME");
    struct stat st {};
    options.default_cwd =
        home && *home == '/' && ::stat(home, &st) == 0 && S_ISDIR(st.st_mode) ? home : "/";
  }
  for (char** e = environ; e && *e; ++e) impl->base_env.emplace_back(*e);
  impl->opt = std::move(options);
  http::ServerOptions so;
  so.host = impl->opt.host;
  so.port = impl->opt.port;
  so.io_threads = impl->opt.io_threads;
  so.limits = impl->opt.limits;
  so.limits.max_body_bytes = std::max(so.limits.max_body_bytes, kMaxCodeBytes + 64 * 1024);
  so.server_header = "abx-interp";
  so.error_renderer = [](const Error& e, unsigned status, unsigned version) {
    return text_response(status, e.message(), version);
  };
  Impl* raw = impl.get();
  auto server = http::Server::start(so, [raw](http::Request&& req, http::Responder respond) {
    raw->handle(std::move(req), std::move(respond));
  });
  if (!server.ok()) return server.error();
  impl->server = std::move(*server);
  // The default Python context exists from the start (E2B lists it). Its kernel starts now, on
  // the context's strand (so an execution arriving meanwhile queues behind the start), or on
  // first use.
  auto d = impl->default_context("python");
  if (!d.ok()) return d.error();
  if (impl->opt.start_default_kernel) {
    asio::post((*d)->strand, [raw, ctx = *d] { (void)raw->ensure_kernel(*ctx); });
  }
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

std::uint16_t Service::port() const { return impl_->server->port(); }

void Service::shutdown(std::chrono::milliseconds drain) {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  // Kernels first: a running execution ends (its stream gets its end) so the drain can finish.
  std::map<std::string, std::shared_ptr<Context>, std::less<>> all;
  {
    std::lock_guard lock(impl_->mu);
    all = impl_->contexts;
  }
  for (auto& entry : all) {
    std::shared_ptr<Context> ctx = entry.second;
    asio::post(ctx->strand, [ctx] {
      ctx->removed = true;
      if (ctx->kernel) ctx->kernel->shutdown();
      ctx->kernel.reset();
    });
  }
  impl_->pool.join();
  if (impl_->server) impl_->server->shutdown(drain);
}

void Service::wait() {
  if (impl_->server) impl_->server->wait();
}

}  // namespace abx::interp
