// abx up [abxd flags…]: runs abxd in the foreground (exec, so signals and the exit code are
// abxd's own). abxd is looked for next to the abx binary, then on PATH.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

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

}  // namespace

const TopCommand kUpCommand{
    "up", nullptr,
    "Start abxd (the local platform) in the foreground with the embedded defaults; "
    "extra arguments after -- go to abxd",
    fill_up};

}  // namespace abx::cli
