// RFC 3339 timestamps in UTC, the one implementation (envd's file times, the control API's
// startedAt/endAt, MCP tool results, token expiries), and the wall clock they are read from.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace abx {

// Milliseconds since the Unix epoch, by the system (wall) clock: what records and the API store.
inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "2026-11-30T14:39:30Z", with the shortest of .mmm / .uuuuuu / .nnnnnnnnn that is exact when
// nanos > 0 (protobuf's JSON mapping of Timestamp).
std::string rfc3339(std::int64_t seconds, long nanos);
// "2026-11-30T14:39:30.123Z": always millisecond precision (E2B's control API).
std::string rfc3339_ms(std::int64_t ms_since_epoch);

}  // namespace abx
