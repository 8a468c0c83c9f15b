#include "sandboxes.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cassert>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/scope_exit.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/envd/config.h"
#include "abx/http/client.h"
#include "abx/image/reference.h"
#include "abx/image/registry.h"
#include "abx/runtime/process.h"
#include "abx/token/token.h"
#include "bundle.h"
#include "sandbox_config.h"

namespace abx::platform {

namespace fs = std::filesystem;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool template_visible_to(store::Store& store, const std::string& template_id,
                         const std::string& team_id) {
  auto owner = store.template_owner(template_id);
  return owner.ok() && (!owner->has_value() || **owner == team_id);
}

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

// <home>/run/<id>/image: the manifest digest a sandbox runs on, so that an abxd that adopts it
// (and `abxd image gc`) know which image it still needs.
constexpr const char* kImageFile = "image";

std::string read_image_file(const fs::path& run_dir) {
  std::ifstream in(run_dir / kImageFile);
  std::string digest;
  std::getline(in, digest);
  return digest;
}

}  // namespace

SandboxManager::SandboxManager(ManagerOptions options, store::Store& store,
                               templates::TemplateCatalog catalog, image::Store images)
    : opt_(std::move(options)),
      store_(&store),
      images_(std::move(images)),
      catalog_(std::make_shared<const templates::TemplateCatalog>(std::move(catalog))) {}

