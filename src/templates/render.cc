// Custom-command rendering. The safety argument has two halves:
//  1. validate_custom_command() proves that every {placeholder} sits where the shell will parse
//     a single-quoted word as exactly its content: plain context, not inside '…' or "…" (where
//     our quotes would be literal characters or would close the author's quotes), not inside
//     `…` (the backquote scanner ignores single quotes), not in a # comment (a newline in the
//     value would end the comment), not after << (here-document bodies ignore quotes), not
//     after a backslash (which would escape our opening quote) and not right after $ (bash
//     would read $'…' as ANSI-C quoting, where \' does not end the string).
//     Bash's (( )), $(( )) and [[ -eq ]] evaluate operands as arithmetic *after* quote removal,
//     and arithmetic evaluates a[$(cmd)] — so placeholders are refused anywhere after (( or [[.
//  2. shell_quote() writes the value as '…', with each ' as '\'' — inside single quotes POSIX
//     sh gives no character a special meaning, so the value cannot end the word early.
#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <set>

#include "abx/base/try.h"
#include "abx/registry/coerce.h"
#include "abx/templates/template.h"

namespace abx::templates {
namespace json = boost::json;

std::string shell_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

namespace {

struct Piece {
  bool placeholder = false;
  std::string text;  // literal text, or the argument name
};

bool word_break(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' ||
         c == ')' || c == '<' || c == '>';
}

// Splits a command template into literal text and placeholders while tracking the shell's
// lexical state, and rejects placeholders in any context where quoting would not hold.
// One function on purpose: a state machine over the characters, whose states share the
// position, the quoting state and the literal being built.
Result<std::vector<Piece>> scan(std::string_view t) {
  enum class State { kPlain, kSingle, kDouble, kComment };
  State state = State::kPlain;
  bool escaped = false;
  bool backquote = false;
  bool heredoc = false;
  bool arithmetic = false;
  std::vector<Piece> pieces;
  std::string lit;
  auto where = [&](std::size_t i) { return " at offset " + std::to_string(i); };
  for (std::size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (c == '\0') return invalid_argument("NUL in command template");
    if (c == '{' || c == '}') {
      if (i + 1 < t.size() && t[i + 1] == c) {  // {{ or }}: a literal brace
        lit += c;
        ++i;
        escaped = false;
        continue;
      }
      if (c == '}') return invalid_argument("unmatched '}'" + where(i) + " (write }} for a brace)");
      std::size_t close = t.find('}', i + 1);
      if (close == std::string_view::npos) {
        return invalid_argument("unclosed '{'" + where(i) + " (write {{ for a brace)");
      }
      std::string name(t.substr(i + 1, close - i - 1));
      if (!registry::valid_arg_name(name)) {
        return invalid_argument("invalid placeholder '{" + name + "}'" + where(i));
      }
      std::string ctx;
      if (state == State::kSingle) ctx = "inside single quotes";
      if (state == State::kDouble) ctx = "inside double quotes";
      if (state == State::kComment) ctx = "inside a # comment";
      if (backquote) ctx = "inside `…` (use $(…))";
      if (heredoc) ctx = "after a here-document (<<)";
      if (arithmetic) ctx = "after (( or [[ (bash evaluates quoted operands as arithmetic)";
      if (escaped) ctx = "after a backslash";
      if (!lit.empty() && lit.back() == '$' && !escaped) ctx = "right after '$' (write ${{VAR}})";
      if (!ctx.empty()) {
        return invalid_argument("placeholder {" + name + "} " + ctx + where(i) +
                                "; placeholders are quoted for you, leave them bare");
      }
      if (!lit.empty()) pieces.push_back({false, std::move(lit)});
      lit.clear();
      pieces.push_back({true, std::move(name)});
      i = close;
      continue;
    }
    lit += c;
    switch (state) {
      case State::kPlain:
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '\'') {
          state = State::kSingle;
        } else if (c == '"') {
          state = State::kDouble;
        } else if (c == '`') {
          backquote = !backquote;
        } else if (c == '#' && (lit.size() == 1 || word_break(lit[lit.size() - 2]))) {
          state = State::kComment;
        } else if (c == '<' && i + 1 < t.size() && t[i + 1] == '<') {
          heredoc = true;
        } else if ((c == '(' || c == '[') && i + 1 < t.size() && t[i + 1] == c) {
          arithmetic = true;  // conservative: never reset, even after )) or ]]
        }
        break;
      case State::kSingle:
        if (c == '\'') state = State::kPlain;
        break;
      case State::kDouble:
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          state = State::kPlain;
        } else if (c == '`') {
          backquote = !backquote;
        }
        break;
      case State::kComment:
        if (c == '\n') state = State::kPlain;
        break;
    }
  }
  if (state == State::kSingle || state == State::kDouble) {
    return invalid_argument("unterminated quote in command template");
  }
  if (backquote) return invalid_argument("unterminated ` in command template");
  if (!lit.empty()) pieces.push_back({false, std::move(lit)});
  return pieces;
}

registry::RegisteredCommand as_registered(const CustomCommand& cmd) {
  registry::RegisteredCommand rc;
  rc.name = cmd.name;
  rc.description = cmd.description;
  rc.args = cmd.args;
  return rc;
}

std::string render_value(const json::value& v) {
  char buf[64];
  if (v.is_int64()) {
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v.as_int64());
    return std::string(buf, p);
  }
  if (v.is_double()) {
    // Shortest text that reads back as the same double: only [0-9.e+-], safe unquoted.
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v.as_double());
    return std::string(buf, p);
  }
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  return shell_quote(v.as_string());
}

}  // namespace

Status validate_custom_command(const CustomCommand& cmd) {
  if (cmd.command.empty()) return invalid_argument("command is empty");
  ABX_ASSIGN_OR_RETURN(auto pieces, scan(cmd.command));
  std::set<std::string> names;
  for (const auto& a : cmd.args) {
    if (!names.insert(a.name).second)
      return invalid_argument("arg '" + a.name + "' declared twice");
  }
  for (const auto& p : pieces) {
    if (p.placeholder && !names.count(p.text)) {
      return invalid_argument("placeholder {" + p.text + "} is not a declared arg");
    }
  }
  return {};
}

Result<std::string> render_custom_command(const CustomCommand& cmd, const json::value& args) {
  ABX_ASSIGN_OR_RETURN(auto pieces, scan(cmd.command));
  ABX_TRY(validate_custom_command(cmd));
  ABX_ASSIGN_OR_RETURN(auto kwargs, registry::coerce_kwargs(as_registered(cmd), args));
  for (const auto& kv : kwargs) {
    if (kv.value().is_string() && kv.value().get_string().find(char{0}) != json::string::npos) {
      return invalid_argument("argument '" + std::string(kv.key()) +
                              "' contains a NUL byte, which no shell argument can hold");
    }
  }
  std::string out;
  for (const auto& p : pieces) {
    if (!p.placeholder) {
      out += p.text;
    } else if (const json::value* v = kwargs.if_contains(p.text)) {
      out += render_value(*v);
    } else {
      out += "''";  // optional, no default, not given: an empty word
    }
    if (out.size() > kMaxRenderedCommandBytes) {
      return Error(ErrorCode::kPayloadTooLarge,
                   "rendered command for '" + cmd.name + "' is longer than " +
                       std::to_string(kMaxRenderedCommandBytes) + " bytes");
    }
  }
  return out;
}

}  // namespace abx::templates
