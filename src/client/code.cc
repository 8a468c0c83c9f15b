// The code interpreter (port 49999, E2B's code-interpreter API; docs/code-interpreter.md):
// POST /execute streamed as NDJSON, and the /contexts CRUD.
#include "abx/client/code.h"

#include <boost/json.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "code_stream.h"
#include "state.h"

namespace abx::client {

namespace {

// A string field of the interpreter's output: "" when absent or null; another type is the
// server's fault (internal).
Result<std::string> output_string(const json::object& o, std::string_view key,
                                  std::string_view path) {
  auto s = json_optional_string(o, key, path);
  if (!s.ok()) return internal_error("code interpreter: " + s.error().message());
  return std::move(*s).value_or("");
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
    s.remove_suffix(1);
  while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.remove_prefix(1);
  return std::string(s);
}

}  // namespace

// CodeResult's string formats by their E2B names, in E2B's order.
constexpr std::pair<const char*, std::string CodeResult::*> kStringFields[] = {
    {"text", &CodeResult::text},
    {"html", &CodeResult::html},
    {"markdown", &CodeResult::markdown},
    {"svg", &CodeResult::svg},
    {"png", &CodeResult::png},
    {"jpeg", &CodeResult::jpeg},
    {"pdf", &CodeResult::pdf},
    {"latex", &CodeResult::latex},
    {"javascript", &CodeResult::javascript}};

std::vector<std::string> CodeResult::formats() const {
  std::vector<std::string> out;
  for (const auto& [name, field] : kStringFields) {
    if (!(this->*field).empty()) out.emplace_back(name);
  }
  if (!json.is_null()) out.emplace_back("json");
  for (const auto& [k, v] : extra) out.push_back(k);
  return out;
}

std::string Execution::text() const {
  for (const auto& r : results) {
    if (r.is_main_result) return r.text;
  }
  return {};
}

std::string Execution::stdout_text() const {
  std::string s;
  for (const auto& c : stdout_chunks) s += c;
  return s;
}

std::string Execution::stderr_text() const {
  std::string s;
  for (const auto& c : stderr_chunks) s += c;
  return s;
}

json::object to_json(const CodeResult& r) {
  json::object o;
  for (const auto& [name, field] : kStringFields) {
    if (!(r.*field).empty()) o[name] = r.*field;
  }
  if (!r.json.is_null()) o["json"] = r.json;
  if (!r.extra.empty()) {
    json::object extra;
    for (const auto& [k, v] : r.extra) extra[k] = v;
    o["extra"] = std::move(extra);
  }
  o["isMainResult"] = r.is_main_result;
  return o;
}

json::object to_json(const Execution& ex) {
  json::array results, out, err;
  for (const auto& r : ex.results) results.push_back(to_json(r));
  for (const auto& c : ex.stdout_chunks) out.emplace_back(c);
  for (const auto& c : ex.stderr_chunks) err.emplace_back(c);
  json::object o{{"results", std::move(results)},
                 {"logs", json::object{{"stdout", std::move(out)}, {"stderr", std::move(err)}}}};
  if (ex.error) {
    o["error"] = json::object{
        {"name", ex.error->name}, {"value", ex.error->value}, {"traceback", ex.error->traceback}};
  } else {
    o["error"] = nullptr;
  }
  if (ex.execution_count) {
    o["executionCount"] = *ex.execution_count;
  } else {
    o["executionCount"] = nullptr;
  }
  return o;
}

namespace detail {

CodeResult code_result_from_json(const json::object& o) {
  CodeResult r;
  for (const auto& kv : o) {
    std::string_view k = kv.key();
    if (k == "type") continue;
    if (k == "is_main_result") {
      r.is_main_result = kv.value().is_bool() && kv.value().as_bool();
      continue;
    }
    if (k == "json") {
      r.json = kv.value();
      continue;
    }
    if (k == "extra") {
      if (kv.value().is_object()) {
        for (const auto& e : kv.value().as_object()) r.extra[std::string(e.key())] = e.value();
      }
      continue;
    }
    bool known = false;
    for (const auto& [name, field] : kStringFields) {
      if (k == name) {
        known = true;
        if (kv.value().is_string()) r.*field = kv.value().as_string();
        break;
      }
    }
    if (!known && !kv.value().is_null()) r.extra[std::string(k)] = kv.value();
  }
  // The kernel wraps base64 in lines (and ends it with one); every user of the bytes wants it
  // unwrapped.
  for (std::string* b64 : {&r.png, &r.jpeg, &r.pdf}) {
    std::erase_if(*b64, [](char c) { return c == '\n' || c == '\r' || c == ' '; });
  }
  return r;
}

Status ExecutionReader::feed(std::string_view piece) {
  if (failed_) return internal_error("code interpreter stream: already failed");
  while (!piece.empty()) {
    auto nl = piece.find('\n');
    std::string_view chunk = piece.substr(0, nl);
    if (partial_.size() + chunk.size() > max_line_) {
      failed_ = true;
      return Error(ErrorCode::kResourceExhausted, "code interpreter: a stream line is over " +
                                                      std::to_string(max_line_) + " bytes");
    }
    if (nl == std::string_view::npos) {
      partial_.append(chunk);
      break;
    }
    Status st;
    if (partial_.empty()) {
      st = line(chunk);
    } else {
      partial_.append(chunk);
      st = line(partial_);
      partial_.clear();
    }
    if (!st.ok()) {
      failed_ = true;
      return st;
    }
    piece.remove_prefix(nl + 1);
  }
  return {};
}

Status ExecutionReader::finish() {
  if (failed_) return internal_error("code interpreter stream: already failed");
  if (!partial_.empty()) {
    std::string last = std::move(partial_);
    partial_.clear();
    ABX_TRY(line(last));
  }
  if (!ended_) {
    return unavailable("code interpreter: the execution stream ended without end_of_execution");
  }
  return {};
}

Status ExecutionReader::line(std::string_view l) {
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (l.empty()) return {};
  if (ended_) return {};  // nothing counts after the end
  total_ += l.size();
  if (total_ > max_total_) {
    return Error(ErrorCode::kResourceExhausted,
                 "code interpreter: the execution's output is over " + std::to_string(max_total_) +
                     " bytes");
  }
  auto v = parse_json_strict(l);
  if (!v.ok() || !v->is_object()) {
    std::string shown(l.substr(0, 80));
    return internal_error("code interpreter sent a malformed line: " + shown);
  }
  const auto& o = v->as_object();
  ABX_ASSIGN_OR_RETURN(std::string type, output_string(o, "type", ""));
  if (type == "stdout" || type == "stderr") {
    ABX_ASSIGN_OR_RETURN(std::string text, output_string(o, "text", type));
    bool out = type == "stdout";
    (out ? ex_.stdout_chunks : ex_.stderr_chunks).push_back(text);
    const auto& cb = out ? opts_.on_stdout : opts_.on_stderr;
    if (cb) cb(text);
  } else if (type == "result") {
    ex_.results.push_back(code_result_from_json(o));
    if (opts_.on_result) opts_.on_result(ex_.results.back());
  } else if (type == "error") {
    CodeError e;
    ABX_ASSIGN_OR_RETURN(e.name, output_string(o, "name", "error"));
    ABX_ASSIGN_OR_RETURN(e.value, output_string(o, "value", "error"));
    if (auto* tb = o.if_contains("traceback")) {
      if (tb->is_string()) {
        e.traceback = tb->as_string();
      } else if (tb->is_array()) {  // Jupyter's own shape: one string a frame
        for (const auto& f : tb->as_array()) {
          if (!f.is_string()) continue;
          if (!e.traceback.empty()) e.traceback += "\n";
          e.traceback += f.as_string();
        }
      }
    }
    if (!ex_.error) {  // only the first counts, as the interpreter sends it
      ex_.error = e;
      if (opts_.on_error) opts_.on_error(*ex_.error);
    }
  } else if (type == "number_of_executions") {
    if (auto* c = o.if_contains("execution_count"); c && (c->is_int64() || c->is_uint64())) {
      ex_.execution_count = c->to_number<std::int64_t>();
    }
  } else if (type == "end_of_execution") {
    ended_ = true;
  }
  // keepalive and types of later versions: ignored, as the SDKs do.
  return {};
}

Error code_http_error(unsigned status, std::string_view body, std::string_view sandbox_id) {
  std::string text;
  auto v = parse_json_strict(body);
  if (v.ok() && v->is_object()) {  // abxd's own errors: {"code", "message"}
    // Only shown: any other body is shown as it came (json_string_or_empty's "" falls back).
    text = json_string_or_empty(v->as_object(), "message");
  }
  if (text.empty()) text = trim(body.substr(0, 4096));
  // abxd keeps the port private (403) on a template without an interpreter or the `ports`
  // capability; with `ports`, nothing listens there (502).
  if ((status == 403 && text.find("is private") != std::string::npos) ||
      (status == 502 && text.find("nothing listens on port") != std::string::npos)) {
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox " + std::string(sandbox_id) +
                     "'s template has no code interpreter (use template code-interpreter)");
  }
  if (text.empty()) text = "HTTP " + std::to_string(status);
  return Error(http::error_code_for_status(status), text);
}

Error code_dial_error(const Error& e, std::string_view sandbox_id) {
  if (e.message().find("nothing listens on port") != std::string::npos) {
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox " + std::string(sandbox_id) +
                     "'s template has no code interpreter (use template code-interpreter)");
  }
  return e;
}

}  // namespace detail