Result<std::unique_ptr<SandboxManager>> SandboxManager::start(ManagerOptions options,
                                                              store::Store& store,
                                                              templates::TemplateCatalog catalog) {
  for (const auto& [what, path] : {std::pair{"abx-envd", options.binaries.envd},
                                   std::pair{"abx-server", options.binaries.server}}) {
    if (is_bundle(options.binaries.bundle)) break;
    if (path.empty() || !fs::exists(path)) {
      return Error(ErrorCode::kFailedPrecondition,
                   std::string(what) + " not found at '" + path + "' (see abxd --help)");
    }
  }
  // Sandboxes bind a pinned version of the bundle (bundle.h): one replaced later (an upgrade,
  // a rebuild) leaves a paused sandbox the binaries its checkpoint maps.
  if (is_bundle(options.binaries.bundle)) {
    auto pinned = pin_bundle(options.home, options.binaries.bundle);
    if (!pinned.ok())
      return Error(pinned.error().code(), "the /opt/abx bundle " + options.binaries.bundle + ": " +
                                              pinned.error().message());
    options.binaries.bundle = *pinned;
  }
  auto images = image::Store::open(options.image_store.empty() ? options.home + "/images"
                                                               : options.image_store);
  if (!images.ok()) {
    return Error(images.error().code(), "image store: " + images.error().message());
  }
  std::unique_ptr<SandboxManager> m(
      new SandboxManager(std::move(options), store, std::move(catalog), std::move(*images)));
  auto cat = m->catalog();
  std::string state_dir = m->opt_.home + "/sandboxes";
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  // Live sandboxes of a previous abxd (killed, or stopped with --keep-sandboxes) are adopted:
  // same init (pid + start time through a pidfd), netns, cgroups and token. Records whose
  // sandbox is gone are marked killed; cleanup_stale() then removes what nobody owns.
  store::SandboxFilter f;
  f.states = {store::SandboxState::kRunning, store::SandboxState::kPaused};
  f.limit = 1000;
  int adopted = 0, lost = 0;
  ABX_TRY(m->resolve_pause_mode());
  for (;;) {
    ABX_ASSIGN_OR_RETURN(store::SandboxPage page, store.list_sandboxes(f));
    for (const auto& rec : page.items) {
      const fs::path run_dir = fs::path(m->opt_.home) / "run" / rec.id;
      // Its saved config (sandbox.json), so that it can be checkpointed again.
      auto saved_config = load_sandbox_config(run_dir.string());
      auto sb = runtime::Sandbox::adopt(state_dir, rec.id,
                                        saved_config.ok() ? &saved_config.value() : nullptr);
      const templates::Template* tmpl = cat->get(rec.template_id);
      std::ifstream tin(fs::path(m->opt_.home) / "run" / rec.id / "token");
      std::string token((std::istreambuf_iterator<char>(tin)), std::istreambuf_iterator<char>());
      bool token_ok = rec.access_token_digest.empty()
                          ? token.empty()
                          : store::digest_matches(rec.access_token_digest, token);
      // Paused to disk, or a pause or resume that a crash cut short: which state holds
      // (persistence.cc). kNotFound: neither a live sandbox nor a complete checkpoint.
      auto settled = m->settle_checkpoint(rec, sb);
      if (!settled.ok() || tmpl == nullptr || !token_ok) {
        if (sb.ok()) (void)sb->destroy();
        (void)store.update_state(rec.id, store::SandboxState::kKilled);
        fs::remove_all(m->opt_.home + "/run/" + rec.id, ec);
        fs::remove_all(m->checkpoint_dir(rec.id), ec);
        if (!settled.ok())
          m->log_.warn("sandbox " + rec.id + " lost: " + settled.error().message());
        m->emit(kEventKilled, rec,
                {{"reason", kEndLost},
                 {"detail", !settled.ok()     ? settled.error().message()
                            : tmpl == nullptr ? std::string("its template is gone")
                                              : std::string("its token file does not match")}});
        ++lost;
        continue;
      }
      std::shared_ptr<runtime::Sandbox> rt;
      if (sb.ok()) rt = std::make_shared<runtime::Sandbox>(std::move(*sb));
      auto live = std::make_shared<LiveSandbox>(*settled, std::move(rt));
      live->set_access_token(std::move(token));
      live->tmpl = std::make_shared<const templates::Template>(*tmpl);
      live->image_digest = read_image_file(fs::path(m->opt_.home) / "run" / rec.id);
      live->paused = settled->state == store::SandboxState::kPaused;
      {
        std::ifstream tt(fs::path(m->opt_.home) / "run" / rec.id / "traffic_token");
        std::getline(tt, live->traffic_token);
      }
      live->network.enabled = false;
      if (!rec.network.empty()) {
        boost::system::error_code jec;
        auto v = boost::json::parse(rec.network, jec);
        auto spec = jec ? Result<SandboxNetworkSpec>(internal_error("corrupt network record"))
                        : SandboxNetworkSpec::from_json(v);
        if (spec) live->network = *spec;
      }
      live->mask_host = live->network.mask_request_host;
      if (live->network.enabled && live->runtime()) {
        // Its rules again (the table is rebuilt as sandboxes are adopted); a sandbox whose rules
        // cannot be enforced does not keep running. (One paused to disk gets them at resume.)
        auto rts = live->runtime();
        Status s = !rts->veth() || !m->opt_.network || !m->opt_.network->enabled()
                       ? Error(ErrorCode::kFailedPrecondition, "no network link or networking off")
                       : m->opt_.network->attach(rec.id, *rts->veth(), live->network);
        if (!s) {
          m->log_.warn("sandbox " + rec.id + " not adopted: its network: " + s.error().message());
          (void)rts->destroy();
          (void)store.update_state(rec.id, store::SandboxState::kKilled);
          fs::remove_all(m->opt_.home + "/run/" + rec.id, ec);
          m->emit(kEventKilled, rec,
                  {{"reason", kEndLost}, {"detail", "its network rules cannot be enforced"}});
          ++lost;
          continue;
        }
      }
      live->note("info", std::string("adopted by a restarted abxd (") +
                             (!live->record.checkpoint.empty() ? "paused to disk"
                              : live->paused                   ? "paused"
                                                               : "running") +
                             ")");
      m->live_[rec.id] = std::move(live);
      ++adopted;
    }
    if (page.next_token.empty()) break;
    f.page_token = page.next_token;
  }
  auto cleaned = runtime::cleanup_stale(state_dir);
  m->remove_cut_checkpoints();
  if (int n = prune_bundles(m->opt_.home, m->bundles_in_use()); n > 0)
    m->log_.info("removed " + std::to_string(n) + " bundle version(s) no sandbox or snapshot uses");
  if (adopted + lost > 0 || (cleaned.ok() && *cleaned > 0)) {
    m->log_.info("restart: adopted " + std::to_string(adopted) + " live sandbox(es), " +
                 std::to_string(lost) + " gone, " + std::to_string(cleaned.ok() ? *cleaned : 0) +
                 " stale removed");
  }
  m->reaper_ = std::thread([raw = m.get()] { raw->reaper_loop(); });
  return m;
}

