// RFC 3339 timestamps in UTC, the one implementation (envd's file times, the control API's
// startedAt/endAt, MCP tool results, token expiries).
#pragma once

#include <cstdint>
#include <string>

namespace abx {

// "2026-11-30T14:39:30Z", with the shortest of .mmm / .uuuuuu / .nnnnnnnnn that is exact when
// nanos > 0 (protobuf's JSON mapping of Timestamp).
std::string rfc3339(std::int64_t seconds, long nanos);
// "2026-11-30T14:39:30.123Z": always millisecond precision (E2B's control API).
std::string rfc3339_ms(std::int64_t ms_since_epoch);

}  // namespace abx
