// abx::image .dockerignore: which files of a build context COPY and ADD may not see.
//
// Docker's rules (moby/patternmatcher): one pattern a line; blank lines and lines starting with
// `#` are ignored; surrounding whitespace is trimmed; a leading `!` makes an exception that
// re-includes what earlier patterns excluded; the last pattern that matches a path decides.
// Patterns are cleaned like paths (`./a//b/` is `a/b`, a leading `/` is dropped) and match
// context-relative paths with `/` separators: `*` is any run of characters but `/`, `?` one
// such character, `[a-z]` / `[^a-z]` a class, `\` escapes the next character, `**` any number
// of directories (`**/x` is x at any depth, a trailing `**` everything below). A pattern that
// matches a directory also excludes everything below it (`node_modules` excludes
// `node_modules/a/b`).
//
// Parsing is pure and bounded; matching is linear in pattern times path length (no
// backtracking), so a hostile .dockerignore cannot stall abxd.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"

namespace abx::image {

struct DockerIgnoreLimits {
  std::size_t max_bytes = 1 << 20;
  std::size_t max_patterns = 10'000;
  std::size_t max_pattern_bytes = 1024;
};

class DockerIgnore {
 public:
  using Limits = DockerIgnoreLimits;

  // invalid_argument "<name>:N: <what>" for a bad pattern (an unterminated `[`, a trailing `\`)
  // or over the limits.
  static Result<DockerIgnore> parse(std::string_view text, std::string_view name = ".dockerignore",
                                    const Limits& limits = {});

  // Whether `path` (relative to the context, `/`-separated, no leading `/`) is excluded.
  bool excluded(std::string_view path) const;

  // Whether any pattern is an exception (then an excluded directory must still be walked).
  bool has_exceptions() const { return has_exceptions_; }
  bool empty() const { return patterns_.empty(); }

  struct Token {
    enum Kind { kLiteral, kAnyChar, kStar, kClass, kAnyDirs, kAll } kind = kLiteral;
    char c = 0;
    bool negated = false;
    std::vector<std::pair<char, char>> ranges;  // kClass: inclusive ranges (a = a-a)
  };
  struct Pattern {
    std::vector<Token> tokens;
    std::size_t components = 1;  // path components of the cleaned pattern
    bool exception = false;
    int line = 0;
  };

 private:
  std::vector<Pattern> patterns_;
  bool has_exceptions_ = false;
};

// Go's filepath.Clean of a '/'-separated path, lexically ("." and empty parts dropped, ".."
// taking off the part before it, never climbing above the start), without a leading '/':
// "a/./b/../c/" -> "a/c", "../x" -> "x", "/" -> "".
std::string clean_relative_path(std::string_view p);

}  // namespace abx::image
