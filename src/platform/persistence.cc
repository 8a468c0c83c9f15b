// Pause to disk, resume from it, the filesystem-only pause, fork and snapshots: the sandbox
// manager around runtime::checkpoint(), runtime::restore() and runtime::keep_layer()
// (docs/persistence.md says what users see).
//
// Nothing is lost when abxd is killed at any point: the store's record is the commit point, and
// settle_checkpoint() (at start) finishes or undoes what was under way.
//   pause:  checkpoint (the tree stays frozen and without its link; checkpoint.json last) ->
//           store: paused + checkpoint  [commit]  -> destroy the frozen tree.
//           Before the commit a restart finds the record running and its tree frozen: it is
//           thawed and its link re-made (runtime::recover), the partial checkpoint removed.
//           After it, the record says paused to disk; a frozen tree still there is destroyed.
//   resume: restore (a new tree, running, on the checkpoint's layer) -> store: running
//           [commit] -> remove the checkpoint. Before the commit a restart finds the record
//           paused to disk and a running tree: the resume happened, and it is completed.
//   pause without memory (filesystem-only): the tree is frozen, its layer synced and hard-linked
//           into <home>/checkpoints/<id>/rw.img -> store: paused + that directory + filesystem_only
//           [commit] -> destroy the frozen tree. A restart before the commit thaws it, as above;
//           after it, the frozen tree still there is destroyed.
//   its resume: new processes on the kept layer (boot_on_layer: create's spawn, by hard link)
//           -> store: running [commit] -> remove the directory. Before the commit a restart
//           finds the record paused and a running tree: the resume happened, and it is completed.
//   fork / snapshot: the checkpoint goes to a private directory (a snapshot's is renamed into
//           place when complete); children are recorded one by one once they run. A restart
//           removes fork directories; unrecorded children are removed by cleanup_stale().
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cassert>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/scope_exit.h"
#include "abx/base/try.h"
#include "abx/http/client.h"
#include "abx/runtime/process.h"
#include "abx/token/token.h"
#include "bundle.h"
#include "sandbox_config.h"
#include "sandboxes.h"
#include "sandboxes_internal.h"
#include "volumes.h"

