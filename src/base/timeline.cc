#include "abx/base/timeline.h"

#include <cstdio>

namespace abx {

namespace {
std::string ms(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(d.count()) / 1e6);
  return buf;
}
}  // namespace

std::string Timeline::summary() const {
  std::string out;
  for (const auto& s : steps_) {
    if (!out.empty()) out += ", ";
    out += s.name + " " + ms(s.took);
  }
  out += (out.empty() ? "total " : "; total ") + ms(total());
  return out;
}

void TimelineStats::add(const Timeline& t) {
  std::lock_guard lock(mu_);
  for (const auto& step : t.steps()) {
    StepSum* sum = nullptr;
    for (auto& s : sums_.steps) {
      if (s.name == step.name) sum = &s;
    }
    if (sum == nullptr) sum = &sums_.steps.emplace_back(StepSum{step.name});
    ++sum->count;
    sum->total += step.took;
    if (step.took > sum->max) sum->max = step.took;
  }
  ++sums_.count;
  auto total = t.total();
  sums_.total += total;
  const double ms = static_cast<double>(total.count()) / 1e6;
  for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
    if (ms <= kBucketsMs[i]) ++sums_.buckets[i];
  }
}

TimelineStats::Snapshot TimelineStats::snapshot() const {
  std::lock_guard lock(mu_);
  return sums_;
}

}  // namespace abx