CodeInterpreter::CodeInterpreter(std::shared_ptr<detail::SandboxState> state)
    : state_(std::move(state)) {}

namespace {

// A request to the interpreter through the pool; a dial failure says when there is none.
Result<http::Response> interp_send(detail::SandboxState& st, bhttp::verb method, std::string target,
                                   std::string body, bool idempotent) {
  auto req = http::make_request(method, std::move(target), std::move(body));
  auto res = st.plane_send(kCodeInterpreterPort, std::move(req), {.idempotent = idempotent});
  if (!res.ok()) return detail::code_dial_error(res.error(), st.info.sandbox_id);
  if (res->result_int() / 100 != 2) {
    return detail::code_http_error(res->result_int(), res->body(), st.info.sandbox_id);
  }
  return res;
}

Result<CodeContext> context_from_json(const json::value& v) {
  if (!v.is_object()) return internal_error("code interpreter: a context is not a JSON object");
  const auto& o = v.as_object();
  CodeContext c;
  ABX_ASSIGN_OR_RETURN(c.id, output_string(o, "id", "context"));
  ABX_ASSIGN_OR_RETURN(c.language, output_string(o, "language", "context"));
  ABX_ASSIGN_OR_RETURN(c.cwd, output_string(o, "cwd", "context"));
  if (c.id.empty()) return internal_error("code interpreter: a context without an id");
  return c;
}

// POST /execute's body.
json::object execute_body(std::string_view code, const RunCodeOptions& opts) {
  json::object body{{"code", code}};
  if (!opts.context_id.empty()) body["context_id"] = opts.context_id;
  if (!opts.language.empty()) body["language"] = opts.language;
  if (!opts.envs.empty()) {
    json::object envs;
    for (const auto& [k, v] : opts.envs) envs[k] = v;
    body["env_vars"] = std::move(envs);
  }
  return body;
}

// Cancels a connection unless stopped within its timeout (a thread that waits for stop()).
class Watchdog {
 public:
  Watchdog() = default;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() { stop(); }

