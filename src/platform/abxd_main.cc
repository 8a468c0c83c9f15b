// abxd: the platform daemon. `abxd [--home DIR] [--listen HOST:PORT] [--domain D]`, and
// `abxd keys create|list|revoke`, `abxd access-keys …` and `abxd teams create|list` to manage
// credentials and their teams in the same store.
//
// main() is three steps: flags into a Config (parse_flags), then either a key subcommand
// (keys_main) or the daemon (serve: store, templates, sandboxes, gateway, then wait for a stop
// signal and drain).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>

#include "abx/base/fd.h"
#include "abx/base/log.h"
#include "abx/base/try.h"
#include "abx/cluster/etcd.h"
#include "abx/cluster/membership.h"
#include "abx/cluster/tls.h"
#include "abx/egress/policy.h"
#include "abx/http/client.h"
#include "abx/image/registry.h"
#include "abx/image/store.h"
#include "abx/platform/gateway.h"
#include "abx/runtime/cgroup.h"
#include "abx/runtime/userns.h"
#include "abx/store/store.h"
#include "abx/templates/template.h"
#include "abx/token/token.h"
#include "abxd_images.h"
#include "api.h"
#include "bundle.h"
#include "cluster_block.h"
#include "cluster_keys.h"
#include "cluster_router.h"
#include "cluster_tls.h"
#include "sandboxes.h"
#include "secrets.h"
#include "volumes.h"
#include "watchdog.h"
#include "webhooks.h"

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

