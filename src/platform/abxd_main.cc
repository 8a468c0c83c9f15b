// abxd: the platform daemon. `abxd [--home DIR] [--listen HOST:PORT] [--domain D]`, and
// `abxd keys create|list|revoke` to manage API keys in the same store.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "abx/base/log.h"
#include "abx/platform/gateway.h"
#include "abx/store/store.h"
#include "abx/templates/template.h"
#include "platform/api.h"
#include "platform/sandboxes.h"

namespace fs = std::filesystem;
using namespace abx;

namespace {

// Exit codes (docs/abxd.md).
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitConfig = 3;  // store, binaries or home unusable
constexpr int kExitListen = 4;  // cannot bind the listen address

std::string default_home() {
  if (const char* h = std::getenv("ABX_HOME"); h && *h) return h;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.abx";
  return "/var/lib/abx";
}

// Sibling of this executable in the build tree or install prefix, else the compiled-in path.
std::string locate(const char* env, const std::string& compiled) {
  if (const char* v = std::getenv(env); v && *v) return v;
  return compiled;
}

Result<std::unique_ptr<store::Store>> open_store(const std::string& home) {
  std::error_code ec;
  fs::create_directories(home, ec);
  if (ec) return internal_error("cannot create " + home + ": " + ec.message());
  ::chmod(home.c_str(), 0700);
  return store::Store::open(fs::path(home) / "abx.db");
}

int keys_main(const std::string& home, const std::string& action, const std::string& arg) {
  auto st = open_store(home);
  if (!st.ok()) {
    std::cerr << "abxd: " << st.error().message() << "\n";
    return kExitConfig;
  }
  if (action == "create") {
    auto k = (*st)->create_api_key(arg.empty() ? "cli" : arg);
    if (!k.ok()) {
      std::cerr << "abxd: " << k.error().message() << "\n";
      return kExitConfig;
    }
    std::cout << k->key << "\n";  // stdout: scripts capture it
    std::cerr << "created API key " << k->info.id << " (" << k->info.name << ")\n";
    return kExitOk;
  }
  if (action == "list") {
    auto ks = (*st)->list_api_keys();
    if (!ks.ok()) {
      std::cerr << "abxd: " << ks.error().message() << "\n";
      return kExitConfig;
    }
    std::printf("%-18s %-10s %-20s %s\n", "ID", "PREFIX", "NAME", "STATUS");
    for (const auto& k : *ks) {
      std::printf("%-18s %-10s %-20s %s\n", k.id.c_str(), k.prefix.c_str(), k.name.c_str(),
                  k.revoked ? "revoked" : "active");
    }
    return kExitOk;
  }
  if (action == "ak-create") {
    auto k = (*st)->create_access_key(arg.empty() ? "cli" : arg);
    if (!k.ok()) {
      std::cerr << "abxd: " << k.error().message() << "\n";
      return kExitConfig;
    }
    std::cout << k->access_key_id << " " << k->secret << "\n";  // stdout: "AK SECRET"
    std::cerr << "created access key " << k->access_key_id << " (" << k->name << ")\n";
    return kExitOk;
  }
  if (action == "ak-list") {
    auto ks = (*st)->list_access_keys();
    if (!ks.ok()) {
      std::cerr << "abxd: " << ks.error().message() << "\n";
      return kExitConfig;
    }
    std::printf("%-22s %-20s %s\n", "ACCESS KEY", "NAME", "STATUS");
    for (const auto& k : *ks) {
      std::printf("%-22s %-20s %s\n", k.access_key_id.c_str(), k.name.c_str(),
                  k.revoked ? "revoked" : "active");
    }
    return kExitOk;
  }
  Status s = action == "ak-revoke" ? (*st)->revoke_access_key(arg) : (*st)->revoke_api_key(arg);
  if (!s.ok()) {
    std::cerr << "abxd: " << s.error().message() << "\n";
    return s.error().code() == ErrorCode::kNotFound ? kExitUsage : kExitConfig;
  }
  std::cerr << "revoked\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "abxd: the abx platform daemon — E2B-compatible control API and the routing proxy to "
      "sandboxes on one listener.\nExit codes: 0 ok, 2 usage, 3 configuration, 4 cannot listen."};
  std::string home = default_home();
  std::string listen = "127.0.0.1:3000";
  std::string domain = "localhost";
  std::string log_level;
  platform::SandboxBinaries bins{locate("ABX_ENVD_BIN", ABX_ENVD_BIN),
                                 locate("ABX_SERVER_BIN", ABX_SERVER_BIN),
                                 locate("ABX_DEMO_MODULE", ABX_DEMO_MODULE)};
  bool kill_sandboxes = false;
  app.add_option("--home", home, "State directory (default $ABX_HOME, ~/.abx)")
      ->capture_default_str();
  app.add_option("--listen", listen, "HOST:PORT for both planes")->capture_default_str();
  app.add_option("--domain", domain, "Sandbox host domain: {port}-{id}.{domain}")
      ->capture_default_str();
  app.add_option("--envd-bin", bins.envd, "abx-envd to run as each sandbox's init")
      ->capture_default_str();
  app.add_option("--server-bin", bins.server, "abx-server for templates with a command server")
      ->capture_default_str();
  app.add_option("--demo-module", bins.demo_module, "Command module of the `demo` template")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  app.add_flag("--kill-sandboxes", kill_sandboxes,
               "On SIGTERM kill every sandbox (default: leave them running; the next abxd "
               "adopts them)");
  auto* keys = app.add_subcommand("keys", "Manage API keys (create prints the key on stdout)");
  std::string key_arg;
  auto* kc = keys->add_subcommand("create", "Create an API key");
  kc->add_option("--name", key_arg, "A name to tell keys apart");
  keys->add_subcommand("list", "List API keys");
  auto* kr = keys->add_subcommand("revoke", "Revoke an API key by id, id prefix or the key");
  kr->add_option("key", key_arg, "Key id, id prefix (>= 4) or the key itself")->required();
  keys->require_subcommand(1);
  auto* aks = app.add_subcommand(
      "access-keys", "Manage AK/SK pairs for signed requests (ABX-HMAC-SHA256, docs/abxd.md)");
  auto* akc = aks->add_subcommand("create", "Create a pair; prints \"AK SECRET\" on stdout");
  akc->add_option("--name", key_arg, "A name to tell pairs apart");
  auto* akl = aks->add_subcommand("list", "List access keys (never the secrets)");
  auto* akr = aks->add_subcommand("revoke", "Revoke an access key");
  akr->add_option("access_key", key_arg, "The access key id")->required();
  aks->require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (!log_level.empty() && !set_log_level(log_level)) {
    std::cerr << "abxd: unknown --log-level '" << log_level << "'\n";
    return kExitUsage;
  }
  if (aks->parsed()) {
    std::string action = akc->parsed() ? "ak-create" : akr->parsed() ? "ak-revoke" : "ak-list";
    (void)akl;
    return keys_main(home, action, key_arg);
  }
  if (keys->parsed()) {
    std::string action = kc->parsed() ? "create" : kr->parsed() ? "revoke" : "list";
    return keys_main(home, action, key_arg);
  }
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "abxd: --listen must be HOST:PORT\n";
    return kExitUsage;
  }
  platform::GatewayOptions gopt;
  gopt.host = listen.substr(0, colon);
  try {
    int p = std::stoi(listen.substr(colon + 1));
    if (p < 0 || p > 65535) throw std::out_of_range("port");
    gopt.port = static_cast<std::uint16_t>(p);
  } catch (const std::exception&) {
    std::cerr << "abxd: invalid port in --listen '" << listen << "'\n";
    return kExitUsage;
  }
  gopt.domain = domain;
  Logger log("abxd");

  auto st = open_store(home);
  if (!st.ok()) {
    std::cerr << "abxd: " << st.error().message() << "\n";
    return kExitConfig;
  }
  auto existing = (*st)->list_api_keys();
  if (existing.ok() && existing->empty()) {
    auto k = (*st)->create_api_key("first-start");
    if (k.ok()) {
      fs::path kf = fs::path(home) / "api_key";
      {
        std::ofstream out(kf);
        out << k->key << "\n";
      }
      ::chmod(kf.c_str(), 0600);
      std::cout << "created an API key; it is in " << kf.string() << std::endl;
    }
  }
  templates::BuiltinOptions bo;
  bo.abx_server = "/opt/abx/bin/abx-server";
  bo.demo_module = "/opt/abx/lib/libabx_demo_commands.so";
  auto catalog = templates::TemplateCatalog::load(home, bo);
  for (const auto& e : catalog.errors()) log.error("template skipped: " + e.message);

  platform::ManagerOptions mo;
  mo.home = home;
  mo.domain = domain;
  mo.binaries = bins;
  auto mgr = platform::SandboxManager::start(mo, **st, catalog);
  if (!mgr.ok()) {
    std::cerr << "abxd: " << mgr.error().message() << "\n";
    return kExitConfig;
  }
  platform::ControlApi api(**mgr, **st);

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto gw = platform::Gateway::start(gopt, api);
  if (!gw.ok()) {
    std::cerr << "abxd: " << gw.error().message() << "\n";
    return kExitListen;
  }
  std::string addr = (*gw)->host() + ":" + std::to_string((*gw)->port());
  std::cout << "listening on " << addr << std::endl;
  log.info("abxd serving on " + addr + " (home " + home + ", domain " + domain + ", " +
           std::to_string(catalog.list().size()) + " templates)");
  int sig = 0;
  sigwait(&stop, &sig);
  log.info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": draining");
  (*gw)->shutdown(std::chrono::seconds(10));
  if (kill_sandboxes) {
    (*mgr)->kill_all();
  } else {
    (*mgr)->detach_all();  // they keep running; the next abxd adopts them
  }
  log.info("stopped");
  return kExitOk;
}
