// Base64 (RFC 4648), the one implementation every module uses: envd's and the client's Connect
// bytes fields, the MCP file tools, Basic auth, and scoped tokens (the URL-safe alphabet).
#pragma once

#include <string>
#include <string_view>

#include "abx/base/error.h"

namespace abx {

// Standard alphabet with '=' padding (§4).
std::string base64_encode(std::string_view in);
// URL-safe alphabet (§5), no padding: scoped tokens.
std::string base64url_encode(std::string_view in);

// Decodes either alphabet (protobuf's JSON mapping accepts both); padding is optional. Fails with
// kInvalidArgument on a character outside the alphabets, an impossible length, or padding in the
// middle.
Result<std::string> base64_decode(std::string_view in);
// Strict URL-safe decoding: only the §5 alphabet, no padding.
Result<std::string> base64url_decode(std::string_view in);

}  // namespace abx
