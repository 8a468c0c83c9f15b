#include "abx/mcp/mcp.h"

#include <array>
#include <boost/json.hpp>
#include <exception>
#include <memory>

namespace abx::mcp {

namespace json = boost::json;

namespace {

constexpr std::array<std::string_view, 1> kVersions = {kLatestProtocolVersion};

constexpr std::string_view kParseErrorType = "ParseError";
constexpr std::string_view kInvalidRequestType = "InvalidRequest";
constexpr std::string_view kMethodNotFoundType = "MethodNotFound";
constexpr std::string_view kInvalidParamsType = "InvalidParams";
constexpr std::string_view kSessionNotFoundType = "SessionNotFound";

Decoded fail(const Error& e, const json::value& id = nullptr) {
  Decoded d;
  d.error_reply = error_response(e, id);
  return d;
}

bool valid_id(const json::value& id) { return id.is_string() || id.is_int64() || id.is_uint64(); }

bool is_notification_method(std::string_view method) {
  return method.substr(0, 14) == "notifications/";
}

// initialize's params: {"protocolVersion": string, "capabilities": object,
// "clientInfo": {"name": string, "version": string, ...}, ...}.
Result<std::string> check_initialize_params(const json::object& p) {
  auto* v = p.if_contains("protocolVersion");
  if (v == nullptr || !v->is_string()) {
    return invalid_params("initialize: params.protocolVersion must be a string");
  }
  auto* caps = p.if_contains("capabilities");
  if (caps == nullptr || !caps->is_object()) {
    return invalid_params("initialize: params.capabilities must be an object");
  }
  auto* info = p.if_contains("clientInfo");
  if (info == nullptr || !info->is_object()) {
    return invalid_params("initialize: params.clientInfo must be an object");
  }
  for (const char* field : {"name", "version"}) {
    auto* f = info->as_object().if_contains(field);
    if (f == nullptr || !f->is_string()) {
      return invalid_params(std::string("initialize: params.clientInfo.") + field +
                            " must be a string");
    }
  }
  return std::string(v->as_string());
}

}  // namespace

std::span<const std::string_view> supported_protocol_versions() { return kVersions; }

bool is_supported_protocol_version(std::string_view v) {
  for (auto s : kVersions) {
    if (s == v) return true;
  }
  return false;
}

Error parse_error(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message), std::string(kParseErrorType));
}
Error invalid_request(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message), std::string(kInvalidRequestType));
}
Error method_not_found(std::string message) {
  return Error(ErrorCode::kNotFound, std::move(message), std::string(kMethodNotFoundType));
}
Error invalid_params(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message), std::string(kInvalidParamsType));
}
Error session_not_found(std::string message) {
  return Error(ErrorCode::kNotFound, std::move(message), std::string(kSessionNotFoundType));
}

int rpc_code(const Error& e) {
  const std::string type = e.type();
  if (type == kParseErrorType) return kParseError;
  if (type == kInvalidRequestType) return kInvalidRequest;
  if (type == kMethodNotFoundType) return kMethodNotFound;
  if (type == kInvalidParamsType) return kInvalidParams;
  if (type == kSessionNotFoundType) return kSessionNotFound;
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kNotFound:
      return kInvalidParams;
    case ErrorCode::kUnimplemented:
      return kMethodNotFound;
    case ErrorCode::kInternal:
      return kInternalError;
    default:
      return kServerError;
  }
}

json::object rpc_error(const Error& e) {
  return json::object{
      {"code", rpc_code(e)}, {"message", e.message()}, {"data", json::object{{"type", e.type()}}}};
}

json::object error_response(const Error& e, const json::value& id) {
  return json::object{{"jsonrpc", "2.0"}, {"id", id}, {"error", rpc_error(e)}};
}

json::object result_response(json::value result, const json::value& id) {
  json::storage_ptr sp = result.storage();
  return json::object({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}},
                      std::move(sp));
}

