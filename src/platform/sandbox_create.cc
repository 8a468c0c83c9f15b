// SandboxManager::create: a sandbox from a template — admission, the run directory, envd's
// typed configuration, the spawn, the readiness waits and the record, under one undo guard.
// (A snapshot's create is persistence.cc's; the manager's other parts are sandboxes.cc and
// sandbox_lifecycle.cc.)
#include <fcntl.h>

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/scope_exit.h"
#include "abx/base/try.h"
#include "abx/client/commands.h"
#include "abx/client/sandbox.h"
#include "abx/envd/config.h"
#include "abx/http/client.h"
#include "abx/runtime/process.h"
#include "abx/token/token.h"
#include "bundle.h"
#include "sandbox_config.h"
#include "sandbox_pool.h"
#include "sandboxes.h"
#include "sandboxes_internal.h"
#include "volumes.h"

namespace abx::platform {

namespace fs = std::filesystem;

namespace {

constexpr const char* kEnvdInside = "/opt/abx/bin/abx-envd";
constexpr const char* kServerInside = "/opt/abx/bin/abx-server";
constexpr const char* kDemoInside = "/opt/abx/lib/libabx_demo_commands.so";
constexpr const char* kTokenInside = "/run/abx/token";
// abx-envd reads its configuration (<home>/run/<id>/envd.json) from this descriptor, then closes
// it: nothing is left open for a checkpoint to find.
constexpr int kEnvdConfigFd = 3;
constexpr const char* kEnvdConfigFile = "envd.json";

std::string join_quoted(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + templates::shell_quote(a);
  return out;
}

// What abx-envd runs in a sandbox of `tmpl` (its --config-fd): the template's start command,
// command server and interpreter, and the image's defaults. `env` is the sandbox's environment
// (the Python worker's interpreter comes from it).
envd::EnvdConfig envd_config(const ManagerOptions& opt, const templates::Template& tmpl,
                             const std::optional<image::Image>& img, const std::string& token_file,
                             const std::map<std::string, std::string>& env) {
  envd::EnvdConfig ec;
  ec.host = "127.0.0.1";
  ec.port = kEnvdPort;
  if (!token_file.empty()) ec.token_file = kTokenInside;
  // The image's config gives the defaults: its Entrypoint + Cmd start unless the template has a
  // start command, its User is the default user, its Env comes before the template's.
  // A portable image (image::with_runtime) already names envd as its entrypoint: its own start
  // command is the --start-cmd in Cmd.
  ec.start_cmd = join_quoted(tmpl.start);
  if (tmpl.start.empty() && img) {
    const auto& ep = img->config.entrypoint;
    const auto& cmd = img->config.cmd;
    if (!ep.empty() && ep.front() == kEnvdInside) {
      if (cmd.size() == 2 && cmd[0] == "--start-cmd") ec.start_cmd = cmd[1];
    } else {
      std::vector<std::string> start = ep;
      start.insert(start.end(), cmd.begin(), cmd.end());
      ec.start_cmd = join_quoted(start);
    }
  }
  // envd's own default user unless the image names one.
  if (img && !img->config.user.empty()) ec.default_user = img->config.user;
  // Commands start in the image's WorkingDir (E2B's setWorkdir) unless they name a cwd.
  if (img && img->config.working_dir.starts_with('/') && img->config.working_dir != "/")
    ec.default_workdir = img->config.working_dir;
  if (tmpl.interpreter) ec.interpreter_argv = tmpl.interpreter->argv;
  if (tmpl.server) {
    // Executed directly (no shell needed in the image); envd gives it the token it read.
    ec.server_argv = tmpl.server->argv;
    // A Python module's worker is started by envd just before abx-server, on descriptor 3 of
    // both, so the interpreter's start overlaps abx-server's (issue 37): the worker as
    // pyworker::Worker would start it, the image's python3 ($ABX_PYTHON) on the bundle's
    // abx/server/run.py. Outside a bundle (no package inside) abx-server starts it itself.
    if (!tmpl.server->python_module.empty() && is_bundle(opt.binaries.bundle)) {
      ec.server_argv.insert(ec.server_argv.end(), {"--python-fd", "3"});
      auto python = env.find("ABX_PYTHON");
      ec.server_companion_argv = {
          python != env.end() && !python->second.empty() ? python->second : "python3",
          std::string(kBundleInside) + "/python/abx/server/run.py", "--fd", "3",
          tmpl.server->python_module};
    }
  }
  return ec;
}

// What abxd opens for a command server's companion that the init starts beside envd: the
// socketpair between it and the server, and the pipe its output goes into.
struct CompanionPipes {
  UniqueFd server_end, companion_end, output_read, output_write;
};
// Where the init has them: envd gets the first three (--server-companion-fds), the companion
// its end alone (as its descriptor 3, with the pipe's write end as 1 and 2).
constexpr int kCompanionSocketFd = 4;
constexpr int kCompanionOutputReadFd = 5;
constexpr int kCompanionOutputWriteFd = 6;
constexpr int kCompanionEndFd = 7;

// A Python module's worker (envd's server_companion_argv) starts beside envd: the init starts it
// just before its exec of envd (runtime's SandboxConfig::companion), where envd would start it
// ~10 ms later, once its own start is done (issue 37: the interpreter's start is the longest
// step of such a create). It gets what envd's supervisor would give it: root (the command
// server's user), HOME=/root and USER=root (envd takes root's home from the image's
// /etc/passwd; /root in every image we know), the sandbox's environment without
// ABX_ACCESS_TOKEN, a session of its own. Only for an envd that runs as root; else nothing.
Status start_companion_beside_envd(const envd::EnvdConfig& ec,
                                   const std::map<std::string, std::string>& env,
                                   runtime::SandboxConfig& config, CompanionPipes& pipes) {
  if (ec.server_companion_argv.empty() || config.uid != 0 || config.gid != 0) return {};
  // ABX_COMPANION_FROM_ENVD=1: envd starts it, as before (for A/B runs, bench/README.md).
  if (const char* v = std::getenv("ABX_COMPANION_FROM_ENVD"); v != nullptr && *v == '1') return {};
  ABX_ASSIGN_OR_RETURN(auto sockets, os::make_socketpair());
  ABX_ASSIGN_OR_RETURN(auto output, os::make_pipe());
  pipes.server_end = std::move(sockets.first);
  pipes.companion_end = std::move(sockets.second);
  pipes.output_read = std::move(output.first);
  pipes.output_write = std::move(output.second);
  config.fds.push_back({pipes.server_end.get(), kCompanionSocketFd});
  config.fds.push_back({pipes.output_read.get(), kCompanionOutputReadFd});
  config.fds.push_back({pipes.output_write.get(), kCompanionOutputWriteFd});
  config.fds.push_back({pipes.companion_end.get(), kCompanionEndFd});
  config.argv.push_back("--server-companion-fds=" + std::to_string(kCompanionSocketFd) + "," +
                        std::to_string(kCompanionOutputReadFd) + "," +
                        std::to_string(kCompanionOutputWriteFd));
  runtime::SandboxConfig::Companion c;
  c.argv = ec.server_companion_argv;
  c.env = {"HOME=/root", "USER=root"};
  for (const auto& [k, v] : env) {
    if (k != "HOME" && k != "USER" && k != "ABX_ACCESS_TOKEN") c.env.push_back(k + "=" + v);
  }
  c.cwd = "/root";
  c.fds = {{kCompanionOutputWriteFd, STDOUT_FILENO},
           {kCompanionOutputWriteFd, STDERR_FILENO},
           {kCompanionEndFd, 3}};
  c.private_fds = {kCompanionEndFd};
  c.pid_flag = "--server-companion-pid";
  config.companion = std::move(c);
  return {};
}

// The runtime config of a sandbox whose init is abx-envd: the template's rootfs, network,
// environment and limits, the binaries bind-mounted read-only, and envd's configuration
// (envd_config) on descriptor 3 from `envd_config_fd`, which must stay open until the spawn.
runtime::SandboxConfig envd_sandbox_config(
    const ManagerOptions& opt, const templates::Template& tmpl,
    const std::optional<image::Image>& img, const std::string& id, const std::string& token_file,
    const SandboxNetworkSpec& net, const std::string& run_dir,
    const std::map<std::string, std::string>& env, int envd_config_fd) {
  runtime::SandboxConfig cfg;
  cfg.id = id;
  cfg.state_dir = opt.home + "/sandboxes";
  cfg.userns = opt.userns;
  if (!img) {
    cfg.rootfs = runtime::RootfsMode::kHost;  // `rootfs: host`, the explicit development mode
  } else {
    cfg.rootfs = runtime::RootfsMode::kImage;
    cfg.lower_dirs = img->layer_dirs;
  }
  cfg.network = tmpl.network == templates::NetworkMode::kHost ? runtime::NetworkMode::kHost
                                                              : runtime::NetworkMode::kNone;
  if (net.enabled) {
    cfg.veth = opt.network->veth_config();
    cfg.binds.push_back({run_dir + "/resolv.conf", "/etc/resolv.conf", false});
    if (!opt.network->sandbox_ca_bundle().empty()) {
      cfg.binds.push_back({opt.network->sandbox_ca_bundle(), kSandboxCaBundle, false});
      cfg.binds.push_back({opt.network->ca_cert_path(), kSandboxEgressCa, false});
    }
    // The rules are in force before the sandbox's first instruction.
    cfg.link_rules = [network = opt.network, id, net](const runtime::VethInfo& link) {
      return network->attach_rules(id, link, net);
    };
    cfg.link_ready = [network = opt.network, id](const runtime::VethInfo& link) {
      return network->listen(id, link);
    };
  }
  cfg.argv = {kEnvdInside, "--config-fd", std::to_string(kEnvdConfigFd)};
  cfg.fds.push_back({envd_config_fd, kEnvdConfigFd});
  if (!token_file.empty()) cfg.binds.push_back({token_file, kTokenInside, false});
  for (const auto& [k, v] : env) cfg.env.push_back(k + "=" + v);
  if (is_bundle(opt.binaries.bundle)) {
    cfg.binds.push_back({opt.binaries.bundle, kBundleInside, false});
  } else {
    cfg.binds.push_back({opt.binaries.envd, kEnvdInside, false});
    cfg.binds.push_back({opt.binaries.server, kServerInside, false});
    if (!opt.binaries.demo_module.empty() && fs::exists(opt.binaries.demo_module)) {
      cfg.binds.push_back({opt.binaries.demo_module, kDemoInside, false});
    }
  }
  cfg.limits.memory_bytes = static_cast<std::uint64_t>(tmpl.resources.memory_bytes);
  cfg.limits.pids_max = static_cast<std::uint32_t>(tmpl.resources.pids);
  cfg.limits.cpu_millicores = static_cast<std::uint32_t>(tmpl.resources.cpu * 1000);
  cfg.disk_bytes = static_cast<std::uint64_t>(tmpl.resources.disk_bytes);
  return cfg;
}

// A sandbox's environment, later sources overriding earlier ones: abx's defaults, the image,
// abxd's egress CA, the template, the request, the sandbox's id.
std::map<std::string, std::string> sandbox_env(const ManagerOptions& opt,
                                               const templates::Template& tmpl,
                                               const std::optional<image::Image>& img,
                                               const CreateRequest& req, const std::string& id,
                                               const SandboxNetworkSpec& net) {
  std::map<std::string, std::string> env = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", "/root"},
      {"LANG", "C.UTF-8"}};
  if (img) {
    for (const auto& kv : img->config.env) {
      auto eq = kv.find('=');
      if (eq != std::string::npos && eq > 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  // abxd's egress CA (network.rules over HTTPS): the bundle at the distro's path and the
  // variables the usual clients read; a template or the request may still set them.
  if (net.enabled && opt.network && !opt.network->sandbox_ca_bundle().empty()) {
    env["SSL_CERT_FILE"] = kSandboxCaBundle;
    env["REQUESTS_CA_BUNDLE"] = kSandboxCaBundle;
    env["NODE_EXTRA_CA_CERTS"] = kSandboxEgressCa;
  }
  for (const auto& [k, v] : tmpl.env) env[k] = v;
  for (const auto& [k, v] : req.env_vars) env[k] = v;
  env["ABX_SANDBOX_ID"] = id;
  env["E2B_SANDBOX_ID"] = id;
  return env;
}

// Ready means envd answers on its port inside the sandbox's netns (10 s, backing off to 1 ms).
Status wait_for_envd(const runtime::Sandbox& sb) {
  Status st = unavailable("envd did not start");
  // A refused connect into the sandbox costs microseconds: poll often (doubling up to 1 ms), so
  // the create answers within a millisecond of envd listening rather than up to a backoff later.
  os::poll_until(
      std::chrono::steady_clock::now() + std::chrono::seconds(10),
      os::Backoff{std::chrono::microseconds(100), std::chrono::microseconds(1'000)}, [&] {
        if (sb.open_tcp(kEnvdPort, std::chrono::milliseconds(500)).ok()) {
          st = {};
        } else if (sb.init_exited()) {
          st = unavailable("abx-envd exited during start (see the abxd log for its output)");
        } else {
          return false;
        }
        return true;
      });
  return st;
}

// The last `n` lines `source` printed (stdout and stderr), each indented, for an error message.
std::string output_tail(const std::vector<EnvdLogLine>& lines, const std::string& source,
                        std::size_t n) {
  std::vector<const EnvdLogLine*> mine;
  for (const auto& l : lines) {
    if (l.source == source && l.stream != "event") mine.push_back(&l);
  }
  if (mine.empty()) return "; it printed nothing";
  std::string out = "; its last output:";
  for (std::size_t i = mine.size() > n ? mine.size() - n : 0; i < mine.size(); ++i) {
    out += "\n  " + mine[i]->line;
  }
  return out;
}

// Ready means the template's command server accepts connections on its port. envd restarts a
// server that exits, so the first exit before that fails the create with the server's own
// words (its exit status and the tail of its output, from envd's log) — never a sandbox whose
// command list is silently empty.
// `source` is the supervisor's name for it in envd's log ("command server", "code interpreter").
Status wait_for_server(const runtime::Sandbox& sb, const templates::Template& tmpl,
                       const templates::ServerSpec& spec, const std::string& source,
                       const std::string& token, std::chrono::milliseconds timeout) {
  const std::uint16_t port = spec.port;
  auto failed = [&](const std::string& why, const std::vector<EnvdLogLine>& lines) {
    return Error(ErrorCode::kFailedPrecondition, "template '" + tmpl.id + "': its " + source + " " +
                                                     why + output_tail(lines, source, 20));
  };
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + timeout;
  auto next_log_check = start + std::chrono::milliseconds(20);
  std::optional<Status> st;  // set once it is known
  // As wait_for_envd: up to 2 ms between connects (a Python server takes ~80 ms to import its
  // module; a 50 ms backoff cap answered up to 40 ms after it listened).
  os::poll_until(
      deadline, os::Backoff{std::chrono::microseconds(250), std::chrono::microseconds(2'000)}, [&] {
        if (sb.open_tcp(port, std::chrono::milliseconds(500)).ok()) {
          st = Status{};
        } else if (sb.init_exited()) {
          st = unavailable("abx-envd exited while its " + source + " was starting");
        } else if (std::chrono::steady_clock::now() >= next_log_check) {
          next_log_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
          if (auto lines = read_envd_log(sb, token, 0, 10'000); lines.ok()) {
            for (const auto& l : *lines) {
              if (l.source == source && l.stream == "event" &&
                  l.line.find(" exited ") != std::string::npos) {
                st = failed("did not start (" + l.line + ")", *lines);
                break;
              }
            }
          }
        }
        return st.has_value();
      });
  if (st) return *st;
  auto lines = read_envd_log(sb, token, 0, 10'000);
  return failed("did not accept connections on port " + std::to_string(port) + " within " +
                    std::to_string(timeout.count() / 1000.0).substr(0, 4) +
                    " s (abxd --server-ready-timeout)",
                lines.ok() ? *lines : std::vector<EnvdLogLine>{});
}

// Ready: envd, then the template's command server and code interpreter, accept connections.
Status wait_ready(const runtime::Sandbox& sb, const templates::Template& tmpl,
                  const std::string& token, std::chrono::milliseconds server_timeout,
                  Timeline& tl) {
  ABX_TRY(wait_for_envd(sb));
  tl.mark("envd_ready");
  for (const auto& [spec, source] : {std::pair{&tmpl.server, "command server"},
                                     std::pair{&tmpl.interpreter, "code interpreter"}}) {
    if (*spec) ABX_TRY(wait_for_server(sb, tmpl, **spec, source, token, server_timeout));
  }
  if (tmpl.server || tmpl.interpreter) tl.mark("server_ready");
  return {};
}

// E2B's readyCmd (the SDK's setReadyCmd / setStartCmd(cmd, readyCmd), kept by a build as the
// image label kReadyCmdLabel): run through envd as the default user, again and again, until it
// exits 0. Each try gets what is left of `timeout`; between tries 20 ms, doubling to 500 ms.
// failed_precondition with its last exit status and output when it never does within `timeout`.
Status wait_for_ready_cmd(const runtime::Sandbox& sb, const templates::Template& tmpl,
                          const std::string& id, const std::string& cmd, const std::string& token,
                          std::chrono::milliseconds timeout) {
  client::ConnectionConfig config;
  config.max_retries = 0;
  config.request_timeout = timeout;
  config.max_response_bytes = 1 << 20;
  config.sandbox_dialer = [&sb](const std::string&, std::uint16_t port) -> Result<UniqueFd> {
    return sb.open_tcp(port, std::chrono::seconds(2));
  };
  client::SandboxInfo info;
  info.sandbox_id = id;
  info.template_id = tmpl.id;
  info.envd_access_token = token;
  auto handle = client::Sandbox::attach(std::move(info), config, {client::Capability::kShell});
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "it never ran";
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left <= std::chrono::milliseconds(0)) break;
    client::CommandOptions o;
    o.timeout = std::max(left, std::chrono::milliseconds(1));
    auto r = handle.commands().run(cmd, o);
    if (r.ok() && r->exit_code == 0) return {};
    if (r.ok()) {
      std::string out = r->stdout_data + r->stderr_data;
      if (out.size() > 2000) out = "…" + out.substr(out.size() - 2000);
      while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
      last = "its last try exited with " + std::to_string(r->exit_code) +
             (out.empty() ? std::string(", printing nothing") : ": " + out);
    } else {
      last = "its last try failed: " + r.error().message();
    }
    if (sb.init_exited()) {
      last += " (abx-envd exited)";
      break;
    }
    std::this_thread::sleep_for(
        std::min(pause, std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  return Error(ErrorCode::kFailedPrecondition,
               "template '" + tmpl.id + "': its ready command (" + cmd +
                   ") did not succeed within " +
                   std::to_string(timeout.count() / 1000.0).substr(0, 4) +
                   " s (abxd --server-ready-timeout): " + last);
}

// The sandbox of `config` spawned, then ready (wait_ready): create's start, and a filesystem-only
// pause's boot on its kept layer. A sandbox that does not get ready is destroyed.
Result<runtime::Sandbox> spawn_ready(runtime::SandboxConfig config, const templates::Template& tmpl,
                                     const std::string& token,
                                     std::chrono::milliseconds server_timeout, Timeline& tl) {
  ABX_ASSIGN_OR_RETURN(runtime::Sandbox sb, runtime::Sandbox::spawn(std::move(config), &tl));
  ABX_TRY(wait_ready(sb, tmpl, token, server_timeout, tl));
  return sb;
}

// envd's configuration, typed, written to <run_dir>/envd.json and opened for the sandbox's init
// to read on a descriptor (no path into the sandbox's view of the host needed).
Result<UniqueFd> write_envd_config(const fs::path& run_dir, const envd::EnvdConfig& config) {
  const std::string path = (run_dir / kEnvdConfigFile).string();
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  ABX_TRY(write_run_file(path, to_json_string(envd::to_json(config)) + "\n"));
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return os::errno_error("open " + path, err);
  }
  return fd;
}

// The template a create names, as the request's team may see it; nullptr (no error) for a
// snapshot's id when `snapshot` (create_from_snapshot takes it from there).
Result<const templates::Template*> find_template(store::Store& store,
                                                 const templates::TemplateCatalog& catalog,
                                                 const CreateRequest& req, bool snapshot) {
  // Another team's template is not there, as far as this request can tell.
  if (!template_visible_to(store, req.template_id, req.team_id))
    return not_found("template '" + req.template_id + "' not found");
  const templates::Template* tmpl = catalog.get(req.template_id);
  if (tmpl != nullptr || snapshot) return tmpl;
  for (const auto& e : catalog.errors()) {
    if (e.id_hint == req.template_id) {
      return Error(ErrorCode::kFailedPrecondition,
                   "template '" + req.template_id + "' failed to load: " + e.message);
    }
  }
  return not_found("template '" + req.template_id + "' not found");
}

store::SandboxRecord new_record(const ManagerOptions& opt, const templates::Template& tmpl,
                                const CreateRequest& req, const std::string& id,
                                const runtime::Sandbox& sb, const std::string& token,
                                std::int64_t timeout, const SandboxNetworkSpec& net) {
  store::SandboxRecord rec;
  rec.id = id;
  rec.team_id = req.team_id;
  rec.template_id = tmpl.id;
  rec.client_id = kClientId;
  rec.created_at_ms = now_ms();
  rec.end_at_ms = rec.created_at_ms + timeout * 1000;
  rec.state = store::SandboxState::kRunning;
  rec.init_pid = sb.pid();
  rec.init_start_time = runtime::process_start_time(sb.pid());
  rec.access_token_digest = token.empty() ? std::string() : store::token_digest(token);
  rec.cpu_count = tmpl.resources.cpu;
  rec.memory_mb = tmpl.resources.memory_bytes >> 20;
  rec.disk_mb = tmpl.resources.disk_bytes >> 20;
  rec.metadata = req.metadata;
  rec.env_vars = req.env_vars;
  rec.domain = opt.domain;
  rec.pause_on_timeout = req.pause_on_timeout;
  rec.auto_resume = req.auto_resume;
  rec.pause_keeps_memory = req.pause_keeps_memory;
  rec.timeout_s = timeout;
  rec.network = boost::json::serialize(network_record(net));
  rec.volume_mounts = req.volume_mounts;
  return rec;
}

}  // namespace

// What the store keeps of a sandbox's network (SandboxNetworkSpec::from_json reads it).
boost::json::object network_record(const SandboxNetworkSpec& net) {
  return {{"enabled", net.enabled},
          {"allowInternetAccess", net.allow_internet_access},
          {"network", net.to_json(/*reveal=*/true)}};
}

Result<std::vector<EnvdLogLine>> read_envd_log(const runtime::Sandbox& sb,
                                               const std::string& access_token,
                                               std::int64_t start_ms, std::int64_t limit) {
  namespace bhttp = boost::beast::http;
  ABX_ASSIGN_OR_RETURN(auto fd, sb.open_tcp(kEnvdPort, std::chrono::seconds(2)));
  ABX_ASSIGN_OR_RETURN(auto conn, http::Connection::adopt(std::move(fd), "localhost"));
  auto req = http::make_request(bhttp::verb::get, "/logs?start=" + std::to_string(start_ms) +
                                                      "&limit=" + std::to_string(limit));
  req.erase(bhttp::field::content_type);
  if (!access_token.empty()) req.set("X-Access-Token", access_token);
  conn->set_body_limit(32u << 20);
  ABX_ASSIGN_OR_RETURN(auto res, conn->send(std::move(req), std::chrono::seconds(10)));
  if (res.result_int() != 200) {
    return Error(ErrorCode::kUnavailable,
                 "envd answered " + std::to_string(res.result_int()) + " for its logs");
  }
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(res.body(), ec);
  const boost::json::value* logs =
      !ec && v.is_object() ? v.as_object().if_contains("logs") : nullptr;
  if (logs == nullptr || !logs->is_array()) {
    return Error(ErrorCode::kUnavailable, "envd sent malformed logs");
  }
  std::vector<EnvdLogLine> out;
  for (const auto& l : logs->as_array()) {
    if (!l.is_object()) continue;
    const auto& o = l.as_object();
    auto str = [&](const char* k) {
      const boost::json::value* x = o.if_contains(k);
      return x && x->is_string() ? std::string(x->as_string()) : std::string();
    };
    const boost::json::value* ts = o.if_contains("timestampMs");
    if (ts == nullptr || !ts->is_number()) continue;
    out.push_back(
        {ts->to_number<std::int64_t>(), str("level"), str("line"), str("source"), str("stream")});
  }
  return out;
}

// Order: check the request, take a pooled sandbox or boot one (boot()), then record; a failure
// after that discards the sandbox, so an unacknowledged create leaves nothing behind.
Result<std::shared_ptr<LiveSandbox>> SandboxManager::create(const CreateRequest& req) {
  // Where this create's time goes, step by step (summed into create_timings() on success).
  Timeline tl;
  auto catalog = this->catalog();
  const bool snapshot = req.template_id.starts_with("snapshot-") && pause_to_disk_ &&
                        fs::exists(opt_.home + "/snapshots/" + req.template_id);
  ABX_ASSIGN_OR_RETURN(const templates::Template* tmpl,
                       find_template(*store_, *catalog, req, snapshot));
  if (tmpl == nullptr) return create_from_snapshot(req.template_id, req);
  // secure=false opens envd without a token (as in E2B); a command server always needs one.
  if (!req.secure && tmpl->server) {
    return invalid_argument("secure=false needs a template without a command server ('" + tmpl->id +
                            "' serves commands, which always need a token)");
  }
  if (req.pause_on_timeout && !req.pause_keeps_memory && tmpl->rootfs == "host") {
    return invalid_argument("autoPauseMemory false needs a writable layer to keep, and template '" +
                            tmpl->id + "' has rootfs: host (its files live in memory)");
  }
  ABX_ASSIGN_OR_RETURN(const std::int64_t timeout,
                       create_timeout(req, tmpl->timeout_seconds, "template '" + tmpl->id + "'"));
  {
    std::lock_guard lock(mu_);
    if (live_.size() >= opt_.max_sandboxes) {
      return Error(ErrorCode::kResourceExhausted,
                   "sandbox limit reached (" + std::to_string(opt_.max_sandboxes) + ")");
    }
  }
  tl.mark("admit");
  std::optional<image::Image> img;
  if (tmpl->rootfs != "host") {
    ABX_ASSIGN_OR_RETURN(img, resolve_image(*tmpl));
  }
  tl.mark("image");
  const std::string digest = img ? img->manifest_digest : std::string();
  std::optional<BootedSandbox> booted;
  bool committed = false;
  const bool pooled = pool_ && poolable(req);
  if (pooled) {
    // Booted from this very catalog and image; else it is destroyed and the next one tried.
    booted = pool_->take(tmpl->id, [&](const BootedSandbox& b) {
      return b.catalog == catalog && b.image_digest == digest;
    });
    if (booted) tl.mark("pool");
  }
  // The refill waits until this create has recorded its sandbox (or failed), and boots the
  // template ahead only once a create of it succeeded.
  ScopeExit ended{[&] {
    if (pooled) pool_->ended(tmpl->id, committed);
  }};
  if (!booted) {
    ABX_ASSIGN_OR_RETURN(BootedSandbox b, boot(catalog, *tmpl, img, req, tl));
    booted.emplace(std::move(b));
  }
  ScopeExit undo{[&] {
    if (!committed) discard(*booted);
  }};
  const std::string& id = booted->id;
  store::SandboxRecord rec =
      new_record(opt_, *tmpl, req, id, *booted->sandbox, booted->token, timeout, booted->network);
  if (Status s = store_->insert_sandbox(rec); !s) {
    Logger("sandboxes", id).error(s.error().message());
    return s.error();
  }
  committed = true;
  tl.mark("record");
  auto live = std::make_shared<LiveSandbox>(
      std::move(rec), std::make_shared<runtime::Sandbox>(std::move(*booted->sandbox)));
  live->set_access_token(std::move(booted->token));
  live->traffic_token = std::move(booted->traffic_token);
  live->mask_host = booted->network.mask_request_host;
  live->tmpl = std::make_shared<const templates::Template>(*tmpl);
  live->image_digest = digest;
  live->network = booted->network;
  {
    std::lock_guard lock(mu_);
    live_[live->record.id] = live;
  }
  count_start(live->record.team_id);
  emit(kEventCreated, live->record);
  live->note("info", "created from template '" + tmpl->id + "', deadline in " +
                         std::to_string(timeout) + " s");
  live->sample_metrics();  // the first metrics sample; the reaper takes one every 5 s after it
  tl.mark("announce");
  create_timings_.add(tl);
  Logger("sandboxes", id).debug("created in " + tl.summary());
  return live;
}

bool SandboxManager::poolable(const CreateRequest& req) const {
  if (!req.secure || !req.env_vars.empty() || !req.volume_mounts.empty()) return false;
  if (!req.network) return true;
  // The request's network may spell out the default (the SDKs send allowInternetAccess). The
  // whole of what the store keeps is compared: the network object alone leaves out
  // allowInternetAccess, and a create asking for no internet took a pooled sandbox that had it.
  return boost::json::serialize(network_record(*req.network)) ==
         boost::json::serialize(network_record(default_network()));
}

void SandboxManager::discard(BootedSandbox& b) {
  if (b.sandbox) (void)b.sandbox->destroy();
  b.sandbox.reset();
  if (b.network.enabled && opt_.network != nullptr) opt_.network->detach(b.id);
  std::error_code ec;
  fs::remove_all(fs::path(opt_.home) / "run" / b.id, ec);
}

Result<BootedSandbox> SandboxManager::boot_ahead(const std::string& id) {
  auto catalog = this->catalog();
  const templates::Template* tmpl = catalog->get(id);
  if (tmpl == nullptr) return not_found("template '" + id + "' not found");
  std::optional<image::Image> img;
  if (tmpl->rootfs != "host") {
    ABX_ASSIGN_OR_RETURN(img, resolve_image(*tmpl));
  }
  CreateRequest req;
  req.template_id = id;
  Timeline tl;
  return boot(std::move(catalog), *tmpl, img, req, tl);
}

// Order: make the token (file), the run directory and envd's configuration, spawn, wait for
// envd and the servers; a failure after the token file exists undoes everything made so far
// (one guard: the sandbox, its link, the run directory).
// One function of ~110 lines on purpose: every step after the token file is covered by the one
// undo guard and reads its state (sb, net, run_dir), so they stay in its scope, in order.
Result<BootedSandbox> SandboxManager::boot(
    std::shared_ptr<const templates::TemplateCatalog> catalog, const templates::Template& tmpl,
    const std::optional<image::Image>& img, const CreateRequest& req, Timeline& tl) {
  ABX_ASSIGN_OR_RETURN(const store::SandboxId sid, store::SandboxId::generate());
  const std::string& id = sid.str();
  std::string token;
  if (req.secure) {
    ABX_ASSIGN_OR_RETURN(token, token::random_hex(24));
  }
  Logger slog("sandboxes", id);
  const fs::path run_dir = fs::path(opt_.home) / "run" / id;
  SandboxNetwork* network = opt_.network;
  SandboxNetworkSpec net = req.network ? *req.network : default_network();
  std::optional<runtime::Sandbox> sb;
  // From here on, a failure undoes what was made, in reverse: the sandbox, its link's rules (they
  // may have gone in before a spawn failed), its run directory. One guard, as runtime's spawn.
  bool committed = false;
  ScopeExit undo{[&] {
    if (committed) return;
    if (sb) (void)sb->destroy();  // (spawn_ready destroys one that did not get ready)
    // net.enabled is only settled further down: before that it is the request's, and abxd may
    // have no network at all.
    if (net.enabled && network != nullptr) network->detach(id);
    std::error_code ec;
    fs::remove_all(run_dir, ec);
  }};
  // Logged with the sandbox's id, returned as it is.
  auto failed = [&](const Error& e) {
    slog.error(e.message());
    return e;
  };
  std::string token_file;
  if (!token.empty()) {
    token_file = (run_dir / "token").string();
    ABX_TRY(write_run_secret(token_file, token));
  }
  if (img) {
    std::error_code ec;
    fs::create_directories(run_dir, ec);
    std::ofstream(run_dir / kImageFile) << img->manifest_digest << "\n";
  }
  // The network: a link under the request's rules (or abxd's default), unless the template or
  // abxd has none.
  if (tmpl.network == templates::NetworkMode::kHost && !opt_.allow_host_network) {
    return Error(ErrorCode::kPermissionDenied,
                 "template '" + tmpl.id +
                     "' asks for the host's network, which abxd allows only with "
                     "--allow-host-network");
  }
  if (tmpl.network != templates::NetworkMode::kDefault || !network || !network->enabled())
    net.enabled = false;
  if (net.enabled) {
    std::error_code ec;
    fs::create_directories(run_dir, ec);
    std::ofstream(run_dir / "resolv.conf") << network->resolv_conf();
  }

  tl.mark("run_dir");
  const std::map<std::string, std::string> env = sandbox_env(opt_, tmpl, img, req, id, net);
  const envd::EnvdConfig envd_cfg = envd_config(opt_, tmpl, img, token_file, env);
  ABX_ASSIGN_OR_RETURN(UniqueFd envd_json_fd, write_envd_config(run_dir, envd_cfg));
  runtime::SandboxConfig config = envd_sandbox_config(opt_, tmpl, img, id, token_file, net,
                                                      run_dir.string(), env, envd_json_fd.get());
  // The volumes, after abxd's own binds (check_mount_path keeps them apart), writable.
  for (const auto& m : req.volume_mounts) {
    const std::string dir = volume_dir(opt_.home, m.volume_id);
    if (std::error_code ec; !fs::is_directory(dir, ec))
      return failed(Error(ErrorCode::kFailedPrecondition,
                          "volume '" + m.name + "' has no directory (" + dir + ")"));
    if (Status s = ensure_volume_mounted(opt_.home, m.volume_id); !s)
      return failed(Error(s.error().code(), "volume '" + m.name + "': " + s.error().message()));
    config.binds.push_back({dir, m.path, true});
  }
  ABX_TRY(save_sandbox_config(run_dir.string(), config));
  config.layer_pool = layer_pool_.get();  // (not saved: a resume boots on the layer it keeps)
  // Not saved either: a resume's envd starts the worker itself.
  CompanionPipes companion_pipes;  // open until the spawn
  ABX_TRY(start_companion_beside_envd(envd_cfg, env, config, companion_pipes));
  std::string traffic_token;
  if (!net.allow_public_traffic) {
    ABX_ASSIGN_OR_RETURN(traffic_token, token::random_hex(16));
    ABX_TRY(write_run_secret((run_dir / "traffic_token").string(), traffic_token));
  }
  tl.mark("config");
  auto spawned = spawn_ready(std::move(config), tmpl, token, opt_.server_ready_timeout, tl);
  if (!spawned.ok()) return failed(spawned.error());
  sb.emplace(std::move(*spawned));
  if (img) {
    if (auto rc = img->config.labels.find(std::string(kReadyCmdLabel));
        rc != img->config.labels.end() && !rc->second.empty()) {
      if (Status ready =
              wait_for_ready_cmd(*sb, tmpl, id, rc->second, token, opt_.server_ready_timeout);
          !ready.ok())
        return failed(ready.error());
      tl.mark("ready_cmd");
    }
  }
  committed = true;
  BootedSandbox b;
  b.id = id;
  b.token = std::move(token);
  b.traffic_token = std::move(traffic_token);
  b.network = std::move(net);
  b.image_digest = img ? img->manifest_digest : std::string();
  b.catalog = std::move(catalog);
  b.sandbox = std::move(sb);
  return b;
}

// A filesystem-only pause's resume: create()'s spawn, from what create() saved in the run
// directory rather than from the template (which may have changed since: the sandbox keeps the
// layers, binds, environment and envd configuration it was created with).
Result<std::shared_ptr<runtime::Sandbox>> SandboxManager::boot_on_layer(const LiveSandbox& sb,
                                                                        const std::string& layer,
                                                                        bool copy) {
  const std::string& id = sb.record.id;
  if (!sb.tmpl)
    return Error(ErrorCode::kFailedPrecondition,
                 "template '" + sb.record.template_id + "' is gone");
  const fs::path run_dir = fs::path(opt_.home) / "run" / id;
  ABX_ASSIGN_OR_RETURN(runtime::SandboxConfig config, restore_config(id, sb.network));
  const std::string envd_json = (run_dir / kEnvdConfigFile).string();
  UniqueFd envd_json_fd(::open(envd_json.c_str(), O_RDONLY | O_CLOEXEC));
  if (!envd_json_fd) {
    const int err = errno;
    return os::errno_error("open " + envd_json, err);
  }
  config.fds.push_back({envd_json_fd.get(), kEnvdConfigFd});
  config.layer_image = layer;
  config.copy_layer = copy;
  // The link's rules go in with the spawn (restore_config's link_rules and link_ready): out again
  // on failure.
  const bool linked = config.veth.enabled;
  Timeline tl;
  auto booted =
      spawn_ready(std::move(config), *sb.tmpl, sb.access_token, opt_.server_ready_timeout, tl);
  if (!booted.ok()) {
    if (linked) opt_.network->detach(id);
    return booted.error();
  }
  Logger("sandboxes", id).debug("booted again in " + tl.summary());
  return std::make_shared<runtime::Sandbox>(std::move(*booted));
}

bool SandboxManager::default_internet() const {
  return opt_.network == nullptr || opt_.network->default_internet();
}

SandboxNetworkSpec SandboxManager::default_network() const {
  SandboxNetworkSpec net;
  net.allow_internet_access = default_internet();
  return net;
}

Result<std::int64_t> SandboxManager::create_timeout(const CreateRequest& req, std::int64_t fallback,
                                                    const std::string& from) const {
  // The request's own was checked where it came in (parse_create; the MCP tool's schema and
  // AbxdBackend): a zero timeout would hand back a sandbox the reaper kills at once.
  assert(!req.timeout_seconds ||
         (*req.timeout_seconds >= 1 && *req.timeout_seconds <= opt_.max_timeout_seconds));
  if (req.timeout_seconds) return *req.timeout_seconds;
  if (fallback < 1 || fallback > opt_.max_timeout_seconds) {
    return invalid_argument("the timeout of " + from + " (" + std::to_string(fallback) +
                            " s) is not between 1 and " + std::to_string(opt_.max_timeout_seconds) +
                            " seconds: give a timeout in the request");
  }
  return fallback;
}

}  // namespace abx::platform
