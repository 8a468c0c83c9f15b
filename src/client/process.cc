// Commands: envd's process.Process service (Start stream, List, SendSignal, SendInput,
// CloseStdin).
#include <boost/json.hpp>
#include <condition_variable>
#include <thread>

#include "abx/base/base64.h"
#include "abx/base/try.h"
#include "abx/client/commands.h"
#include "abx/connect/connect.h"
#include "connect.h"
#include "state.h"

namespace abx::client {

namespace detail {

// One Process/Start (or Connect) stream and what it has reported so far.
struct ProcessStream {
  std::shared_ptr<http::Connection> conn;
  OutputCallback on_stdout;
  OutputCallback on_stderr;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::uint32_t> pid;
  bool done = false;
  bool got_end = false;
  std::optional<Error> error;
  CommandResult result;
  std::thread reader;
  // Process lifetime requested with Connect-Timeout-Ms; envd kills the process when it passes.
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  ~ProcessStream() {
    if (reader.joinable()) {
      conn->cancel();
      reader.join();
    }
  }

  Status on_message(const json::value& v) {
    const json::object* ev = nullptr;
    if (v.is_object()) {
      if (auto* e = v.as_object().if_contains("event"); e && e->is_object()) ev = &e->as_object();
    }
    if (ev == nullptr) return {};  // unknown message shapes are ignored, as the SDKs do
    if (auto* s = ev->if_contains("start"); s && s->is_object()) {
      std::uint32_t p = 0;
      if (auto* pv = s->as_object().if_contains("pid")) {
        if (pv->is_int64()) p = static_cast<std::uint32_t>(pv->as_int64());
        if (pv->is_uint64()) p = static_cast<std::uint32_t>(pv->as_uint64());
      }
      std::lock_guard lk(mu);
      pid = p;
      cv.notify_all();
      return {};
    }
    if (!pid) return internal_error("envd: the first process event was not `start`");
    if (auto* d = ev->if_contains("data"); d && d->is_object()) {
      for (const char* stream : {"stdout", "stderr", "pty"}) {
        auto* b = d->as_object().if_contains(stream);
        if (b == nullptr || !b->is_string()) continue;
        auto bytes = abx::base64_decode(b->as_string());
        if (!bytes.ok()) return internal_error("envd: bad base64 in process output");
        bool err = std::string_view(stream) == "stderr";
        {
          std::lock_guard lk(mu);
          (err ? result.stderr_data : result.stdout_data).append(*bytes);
        }
        const auto& cb = err ? on_stderr : on_stdout;
        if (cb) cb(*bytes);
      }
      return {};
    }
    if (auto* e = ev->if_contains("end"); e && e->is_object()) {
      const auto& eo = e->as_object();
      std::lock_guard lk(mu);
      got_end = true;
      // proto3 JSON omits a zero exit code.
      for (const char* key : {"exitCode", "exit_code"}) {
        if (auto* c = eo.if_contains(key)) {
          if (c->is_int64()) result.exit_code = static_cast<int>(c->as_int64());
          if (c->is_uint64()) result.exit_code = static_cast<int>(c->as_uint64());
        }
      }
      if (auto* m = eo.if_contains("error"); m && m->is_string()) result.error = m->as_string();
    }
    return {};
  }

  void run(http::Request req, std::chrono::milliseconds idle) {
    auto st = read_connect_stream(
        *conn, std::move(req), [this](const json::value& v) { return on_message(v); }, idle);
    std::lock_guard lk(mu);
    if (!st.ok()) {
      error = st.error();
    } else if (!got_end) {
      error = unavailable("the process stream ended without an end event");
    }
    done = true;
    cv.notify_all();
  }

  Result<CommandResult> outcome() {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done; });
    if (error) return *error;
    // A process killed at its deadline is a timeout, as in the E2B SDKs (which abort locally
    // at the same moment), not an ordinary non-zero exit.
    if (result.exit_code != 0 && timeout.count() > 0 &&
        std::chrono::steady_clock::now() - started >= timeout) {
      return Error(ErrorCode::kDeadlineExceeded,
                   "command timed out after " + std::to_string(timeout.count()) + " ms" +
                       (result.error.empty() ? "" : " (" + result.error + ")"));
    }
    return result;
  }
};

namespace {

std::string basic_user(std::string_view user) {
  return "Basic " + abx::base64_encode(std::string(user) + ":");
}

json::object selector(std::uint32_t pid) { return {{"process", json::object{{"pid", pid}}}}; }

}  // namespace

}  // namespace detail

