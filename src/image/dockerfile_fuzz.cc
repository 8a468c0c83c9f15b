// Fuzz target: the Dockerfile parser and variable expansion must never crash, and whatever the
// parser accepts is well formed (FROM first among non-ARGs, COPY/ADD with a destination, every
// instruction within the limits, COPY --from naming an earlier stage).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string_view>

#include "abx/image/dockerfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  abx::image::ParseLimits limits;
  limits.max_bytes = 64 * 1024;
  limits.max_line_bytes = 4096;
  limits.max_instructions = 100;
  auto r = abx::image::parse_dockerfile(text, limits);
  if (r.ok()) {
    bool from = false;
    if (r->instructions.size() > limits.max_instructions) std::abort();
    for (const auto& in : r->instructions) {
      if (in.op == abx::image::Op::kFrom) from = true;
      if (!from && in.op != abx::image::Op::kArg) std::abort();
      if ((in.op == abx::image::Op::kCopy || in.op == abx::image::Op::kAdd) && in.args.size() < 2)
        std::abort();
      if (in.line < 1) std::abort();
      // Multi-stage: a stage copies from earlier stages only (no cycles), every stage counted.
      if (in.from_stage >= in.stage || in.stage >= static_cast<int>(r->stages.size())) std::abort();
      if (!in.from.empty() && in.from_stage < 0) std::abort();
    }
    if (!from || r->stages.empty()) std::abort();
  }
  std::map<std::string, std::string> vars{{"A", "x"}, {"EMPTY", ""}};
  (void)abx::image::expand_vars(text.substr(0, 1024), vars);
  (void)abx::image::plain_var_refs(text.substr(0, 1024));
  return 0;
}
