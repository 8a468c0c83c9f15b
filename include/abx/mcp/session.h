// MCP sessions of the Streamable HTTP transport (revision 2025-06-18) and its Origin check: the
// transport state that every HTTP server of MCP keeps (the command server's /mcp and abxd's /mcp),
// written once and free of any HTTP library — callers pass header values as strings.
//
// `initialize` opens a session; its answer carries the new id in `Mcp-Session-Id`, and every
// later message must send that id back (400 without, 404 when unknown, ended or evicted). A
// session is bound to the credential that opened it (a token, an API key): presented with any
// other credential it is as unknown as a made-up id, so ids leak nothing. A message may also send
// `MCP-Protocol-Version`, which must then be the session's negotiated version (400 otherwise).
// The store keeps at most `capacity` sessions and evicts the least recently used first.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "abx/base/error.h"
#include "abx/mcp/mcp.h"
#include "abx/token/token.h"

namespace abx::mcp {

inline constexpr std::string_view kSessionIdHeader = "Mcp-Session-Id";
inline constexpr std::string_view kProtocolVersionHeader = "MCP-Protocol-Version";

struct Session {
  std::string id;  // empty until SessionStore::open stores it
  // What opened it (its digest); only the same credential may use it. Each message hashes the
  // credential it presents once, not both.
  std::optional<token::SecretMatcher> credential;
  SessionState state;
};

// Thread-safe.
class SessionStore {
 public:
  explicit SessionStore(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // The session message `m` belongs to, given the request's Mcp-Session-Id and
  // MCP-Protocol-Version header values (empty when absent) and the caller's credential:
  //  - initialize: a new session bound to `credential`, not stored until open(); an initialize
  //    that names a session is invalid_request (400).
  //  - anything else: the stored session (marked used). invalid_request (400) when `session_id`
  //    is empty or `protocol_version` is set and not the session's; session_not_found (404) when
  //    the id is unknown, ended, evicted or was opened with another credential.
  Result<std::shared_ptr<Session>> session_for(const Message& m, std::string_view session_id,
                                               std::string_view protocol_version,
                                               std::string_view credential);

  // Stores a session whose initialize succeeded under a fresh random id (128 bits, hex), evicting
  // the least recently used session when full, and returns the id for Mcp-Session-Id. Errors:
  // kInternal when no randomness is available.
  Result<std::string> open(const std::shared_ptr<Session>& s);

  // Ends the session named by `session_id` (DELETE). Errors as session_for for a non-initialize
  // message.
  Status end(std::string_view session_id, std::string_view credential);

  std::size_t size() const;

 private:
  Result<std::shared_ptr<Session>> find(std::string_view session_id, std::string_view credential);

  using Lru = std::list<std::shared_ptr<Session>>;
  mutable std::mutex mu_;
  std::size_t capacity_;
  Lru lru_;  // most recently used first
  // Looked up by the header's string_view, without making a string of it.
  struct IdHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Lru::iterator, IdHash, std::equal_to<>> by_id_;
};

// Whether a browser's Origin header ("scheme://host[:port]") may use an MCP endpoint, which
// guards against DNS rebinding: http(s) origins on a loopback host (localhost, 127.0.0.1,
// [::1]), or an origin listed in `also_allowed` (compared case-insensitively; "*" allows every
// origin). Anything else, including "null" and origins with a path, is refused. A request
// without an Origin header is not a browser's and is not checked.
bool origin_allowed(std::string_view origin, std::span<const std::string> also_allowed = {});
// The same check as a Status: kPermissionDenied "Origin '<origin>' may not use /mcp<hint>" when
// refused, with the origin cut at 100 bytes; ok for an empty (absent) origin.
Status check_origin(std::string_view origin, std::span<const std::string> also_allowed = {},
                    std::string_view hint = {});

}  // namespace abx::mcp