std::string env_or(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Everything the flags set. A key subcommand fills `key_action` ("create", "list", "revoke",
// "ak-create", "ak-list", "ak-revoke") and `key_arg`; the daemon leaves them empty.
struct Config {
  std::string home = default_home();
  std::string listen = "127.0.0.1:3000";
  std::string domain = "localhost";
  std::string log_level;
  platform::SandboxBinaries bins{
      locate("ABX_ENVD_BIN", ABX_ENVD_BIN), locate("ABX_SERVER_BIN", ABX_SERVER_BIN),
      locate("ABX_DEMO_MODULE", ABX_DEMO_MODULE), locate("ABX_BUNDLE_DIR", ABX_BUNDLE_DIR)};
  bool kill_sandboxes = false;
  std::uint64_t volume_size_mib = platform::kDefaultVolumeBytes >> 20;
  std::size_t layer_pool = 2;
  double layer_pool_idle = 600;  // seconds
  std::size_t sandbox_pool = 1;
  double sandbox_pool_idle = 300;  // seconds
  runtime::UserNamespace userns;
  bool no_userns = false;
  double server_ready_timeout = 20;  // seconds
  double timeout_warning = 30;       // seconds; 0: none
  std::size_t max_event_streams = 64;
  std::size_t max_event_streams_per_team = 16;
  std::int64_t max_events = 100'000;
  bool webhook_allow_private = false;
  double webhook_timeout = 10;      // seconds, one attempt
  double webhook_retry_delay = 10;  // seconds before the first retry; doubles after
  int webhook_retries = 3;
  std::size_t max_webhooks = 10;                                  // per team
  std::size_t max_secrets = platform::kDefaultMaxSecretsPerTeam;  // per team
  bool no_network = false;
  std::string sandbox_net = "10.213.0.0/19";
  std::string dns_upstream = env_or("ABX_DNS_UPSTREAM");
  std::string egress_extra_ca;
  std::vector<std::string> block_net;
  bool no_internet_by_default = false;
  bool allow_host_network = false;
  std::string pause_mode = "auto";
  std::string criu = env_or("ABX_CRIU").empty() ? runtime::kDefaultCriu : env_or("ABX_CRIU");
  bool no_watchdog = false;
  bool no_console = false;
  CLI::App* watchdog_cmd = nullptr;
  std::string registry_auth;
  std::vector<std::string> insecure_registries;
  std::string image_store = env_or("ABX_IMAGE_STORE");  // empty: <home>/images
  platform::ImageCommand image_cmd;
  std::string key_action;
  std::string key_arg;
  std::string team = std::string(store::kDefaultTeam);  // keys create --team, teams create NAME
  // abxd --cluster (docs/cluster.md)
  std::string cluster;  // etcd endpoints; empty: a single node, as ever
  std::string node_name;
  std::string advertise_url;
  std::string cluster_secret_file;
  int cluster_ttl = 10;               // seconds
  std::int64_t cluster_capacity = 0;  // 0: --userns-slots
  int cluster_fanout_timeout_ms = 2000;
  cluster::TlsSettings cluster_tls;  // --etcd-ca/-cert/-key, --cluster-ca/-cert/-key/-listen
};

int fail(const Error& e, int code) {
  std::cerr << "abxd: " << e.message() << "\n";
  return code;
}

// The help texts of one credential group (`abxd keys`, `abxd access-keys`).
struct CredentialHelp {
  const char* name;
  const char* help;
  const char* create;
  const char* create_name;
  const char* list;
  const char* revoke;
  const char* revoke_arg;
  const char* revoke_arg_help;
};

// A credential group's subcommands: create [--name], list and revoke <id>, exactly one per run;
// the name or id lands in `arg`.
struct CredentialGroup {
  CLI::App* group;
  CLI::App* create;
  CLI::App* revoke;
  std::string action() const {
    return create->parsed() ? "create" : revoke->parsed() ? "revoke" : "list";
  }
};

CredentialGroup add_credential_group(CLI::App& app, std::string& arg, std::string& team,
                                     const CredentialHelp& h) {
  CredentialGroup g;
  g.group = app.add_subcommand(h.name, h.help);
  g.create = g.group->add_subcommand("create", h.create);
  g.create->add_option("--name", arg, h.create_name);
  g.create
      ->add_option("--team", team,
                   "The team the credential acts for (abxd teams create); it sees and "
                   "controls that team's sandboxes, snapshots and built templates only")
      ->capture_default_str();
  g.group->add_subcommand("list", h.list);
  g.revoke = g.group->add_subcommand("revoke", h.revoke);
  g.revoke->add_option(h.revoke_arg, arg, h.revoke_arg_help)->required();
  g.group->require_subcommand(1);
  return g;
}

// Fills `cfg` from the command line; an exit code if abxd should stop here (help, usage).
// `app` is main()'s: the subcommands cfg points to (watchdog_cmd, image_cmd) are read after the
// parse.
// One function of ~170 lines on purpose (as abx-envd's): a flat list of flags, each binding
// next to its help text; splitting it would only cut the list in arbitrary places.
std::optional<int> parse_flags(CLI::App& app, int argc, char** argv, Config& cfg) {
  app.description(
      "abxd: the abx platform daemon — E2B-compatible control API and the routing proxy to "
      "sandboxes on one listener.\nExit codes: 0 ok, 2 usage, 3 configuration, 4 cannot listen.");
  app.set_version_flag("--version", std::string("abxd ") + ABX_VERSION);
  app.add_option("--home", cfg.home, "State directory (default $ABX_HOME, ~/.abx)")
      ->capture_default_str();
  app.add_option("--listen", cfg.listen, "HOST:PORT for both planes")->capture_default_str();
  app.add_option("--domain", cfg.domain, "Sandbox host domain: {port}-{id}.{domain}")
      ->capture_default_str();
  app.add_option("--envd-bin", cfg.bins.envd, "abx-envd to run as each sandbox's init")
      ->capture_default_str();
  app.add_option("--server-bin", cfg.bins.server, "abx-server for templates with a command server")
      ->capture_default_str();
  app.add_option("--demo-module", cfg.bins.demo_module, "Command module of the `demo` template")
      ->capture_default_str();
  app.add_option("--bundle", cfg.bins.bundle,
                 "The /opt/abx bundle (bin/, lib/ with its own glibc) bound into every sandbox; "
                 "takes precedence over --envd-bin/--server-bin/--demo-module when it has "
                 "bin/abx-envd (--bundle '' to bind those single files instead)")
      ->capture_default_str();
  app.add_option("--log-level", cfg.log_level, "trace, debug, info, warn, error or off");
  app.add_option("--registry-auth", cfg.registry_auth,
                 "Registry credentials for pulls and pushes (docker-style auth.json; default "
                 "$ABX_HOME/auth.json if it exists)");
  app.add_option("--insecure-registry", cfg.insecure_registries,
                 "HOST[:PORT] reached over plain HTTP (loopback registries always are); repeatable")
      ->take_all();
  app.add_option("--image-store", cfg.image_store,
                 "Image store directory (default $ABX_IMAGE_STORE, else <home>/images); several "
                 "homes may share one");
  app.add_option("--userns-base", cfg.userns.base,
                 "First host uid/gid of sandbox id ranges: sandbox N of the machine maps its ids "
                 "0-65535 to base + N*65536 (must overlap no host user, group or /etc/subuid, "
                 "/etc/subgid entry; checked at start)")
      ->capture_default_str();
  app.add_option("--userns-slots", cfg.userns.slots,
                 "How many id ranges (so concurrent sandboxes, builds included) the machine has")
      ->capture_default_str();
  app.add_flag("--no-userns", cfg.no_userns,
               "Run sandboxes without a user namespace (sandbox root is host root): only for "
               "kernels or image stores without idmapped mounts, and for benchmarks");
  app.add_option("--server-ready-timeout", cfg.server_ready_timeout,
                 "Seconds a create waits for a template's command server to accept connections "
                 "and for a built template's readyCmd to exit 0 (a server that exits before that "
                 "fails the create with its output at once)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--timeout-warning", cfg.timeout_warning,
                 "Seconds before a sandbox's deadline to record a sandbox.lifecycle."
                 "timeout_warning event (only for deadlines further away than this; 0: none)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--max-event-streams", cfg.max_event_streams,
                 "Concurrent GET /events streams (all teams together)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--max-event-streams-per-team", cfg.max_event_streams_per_team,
                 "Concurrent GET /events streams one team's keys may hold")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--max-events", cfg.max_events,
                 "Lifecycle events kept in the store (the newest; and none older than 7 days)")
      ->check(CLI::Range(1000, 100'000'000))
      ->capture_default_str();
  app.add_flag("--webhook-allow-private", cfg.webhook_allow_private,
               "Let webhooks point at loopback and private addresses (refused by default, so a "
               "webhook cannot make abxd call into its own network)");
  app.add_option("--webhook-timeout", cfg.webhook_timeout,
                 "Seconds one webhook delivery attempt may take (connect, send, answer)")
      ->check(CLI::Range(0.1, 120.0))
      ->capture_default_str();
  app.add_option("--webhook-retry-delay", cfg.webhook_retry_delay,
                 "Seconds before a failed webhook delivery's first retry (doubling after each)")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--webhook-retries", cfg.webhook_retries,
                 "Retries of a failed webhook delivery before it is given up")
      ->check(CLI::Range(0, 10))
      ->capture_default_str();
  app.add_option("--max-secrets", cfg.max_secrets, "Secrets one team may hold (POST /secrets)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--max-webhooks", cfg.max_webhooks, "Webhooks one team may register")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_flag("--no-network", cfg.no_network,
               "Give every sandbox loopback only (no link, no outbound access, no nftables rules)");
  app.add_option("--sandbox-net", cfg.sandbox_net,
                 "IPv4 range of sandbox links: a /30 per user-namespace slot (so 4 x "
                 "--userns-slots addresses); must not overlap the host's networks")
      ->capture_default_str();
  app.add_option("--dns-upstream", cfg.dns_upstream,
                 "IP[:PORT] the sandboxes' resolver forwards to (default $ABX_DNS_UPSTREAM, else "
                 "the first IPv4 nameserver in /etc/resolv.conf)");
  app.add_option("--egress-extra-ca", cfg.egress_extra_ca,
                 "A PEM bundle of CAs the egress proxy trusts for upstream servers besides the "
                 "host's trust store (network.rules over HTTPS; for tests and private CAs)")
      ->check(CLI::ExistingFile);
  app.add_option(
      "--block-net", cfg.block_net,
      "A CIDR no sandbox may reach whatever its rules say (repeatable; the host's "
      "addresses, link-local, loopback, multicast and all sandboxes are always blocked)");
  app.add_flag("--no-internet-by-default", cfg.no_internet_by_default,
               "Sandboxes created without allowInternetAccess get false (E2B's default is true)");
  app.add_flag("--allow-host-network", cfg.allow_host_network,
               "Let templates with `network: host` run (they share the host's network namespace: "
               "every host loopback service is reachable from them)");
  app.add_option("--pause", cfg.pause_mode,
                 "Where pause puts a sandbox: disk (CRIU checkpoint under <home>/checkpoints: "
                 "memory and processes freed, survives restarts and reboots; also enables fork "
                 "and snapshots), memory (the cgroup freezer; RAM stays in use), or auto (disk "
                 "when CRIU works here, else memory)")
      ->check(CLI::IsMember({"auto", "disk", "memory"}))
      ->capture_default_str();
  app.add_option("--criu", cfg.criu,
                 "The CRIU binary (4.1.1 with abx's patches; scripts/install-criu.sh builds it; "
                 "env ABX_CRIU)")
      ->capture_default_str();
  app.add_flag("--kill-sandboxes", cfg.kill_sandboxes,
               "On SIGTERM kill every sandbox (default: leave them running; the next abxd "
               "adopts them)");
  app.add_option("--layer-pool", cfg.layer_pool,
                 "Writable layers kept ready (made ahead, never used) per layer size that creates "
                 "take, up to 4 sizes: a create takes one instead of making it; each ~0.6 MiB of "
                 "disk, a loop device and a mounted ext4 (0: none; docs/abxd.md)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--layer-pool-idle", cfg.layer_pool_idle,
                 "Seconds a layer size may go untaken before its ready layers are removed")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--sandbox-pool", cfg.sandbox_pool,
                 "Sandboxes kept booted and ready (envd and the template's servers answering, "
                 "never handed out before) per template that creates asked for lately, up to 8 "
                 "templates: a create without envVars, volumes or network rules of its own takes "
                 "one and only records it; each costs an idle sandbox's memory (0: none, every "
                 "create boots its own; docs/abxd.md)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--sandbox-pool-idle", cfg.sandbox_pool_idle,
                 "Seconds a template may go without a create before its pooled sandboxes are "
                 "destroyed")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--volume-size-mib", cfg.volume_size_mib,
                 "The quota of a new volume in MiB: its files live on a sparse ext4 image of "
                 "this size (0: plain directories without a quota; see docs/volumes.md)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const std::string range = "0 or " + std::to_string(platform::kMinVolumeBytes >> 20) +
                                      ".." + std::to_string(platform::kMaxVolumeBytes >> 20);
            if (v.empty() || v.size() > 12 ||
                !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
              return "not a number of MiB (" + range + ")";
            const std::uint64_t mib = std::stoull(v);
            if (mib != 0 && (mib < (platform::kMinVolumeBytes >> 20) ||
                             mib > (platform::kMaxVolumeBytes >> 20)))
              return "out of range (" + range + ")";
            return {};
          },
          "MIB"))
      ->capture_default_str();
  app.add_option("--cluster", cfg.cluster,
                 "Join an abx cluster whose state is in etcd: comma-separated etcd client "
                 "endpoints (http://HOST:PORT,... or https://HOST:PORT,... with --etcd-ca); see "
                 "docs/cluster.md");
  app.add_option("--etcd-ca", cfg.cluster_tls.etcd.ca,
                 "PEM bundle of the CA that signed the etcd members' certificates (https:// "
                 "endpoints; their certificates must name the endpoint's host)")
      ->check(CLI::ExistingFile);
  app.add_option("--etcd-cert", cfg.cluster_tls.etcd.cert,
                 "PEM client certificate this node presents to etcd (etcd --client-cert-auth)")
      ->check(CLI::ExistingFile);
  app.add_option("--etcd-key", cfg.cluster_tls.etcd.key,
                 "Its private key (PEM; mode 0400 or 0600, owned by abxd's user)")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-ca", cfg.cluster_tls.node.ca,
                 "PEM certificate of the cluster CA: mutual TLS between nodes (with "
                 "--cluster-cert, --cluster-key, --cluster-listen); a peer's certificate must "
                 "chain to it")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-cert", cfg.cluster_tls.node.cert,
                 "PEM certificate of this node, signed by the cluster CA, naming the host of "
                 "--advertise-url (scripts/cluster-certs.sh)")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-key", cfg.cluster_tls.node.key,
                 "Its private key (PEM; mode 0400 or 0600, owned by abxd's user)")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-listen", cfg.cluster_tls.listen,
                 "HOST:PORT of this node's internal endpoint (mutual TLS): the only place where "
                 "it accepts other nodes' calls; --advertise-url is then https:// of it");
  app.add_option("--node-name", cfg.node_name,
                 "This node's name in the cluster ([a-z0-9][a-z0-9-]{0,62}; with --cluster)");
  app.add_option("--advertise-url", cfg.advertise_url,
                 "http://HOST:PORT where the other nodes reach this node's listener (default "
                 "http://<--listen>); with --cluster-listen https://HOST:PORT of that endpoint "
                 "(default https://<--cluster-listen>)");
  app.add_option("--cluster-secret-file", cfg.cluster_secret_file,
                 "A file holding the secret every node of the cluster shares (>= 16 bytes): "
                 "nodes authenticate their relayed calls with it")
      ->check(CLI::ExistingFile);
  app.add_option("--cluster-ttl", cfg.cluster_ttl,
                 "Seconds after which a node that stopped renewing its lease counts as lost")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--cluster-capacity", cfg.cluster_capacity,
                 "Sandboxes this node takes in the cluster's placement (default --userns-slots)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--cluster-fanout-timeout-ms", cfg.cluster_fanout_timeout_ms,
                 "Milliseconds each other node gets to answer a call that asks every node (merged "
                 "lists and metrics); one that has not answered by then is left out and named "
                 "in the Abx-Cluster-Missing header")
      ->check(CLI::Range(50, 120'000))
      ->capture_default_str();
  CredentialGroup keys =
      add_credential_group(app, cfg.key_arg, cfg.team,
                           {.name = "keys",
                            .help = "Manage API keys (create prints the key on stdout)",
                            .create = "Create an API key",
                            .create_name = "A name to tell keys apart",
                            .list = "List API keys",
                            .revoke = "Revoke an API key by id, id prefix or the key",
                            .revoke_arg = "key",
                            .revoke_arg_help = "Key id, id prefix (>= 4) or the key itself"});
  CredentialGroup aks = add_credential_group(
      app, cfg.key_arg, cfg.team,
      {.name = "access-keys",
       .help = "Manage AK/SK pairs for signed requests (ABX-HMAC-SHA256, docs/abxd.md)",
       .create = "Create a pair; prints \"AK SECRET\" on stdout",
       .create_name = "A name to tell pairs apart",
       .list = "List access keys (never the secrets)",
       .revoke = "Revoke an access key",
       .revoke_arg = "access_key",
       .revoke_arg_help = "The access key id"});
  CLI::App* teams = app.add_subcommand(
      "teams",
      "Manage teams (tenants): each API key and access key belongs to one and sees only its "
      "sandboxes, snapshots and built templates; keys made without --team are the default team's");
  CLI::App* team_create = teams->add_subcommand("create", "Create a team; prints its id");
  team_create->add_option("team", cfg.team, "Team id: [a-z0-9][a-z0-9-]{0,62}")->required();
  teams->add_subcommand("list", "List teams with their number of active keys");
  teams->require_subcommand(1);
  platform::add_image_commands(app, cfg.image_cmd);
  app.add_flag("--no-console", cfg.no_console,
               "Do not serve the web console (GET /console answers 404)");
  app.add_flag("--no-watchdog", cfg.no_watchdog,
               "Do not start the deadline watchdog (sandboxes then outlive their deadline while "
               "abxd is down)");
  cfg.watchdog_cmd = app.add_subcommand(
      "watchdog",
      "Internal (abxd starts it): kill sandboxes of --home whose deadline passes while abxd is "
      "down; exits when abxd is gone and no sandbox is left");
  cfg.watchdog_cmd->fallthrough();  // `abxd watchdog --home H`
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (teams->parsed()) {
    cfg.key_action = team_create->parsed() ? "team-create" : "team-list";
  } else if (aks.group->parsed()) {
    cfg.key_action = "ak-" + aks.action();
  } else if (keys.group->parsed()) {
    cfg.key_action = keys.action();
  }
  return std::nullopt;
}

Result<platform::GatewayOptions> gateway_options(const Config& cfg) {
  auto colon = cfg.listen.rfind(':');
  if (colon == std::string::npos) return invalid_argument("--listen must be HOST:PORT");
  platform::GatewayOptions gopt;
  gopt.host = cfg.listen.substr(0, colon);
  try {
    int p = std::stoi(cfg.listen.substr(colon + 1));
    if (p < 0 || p > 65535) throw std::out_of_range("port");
    gopt.port = static_cast<std::uint16_t>(p);
  } catch (const std::exception&) {
    return invalid_argument("invalid port in --listen '" + cfg.listen + "'");
  }
  gopt.domain = cfg.domain;
  return gopt;
}

Result<std::unique_ptr<store::Store>> open_store(const std::string& home) {
  std::error_code ec;
  fs::create_directories(home, ec);
  if (ec) return internal_error("cannot create " + home + ": " + ec.message());
  ::chmod(home.c_str(), 0700);
  return store::Store::open(fs::path(home) / "abx.db");
}

// One daemon per home: an exclusive flock on <home>/abxd.lock, held for the process's life (the
// kernel drops it when abxd dies, however it dies). Two daemons on one home would each adopt
// and reap the other's sandboxes. The holder's pid is written into the file so the refusal can
// name it. Sandbox children never hold the lock: the runtime closes every inherited descriptor.
Result<UniqueFd> lock_home(const std::string& home) {
  std::error_code ec;
  fs::create_directories(home, ec);
  if (ec) return internal_error("cannot create " + home + ": " + ec.message());
  const std::string path = (fs::path(home) / "abxd.lock").string();
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return internal_error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return internal_error("flock " + path + ": " + std::strerror(errno));
    std::ifstream in(path);
    std::string pid;
    std::getline(in, pid);
    return Error(ErrorCode::kFailedPrecondition,
                 "another abxd (pid " + (pid.empty() ? std::string("unknown") : pid) +
                     ") is already serving home " + home + "; stop it or pick another --home");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    return internal_error("write " + path + ": " + std::strerror(errno));
  }
  return fd;
}