// One function: the checks run in the order the errors are reported in (size, parse, id, version,
// then one branch per kind), and the params move out of the document within its one arena.
Decoded decode(std::string_view text, const DecodeLimits& limits, json::memory_resource* arena) {
  if (text.size() > limits.max_message_bytes) {
    return fail(invalid_request("message of " + std::to_string(text.size()) +
                                " bytes is over the limit of " +
                                std::to_string(limits.max_message_bytes)));
  }
  // The message lives in one arena (a monotonic resource): its objects, keys and strings cost
  // no allocation each.
  json::storage_ptr sp = arena != nullptr
                             ? json::storage_ptr(arena)
                             : json::make_shared_resource<json::monotonic_resource>(1024);
  auto parsed = parse_json_strict(text, limits.json, std::move(sp));
  if (!parsed.ok()) return fail(parse_error("parse error: " + parsed.error().message()));
  if (parsed->is_array()) {
    return fail(invalid_request(
        "JSON-RPC batches are not supported (MCP 2025-06-18): send one message at a time"));
  }
  if (!parsed->is_object()) return fail(invalid_request("a JSON-RPC message must be an object"));
  // Not const: the params are moved out of the document into the message, which is made in the
  // same arena (a move between two memory resources would be a copy).
  json::object& obj = parsed->as_object();

  // The id first, so that every later error can echo it.
  const json::value* id = obj.if_contains("id");
  if (id != nullptr && !valid_id(*id)) {
    return fail(invalid_request("id must be a string or an integer (MCP forbids null)"));
  }
  json::value reply_id = id != nullptr ? *id : json::value(nullptr);
  const json::value* version = obj.if_contains("jsonrpc");
  if (version == nullptr || !version->is_string() || version->as_string() != "2.0") {
    return fail(invalid_request("jsonrpc must be \"2.0\""), reply_id);
  }

  Message m{.params = json::object(parsed->storage())};
  const json::value* method = obj.if_contains("method");
  if (method == nullptr) {
    const bool has_result = obj.contains("result");
    const bool has_error = obj.contains("error");
    if (has_result == has_error || id == nullptr) {
      return fail(invalid_request("a message needs a method (request, notification) or exactly "
                                  "one of result and error with an id (response)"),
                  reply_id);
    }
    m.kind = Message::Kind::kResponse;
    m.id = *id;
    Decoded d;
    d.message = std::move(m);
    return d;
  }
  if (!method->is_string() || method->as_string().empty()) {
    return fail(invalid_request("method must be a non-empty string"), reply_id);
  }
  m.method = std::string(method->as_string());
  if (id == nullptr) {
    // JSON-RPC would call this a notification, but MCP keeps request and notification methods
    // apart: a request without an id is a client bug that would otherwise wait forever.
    if (!is_notification_method(m.method)) {
      return fail(invalid_request("request '" + m.method +
                                  "' has no id (only notifications/* may omit it)"));
    }
    m.kind = Message::Kind::kNotification;
    // A notification's params are never answered; malformed ones are ignored with it.
    if (auto* p = obj.if_contains("params"); p != nullptr && p->is_object()) {
      m.params = std::move(p->as_object());
    }
    Decoded d;
    d.message = std::move(m);
    return d;
  }
  m.kind = Message::Kind::kRequest;
  m.id = *id;
  if (auto* p = obj.if_contains("params"); p != nullptr) {
    if (p->is_array()) {
      return fail(invalid_params("MCP params must be an object, not an array"), reply_id);
    }
    if (!p->is_object()) return fail(invalid_request("params must be an object"), reply_id);
    m.params = std::move(p->as_object());
  }
  Decoded d;
  d.message = std::move(m);
  return d;
}

json::object tool_json(const Tool& t) {
  json::object o{{"name", t.name}};
  if (!t.title.empty()) o["title"] = t.title;
  o["description"] = t.description;
  o["inputSchema"] = t.input_schema;
  if (t.output_schema) o["outputSchema"] = *t.output_schema;
  if (!t.annotations.empty()) o["annotations"] = t.annotations;
  return o;
}

json::object tool_result_json(ToolResult r) {
  json::storage_ptr sp = r.structured ? r.structured->storage() : json::storage_ptr();
  json::array content({json::object({{"type", "text"}, {"text", r.text}}, sp)}, sp);
  for (const auto& img : r.images) {
    content.push_back(
        json::object({{"type", "image"}, {"data", img.data}, {"mimeType", img.mime_type}}, sp));
  }
  json::object o({{"content", std::move(content)}}, sp);
  o.reserve(3);
  if (r.structured) o["structuredContent"] = std::move(*r.structured);
  o["isError"] = r.is_error;
  return o;
}