namespace abx::platform {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kSnapshotFile = "snapshot.json";
constexpr const char* kSnapshotImages = "checkpoint";
constexpr std::string_view kSnapshotPrefix = "snapshot-";

std::int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string mib(std::uint64_t bytes) {
  std::ostringstream o;
  o.precision(1);
  o << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return o.str();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// envd re-reads its token file on SIGHUP (a restored child still holds its parent's token):
// ready once an authenticated request with the new token answers 200 (5 s).
Status wait_for_token(const runtime::Sandbox& sb, const std::string& token) {
  namespace bhttp = boost::beast::http;
  std::string last = "no answer";
  const bool took =
      os::poll_until(Clock::now() + std::chrono::seconds(5),
                     os::Backoff{std::chrono::milliseconds(1), std::chrono::milliseconds(50)}, [&] {
                       auto fd = sb.open_tcp(kEnvdPort, std::chrono::milliseconds(500));
                       if (!fd.ok()) return false;
                       auto conn = http::Connection::adopt(std::move(*fd), "localhost");
                       if (!conn.ok()) return false;
                       auto req = http::make_request(bhttp::verb::get, "/envs");
                       req.erase(bhttp::field::content_type);
                       req.set("X-Access-Token", token);
                       auto res = (*conn)->send(std::move(req), std::chrono::seconds(2));
                       if (res.ok() && res->result_int() == 200) return true;
                       last = res.ok() ? "envd answered " + std::to_string(res->result_int())
                                       : res.error().message();
                       return false;
                     });
  if (took) return {};
  return unavailable("the restored sandbox's envd did not take its new token: " + last);
}

}  // namespace

json::object record_json(const store::SandboxRecord& r) {
  json::object meta, env;
  for (const auto& [k, v] : r.metadata) meta[k] = v;
  for (const auto& [k, v] : r.env_vars) env[k] = v;
  return {{"templateID", r.template_id},
          {"cpuCount", r.cpu_count},
          {"memoryMB", r.memory_mb},
          {"diskSizeMB", r.disk_mb},
          {"metadata", std::move(meta)},
          {"envVars", std::move(env)},
          {"timeout", r.timeout_s},
          {"onTimeoutPause", r.pause_on_timeout},
          {"autoResume", r.auto_resume},
          {"network", r.network},
          {"teamID", r.team_id},
          {"onTimeoutKeepMemory", r.pause_keeps_memory},
          {"volumeMounts", volume_mounts_json(r.volume_mounts, true)}};
}

store::SandboxRecord record_from_json(const json::object& o) {
  store::SandboxRecord r;
  r.template_id = std::string(o.at("templateID").as_string());
  r.cpu_count = o.at("cpuCount").to_number<double>();
  r.memory_mb = o.at("memoryMB").to_number<std::int64_t>();
  r.disk_mb = o.at("diskSizeMB").to_number<std::int64_t>();
  for (const auto& [k, v] : o.at("metadata").as_object())
    r.metadata[std::string(k)] = std::string(v.as_string());
  for (const auto& [k, v] : o.at("envVars").as_object())
    r.env_vars[std::string(k)] = std::string(v.as_string());
  r.timeout_s = o.at("timeout").to_number<std::int64_t>();
  r.pause_on_timeout = o.at("onTimeoutPause").as_bool();
  r.auto_resume = o.at("autoResume").as_bool();
  r.network = std::string(o.at("network").as_string());
  // Snapshots from before teams have none: they were the default team's.
  if (const auto* t = o.if_contains("teamID"); t && t->is_string())
    r.team_id = std::string(t->as_string());
  // Snapshots from before the filesystem-only pause always paused with memory.
  if (const auto* m = o.if_contains("onTimeoutKeepMemory"); m && m->is_bool())
    r.pause_keeps_memory = m->as_bool();
  // Snapshots from before volumes mount none.
  if (const auto* v = o.if_contains("volumeMounts"); v && v->is_array()) {
    for (const auto& m : v->as_array()) {
      const auto& mo = m.as_object();
      r.volume_mounts.push_back({std::string(mo.at("volumeID").as_string()),
                                 std::string(mo.at("name").as_string()),
                                 std::string(mo.at("path").as_string())});
    }
  }
  return r;
}

namespace {

// The parent's config with the child's id, its binds of the parent's run files (under
// <home>/run/<parent id>/) moved to the child's `run_dir`.
runtime::SandboxConfig child_config(const runtime::SandboxConfig& parent, const std::string& home,
                                    const std::string& run_dir, const std::string& id) {
  runtime::SandboxConfig config = parent;
  const std::string parent_run = home + "/run/" + parent.id + "/";
  for (auto& b : config.binds) {
    if (b.source.starts_with(parent_run))
      b.source = run_dir + "/" + b.source.substr(parent_run.size());
  }
  config.id = id;
  return config;
}

// A fork's or snapshot's child record: the parent's, with its own id, deadline, init and token;
// a create from a snapshot (`req`) adds its metadata and lifecycle.
store::SandboxRecord child_record(const store::SandboxRecord& parent, const std::string& id,
                                  std::int64_t timeout, pid_t init_pid, const std::string& token,
                                  const std::string& domain, const CreateRequest* req) {
  store::SandboxRecord rec = parent;
  rec.id = id;
  rec.client_id = kClientId;
  rec.created_at_ms = now_ms();
  rec.end_at_ms = rec.created_at_ms + timeout * 1000;
  rec.timeout_s = timeout;
  rec.state = store::SandboxState::kRunning;
  rec.checkpoint.clear();
  rec.filesystem_only = false;
  rec.init_pid = init_pid;
  rec.init_start_time = runtime::process_start_time(init_pid);
  rec.access_token_digest = token.empty() ? std::string() : store::token_digest(token);
  rec.domain = domain;
  if (req) {
    if (!req->metadata.empty()) rec.metadata = req->metadata;
    if (req->pause_on_timeout) {
      rec.pause_on_timeout = true;
      rec.pause_keeps_memory = req->pause_keeps_memory;
    }
    if (req->auto_resume) rec.auto_resume = true;
  }
  return rec;
}

}  // namespace

std::string SandboxManager::checkpoint_dir(const std::string& id) const {
  return opt_.home + "/checkpoints/" + id;
}

Status SandboxManager::resolve_pause_mode() {
  using Mode = ManagerOptions::PauseMode;
  if (opt_.pause_mode == Mode::kMemory) {
    pause_to_disk_ = false;
    return {};
  }
  // CRIU's kernel-feature cache lives on a root-only tmpfs (runtime::kCriuRunDir): made before
  // the first criu run, so that `criu check` below already fills it. Without it CRIU still works
  // and probes the kernel on every dump and restore (40-60 ms each).
  if (Status rundir = runtime::prepare_criu_rundir(); !rundir.ok())
    log_.warn("criu will probe the kernel on every run (no kernel-feature cache): " +
              rundir.error().message());
  Status criu = runtime::criu_available(opt_.criu);
  if (!criu.ok() && opt_.pause_mode == Mode::kDisk)
    return Error(ErrorCode::kFailedPrecondition, "--pause disk: " + criu.error().message() +
                                                     " (--pause auto falls back to memory)");
  pause_to_disk_ = criu.ok();
  if (!criu.ok()) {
    log_.warn("pause keeps sandboxes in memory (cgroup freezer): " + criu.error().message());
    return {};
  }
  // Checkpoints hold sandboxes' memory and credentials: root's only, repaired if found
  // otherwise (runtime::make_private), and sealed with a key that never leaves the home.
  for (const auto& d : {opt_.home + "/checkpoints", opt_.home + "/snapshots"}) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) return internal_error("create " + d + ": " + ec.message());
    ABX_TRY(runtime::make_private(d));
  }
  const std::string key_path = opt_.home + "/checkpoint.key";
  std::error_code key_ec;
  const bool first_key = !fs::exists(key_path, key_ec) && !key_ec;
  auto key = runtime::load_checkpoint_key(key_path);
  if (!key.ok()) {
    if (opt_.pause_mode == Mode::kDisk)
      return Error(key.error().code(), "--pause disk: " + key.error().message());
    pause_to_disk_ = false;
    log_.warn("pause keeps sandboxes in memory (cgroup freezer): " + key.error().message());
    return {};
  }
  checkpoint_key_ = std::move(key).value();
  if (first_key) seal_earlier_checkpoints();
  log_.info("pause writes sandboxes to disk (" + opt_.criu + ")");
  return {};
}

