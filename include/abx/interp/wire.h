// The Jupyter messaging protocol's wire format (jupyter-client "Messaging in Jupyter", v5.3):
// how one message travels as ZeroMQ frames, signed with HMAC-SHA256.
//
//   [identities...] "<IDS|MSG>" signature header parent_header metadata content [buffers...]
//
// The signature is the lowercase hex HMAC-SHA256 (key from the kernel's connection file) of the
// four JSON frames in that order; decode() checks it in constant time before parsing anything,
// so a frame the kernel did not sign is never interpreted. Pure: no sockets here (kernel.h owns
// them), so the parser is fuzzed on its own (wire_fuzz.cc).
#pragma once

#include <boost/json/object.hpp>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::interp {

inline constexpr std::string_view kDelimiter = "<IDS|MSG>";
inline constexpr std::string_view kProtocolVersion = "5.3";

struct Message {
  std::vector<std::string> identities;  // routing prefix (before the delimiter)
  boost::json::object header;           // msg_id, session, username, date, msg_type, version
  boost::json::object parent_header;    // the request's header on replies and outputs
  boost::json::object metadata;
  boost::json::object content;
  std::vector<std::string> buffers;  // extra binary frames after content

  // header.msg_type, parent_header.msg_id ("" when absent or not a string).
  std::string_view msg_type() const;
  std::string_view msg_id() const;
  std::string_view parent_id() const;
};

struct WireLimits {
  std::size_t max_frames = 64;
  std::size_t max_total_bytes = 64 * 1024 * 1024;  // a figure's PNG can be several MiB
  std::size_t max_json_depth = 64;
};

// A new request: header with a fresh random msg_id, the session, username "abx", the date
// (ISO 8601 UTC), msg_type and version 5.3; empty parent_header and metadata.
Message make_message(std::string_view msg_type, boost::json::object content,
                     std::string_view session);

// Frames for `msg`, signed with `key` (no signature, "", when the key is empty, as the
// protocol allows).
std::vector<std::string> encode(const Message& msg, std::string_view key);

// Parses frames received from a kernel. Errors (invalid_argument): no delimiter, fewer than
// four frames after the signature, a bad signature (checked first, constant time), a JSON frame
// that is not an object or nests too deep, over the limits.
Result<Message> decode(std::vector<std::string> frames, std::string_view key,
                       const WireLimits& limits = {});

// A Jupyter message's string fields are read with abx::json_string_or_empty (abx/base/json.h):
// "" when absent, null or not a string. The protocol makes most fields optional and kernels
// differ in which they send (and some send null), so a missing one is read as empty rather than
// refused (decode() has already checked the framing and the JSON).

// Lowercase hex HMAC-SHA256 of the concatenated parts.
std::string sign(std::string_view key, const std::vector<std::string_view>& parts);

}  // namespace abx::interp