void Dispatcher::handle(std::string_view text, SessionState& session, ToolProvider& tools,
                        ReplyFn reply) const {
  Decoded d = decode(text, limits_);
  if (!d.message) return reply(std::move(d.error_reply));
  dispatch(*d.message, session, tools, std::move(reply));
}

// One function of ~85 lines on purpose: one branch per JSON-RPC method, in the order the
// protocol allows them (initialize and ping before the session is initialized, then the tools).
void Dispatcher::dispatch(const Message& m, SessionState& session, ToolProvider& tools,
                          ReplyFn reply) const {
  if (m.kind == Message::Kind::kResponse) return reply(std::nullopt);  // we send no requests
  if (m.kind == Message::Kind::kNotification) {
    // notifications/cancelled cannot stop a running command (C++ cannot cancel its thread);
    // its result is sent anyway and the client drops it, as the spec allows.
    if (m.method == "notifications/initialized") session.client_ready.store(true);
    return reply(std::nullopt);
  }
  const json::value& id = m.id;
  auto error = [&](const Error& e) { reply(error_response(e, id)); };

  if (m.method == "initialize") {
    if (session.initialized.load()) {
      return error(invalid_request("initialize: this session is already initialized"));
    }
    auto requested = check_initialize_params(m.params);
    if (!requested.ok()) return error(requested.error());
    session.protocol_version = is_supported_protocol_version(*requested)
                                   ? *requested
                                   : std::string(kLatestProtocolVersion);
    json::object info{{"name", info_.name}, {"version", info_.version}};
    json::object result{
        {"protocolVersion", session.protocol_version},
        {"capabilities", json::object{{"tools", json::object{{"listChanged", false}}}}},
        {"serverInfo", std::move(info)}};
    if (!info_.instructions.empty()) result["instructions"] = info_.instructions;
    session.initialized.store(true);
    return reply(result_response(std::move(result), id));
  }
  if (m.method == "ping") return reply(result_response(json::object{}, id));
  if (!session.initialized.load()) {
    return error(invalid_request("'" + m.method + "' before initialize"));
  }

  if (m.method == "tools/list") {
    if (auto* cursor = m.params.if_contains("cursor"); cursor != nullptr) {
      // Every tool fits one page, so no cursor was ever handed out.
      return error(invalid_params(cursor->is_string() ? "tools/list: unknown cursor"
                                                      : "tools/list: cursor must be a string"));
    }
    json::array out;
    try {
      for (const auto& t : tools.list_tools()) out.push_back(tool_json(t));
    } catch (const std::exception& e) {
      return error(internal_error(std::string("tools/list failed: ") + e.what()));
    }
    return reply(result_response(json::object{{"tools", std::move(out)}}, id));
  }

  if (m.method == "tools/call") {
    auto* name = m.params.if_contains("name");
    if (name == nullptr || !name->is_string()) {
      return error(invalid_params("tools/call: params.name must be a string"));
    }
    static const json::object kNoArguments;
    const json::object* args = &kNoArguments;
    if (auto* a = m.params.if_contains("arguments"); a != nullptr) {
      if (!a->is_object()) {
        return error(invalid_params("tools/call: params.arguments must be an object"));
      }
      args = &a->as_object();
    }
    // The provider answers exactly once, but a provider that throws after answering must not
    // make us answer twice.
    struct Once {
      std::atomic<bool> answered{false};
      ReplyFn reply;
    };
    auto once = std::make_shared<Once>();
    once->reply = std::move(reply);
    // The id is copied out of the message's arena: the tool may answer after the message is gone.
    ToolDone done = [once, id = json::value(id, json::storage_ptr())](Result<ToolResult> r) {
      if (once->answered.exchange(true)) return;
      if (!r.ok()) return once->reply(error_response(r.error(), id));
      once->reply(result_response(tool_result_json(std::move(*r)), id));
    };
    try {
      tools.call_tool(name->as_string(), *args, done);
    } catch (const std::exception& e) {
      done(internal_error(std::string("tools/call failed: ") + e.what()));
    }
    return;
  }
  error(method_not_found("method '" + m.method + "' not found"));
}

}  // namespace abx::mcp
