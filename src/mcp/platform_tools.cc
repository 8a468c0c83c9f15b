#include "abx/mcp/platform_tools.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <map>
#include <stdexcept>

#include "abx/base/base64.h"
#include "abx/base/json.h"

namespace abx::mcp {

namespace json = boost::json;

namespace {

constexpr std::int64_t kMaxTimeoutSeconds = 24 * 3600;

json::object str_schema(std::string description) {
  return {{"type", "string"}, {"description", std::move(description)}};
}

json::object int_schema(std::string description, std::int64_t lo, std::int64_t hi) {
  return {{"type", "integer"},
          {"minimum", lo},
          {"maximum", hi},
          {"description", std::move(description)}};
}

json::object string_map_schema(std::string description) {
  return {{"type", "object"},
          {"additionalProperties", json::object{{"type", "string"}}},
          {"description", std::move(description)}};
}

json::object object_schema(json::object properties, std::vector<std::string> required) {
  json::array req;
  for (auto& r : required) req.emplace_back(r);
  json::object o{{"type", "object"}, {"properties", std::move(properties)}};
  if (!req.empty()) o["required"] = std::move(req);
  o["additionalProperties"] = false;
  return o;
}

// Output schemas describe what structuredContent holds; they stay open (no
// additionalProperties) so a backend may add fields without breaking strict clients.
json::object out_schema(json::object properties, std::vector<std::string> required) {
  json::array req;
  for (auto& r : required) req.emplace_back(r);
  return {{"type", "object"}, {"properties", std::move(properties)}, {"required", std::move(req)}};
}

json::object hints(bool read_only, bool destructive, bool idempotent) {
  json::object a{{"readOnlyHint", read_only}, {"openWorldHint", false}};
  if (!read_only) {
    a["destructiveHint"] = destructive;
    a["idempotentHint"] = idempotent;
  }
  return a;
}

json::object sandbox_id_prop() {
  return {{"sandboxId", str_schema("The sandbox's id (from create_sandbox or list_sandboxes).")}};
}

json::object summary_schema() {
  return out_schema({{"sandboxId", json::object{{"type", "string"}}},
                     {"templateId", json::object{{"type", "string"}}},
                     {"state", json::object{{"type", "string"}}},
                     {"startedAt", json::object{{"type", "string"}}},
                     {"endAt", json::object{{"type", "string"}}},
                     {"metadata", json::object{{"type", "object"}}}},
                    {"sandboxId", "templateId"});
}

json::object with_id(json::object more) {
  json::object p = sandbox_id_prop();
  for (auto& kv : more) p[kv.key()] = kv.value();
  return p;
}

// One function per tool: its name, title, description, input and output schemas, hints.
Tool create_sandbox_tool() {
  return {
      "create_sandbox",
      "Create sandbox",
      "Create an isolated Linux sandbox from a template and return its id. Sandboxes are killed "
      "when their timeout passes.",
      object_schema(
          {{"template",
            json::object{
                {"type", "string"},
                {"default", "base"},
                {"description", "Template id (e.g. 'base'; 'demo' also runs a command server)."}}},
           {"timeoutSeconds",
            int_schema("Lifetime in seconds (default: the template's).", 1, kMaxTimeoutSeconds)},
           {"envs", string_map_schema("Environment variables for processes in the sandbox.")},
           {"metadata", string_map_schema("Labels to find the sandbox by later.")}},
          {}),
      summary_schema(),
      hints(false, false, false)};
}

Tool list_sandboxes_tool() {
  return {"list_sandboxes",
          "List sandboxes",
          "List the running and paused sandboxes.",
          object_schema({}, {}),
          out_schema({{"sandboxes", json::object{{"type", "array"}, {"items", summary_schema()}}}},
                     {"sandboxes"}),
          hints(true, false, true)};
}

Tool kill_sandbox_tool() {
  return {"kill_sandbox",
          "Kill sandbox",
          "Kill a sandbox and everything running in it. Its files are gone afterwards.",
          object_schema(sandbox_id_prop(), {"sandboxId"}),
          out_schema({{"sandboxId", json::object{{"type", "string"}}},
                      {"killed", json::object{{"type", "boolean"}}}},
                     {"sandboxId", "killed"}),
          hints(false, true, true)};
}

Tool run_shell_tool() {
  return {"run_shell",
          "Run shell command",
          "Run a shell command (bash -l -c) in a sandbox and wait for it; returns its exit code, "
          "stdout and stderr (each cut at 256 KiB). A non-zero exit code is not an error.",
          object_schema(with_id({{"command", str_schema("The shell command line.")},
                                 {"cwd", str_schema("Working directory (default: the home).")},
                                 {"timeoutSeconds", int_schema("Kill it after this many seconds "
                                                               "(default 60).",
                                                               1, 3600)},
                                 {"envs", string_map_schema("Extra environment variables.")}}),
                        {"sandboxId", "command"}),
          out_schema({{"exitCode", json::object{{"type", "integer"}}},
                      {"stdout", json::object{{"type", "string"}}},
                      {"stderr", json::object{{"type", "string"}}},
                      {"truncated", json::object{{"type", "boolean"}}}},
                     {"exitCode", "stdout", "stderr"}),
          hints(false, true, false)};
}

Tool read_file_tool() {
  return {"read_file",
          "Read file",
          "Read a file in a sandbox (up to 4 MiB). Text comes back as is; other bytes as "
          "base64 (encoding says which).",
          object_schema(with_id({{"path", str_schema("Absolute path in the sandbox.")}}),
                        {"sandboxId", "path"}),
          out_schema({{"path", json::object{{"type", "string"}}},
                      {"content", json::object{{"type", "string"}}},
                      {"encoding",
                       json::object{{"type", "string"}, {"enum", json::array{"utf8", "base64"}}}},
                      {"size", json::object{{"type", "integer"}}}},
                     {"path", "content", "encoding", "size"}),
          hints(true, false, true)};
}

Tool write_file_tool() {
  return {"write_file",
          "Write file",
          "Write a file in a sandbox, creating parent directories and replacing what was there.",
          object_schema(
              with_id({{"path", str_schema("Absolute path in the sandbox.")},
                       {"content", str_schema("The file's content.")},
                       {"encoding", json::object{{"type", "string"},
                                                 {"enum", json::array{"utf8", "base64"}},
                                                 {"default", "utf8"},
                                                 {"description", "How content is encoded."}}}}),
              {"sandboxId", "path", "content"}),
          out_schema({{"path", json::object{{"type", "string"}}},
                      {"size", json::object{{"type", "integer"}}}},
                     {"path", "size"}),
          hints(false, true, true)};
}

Tool list_files_tool() {
  return {
      "list_files",
      "List files",
      "List a directory in a sandbox.",
      object_schema(with_id({{"path", str_schema("Absolute directory path in the sandbox.")},
                             {"depth", int_schema("How deep to descend (default 1).", 1, 10)}}),
                    {"sandboxId", "path"}),
      out_schema({{"entries",
                   json::object{{"type", "array"},
                                {"items", out_schema({{"name", json::object{{"type", "string"}}},
                                                      {"path", json::object{{"type", "string"}}},
                                                      {"type", json::object{{"type", "string"}}},
                                                      {"size", json::object{{"type", "integer"}}}},
                                                     {"name", "path", "type"})}}}},
                 {"entries"}),
      hints(true, false, true)};
}

Tool list_commands_tool() {
  return {"list_commands",
          "List sandbox commands",
          "List the commands a sandbox offers: its command server's registered commands (source "
          "'remote') and its template's custom shell commands (source 'yaml'), each with typed "
          "arguments. Call one with call_command.",
          object_schema(sandbox_id_prop(), {"sandboxId"}),
          out_schema({{"commands", json::object{{"type", "array"}}}}, {"commands"}),
          hints(true, false, true)};
}

Tool call_command_tool() {
  return {"call_command",
          "Call sandbox command",
          "Call a command of a sandbox (see list_commands) with keyword arguments; returns "
          "its result.",
          object_schema(with_id({{"name", str_schema("The command's name.")},
                                 {"arguments", json::object{{"type", "object"},
                                                            {"description",
                                                             "Keyword arguments, as "
                                                             "list_commands describes."}}}}),
                        {"sandboxId", "name"}),
          out_schema({{"result", json::object{}}}, {"result"}),
          json::object{}};
}

Tool run_code_tool() {
  return {"run_code",
          "Run code",
          "Run Python code in a sandbox's code interpreter (a sandbox of template "
          "'code-interpreter'): variables, imports and figures persist between calls of one "
          "context, like a notebook. Returns stdout, stderr, the value of the last expression "
          "(text), rich results (matplotlib figures come back as images) and the exception, if "
          "the code raised one (then isError is set).",
          object_schema(
              with_id({{"code", str_schema("The code to run.")},
                       {"contextId", str_schema("Run in this context (default: the default "
                                                "Python context).")},
                       {"language", str_schema("Run in this language's default context "
                                               "(default python; not with contextId).")},
                       {"envs", string_map_schema("Environment variables for this run only.")},
                       {"timeoutSeconds",
                        int_schema("Interrupt the code after this many seconds (default 60); "
                                   "the context keeps its state.",
                                   1, 3600)}}),
              {"sandboxId", "code"}),
          out_schema({{"stdout", json::object{{"type", "string"}}},
                      {"stderr", json::object{{"type", "string"}}},
                      {"text", json::object{{"type", "string"}}},
                      {"results", json::object{{"type", "array"}}},
                      {"error", json::object{{"type", "object"}}},
                      {"executionCount", json::object{{"type", "integer"}}},
                      {"truncated", json::object{{"type", "boolean"}}}},
                     {"stdout", "stderr", "text", "results"}),
          hints(false, true, false)};
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;  // continuation bytes
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      n = 1;
    } else if ((c >> 4) == 0xE) {
      n = 2;
    } else if ((c >> 3) == 0x1E) {
      n = 3;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    std::uint32_t cp = c & (0x3F >> n);
    for (std::size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// --- argument checking against the tool's own input schema (the subset build_tools uses) ---

// "null", or the kind with its article: "a string", "an object".
std::string describe(const json::value& v) {
  const std::string_view kind = json_kind_name(v);
  if (v.is_null()) return std::string(kind);
  return (kind[0] == 'a' || kind[0] == 'o' ? "an " : "a ") + std::string(kind);
}

Status check_value(const std::string& path, const json::object& schema, const json::value& v) {
  // `path` names the argument (`envs.A` for a member); messages quote it.
  const std::string where = "argument '" + path + "'";
  std::string_view type = schema.at("type").as_string();
  if (type == "string") {
    if (!v.is_string()) return invalid_argument(where + " must be a string, not " + describe(v));
    if (auto* e = schema.if_contains("enum")) {
      const auto& allowed = e->as_array();
      if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
        return invalid_argument(where + " must be one of " + json::serialize(allowed));
      }
    }
    return {};
  }
  if (type == "integer") {
    if (!v.is_int64() && !(v.is_uint64()) &&
        !(v.is_double() && v.as_double() == std::floor(v.as_double()))) {
      return invalid_argument(where + " must be an integer, not " + describe(v));
    }
    double d = v.to_number<double>();
    if (d < schema.at("minimum").to_number<double>() ||
        d > schema.at("maximum").to_number<double>()) {
      return invalid_argument(where + " must be between " + json::serialize(schema.at("minimum")) +
                              " and " + json::serialize(schema.at("maximum")));
    }
    return {};
  }
  if (type == "object") {
    if (!v.is_object()) return invalid_argument(where + " must be an object, not " + describe(v));
    if (auto* ap = schema.if_contains("additionalProperties"); ap && ap->is_object()) {
      for (const auto& kv : v.as_object()) {
        auto st = check_value(path + "." + std::string(kv.key()), ap->as_object(), kv.value());
        if (!st.ok()) return st;
      }
    }
    return {};
  }
  return {};
}

Status check_arguments(const Tool& tool, const json::object& args) {
  const auto& props = tool.input_schema.at("properties").as_object();
  for (const auto& kv : args) {
    const auto* p = props.if_contains(kv.key());
    if (p == nullptr) {
      std::string k(kv.key().substr(0, 64));
      return invalid_argument("unknown argument '" + k + "' for tool '" + tool.name + "'");
    }
    auto st = check_value(std::string(kv.key()), p->as_object(), kv.value());
    if (!st.ok()) return st;
  }
  if (auto* req = tool.input_schema.if_contains("required")) {
    for (const auto& r : req->as_array()) {
      if (!args.contains(r.as_string())) {
        return invalid_argument("missing required argument '" + std::string(r.as_string()) +
                                "' for tool '" + tool.name + "'");
      }
    }
  }
  return {};
}

// The tools' argument readers. The arguments were checked against the tool's schema first
// (check_arguments), so a reader's error is a bug here: it throws, and tools/call answers it as
// an internal error, as a failing tool body does.
template <class T>
T or_throw(Result<T> r) {
  if (!r.ok()) throw std::invalid_argument(r.error().message());
  return std::move(*r);
}

std::string str_arg(const json::object& a, std::string_view k, std::string dflt = {}) {
  return or_throw(json_optional_string(a, k, "arguments")).value_or(std::move(dflt));
}

std::optional<std::int64_t> int_arg(const json::object& a, std::string_view k) {
  const json::value* v = json_find(a, k);
  // JSON Schema's "integer" includes 3.0, which check_value accepts (in the schema's range).
  if (v != nullptr && v->is_double()) return static_cast<std::int64_t>(v->get_double());
  return or_throw(json_optional_int(a, k, "arguments"));
}

std::map<std::string, std::string> map_arg(const json::object& a, std::string_view k) {
  return or_throw(json_optional_string_map(a, k, "arguments"));
}

json::object summary_json(const SandboxSummary& s) {
  json::object meta;
  for (const auto& [k, v] : s.metadata) meta[k] = v;
  json::object o{{"sandboxId", s.sandbox_id}, {"templateId", s.template_id}};
  if (!s.state.empty()) o["state"] = s.state;
  if (!s.started_at.empty()) o["startedAt"] = s.started_at;
  if (!s.end_at.empty()) o["endAt"] = s.end_at;
  o["metadata"] = std::move(meta);
  return o;
}

ToolResult structured(json::object o) {
  ToolResult r;
  r.text = json::serialize(o);
  r.structured = std::move(o);
  return r;
}

// Cuts at kMaxShellOutputBytes without splitting a UTF-8 sequence, and makes the rest valid
// UTF-8 (JSON strings must be): invalid bytes become U+FFFD.
std::string clean_output(const std::string& s, bool& truncated) {
  std::string_view in = s;
  if (in.size() > kMaxShellOutputBytes) {
    truncated = true;
    std::size_t cut = kMaxShellOutputBytes;
    while (cut > 0 && (static_cast<unsigned char>(in[cut]) & 0xC0) == 0x80) --cut;
    in = in.substr(0, cut);
  }
  if (valid_utf8(in)) return std::string(in);
  std::string out;
  for (std::size_t i = 0; i < in.size();) {
    // Take the longest valid prefix sequence of up to 4 bytes.
    std::size_t n = 1;
    for (std::size_t k = 4; k >= 1; --k) {
      if (i + k <= in.size() && valid_utf8(in.substr(i, k))) {
        n = k;
        break;
      }
      if (k == 1) n = 0;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(in.substr(i, n));
      i += n;
    }
  }
  return out;
}

json::object command_json(const CommandInfo& c) {
  json::array args;
  for (const auto& a : c.args) {
    json::object o{{"name", a.name}, {"type", a.type}, {"required", a.required}};
    o["default"] = a.default_value;
    o["description"] = a.description;
    args.push_back(std::move(o));
  }
  return {{"name", c.name},
          {"description", c.description},
          {"source", c.source},
          {"args", std::move(args)}};
}

// --- the tools' bodies: arguments already checked against the schema; a backend's error is a
// tool result with isError (the model's to read), a protocol error an Error ---

using ToolOutcome = Result<ToolResult>;

ToolOutcome create_sandbox(PlatformBackend& b, const json::object& args) {
  SandboxSpec spec;
  spec.template_id = str_arg(args, "template", "base");
  spec.timeout_seconds = int_arg(args, "timeoutSeconds");
  spec.envs = map_arg(args, "envs");
  spec.metadata = map_arg(args, "metadata");
  auto r = b.create_sandbox(spec);
  if (!r.ok()) return tool_error(r.error());
  return structured(summary_json(*r));
}

ToolOutcome list_sandboxes(PlatformBackend& b, const json::object&) {
  auto r = b.list_sandboxes();
  if (!r.ok()) return tool_error(r.error());
  json::array out;
  for (const auto& s : *r) out.push_back(summary_json(s));
  return structured({{"sandboxes", std::move(out)}});
}

ToolOutcome kill_sandbox(PlatformBackend& b, const json::object& args) {
  const std::string id = str_arg(args, "sandboxId");
  auto r = b.kill_sandbox(id);
  if (!r.ok()) return tool_error(r.error());
  if (!*r) return tool_error(not_found("sandbox '" + id + "' not found"));
  return structured({{"sandboxId", id}, {"killed", true}});
}

ToolOutcome run_shell(PlatformBackend& b, const json::object& args) {
  ShellRequest req;
  req.command = str_arg(args, "command");
  req.cwd = str_arg(args, "cwd");
  req.timeout = std::chrono::seconds(int_arg(args, "timeoutSeconds").value_or(60));
  req.envs = map_arg(args, "envs");
  auto r = b.run_shell(str_arg(args, "sandboxId"), req);
  if (!r.ok()) return tool_error(r.error());
  bool truncated = false;
  json::object o{{"exitCode", r->exit_code},
                 {"stdout", clean_output(r->stdout_data, truncated)},
                 {"stderr", clean_output(r->stderr_data, truncated)}};
  o["truncated"] = truncated;
  if (!r->error.empty()) o["error"] = r->error;
  return structured(std::move(o));
}

ToolOutcome read_file(PlatformBackend& b, const json::object& args) {
  std::string path = str_arg(args, "path");
  auto r = b.read_file(str_arg(args, "sandboxId"), path);
  if (!r.ok()) return tool_error(r.error());
  if (r->size() > kMaxReadFileBytes) {
    return tool_error(Error(ErrorCode::kPayloadTooLarge,
                            path + " is " + std::to_string(r->size()) +
                                " bytes, over the 4 MiB read_file limit: read parts of it with "
                                "run_shell (head, tail, sed -n)"));
  }
  const bool text = valid_utf8(*r);
  return structured({{"path", path},
                     {"content", text ? *r : base64_encode(*r)},
                     {"encoding", text ? "utf8" : "base64"},
                     {"size", static_cast<std::int64_t>(r->size())}});
}

ToolOutcome write_file(PlatformBackend& b, const json::object& args) {
  std::string path = str_arg(args, "path");
  std::string content = str_arg(args, "content");
  if (str_arg(args, "encoding", "utf8") == "base64") {
    auto bytes = base64_decode(content);
    if (!bytes.ok())
      return invalid_argument("content is not valid base64: " + bytes.error().message());
    content = std::move(*bytes);
  }
  if (Status st = b.write_file(str_arg(args, "sandboxId"), path, content); !st.ok()) {
    return tool_error(st.error());
  }
  return structured({{"path", path}, {"size", static_cast<std::int64_t>(content.size())}});
}

ToolOutcome list_files(PlatformBackend& b, const json::object& args) {
  auto r = b.list_files(str_arg(args, "sandboxId"), str_arg(args, "path"),
                        static_cast<int>(int_arg(args, "depth").value_or(1)));
  if (!r.ok()) return tool_error(r.error());
  json::array out;
  for (const auto& e : *r) {
    out.push_back(
        json::object{{"name", e.name}, {"path", e.path}, {"type", e.type}, {"size", e.size}});
  }
  return structured({{"entries", std::move(out)}});
}

ToolOutcome list_commands(PlatformBackend& b, const json::object& args) {
  auto r = b.list_commands(str_arg(args, "sandboxId"));
  if (!r.ok()) return tool_error(r.error());
  json::array out;
  for (const auto& c : *r) out.push_back(command_json(c));
  return structured({{"commands", std::move(out)}});
}

ToolOutcome call_command(PlatformBackend& b, const json::object& args) {
  json::object kwargs;
  if (auto* a = args.if_contains("arguments")) kwargs = a->as_object();
  auto r = b.call_command(str_arg(args, "sandboxId"), str_arg(args, "name"), kwargs);
  if (!r.ok()) return tool_error(r.error());
  return structured({{"result", std::move(*r)}});
}

// Terminal colour sequences (IPython colours its tracebacks) mean nothing to a model.
std::string strip_ansi(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < s.size() && !(s[j] >= '@' && s[j] <= '~')) ++j;
      i = j;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

std::string json_str(const json::object& o, std::string_view k) {
  if (auto* v = o.if_contains(k); v && v->is_string()) return std::string(v->as_string());
  return {};
}

std::string joined(const json::value* chunks) {
  std::string s;
  if (chunks == nullptr || !chunks->is_array()) return s;
  for (const auto& c : chunks->as_array()) {
    if (c.is_string()) s += c.as_string();
  }
  return s;
}

ToolOutcome run_code(PlatformBackend& b, const json::object& args) {
  CodeRequest req;
  req.code = str_arg(args, "code");
  req.context_id = str_arg(args, "contextId");
  req.language = str_arg(args, "language");
  if (!req.context_id.empty() && !req.language.empty()) {
    return invalid_argument("give contextId or language, not both");
  }
  req.envs = map_arg(args, "envs");
  req.timeout = std::chrono::seconds(int_arg(args, "timeoutSeconds").value_or(60));
  auto r = b.run_code(str_arg(args, "sandboxId"), req);
  if (!r.ok()) return tool_error(r.error());
  const json::object& ex = *r;
  const json::object* logs = nullptr;
  if (auto* l = ex.if_contains("logs"); l && l->is_object()) logs = &l->as_object();
  bool truncated = false;
  std::string out = clean_output(joined(logs ? logs->if_contains("stdout") : nullptr), truncated);
  std::string err = clean_output(joined(logs ? logs->if_contains("stderr") : nullptr), truncated);

  // Results are summarised (formats, text); their images become image content items, which
  // a model sees as pictures, instead of base64 inside the JSON.
  std::vector<ImageContent> images;
  json::array results;
  std::string main_text;
  if (auto* rs = ex.if_contains("results"); rs && rs->is_array()) {
    for (const auto& rv : rs->as_array()) {
      if (!rv.is_object()) continue;
      const auto& ro = rv.as_object();
      bool is_main = false;
      if (auto* m = ro.if_contains("isMainResult"); m && m->is_bool()) is_main = m->as_bool();
      json::array formats;
      for (const auto& kv : ro) {
        if (kv.key() != "isMainResult") formats.emplace_back(kv.key());
      }
      std::string rtext = clean_output(json_str(ro, "text"), truncated);
      json::object summary{{"isMainResult", is_main}, {"formats", std::move(formats)}};
      if (!rtext.empty()) summary["text"] = rtext;
      for (const auto& [key, mime] :
           {std::pair{"png", "image/png"}, std::pair{"jpeg", "image/jpeg"}}) {
        std::string data = json_str(ro, key);  // unwrapped base64 (libabx's to_json)
        if (data.empty()) continue;
        images.push_back({std::move(data), mime});
        summary["image"] = static_cast<std::int64_t>(images.size());  // its content item, from 1
      }
      if (is_main) main_text = rtext;
      results.push_back(std::move(summary));
    }
  }
  json::object o{
      {"stdout", out}, {"stderr", err}, {"text", main_text}, {"results", std::move(results)}};
  bool raised = false;
  if (auto* e = ex.if_contains("error"); e && e->is_object()) {
    const auto& eo = e->as_object();
    o["error"] =
        json::object{{"name", json_str(eo, "name")},
                     {"value", json_str(eo, "value")},
                     {"traceback", clean_output(strip_ansi(json_str(eo, "traceback")), truncated)}};
    raised = true;
  }
  if (auto* c = ex.if_contains("executionCount"); c && (c->is_int64() || c->is_uint64())) {
    o["executionCount"] = c->to_number<std::int64_t>();
  }
  o["truncated"] = truncated;
  ToolResult res = structured(std::move(o));
  res.images = std::move(images);
  res.is_error = raised;
  return res;
}

// The tools: each one's description and body, in name order (tools/list's order).
struct ToolEntry {
  Tool (*describe)();
  ToolOutcome (*run)(PlatformBackend&, const json::object&);
};

constexpr ToolEntry kTools[] = {
    {call_command_tool, call_command}, {create_sandbox_tool, create_sandbox},
    {kill_sandbox_tool, kill_sandbox}, {list_commands_tool, list_commands},
    {list_files_tool, list_files},     {list_sandboxes_tool, list_sandboxes},
    {read_file_tool, read_file},       {run_code_tool, run_code},
    {run_shell_tool, run_shell},       {write_file_tool, write_file},
};

const ToolEntry* find_tool(std::string_view name) {
  static const std::map<std::string, const ToolEntry*, std::less<>> by_name = [] {
    std::map<std::string, const ToolEntry*, std::less<>> m;
    for (const auto& e : kTools) m.emplace(e.describe().name, &e);
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

}  // namespace

const std::vector<Tool>& platform_tools() {
  static const std::vector<Tool> tools = [] {
    std::vector<Tool> t;
    for (const auto& e : kTools) t.push_back(e.describe());
    std::sort(t.begin(), t.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
    return t;
  }();
  return tools;
}

ServerInfo platform_server_info(std::string name) {
  return {std::move(name), "0.1.0",
          "abx sandboxes: create_sandbox gives you an isolated Linux machine; run_shell, "
          "read_file, write_file and list_files work inside it; list_commands and call_command "
          "reach the typed commands it offers; run_code runs Python with persistent state in a "
          "sandbox of template 'code-interpreter'. Kill sandboxes you no longer need."};
}

ToolResult tool_error(const Error& e) {
  ToolResult r;
  r.is_error = true;
  r.text = e.type() + ": " + e.message();
  return r;
}

PlatformTools::PlatformTools(PlatformBackend& backend)
    : backend_(backend), tools_(platform_tools()) {}

std::vector<Tool> PlatformTools::list_tools() { return tools_; }

void PlatformTools::call_tool(std::string_view name, const json::object& args, ToolDone done) {
  const ToolEntry* entry = find_tool(name);
  if (entry == nullptr) {
    std::string shown =
        name.size() > 64 ? std::string(name.substr(0, 64)) + "..." : std::string(name);
    return done(not_found("unknown tool '" + shown + "'"));
  }
  auto it =
      std::find_if(tools_.begin(), tools_.end(), [&](const Tool& t) { return t.name == name; });
  if (Status st = check_arguments(*it, args); !st.ok()) return done(st.error());
  done(entry->run(backend_, args));
}

}  // namespace abx::mcp
