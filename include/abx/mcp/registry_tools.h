// Registered commands as MCP tools: the schema mapping shared by every server that publishes a
// CommandRegistry over MCP (today the command server's /mcp).
//
//   CommandArg type    JSON Schema
//   string             {"type":"string"}
//   integer            {"type":"integer","minimum":…,"maximum":…}  (the arg's range; bounds equal
//                      to int64's own are left out, as JSON numbers lose precision there)
//   float              {"type":"number"}  (±max_magnitude as minimum/maximum when set)
//   boolean            {"type":"boolean"}
// plus "description" and "default" per property, "required", and "additionalProperties": false,
// since coercion refuses unknown arguments. CommandHints become annotations (readOnlyHint,
// destructiveHint, idempotentHint); unset hints are left out.
//
// Results: structuredContent is always {"result": <the command's return value>} — the same
// shape as the body of POST /commands/{name} — so one outputSchema describes every tool and a
// client never has to guess whether an object result was wrapped. The text item carries the
// same JSON. A command that failed is isError with the text "<type>: <message>" and no
// structuredContent (clients validate that against the outputSchema even on errors).
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "abx/base/error.h"
#include "abx/mcp/mcp.h"
#include "abx/registry/registry.h"

namespace abx::mcp {

boost::json::object input_schema(const registry::RegisteredCommand& cmd);
// {"type":"object","properties":{"result":{}},"required":["result"]}
const boost::json::object& command_output_schema();
Tool tool_from_command(const registry::RegisteredCommand& cmd);

// A command's return value as a tool result.
ToolResult command_result(boost::json::value result);
// A command that threw or ran out of time: isError with "<type>: <message>" as the text.
ToolResult command_failure(const Error& e);

}  // namespace abx::mcp
