// Strict coercion of JSON keyword arguments to a command's schema — one table, no guessing.
//
//   type     accepts                                         rejects (400, naming the argument)
//   integer  JSON integers within int64 and the arg's range   floats (even 1.0), strings, bools
//   float    JSON integers and finite floats (within range)   strings, bools, null
//   boolean  true, false                                      1, 0, "true", null
//   string   JSON strings                                     everything else
//
// A missing required argument and an unknown extra argument are errors that name them;
// defaults apply only to missing optional arguments (never to an explicit null).
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <string_view>

#include "abx/base/error.h"
#include "abx/base/json.h"
#include "abx/registry/registry.h"

namespace abx::registry {

// Checks one value against one argument; returns the normalised value (int64, double, bool or
// string) or kInvalidArgument.
Result<boost::json::value> coerce_value(const CommandArg& arg, const boost::json::value& v);

// Checks a whole kwargs value (must be an object) against a command. On success every declared
// argument that was given or has a default is present in the result.
Result<boost::json::object> coerce_kwargs(const RegisteredCommand& cmd,
                                          const boost::json::value& kwargs);
// The same for kwargs already known to be an object (MCP's arguments): no copy into a value.
Result<boost::json::object> coerce_kwargs(const RegisteredCommand& cmd,
                                          const boost::json::object& kwargs);

// Parses a request body strictly (see abx/base/json.h) and coerces it. An empty body means {}.
Result<boost::json::object> parse_kwargs(const RegisteredCommand& cmd, std::string_view body,
                                         const JsonLimits& limits = {});

}  // namespace abx::registry
