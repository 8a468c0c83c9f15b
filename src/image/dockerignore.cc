// .dockerignore: patterns compiled to tokens, matched by a memoised walk (no backtracking).
#include "abx/image/dockerignore.h"

#include <cstdint>

#include "abx/base/ascii.h"

namespace abx::image {

namespace {

using Token = DockerIgnore::Token;

// The tokens of a cleaned pattern; false for an unterminated class or a trailing backslash.
bool compile(std::string_view p, std::vector<Token>& out) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    Token t;
    if (c == '*') {
      if (i + 1 < p.size() && p[i + 1] == '*') {
        ++i;
        if (i + 1 < p.size() && p[i + 1] == '/') ++i;  // "**/" is "**"
        t.kind = i + 1 == p.size() ? Token::kAll : Token::kAnyDirs;
      } else {
        t.kind = Token::kStar;
      }
    } else if (c == '?') {
      t.kind = Token::kAnyChar;
    } else if (c == '\\') {
      if (i + 1 == p.size()) return false;
      t.c = p[++i];
    } else if (c == '[') {
      t.kind = Token::kClass;
      std::size_t j = i + 1;
      if (j < p.size() && p[j] == '^') {
        t.negated = true;
        ++j;
      }
      bool closed = false;
      bool first = true;
      while (j < p.size()) {
        char lo = p[j];
        if (lo == ']' && !first) {
          closed = true;
          break;
        }
        first = false;
        if (lo == '\\') {
          if (++j == p.size()) return false;
          lo = p[j];
        }
        char hi = lo;
        if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
          j += 2;
          hi = p[j];
          if (hi == '\\') {
            if (++j == p.size()) return false;
            hi = p[j];
          }
        }
        t.ranges.emplace_back(lo, hi);
        ++j;
      }
      if (!closed) return false;
      i = j;
    } else {
      t.c = c;
    }
    out.push_back(std::move(t));
  }
  return true;
}

// Whether tokens match all of `s`. M(ti, si): tokens[ti..] match s[si..]; D(ti, si): inside
// kAnyDirs at ti, some '/' at or after si ends the directories.
class Matcher {
 public:
  Matcher(const std::vector<Token>& t, std::string_view s)
      : t_(t), s_(s), w_(s.size() + 1), memo_(2 * (t.size() + 1) * w_, 0) {}

  bool match() { return m(0, 0); }

 private:
  // 0 unknown, 1 false, 2 true.
  std::uint8_t& cell(bool dirs, std::size_t ti, std::size_t si) {
    return memo_[(dirs ? (t_.size() + 1) * w_ : 0) + ti * w_ + si];
  }

  bool m(std::size_t ti, std::size_t si) {
    // Iterative over literal runs would be faster; patterns are short, the memo bounds the work.
    auto& c = cell(false, ti, si);
    if (c) return c == 2;
    bool r = false;
    if (ti == t_.size()) {
      r = si == s_.size();
    } else {
      const Token& t = t_[ti];
      const bool more = si < s_.size();
      switch (t.kind) {
        case Token::kLiteral:
          r = more && s_[si] == t.c && m(ti + 1, si + 1);
          break;
        case Token::kAnyChar:
          r = more && s_[si] != '/' && m(ti + 1, si + 1);
          break;
        case Token::kClass: {
          bool in = false;
          if (more) {
            for (const auto& [lo, hi] : t.ranges) in = in || (s_[si] >= lo && s_[si] <= hi);
          }
          r = more && s_[si] != '/' && in != t.negated && m(ti + 1, si + 1);
          break;
        }
        case Token::kStar:
          r = m(ti + 1, si) || (more && s_[si] != '/' && m(ti, si + 1));
          break;
        case Token::kAll:
          r = m(ti + 1, si) || (more && m(ti, si + 1));
          break;
        case Token::kAnyDirs:
          r = m(ti + 1, si) || d(ti, si);
          break;
      }
    }
    c = r ? 2 : 1;
    return r;
  }

  bool d(std::size_t ti, std::size_t si) {
    auto& c = cell(true, ti, si);
    if (c) return c == 2;
    bool r = false;
    if (si < s_.size()) r = (s_[si] == '/' && m(ti + 1, si + 1)) || d(ti, si + 1);
    c = r ? 2 : 1;
    return r;
  }

  const std::vector<Token>& t_;
  std::string_view s_;
  std::size_t w_;
  std::vector<std::uint8_t> memo_;
};

}  // namespace

std::string clean_relative_path(std::string_view p) {
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= p.size()) {
    std::size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string c(p.substr(i, j - i));
    i = j + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(std::move(c));
  }
  std::string out;
  for (const auto& c : parts) out += (out.empty() ? "" : "/") + c;
  return out;
}

Result<DockerIgnore> DockerIgnore::parse(std::string_view text, std::string_view name,
                                         const Limits& limits) {
  if (text.size() > limits.max_bytes) {
    return invalid_argument(std::string(name) + ": larger than " +
                            std::to_string(limits.max_bytes) + " bytes");
  }
  DockerIgnore di;
  int n = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++n;
    auto err = [&](const std::string& what) {
      return invalid_argument(std::string(name) + ":" + std::to_string(n) + ": " + what);
    };
    if (line.starts_with('#')) continue;
    line = ascii_trim(line);
    if (line.empty()) continue;
    if (line.size() > limits.max_pattern_bytes) {
      return err("pattern longer than " + std::to_string(limits.max_pattern_bytes) + " bytes");
    }
    if (di.patterns_.size() >= limits.max_patterns) {
      return err("more than " + std::to_string(limits.max_patterns) + " patterns");
    }
    Pattern p;
    p.line = n;
    if (line.starts_with('!')) {
      p.exception = true;
      line = ascii_trim(line.substr(1));
      if (line.empty()) return err("'!' needs a pattern");
    }
    const std::string cleaned = clean_relative_path(line);
    if (cleaned.empty()) continue;  // "." or "/": the context itself is never excluded
    for (char c : cleaned) p.components += c == '/';
    if (!compile(cleaned, p.tokens)) {
      return err("bad pattern '" + std::string(line) +
                 "' (an unterminated [ class or a trailing \\)");
    }
    di.has_exceptions_ = di.has_exceptions_ || p.exception;
    di.patterns_.push_back(std::move(p));
  }
  return di;
}

bool DockerIgnore::excluded(std::string_view path) const {
  // The path's first k components, for a pattern of k components matching a parent.
  auto prefix = [&path](std::size_t k) -> std::string_view {
    std::size_t i = 0;
    for (std::size_t seen = 0; i < path.size(); ++i) {
      if (path[i] == '/' && ++seen == k) return path.substr(0, i);
    }
    return path;
  };
  bool out = false;
  for (const auto& p : patterns_) {
    bool hit = Matcher(p.tokens, path).match();
    if (!hit) {
      std::string_view parent = prefix(p.components);
      hit = parent.size() < path.size() && Matcher(p.tokens, parent).match();
    }
    if (hit) out = !p.exception;
  }
  return out;
}

}  // namespace abx::image
