#include "abx/base/failure_run.h"

#include <algorithm>
#include <string>

namespace abx {

std::chrono::milliseconds FailureRun::failed(std::string_view what) {
  if (failures_++ == 0) {
    log_.warn(what);
    wait_ = first_;
  } else {
    wait_ = std::min(wait_ * 2, max_);
  }
  return wait_;
}

void FailureRun::succeeded(std::string_view recovered) {
  if (failures_ == 0) return;
  log_.info(std::string(recovered) + ", after " + std::to_string(failures_) + " failed");
  failures_ = 0;
}

}  // namespace abx