// Checkpoints and snapshots written by an abxd from before checkpoints were sealed have no
// seal, and restore() refuses an unsealed checkpoint: without this they could never be resumed.
// They are sealed once, when the key is made — the upgrade's first start, so they are exactly as
// trusted as that abxd trusted them. Later, a missing seal is a tampered checkpoint (the key
// exists), and nothing here runs again.
void SandboxManager::seal_earlier_checkpoints() {
  int sealed = 0;
  auto seal = [&](const fs::path& dir) {
    std::error_code ec;
    if (fs::exists(dir / runtime::kSealFile, ec) || ec) return;
    if (Status st = runtime::seal_checkpoint(dir.string(), checkpoint_key_); !st) {
      log_.warn("could not seal " + dir.string() +
                " (it will not restore): " + st.error().message());
      return;
    }
    ++sealed;
  };
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(opt_.home + "/checkpoints", ec)) {
    if (e.is_directory() && !e.path().filename().string().starts_with(".")) seal(e.path());
  }
  for (const auto& e : fs::directory_iterator(opt_.home + "/snapshots", ec)) {
    if (!e.is_directory() || e.path().filename().string().starts_with(".")) continue;
    seal(e.path() / kSnapshotImages);  // the images first: the snapshot's seal covers their seal
    seal(e.path());
  }
  if (sealed > 0)
    log_.info("sealed " + std::to_string(sealed) +
              " checkpoint(s) written before checkpoints were sealed (first start with a key)");
}

void SandboxManager::remove_cut_checkpoints() {
  std::error_code ec;
  // A fork's or a snapshot's working directories from an abxd that died mid-way (after the
  // adoption, whose recover() waits for a CRIU dump still writing into one).
  for (const auto& base : {opt_.home + "/checkpoints", opt_.home + "/snapshots"}) {
    for (const auto& e : fs::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      if (name.find(".fork-") != std::string::npos || name.starts_with(".tmp-") ||
          name.starts_with(".trash-"))
        fs::remove_all(e.path(), ec);
    }
  }
}

std::set<std::string> SandboxManager::bundles_in_use() const {
  std::set<std::string> used;
  if (!opt_.binaries.bundle.empty()) used.insert(opt_.binaries.bundle);
  std::error_code ec;
  // Every saved config: running and paused sandboxes' (run/<id>), snapshots' (snapshots/<id>).
  for (const auto& base : {opt_.home + "/run", opt_.home + "/snapshots"}) {
    for (const auto& e : fs::directory_iterator(base, ec)) {
      auto c = load_sandbox_config(e.path().string());
      if (!c.ok()) continue;
      for (const auto& b : c->binds)
        if (b.target == kBundleInside) used.insert(b.source);
    }
  }
  return used;
}

bool SandboxManager::can_checkpoint(const LiveSandbox& sb) const {
  auto rt = sb.runtime();
  return rt && sb.tmpl && sb.tmpl->rootfs != "host" &&
         sb.tmpl->network != templates::NetworkMode::kHost &&
         fs::exists(opt_.home + "/run/" + sb.record.id + "/" + kSandboxConfigFile);
}

Result<runtime::SandboxConfig> SandboxManager::restore_config(const std::string& id,
                                                              const SandboxNetworkSpec& net) const {
  ABX_ASSIGN_OR_RETURN(runtime::SandboxConfig c, load_sandbox_config(opt_.home + "/run/" + id));
  c.id = id;
  c.state_dir = opt_.home + "/sandboxes";
  c.userns = opt_.userns;
  // Its volumes' binds (their sources are <home>/volumes/<id>) need their images mounted.
  const std::string volumes = opt_.home + "/volumes/";
  for (const auto& b : c.binds) {
    if (b.source.starts_with(volumes))
      ABX_TRY(ensure_volume_mounted(opt_.home, b.source.substr(volumes.size())));
  }
  const bool link = c.veth.enabled;
  c.veth = {};
  if (link) {
    if (!net.enabled || !opt_.network || !opt_.network->enabled())
      return Error(ErrorCode::kFailedPrecondition,
                   "sandbox '" + id + "' had a network link and abxd's networking is off now");
    c.veth = opt_.network->veth_config();
    c.link_rules = [network = opt_.network, id, net](const runtime::VethInfo& l) {
      return network->attach_rules(id, l, net);
    };
    c.link_ready = [network = opt_.network, id](const runtime::VethInfo& l) {
      return network->listen(id, l);
    };
  }
  return c;
}

Status SandboxManager::pause_to_disk(LiveSandbox& sb) {
  const std::string& id = sb.record.id;
  auto rt = sb.runtime();
  const std::string dir = checkpoint_dir(id);
  std::error_code ec;
  fs::remove_all(dir, ec);  // a failed or cut-short pause's leftovers
  runtime::CheckpointOptions o;
  o.criu = opt_.criu;
  o.mac_key = checkpoint_key_;
  o.leave_running = true;
  o.keep_frozen = true;
  Timeline tl;
  o.timeline = &tl;
  auto info = runtime::checkpoint(*rt, dir, o);
  if (!info.ok()) {
    // The runtime left the sandbox running as before; CRIU's log is kept beside its run files.
    fs::copy_file(dir + "/dump.log", opt_.home + "/run/" + id + "/pause-failed.log",
                  fs::copy_options::overwrite_existing, ec);
    fs::remove_all(dir, ec);
    sb.note("error", "pause to disk failed, the sandbox keeps running: " + info.error().message());
    return Error(info.error().code(),
                 "pausing sandbox '" + id +
                     "' to disk failed (it keeps running): " + info.error().message());
  }
  if (Status s = store_->set_checkpoint(id, store::SandboxState::kPaused, dir); !s) {
    Status back = runtime::recover(*rt);
    fs::remove_all(dir, ec);
    return Error(s.error().code(),
                 "pausing sandbox '" + id + "': recording it failed (" + s.error().message() +
                     "); " +
                     (back ? "it keeps running" : "resuming it failed: " + back.error().message()));
  }
  tl.mark("record");
  // Committed. The frozen tree goes; its rules went with its link.
  if (sb.network.enabled && opt_.network) opt_.network->detach(id);
  if (Status d = runtime::release_checkpointed(*rt, dir, checkpoint_key_); !d)
    sb.note("warn", "after the pause to disk: " + d.error().message());
  tl.mark("release");
  sb.set_runtime(nullptr);
  ++sb.epoch;
  sb.record.checkpoint = dir;
  sb.paused = true;
  sb.record.state = store::SandboxState::kPaused;
  sb.note("info", "paused to disk: " + mib(info->image_bytes) + " of process images, " +
                      mib(info->layer_bytes) + " writable layer; frozen " +
                      std::to_string(info->frozen.count()) + " ms, dump " +
                      std::to_string(info->dump.count()) + " ms (" + tl.summary() + ")");
  return {};
}