// --- key subcommands: each prints what scripts capture on stdout, the rest on stderr ---

Status create_api_key(store::Store& st, const std::string& name, const std::string& team) {
  ABX_ASSIGN_OR_RETURN(auto k, st.create_api_key(name.empty() ? "cli" : name, team));
  std::cout << k.key << "\n";  // stdout: scripts capture it
  std::cerr << "created API key " << k.info.id << " (" << k.info.name << ") of team "
            << k.info.team_id << "\n";
  return {};
}

Status list_api_keys(store::Store& st) {
  ABX_ASSIGN_OR_RETURN(auto ks, st.list_api_keys());
  std::printf("%-18s %-10s %-20s %-20s %s\n", "ID", "PREFIX", "NAME", "TEAM", "STATUS");
  for (const auto& k : ks) {
    std::printf("%-18s %-10s %-20s %-20s %s\n", k.id.c_str(), k.prefix.c_str(), k.name.c_str(),
                k.team_id.c_str(), k.revoked ? "revoked" : "active");
  }
  return {};
}

Status create_access_key(store::Store& st, const std::string& name, const std::string& team) {
  ABX_ASSIGN_OR_RETURN(auto k, st.create_access_key(name.empty() ? "cli" : name, team));
  std::cout << k.access_key_id << " " << k.secret << "\n";  // stdout: "AK SECRET"
  std::cerr << "created access key " << k.access_key_id << " (" << k.name << ") of team "
            << k.team_id << "\n";
  return {};
}

