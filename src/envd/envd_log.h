// envd's logger, one for all its files (lines read "[envd] …").
#pragma once

#include "abx/base/log.h"

namespace abx::envd {

inline const Logger& log() {
  static const Logger l("envd");
  return l;
}

}  // namespace abx::envd
