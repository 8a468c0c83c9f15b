// abx::registry::CommandFailure: what a command's body throws to fail with a chosen abx::Error
// instead of "500, the exception's C++ class". The command server answers with the error's own
// HTTP status and wire type (one Error->HTTP mapping, as for every other error). The Python
// bridge (abx/pyworker/pyworker.h) throws it to report a Python exception's class
// (`"type": "ValueError"`), and 503 when its worker died. Header-only, so a command module that
// throws it needs no symbol from the runner.
#pragma once

#include <stdexcept>
#include <utility>

#include "abx/base/error.h"

namespace abx::registry {

class CommandFailure : public std::runtime_error {
 public:
  explicit CommandFailure(Error error)
      : std::runtime_error(error.message()), error_(std::move(error)) {}
  const Error& error() const { return error_; }

 private:
  Error error_;
};

}  // namespace abx::registry