Status list_access_keys(store::Store& st) {
  ABX_ASSIGN_OR_RETURN(auto ks, st.list_access_keys());
  std::printf("%-22s %-20s %-20s %s\n", "ACCESS KEY", "NAME", "TEAM", "STATUS");
  for (const auto& k : ks) {
    std::printf("%-22s %-20s %-20s %s\n", k.access_key_id.c_str(), k.name.c_str(),
                k.team_id.c_str(), k.revoked ? "revoked" : "active");
  }
  return {};
}

Status list_teams(store::Store& st) {
  ABX_ASSIGN_OR_RETURN(auto ts, st.list_teams());
  std::printf("%-24s %s\n", "TEAM", "ACTIVE KEYS");
  for (const auto& t : ts) std::printf("%-24s %d\n", t.id.c_str(), t.active_keys);
  return {};
}

int keys_main(const Config& cfg) {
  auto st = open_store(cfg.home);
  if (!st.ok()) return fail(st.error(), kExitConfig);
  const std::string& action = cfg.key_action;
  Status s;
  if (action == "create" || action == "ak-create" || action == "team-create") {
    s = action == "create"      ? create_api_key(**st, cfg.key_arg, cfg.team)
        : action == "ak-create" ? create_access_key(**st, cfg.key_arg, cfg.team)
                                : (*st)->create_team(cfg.team);
    if (s.ok() && action == "team-create") std::cout << cfg.team << "\n";
    // A team that is not there, a malformed or taken team id: usage errors.
    if (!s.ok() && (s.error().code() == ErrorCode::kNotFound ||
                    s.error().code() == ErrorCode::kInvalidArgument ||
                    s.error().code() == ErrorCode::kAlreadyExists))
      return fail(s.error(), kExitUsage);
  } else if (action == "list") {
    s = list_api_keys(**st);
  } else if (action == "ak-list") {
    s = list_access_keys(**st);
  } else if (action == "team-list") {
    s = list_teams(**st);
  } else {
    s = action == "ak-revoke" ? (*st)->revoke_access_key(cfg.key_arg)
                              : (*st)->revoke_api_key(cfg.key_arg);
    // Only a revoke can name something that is not there: a usage error.
    if (!s.ok())
      return fail(s.error(), s.error().code() == ErrorCode::kNotFound ? kExitUsage : kExitConfig);
    std::cerr << "revoked\n";
  }
  return s.ok() ? kExitOk : fail(s.error(), kExitConfig);
}

