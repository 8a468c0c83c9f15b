#include "platform/mcp_tools_abxd.h"

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>
#include <cctype>
#include <ctime>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "abx/base/json.h"
#include "abx/http/client.h"
#include "abx/platform/host_route.h"
#include "abx/templates/template.h"
#include "abx/token/token.h"

namespace abx::platform {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace json = boost::json;
using http::Request;
using http::Response;

namespace {

constexpr std::size_t kMaxSessions = 1024;
constexpr std::size_t kSessionIdBytes = 16;
constexpr std::size_t kMaxResponseBytes = 64u << 20;
constexpr std::uint8_t kEndStreamFlag = 0x02;

// --- one HTTP exchange over a socket into the sandbox ---

// Sends `req` on `fd` and reads the whole response, within `timeout`. A body over `body_limit`
// is kPayloadTooLarge.
Result<Response> exchange(runtime::UniqueFd fd, Request req, std::chrono::milliseconds timeout,
                          std::size_t body_limit = kMaxResponseBytes) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  boost::system::error_code ec;
  stream.socket().assign(asio::ip::tcp::v4(), fd.release(), ec);
  if (ec) return internal_error("cannot adopt the sandbox socket: " + ec.message());
  req.set(bhttp::field::host, "localhost");
  req.keep_alive(false);
  req.prepare_payload();
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(body_limit);
  beast::flat_buffer buf;
  boost::system::error_code result;
  stream.expires_after(timeout);
  bhttp::async_write(stream, req, [&](boost::system::error_code wec, std::size_t) {
    if (wec) {
      result = wec;
      return;
    }
    bhttp::async_read(stream, buf, parser,
                      [&](boost::system::error_code rec, std::size_t) { result = rec; });
  });
  ioc.run();
  if (result == beast::error::timeout) {
    return Error(ErrorCode::kDeadlineExceeded,
                 "the sandbox did not answer within " + std::to_string(timeout.count()) + " ms");
  }
  if (result == bhttp::error::body_limit) {
    return Error(ErrorCode::kPayloadTooLarge,
                 "the answer is over " + std::to_string(body_limit) + " bytes");
  }
  if (result) return unavailable("talking to the sandbox failed: " + result.message());
  return parser.release();
}

ErrorCode code_of_connect(std::string_view c) {
  if (c == "invalid_argument" || c == "out_of_range") return ErrorCode::kInvalidArgument;
  if (c == "unauthenticated") return ErrorCode::kUnauthenticated;
  if (c == "permission_denied") return ErrorCode::kPermissionDenied;
  if (c == "not_found") return ErrorCode::kNotFound;
  if (c == "already_exists") return ErrorCode::kAlreadyExists;
  if (c == "failed_precondition") return ErrorCode::kFailedPrecondition;
  if (c == "resource_exhausted") return ErrorCode::kResourceExhausted;
  if (c == "unimplemented") return ErrorCode::kUnimplemented;
  if (c == "unavailable") return ErrorCode::kUnavailable;
  if (c == "deadline_exceeded") return ErrorCode::kDeadlineExceeded;
  return ErrorCode::kInternal;
}

// An error answer of envd ({"code": 404 | "not_found", "message"}) or of the command server
// ({"error", "type"}), prefixed with what was being done.
Error error_of(const Response& res, const std::string& doing) {
  ErrorCode code = http::error_code_for_status(res.result_int());
  std::string msg;
  std::string type;
  auto v = parse_json_strict(res.body());
  if (v.ok() && v->is_object()) {
    const auto& o = v->as_object();
    if (auto* m = o.if_contains("message"); m && m->is_string()) msg = m->as_string();
    if (auto* e = o.if_contains("error"); e && e->is_string()) msg = e->as_string();
    if (auto* t = o.if_contains("type"); t && t->is_string()) type = t->as_string();
    if (auto* c = o.if_contains("code"); c && c->is_string())
      code = code_of_connect(c->as_string());
  }
  if (msg.empty()) msg = "HTTP " + std::to_string(res.result_int());
  return Error(code, doing + ": " + msg, type);
}

std::string url_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string envelope(std::string_view payload) {
  std::string out(5, '\0');
  auto n = static_cast<std::uint32_t>(payload.size());
  out[1] = static_cast<char>(n >> 24);
  out[2] = static_cast<char>(n >> 16);
  out[3] = static_cast<char>(n >> 8);
  out[4] = static_cast<char>(n);
  out.append(payload);
  return out;
}

Result<std::string> b64_decode(std::string_view in) {
  static const auto table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = i;
    t['-'] = 62;
    t['_'] = 63;
    return t;
  }();
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    if (ch == '=') break;
    int v = table[static_cast<unsigned char>(ch)];
    if (v < 0) return internal_error("envd sent bad base64");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

std::string str_of(const json::object& o, std::string_view k) {
  if (auto* v = o.if_contains(k); v && v->is_string()) return std::string(v->as_string());
  return {};
}

std::string rfc3339(std::int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

SandboxSummary summary_of(const store::SandboxRecord& r, bool paused) {
  return {r.id,
          r.template_id,
          paused ? "paused" : "running",
          rfc3339(r.created_at_ms),
          rfc3339(r.end_at_ms),
          r.metadata};
}

bool command_name_ok(std::string_view n) {
  if (n.empty() || n.size() > 128) return false;
  for (unsigned char c : n) {
    if (!std::isalnum(c) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

class AbxdBackend : public PlatformBackend {
 public:
  AbxdBackend(SandboxManager& sandboxes, store::Store& store)
      : sandboxes_(sandboxes), store_(store) {}

  Result<SandboxSummary> create_sandbox(const SandboxSpec& spec) override {
    if (spec.timeout_seconds && *spec.timeout_seconds > sandboxes_.options().max_timeout_seconds) {
      return invalid_argument("timeoutSeconds must be at most " +
                              std::to_string(sandboxes_.options().max_timeout_seconds));
    }
    CreateRequest cr;
    cr.template_id = spec.template_id;
    cr.timeout_seconds = spec.timeout_seconds;
    cr.metadata = spec.metadata;
    cr.env_vars = spec.envs;
    auto sb = sandboxes_.create(cr);
    if (!sb.ok()) return sb.error();
    return summary_of((*sb)->record, false);
  }

  Result<std::vector<SandboxSummary>> list_sandboxes() override {
    std::vector<SandboxSummary> out;
    store::SandboxFilter f;
    f.states = {store::SandboxState::kRunning, store::SandboxState::kPaused};
    f.limit = 100;
    do {
      auto page = store_.list_sandboxes(f);
      if (!page.ok()) return page.error();
      for (const auto& r : page->items) {
        out.push_back(summary_of(r, r.state == store::SandboxState::kPaused));
      }
      f.page_token = page->next_token;
    } while (!f.page_token.empty() && out.size() < 10'000);
    return out;
  }

  Result<bool> kill_sandbox(const std::string& id) override {
    if (!valid_sandbox_id(id)) return false;
    Status s = sandboxes_.kill(id);
    if (s.ok()) return true;
    if (s.error().code() == ErrorCode::kNotFound) return false;
    return s.error();
  }

  Result<ShellResult> run_shell(const std::string& id, const ShellRequest& req) override {
    auto sb = live(id, templates::Capability::kShell, "shell");
    if (!sb.ok()) return sb.error();
    return run_argv(**sb, {"/bin/bash", "-l", "-c", req.command}, req);
  }

  Result<std::string> read_file(const std::string& id, const std::string& path) override {
    auto sb = live(id, templates::Capability::kFiles, "files");
    if (!sb.ok()) return sb.error();
    auto res =
        envd(**sb, http::make_request(bhttp::verb::get, "/files?path=" + url_encode(path), {}, {}),
             std::chrono::seconds(60), kMaxReadFileBytes);
    if (!res.ok()) {
      if (res.error().code() == ErrorCode::kPayloadTooLarge) {
        return Error(ErrorCode::kPayloadTooLarge,
                     path +
                         " is over the 4 MiB read_file limit: read parts of it with run_shell "
                         "(head, tail, sed -n)");
      }
      return res.error();
    }
    if (res->result_int() != 200) return error_of(*res, "read " + path);
    return std::move(res->body());
  }

  Status write_file(const std::string& id, const std::string& path,
                    const std::string& data) override {
    auto sb = live(id, templates::Capability::kFiles, "files");
    if (!sb.ok()) return sb.error();
    auto res = envd(**sb,
                    http::make_request(bhttp::verb::post, "/files?path=" + url_encode(path), data,
                                       "application/octet-stream"),
                    std::chrono::seconds(60));
    if (!res.ok()) return res.error();
    if (res->result_int() != 200) return error_of(*res, "write " + path);
    return {};
  }

  Result<std::vector<FileEntry>> list_files(const std::string& id, const std::string& path,
                                            int depth) override {
    auto sb = live(id, templates::Capability::kFiles, "files");
    if (!sb.ok()) return sb.error();
    auto req = http::make_request(bhttp::verb::post, "/filesystem.Filesystem/ListDir",
                                  json::serialize(json::object{{"path", path}, {"depth", depth}}));
    req.set("Connect-Protocol-Version", "1");
    auto res = envd(**sb, std::move(req), std::chrono::seconds(60));
    if (!res.ok()) return res.error();
    if (res->result_int() != 200) return error_of(*res, "list " + path);
    auto v = parse_json_strict(res->body());
    if (!v.ok() || !v->is_object()) return internal_error("envd sent a bad ListDir answer");
    std::vector<FileEntry> out;
    if (auto* es = v->as_object().if_contains("entries"); es && es->is_array()) {
      for (const auto& e : es->as_array()) {
        if (!e.is_object()) continue;
        const auto& o = e.as_object();
        FileEntry fe{str_of(o, "name"), str_of(o, "path"), "unknown", 0};
        std::string t = str_of(o, "type");
        if (t == "FILE_TYPE_FILE") fe.type = "file";
        if (t == "FILE_TYPE_DIRECTORY") fe.type = "dir";
        if (t == "FILE_TYPE_SYMLINK") fe.type = "symlink";
        if (auto* s = o.if_contains("size")) {  // int64: a JSON string in proto3
          if (s->is_string()) fe.size = std::strtoll(s->as_string().c_str(), nullptr, 10);
          if (s->is_number()) fe.size = s->to_number<std::int64_t>();
        }
        out.push_back(std::move(fe));
      }
    }
    return out;
  }

  Result<std::vector<CommandInfo>> list_commands(const std::string& id) override {
    auto sb = live(id);
    if (!sb.ok()) return sb.error();
    std::vector<CommandInfo> out;
    std::set<std::string> seen;
    // Layer 2 first: what the running command server says wins over the template's YAML.
    if ((*sb)->tmpl && (*sb)->tmpl->server) {
      auto res = command_server(**sb, http::make_request(bhttp::verb::get, "/commands", {}, {}));
      if (!res.ok()) return res.error();
      if (res->result_int() != 200) return error_of(*res, "list commands");
      auto v = parse_json_strict(res->body());
      const json::value* cmds =
          v.ok() && v->is_object() ? v->as_object().if_contains("commands") : nullptr;
      if (cmds == nullptr || !cmds->is_array()) {
        return internal_error("the command server sent a bad GET /commands answer");
      }
      for (const auto& c : cmds->as_array()) {
        if (!c.is_object()) continue;
        const auto& o = c.as_object();
        CommandInfo ci{str_of(o, "name"), str_of(o, "description"), "remote", {}};
        if (auto* args = o.if_contains("args"); args && args->is_array()) {
          for (const auto& a : args->as_array()) {
            if (!a.is_object()) continue;
            const auto& ao = a.as_object();
            CommandArgInfo ai{str_of(ao, "name"), str_of(ao, "type"), false, nullptr,
                              str_of(ao, "description")};
            if (auto* r = ao.if_contains("required"); r && r->is_bool()) ai.required = r->as_bool();
            if (auto* d = ao.if_contains("default")) ai.default_value = *d;
            ci.args.push_back(std::move(ai));
          }
        }
        seen.insert(ci.name);
        out.push_back(std::move(ci));
      }
    }
    if ((*sb)->tmpl) {
      for (const auto& cc : (*sb)->tmpl->custom_commands) {
        if (seen.contains(cc.name)) continue;
        CommandInfo ci{cc.name, cc.description, "yaml", {}};
        for (const auto& a : cc.args) {
          ci.args.push_back({a.name, std::string(registry::arg_type_name(a.type)), a.required,
                             a.default_value, a.description});
        }
        out.push_back(std::move(ci));
      }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
  }

  Result<json::value> call_command(const std::string& id, const std::string& name,
                                   const json::object& arguments) override {
    auto sb = live(id);
    if (!sb.ok()) return sb.error();
    const templates::Template* t = (*sb)->tmpl;
    const templates::CustomCommand* custom = nullptr;
    if (t) {
      for (const auto& cc : t->custom_commands) {
        if (cc.name == name) custom = &cc;
      }
    }
    if (t && t->server && command_name_ok(name)) {
      auto res = command_server(**sb, http::make_request(bhttp::verb::post, "/commands/" + name,
                                                         json::serialize(arguments)));
      if (!res.ok()) return res.error();
      if (res->result_int() == 200) {
        auto v = parse_json_strict(res->body());
        if (!v.ok() || !v->is_object() || !v->as_object().contains("result")) {
          return internal_error("the command server sent a bad answer for '" + name + "'");
        }
        return v->as_object().at("result");
      }
      // Unknown to the server: maybe a custom command of the template (the lower layer).
      if (!(res->result_int() == 404 && custom != nullptr)) {
        return error_of(*res, "command '" + name + "'");
      }
    }
    if (custom == nullptr) {
      return not_found("sandbox '" + id + "' has no command '" + name.substr(0, 64) +
                       "' (see list_commands)");
    }
    if (!t->has(templates::Capability::kShell)) {
      return Error(ErrorCode::kFailedPrecondition,
                   "sandbox '" + id + "' (template " + t->id + ") lacks the 'shell' capability");
    }
    auto rendered = templates::render_custom_command(*custom, json::value(arguments));
    if (!rendered.ok()) return rendered.error();
    ShellRequest sr;
    sr.timeout = std::chrono::seconds(300);
    auto r = run_argv(**sb, {"/bin/sh", "-c", *rendered}, sr);
    if (!r.ok()) return r.error();
    return json::value(json::object{
        {"exitCode", r->exit_code}, {"stdout", r->stdout_data}, {"stderr", r->stderr_data}});
  }

 private:
  Result<std::shared_ptr<LiveSandbox>> live(const std::string& id,
                                            std::optional<templates::Capability> cap = {},
                                            const char* cap_name = "") {
    std::shared_ptr<LiveSandbox> sb = valid_sandbox_id(id) ? sandboxes_.find(id) : nullptr;
    if (!sb) return not_found("sandbox '" + id.substr(0, 64) + "' not found");
    if (cap && sb->tmpl && !sb->tmpl->has(*cap)) {
      return Error(ErrorCode::kFailedPrecondition, "sandbox '" + id + "' (template " +
                                                       sb->tmpl->id + ") lacks the '" + cap_name +
                                                       "' capability");
    }
    return sb;
  }

  Result<Response> to_port(LiveSandbox& sb, std::uint16_t port, Request req,
                           std::chrono::milliseconds timeout,
                           std::size_t body_limit = kMaxResponseBytes,
                           std::chrono::milliseconds wait_listening = {}) {
    if (!sb.access_token.empty()) req.set("X-Access-Token", sb.access_token);
    auto until = std::chrono::steady_clock::now() + wait_listening;
    for (;;) {
      auto fd = sandboxes_.connect(sb.record.id, port);
      if (fd.ok()) return exchange(std::move(*fd), std::move(req), timeout, body_limit);
      // The command server starts just after envd: give it a moment before giving up.
      if (fd.error().code() != ErrorCode::kUnavailable ||
          std::chrono::steady_clock::now() > until) {
        if (fd.error().code() == ErrorCode::kUnavailable) {
          return unavailable("nothing listens on port " + std::to_string(port) + " in sandbox '" +
                             sb.record.id + "'");
        }
        return fd.error();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }

  Result<Response> envd(LiveSandbox& sb, Request req, std::chrono::milliseconds timeout,
                        std::size_t body_limit = kMaxResponseBytes) {
    return to_port(sb, kEnvdPort, std::move(req), timeout, body_limit);
  }

  Result<Response> command_server(LiveSandbox& sb, Request req) {
    return to_port(sb, sb.tmpl->server->port, std::move(req), std::chrono::seconds(300),
                   kMaxResponseBytes, std::chrono::seconds(5));
  }

  // envd's process.Process/Start: one Connect server stream, read whole (it ends with the
  // process).
  Result<ShellResult> run_argv(LiveSandbox& sb, const std::vector<std::string>& argv,
                               const ShellRequest& sr) {
    json::object process{{"cmd", argv.front()}};
    json::array args;
    for (std::size_t i = 1; i < argv.size(); ++i) args.emplace_back(argv[i]);
    process["args"] = std::move(args);
    if (!sr.envs.empty()) {
      json::object envs;
      for (const auto& [k, v] : sr.envs) envs[k] = v;
      process["envs"] = std::move(envs);
    }
    if (!sr.cwd.empty()) process["cwd"] = sr.cwd;
    auto req = http::make_request(
        bhttp::verb::post, "/process.Process/Start",
        envelope(json::serialize(json::object{{"process", std::move(process)}, {"stdin", false}})),
        "application/connect+json");
    req.set("Connect-Protocol-Version", "1");
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(sr.timeout);
    req.set("Connect-Timeout-Ms", std::to_string(timeout.count()));
    auto started = std::chrono::steady_clock::now();
    // envd kills the process at its deadline; the grace covers the stream's last frames.
    auto res = envd(sb, std::move(req), timeout + std::chrono::seconds(10));
    if (!res.ok()) return res.error();
    if (res->result_int() != 200) return error_of(*res, "run");
    ShellResult out;
    bool got_end = false;
    std::string_view body = res->body();
    while (!body.empty()) {
      if (body.size() < 5) return internal_error("envd: truncated process stream");
      auto flags = static_cast<std::uint8_t>(body[0]);
      std::uint32_t n = (static_cast<std::uint32_t>(static_cast<unsigned char>(body[1])) << 24) |
                        (static_cast<std::uint32_t>(static_cast<unsigned char>(body[2])) << 16) |
                        (static_cast<std::uint32_t>(static_cast<unsigned char>(body[3])) << 8) |
                        static_cast<std::uint32_t>(static_cast<unsigned char>(body[4]));
      if (body.size() - 5 < n) return internal_error("envd: truncated process stream");
      auto v = parse_json_strict(body.substr(5, n));
      body.remove_prefix(5 + n);
      if (!v.ok() || !v->is_object()) return internal_error("envd: bad JSON in process stream");
      const auto& o = v->as_object();
      if (flags & kEndStreamFlag) {
        if (auto* e = o.if_contains("error"); e && e->is_object()) {
          const auto& eo = e->as_object();
          ErrorCode c = code_of_connect(str_of(eo, "code"));
          if (c == ErrorCode::kDeadlineExceeded) break;  // judged below, with the exit code
          return Error(c, "run: " + str_of(eo, "message"));
        }
        break;
      }
      const json::value* ev = o.if_contains("event");
      if (ev == nullptr || !ev->is_object()) continue;
      const auto& eo = ev->as_object();
      if (auto* d = eo.if_contains("data"); d && d->is_object()) {
        for (const char* stream : {"stdout", "stderr"}) {
          auto* b = d->as_object().if_contains(stream);
          if (b == nullptr || !b->is_string()) continue;
          auto bytes = b64_decode(b->as_string());
          if (!bytes.ok()) return bytes.error();
          (std::string_view(stream) == "stderr" ? out.stderr_data : out.stdout_data).append(*bytes);
        }
      } else if (auto* e = eo.if_contains("end"); e && e->is_object()) {
        got_end = true;
        const auto& end = e->as_object();
        if (auto* c = end.if_contains("exitCode"); c && c->is_number()) {
          out.exit_code = c->to_number<int>();
        }
        out.error = str_of(end, "error");
      }
    }
    // A process killed at its deadline is a timeout, as in the SDKs, not an ordinary exit.
    if (std::chrono::steady_clock::now() - started >= sr.timeout &&
        (!got_end || out.exit_code != 0)) {
      return Error(ErrorCode::kDeadlineExceeded,
                   "command timed out after " + std::to_string(sr.timeout.count()) + " s" +
                       (out.error.empty() ? "" : " (" + out.error + ")"));
    }
    if (!got_end) return unavailable("the process stream ended without an end event");
    return out;
  }

  SandboxManager& sandboxes_;
  store::Store& store_;
};

// --- Streamable HTTP ---

struct Session {
  std::string id;
  std::string credential;
  mcp::SessionState state;
};

std::string_view origin_host(std::string_view origin) {
  auto p = origin.find("://");
  if (p == std::string_view::npos) return {};
  origin.remove_prefix(p + 3);
  if (auto slash = origin.find('/'); slash != std::string_view::npos)
    origin = origin.substr(0, slash);
  if (!origin.empty() && origin.front() == '[') {
    auto close = origin.find(']');
    return close == std::string_view::npos ? std::string_view{} : origin.substr(0, close + 1);
  }
  return origin.substr(0, origin.find(':'));
}

// The credential a session is bound to: the API key, or the access key of a signed request.
std::string credential_of(const Request& req) {
  if (auto k = req["X-API-KEY"]; !k.empty()) return "key:" + std::string(k);
  std::string_view a = req[bhttp::field::authorization];
  if (a.size() > 7 && beast::iequals(a.substr(0, 7), "bearer ")) {
    return "key:" + std::string(a.substr(7));
  }
  if (auto c = a.find("Credential="); c != std::string_view::npos) {
    auto rest = a.substr(c + 11);
    return "ak:" + std::string(rest.substr(0, rest.find_first_of(", ")));
  }
  return {};
}

Response rpc_error_response(const Error& e, unsigned version, bool keep_alive) {
  return http::json_response(http::http_status(e.code()), mcp::error_response(e, nullptr), version,
                             keep_alive);
}

Response empty(bhttp::status status, unsigned version, bool keep_alive) {
  Response r{status, version};
  r.keep_alive(keep_alive);
  r.prepare_payload();
  return r;
}

}  // namespace

std::unique_ptr<PlatformBackend> make_abxd_backend(SandboxManager& sandboxes, store::Store& store) {
  return std::make_unique<AbxdBackend>(sandboxes, store);
}

struct PlatformMcpEndpoint::Impl {
  Impl(SandboxManager& sm, store::Store& st)
      : backend(sm, st), tools(backend), dispatcher(platform_server_info("abxd")) {}

  AbxdBackend backend;
  PlatformTools tools;
  mcp::Dispatcher dispatcher;
  std::mutex mu;
  std::list<std::shared_ptr<Session>> lru;  // most recently used first
  std::unordered_map<std::string, std::list<std::shared_ptr<Session>>::iterator> by_id;

  Result<std::shared_ptr<Session>> session_of(const Request& req, const std::string& credential) {
    auto id = req["Mcp-Session-Id"];
    if (id.empty()) {
      return mcp::invalid_request(
          "Mcp-Session-Id header is required (send initialize first to open a session)");
    }
    std::lock_guard lock(mu);
    auto it = by_id.find(std::string(id));
    // A session opened with another credential is as unknown as a made-up id.
    if (it == by_id.end() || !token::constant_time_equal((*it->second)->credential, credential)) {
      return mcp::session_not_found("unknown or ended MCP session (send initialize again)");
    }
    lru.splice(lru.begin(), lru, it->second);
    return *it->second;
  }

  void insert(std::shared_ptr<Session> s) {
    std::lock_guard lock(mu);
    while (lru.size() >= kMaxSessions) {
      by_id.erase(lru.back()->id);
      lru.pop_back();
    }
    lru.push_front(s);
    by_id[s->id] = lru.begin();
  }

  void erase(const std::string& id) {
    std::lock_guard lock(mu);
    auto it = by_id.find(id);
    if (it == by_id.end()) return;
    lru.erase(it->second);
    by_id.erase(it);
  }
};

PlatformMcpEndpoint::PlatformMcpEndpoint(SandboxManager& sandboxes, store::Store& store)
    : impl_(std::make_unique<Impl>(sandboxes, store)) {}
PlatformMcpEndpoint::~PlatformMcpEndpoint() = default;

Response PlatformMcpEndpoint::handle(const Request& req) {
  const unsigned v = req.version();
  const bool ka = req.keep_alive();
  if (auto origin = req[bhttp::field::origin]; !origin.empty()) {
    std::string_view host = origin_host(origin);
    if (!beast::iequals(host, "localhost") && host != "127.0.0.1" && host != "[::1]") {
      std::string shown = std::string(origin.substr(0, 100));
      return rpc_error_response(
          Error(ErrorCode::kPermissionDenied, "Origin '" + shown + "' may not use /mcp"), v, ka);
    }
  }
  if (req.method() != bhttp::verb::post && req.method() != bhttp::verb::delete_) {
    Response r = rpc_error_response(
        Error(ErrorCode::kMethodNotAllowed,
              "/mcp takes POST (messages) and DELETE (end a session); this server sends no "
              "messages of its own, so there is no GET stream"),
        v, ka);
    r.set(bhttp::field::allow, "POST, DELETE");
    return r;
  }
  const std::string credential = credential_of(req);
  if (req.method() == bhttp::verb::delete_) {
    auto s = impl_->session_of(req, credential);
    if (!s.ok()) return rpc_error_response(s.error(), v, ka);
    impl_->erase((*s)->id);
    return empty(bhttp::status::no_content, v, ka);
  }
  if (auto ct = req[bhttp::field::content_type];
      !ct.empty() && !beast::iequals(ct.substr(0, ct.find(';')), "application/json")) {
    return rpc_error_response(
        Error(ErrorCode::kUnsupportedMediaType, "/mcp takes application/json"), v, ka);
  }

  mcp::Decoded d = mcp::decode(req.body(), impl_->dispatcher.limits());
  if (!d.message) return http::json_response(400, *d.error_reply, v, ka);
  const mcp::Message& m = *d.message;
  const bool init = m.kind == mcp::Message::Kind::kRequest && m.method == "initialize";
  std::shared_ptr<Session> session;
  if (init) {
    if (!req["Mcp-Session-Id"].empty()) {
      return rpc_error_response(
          mcp::invalid_request("initialize opens a new session: send it without Mcp-Session-Id"), v,
          ka);
    }
    session = std::make_shared<Session>();
    session->credential = credential;
  } else {
    auto s = impl_->session_of(req, credential);
    if (!s.ok()) return rpc_error_response(s.error(), v, ka);
    session = std::move(*s);
    auto version = req["MCP-Protocol-Version"];
    if (!version.empty() && version != session->state.protocol_version) {
      return rpc_error_response(
          mcp::invalid_request("MCP-Protocol-Version '" + std::string(version.substr(0, 32)) +
                               "' is not this session's (" + session->state.protocol_version + ")"),
          v, ka);
    }
  }

  // Tools run on this (worker) thread, so the reply is ready when dispatch returns; the
  // promise keeps that an implementation detail of PlatformTools.
  std::promise<std::optional<json::object>> reply;
  auto fut = reply.get_future();
  impl_->dispatcher.dispatch(
      m, session->state, impl_->tools,
      [&reply](std::optional<json::object> r) { reply.set_value(std::move(r)); });
  auto r = fut.get();
  if (!r) return empty(bhttp::status::accepted, v, ka);
  Response res = http::json_response(200, *r, v, ka);
  if (init && session->state.initialized.load()) {
    auto id = token::random_hex(kSessionIdBytes);
    if (!id.ok()) return rpc_error_response(id.error(), v, ka);
    session->id = std::move(*id);
    impl_->insert(session);
    res.set("Mcp-Session-Id", session->id);
  }
  return res;
}

Response serve_platform_mcp(SandboxManager& sandboxes, store::Store& store, const Request& req) {
  static std::mutex mu;
  static std::map<std::pair<SandboxManager*, store::Store*>, std::unique_ptr<PlatformMcpEndpoint>>
      endpoints;
  PlatformMcpEndpoint* ep = nullptr;
  {
    std::lock_guard lock(mu);
    auto& slot = endpoints[{&sandboxes, &store}];
    if (!slot) slot = std::make_unique<PlatformMcpEndpoint>(sandboxes, store);
    ep = slot.get();
  }
  return ep->handle(req);
}

}  // namespace abx::platform