// The filesystem-only pause, with the same commit point as the pause to disk: the layer is kept
// (frozen tree, its rw.img hard-linked into the directory), then recorded, then the tree goes.
Status SandboxManager::pause_filesystem_only(LiveSandbox& sb) {
  const std::string& id = sb.record.id;
  const auto t0 = Clock::now();
  auto rt = sb.runtime();
  if (!rt) return internal_error("sandbox '" + id + "' has no processes");
  if (!sb.tmpl || sb.tmpl->rootfs == "host")
    return invalid_argument("sandbox '" + id +
                            "' cannot pause without its memory (memory: false): its template has "
                            "rootfs: host, whose files live in the sandbox's memory");
  const std::string dir = checkpoint_dir(id), layer = dir + "/" + kKeptLayer;
  std::error_code ec;
  fs::remove_all(dir, ec);  // a failed or cut-short pause's leftovers
  fs::create_directories(dir, ec);
  if (ec) return internal_error("create " + dir + ": " + ec.message());
  ABX_TRY(runtime::make_private(dir));  // the sandbox's files: root's only, as a checkpoint
  if (Status kept = runtime::keep_layer(*rt, layer); !kept) {
    fs::remove_all(dir, ec);
    return Error(kept.error().code(),
                 "pausing sandbox '" + id +
                     "' without its memory failed (it keeps running): " + kept.error().message());
  }
  if (Status s = store_->set_checkpoint(id, store::SandboxState::kPaused, dir, true); !s) {
    Status back = rt->cgroups().freeze(false);
    fs::remove_all(dir, ec);
    return Error(s.error().code(),
                 "pausing sandbox '" + id + "': recording it failed (" + s.error().message() +
                     "); " +
                     (back ? "it keeps running" : "resuming it failed: " + back.error().message()));
  }
  // Committed. Every process ends (its cgroup empties), its memory is freed; its rules went with
  // its link.
  if (sb.network.enabled && opt_.network) opt_.network->detach(id);
  if (Status d = runtime::release_layer(*rt, layer); !d)
    sb.note("warn", "after the pause without memory: " + d.error().message());
  sb.set_runtime(nullptr);
  ++sb.epoch;
  sb.record.checkpoint = dir;
  sb.record.filesystem_only = true;
  sb.paused = true;
  sb.record.state = store::SandboxState::kPaused;
  struct stat st {};
  const std::uint64_t bytes =
      ::stat(layer.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
  sb.note("info", "paused without its memory (filesystem-only) in " + std::to_string(ms_since(t0)) +
                      " ms: processes ended, " + mib(bytes) + " writable layer kept");
  return {};
}

// Its resume: new processes on the kept layer (boot_on_layer, by hard link), recorded, then the
// kept directory goes (the layer lives on as the running sandbox's). From a checkpoint (resume
// {memory: false} of a sandbox paused to disk): its seal verified, a copy of its layer, and the
// checkpoint left as it was — no resume can use it any more, and the sandbox's next pause, its
// kill or abxd's next start removes it.
Status SandboxManager::resume_filesystem_only(LiveSandbox& sb, bool from_checkpoint) {
  const std::string& id = sb.record.id;
  const std::string dir = sb.record.checkpoint;
  const auto t0 = Clock::now();
  auto failed = [&](const Error& e) {
    sb.note("error", "boot on the kept files failed (they are kept for a retry): " + e.message());
    return Error(e.code(), "resuming sandbox '" + id + "' on its files alone failed: " +
                               e.message() + " (its " + (from_checkpoint ? "checkpoint" : "files") +
                               " are kept for a retry)");
  };
  if (from_checkpoint) {
    // Its layer is mounted (copied) only once the seal holds, as restore() reads nothing of a
    // checkpoint before; a seal a failed restore left pending is completed first, as restore()
    // completes it.
    Status sealed =
        runtime::seal_pending(dir) ? runtime::complete_seal(dir, checkpoint_key_) : Status{};
    if (sealed) sealed = runtime::verify_checkpoint(dir, checkpoint_key_);
    if (!sealed) return failed(sealed.error());
  }
  auto rt = boot_on_layer(sb, dir + "/" + kKeptLayer, from_checkpoint);
  if (!rt.ok()) return failed(rt.error());
  if (Status s = store_->set_checkpoint(id, store::SandboxState::kRunning, ""); !s) {
    (void)(*rt)->destroy();
    if (sb.network.enabled && opt_.network) opt_.network->detach(id);
    return failed(s.error());
  }
  (void)store_->set_init(id, (*rt)->pid(), runtime::process_start_time((*rt)->pid()));
  std::error_code ec;
  if (!from_checkpoint) fs::remove_all(dir, ec);
  sb.set_runtime(std::move(*rt));
  ++sb.epoch;
  sb.record.checkpoint.clear();
  sb.record.filesystem_only = false;
  sb.note("info", "booted again on its files in " + std::to_string(ms_since(t0)) + " ms (" +
                      (from_checkpoint ? "memory: false: a copy of its checkpoint's layer, the "
                                         "checkpoint left as it was"
                                       : "paused without its memory") +
                      "; new processes)");
  return {};
}

Status SandboxManager::resume_from_disk(LiveSandbox& sb) {
  const std::string& id = sb.record.id;
  const auto t0 = Clock::now();
  auto failed = [&](const Error& e) {
    sb.note("error",
            "resume from disk failed (the checkpoint is kept for a retry): " + e.message());
    return Error(e.code(), "resuming sandbox '" + id + "' from " + sb.record.checkpoint +
                               " failed (the checkpoint is kept for a retry): " + e.message());
  };
  auto config = restore_config(id, sb.network);
  if (!config.ok()) return failed(config.error());
  runtime::RestoreOptions o;
  o.criu = opt_.criu;
  o.mac_key = checkpoint_key_;
  o.link_layer = true;  // the checkpoint is removed once the resume is recorded
  Timeline tl;
  o.timeline = &tl;
  auto restored = runtime::restore(sb.record.checkpoint, std::move(*config), o);
  if (!restored.ok()) return failed(restored.error());
  auto rt = std::make_shared<runtime::Sandbox>(std::move(*restored));
  if (Status s = store_->set_checkpoint(id, store::SandboxState::kRunning, ""); !s) {
    (void)rt->destroy();
    if (sb.network.enabled && opt_.network) opt_.network->detach(id);
    return failed(s.error());
  }
  (void)store_->set_init(id, rt->pid(), runtime::process_start_time(rt->pid()));
  std::error_code ec;
  fs::remove_all(sb.record.checkpoint, ec);
  sb.set_runtime(std::move(rt));
  ++sb.epoch;
  sb.record.checkpoint.clear();
  tl.mark("record");
  sb.note("info",
          "resumed from disk in " + std::to_string(ms_since(t0)) + " ms (" + tl.summary() + ")");
  return {};
}

Result<store::SandboxRecord> SandboxManager::settle_checkpoint(const store::SandboxRecord& rec,
                                                               Result<runtime::Sandbox>& sb) {
  store::SandboxRecord out = rec;
  const std::string dir = checkpoint_dir(rec.id);
  std::error_code ec;
  if (rec.checkpoint.empty()) {
    if (!sb.ok()) return sb.error();
    // A pause to disk that never committed, or a fork or snapshot cut short: the tree is frozen
    // (a CRIU dump may still be finishing: recover() waits for it) and may lack its link; the
    // sandbox runs on as it was. One paused in memory stays frozen.
    // recover() is a no-op on a sandbox that runs with its link, so every running one gets it
    // (CRIU thaws the cgroup once it has seized the tasks: frozen() alone does not tell).
    const bool cut = fs::exists(dir) || sb->cgroups().frozen();
    if (rec.state == store::SandboxState::kRunning || fs::exists(dir)) {
      ABX_TRY(runtime::recover(*sb));
      fs::remove_all(dir, ec);
    }
    if (cut)
      log_.warn("sandbox " + rec.id +
                ": a checkpoint (pause to disk or without memory, fork or snapshot) cut short by "
                "a restart was undone; it runs on");
    return out;
  }
  if (sb.ok()) {
    if (sb->cgroups().frozen()) {
      // The pause committed and its frozen tree was not destroyed yet.
      if (rec.filesystem_only)
        (void)runtime::release_layer(*sb, rec.checkpoint + "/" + kKeptLayer);
      else
        (void)runtime::release_checkpointed(*sb, rec.checkpoint, checkpoint_key_);
      sb = not_found("destroyed: paused to disk");
    } else {
      // A resume restored it (or booted it again on its kept layer) and was cut short before
      // recording it: it holds, once it runs (a restore leaves its tasks stopped until its init
      // is recorded, and the cut may have come between the two) and has its link (the cut may
      // have come before restore() made it).
      if (!rec.filesystem_only) ABX_TRY(runtime::continue_restored(*sb));
      ABX_TRY(runtime::recover(*sb));
      ABX_TRY(store_->set_checkpoint(rec.id, store::SandboxState::kRunning, ""));
      fs::remove_all(rec.checkpoint, ec);
      out.state = store::SandboxState::kRunning;
      out.checkpoint.clear();
      out.filesystem_only = false;
      log_.warn("sandbox " + rec.id +
                ": a resume (from disk, or a boot on kept files) cut short by a restart was "
                "completed");
      return out;
    }
  }
  if (rec.filesystem_only) {
    if (!fs::exists(rec.checkpoint + "/" + kKeptLayer))
      return not_found("its kept writable layer " + rec.checkpoint + "/" + kKeptLayer + " is gone");
  } else if (!fs::exists(rec.checkpoint + "/checkpoint.json")) {
    return not_found("its checkpoint " + rec.checkpoint + " is incomplete or gone");
  }
  out.state = store::SandboxState::kPaused;
  return out;
}

Result<std::shared_ptr<LiveSandbox>> SandboxManager::restore_child(const std::string& images,
                                                                   const ChildOf& parent,
                                                                   std::int64_t timeout,
                                                                   const CreateRequest* req) {
  Timeline tl;
  {
    std::lock_guard lock(mu_);
    if (live_.size() >= opt_.max_sandboxes)
      return Error(ErrorCode::kResourceExhausted,
                   "sandbox limit reached (" + std::to_string(opt_.max_sandboxes) + ")");
  }
  if (!parent.tmpl)
    return Error(ErrorCode::kFailedPrecondition,
                 "template '" + parent.record.template_id + "' is gone");
  ABX_ASSIGN_OR_RETURN(const store::SandboxId sid, store::SandboxId::generate());
  const std::string& id = sid.str();
  const fs::path run_dir = fs::path(opt_.home) / "run" / id;
  bool committed = false;
  std::shared_ptr<runtime::Sandbox> rt;
  ScopeExit undo{[&] {
    if (committed) return;
    if (rt) (void)rt->destroy();
    if (parent.network.enabled && opt_.network) opt_.network->detach(id);
    std::error_code ec;
    fs::remove_all(run_dir, ec);
  }};
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return internal_error("create " + run_dir.string() + ": " + ec.message());
  std::string token, traffic_token;
  if (parent.secure) {
    ABX_ASSIGN_OR_RETURN(token, token::random_hex(24));
    ABX_TRY(write_run_secret((run_dir / "token").string(), token));
  }
  if (!parent.network.allow_public_traffic) {
    ABX_ASSIGN_OR_RETURN(traffic_token, token::random_hex(16));
    ABX_TRY(write_run_secret((run_dir / "traffic_token").string(), traffic_token));
  }
  if (!parent.image_digest.empty())
    ABX_TRY(write_run_file((run_dir / "image").string(), parent.image_digest + "\n"));
  if (parent.network.enabled && opt_.network)
    ABX_TRY(write_run_file((run_dir / "resolv.conf").string(), opt_.network->resolv_conf()));
  runtime::SandboxConfig config = child_config(parent.config, opt_.home, run_dir.string(), id);
  ABX_TRY(save_sandbox_config(run_dir.string(), config));
  ABX_ASSIGN_OR_RETURN(config, restore_config(id, parent.network));
  runtime::RestoreOptions o;
  o.criu = opt_.criu;
  o.mac_key = checkpoint_key_;
  o.verified = parent.verified;
  Timeline restore_tl;
  o.timeline = &restore_tl;
  tl.mark("run_files");
  auto restored = runtime::restore(images, std::move(config), o);
  if (!restored.ok()) return restored.error();
  tl.append(restore_tl, "restore.");
  tl.skip();
  rt = std::make_shared<runtime::Sandbox>(std::move(*restored));
  if (!token.empty()) {
    ABX_TRY(rt->signal(SIGHUP));  // envd re-reads its token file
    ABX_TRY(wait_for_token(*rt, token));
  }
  tl.mark("token");
  store::SandboxRecord rec =
      child_record(parent.record, id, timeout, rt->pid(), token, opt_.domain, req);
  ABX_TRY(store_->insert_sandbox(rec));
  auto live = std::make_shared<LiveSandbox>(std::move(rec), rt);
  live->set_access_token(std::move(token));
  live->traffic_token = std::move(traffic_token);
  live->mask_host = parent.network.mask_request_host;
  live->tmpl = parent.tmpl;
  live->image_digest = parent.image_digest;
  live->network = parent.network;
  {
    std::lock_guard lock(mu_);
    live_[id] = live;
  }
  committed = true;
  count_start(live->record.team_id);
  emit(kEventCreated, live->record,
       req ? boost::json::object{{"fromSnapshot", true}, {"sourceSandboxId", parent.record.id}}
           : boost::json::object{{"forkedFrom", parent.record.id}});
  live->sample_metrics();
  tl.mark("record");
  live->note("info",
             std::string(req ? "created from a snapshot" : "forked") + " in " + tl.summary());
  return live;
}

Result<runtime::CheckpointInfo> SandboxManager::checkpoint_running(
    LiveSandbox& sb, const std::string& dir, const std::string& what,
    const std::function<Status()>& under_lock, bool seal) {
  const std::string& id = sb.record.id;
  std::lock_guard lock(sb.mu);
  if (sb.paused)
    return Error(ErrorCode::kFailedPrecondition,
                 what + " of sandbox '" + id + "': it is paused (resume it first)");
  if (!can_checkpoint(sb))
    return Error(ErrorCode::kFailedPrecondition,
                 what + " of sandbox '" + id + "': its template's rootfs or network is the host's");
  ABX_TRY(under_lock());
  runtime::CheckpointOptions o;
  o.criu = opt_.criu;
  o.mac_key = checkpoint_key_;
  o.leave_running = true;
  o.seal = seal;
  Timeline tl;
  o.timeline = &tl;
  auto rt = sb.runtime();
  auto info = runtime::checkpoint(*rt, dir, o);
  ++sb.epoch;  // the sandbox ends of pooled connections went through the dump
  if (!info.ok())
    return Error(info.error().code(),
                 what + " of sandbox '" + id + "' failed: " + info.error().message());
  sb.note("info", what + ": checkpoint taken, frozen " + std::to_string(info->frozen.count()) +
                      " ms, dump " + std::to_string(info->dump.count()) + " ms (" + tl.summary() +
                      ")");
  return info;
}

Result<std::vector<Result<std::shared_ptr<LiveSandbox>>>> SandboxManager::fork(
    const std::string& id, int count, std::optional<std::int64_t> timeout_seconds) {
  // Checked at the edge (api::fork_sandbox), the one caller.
  assert(count >= 1 && count <= kMaxForkCount);
  assert(!timeout_seconds ||
         (*timeout_seconds >= 1 && *timeout_seconds <= opt_.max_timeout_seconds));
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  if (!pause_to_disk_)
    return Error(ErrorCode::kFailedPrecondition,
                 "fork needs CRIU, which this abxd cannot use (see its log at start)");
  ChildOf parent;
  ABX_ASSIGN_OR_RETURN(const std::string tag, token::random_hex(6));
  const std::string dir = checkpoint_dir(id) + ".fork-" + tag;
  const auto t0 = Clock::now();
  auto taken = checkpoint_running(
      *sb, dir, "fork",
      [&]() -> Status {
        ABX_ASSIGN_OR_RETURN(parent.config, load_sandbox_config(opt_.home + "/run/" + id));
        parent.record = sb->record;
        parent.tmpl = sb->tmpl;
        parent.image_digest = sb->image_digest;
        parent.network = sb->network;
        parent.secure = !sb->access_token.empty();
        return {};
      },
      /*seal=*/false);
  // The checkpoint is this call's alone (removed below, and by abxd's start if it dies first):
  // it is not sealed, and its children are restored without a seal check.
  parent.verified = true;
  if (!taken.ok()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    return taken.error();
  }
  const std::int64_t checkpoint_ms = ms_since(t0);
  const std::int64_t timeout = timeout_seconds.value_or(parent.record.timeout_s);
  // Two restores at a time: CRIU's restore is mostly one busy core each.
  std::vector<Result<std::shared_ptr<LiveSandbox>>> out(count, internal_error("not started"));
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i; (i = next.fetch_add(1)) < count;)
      out[i] = restore_child(dir, parent, timeout, nullptr);
  };
  {
    std::vector<std::thread> workers;
    for (int w = 0; w < std::min(count, 2); ++w) workers.emplace_back(worker);
    for (auto& w : workers) w.join();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  int ok = 0;
  for (const auto& r : out) ok += r.ok() ? 1 : 0;
  sb->note(ok == count ? "info" : "warn", "forked " + std::to_string(ok) + " of " +
                                              std::to_string(count) + " in " +
                                              std::to_string(ms_since(t0)) + " ms (checkpoint " +
                                              std::to_string(checkpoint_ms) + " ms)");
  return out;
}

