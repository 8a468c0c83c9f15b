// runtime::UniqueFd is abx::UniqueFd (abx/base/fd.h), the one owner type of a descriptor. This
// alias keeps `runtime::UniqueFd` spelled in platform code compiling; new code includes
// abx/base/fd.h and says abx::UniqueFd.
#pragma once

#include "abx/base/fd.h"

namespace abx::runtime {

using UniqueFd = abx::UniqueFd;

}  // namespace abx::runtime
