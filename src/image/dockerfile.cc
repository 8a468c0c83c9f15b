// The Dockerfile subset parser: physical lines -> logical lines (continuations) -> instructions.
#include "abx/image/dockerfile.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cctype>

#include "abx/base/ascii.h"
#include "abx/base/try.h"

namespace abx::image {

namespace {

struct Logical {
  int line;
  std::string text;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Docker's rule: [a-z][a-z0-9-_.]*
bool valid_stage_name(std::string_view s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return false;
  }
  return true;
}

// The index of the stage `ref` names (a name or a decimal index), or -1.
int stage_index(const std::vector<Stage>& stages, std::string_view ref) {
  if (!ref.empty() && ref.size() < 6 &&
      ref.find_first_not_of("0123456789") == std::string_view::npos) {
    int n = std::stoi(std::string(ref));
    return n < static_cast<int>(stages.size()) ? n : -1;
  }
  const std::string l = ascii_lower(ref);
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].name == l) return static_cast<int>(i);
  }
  return -1;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

class Parser {
 public:
  Parser(const ParseLimits& limits, std::string_view name) : limits_(limits), name_(name) {}

  Error error(int line, const std::string& what) const {
    return invalid_argument(std::string(name_) + ":" + std::to_string(line) + ": " + what);
  }