// --- Snapshots -------------------------------------------------------------------------------

Result<SandboxManager::SnapshotInfo> SandboxManager::create_snapshot(const std::string& id,
                                                                     const std::string& name) {
  if (name.size() > 128 || name.find_first_of("/\\\n\r") != std::string::npos)
    return invalid_argument("name must be at most 128 characters, without slashes or newlines");
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  if (!pause_to_disk_)
    return Error(ErrorCode::kFailedPrecondition,
                 "snapshots need CRIU, which this abxd cannot use (see its log at start)");
  // A snapshot's id is a sandbox id's random part behind its prefix.
  ABX_ASSIGN_OR_RETURN(const store::SandboxId rand, store::SandboxId::generate());
  SnapshotInfo info;
  info.id = std::string(kSnapshotPrefix) + rand.str();
  if (!name.empty()) info.names.push_back(name);
  info.sandbox_id = id;
  info.created_at_ms = now_ms();
  const fs::path base = fs::path(opt_.home) / "snapshots";
  const fs::path tmp = base / (".tmp-" + info.id), final_dir = base / info.id;
  std::error_code ec;
  ScopeExit cleanup{[&] { fs::remove_all(tmp, ec); }};
  fs::create_directories(tmp, ec);
  if (ec) return internal_error("create " + tmp.string() + ": " + ec.message());
  json::object j;
  ABX_TRY(checkpoint_running(*sb, (tmp / kSnapshotImages).string(), "snapshot", [&]() -> Status {
    fs::copy_file(opt_.home + "/run/" + id + "/" + kSandboxConfigFile, tmp / kSandboxConfigFile,
                  ec);
    if (ec) return internal_error("copy its config: " + ec.message());
    info.template_id = sb->record.template_id;
    j = record_json(sb->record);
    j["secure"] = !sb->access_token.empty();
    j["imageDigest"] = sb->image_digest;
    return {};
  }));
  json::array names;
  for (const auto& n : info.names) names.emplace_back(n);
  j["snapshotID"] = info.id;
  j["names"] = std::move(names);
  j["sandboxID"] = id;
  j["createdAt"] = info.created_at_ms;
  // `image`, as in a sandbox's run directory: what `abxd image gc` keeps.
  if (const std::string d(j.at("imageDigest").as_string()); !d.empty())
    ABX_TRY(write_run_file((tmp / "image").string(), d + "\n"));
  ABX_TRY(write_run_file((tmp / kSnapshotFile).string(), to_json_string(j) + "\n"));
  // Its metadata too (the runtime config names the binds' sources): root's only and sealed.
  ABX_TRY(runtime::make_private(tmp.string()));
  ABX_TRY(runtime::seal_checkpoint(tmp.string(), checkpoint_key_));
  fs::rename(tmp, final_dir, ec);  // the commit: a snapshot directory is complete or absent
  if (ec) return internal_error("rename " + tmp.string() + ": " + ec.message());
  emit(kEventSnapshotted, sb->record, {{"snapshotID", info.id}});
  return info;
}

