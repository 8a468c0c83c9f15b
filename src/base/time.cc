#include "abx/base/time.h"

#include <cstdio>
#include <ctime>

namespace abx {
namespace {

std::string date_time(std::int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(buf, n);
}

}  // namespace

std::string rfc3339(std::int64_t seconds, long nanos) {
  std::string out = date_time(seconds);
  if (nanos > 0) {
    char frac[32];
    if (nanos % 1000000 == 0) {
      std::snprintf(frac, sizeof frac, ".%03ld", nanos / 1000000);
    } else if (nanos % 1000 == 0) {
      std::snprintf(frac, sizeof frac, ".%06ld", nanos / 1000);
    } else {
      std::snprintf(frac, sizeof frac, ".%09ld", nanos);
    }
    out += frac;
  }
  out += 'Z';
  return out;
}

std::string rfc3339_ms(std::int64_t ms) {
  std::string out = date_time(ms / 1000);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%03dZ", static_cast<int>(ms % 1000));
  return out + frac;
}

}  // namespace abx