  Result<std::vector<Logical>> logical_lines(std::string_view text) const {
    std::vector<Logical> out;
    std::string cur;
    int cur_line = 0;  // 0: not inside a continuation
    int n = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view raw = text.substr(pos, end - pos);
      pos = end + 1;
      ++n;
      if (raw.size() > limits_.max_line_bytes) {
        return error(n, "line longer than " + std::to_string(limits_.max_line_bytes) + " bytes");
      }
      if (raw.find('\0') != std::string_view::npos) return error(n, "NUL byte in the file");
      std::string_view t = trim(raw);
      if (t.starts_with('#')) continue;  // comments, also inside a continuation
      if (t.empty() && cur_line == 0) continue;
      if (cur_line == 0) cur_line = n;
      if (t.ends_with('\\')) {
        std::string_view body = raw;
        while (!body.empty() && is_space(body.back())) body.remove_suffix(1);
        body.remove_suffix(1);
        cur.append(body);
        continue;
      }
      cur.append(raw);
      out.push_back({cur_line, std::move(cur)});
      cur.clear();
      cur_line = 0;
    }
    if (cur_line != 0) out.push_back({cur_line, std::move(cur)});
    return out;
  }

  // ["a", "b"] -> {a, b}; an error for anything else that starts with '['.
  Result<std::vector<std::string>> json_array(int line, std::string_view s) const {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(s, ec);
    if (ec || !v.is_array()) return error(line, "bad JSON array: " + std::string(s));
    std::vector<std::string> out;
    for (const auto& e : v.as_array()) {
      if (!e.is_string()) return error(line, "bad JSON array (strings only): " + std::string(s));
      out.emplace_back(e.as_string());
    }
    return out;
  }

  // The exec form (JSON array) or the shell form wrapped in /bin/sh -c.
  Status command(Instruction& in, std::string_view rest) const {
    if (rest.starts_with('[')) {
      ABX_ASSIGN_OR_RETURN(in.args, json_array(in.line, rest));
      if (in.args.empty() && in.op == Op::kRun) return error(in.line, "RUN needs a command");
      return {};
    }
    in.shell_form = true;
    in.args = {"/bin/sh", "-c", std::string(rest)};
    return {};
  }

  // Whitespace-separated words; quotes group and are removed, a backslash escapes.
  Result<std::vector<std::string>> words(int line, std::string_view s) const {
    std::vector<std::string> out;
    std::string cur;
    bool in_word = false;
    char quote = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (quote) {
        if (c == quote) {
          quote = 0;
        } else if (c == '\\' && quote == '"' && i + 1 < s.size()) {
          cur.push_back(s[++i]);
        } else {
          cur.push_back(c);
        }
        continue;
      }
      if (is_space(c)) {
        if (in_word) out.push_back(std::move(cur));
        cur.clear();
        in_word = false;
        continue;
      }
      in_word = true;
      if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '\\' && i + 1 < s.size()) {
        cur.push_back(s[++i]);
      } else {
        cur.push_back(c);
      }
    }
    if (quote) return error(line, std::string("unterminated ") + quote + " quote");
    if (in_word) out.push_back(std::move(cur));
    return out;
  }

  static bool valid_key(std::string_view k) { return !k.empty() && k.find('=') != 0; }

  // K=V pairs (ENV, LABEL); ENV also takes the legacy "K V..." form.
  Status pairs(Instruction& in, std::string_view rest, bool legacy_ok) const {
    const std::string what(op_name(in.op));
    std::size_t first_end = 0;
    while (first_end < rest.size() && !is_space(rest[first_end])) ++first_end;
    if (legacy_ok && rest.substr(0, first_end).find('=') == std::string_view::npos) {
      std::string_view value = trim(rest.substr(first_end));
      if (value.empty()) return error(in.line, what + " " + std::string(rest) + " needs a value");
      in.pairs.emplace_back(std::string(rest.substr(0, first_end)), std::string(value));
      return {};
    }
    ABX_ASSIGN_OR_RETURN(auto ws, words(in.line, rest));
    for (auto& w : ws) {
      auto eq = w.find('=');
      if (eq == std::string::npos || eq == 0) {
        return error(in.line, what + " expects KEY=VALUE, got '" + w + "'");
      }
      in.pairs.emplace_back(w.substr(0, eq), w.substr(eq + 1));
    }
    return {};
  }

  Status copy(Instruction& in, std::string_view rest) const {
    // Flags first: --chown only.
    while (rest.starts_with("--")) {
      std::size_t end = 0;
      while (end < rest.size() && !is_space(rest[end])) ++end;
      std::string_view flag = rest.substr(0, end);
      rest = trim(rest.substr(end));
      if (flag.starts_with("--chown=") && flag.size() > 8) {
        in.chown = std::string(flag.substr(8));
      } else if (flag.starts_with("--from=") && flag.size() > 7 && in.op == Op::kCopy) {
        in.from = std::string(flag.substr(7));
      } else {
        return error(
            in.line,
            "unsupported flag " + std::string(flag) + " for " + std::string(op_name(in.op)) +
                (in.op == Op::kCopy ? " (only --chown= and --from=)" : " (only --chown=)"));
      }
    }
    if (rest.starts_with('[')) {
      ABX_ASSIGN_OR_RETURN(in.args, json_array(in.line, rest));
    } else {
      ABX_ASSIGN_OR_RETURN(in.args, words(in.line, rest));
    }
    if (in.args.size() < 2) {
      return error(in.line,
                   std::string(op_name(in.op)) + " needs at least one source and a destination");
    }
    for (std::size_t i = 0; i + 1 < in.args.size(); ++i) {
      const auto& src = in.args[i];
      if (in.op == Op::kAdd && (src.find("://") != std::string::npos)) {
        return error(in.line, "ADD from a URL is not supported (" + src +
                                  "): download it into the context and COPY it");
      }
      if (src.empty()) return error(in.line, "empty source");
    }
    if (in.args.back().empty()) return error(in.line, "empty destination");
    return {};
  }

  // One function of ~85 lines on purpose: the instruction word, then one case per instruction
  // (the longer ones call a parser above).
  Result<Instruction> instruction(const Logical& l) const {
    std::string_view t = trim(l.text);
    std::size_t end = 0;
    while (end < t.size() && !is_space(t[end])) ++end;
    const std::string word = upper(t.substr(0, end));
    std::string_view rest = trim(t.substr(end));
    Instruction in;
    in.line = l.line;
    in.text = word + (rest.empty() ? "" : " ") + std::string(rest);
    static const std::pair<const char*, Op> kOps[] = {
        {"FROM", Op::kFrom},   {"RUN", Op::kRun}, {"COPY", Op::kCopy},
        {"ADD", Op::kAdd},     {"ENV", Op::kEnv}, {"WORKDIR", Op::kWorkdir},
        {"USER", Op::kUser},   {"CMD", Op::kCmd}, {"ENTRYPOINT", Op::kEntrypoint},
        {"LABEL", Op::kLabel}, {"ARG", Op::kArg}};
    bool known = false;
    for (const auto& [n, op] : kOps) {
      if (word == n) {
        in.op = op;
        known = true;
      }
    }
    if (!known) {
      std::string shown = word.size() > 40 ? word.substr(0, 40) + "..." : word;
      return error(l.line, "unknown instruction " + shown);
    }
    if (rest.empty()) return error(l.line, word + " needs arguments");
    switch (in.op) {
      case Op::kFrom: {
        ABX_ASSIGN_OR_RETURN(auto ws, words(l.line, rest));
        if (!ws.empty() && ws[0].starts_with("--")) {
          return error(l.line, "FROM flags (" + ws[0] + ") are not supported");
        }
        if (ws.size() == 3 && upper(ws[1]) == "AS") {
          in.stage_name = ascii_lower(ws[2]);
          if (!valid_stage_name(in.stage_name)) {
            return error(l.line, "stage name '" + ws[2] +
                                     "' must start with a letter and hold only letters, digits, "
                                     "'-', '_' and '.'");
          }
          ws.resize(1);
        }
        if (ws.size() != 1) return error(l.line, "FROM takes one image [AS name]");
        in.args = std::move(ws);
        break;
      }
      case Op::kRun:
      case Op::kCmd:
      case Op::kEntrypoint:
        ABX_TRY(command(in, rest));
        break;
      case Op::kCopy:
      case Op::kAdd:
        ABX_TRY(copy(in, rest));
        break;
      case Op::kEnv:
        ABX_TRY(pairs(in, rest, true));
        break;
      case Op::kLabel:
        ABX_TRY(pairs(in, rest, false));
        break;
      case Op::kWorkdir:
        in.args = {std::string(rest)};
        break;
      case Op::kUser: {
        ABX_ASSIGN_OR_RETURN(auto ws, words(l.line, rest));
        if (ws.size() != 1) return error(l.line, "USER takes one user[:group]");
        in.args = std::move(ws);
        break;
      }
      case Op::kArg: {
        ABX_ASSIGN_OR_RETURN(auto ws, words(l.line, rest));
        if (ws.size() != 1) return error(l.line, "ARG takes one NAME[=default]");
        auto eq = ws[0].find('=');
        if (eq == 0) return error(l.line, "ARG needs a name");
        if (eq == std::string::npos) {
          in.pairs.emplace_back(ws[0], "");
        } else {
          in.pairs.emplace_back(ws[0].substr(0, eq), ws[0].substr(eq + 1));
          in.has_default = true;
        }
        break;
      }
    }
    return in;
  }

 private:
  const ParseLimits& limits_;
  std::string_view name_;
};

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kFrom:
      return "FROM";
    case Op::kRun:
      return "RUN";
    case Op::kCopy:
      return "COPY";
    case Op::kAdd:
      return "ADD";
    case Op::kEnv:
      return "ENV";
    case Op::kWorkdir:
      return "WORKDIR";
    case Op::kUser:
      return "USER";
    case Op::kCmd:
      return "CMD";
    case Op::kEntrypoint:
      return "ENTRYPOINT";
    case Op::kLabel:
      return "LABEL";
    case Op::kArg:
      return "ARG";
  }
  return "?";
}