// --- the daemon ---

// A fresh home gets one API key, written to <home>/api_key (0600) so the first client can start.
void ensure_first_api_key(store::Store& st, const std::string& home) {
  auto existing = st.list_api_keys();
  if (!existing.ok() || !existing->empty()) return;
  auto k = st.create_api_key("first-start");
  if (!k.ok()) return;
  fs::path kf = fs::path(home) / "api_key";
  {
    std::ofstream out(kf);
    out << k->key << "\n";
  }
  ::chmod(kf.c_str(), 0600);
  std::cout << "created an API key; it is in " << kf.string() << std::endl;
}

// SIGTERM, SIGINT and SIGHUP are blocked in every thread and taken synchronously by sigwait in
// main's thread. Blocked first thing, before any thread exists (the watchdog's spawn, the
// network's resolver and egress proxy, the manager's reaper, the gateway's): a thread started
// with them unblocked took a SIGTERM that came while main was not in sigwait (still starting, or
// reloading templates) and its default action ended abxd on the spot, leaving its nftables table
// and its sandboxes' records as they were. One that comes while abxd starts now waits for it to
// be up, and stops it then.
sigset_t block_stop_signals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);  // reload templates
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return stop;
}

// What abxd needs from the machine, checked before anything else so that a missing piece is one
// clear error at start (exit 3), not a failure of the first create.
Status preflight(const Config& cfg) {
  if (::geteuid() != 0)
    return Error(ErrorCode::kFailedPrecondition,
                 "abxd must run as root: it creates namespaces, cgroups, mounts and loop devices "
                 "for sandboxes (see docs/operations.md for the systemd unit)");
  auto cgroups = runtime::CgroupLayout::detect();
  if (!cgroups)
    return Error(ErrorCode::kFailedPrecondition,
                 "cgroups unusable: " + cgroups.error().message() +
                     " (abxd needs cgroup v2, or v1 memory/pids/cpu/freezer, mounted writable)");
  if (::access("/usr/sbin/mkfs.ext4", X_OK) != 0 && ::access("/sbin/mkfs.ext4", X_OK) != 0)
    return Error(ErrorCode::kFailedPrecondition,
                 "mkfs.ext4 not found: sandboxes' writable layers are ext4 images (Debian: "
                 "apt-get install e2fsprogs)");
  if (cfg.userns.enabled) {
    std::ifstream in("/proc/sys/user/max_user_namespaces");
    long max = 0;
    if (!(in >> max) || max <= 0)
      return Error(ErrorCode::kFailedPrecondition,
                   "user namespaces are disabled (user.max_user_namespaces = 0): enable them, or "
                   "run abxd --no-userns");
    // A range that a host user or a subordinate range also has would let that user (or its
    // containers) own sandbox files and signal sandbox processes.
    ABX_TRY(runtime::check_id_range(cfg.userns));
  }
  return {};
}

// Each live sandbox holds three descriptors in abxd and each proxied connection two, so the
// usual soft limit of 1024 runs out near 330 sandboxes (bench/density.sh): raise the soft limit
// to the hard one, as the systemd unit's LimitNOFILE does (docs/operations.md).
void raise_open_file_limit(Logger& log) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  const rlim_t was = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &r) != 0) {
    log.warn("open file limit stays " + std::to_string(was) +
             ": setrlimit: " + std::strerror(errno));
    return;
  }
  log.info("open file limit raised from " + std::to_string(was) + " to " +
           std::to_string(r.rlim_cur));
}

