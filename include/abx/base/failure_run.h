// A background loop's run of failed tries (a pool's refill): the first failure of a run and the
// recovery are logged, not every try, and the wait before the next try doubles from `first` up
// to `max` while they fail.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "abx/base/log.h"

namespace abx {

class FailureRun {
 public:
  // `log` must outlive the run.
  FailureRun(const Logger& log, std::chrono::milliseconds first, std::chrono::milliseconds max)
      : log_(log), first_(first), max_(max), wait_(first) {}
  // A try failed: `what` is logged as a warning when it is the first of a run. Returns how long
  // to wait before the next try.
  std::chrono::milliseconds failed(std::string_view what);
  // A try succeeded: after a run of failures, logs `recovered` with how many failed, and the
  // next failure waits `first` again.
  void succeeded(std::string_view recovered);
  std::uint64_t failures() const { return failures_; }  // in the current run

 private:
  const Logger& log_;
  const std::chrono::milliseconds first_, max_;
  std::chrono::milliseconds wait_;
  std::uint64_t failures_ = 0;
};

}  // namespace abx