Result<CommandHandle> Commands::start_argv(const std::vector<std::string>& argv,
                                           const CommandOptions& opts) {
  if (argv.empty()) return invalid_argument("commands: empty argv");
  json::object process;
  process["cmd"] = argv.front();
  json::array args;
  for (std::size_t i = 1; i < argv.size(); ++i) args.emplace_back(argv[i]);
  process["args"] = std::move(args);
  if (!opts.envs.empty()) {
    json::object envs;
    for (const auto& [k, v] : opts.envs) envs[k] = v;
    process["envs"] = std::move(envs);
  }
  if (!opts.cwd.empty()) process["cwd"] = opts.cwd;
  json::object body{{"process", std::move(process)}, {"stdin", opts.stdin}};
  if (opts.pty) {
    body["pty"] =
        json::object{{"size", json::object{{"cols", opts.pty->cols}, {"rows", opts.pty->rows}}}};
  }

  ABX_ASSIGN_OR_RETURN(auto ep, state_->plane_endpoint(kEnvdPort));
  ABX_ASSIGN_OR_RETURN(auto conn, state_->transport->open_stream(ep));
  auto req = http::make_request(bhttp::verb::post, "/process.Process/Start",
                                connect::encode_envelope(0, json::serialize(body)),
                                "application/connect+json");
  req.set("Connect-Protocol-Version", "1");
  // envd sends keepalive frames this often when the process is quiet, so a silent process
  // never trips the read timeout below.
  req.set("Keepalive-Ping-Interval", "30");
  if (opts.timeout.count() > 0) req.set("Connect-Timeout-Ms", std::to_string(opts.timeout.count()));
  if (!opts.user.empty()) req.set(bhttp::field::authorization, detail::basic_user(opts.user));
  state_->transport->prepare(ep, req);
  state_->add_plane_headers(req, kEnvdPort);

  auto ps = std::make_shared<detail::ProcessStream>();
  ps->conn = std::move(conn);
  ps->on_stdout = opts.on_stdout;
  ps->on_stderr = opts.on_stderr;
  ps->timeout = opts.timeout;
  auto idle =
      std::max<std::chrono::milliseconds>(state_->config.request_timeout, std::chrono::seconds(75));
  // The raw pointer: the thread must not own the stream, whose destructor joins it.
  auto* raw = ps.get();
  ps->reader =
      std::thread([raw, r = std::move(req), idle]() mutable { raw->run(std::move(r), idle); });
  {
    std::unique_lock lk(ps->mu);
    ps->cv.wait(lk, [&] { return ps->pid.has_value() || ps->done; });
    if (!ps->pid) {
      Error e = ps->error ? *ps->error : internal_error("process did not start");
      lk.unlock();
      ps->reader.join();
      return e;
    }
  }
  return CommandHandle(state_, std::move(ps));
}

Result<CommandHandle> Commands::start(std::string_view cmd, const CommandOptions& opts) {
  ABX_TRY(state_->check(Capability::kShell));
  return start_argv({"/bin/bash", "-l", "-c", std::string(cmd)}, opts);
}

Result<CommandResult> Commands::run(std::string_view cmd, const CommandOptions& opts) {
  ABX_ASSIGN_OR_RETURN(auto h, start(cmd, opts));
  return h.wait();
}

Result<CommandResult> Commands::run_argv(const std::vector<std::string>& argv,
                                         const CommandOptions& opts) {
  ABX_ASSIGN_OR_RETURN(auto h, start_argv(argv, opts));
  return h.wait();
}

Result<std::vector<ProcessInfo>> Commands::list() {
  ABX_TRY(state_->check(Capability::kShell));
  ABX_ASSIGN_OR_RETURN(auto v,
                       state_->connect_unary("/process.Process/List", json::object{}, true));
  std::vector<ProcessInfo> out;
  const json::value* procs = v.is_object() ? v.as_object().if_contains("processes") : nullptr;
  if (procs == nullptr || !procs->is_array()) return out;
  for (const auto& p : procs->as_array()) {
    if (!p.is_object()) continue;
    const auto& o = p.as_object();
    ProcessInfo info;
    if (auto* pid = o.if_contains("pid"); pid && pid->is_number())
      info.pid = pid->to_number<std::uint32_t>();
    if (auto* t = o.if_contains("tag"); t && t->is_string()) info.tag = t->as_string();
    if (auto* c = o.if_contains("config"); c && c->is_object()) {
      if (auto* cmd = c->as_object().if_contains("cmd"); cmd && cmd->is_string())
        info.cmd = cmd->as_string();
      if (auto* a = c->as_object().if_contains("args"); a && a->is_array()) {
        for (const auto& s : a->as_array()) {
          if (s.is_string()) info.args.emplace_back(s.as_string());
        }
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<bool> Commands::kill(std::uint32_t pid) {
  ABX_TRY(state_->check(Capability::kShell));
  json::object body = detail::selector(pid);
  body["signal"] = "SIGNAL_SIGKILL";
  auto v = state_->connect_unary("/process.Process/SendSignal", body, false);
  if (v.ok()) return true;
  if (v.error().code() == ErrorCode::kNotFound) return false;
  return v.error();
}

CommandHandle::CommandHandle(std::shared_ptr<detail::SandboxState> state,
                             std::shared_ptr<detail::ProcessStream> stream)
    : state_(std::move(state)), stream_(std::move(stream)) {}
CommandHandle::CommandHandle(CommandHandle&&) noexcept = default;
CommandHandle& CommandHandle::operator=(CommandHandle&&) noexcept = default;
CommandHandle::~CommandHandle() = default;

std::uint32_t CommandHandle::pid() const { return stream_->pid.value_or(0); }

Result<CommandResult> CommandHandle::wait() { return stream_->outcome(); }

Result<bool> CommandHandle::kill() { return Commands(state_).kill(pid()); }

Status CommandHandle::send_stdin(std::string_view data) {
  json::object body = detail::selector(pid());
  body["input"] = json::object{{"stdin", abx::base64_encode(data)}};
  ABX_TRY(state_->connect_unary("/process.Process/SendInput", body, false));
  return {};
}

Status CommandHandle::send_pty(std::string_view data) {
  json::object body = detail::selector(pid());
  body["input"] = json::object{{"pty", abx::base64_encode(data)}};
  ABX_TRY(state_->connect_unary("/process.Process/SendInput", body, false));
  return {};
}

Status CommandHandle::resize(PtySize size) {
  json::object body = detail::selector(pid());
  body["pty"] = json::object{{"size", json::object{{"cols", size.cols}, {"rows", size.rows}}}};
  ABX_TRY(state_->connect_unary("/process.Process/Update", body, false));
  return {};
}

Status CommandHandle::close_stdin() {
  ABX_TRY(state_->connect_unary("/process.Process/CloseStdin", detail::selector(pid()), false));
  return {};
}

}  // namespace abx::client