Result<Dockerfile> parse_dockerfile(std::string_view text, const ParseLimits& limits,
                                    std::string_view name) {
  Parser p(limits, name);
  if (text.size() > limits.max_bytes) {
    return invalid_argument(std::string(name) + ": larger than " +
                            std::to_string(limits.max_bytes) + " bytes");
  }
  ABX_ASSIGN_OR_RETURN(auto lines, p.logical_lines(text));
  Dockerfile df;
  // Every stage's name first: a reference to a later stage is reported as such (a cycle).
  for (const auto& l : lines) {
    std::string_view t = trim(l.text);
    if (upper(t.substr(0, 5)) != "FROM " && upper(t.substr(0, 5)) != "FROM\t") continue;
    ABX_ASSIGN_OR_RETURN(auto in, p.instruction(l));
    for (std::size_t i = 0; i < df.stages.size(); ++i) {
      if (!in.stage_name.empty() && df.stages[i].name == in.stage_name) {
        return p.error(in.line, "stage name '" + in.stage_name + "' is already used at line " +
                                    std::to_string(df.stages[i].line));
      }
    }
    df.stages.push_back({in.stage_name, in.line});
  }
  int stage = -1;
  for (const auto& l : lines) {
    if (df.instructions.size() >= limits.max_instructions) {
      return p.error(l.line,
                     "more than " + std::to_string(limits.max_instructions) + " instructions");
    }
    ABX_ASSIGN_OR_RETURN(auto in, p.instruction(l));
    if (in.op == Op::kFrom) {
      ++stage;
      // FROM <stage>: an earlier stage only; this one or a later one would be a cycle.
      int ref = stage_index(df.stages, in.args[0]);
      if (ref >= stage && !df.stages[ref].name.empty() &&
          df.stages[ref].name == ascii_lower(in.args[0])) {
        return p.error(in.line, "FROM " + in.args[0] + ": stage '" + df.stages[ref].name +
                                    "' is defined at line " + std::to_string(df.stages[ref].line) +
                                    (ref == stage ? " (itself)" : "") +
                                    ": a stage can only build on earlier stages");
      }
    } else if (stage < 0 && in.op != Op::kArg) {
      return p.error(in.line, std::string(op_name(in.op)) + " before FROM");
    }
    in.stage = std::max(stage, 0);
    if (!in.from.empty()) {
      const int ref = stage_index(df.stages, in.from);
      if (ref < 0) {
        return p.error(in.line, "COPY --from=" + in.from +
                                    ": no such stage (name a stage defined above with FROM ... "
                                    "AS name, or its index)");
      }
      if (ref >= stage) {
        return p.error(in.line,
                       "COPY --from=" + in.from + ": stage " +
                           (df.stages[ref].name.empty() ? std::to_string(ref)
                                                        : "'" + df.stages[ref].name + "'") +
                           " is defined at line " + std::to_string(df.stages[ref].line) +
                           (ref == stage ? " (this stage)" : "") +
                           ": a stage can only copy from earlier stages");
      }
      in.from_stage = ref;
    }
    df.instructions.push_back(std::move(in));
  }
  if (stage < 0) return invalid_argument(std::string(name) + ": no FROM instruction");
  return df;
}

