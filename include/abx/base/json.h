// Strict JSON for request bodies and config, and the one family of readers over a parsed value.
//
// Boost.JSON is lenient in one way that matters on a wire we must not misread: duplicate object
// keys silently keep the last value (a classic parser differential). parse_json_strict() rejects
// duplicates, lone surrogates, invalid UTF-8, NaN/Infinity, comments, trailing commas, trailing
// garbage, NUL in object keys, non-finite numbers, and nesting past a fixed depth — before any
// caller looks at the value. Errors are kInvalidArgument with the byte offset.
//
// The json_as_*, json_required_* and json_optional_* readers then take fields out of the value.
// Every one is strict and names the field by its path from the document's root, so a caller's
// error says where: `network.rules["a.com"][0].transform: expected an object, got string`.
// `path` is the path of the value itself (json_as_*) or of the object holding `key` (the others;
// "" for the root object). Errors are kInvalidArgument.
//   - json_as_*(v, path): v of that type.
//   - json_required_*(o, key, path): o[key] of that type; absent (or null) is an error.
//   - json_optional_*(o, key, path): std::nullopt (a null pointer for objects and arrays) when
//     o[key] is absent or null, else the value, which must be of that type. A JSON null counts as
//     absent, as in E2B's API (nullable fields; Go's decoder reads null as "not given") and in
//     proto3 JSON.
// A default for an absent field is the caller's `.value_or(...)`. Readers that never fail
// (json_string_or_empty) are for protocols that require the leniency, and say so at the call.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/storage_ptr.hpp>
#include <boost/json/value.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx {

struct JsonLimits {
  std::size_t max_depth = 64;
};

// The value is made in `sp`'s memory resource (the default one when null): a request's arena
// (boost::json::monotonic_resource) makes a parse one or two allocations instead of one per
// object, key and long string.
Result<boost::json::value> parse_json_strict(std::string_view text, const JsonLimits& limits = {},
                                             boost::json::storage_ptr sp = {});

// Compact serialization (boost::json::serialize) — here so callers need not include the library.
std::string to_json_string(const boost::json::value& v);

// --- Paths ---

// `path.key`, or `path["key"]` (the key as a JSON string) when the key is not an identifier
// ([A-Za-z_][A-Za-z0-9_]*); just `key` (or `["key"]`) at the root (path "").
std::string json_path_key(std::string_view path, std::string_view key);
// `path[i]`.
std::string json_path_index(std::string_view path, std::size_t i);
// The kind of a value as the readers' errors name it: "null", "boolean", "number", "string",
// "array" or "object".
std::string_view json_kind_name(const boost::json::value& v);

// --- A value of a given type ---

Result<const boost::json::object*> json_as_object(const boost::json::value& v,
                                                  std::string_view path);
Result<const boost::json::array*> json_as_array(const boost::json::value& v, std::string_view path);
Result<std::string> json_as_string(const boost::json::value& v, std::string_view path);
Result<bool> json_as_bool(const boost::json::value& v, std::string_view path);
// An integer (a number with no fraction or exponent: 3.0 and 1e3 are refused, as Go's decoder
// refuses them for an int) in [lo, hi]; out of the range is an error that gives the range.
Result<std::int64_t> json_as_int(const boost::json::value& v, std::string_view path,
                                 std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                                 std::int64_t hi = std::numeric_limits<std::int64_t>::max());
// An array of strings; an object of strings.
Result<std::vector<std::string>> json_as_string_list(const boost::json::value& v,
                                                     std::string_view path);
Result<std::map<std::string, std::string>> json_as_string_map(const boost::json::value& v,
                                                              std::string_view path);

// --- A field that must be there ---

Result<const boost::json::object*> json_required_object(const boost::json::object& o,
                                                        std::string_view key,
                                                        std::string_view path);
Result<const boost::json::array*> json_required_array(const boost::json::object& o,
                                                      std::string_view key, std::string_view path);
Result<std::string> json_required_string(const boost::json::object& o, std::string_view key,
                                         std::string_view path);
Result<bool> json_required_bool(const boost::json::object& o, std::string_view key,
                                std::string_view path);
Result<std::int64_t> json_required_int(const boost::json::object& o, std::string_view key,
                                       std::string_view path,
                                       std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                                       std::int64_t hi = std::numeric_limits<std::int64_t>::max());

// --- A field that may be absent (or null) ---

// The field's value, or null when it is absent or JSON null (no type check).
const boost::json::value* json_find(const boost::json::object& o, std::string_view key);

Result<const boost::json::object*> json_optional_object(const boost::json::object& o,
                                                        std::string_view key,
                                                        std::string_view path);
Result<const boost::json::array*> json_optional_array(const boost::json::object& o,
                                                      std::string_view key, std::string_view path);
Result<std::optional<std::string>> json_optional_string(const boost::json::object& o,
                                                        std::string_view key,
                                                        std::string_view path);
Result<std::optional<bool>> json_optional_bool(const boost::json::object& o, std::string_view key,
                                               std::string_view path);
Result<std::optional<std::int64_t>> json_optional_int(
    const boost::json::object& o, std::string_view key, std::string_view path,
    std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
    std::int64_t hi = std::numeric_limits<std::int64_t>::max());
// Absent or null is an empty list / map.
Result<std::vector<std::string>> json_optional_string_list(const boost::json::object& o,
                                                           std::string_view key,
                                                           std::string_view path);
Result<std::map<std::string, std::string>> json_optional_string_map(const boost::json::object& o,
                                                                    std::string_view key,
                                                                    std::string_view path);

// --- Lenient, for protocols that require it ---

// o[key] if it is a string, else "" (absent, null or another type alike). Only for wires whose
// peers leave out or null fields we merely display (the Jupyter messaging protocol); a request
// body or config is read with the strict readers above.
std::string_view json_string_or_empty(const boost::json::object& o, std::string_view key);

}  // namespace abx
