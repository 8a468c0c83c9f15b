// abx::Timeline: where the time of one multi-step operation went. A caller marks the end of each
// step; a step's duration is the time since the previous mark (or since the timeline began).
// Sandbox creation fills one (runtime's spawn steps, then abxd's own) and abxd sums them per
// step into its /metrics (issue 44: find where each millisecond of a create goes).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace abx {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  struct Step {
    std::string name;
    std::chrono::nanoseconds took;
  };

  Timeline() : last_(Clock::now()) {}

  // Ends the step `name`: the time since the previous mark. Marking the same name twice adds a
  // second entry (callers use distinct names).
  void mark(std::string_view name) {
    auto now = Clock::now();
    steps_.push_back({std::string(name), now - last_});
    last_ = now;
  }
  // Starts the next step now without recording the time since the last mark (time spent
  // elsewhere that another timeline accounts for).
  void skip() { last_ = Clock::now(); }
  // Appends `other`'s steps, each name prefixed with `prefix` ("spawn." + "clone").
  void append(const Timeline& other, std::string_view prefix) {
    for (const auto& s : other.steps_) steps_.push_back({std::string(prefix) + s.name, s.took});
  }

  const std::vector<Step>& steps() const { return steps_; }
  std::chrono::nanoseconds total() const {
    std::chrono::nanoseconds t{0};
    for (const auto& s : steps_) t += s.took;
    return t;
  }
  // "clone 0.412 ms, mounts 1.020 ms, …; total 3.118 ms" (for logs).
  std::string summary() const;

 private:
  std::vector<Step> steps_;
  Clock::time_point last_;
};

// Many timelines summed per step name (count, total, max), and their totals as a histogram:
// what a /metrics endpoint exports. Thread-safe.
class TimelineStats {
 public:
  // Upper bounds of the totals' histogram buckets, in milliseconds (+Inf is implied).
  static constexpr std::array<double, 12> kBucketsMs = {1,  2,  4,  6,   8,   12,
                                                        16, 25, 50, 100, 250, 1000};
  struct StepSum {
    std::string name;
    std::uint64_t count = 0;
    std::chrono::nanoseconds total{0};
    std::chrono::nanoseconds max{0};
  };
  struct Snapshot {
    std::vector<StepSum> steps;  // in the order their names were first seen
    std::uint64_t count = 0;     // timelines added
    std::chrono::nanoseconds total{0};
    std::array<std::uint64_t, kBucketsMs.size()> buckets{};  // cumulative: total <= bound
  };

  void add(const Timeline& t);
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  Snapshot sums_;
};

}  // namespace abx