Result<std::string> expand_vars(std::string_view in,
                                const std::map<std::string, std::string>& vars) {
  auto lookup = [&](const std::string& k) -> const std::string* {
    auto it = vars.find(k);
    return it == vars.end() ? nullptr : &it->second;
  };
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '\\' && i + 1 < in.size() && in[i + 1] == '$') {
      out.push_back('$');
      ++i;
      continue;
    }
    if (c != '$' || i + 1 >= in.size()) {
      out.push_back(c);
      continue;
    }
    if (in[i + 1] == '{') {
      std::size_t close = in.find('}', i + 2);
      if (close == std::string_view::npos) {
        return invalid_argument("unterminated ${ in '" + std::string(in) + "'");
      }
      std::string_view body = in.substr(i + 2, close - i - 2);
      std::size_t colon = body.find(':');
      std::string key(body.substr(0, colon));
      const std::string* v = lookup(key);
      if (colon == std::string_view::npos) {
        if (v) out += *v;
      } else if (colon + 1 < body.size() && body[colon + 1] == '-') {
        out += (v && !v->empty()) ? *v : std::string(body.substr(colon + 2));
      } else if (colon + 1 < body.size() && body[colon + 1] == '+') {
        if (v && !v->empty()) out += body.substr(colon + 2);
      } else {
        return invalid_argument("unsupported substitution ${" + std::string(body) + "}");
      }
      i = close;
      continue;
    }
    std::size_t j = i + 1;
    while (j < in.size() && name_char(in[j])) ++j;
    if (j == i + 1) {
      out.push_back('$');
      continue;
    }
    if (const std::string* v = lookup(std::string(in.substr(i + 1, j - i - 1)))) out += *v;
    i = j - 1;
  }
  return out;
}

std::vector<std::string> plain_var_refs(std::string_view in) {
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::vector<std::string> out;
  for (std::size_t i = 0; i + 1 < in.size(); ++i) {
    if (in[i] == '\\' && in[i + 1] == '$') {
      ++i;
      continue;
    }
    if (in[i] != '$') continue;
    if (in[i + 1] == '{') {
      std::size_t close = in.find('}', i + 2);
      if (close == std::string_view::npos) break;
      std::string_view body = in.substr(i + 2, close - i - 2);
      if (body.find(':') == std::string_view::npos && !body.empty()) out.emplace_back(body);
      i = close;
      continue;
    }
    std::size_t j = i + 1;
    while (j < in.size() && name_char(in[j])) ++j;
    if (j > i + 1) out.emplace_back(in.substr(i + 1, j - i - 1));
    i = j - 1;
  }
  return out;
}

}  // namespace abx::image
