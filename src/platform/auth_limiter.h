// Failed-authentication limits for the control API, per source address.
//
// A source (the client's address, as the gateway saw its connection) that fails
// `max_failures` times within `window` is locked out for `lockout`: while locked out, each of
// its requests is refused (429) before its credentials are looked at, so a correct key found by
// a flood does not work from the flooding source either. Other sources are unaffected.
// Thread-safe. The table of sources is bounded (`max_sources`); when it is full of sources with
// recent failures, the sources it has no room for count (and are locked out) together.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace abx::platform {

struct AuthLimits {
  int max_failures = 20;
  std::chrono::milliseconds window{1000};
  std::chrono::milliseconds lockout{10'000};
  std::size_t max_sources = 4096;
};

class AuthLimiter {
 public:
  explicit AuthLimiter(AuthLimits limits = {}) : limits_(limits) {}

  // Whether `source` is locked out at `now_ms` (checked before the credentials).
  bool locked_out(std::string_view source, std::int64_t now_ms);
  // Counts a failed authentication of `source`.
  void failed(std::string_view source, std::int64_t now_ms);

 private:
  struct Entry {
    std::int64_t window_start = 0;
    int failures = 0;
    std::int64_t locked_until = 0;
  };
  // Drops the entries with nothing left to remember.
  void prune_locked(std::int64_t now_ms);

  const AuthLimits limits_;
  std::mutex mu_;
  std::unordered_map<std::string, Entry> sources_;  // guarded by mu_
};

}  // namespace abx::platform