SandboxManager::~SandboxManager() {
  {
    std::lock_guard lock(reaper_mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

namespace {

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
    cfg.link_ready = [network = opt.network, id, net](const runtime::VethInfo& link) {
      return network->attach(id, link, net);
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
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // A refused connect into the sandbox costs microseconds: poll often (doubling up to 1 ms), so
  // the create answers within a millisecond of envd listening rather than up to a backoff later.
  for (auto delay = std::chrono::microseconds(100); std::chrono::steady_clock::now() < deadline;
       delay = std::min(delay * 2, std::chrono::microseconds(1'000))) {
    if (sb.open_tcp(kEnvdPort, std::chrono::milliseconds(500)).ok()) return {};
    if (sb.init_exited()) {
      return unavailable("abx-envd exited during start (see the abxd log for its output)");
    }
    std::this_thread::sleep_for(delay);
  }
  return unavailable("envd did not start");
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
  // As wait_for_envd: up to 2 ms between connects (a Python server takes ~80 ms to import its
  // module; a 50 ms backoff cap answered up to 40 ms after it listened).
  for (auto delay = std::chrono::microseconds(250); std::chrono::steady_clock::now() < deadline;
       delay = std::min(delay * 2, std::chrono::microseconds(2'000))) {
    if (sb.open_tcp(port, std::chrono::milliseconds(500)).ok()) return {};
    if (sb.init_exited()) {
      return unavailable("abx-envd exited while its " + source + " was starting");
    }
    if (std::chrono::steady_clock::now() >= next_log_check) {
      next_log_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      if (auto lines = read_envd_log(sb, token, 0, 10'000); lines.ok()) {
        for (const auto& l : *lines) {
          if (l.source == source && l.stream == "event" &&
              l.line.find(" exited ") != std::string::npos) {
            return failed("did not start (" + l.line + ")", *lines);
          }
        }
      }
    }
    std::this_thread::sleep_for(delay);
  }
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

// envd's configuration, typed, written to <run_dir>/envd.json and opened for the sandbox's init
// to read on a descriptor (no path into the sandbox's view of the host needed).
Result<UniqueFd> write_envd_config(const fs::path& run_dir, const envd::EnvdConfig& config) {
  const std::string path = (run_dir / kEnvdConfigFile).string();
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  ABX_TRY(write_run_file(path, to_json_string(envd::to_json(config)) + "\n"));
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return os::errno_error("open " + path, errno);
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

// What the store keeps of a sandbox's network (SandboxNetworkSpec::from_json reads it).
boost::json::object network_record(const SandboxNetworkSpec& net) {
  return {{"enabled", net.enabled},
          {"allowInternetAccess", net.allow_internet_access},
          {"network", net.to_json(/*reveal=*/true)}};
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
  rec.timeout_s = timeout;
  rec.network = boost::json::serialize(network_record(net));
  return rec;
}

}  // namespace

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

// Order: check the request, make the token (file), spawn, wait for envd, then record; a failure
// after the token file exists undoes everything made so far (one guard: the sandbox, its link,
// the run directory), so an unacknowledged create leaves nothing behind.
// One function of ~130 lines on purpose: every step after the token file is covered by the one
// undo guard and reads its state (sb, net, run_dir), so they stay in its scope, in order.
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
    if (sb) (void)sb->destroy();
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
  if (tmpl->network == templates::NetworkMode::kHost && !opt_.allow_host_network) {
    return Error(ErrorCode::kPermissionDenied,
                 "template '" + tmpl->id +
                     "' asks for the host's network, which abxd allows only with "
                     "--allow-host-network");
  }
  if (tmpl->network != templates::NetworkMode::kDefault || !network || !network->enabled())
    net.enabled = false;
  if (net.enabled) {
    std::error_code ec;
    fs::create_directories(run_dir, ec);
    std::ofstream(run_dir / "resolv.conf") << network->resolv_conf();
  }

  tl.mark("run_dir");
  const std::map<std::string, std::string> env = sandbox_env(opt_, *tmpl, img, req, id, net);
  ABX_ASSIGN_OR_RETURN(UniqueFd envd_json_fd,
                       write_envd_config(run_dir, envd_config(opt_, *tmpl, img, token_file, env)));
  runtime::SandboxConfig config = envd_sandbox_config(opt_, *tmpl, img, id, token_file, net,
                                                      run_dir.string(), env, envd_json_fd.get());
  ABX_TRY(save_sandbox_config(run_dir.string(), config));
  tl.mark("config");
  auto spawned = runtime::Sandbox::spawn(std::move(config), &tl);
  envd_json_fd.reset();
  if (!spawned.ok()) {
    slog.error("spawn failed: " + spawned.error().message());
    return spawned.error();
  }
  sb.emplace(std::move(*spawned));
  std::string traffic_token;
  if (!net.allow_public_traffic) {
    ABX_ASSIGN_OR_RETURN(traffic_token, token::random_hex(16));
    ABX_TRY(write_run_secret((run_dir / "traffic_token").string(), traffic_token));
  }
  if (Status ready = wait_ready(*sb, *tmpl, token, opt_.server_ready_timeout, tl); !ready)
    return failed(ready.error());
  store::SandboxRecord rec = new_record(opt_, *tmpl, req, id, *sb, token, timeout, net);
  ABX_TRY(store_->insert_sandbox(rec));
  committed = true;
  auto live = std::make_shared<LiveSandbox>(std::move(rec),
                                            std::make_shared<runtime::Sandbox>(std::move(*sb)));
  live->set_access_token(std::move(token));
  live->traffic_token = std::move(traffic_token);
  live->mask_host = net.mask_request_host;
  live->tmpl = std::make_shared<const templates::Template>(*tmpl);
  live->image_digest = img ? img->manifest_digest : std::string();
  live->network = net;
  {
    std::lock_guard lock(mu_);
    live_[live->record.id] = live;
  }
  count_start(live->record.team_id);
  emit(kEventCreated, live->record);
  live->note("info", "created from template '" + tmpl->id + "', deadline in " +
                         std::to_string(timeout) + " s");
  live->sample_metrics();  // the first metrics sample; the reaper takes one every 5 s after it
  tl.mark("record");
  create_timings_.add(tl);
  slog.debug("created in " + tl.summary());
  return live;
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
    return invalid_argument(from + "'s timeout (" + std::to_string(fallback) +
                            " s) is not between 1 and " + std::to_string(opt_.max_timeout_seconds) +
                            " seconds: give a timeout in the request");
  }
  return fallback;
}

std::set<std::string> SandboxManager::images_in_use() const {
  std::set<std::string> out = snapshot_images();
  std::lock_guard lock(mu_);
  for (const auto& [id, sb] : live_) {
    if (!sb->image_digest.empty()) out.insert(sb->image_digest);
  }
  return out;
}

std::shared_ptr<const templates::TemplateCatalog> SandboxManager::catalog() const {
  std::lock_guard lock(catalog_mu_);
  return catalog_;
}

std::size_t SandboxManager::reload_templates() {
  auto fresh = std::make_shared<const templates::TemplateCatalog>(
      templates::TemplateCatalog::load(opt_.home, opt_.builtins));
  for (const auto& e : fresh->errors()) log_.error("template skipped: " + e.message);
  std::size_t n = fresh->list().size();
  {
    std::lock_guard lock(catalog_mu_);
    catalog_ = std::move(fresh);
  }
  log_.info("templates reloaded: " + std::to_string(n));
  return n;
}

Result<image::Image> SandboxManager::resolve_image(const templates::Template& tmpl) {
  auto fail = [&](const Error& e) {
    return Error(e.code(), "template '" + tmpl.id + "': " + e.message());
  };
  if (!tmpl.rootfs.empty()) {
    auto img = image::Store::directory_image(tmpl.rootfs);
    if (!img.ok()) return fail(img.error());
    return img;
  }
  std::lock_guard lock(pull_mu_);
  if (tmpl.image.rfind("abx:", 0) == 0) {
    std::string name = tmpl.image.substr(4);
    auto img = images_.get(name);
    if (img.ok()) return img;
    if (img.error().code() != ErrorCode::kNotFound) return fail(img.error());
    std::string hint = name == "base" || name == "code-interpreter"
                           ? "scripts/build-images.sh --only " + name + " builds it"
                           : "build it with `abx template build -t " + name + " DIR`";
    return Error(ErrorCode::kFailedPrecondition, "template '" + tmpl.id + "': image " + tmpl.image +
                                                     " is not built (" + hint + ")");
  }
  auto ref = image::parse_reference(tmpl.image);
  if (!ref.ok()) return fail(ref.error());
  if (auto cached = images_.get(ref->str()); cached.ok()) return cached;
  Logger plog("images", tmpl.id);
  auto progress = [&](std::string_view line) { plog.info(std::string(line)); };
  plog.info("fetching " + ref->str());
  Result<image::Image> img = internal_error("unreachable");
  if (ref->transport == image::Transport::kRegistry) {
    image::RegistryOptions ro;
    ro.auth_file = opt_.registry_auth_file;
    if (ro.auth_file.empty() && fs::exists(opt_.home + "/auth.json")) {
      ro.auth_file = opt_.home + "/auth.json";
    }
    ro.insecure_registries = opt_.insecure_registries;
    ro.progress = progress;
    img = image::pull(images_, *ref, ro);
  } else {
    img = images_.import(*ref, progress);
    if (img.ok()) ABX_TRY(images_.tag(ref->str(), img->manifest_digest));
  }
  if (!img.ok()) return fail(img.error());
  return img;
}

void LiveSandbox::note(std::string_view level, std::string message) {
  Logger l("sandboxes", record.id);
  if (level == "error")
    l.error(message);
  else if (level == "warn")
    l.warn(message);
  else
    l.info(message);
  std::lock_guard lock(events_mu_);
  events_.push_back({now_ms(), std::string(level), std::move(message)});
  if (events_.size() > 256) events_.pop_front();
}

std::vector<SandboxEvent> LiveSandbox::events_since(std::int64_t start_ms) const {
  std::lock_guard lock(events_mu_);
  std::vector<SandboxEvent> out;
  for (const auto& e : events_) {
    if (e.timestamp_ms >= start_ms) out.push_back(e);
  }
  return out;
}

void LiveSandbox::sample_metrics() {
  auto rt = runtime();
  if (!rt) return;  // paused to disk: nothing runs, nothing to sample
  const runtime::CgroupUsage usage = rt->cgroups().usage();
  const std::int64_t now = now_ms();
  MetricSample m{now, 0, usage.memory_bytes};
  if (const std::string upper = rt->upper_dir(); !upper.empty()) {
    struct statvfs st {};
    if (::statvfs(upper.c_str(), &st) == 0) {
      const std::uint64_t block = st.f_frsize ? st.f_frsize : st.f_bsize;
      m.disk_total_bytes = static_cast<std::uint64_t>(st.f_blocks) * block;
      const std::uint64_t avail = static_cast<std::uint64_t>(st.f_bavail) * block;
      m.disk_used_bytes = m.disk_total_bytes > avail ? m.disk_total_bytes - avail : 0;
    }
  }
  std::lock_guard lock(metrics_mu_);
  const double cpus = record.cpu_count > 0 ? record.cpu_count : 1;
  if (last_sample_ms_ != 0 && now > last_sample_ms_ && usage.cpu_usec >= last_cpu_usec_) {
    const double used_us = static_cast<double>(usage.cpu_usec - last_cpu_usec_);
    const double wall_us = static_cast<double>(now - last_sample_ms_) * 1000.0;
    m.cpu_used_pct = std::min(100.0, 100.0 * used_us / (wall_us * cpus));
  }
  last_cpu_usec_ = usage.cpu_usec;
  last_sample_ms_ = now;
  metrics_.push_back(m);
  if (metrics_.size() > kMetricSamples) metrics_.pop_front();
}

bool LiveSandbox::metrics_due(std::int64_t now) const {
  std::lock_guard lock(metrics_mu_);
  return last_sample_ms_ == 0 ||
         now - last_sample_ms_ >= std::chrono::milliseconds(kMetricInterval).count();
}

std::vector<MetricSample> LiveSandbox::metrics_between(std::int64_t start_ms,
                                                       std::int64_t end_ms) const {
  std::lock_guard lock(metrics_mu_);
  std::vector<MetricSample> out;
  for (const auto& m : metrics_) {
    if (m.timestamp_ms >= start_ms && m.timestamp_ms <= end_ms) out.push_back(m);
  }
  return out;
}

std::shared_ptr<LiveSandbox> SandboxManager::find(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second;
}

void SandboxManager::count_start(const std::string& team_id) {
  std::lock_guard lock(team_mu_);
  ++team_starts_[team_id];
}

void SandboxManager::sample_teams(const std::vector<std::shared_ptr<LiveSandbox>>& all,
                                  std::int64_t now) {
  std::map<std::string, std::int64_t> running;
  for (const auto& sb : all)
    if (!sb->paused) ++running[sb->record.team_id];
  std::lock_guard lock(team_mu_);
  const std::int64_t interval_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(kMetricInterval).count();
  if (last_team_sample_ms_ != 0 && now - last_team_sample_ms_ < interval_ms) return;
  const double seconds =
      last_team_sample_ms_ == 0 ? interval_ms / 1000.0 : (now - last_team_sample_ms_) / 1000.0;
  last_team_sample_ms_ = now;
  // Every team with a series, running sandboxes or starts gets a sample (a team whose last
  // sandbox ended shows 0 from then on).
  for (const auto& [team, n] : running) team_samples_[team];
  for (const auto& [team, n] : team_starts_) team_samples_[team];
  for (auto& [team, series] : team_samples_) {
    auto r = running.find(team);
    auto st = team_starts_.find(team);
    series.push_back({now, r == running.end() ? 0 : r->second,
                      st == team_starts_.end() ? 0.0 : st->second / seconds});
    while (series.size() > kMetricSamples) series.pop_front();
  }
  team_starts_.clear();
}

std::vector<TeamSample> SandboxManager::team_metrics(const std::string& team_id,
                                                     std::int64_t start_ms,
                                                     std::int64_t end_ms) const {
  std::lock_guard lock(team_mu_);
  std::vector<TeamSample> out;
  auto it = team_samples_.find(team_id);
  if (it == team_samples_.end()) return out;
  for (const auto& s : it->second)
    if (s.timestamp_ms >= start_ms && s.timestamp_ms <= end_ms) out.push_back(s);
  return out;
}

std::vector<std::shared_ptr<LiveSandbox>> SandboxManager::all() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<LiveSandbox>> out;
  out.reserve(live_.size());
  for (const auto& [id, sb] : live_) out.push_back(sb);
  return out;
}

Status SandboxManager::destroy(const std::shared_ptr<LiveSandbox>& sb) {
  std::lock_guard lock(sb->mu);
  Status s;
  if (auto rt = sb->runtime()) {
    if (sb->paused) (void)rt->cgroups().freeze(false);  // frozen tasks would not die
    s = rt->destroy();
  }
  sb->paused = false;
  if (sb->network.enabled && opt_.network) opt_.network->detach(sb->record.id);
  std::error_code ec;
  fs::remove_all(fs::path(opt_.home) / "run" / sb->record.id, ec);
  // A sandbox paused to disk: its checkpoint goes with it (and a crashed pause's leftovers).
  fs::remove_all(checkpoint_dir(sb->record.id), ec);
  sb->record.checkpoint.clear();
  (void)store_->update_state(sb->record.id, store::SandboxState::kKilled);
  return s;
}

Result<std::vector<std::string>> SandboxManager::update_network(const std::string& id,
                                                                const boost::json::object& body) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  std::lock_guard lock(sb->mu);
  if (sb->paused)
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox '" + id + "' is paused: resume it before changing its network");
  if (!sb->network.enabled || !opt_.network)
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox '" + id + "' has no network (its template's network is none)");
  ABX_ASSIGN_OR_RETURN(SandboxNetworkSpec next, parse_network_update(body, sb->network));
  ABX_TRY(opt_.network->update(id, next));
  sb->network = next;
  if (Status s = store_->set_network(id, boost::json::serialize(network_record(next))); !s)
    sb->note("warn", "network rules applied but not stored: " + s.error().message());
  sb->note("info", "network rules replaced: allowOut " + std::to_string(next.allow_out.size()) +
                       ", denyOut " + std::to_string(next.deny_out.size()) + " entries, rules " +
                       std::to_string(next.transforms.hosts.size()) + " hosts");
  return next.warnings;
}

Status SandboxManager::kill(const std::string& id, const char* reason) {
  std::shared_ptr<LiveSandbox> sb;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) return not_found("sandbox '" + id + "' not found");
    sb = it->second;
    live_.erase(it);
  }
  sb->note("info", std::string("killed (") + reason + ")");
  Status s = destroy(sb);
  emit(kEventKilled, sb->record, {{"reason", reason}});
  return s;
}

Status SandboxManager::set_timeout(const std::string& id, std::int64_t seconds) {
  return move_deadline(id, seconds, false);
}

Status SandboxManager::extend_timeout(const std::string& id, std::int64_t seconds) {
  return move_deadline(id, seconds, true);
}

Status SandboxManager::move_deadline(const std::string& id, std::int64_t seconds,
                                     bool extend_only) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  if (seconds < 0 || seconds > opt_.max_timeout_seconds) {
    return invalid_argument("timeout must be between 0 and " +
                            std::to_string(opt_.max_timeout_seconds) + " seconds");
  }
  // The sandbox's lock covers read, store write and update, so two concurrent extensions
  // cannot leave the earlier deadline in place.
  std::lock_guard lock(sb->mu);
  std::int64_t end = now_ms() + seconds * 1000;
  if (extend_only && sb->record.end_at_ms >= end) return {};
  // A connect's extension (extend_only) of a running sandbox needs to outlive abxd, not the
  // machine: a running sandbox does not outlive the machine either. Without the fsync the sdk
  // bench's connect took 0.8 ms instead of 1.45 ms (bench/README.md, "A connect's deadline write").
  const auto durability = extend_only && !sb->paused ? store::Store::Durability::kProcessCrash
                                                     : store::Store::Durability::kPowerLoss;
  ABX_TRY(store_->set_deadline(id, end, durability));
  sb->record.end_at_ms = end;
  reaper_cv_.notify_all();
  if (!extend_only) {
    sb->note("info", "timeout set: ends in " + std::to_string(seconds) + " s");
    emit(kEventUpdated, sb->record, {{"set_timeout", rfc3339_ms(end)}});
  }
  return {};
}

Status SandboxManager::pause(const std::string& id, const char* reason) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  std::lock_guard lock(sb->mu);
  if (sb->paused)
    return Error(ErrorCode::kFailedPrecondition, "sandbox '" + id + "' is already paused");
  if (pause_to_disk_ && can_checkpoint(*sb)) {
    ABX_TRY(pause_to_disk(*sb));
  } else {
    auto rt = sb->runtime();
    if (!rt) return internal_error("sandbox '" + id + "' has no processes");
    ABX_TRY(rt->cgroups().freeze(true));
    sb->paused = true;
    sb->record.state = store::SandboxState::kPaused;
    sb->note("info", "paused");
    ABX_TRY(store_->update_state(id, store::SandboxState::kPaused));
  }
  emit(kEventPaused, sb->record, {{"reason", reason}});
  return {};
}

Result<bool> SandboxManager::resume(const std::string& id) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  std::lock_guard lock(sb->mu);
  if (!sb->paused) return false;
  if (!sb->record.checkpoint.empty()) {
    ABX_TRY(resume_from_disk(*sb));
  } else if (auto rt = sb->runtime()) {
    ABX_TRY(rt->cgroups().freeze(false));
  }
  // Paused at (or past) its deadline: it gets the timeout it was created with again, or the
  // reaper would end it at once.
  const std::int64_t now = now_ms();
  if (sb->record.end_at_ms <= now) {
    const std::int64_t end = now + sb->record.timeout_s * 1000;
    ABX_TRY(store_->set_deadline(id, end));
    sb->record.end_at_ms = end;
  }
  sb->paused = false;
  sb->record.state = store::SandboxState::kRunning;
  ABX_TRY(store_->update_state(id, store::SandboxState::kRunning));
  sb->note("info", "resumed");
  emit(kEventResumed, sb->record);
  return true;
}

Result<UniqueFd> SandboxManager::connect(const std::string& id, std::uint16_t port) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  if (sb->paused) {
    if (!sb->record.auto_resume) {
      return Error(ErrorCode::kFailedPrecondition, "sandbox '" + id + "' is paused");
    }
    ABX_TRY(resume(id));  // traffic resumes a paused sandbox created with autoResume
  }
  auto rt = sb->runtime();
  if (!rt) return Error(ErrorCode::kFailedPrecondition, "sandbox '" + id + "' is paused");
  return rt->open_tcp(port, std::chrono::seconds(2));
}

Result<UniqueFd> SandboxManager::tcp_socket(const std::string& id) const {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  auto rt = sb->paused ? nullptr : sb->runtime();
  if (!rt) return Error(ErrorCode::kFailedPrecondition, "sandbox '" + id + "' is paused");
  return rt->tcp_socket();
}

void SandboxManager::kill_all() {
  std::map<std::string, std::shared_ptr<LiveSandbox>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(live_);
  }
  for (auto& [id, sb] : all) {
    (void)destroy(sb);
    emit(kEventKilled, sb->record, {{"reason", kEndShutdown}});
  }
}

