// Failed-authentication limits per source (auth_limiter.h).
#include "auth_limiter.h"

#include <iterator>

namespace abx::platform {

namespace {
// Where the failures of sources with no room in the table count, together.
constexpr std::string_view kOverflow = "(overflow)";  // no address looks like this
}  // namespace

bool AuthLimiter::locked_out(std::string_view source, std::int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = sources_.find(std::string(source));
  if (it == sources_.end()) it = sources_.find(std::string(kOverflow));
  return it != sources_.end() && it->second.locked_until > now_ms;
}

void AuthLimiter::failed(std::string_view source, std::int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = sources_.find(std::string(source));
  if (it == sources_.end()) {
    if (sources_.size() >= limits_.max_sources) prune_locked(now_ms);
    // Every remembered source failed lately: this one counts with the other newcomers.
    std::string key(sources_.size() >= limits_.max_sources ? kOverflow : source);
    it = sources_.try_emplace(std::move(key), Entry{now_ms, 0, 0}).first;
  }
  Entry& e = it->second;
  if (now_ms - e.window_start >= limits_.window.count()) {
    e.window_start = now_ms;
    e.failures = 0;
  }
  if (++e.failures >= limits_.max_failures) {
    e.locked_until = now_ms + limits_.lockout.count();
    e.failures = 0;
    e.window_start = now_ms;
  }
}

void AuthLimiter::prune_locked(std::int64_t now_ms) {
  for (auto it = sources_.begin(); it != sources_.end();) {
    const Entry& e = it->second;
    const bool stale =
        e.locked_until <= now_ms && now_ms - e.window_start >= limits_.window.count();
    it = stale ? sources_.erase(it) : std::next(it);
  }
}

}  // namespace abx::platform
