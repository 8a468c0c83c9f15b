// abx::image Dockerfile subset: the parser behind `abx template build`.
//
// Supported instructions (everything else is "Dockerfile:N: unknown instruction X"):
//   FROM image|template|scratch|stage [AS name]   each FROM starts a stage; --platform refused
//   RUN cmd | RUN ["exe", "arg"]       shell form becomes ["/bin/sh", "-c", cmd]
//   COPY [--chown=u[:g]] [--from=stage] src... dest   sources inside the build context, or
//                                      (--from) in an earlier stage, by name or index
//   ADD  [--chown=u[:g]] src... dest   as COPY, but a local tar archive is extracted; URLs refused
//   ENV K=V ... | ENV K V              LABEL K=V ...
//   WORKDIR dir, USER user[:group]     CMD / ENTRYPOINT, shell or exec form
//   ARG NAME[=default]                 before FROM (for FROM) or after it
// Comments (`#` at the start of a line), blank lines and `\` line continuations (comment lines
// inside a continuation are dropped, as Docker does). Parser directives (`# escape=`) are
// plain comments: the escape character is always `\`.
//
// Stages: the last one is the image built; a stage may build on (FROM) or copy from (COPY
// --from) earlier stages only, so references never form a cycle.
//
// Parsing is pure (no I/O) and bounded by ParseLimits. Variable references ($V, ${V},
// ${V:-default}, ${V:+alt}) are kept as written; the builder expands them with expand_vars()
// against its ARG and ENV values, in the instructions Docker expands them in.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"

namespace abx::image {

enum class Op { kFrom, kRun, kCopy, kAdd, kEnv, kWorkdir, kUser, kCmd, kEntrypoint, kLabel, kArg };

// "FROM", "RUN", …
std::string_view op_name(Op op);

struct Instruction {
  Op op = Op::kRun;
  int line = 0;      // 1-based line where the instruction starts
  std::string text;  // the instruction as one line ("RUN a b"), continuations joined
  // FROM: {image}. RUN/CMD/ENTRYPOINT: the argv (shell form already wrapped in /bin/sh -c).
  // COPY/ADD: the sources then the destination (at least two). WORKDIR/USER: {value}.
  std::vector<std::string> args;
  bool shell_form = false;  // RUN/CMD/ENTRYPOINT written without a JSON array
  // ENV/LABEL: key -> value in order. ARG: name -> default (has_default tells an empty default
  // from none).
  std::vector<std::pair<std::string, std::string>> pairs;
  bool has_default = false;  // ARG only
  std::string chown;         // COPY/ADD --chown value, empty if absent
  // FROM: the stage's name after AS (lowercased, as Docker does), empty if unnamed.
  std::string stage_name;
  // COPY --from: as written, and the index of the earlier stage it names (-1 without --from).
  std::string from;
  int from_stage = -1;
  int stage = 0;  // index of the stage this instruction belongs to (ARGs before FROM: 0)
};

struct Stage {
  std::string name;  // lowercased; empty if unnamed
  int line = 0;      // its FROM's line
};

struct Dockerfile {
  std::vector<Instruction> instructions;  // in order; the first non-ARG one is FROM
  std::vector<Stage> stages;              // one per FROM, in order
};

struct ParseLimits {
  std::size_t max_bytes = 1 << 20;         // the whole file
  std::size_t max_line_bytes = 64 * 1024;  // one physical line
  std::size_t max_instructions = 1000;
};

// Parses `text`. Errors (invalid_argument, "<name>:N: <what>"): unknown instruction, missing or
// extra arguments, a bad JSON array, unsupported features (ADD from a URL, other COPY flags,
// FROM --platform), no FROM, a duplicate stage name, COPY --from naming no earlier stage, FROM
// or COPY --from naming this stage or a later one (a cycle), and the limits.
Result<Dockerfile> parse_dockerfile(std::string_view text, const ParseLimits& limits = {},
                                    std::string_view name = "Dockerfile");

// Expands $V, ${V}, ${V:-word} and ${V:+word} with `vars`; unknown variables are empty, `\$`
// is a literal `$`. invalid_argument for an unterminated `${`.
Result<std::string> expand_vars(std::string_view in,
                                const std::map<std::string, std::string>& vars);

// The variables `in` uses as plain $V or ${V} (not ${V:-w} or ${V:+w}, which mean to handle an
// empty V), in order of appearance.
std::vector<std::string> plain_var_refs(std::string_view in);

}  // namespace abx::image