std::size_t SandboxManager::detach_all() {
  std::map<std::string, std::shared_ptr<LiveSandbox>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(live_);
  }
  for (auto& [id, sb] : all) {
    std::lock_guard lock(sb->mu);
    if (auto rt = sb->runtime()) rt->detach();
  }
  return all.size();
}

// glibc's per-thread arenas keep what is freed. When every create and kill rendered the whole
// egress ruleset (no longer: network.h changes one sandbox's part), abxd held ~150 MiB of
// anonymous memory at 300 live sandboxes of which malloc_trim gave back ~127 MiB
// (bench/density.sh). Giving free pages back every few seconds keeps abxd's resident size to
// what it uses, whatever allocates transiently (image pulls, builds, large requests).
constexpr std::chrono::seconds kHeapTrimInterval{10};

void SandboxManager::reaper_loop() {
  std::unique_lock lock(reaper_mu_);
  auto next_trim = std::chrono::steady_clock::now() + kHeapTrimInterval;
  while (!stopping_) {
    reaper_cv_.wait_for(lock, std::chrono::milliseconds(250));
    if (stopping_) break;
    lock.unlock();
    if (auto t = std::chrono::steady_clock::now(); t >= next_trim) {
      ::malloc_trim(0);
      next_trim = t + kHeapTrimInterval;
    }
    std::vector<std::string> due;
    std::vector<std::shared_ptr<LiveSandbox>> to_sample, all;
    std::vector<std::pair<std::string, std::shared_ptr<runtime::Sandbox>>> watched;
    const std::int64_t now = now_ms();
    {
      std::lock_guard l(mu_);
      for (auto& [id, sb] : live_) {
        if (sb->metrics_due(now)) to_sample.push_back(sb);
        all.push_back(sb);
        // envd may die on its own (a sandbox paused to disk has no processes to watch)
        if (auto rt = sb->runtime()) watched.emplace_back(id, std::move(rt));
      }
    }
    // All inits in one poll, outside mu_: one poll per sandbox under the lock held creates up
    // (500 syscalls every 250 ms at 500 sandboxes). Each is checked again below.
    std::vector<std::string> dead;
    {
      std::vector<const runtime::Sandbox*> inits;
      for (const auto& w : watched) inits.push_back(w.second.get());
      for (std::size_t i : runtime::exited_inits(inits)) dead.push_back(watched[i].first);
    }
    watched.clear();
    // The deadline under the sandbox's own lock, which its writers hold (move_deadline,
    // resume); never nested in mu_.
    for (const auto& sb : all) {
      std::lock_guard l(sb->mu);
      // A paused sandbox waits for connect, resume or kill (E2B keeps paused sandboxes).
      if (sb->record.end_at_ms <= now && !sb->paused) due.push_back(sb->record.id);
      // The timeout warning: armed while more than its lead is left, sent once on entering it.
      const std::int64_t lead = opt_.timeout_warning.count();
      if (lead <= 0 || sb->paused) continue;
      const std::int64_t left = sb->record.end_at_ms - now;
      if (left > lead) {
        sb->warn_armed_for_ms = sb->record.end_at_ms;
      } else if (left > 0 && sb->warn_armed_for_ms == sb->record.end_at_ms) {
        sb->warn_armed_for_ms = 0;
        emit(kEventTimeoutWarning, sb->record,
             {{"endAt", rfc3339_ms(sb->record.end_at_ms)},
              {"secondsLeft", (left + 999) / 1000},
              {"onTimeout", sb->record.pause_on_timeout ? "pause" : "kill"}});
      }
    }
    for (const auto& sb : to_sample) {
      if (!sb->paused) sb->sample_metrics();  // a frozen sandbox uses nothing new
    }
    sample_teams(all, now);
    for (const auto& id : due) {
      auto sb = find(id);
      if (sb && sb->record.pause_on_timeout) {
        sb->note("info", "timeout reached: pausing (onTimeout: pause)");
        if (Status s = pause(id, kEndTimeout);
            s.ok() || s.error().code() == ErrorCode::kFailedPrecondition) {
          continue;
        }
      }
      if (sb) sb->note("info", "timeout reached: killing");
      (void)kill(id, kEndTimeout);
    }
    for (const auto& id : dead) {
      auto sb = find(id);
      if (!sb) continue;
      const char* reason = kEndDied;
      {
        // Again under the sandbox's lock: a pause to disk ends its tree on purpose (and then
        // drops it), and a resume replaces it; only an init that died on its own counts.
        std::lock_guard l(sb->mu);
        auto rt = sb->runtime();
        if (!rt || !rt->init_exited()) continue;
        // memory.oom.group: the OOM killer takes the whole tree, init included. Read before the
        // kill below removes the cgroup.
        if (rt->cgroups().oom_kills() > 0) reason = kEndOom;
      }
      sb->note("warn", reason == kEndOom
                           ? "out of memory (the OOM killer ended it): removing the sandbox"
                           : "abx-envd exited: removing the sandbox");
      (void)kill(id, reason);
    }
    lock.lock();
  }
}

}  // namespace abx::platform
