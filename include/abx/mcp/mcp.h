// abx::mcp — the transport-independent core of a Model Context Protocol server.
//
// MCP is JSON-RPC 2.0 with a lifecycle (`initialize` → `notifications/initialized`, `ping`) and,
// for abx, one feature: tools (`tools/list`, `tools/call`). This module decodes and validates
// messages strictly (abx/base/json.h: no duplicate keys, bad UTF-8, NaN, …), negotiates the
// protocol version, and dispatches to a ToolProvider — the one interface a server implements.
// The command server (`POST /mcp`, Streamable HTTP), abxd and `abx mcp` (stdio) all serve their
// tools through it; transports own sessions, auth and framing, this core owns the protocol.
//
// Revision implemented: 2025-06-18, which has no JSON-RPC batches: an array is refused with
// -32600. Errors travel as abx::Error values; rpc_error() is the one mapping to JSON-RPC error
// objects (codes in the table beside it).
#pragma once

#include <atomic>
#include <boost/json/memory_resource.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/json.h"

namespace abx::mcp {

// Newest first; initialize answers with the client's version when it is listed here, else
// with the first entry (the client then decides whether it can speak it).
inline constexpr std::string_view kLatestProtocolVersion = "2025-06-18";
std::span<const std::string_view> supported_protocol_versions();
bool is_supported_protocol_version(std::string_view v);

// JSON-RPC 2.0 and MCP error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kServerError = -32000;      // transport refusals (auth, limits, shutdown)
inline constexpr int kSessionNotFound = -32001;  // Streamable HTTP: unknown or ended session

// Errors whose wire code is a specific JSON-RPC code carry it in their type.
Error parse_error(std::string message);        // type "ParseError"      -> -32700
Error invalid_request(std::string message);    // type "InvalidRequest"  -> -32600
Error method_not_found(std::string message);   // type "MethodNotFound"  -> -32601
Error invalid_params(std::string message);     // type "InvalidParams"   -> -32602
Error session_not_found(std::string message);  // type "SessionNotFound" -> -32001

// The one mapping from Error to a JSON-RPC error object {"code","message","data":{"type"}}:
//   type ParseError / InvalidRequest / MethodNotFound / InvalidParams / SessionNotFound -> its code
//   kInvalidArgument, kNotFound (e.g. an unknown tool)                                -> -32602
//   kUnimplemented                                                                     -> -32601
//   kInternal                                                                          -> -32603
//   anything else (kUnauthenticated, kUnavailable, kPayloadTooLarge, …)                -> -32000
int rpc_code(const Error& e);
boost::json::object rpc_error(const Error& e);
// {"jsonrpc":"2.0","id":id,"error":rpc_error(e)}; id is null when the request's is unknown.
boost::json::object error_response(const Error& e, const boost::json::value& id);
// Built in result's memory resource (so a result made in a request's arena stays in it).
boost::json::object result_response(boost::json::value result, const boost::json::value& id);

// One decoded message. Requests have an id (string or integer); notifications have none;
// responses (the client answering a server request) have result or error. MCP params are
// always an object (absent params are an empty object).
struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  boost::json::value id;  // null for notifications
  std::string method;     // empty for responses
  boost::json::object params;
};

struct DecodeLimits {
  std::size_t max_message_bytes = 1024 * 1024;
  JsonLimits json;
};

// Either a message, or the error response to send for it (with the id when one could be read,
// else null). Notifications that fail to decode still get an error response: without a valid
// shape nobody can tell they were notifications.
struct Decoded {
  std::optional<Message> message;
  std::optional<boost::json::object> error_reply;
};
// The message is made in `arena`, which must then outlive it and whatever borrows from it; a
// null `arena` gives the message an arena of its own (a shared monotonic_resource), which lives
// as long as the message does.
Decoded decode(std::string_view text, const DecodeLimits& limits = {},
               boost::json::memory_resource* arena = nullptr);

// A tool as listed by tools/list. input_schema is a JSON Schema object; annotations may be
// empty (then omitted); output_schema is omitted when unset.
struct Tool {
  std::string name;
  std::string title;
  std::string description;
  boost::json::object input_schema;
  std::optional<boost::json::object> output_schema;
  boost::json::object annotations;
};
boost::json::object tool_json(const Tool& t);

// The outcome of a tool that ran. A tool that failed (threw, timed out) is still a result, with
// is_error set, so the model sees the message; protocol problems (unknown tool, bad arguments)
// are Errors instead. `structured` must be an object when set. tool_result_json builds the
// result in structured's memory resource when there is one.
struct ImageContent {
  std::string data;  // base64
  std::string mime_type;
};
struct ToolResult {
  std::optional<boost::json::object> structured;
  std::string text;                  // the text content item (for structured results: their JSON)
  std::vector<ImageContent> images;  // image content items after the text
  bool is_error = false;
};
boost::json::object tool_result_json(ToolResult r);

using ToolDone = std::function<void(Result<ToolResult>)>;

// What an MCP server serves. One provider may stand for one caller (the command server builds
// one per request, holding the caller's scope), so implementations filter by their caller.
class ToolProvider {
 public:
  virtual ~ToolProvider() = default;
  virtual std::vector<Tool> list_tools() = 0;
  // Starts tool `name` with `arguments` (an object) and calls `done` exactly once, from any
  // thread. Errors: kNotFound for an unknown (or hidden) tool, kInvalidArgument for arguments
  // that do not fit the schema; both become -32602.
  virtual void call_tool(std::string_view name, const boost::json::object& arguments,
                         ToolDone done) = 0;
};

struct ServerInfo {
  std::string name = "abx";
  std::string version = "0";
  std::string instructions;  // optional guidance for the model; omitted when empty
};

// Per-session protocol state. A transport keeps one per session (stdio: one per process).
// `initialized` flips when initialize has been answered; requests other than initialize and
// ping before that are refused (-32600). The client's notifications/initialized is recorded
// but not required: HTTP clients may race it with their first request.
struct SessionState {
  std::string protocol_version;  // negotiated; set by initialize
  std::atomic<bool> initialized{false};
  std::atomic<bool> client_ready{false};  // notifications/initialized arrived
};

// The JSON-RPC reply to one message, or nothing (notifications and responses get no reply).
using ReplyFn = std::function<void(std::optional<boost::json::object>)>;

class Dispatcher {
 public:
  explicit Dispatcher(ServerInfo info, DecodeLimits limits = {})
      : info_(std::move(info)), limits_(limits) {}

  const DecodeLimits& limits() const { return limits_; }

  // Handles one decoded message; `reply` is called exactly once (synchronously except for
  // tools/call, which completes when the tool does). `tools` and `session` must outlive the
  // reply.
  void dispatch(const Message& m, SessionState& session, ToolProvider& tools, ReplyFn reply) const;
  // decode() then dispatch(): for stream transports that read one message at a time.
  void handle(std::string_view text, SessionState& session, ToolProvider& tools,
              ReplyFn reply) const;

 private:
  ServerInfo info_;
  DecodeLimits limits_;
};

}  // namespace abx::mcp