namespace {

Result<json::object> read_snapshot(const fs::path& dir) {
  auto v = parse_json_strict(read_text(dir / kSnapshotFile));
  if (!v.ok() || !v->is_object())
    return Error(ErrorCode::kFailedPrecondition, "snapshot " + dir.string() + " is corrupt");
  return v->as_object();
}

}  // namespace

std::vector<SandboxManager::SnapshotInfo> SandboxManager::list_snapshots(
    const std::string& sandbox_id, const std::string& name) const {
  std::vector<SnapshotInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(opt_.home + "/snapshots", ec)) {
    const std::string dir_name = e.path().filename().string();
    if (!dir_name.starts_with(kSnapshotPrefix)) continue;
    auto j = read_snapshot(e.path());
    if (!j.ok()) continue;
    SnapshotInfo s;
    try {
      s.id = std::string(j->at("snapshotID").as_string());
      for (const auto& n : j->at("names").as_array()) s.names.emplace_back(n.as_string());
      s.sandbox_id = std::string(j->at("sandboxID").as_string());
      s.template_id = std::string(j->at("templateID").as_string());
      s.created_at_ms = j->at("createdAt").to_number<std::int64_t>();
      s.team_id = record_from_json(*j).team_id;
    } catch (const std::exception&) {
      continue;
    }
    if (!sandbox_id.empty() && s.sandbox_id != sandbox_id) continue;
    if (!name.empty() && std::find(s.names.begin(), s.names.end(), name) == s.names.end()) continue;
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const SnapshotInfo& a, const SnapshotInfo& b) {
    return a.created_at_ms != b.created_at_ms ? a.created_at_ms > b.created_at_ms : a.id < b.id;
  });
  return out;
}

