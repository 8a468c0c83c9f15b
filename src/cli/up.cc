// abx env: export lines for the e2b SDKs (below).
// abx up [abxd flags…]: runs abxd in the foreground (exec, so signals and the exit code are
// abxd's own). abxd is looked for next to the abx binary, then on PATH.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "abx/templates/template.h"
#include "cli.h"

namespace abx::cli {

namespace {

std::string find_abxd() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto dir : {self.parent_path(), self.parent_path() / ".." / "platform"}) {
      auto p = dir / "abxd";
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      auto c = rest.find(':');
      auto p = std::filesystem::path(std::string(rest.substr(0, c))) / "abxd";
      if (::access(p.c_str(), X_OK) == 0) return p.string();
      if (c == std::string_view::npos) break;
      rest.remove_prefix(c + 1);
    }
  }
  return {};
}

void fill_up(CLI::App* up, Context& ctx) {
  auto args = std::make_shared<std::vector<std::string>>();
  up->add_option("abxd-args", *args, "Arguments for abxd");
  up->callback([&ctx, args] {
    std::string bin = find_abxd();
    if (bin.empty()) {
      ctx.exit_code = ctx.fail(not_found("abxd not found next to abx or on PATH"));
      return;
    }
    std::vector<char*> argv;
    std::string name = "abxd";
    argv.push_back(name.data());
    for (auto& a : *args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::cout.flush();
    ::execv(bin.c_str(), argv.data());
    ctx.exit_code = ctx.fail(unavailable("cannot run " + bin + ": " + std::strerror(errno)));
  });
}

// abx env: the environment the official e2b SDKs need to reach the abxd this CLI talks to, as
// `export` lines for `eval "$(abx env)"`.
void fill_env(CLI::App* env, Context& ctx) {
  env->callback([&ctx] {
    const client::ConnectionConfig c = ctx.config();
    if (c.api_key.empty()) {
      ctx.exit_code = ctx.fail(Error(ErrorCode::kUnauthenticated,
                                     "no API key for " + c.api_url +
                                         ": start abxd first (`abx up`; it writes one to " +
                                         ctx.api_key_file().string() + "), or set ABX_API_KEY"));
      return;
    }
    // The SDKs send sandbox traffic to E2B_SANDBOX_URL (abxd routes it by the E2b-Sandbox-Id
    // header); without it they would go to https://49983-<id>.<domain>. The Volume file methods
    // go to E2B_VOLUME_API_URL (abxd serves /volumecontent), else to E2B's cloud.
    std::vector<std::pair<std::string, std::string>> vars = {
        {"E2B_API_URL", c.api_url},
        {"E2B_SANDBOX_URL", c.sandbox_url.empty() ? c.api_url : c.sandbox_url},
        {"E2B_VOLUME_API_URL", c.api_url},
        {"E2B_API_KEY", c.api_key}};
    if (c.domain != client::ConnectionConfig{}.domain) vars.emplace_back("E2B_DOMAIN", c.domain);
    if (ctx.flags.json) {
      boost::json::object o;
      for (const auto& [k, v] : vars) o[k] = v;
      ctx.print_json(o);
    } else {
      for (const auto& [k, v] : vars)
        std::cout << "export " << k << "=" << templates::shell_quote(v) << "\n";
    }
    ctx.exit_code = kExitOk;
  });
}

}  // namespace

const TopCommand kEnvCommand{"env", nullptr,
                             "Print `export` lines that point the official e2b SDKs at this abxd: "
                             "eval \"$(abx env)\" (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY)",
                             fill_env};

const TopCommand kUpCommand{
    "up", nullptr,
    "Start abxd (the local platform) in the foreground with the embedded defaults; "
    "extra arguments after -- go to abxd",
    fill_up};

}  // namespace abx::cli
