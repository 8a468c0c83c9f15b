// Strict JSON for request bodies.
//
// Boost.JSON is lenient in one way that matters on a wire we must not misread: duplicate object
// keys silently keep the last value (a classic parser differential). parse_json_strict() rejects
// duplicates, lone surrogates, invalid UTF-8, NaN/Infinity, comments, trailing commas, trailing
// garbage, NUL in object keys, non-finite numbers, and nesting past a fixed depth — before any
// caller looks at the value. Errors are kInvalidArgument with the byte offset.
#pragma once

#include <boost/json/storage_ptr.hpp>
#include <boost/json/value.hpp>
#include <cstddef>
#include <string_view>

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

}  // namespace abx