Status SandboxManager::delete_snapshot(const std::string& snapshot_id) {
  if (!snapshot_id.starts_with(kSnapshotPrefix) ||
      snapshot_id.find_first_of("/.") != std::string::npos)
    return not_found("snapshot '" + snapshot_id + "' not found");
  const fs::path base = fs::path(opt_.home) / "snapshots";
  const fs::path dir = base / snapshot_id, trash = base / (".trash-" + snapshot_id);
  std::error_code ec;
  fs::rename(dir, trash, ec);  // gone at once for new creates; removed below
  if (ec) return not_found("snapshot '" + snapshot_id + "' not found");
  fs::remove_all(trash, ec);
  return {};
}

Result<std::shared_ptr<LiveSandbox>> SandboxManager::create_from_snapshot(
    const std::string& snapshot_id, const CreateRequest& req) {
  const fs::path dir = fs::path(opt_.home) / "snapshots" / snapshot_id;
  if (std::error_code ec; !fs::exists(dir / kSnapshotFile, ec))
    return Error(ErrorCode::kFailedPrecondition, "snapshot " + dir.string() + " is corrupt");
  // Nothing of it is read before its seal holds (its images are checked again by restore()).
  ABX_TRY(runtime::verify_checkpoint(dir.string(), checkpoint_key_));
  ABX_ASSIGN_OR_RETURN(json::object j, read_snapshot(dir));
  ChildOf parent;
  try {
    parent.record = record_from_json(j);
    parent.secure = j.at("secure").as_bool();
    parent.image_digest = std::string(j.at("imageDigest").as_string());
  } catch (const std::exception& e) {
    return Error(ErrorCode::kFailedPrecondition,
                 "snapshot '" + snapshot_id + "' is corrupt (" + e.what() + ")");
  }
  // Another team's snapshot answers as an unknown template (SandboxManager::create).
  if (parent.record.team_id != req.team_id)
    return not_found("template '" + snapshot_id + "' not found");
  // Its volumes are the snapshot's (shared with its sandbox): other mounts are refused, not
  // ignored.
  if (!req.volume_mounts.empty())
    return invalid_argument("volumeMounts: a sandbox created from snapshot '" + snapshot_id +
                            "' mounts the snapshot's volumes and no others");
  ABX_ASSIGN_OR_RETURN(parent.config, load_sandbox_config(dir.string()));
  if (const templates::Template* t = catalog()->get(parent.record.template_id))
    parent.tmpl = std::make_shared<const templates::Template>(*t);
  parent.network.enabled = false;
  if (!parent.record.network.empty()) {
    boost::system::error_code jec;
    auto v = json::parse(parent.record.network, jec);
    if (!jec) {
      if (auto spec = SandboxNetworkSpec::from_json(v); spec.ok()) parent.network = *spec;
    }
  }
  ABX_ASSIGN_OR_RETURN(
      const std::int64_t timeout,
      create_timeout(req, parent.record.timeout_s, "snapshot '" + snapshot_id + "'"));
  // The snapshot's seal, verified above, covers its images and their own seal: restore() need
  // not hash them again.
  parent.verified = true;
  auto live = restore_child((dir / kSnapshotImages).string(), parent, timeout, &req);
  if (live.ok())
    (*live)->note("info", "created from snapshot " + snapshot_id + " (of sandbox " +
                              std::string(j.at("sandboxID").as_string()) + ")");
  return live;
}

std::set<std::string> SandboxManager::snapshot_images() const {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(opt_.home + "/snapshots", ec)) {
    if (auto j = read_snapshot(e.path()); j.ok()) {
      if (auto* d = j->if_contains("imageDigest"); d && d->is_string() && !d->as_string().empty())
        out.insert(std::string(d->as_string()));
    }
  }
  return out;
}

}  // namespace abx::platform
