// Proto3 canonical JSON, the parts envd's messages need: field lookup by lowerCamelCase or proto
// name, int64 as string or number, enums by name or number, bytes as base64 (standard or URL-safe,
// padded or not), and RFC 3339 timestamps. Every decoder checks types with abx/base/json.h's
// readers and reports the field's path: `at` is the path of the object `o` ("" for the message
// itself), so a nested field reads `process.cmd: expected a string, got number`. As proto3 JSON
// says, a null field is the field's default (absent).
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/base64.h"  // bytes fields (abx::base64_encode / base64_decode)
#include "abx/base/error.h"
#include "abx/base/time.h"  // Timestamp fields (abx::rfc3339)

namespace abx::envd {

// Parses a request message: strict JSON whose top level is an object.
Result<boost::json::object> parse_message(std::string_view text);

// The value of `camel` or, failing that, its proto (snake_case) name; null if absent or JSON null.
const boost::json::value* field(const boost::json::object& o, std::string_view camel,
                                std::string_view snake = {});

Result<std::optional<std::string>> get_string(const boost::json::object& o, std::string_view camel,
                                              std::string_view snake = {},
                                              std::string_view at = {});
Result<std::optional<bool>> get_bool(const boost::json::object& o, std::string_view camel,
                                     std::string_view snake = {}, std::string_view at = {});
// Unsigned 32-bit: a JSON number or decimal string within range.
Result<std::optional<std::uint32_t>> get_u32(const boost::json::object& o, std::string_view camel,
                                             std::string_view snake = {}, std::string_view at = {});
Result<std::optional<const boost::json::object*>> get_object(const boost::json::object& o,
                                                             std::string_view camel,
                                                             std::string_view snake = {},
                                                             std::string_view at = {});
Result<std::vector<std::string>> get_string_list(const boost::json::object& o,
                                                 std::string_view camel,
                                                 std::string_view snake = {},
                                                 std::string_view at = {});
Result<std::map<std::string, std::string>> get_string_map(const boost::json::object& o,
                                                          std::string_view camel,
                                                          std::string_view snake = {},
                                                          std::string_view at = {});
// bytes: base64 text decoded.
Result<std::optional<std::string>> get_bytes(const boost::json::object& o, std::string_view camel,
                                             std::string_view snake = {}, std::string_view at = {});
// An enum given by name (from `names`, index = number) or by number.
Result<std::optional<int>> get_enum(const boost::json::object& o, std::string_view camel,
                                    std::string_view snake,
                                    const std::map<std::string, int, std::less<>>& names,
                                    std::string_view at = {});

}  // namespace abx::envd
