#include "abx/mcp/registry_tools.h"

#include <boost/json.hpp>
#include <limits>

namespace abx::mcp {

namespace json = boost::json;

namespace {

json::object property_schema(const registry::CommandArg& a) {
  json::object p;
  switch (a.type) {
    case registry::ArgType::kString:
      p["type"] = "string";
      break;
    case registry::ArgType::kInteger:
      p["type"] = "integer";
      if (a.minimum && *a.minimum != std::numeric_limits<std::int64_t>::min()) {
        p["minimum"] = *a.minimum;
      }
      if (a.maximum && *a.maximum != std::numeric_limits<std::int64_t>::max()) {
        p["maximum"] = *a.maximum;
      }
      break;
    case registry::ArgType::kFloat:
      p["type"] = "number";
      if (a.max_magnitude) {
        p["minimum"] = -*a.max_magnitude;
        p["maximum"] = *a.max_magnitude;
      }
      break;
    case registry::ArgType::kBoolean:
      p["type"] = "boolean";
      break;
  }
  if (!a.description.empty()) p["description"] = a.description;
  if (!a.default_value.is_null()) p["default"] = a.default_value;
  return p;
}

}  // namespace

json::object input_schema(const registry::RegisteredCommand& cmd) {
  json::object props;
  json::array required;
  for (const auto& a : cmd.args) {
    props[a.name] = property_schema(a);
    if (a.required) required.push_back(json::string(a.name));
  }
  return json::object{{"type", "object"},
                      {"properties", std::move(props)},
                      {"required", std::move(required)},
                      {"additionalProperties", false}};
}

const json::object& command_output_schema() {
  static const json::object kSchema{{"type", "object"},
                                    {"properties", json::object{{"result", json::object{}}}},
                                    {"required", json::array{"result"}}};
  return kSchema;
}

Tool tool_from_command(const registry::RegisteredCommand& cmd) {
  Tool t;
  t.name = cmd.name;
  t.description = cmd.description;
  t.input_schema = input_schema(cmd);
  t.output_schema = command_output_schema();
  if (cmd.hints.read_only) t.annotations["readOnlyHint"] = *cmd.hints.read_only;
  if (cmd.hints.destructive) t.annotations["destructiveHint"] = *cmd.hints.destructive;
  if (cmd.hints.idempotent) t.annotations["idempotentHint"] = *cmd.hints.idempotent;
  return t;
}

ToolResult command_result(json::value result) {
  // The whole answer (this object, the content around it, the JSON-RPC envelope) is built in
  // one arena that lives as long as the answer does: one allocation or two instead of one per
  // object, key and string.
  json::storage_ptr arena = json::make_shared_resource<json::monotonic_resource>(1024);
  ToolResult r;
  r.structured.emplace(json::object({{"result", std::move(result)}}, std::move(arena)));
  r.text = json::serialize(*r.structured);
  return r;
}

ToolResult command_failure(const Error& e) {
  // No structuredContent: clients check it against the outputSchema even on errors (the
  // TypeScript SDK does), and {"error","type"} is not {"result": …}.
  ToolResult r;
  r.text = e.type() + ": " + e.message();
  r.is_error = true;
  return r;
}

}  // namespace abx::mcp