// --cluster: the etcd client, this node's registration (under a lease its thread renews) and
// the cluster secret; with mutual TLS between nodes, `tls` loaded (its internal endpoint is
// opened later, with the listener). Errors: a bad flag (kInvalidArgument), etcd unreachable
// (kUnavailable), etcd's certificate not verified (kUnauthenticated, naming the endpoint), a
// live node of the same name (kAlreadyExists).
Result<std::string> join_cluster(const Config& cfg,
                                 const std::atomic<platform::SandboxManager*>& mgr,
                                 platform::SandboxNetwork& network, store::Store& store,
                                 std::unique_ptr<cluster::EtcdClient>& etcd,
                                 std::unique_ptr<cluster::Membership>& membership,
                                 cluster::TlsPlan& plan,
                                 std::unique_ptr<platform::ClusterTls>& tls) {
  ABX_ASSIGN_OR_RETURN(auto endpoints, cluster::parse_endpoints(cfg.cluster));
  ABX_ASSIGN_OR_RETURN(
      plan, cluster::check_tls_settings(cfg.cluster_tls, endpoints, cfg.advertise_url, cfg.listen));
  std::shared_ptr<const http::TlsClient> etcd_tls;
  if (plan.etcd_tls) {
    const auto& f = cfg.cluster_tls.etcd;
    auto loaded = http::TlsClient::load({f.ca, f.cert, f.key});
    if (!loaded.ok())
      return invalid_argument("--etcd-ca/--etcd-cert/--etcd-key: " + loaded.error().message());
    etcd_tls = std::move(*loaded);
  }
  if (plan.node_tls) {
    ABX_ASSIGN_OR_RETURN(tls, platform::ClusterTls::start(cfg.cluster_tls.node));
  }
  if (cfg.node_name.empty()) return invalid_argument("--cluster needs --node-name");
  if (cfg.cluster_secret_file.empty())
    return invalid_argument("--cluster needs --cluster-secret-file");
  std::ifstream in(cfg.cluster_secret_file);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
    secret.pop_back();
  if (!in.good() && !in.eof()) return invalid_argument("cannot read --cluster-secret-file");
  if (secret.size() < 16)
    return invalid_argument("the cluster secret (--cluster-secret-file) must be >= 16 bytes");
  cluster::MembershipOptions mo;
  mo.self.name = cfg.node_name;
  mo.self.api_url = plan.advertise_url;
  mo.self.capacity = cfg.cluster_capacity > 0 ? cfg.cluster_capacity : cfg.userns.slots;
  mo.ttl = std::chrono::seconds(cfg.cluster_ttl);
  // 0 until the manager is up (it starts after the node has joined).
  mo.count_sandboxes = [&mgr] {
    platform::SandboxManager* m = mgr.load();
    return m ? static_cast<std::int64_t>(m->all().size()) : std::int64_t{0};
  };
  // At each renewal (on its thread, the only caller): the other nodes' addresses blocked for
  // every sandbox as they join and leave, and API keys shared with them (cluster_keys.h). What
  // could not be done is logged when it changes, not at every renewal.
  mo.each_renewal = [&network, &store, self = cfg.node_name,
                     said = std::make_shared<std::vector<std::string>>()](cluster::Membership& m) {
    const Logger log("cluster");
    std::vector<std::string> problems;
    if (auto nodes = m.nodes(); nodes.ok()) {  // else the last list stands
      std::vector<std::string> unresolved;
      auto peers = platform::peer_addresses(*nodes, self, &unresolved);
      for (const auto& u : unresolved)
        problems.push_back("node " + u + ": no address to block for sandboxes (--block-net)");
      if (Status s = network.set_peers_blocked(std::move(peers)); !s)
        problems.push_back("blocking the other nodes for sandboxes: " + s.error().message());
    }
    if (auto shared = platform::share_api_keys(store, m.etcd()); !shared.ok()) {
      problems.push_back("sharing API keys: " + shared.error().message());
    } else {
      for (const auto& p : shared->problems) problems.push_back("sharing API keys: " + p);
      if (shared->published > 0 || shared->imported > 0)
        log.info("API keys shared: " + std::to_string(shared->published) + " published, " +
                 std::to_string(shared->imported) + " taken from other nodes");
    }
    if (problems != *said) {
      for (const auto& p : problems) log.warn(p);
      *said = std::move(problems);
    }
  };
  etcd = std::make_unique<cluster::EtcdClient>(std::move(endpoints), std::chrono::seconds(2),
                                               std::move(etcd_tls));
  auto joined = cluster::Membership::start(*etcd, std::move(mo));
  if (!joined.ok()) return joined.error().with_context("--cluster");
  membership = std::move(*joined);
  return secret;
}

