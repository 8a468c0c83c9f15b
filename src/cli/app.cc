// The abx command line: global flags, subcommands, parse errors → exit 2.
#include <algorithm>
#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"

namespace abx::cli {

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// From argv[i] on, the first word that is neither an option of `level` (or of a parent of it)
// nor such an option's value, as CLI11 reads them; argc when there is none or `--` comes first.
int next_word(CLI::App* level, int argc, char** argv, int i) {
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") return argc;
    if (a.size() <= 1 || a[0] != '-') return i;
    if (a.find('=') != std::string::npos) continue;
    for (CLI::App* l = level; l != nullptr; l = l->get_parent()) {
      if (const CLI::Option* o = l->get_option_no_throw(a)) {
        if (o->get_items_expected_max() > 0) ++i;  // its value
        break;
      }
    }
  }
  return argc;
}

// The subcommand of `level` that `word` names (or an alias of it), or nullptr.
CLI::App* subcommand_named(CLI::App* level, const std::string& word) {
  for (CLI::App* s : level->get_subcommands([](CLI::App*) { return true; })) {
    if (s->check_name(word)) return s;
  }
  return nullptr;
}

// After a parse error: walks argv down the subcommand tree as CLI11 does and returns the message
// for the first word that names no subcommand where one was needed, with the closest name when
// one is near.
std::optional<std::string> unknown_command(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  std::string path = "abx";
  for (int i = next_word(level, argc, argv, 1); i < argc; i = next_word(level, argc, argv, i + 1)) {
    std::string a = argv[i];
    auto subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return std::nullopt;  // a positional argument: not ours to judge
    if (CLI::App* match = subcommand_named(level, a)) {
      level = match;
      path += " " + match->get_name();
      continue;
    }
    std::string best;
    std::size_t best_d = 3;  // at most two edits away
    for (CLI::App* s : subs) {
      std::vector<std::string> names = s->get_aliases();
      names.push_back(s->get_name());
      for (const auto& n : names) {
        std::size_t d = edit_distance(a, n);
        if (n.rfind(a, 0) == 0 && a.size() >= 2) d = std::min<std::size_t>(d, 1);
        if (d < best_d) {
          best_d = d;
          best = s->get_name();
        }
      }
    }
    std::string msg = "unknown command '" + a + "'";
    if (!best.empty()) msg += "; did you mean '" + best + "'?";
    std::string all;
    for (CLI::App* s : subs) all += (all.empty() ? "" : ", ") + s->get_name();
    msg += "\n" + path + " commands: " + all + " (see " + path + " --help)";
    return msg;
  }
  return std::nullopt;
}

// Thrown by a command left unfilled when CLI11 enters it: argv named it where the first word did
// not (run_main() then parses again with every command filled).
struct UnfilledCommandEntered {};

constexpr const TopCommand* kCommands[] = {
    &kSandboxCommand,  &kExecCommand,     &kCodeCommand,       &kFilesCommand, &kLogsCommand,
    &kTemplateCommand, &kSnapshotCommand, &kCommandsCommand,   &kRunCommand,   &kTokenCommand,
    &kUpCommand,       &kEnvCommand,      &kCompletionCommand, &kMcpCommand};

// The top-level command argv names, or nullptr when it names none (`abx --help`, a typo).
CLI::App* named_command(CLI::App& app, int argc, char** argv) {
  int i = next_word(&app, argc, argv, 1);
  return i < argc ? subcommand_named(&app, argv[i]) : nullptr;
}

// Builds the command line and runs what argv selects. Only the named top-level command gets its
// arguments and subcommands unless `fill_all` (building all of them is most of the CLI's
// start-up: page faults of the heap and of code run once); the others are a name, an alias and
// a help line, enough for --help and for the unknown-command message.
int parse_and_run(int argc, char** argv, bool fill_all) {
  Context ctx;
  CLI::App app{
      "abx: local-first agent sandboxes. Create sandboxes, run processes and registered "
      "commands, move files, discover commands.\n"
      "Configuration: ABX_API_URL, ABX_API_KEY, ABX_DOMAIN (or E2B_*), ABX_HOME; flags below "
      "override them.\n"
      "Exit codes: 0 ok, 1 error, 2 usage or bad command arguments, 3 auth, 4 not found, "
      "5 unreachable or timed out, 6 missing capability or wrong state; `abx exec` and custom "
      "commands exit with the command's code (exec: 125 when abx itself fails).",
      "abx"};
  app.set_version_flag("--version", std::string("abx ") + ABX_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  auto& f = ctx.flags;
  app.add_flag("--json", f.json, "Machine-readable JSON output");
  app.add_option("--api-url", f.api_url, "Control plane URL (ABX_API_URL)");
  app.add_option("--api-key", f.api_key, "API key (ABX_API_KEY)");
  app.add_option("--domain", f.domain, "Sandbox domain (ABX_DOMAIN)");
  app.add_option("--sandbox-url", f.sandbox_url, "envd URL for every sandbox (ABX_SANDBOX_URL)");
  app.add_option("--server-url", f.server_url, "Command server URL (ABX_SERVER_URL)");
  app.add_option("--access-token", f.access_token,
                 "Sandbox access token; with --server-url/--sandbox-url: direct mode, no "
                 "control plane (ABX_ACCESS_TOKEN)");
  app.add_option("--home", f.home, "Local templates root (ABX_HOME, default ~/.abx)");
  app.add_option("--template", f.template_id, "Template id for local discovery / direct mode");

  std::vector<std::pair<CLI::App*, const TopCommand*>> commands;
  for (const TopCommand* c : kCommands) {
    CLI::App* sub = app.add_subcommand(c->name, c->help);
    if (c->alias != nullptr) sub->alias(c->alias);
    commands.emplace_back(sub, c);
  }
  CLI::App* named = fill_all ? nullptr : named_command(app, argc, argv);
  for (auto& [sub, c] : commands) {
    if (fill_all || sub == named) {
      c->fill(sub, ctx);
    } else {
      sub->preparse_callback([](std::size_t) { throw UnfilledCommandEntered{}; });
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const UnfilledCommandEntered&) {
    return parse_and_run(argc, argv, /*fill_all=*/true);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (auto msg = unknown_command(app, argc, argv)) {
        ctx.fail(invalid_argument(*msg));
        return kExitUsage;
      }
    }
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  return ctx.exit_code;
}

}  // namespace

std::span<const TopCommand* const> top_commands() { return kCommands; }

int run_main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  return parse_and_run(argc, argv, /*fill_all=*/false);
}

}  // namespace abx::cli