  void start(std::chrono::milliseconds timeout, std::shared_ptr<http::Connection> c) {
    thread_ = std::thread([this, timeout, c = std::move(c)] {
      std::unique_lock lk(mu_);
      if (!cv_.wait_for(lk, timeout, [&] { return done_; })) {
        fired_ = true;
        c->cancel();
      }
    });
  }
  // Whether it fired (false if it was never started).
  bool stop() {
    if (!thread_.joinable()) return false;
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

}  // namespace

Result<Execution> CodeInterpreter::run(std::string_view code, const RunCodeOptions& opts) {
  if (!opts.context_id.empty() && !opts.language.empty()) {
    return invalid_argument("run code: give a context id or a language, not both");
  }
  const json::object body = execute_body(code, opts);
  detail::SandboxState& st = *state_;
  ABX_ASSIGN_OR_RETURN(auto ep, st.plane_endpoint(kCodeInterpreterPort));
  auto conn = st.transport->open_stream(ep);
  if (!conn.ok()) return detail::code_dial_error(conn.error(), st.info.sandbox_id);
  auto req = http::make_request(bhttp::verb::post, "/execute", json::serialize(body));
  st.transport->prepare(ep, req);
  st.add_plane_headers(req, kCodeInterpreterPort);

  // The deadline: a watchdog closes the connection, which makes the interpreter interrupt the
  // code (it notices at its next keepalive, within a second).
  Watchdog wd;
  if (opts.timeout.count() > 0) wd.start(opts.timeout, *conn);

  Execution ex;
  detail::ExecutionReader reader(opts, ex);
  std::optional<Error> failure;
  std::string head;  // the body's start, for an error answer
  // The interpreter writes a keepalive each second while the code is silent.
  auto idle =
      std::max<std::chrono::milliseconds>(st.config.request_timeout, std::chrono::seconds(75));
  auto res = (*conn)->send_streaming(
      std::move(req),
      [&](std::string_view piece) {
        if (head.size() < 64 * 1024) head.append(piece.substr(0, 64 * 1024 - head.size()));
        if (auto s = reader.feed(piece); !s.ok()) {
          failure = s.error();
          return false;
        }
        return !reader.ended();
      },
      idle);
  bool timed_out = wd.stop();
  // A deadline that passed just as end_of_execution arrived does not undo the execution.
  if (timed_out && !(reader.ended() && !failure)) {
    return Error(ErrorCode::kDeadlineExceeded, "code execution timed out after " +
                                                   std::to_string(opts.timeout.count()) +
                                                   " ms (the interpreter interrupts it)");
  }
  if (!res.ok()) return detail::code_dial_error(res.error(), st.info.sandbox_id);
  if (res->result_int() != 200) {
    return detail::code_http_error(res->result_int(), head, st.info.sandbox_id);
  }
  if (failure) return *failure;
  ABX_TRY(reader.finish());
  return ex;
}

Result<CodeContext> CodeInterpreter::create_context(const CreateContextOptions& opts) {
  json::object body;
  if (!opts.language.empty()) body["language"] = opts.language;
  if (!opts.cwd.empty()) body["cwd"] = opts.cwd;
  ABX_ASSIGN_OR_RETURN(
      auto res, interp_send(*state_, bhttp::verb::post, "/contexts", json::serialize(body), false));
  auto v = parse_json_strict(res.body());
  if (!v.ok()) return internal_error("code interpreter: POST /contexts sent bad JSON");
  return context_from_json(*v);
}

Result<std::vector<CodeContext>> CodeInterpreter::list_contexts() {
  ABX_ASSIGN_OR_RETURN(auto res, interp_send(*state_, bhttp::verb::get, "/contexts", {}, true));
  auto v = parse_json_strict(res.body());
  if (!v.ok() || !v->is_array()) {
    return internal_error("code interpreter: GET /contexts did not send a JSON array");
  }
  std::vector<CodeContext> out;
  for (const auto& c : v->as_array()) {
    ABX_ASSIGN_OR_RETURN(auto ctx, context_from_json(c));
    out.push_back(std::move(ctx));
  }
  return out;
}

Status CodeInterpreter::restart_context(std::string_view id) {
  ABX_TRY(interp_send(*state_, bhttp::verb::post,
                      "/contexts/" + detail::url_encode(id) + "/restart", {}, false));
  return {};
}

Status CodeInterpreter::remove_context(std::string_view id) {
  ABX_TRY(
      interp_send(*state_, bhttp::verb::delete_, "/contexts/" + detail::url_encode(id), {}, true));
  return {};
}

}  // namespace abx::client