// abxd's start-up and shutdown order on one screen (~170 lines on purpose): each step needs the
// ones before it, and every failure after the network is up goes through one undo
// (fail_networked); each step's detail is a function above or in its module.
int serve(const Config& cfg, const platform::GatewayOptions& gopt) {
  const sigset_t stop = block_stop_signals();
  Logger log("abxd");
  if (Status s = preflight(cfg); !s) return fail(s.error(), kExitConfig);
  raise_open_file_limit(log);
  auto home_lock = lock_home(cfg.home);  // first: a second abxd must not even open the store
  if (!home_lock.ok()) return fail(home_lock.error(), kExitConfig);
  auto st = open_store(cfg.home);
  if (!st.ok()) return fail(st.error(), kExitConfig);
  ensure_first_api_key(**st, cfg.home);
  // Secrets' values are sealed under <home>/secrets.key (made at the first start).
  auto vault = platform::SecretVault::open(fs::path(cfg.home) / "secrets.key");
  if (!vault.ok()) return fail(vault.error(), kExitConfig);
  if (!cfg.no_watchdog) {
    // Before any sandbox exists: from now on a deadline holds even if this abxd dies.
    std::error_code ec;
    auto self = fs::read_symlink("/proc/self/exe", ec);
    Status s = ec ? internal_error("readlink /proc/self/exe: " + ec.message())
                  : platform::spawn_watchdog(self.string(), cfg.home);
    if (!s) log.warn("deadline watchdog not started: " + s.error().message());
  }
  templates::BuiltinOptions bo;
  bo.abx_server = "/opt/abx/bin/abx-server";
  bo.demo_module = "/opt/abx/lib/libabx_demo_commands.so";
  bo.abx_interp = "/opt/abx/bin/abx-interp";
  auto catalog = templates::TemplateCatalog::load(cfg.home, bo);
  for (const auto& e : catalog.errors()) log.error("template skipped: " + e.message);
  const std::size_t ntemplates = catalog.list().size();

  platform::NetworkOptions no;
  no.enabled = !cfg.no_network;
  if (auto r = egress::parse_cidr(cfg.sandbox_net); r) {
    no.range = *r;
  } else {
    return fail(invalid_argument("--sandbox-net: " + r.error().message()), kExitUsage);
  }
  for (const auto& b : cfg.block_net) {
    auto r = egress::parse_cidr(b);
    if (!r)
      return fail(invalid_argument("--block-net " + b + ": " + r.error().message()), kExitUsage);
    no.extra_blocked.push_back(*r);
  }
  if (!cfg.cluster.empty()) {
    // Sandboxes never reach the cluster's etcd (docs/cluster.md): its members' addresses are
    // blocked as the host's own are. A malformed list fails in join_cluster, with its reason.
    if (auto endpoints = cluster::parse_endpoints(cfg.cluster); endpoints.ok()) {
      std::vector<std::string> unresolved;
      auto etcd_ips = platform::etcd_addresses(*endpoints, &unresolved);
      no.extra_blocked.insert(no.extra_blocked.end(), etcd_ips.begin(), etcd_ips.end());
      for (const auto& u : unresolved)
        log.warn("etcd endpoint " + u +
                 ": no address to block for sandboxes (add it with --block-net)");
    }
  }
  no.dns_upstream = cfg.dns_upstream;
  no.upstream_extra_ca = cfg.egress_extra_ca;
  no.default_internet = !cfg.no_internet_by_default;
  auto network = platform::SandboxNetwork::start(cfg.home, no, cfg.userns);
  if (!network.ok())
    return fail(
        Error(network.error().code(), "sandbox networking: " + network.error().message() +
                                          " (abxd --no-network runs sandboxes with loopback only)"),
        kExitConfig);

  // ${e2b.secrets.<name>} in a sandbox's network.rules: its team's secret, read at each request.
  store::Store* store_ptr = st->get();
  const platform::SecretVault* vault_ptr = &*vault;
  (*network)->set_secret_resolver(
      [store_ptr, vault_ptr](const std::string& id, std::string_view name) -> Result<std::string> {
        ABX_ASSIGN_OR_RETURN(store::SandboxRecord rec, store_ptr->get_sandbox(id));
        return vault_ptr->resolve(*store_ptr, rec.team_id, name);
      });

  // A start that fails from here on takes its nftables table away again, unless the store still
  // has sandboxes of an earlier abxd: those may be alive, and the table keeps policing them until
  // an abxd adopts them.
  auto fail_networked = [&](const Error& e, int code) {
    auto left = (*st)->list_sandboxes(store::SandboxFilter{.limit = 1});
    if (left.ok() && left->items.empty()) (*network)->remove_rules();
    return fail(e, code);
  };

  platform::EventLogOptions eo;
  eo.max_streams = cfg.max_event_streams;
  eo.max_streams_per_team = cfg.max_event_streams_per_team;
  eo.max_events = cfg.max_events;
  platform::EventLog events(**st, eo);
  platform::WebhookOptions wo;
  wo.allow_private = cfg.webhook_allow_private;
  wo.attempt_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(cfg.webhook_timeout * 1000));
  wo.retry_delay =
      std::chrono::milliseconds(static_cast<std::int64_t>(cfg.webhook_retry_delay * 1000));
  wo.retries = cfg.webhook_retries;
  wo.max_per_team = cfg.max_webhooks;
  platform::WebhookDispatcher webhooks(**st, wo);
  events.set_webhooks(&webhooks);

  platform::ManagerOptions mo;
  mo.events = &events;
  mo.timeout_warning =
      std::chrono::milliseconds(static_cast<std::int64_t>(cfg.timeout_warning * 1000));
  mo.network = network->get();
  mo.allow_host_network = cfg.allow_host_network;
  mo.pause_mode = cfg.pause_mode == "disk"     ? platform::ManagerOptions::PauseMode::kDisk
                  : cfg.pause_mode == "memory" ? platform::ManagerOptions::PauseMode::kMemory
                                               : platform::ManagerOptions::PauseMode::kAuto;
  mo.criu = cfg.criu;
  mo.home = cfg.home;
  mo.domain = cfg.domain;
  mo.binaries = cfg.bins;
  mo.builtins = bo;
  mo.registry_auth_file = cfg.registry_auth;
  mo.insecure_registries = cfg.insecure_registries;
  mo.image_store = cfg.image_store;
  mo.volume_bytes = cfg.volume_size_mib << 20;
  mo.layer_pool = cfg.layer_pool;
  mo.layer_pool_idle =
      std::chrono::milliseconds(static_cast<std::int64_t>(cfg.layer_pool_idle * 1000));
  mo.sandbox_pool = cfg.sandbox_pool;
  mo.sandbox_pool_idle =
      std::chrono::milliseconds(static_cast<std::int64_t>(cfg.sandbox_pool_idle * 1000));
  mo.userns = cfg.userns;
  mo.server_ready_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(cfg.server_ready_timeout * 1000));
  // --cluster: registered in etcd before the manager adopts sandboxes of an earlier abxd (a
  // refused join leaves them alone) and before the listener opens (the router is in place for
  // the first request); gone (lease revoked) after the listener has drained.
  std::atomic<platform::SandboxManager*> cluster_mgr{nullptr};
  std::unique_ptr<cluster::EtcdClient> etcd;
  std::unique_ptr<cluster::Membership> membership;
  std::string cluster_secret;
  cluster::TlsPlan tls_plan;
  std::unique_ptr<platform::ClusterTls> cluster_tls;
  if (!cfg.cluster.empty()) {
    auto joined =
        join_cluster(cfg, cluster_mgr, **network, **st, etcd, membership, tls_plan, cluster_tls);
    if (!joined.ok())
      return fail_networked(joined.error(), joined.error().code() == ErrorCode::kInvalidArgument
                                                ? kExitUsage
                                                : kExitConfig);
    cluster_secret = std::move(*joined);
    log.info("joined the cluster as node " + cfg.node_name + " (etcd " + cfg.cluster + ")");
  }
  // Volumes with a quota are mounted before anything (an adopted or resumed sandbox) binds them.
  if (std::size_t n = platform::mount_volumes(cfg.home); n > 0)
    log.info("mounted " + std::to_string(n) + " volume image(s)");
  auto mgr = platform::SandboxManager::start(mo, **st, std::move(catalog));
  if (!mgr.ok()) return fail_networked(mgr.error(), kExitConfig);
  platform::ControlApi api(**mgr, **st);
  api.set_console(!cfg.no_console);
  std::unique_ptr<platform::ClusterRouter> router;
  // With mutual TLS between nodes: the internal gateway's backend marks the calls that came
  // through the internal endpoint with a token of this process (cluster_tls.h).
  std::string transport_token;
  std::unique_ptr<platform::StampingBackend> internal_backend;
  if (cluster_tls) {
    auto t = token::random_hex(32);
    if (!t.ok()) return fail_networked(t.error(), kExitConfig);
    transport_token = *t;
    internal_backend = std::make_unique<platform::StampingBackend>(api, transport_token);
  }
  if (membership) {
    cluster_mgr = mgr->get();
    router = std::make_unique<platform::ClusterRouter>(
        *membership, **mgr, **st,
        platform::ClusterRouterOptions{
            .secret = cluster_secret,
            .tls = cluster_tls.get(),
            .transport_token = transport_token,
            .fanout_timeout = std::chrono::milliseconds(cfg.cluster_fanout_timeout_ms)});
    api.enable_cluster(*router);
  }
  api.enable_secrets(*vault, cfg.max_secrets);

  // Template builds, into the manager's image store; a finished build reloads the catalog.
  platform::TemplateBuildOptions tbo;
  tbo.home = cfg.home;
  tbo.store = &(*mgr)->images();
  tbo.userns = cfg.userns;
  tbo.sandbox_network = network->get();
  platform::SandboxManager* manager = mgr->get();
  // The manager's pinned version of the bundle (bundle.h), as its sandboxes have it.
  if (const std::string& bundle = manager->options().binaries.bundle; platform::is_bundle(bundle)) {
    tbo.binds.push_back({bundle, platform::kBundleInside, false});
  }
  tbo.pull = [manager](const image::Reference& ref, const platform::BuildProgress& progress) {
    image::RegistryOptions ro;
    ro.auth_file = manager->options().registry_auth_file;
    ro.insecure_registries = manager->options().insecure_registries;
    ro.progress = [&progress](std::string_view line) {
      if (progress) progress(boost::json::object{{"type", "log"}, {"line", std::string(line)}});
    };
    return image::pull(manager->images(), ref, ro);
  };
  tbo.template_image = [manager](const std::string& name) -> Result<image::Image> {
    auto current = manager->catalog();
    const templates::Template* t = current->get(name);
    if (!t) return not_found("no template '" + name + "'");
    return manager->resolve_image(*t);
  };
  tbo.images_in_use = [manager] { return manager->images_in_use(); };
  tbo.reload_templates = [manager]() -> Status {
    manager->reload_templates();
    return {};
  };
  platform::TemplateBuilder builder(tbo);
  // Templates built before teams existed were the only team's: the default team keeps them.
  const auto built_catalog = (*mgr)->catalog();
  for (const auto* t : built_catalog->list()) {
    if (!builder.is_built(t->id)) continue;
    if (Status s = (*st)->claim_template(t->id, std::string(store::kDefaultTeam));
        !s.ok() && s.error().code() != ErrorCode::kAlreadyExists)
      log.warn("template " + t->id + ": cannot record its team: " + s.error().message());
  }
  // The e2b SDK's Template builder: its uploads under <home>/template-files; destroyed before
  // the builder, after the gateway (its build threads use the builder).
  platform::TemplateJobs jobs(builder, (fs::path(cfg.home) / "template-files").string(), st->get());
  api.enable_builds(builder, (*mgr)->images(), (fs::path(cfg.home) / "uploads").string(), &jobs);

  // The internal endpoint first (a node's calls may come as soon as the public listener is up
  // and the node's record names it): the internal gateway on a loopback port, then the mutual
  // TLS listener in front of it.
  std::unique_ptr<platform::Gateway> internal_gw;
  if (cluster_tls) {
    platform::GatewayOptions iopt = gopt;
    iopt.host = "127.0.0.1";
    iopt.port = 0;
    iopt.io_threads = 1;
    iopt.workers = 4;
    auto igw = platform::Gateway::start(iopt, *internal_backend);
    if (!igw.ok()) return fail_networked(igw.error(), kExitListen);
    internal_gw = std::move(*igw);
    auto port = cluster_tls->listen(tls_plan.listen_host, tls_plan.listen_port, "127.0.0.1",
                                    internal_gw->port());
    if (!port.ok()) return fail_networked(port.error(), kExitListen);
    log.info("internal endpoint (mutual TLS) on " + tls_plan.listen_host + ":" +
             std::to_string(*port) + ", advertised as " + tls_plan.advertise_url);
  }
  auto gw = platform::Gateway::start(gopt, api);
  if (!gw.ok()) return fail_networked(gw.error(), kExitListen);
  std::string addr = (*gw)->host() + ":" + std::to_string((*gw)->port());
  std::cout << "listening on " << addr << std::endl;
  log.info("abxd serving on " + addr + " (home " + cfg.home + ", domain " + cfg.domain + ", " +
           std::to_string(ntemplates) + " templates)");
  if (!cfg.no_console)
    log.info("web console at http://" + addr + "/console (abxd --no-console: off)");
  int sig = 0;
  for (;;) {
    sigwait(&stop, &sig);
    if (sig != SIGHUP) break;
    (*mgr)->reload_templates();  // SIGHUP: re-read $ABX_HOME/templates
  }
  log.info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": draining");
  builder.shutdown();  // a running build stops (its RUN sandbox is killed) instead of holding the
                       // drain
  events.stop();       // event streams end cleanly (their last chunk) rather than hold the drain
  (*gw)->shutdown(std::chrono::seconds(10));
  if (cluster_tls) {
    cluster_tls->stop();
    internal_gw->shutdown(std::chrono::seconds(2));
  }
  if (cfg.kill_sandboxes) {
    (*mgr)->kill_all();
    if (router) router->forget_gone();  // their placement records leave the cluster's map
    (*network)->remove_rules();         // no sandbox left to police
  } else if ((*mgr)->detach_all() == 0) {
    // They keep running and the next abxd adopts them, with their rules in force meanwhile;
    // with none left, the table has nothing to police.
    (*network)->remove_rules();
  }
  // Sandboxes left running keep their binds of a volume (and its loop device); the next abxd
  // mounts that device again.
  platform::unmount_volumes(cfg.home);
  // The last events (the `shutdown` ends above) still reach the webhooks, for a few seconds.
  webhooks.drain(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  webhooks.stop();
  log.info("stopped");
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app;
  if (auto done = parse_flags(app, argc, argv, cfg)) return *done;
  if (cfg.no_userns) cfg.userns.enabled = false;
  if (!cfg.log_level.empty() && !set_log_level(cfg.log_level)) {
    std::cerr << "abxd: unknown --log-level '" << cfg.log_level << "'\n";
    return kExitUsage;
  }
  if (!cfg.key_action.empty()) return keys_main(cfg);
  if (cfg.watchdog_cmd->parsed()) return platform::run_watchdog({.home = cfg.home});
  if (cfg.image_cmd.group->parsed()) {
    cfg.image_cmd.bundle = cfg.bins.bundle;
    cfg.image_cmd.home = cfg.home;
    return platform::run_image_command(
        cfg.image_cmd, cfg.image_store.empty() ? cfg.home + "/images" : cfg.image_store);
  }
  auto gopt = gateway_options(cfg);
  if (!gopt.ok()) return fail(gopt.error(), kExitUsage);
  return serve(cfg, *gopt);
}
