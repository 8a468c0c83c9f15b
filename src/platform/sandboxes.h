// The sandbox manager: abxd's live sandboxes, their records and their lifecycle.
//
// create() resolves the template's image (image::Store; pulled or imported once), spawns a
// runtime::Sandbox on it whose init is abx-envd (bind-mounted read-only from the host at
// /opt/abx/bin, with abx-server and the demo module beside it), waits until envd
// answers on 49983 inside the sandbox's netns, and only then records the sandbox in the store
// and returns: an acknowledged create is durable and usable. Any failure on the way tears down
// what was made.
//
// The access token exists in three places only: abxd's memory (to check proxied requests and
// mint scoped tokens), the sandbox's token file (`<home>/run/<id>/token`, bind-mounted at
// /run/abx/token for envd and the command server), and as a SHA-256 digest in SQLite.
//
// Restart: sandboxes outlive a killed abxd. On start, every running or paused record is adopted
// (runtime::Sandbox::adopt: pidfd by pid + start time, netns, cgroups; token re-read from its
// file and checked against the stored digest); records whose sandbox is gone are marked killed,
// and runtime::cleanup_stale() removes sandboxes nobody records — so no sandbox runs without a
// record and an owner — and remove_orphan_dirs() the run and checkpoint directories of sandboxes
// no record keeps (a kill -9 with teardowns still queued: teardown.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/base/log.h"
#include "abx/base/time.h"
#include "abx/base/timeline.h"
#include "abx/image/store.h"
#include "abx/runtime/checkpoint.h"
#include "abx/runtime/layer_pool.h"
#include "abx/runtime/sandbox.h"
#include "abx/store/store.h"
#include "abx/templates/template.h"
#include "abx/token/token.h"
#include "events.h"
#include "network.h"
#include "sandbox_pool.h"
#include "teardown.h"

namespace abx::platform {

// Where the in-sandbox binaries come from on the host, and where they appear inside.
struct SandboxBinaries {
  std::string envd;         // host path of abx-envd
  std::string server;       // host path of abx-server
  std::string demo_module;  // host path of libabx_demo_commands.so
  // Host directory of the /opt/abx bundle (bin/ and lib/: the binaries with their own glibc, so
  // they run in any image; the abx_bundle target and `cmake --install` make it). When it has
  // bin/abx-envd it is bind-mounted read-only at /opt/abx and the three paths above are unused.
  std::string bundle;
};

inline constexpr std::uint16_t kEnvdPort = 49983;
inline constexpr const char* kEnvdVersion = "0.6.4";  // the envd API level abx-envd implements
inline constexpr const char* kClientId = "6532622b";
// The image label where a template build keeps E2B's readyCmd (template_jobs.h): a create waits
// until it exits 0 in the new sandbox.
inline constexpr std::string_view kReadyCmdLabel = "abx.ready-cmd";

struct CreateRequest {
  std::string template_id = "base";
  // The team the sandbox belongs to (the creating key's). A template built by another team, or
  // another team's snapshot, is refused as an unknown one (kNotFound).
  std::string team_id = std::string(store::kDefaultTeam);
  // Checked where the request came in (parse_create, the MCP tool): 1..max_timeout_seconds.
  // Absent: the template's (or snapshot's) own, which create() checks against that maximum.
  std::optional<std::int64_t> timeout_seconds;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env_vars;
  bool secure = true;
  // E2B's lifecycle: pause instead of kill at the deadline (onTimeout "pause", autoPause), and
  // let proxied traffic resume a paused sandbox (autoResume). Both off by default, as in E2B.
  bool pause_on_timeout = false;
  bool auto_resume = false;
  // E2B's autoPauseMemory: false makes the deadline's pause a filesystem-only one (never with
  // auto_resume: parse_create refuses the pair, as E2B's API does).
  bool pause_keeps_memory = true;
  // allowInternetAccess and network (parse_network_request, given
  // SandboxManager::default_internet()); absent: SandboxManager::default_network().
  std::optional<SandboxNetworkSpec> network;
  // volumeMounts (volumes.h): checked by parse_create, their volume ids resolved by the API
  // (resolve_volume_mounts) before create() mounts them.
  std::vector<store::VolumeMount> volume_mounts;
};

// A lifecycle event of one sandbox (created, paused, resumed, timeout set, killed), kept with it
// for GET /sandboxes/{id}/logs and written to abxd's log with the sandbox id.
struct SandboxEvent {
  std::int64_t timestamp_ms = 0;
  std::string level;  // info | warn | error
  std::string message;
};

// One 5-second sample of a sandbox's usage (GET /sandboxes/{id}/metrics).
struct MetricSample {
  std::int64_t timestamp_ms = 0;
  double cpu_used_pct = 0;  // of the sandbox's CPUs, over the interval since the last sample
  std::uint64_t mem_used_bytes = 0;
  // The writable layer's filesystem (statvfs of the upper dir): used = total - available, as
  // E2B's envd counts. Both 0 for a sandbox without one (rootfs host).
  std::uint64_t disk_used_bytes = 0;
  std::uint64_t disk_total_bytes = 0;
};

inline constexpr std::chrono::seconds kMetricInterval{5};

// One sample of a team's usage (E2B's TeamMetric), taken by the reaper every kMetricInterval:
// how many of its sandboxes were running then, and how many it started per second since the
// sample before.
struct TeamSample {
  std::int64_t timestamp_ms = 0;
  std::int64_t concurrent_sandboxes = 0;
  double sandbox_start_rate = 0;
};
inline constexpr std::size_t kMetricSamples = 720;  // one hour of samples

struct LiveSandbox {
  store::SandboxRecord record;
  std::string access_token;  // empty when created with secure=false; set with set_access_token
  // access_token's digest, taken once: the gateway checks every proxied request against it and
  // then hashes only the presented token. Fails closed: it matches no non-empty token until set.
  token::SecretMatcher access_matcher{""};
  void set_access_token(std::string t) {
    access_token = std::move(t);
    access_matcher = token::SecretMatcher(access_token);
  }
  // E2B's trafficAccessToken: set when created with network.allowPublicTraffic false; requests
  // to the sandbox's own ports (not envd, not the command server) must then carry it in
  // `e2b-traffic-access-token`. Kept in <home>/run/<id>/traffic_token (0400) for a restart.
  std::string traffic_token;
  // E2B's maskRequestHost (fixed at create): the Host proxied requests carry; "" keeps theirs.
  std::string mask_host;
  // The template as it was when the sandbox was created (a reload or rebuild does not change
  // a running sandbox); null for an adopted sandbox whose template is gone.
  std::shared_ptr<const templates::Template> tmpl;
  std::string image_digest;  // manifest digest of the image below its root (empty: host mode)
  std::mutex mu;             // guards pause/resume/kill and record.end_at_ms
  std::atomic<bool> paused{false};  // read by the gateway without the lock
  // Bumped after each checkpoint of its processes and each restore (the gateway's
  // GatewayBackend::Admission::epoch: pooled connections from before are dropped).
  std::atomic<std::uint64_t> epoch{0};
  // Moved to another node (move_out): a caller that waited for the lock finds it gone.
  bool moved = false;
  // The deadline a timeout warning is armed for (guarded by mu): set while more than the
  // warning's lead is left, cleared once the warning went out. 0: none armed.
  std::int64_t warn_armed_for_ms = 0;
  // Its network as GET /sandboxes/{id} shows it (guarded by mu); enabled=false: loopback only.
  SandboxNetworkSpec network;

  LiveSandbox(store::SandboxRecord rec, std::shared_ptr<runtime::Sandbox> sb)
      : record(std::move(rec)), sandbox_(std::move(sb)) {}

  // The running sandbox; null while it is paused to disk. Callers keep the pointer for as long
  // as they use it (a pause to disk or a resume replaces it under `mu`).
  std::shared_ptr<runtime::Sandbox> runtime() const {
    std::lock_guard lock(sandbox_mu_);
    return sandbox_;
  }
  void set_runtime(std::shared_ptr<runtime::Sandbox> sb) {
    std::lock_guard lock(sandbox_mu_);
    sandbox_ = std::move(sb);
  }

  // Logs `message` (component "sandboxes", this sandbox's id) and keeps it (the last 256).
  void note(std::string_view level, std::string message);
  std::vector<SandboxEvent> events_since(std::int64_t start_ms) const;

  // Takes a usage sample now (at create, then the reaper whenever metrics_due) into a ring of
  // the last kMetricSamples.
  void sample_metrics();
  // Whether kMetricInterval has passed since this sandbox's last sample (or there is none):
  // each sandbox keeps its own 5-second rhythm from its create.
  bool metrics_due(std::int64_t now_ms) const;
  // The samples with start_ms <= timestamp <= end_ms, oldest first.
  std::vector<MetricSample> metrics_between(std::int64_t start_ms, std::int64_t end_ms) const;

 private:
  mutable std::mutex sandbox_mu_;
  std::shared_ptr<runtime::Sandbox> sandbox_;
  mutable std::mutex events_mu_;
  std::deque<SandboxEvent> events_;
  mutable std::mutex metrics_mu_;
  std::deque<MetricSample> metrics_;
  std::uint64_t last_cpu_usec_ = 0;
  std::int64_t last_sample_ms_ = 0;
};

struct ManagerOptions {
  std::string home;    // $ABX_HOME
  std::string domain;  // reported to clients
  SandboxBinaries binaries;
  templates::BuiltinOptions builtins;  // for reload_templates()
  // Pulls: credentials (docker-style auth.json; empty = $ABX_HOME/auth.json if present) and
  // registries reached over plain HTTP besides loopback ones.
  std::string registry_auth_file;
  std::string image_store;  // default <home>/images
  // The quota of a new volume (abxd --volume-size-mib; volumes.h): its ext4 image's size. 0: new
  // volumes are plain directories without one.
  std::uint64_t volume_bytes = 10ull << 30;
  std::vector<std::string> insecure_registries;
  std::int64_t max_timeout_seconds = 24 * 3600;
  std::size_t max_sandboxes = 1000;
  // Writable layers made ahead of creates (runtime/layer_pool.h; abxd --layer-pool,
  // --layer-pool-idle): this many ready per layer size that creates have taken, up to 4 sizes;
  // a size untaken for layer_pool_idle is emptied. 0: every create makes its own layer.
  std::size_t layer_pool = 2;
  std::chrono::milliseconds layer_pool_idle{std::chrono::minutes(10)};
  // Sandboxes booted ahead of creates (sandbox_pool.h; abxd --sandbox-pool,
  // --sandbox-pool-idle): this many ready per template that creates asked for lately, up to 8
  // templates; a template not asked for in sandbox_pool_idle leaves the pool. 0: none.
  std::size_t sandbox_pool = 0;
  std::chrono::milliseconds sandbox_pool_idle{std::chrono::minutes(5)};
  runtime::UserNamespace userns;  // each sandbox's id range (abxd --userns-base/-slots)
  // How long create waits for a template's command server to accept connections on its port
  // (abxd --server-ready-timeout). A server that exits first fails the create at once.
  std::chrono::milliseconds server_ready_timeout{20'000};
  // Sandbox links, rules, resolver and audit; null or disabled: every sandbox has loopback only.
  SandboxNetwork* network = nullptr;
  bool allow_host_network = false;  // abxd --allow-host-network: templates with `network: host`
  // Pause (POST /sandboxes/{id}/pause, onTimeout "pause"): kDisk checkpoints the sandbox with
  // CRIU into <home>/checkpoints/<id> and frees its memory and processes (E2B's persistent
  // pause; survives abxd restarts and reboots); kMemory freezes its cgroup (memory stays in
  // RAM). kAuto: kDisk when `criu` works on this host (checked at start), else kMemory.
  // Sandboxes a checkpoint cannot take (rootfs: host, network: host) always pause in memory.
  // (A pause without memory, E2B's filesystem-only one, needs no CRIU: every mode has it.)
  enum class PauseMode { kAuto, kDisk, kMemory };
  PauseMode pause_mode = PauseMode::kAuto;
  std::string criu = runtime::kDefaultCriu;  // abxd --criu
  // The lifecycle event log (events.h); null: no events are recorded.
  EventLog* events = nullptr;
  // abxd --timeout-warning: a sandbox.lifecycle.timeout_warning event this long before a
  // deadline kill or pause, for a deadline that had more than this left when set. 0: none.
  std::chrono::milliseconds timeout_warning{30'000};
};

// One line of envd's output log (GET /logs inside the sandbox, src/envd/output_log.h): what the
// start command and the command server printed, and the supervisor's events.
struct EnvdLogLine {
  std::int64_t timestamp_ms = 0;
  std::string level, line, source, stream;
};

// envd's lines at or after `start_ms` (at most `limit`), over a socket opened in the sandbox's
// netns. Errors: kUnavailable (envd unreachable, non-200, malformed).
Result<std::vector<EnvdLogLine>> read_envd_log(const runtime::Sandbox& sb,
                                               const std::string& access_token,
                                               std::int64_t start_ms, std::int64_t limit);

class SandboxManager {
 public:
  // Opens the image store ($ABX_HOME/images), takes the catalog and reaps what a previous abxd
  // left behind.
  static Result<std::unique_ptr<SandboxManager>> start(ManagerOptions options, store::Store& store,
                                                       templates::TemplateCatalog catalog);
  ~SandboxManager();  // stops the reaper; sandboxes keep running unless kill_all() was called

  // `req` was validated where it came in (its timeout within 1..max_timeout_seconds: asserted).
  // Errors: kNotFound (unknown template), kInvalidArgument (the template's own timeout over
  // max_timeout_seconds; secure=false with a command server), kPermissionDenied (host network
  // not allowed), kResourceExhausted (too many sandboxes), kInternal/kUnavailable (spawn or envd
  // start failed).
  Result<std::shared_ptr<LiveSandbox>> create(const CreateRequest& req);
  // Whether a create that does not say gets internet access (abxd --no-internet-by-default
  // flips E2B's true; no networking at all: true, moot). The one place that default is decided.
  bool default_internet() const;
  // A create's network when its request names none: default_internet(), nothing else set.
  SandboxNetworkSpec default_network() const;
  // nullptr if there is no live sandbox with that id.
  std::shared_ptr<LiveSandbox> find(const std::string& id) const;

  // --- Moving a sandbox to another node (abxd --cluster drain; migration.cc) ---
  // Holds the sandbox's lock throughout, and moves it as it is under that lock (`*was_paused`
  // says which): a running one is paused to disk; one paused to disk keeps its checkpoint (its
  // seal verified), one paused filesystem-only its kept layer. Writes that, its run directory and
  // its record as a tar file at `tar_path`, and calls `ship(tar_path)`. When ship succeeds (the
  // other node has it now) this node forgets it: its record, files and memory go, with no event
  // of its end. When anything fails it is left as it was (a running one is resumed here, a
  // paused one stays paused, its checkpoint kept) and the error is returned.
  // kFailedPrecondition: paused in RAM, or a running one not checkpointable (pause to disk off,
  // a host rootfs or network). kNotFound: gone (killed, or moved meanwhile).
  Status move_out(const std::string& id, const std::string& tar_path,
                  const std::function<Status(const std::string&)>& ship,
                  bool* was_paused = nullptr);
  // The receiving side: a tar file move_out wrote (another node's) becomes a sandbox of this
  // node with the same id, token, metadata and deadline, its run files' paths and its resolver
  // this node's, its checkpoint sealed with this node's key: resumed from its checkpoint when it
  // was running, left paused (to disk, or filesystem-only) when it was paused. Nothing stays
  // behind on error. kAlreadyExists: the id is here already; kInvalidArgument: the archive is
  // not what move_out writes; kFailedPrecondition: its template is not here, or a checkpoint
  // with memory and this node cannot restore one (no CRIU).
  Result<std::string> move_in(const std::string& tar_path);
  // Every live sandbox (running or paused), in id order; memory only (an I/O thread may call it).
  std::vector<std::shared_ptr<LiveSandbox>> all() const;
  // Team `team_id`'s samples with start_ms <= timestamp <= end_ms, oldest first (the last hour
  // is kept, from this abxd's start: the series is not persisted).
  std::vector<TeamSample> team_metrics(const std::string& team_id, std::int64_t start_ms,
                                       std::int64_t end_ms) const;
  // kNotFound if unknown. `reason` is the killed event's eventData.reason (events.h kEnd*).
  // Returns once nothing of the sandbox runs (its processes killed and exited), no traffic
  // reaches it, it is gone from live_ and its record and event say killed; the rest of its
  // teardown (cgroups, writable layer, directories) runs after on a background thread
  // (end_now, tear_down). Its id range and link stay taken until that teardown ends.
  Status kill(const std::string& id, const char* reason = kEndKilled);
  // The deadline becomes now + seconds, earlier or later than it was (POST .../timeout).
  // `seconds` (0..max_timeout_seconds) was checked where the request came in: asserted.
  Status set_timeout(const std::string& id, std::int64_t seconds);
  // The deadline becomes max(deadline, now + seconds): connect never shortens a sandbox's life.
  // `seconds` as for set_timeout.
  Status extend_timeout(const std::string& id, std::int64_t seconds);
  // Pauses it with its memory (to disk, or frozen in RAM: ManagerOptions::pause_mode), or, with
  // `memory` false, filesystem-only (E2B's pause {memory: false}): every process ends and its
  // memory is freed, its writable layer is kept under <home>/checkpoints/<id>, and its record
  // (paused, filesystem_only), token, network, metadata and envs stay. kFailedPrecondition if
  // already paused; kInvalidArgument for a filesystem-only pause of a sandbox without a writable
  // layer of its own (rootfs: host). `reason`: the paused event's eventData.reason
  // ("requested": the API; "timeout": lifecycle.onTimeout "pause" at the deadline).
  Status pause(const std::string& id, const char* reason = "requested", bool memory = true);
  struct ResumeOptions {
    // false: E2B's resume {memory: false} (the SDK's connect onResume 'reboot'): booted again
    // on its files. A no-op for a filesystem-only pause (which always boots again); a sandbox
    // paused to disk boots on a copy of its checkpoint's layer, the checkpoint left as it was
    // (E2B: ignored, never modified or deleted); refused (kInvalidArgument) for one frozen in
    // RAM, whose memory lives in the processes a boot would have to end.
    bool memory = true;
    // Traffic through the gateway (autoResume) wakes it: refused (kFailedPrecondition) for a
    // filesystem-only pause, which only an explicit connect or resume boots again (E2B).
    bool by_traffic = false;
  };
  // Brings a paused sandbox back: thawed, restored from its checkpoint, or — paused
  // filesystem-only — booted again on its kept files (a new envd, start command and command
  // server, as create starts them; same id, token and files, new processes). False if it was
  // not paused. A failed resume leaves it paused, its checkpoint or layer kept for a retry.
  Result<bool> resume(const std::string& id, ResumeOptions options);
  Result<bool> resume(const std::string& id) { return resume(id, ResumeOptions{}); }
  // Replaces a running sandbox's outbound rules (PUT /sandboxes/{id}/network). kNotFound,
  // kFailedPrecondition (paused, or no network link), kInvalidArgument (bad rules).
  // The warnings of the new rules (network.rules for hosts the sandbox may not reach).
  Result<std::vector<std::string>> update_network(const std::string& id,
                                                  const boost::json::object& body);
  // abxd stopping with --kill-sandboxes (reason "shutdown"). Returns once every teardown ran,
  // the earlier kills' too.
  void kill_all();
  // Leaves every sandbox running for the next abxd to adopt (what SIGTERM does by default).
  // Returns how many there were, once the teardowns of the sandboxes killed before ran. Both
  // destroy the pooled sandboxes (no create took them) and stop the pool: no create may run
  // meanwhile or after.
  std::size_t detach_all();
  // Held by a create for its whole length (the API's and MCP's): killed sandboxes' teardowns
  // start only in a gap between creates (teardown.h), never on a create's way.
  TeardownQueue::Hold hold_teardowns() { return teardown_.hold(); }

  // Fork: one snapshot of the running sandbox `id` (it is frozen for the dump, then runs on,
  // its id and deadline untouched), restored `count` times as new sandboxes, each with its own
  // id, token, hostname, network link and copy of the writable layer. One entry per child: the
  // sandbox or why that child failed. The call fails as a whole (kNotFound, kFailedPrecondition
  // for a paused sandbox or one pause-to-disk cannot take) before any child. `count` (1..
  // kMaxForkCount) and `timeout_seconds` (1..max_timeout_seconds) were checked where the request
  // came in (fork_sandbox): asserted.
  static constexpr int kMaxForkCount = 64;
  Result<std::vector<Result<std::shared_ptr<LiveSandbox>>>> fork(
      const std::string& id, int count, std::optional<std::int64_t> timeout_seconds);

  // Snapshots (E2B's createSnapshot): a checkpoint of a running sandbox kept under
  // <home>/snapshots/<snapshotID>; POST /sandboxes with templateID = snapshotID creates a new
  // sandbox from it. The sandbox is frozen for the dump and runs on.
  struct SnapshotInfo {
    std::string id;
    std::vector<std::string> names;
    std::string sandbox_id;  // the sandbox it was taken from
    std::string template_id;
    std::string team_id;  // the team of the sandbox it was taken from
    std::int64_t created_at_ms = 0;
  };
  Result<SnapshotInfo> create_snapshot(const std::string& sandbox_id, const std::string& name);
  // Newest first; `sandbox_id` / `name` filter when not empty.
  std::vector<SnapshotInfo> list_snapshots(const std::string& sandbox_id,
                                           const std::string& name) const;
  // kNotFound when there is no such snapshot.
  Status delete_snapshot(const std::string& snapshot_id);
  // Whether pause goes to disk on this abxd (ManagerOptions::pause_mode resolved at start).
  bool pauses_to_disk() const { return pause_to_disk_; }

  // A connected socket to `port` inside the sandbox, resuming it if paused and created with
  // auto_resume; kFailedPrecondition if it is paused without.
  Result<UniqueFd> connect(const std::string& id, std::uint16_t port);
  // A TCP socket made in the running sandbox's netns, not connected (runtime::Sandbox::
  // tcp_socket): no lock is waited for, so an I/O thread may call it. kNotFound, or
  // kFailedPrecondition while it is paused (connect() resumes it).
  Result<UniqueFd> tcp_socket(const std::string& id) const;

  // The current catalog; a snapshot stays valid while held, across reloads.
  std::shared_ptr<const templates::TemplateCatalog> catalog() const;
  // Re-reads $ABX_HOME/templates (new, changed and removed template.yaml files; built
  // templates); running sandboxes keep the template they were created from. Returns the number
  // of templates; files that fail to load are logged and listed in catalog()->errors().
  std::size_t reload_templates();
  // The image a template runs (pulled or imported into the store on first use, then cached).
  // Errors name the template and the reference: not built, unreachable registry, 401, 404, ...
  Result<image::Image> resolve_image(const templates::Template& tmpl);
  image::Store& images() { return images_; }
  // Manifest digests of the images live sandboxes run on (image gc must keep them).
  std::set<std::string> images_in_use() const;
  const ManagerOptions& options() const { return opt_; }
  // Successful creates' step timings since start (GET /metrics): create() marks admit, image,
  // pool (a pooled sandbox taken) or run_dir, config, runtime's spawn steps, envd_ready,
  // server_ready, ready_cmd, then record and announce.
  const TimelineStats& create_timings() const { return create_timings_; }
  // The writable-layer pool's counters (all zero without a pool).
  runtime::LayerPool::Stats layer_pool_stats() const;
  // The sandbox pool's counters (all zero without one: --sandbox-pool 0).
  SandboxPool::Stats sandbox_pool_stats() const;
  // The event log (null when abxd records none).
  EventLog* events() const { return opt_.events; }
  // Records a lifecycle event of `rec` when there is an event log.
  void emit(std::string_view type, const store::SandboxRecord& rec,
            const boost::json::object& data = {},
            store::Store::Durability durability = store::Store::Durability::kPowerLoss) const {
    if (opt_.events) opt_.events->record(type, rec, data, durability);
  }

 private:
  SandboxManager(ManagerOptions options, store::Store& store, templates::TemplateCatalog catalog,
                 image::Store images);
  void reaper_loop();
  // A kill in two halves (sandbox_lifecycle.cc). end_now, under sb.mu, is what the caller
  // waits for: every process of the sandbox killed (runtime::Sandbox::kill), no traffic to it
  // (its netns closed to new sockets, its link's rules and resolver detached), its record
  // killed. tear_down then queues the rest, finish_teardown, on teardown_ (or runs it at once
  // when the queue is full): the init reaped, cgroups, writable layer, state, run and
  // checkpoint directories removed; its errors are logged with the sandbox's id.
  Status end_now(LiveSandbox& sb);
  void tear_down(std::shared_ptr<LiveSandbox> sb);
  void finish_teardown(LiveSandbox& sb);
  // At start, after the adoptions: the run and checkpoint directories of sandboxes no record
  // keeps (a crash with teardowns pending, or in the middle of a create).
  void remove_orphan_dirs();
  // sandbox_create.cc: a new sandbox of `tmpl` (from `catalog`) spawned and ready as `req` asks
  // (its envVars, network, volumes and token), with its run directory; nothing is left of it on
  // error. create() records it; the sandbox pool boots ahead with a default request.
  Result<BootedSandbox> boot(std::shared_ptr<const templates::TemplateCatalog> catalog,
                             const templates::Template& tmpl,
                             const std::optional<image::Image>& img, const CreateRequest& req,
                             Timeline& tl);
  // Destroys what boot() made: the sandbox, its link's rules, its run directory.
  void discard(BootedSandbox& b);
  // Whether a pooled sandbox serves `req`: it asks for nothing one was not booted with (no
  // envVars, no volumes, a token, the default network).
  bool poolable(const CreateRequest& req) const;
  // The pool's refill: one sandbox of template `id` as a create with nothing in it would boot.
  Result<BootedSandbox> boot_ahead(const std::string& id);
  // persistence.cc; the callers hold sb.mu.
  bool can_checkpoint(const LiveSandbox& sb) const;
  Status pause_to_disk(LiveSandbox& sb);
  Status resume_from_disk(LiveSandbox& sb);
  Status pause_filesystem_only(LiveSandbox& sb);
  // The boot of a filesystem-only pause on its kept layer, or (`from_checkpoint`) of a sandbox
  // paused to disk on a copy of its checkpoint's layer (resume {memory: false}).
  Status resume_filesystem_only(LiveSandbox& sb, bool from_checkpoint = false);
  // sandbox_create.cc: sandbox `sb`'s processes started afresh, as create() starts them (its
  // saved sandbox.json and envd.json, spawned and waited for until envd and its servers
  // answer), on the writable layer `layer` (an rw.img keep_layer() kept; with `copy`, a copy
  // of it). Its network's rules are attached to the new link; a failure leaves nothing running
  // and no rules.
  Result<std::shared_ptr<runtime::Sandbox>> boot_on_layer(const LiveSandbox& sb,
                                                          const std::string& layer, bool copy);
  // The runtime config to restore (or boot again) sandbox `id` (its saved sandbox.json, with
  // abxd's state dir, user namespaces and veth numbering, and its network's rules attached when
  // the link is up).
  Result<runtime::SandboxConfig> restore_config(const std::string& id,
                                                const SandboxNetworkSpec& net) const;
  // A new sandbox restored from `checkpoint_dir`, as a copy of `parent` (its record, template,
  // network, env) with a new id, token and deadline: fork and create-from-snapshot.
  struct ChildOf {
    store::SandboxRecord record;
    std::shared_ptr<const templates::Template> tmpl;
    std::string image_digest;
    SandboxNetworkSpec network;
    bool secure = true;
    bool public_traffic = true;
    runtime::SandboxConfig config;  // the parent's saved config
    // The images need no seal check in restore(): a fork's own unsealed checkpoint, or a
    // snapshot whose seal (covering the images) was just verified.
    bool verified = false;
  };
  Result<std::shared_ptr<LiveSandbox>> restore_child(const std::string& checkpoint_dir,
                                                     const ChildOf& parent,
                                                     std::int64_t timeout_seconds,
                                                     const CreateRequest* req);
  // Takes sb.mu: refuses a paused sandbox or one CRIU cannot take, runs `under_lock` (to copy
  // what the caller needs of it), then checkpoints it into `dir`; it runs on. `what` ("fork",
  // "snapshot") names the operation in errors and in the sandbox's log. `seal`: as
  // runtime::CheckpointOptions::seal (false only for a fork's checkpoint).
  Result<runtime::CheckpointInfo> checkpoint_running(LiveSandbox& sb, const std::string& dir,
                                                     const std::string& what,
                                                     const std::function<Status()>& under_lock,
                                                     bool seal = true);
  Result<std::shared_ptr<LiveSandbox>> create_from_snapshot(const std::string& snapshot_id,
                                                            const CreateRequest& req);
  // A create's lifetime in seconds: the request's (checked at the edge), else `fallback`, the
  // template's or snapshot's own, which must fit max_timeout_seconds. `from` names it in the
  // error ("template 'x'").
  Result<std::int64_t> create_timeout(const CreateRequest& req, std::int64_t fallback,
                                      const std::string& from) const;
  // Manifest digests the snapshots' layers need.
  std::set<std::string> snapshot_images() const;
  // <home>/checkpoints/<id>: where sandbox `id` is paused to disk (its checkpoint), or paused
  // filesystem-only (its writable layer alone, kKeptLayer).
  std::string checkpoint_dir(const std::string& id) const;
  // At start, what a record and the sandbox found for it (adopt()) settle into: the record as
  // it holds (state, checkpoint), after finishing or undoing a pause or resume a crash cut
  // short; `sb` may be consumed (a frozen tree whose pause was committed is destroyed).
  // kNotFound: neither a live sandbox nor a complete checkpoint is left.
  Result<store::SandboxRecord> settle_checkpoint(const store::SandboxRecord& rec,
                                                 Result<runtime::Sandbox>& sb);
  // kDisk without a working CRIU: kFailedPrecondition (abxd does not start).
  Status resolve_pause_mode();
  // At start: one record of a previous abxd's running or paused sandbox, adopted into live_
  // (true) or marked killed with a lost event (false).
  bool adopt(const store::SandboxRecord& rec, const std::string& state_dir,
             const templates::TemplateCatalog& cat);
  void remove_cut_checkpoints();
  // The reaper's steps. The ids of `all` whose deadline passed (paused ones wait), sending each
  // sandbox's timeout warning as it enters its lead; under each sandbox's lock, never mu_.
  std::vector<std::string> past_deadline(const std::vector<std::shared_ptr<LiveSandbox>>& all,
                                         std::int64_t now);
  // Pauses (lifecycle.onTimeout "pause") or kills each of `due`.
  void end_at_deadline(const std::vector<std::string>& due);
  // Removes each of `dead` whose init exited on its own (checked again under its lock).
  void remove_exited(const std::vector<std::string>& dead);
  void seal_earlier_checkpoints();
  // The pinned bundles (bundle.h) that abxd's own option and saved configs name.
  std::set<std::string> bundles_in_use() const;
  Status move_deadline(const std::string& id, std::int64_t seconds, bool extend_only);
  // A sandbox of `team_id` started (create, fork, create from a snapshot): counted in the
  // team's next sample. Adopting a running sandbox at abxd's start is not a start.
  void count_start(const std::string& team_id);
  // The reaper's team sample, every kMetricInterval, from the live sandboxes it just listed.
  void sample_teams(const std::vector<std::shared_ptr<LiveSandbox>>& all, std::int64_t now);

  ManagerOptions opt_;
  store::Store* store_;
  image::Store images_;
  std::mutex pull_mu_;  // one pull or import at a time (they share the store's disk and network)
  mutable std::mutex catalog_mu_;
  std::shared_ptr<const templates::TemplateCatalog> catalog_;
  Logger log_{"sandboxes"};
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<LiveSandbox>> live_;
  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
  std::thread reaper_;
  bool pause_to_disk_ = false;
  TimelineStats create_timings_;
  std::unique_ptr<runtime::LayerPool> layer_pool_;  // null: --layer-pool 0, or it failed to start
  mutable std::mutex team_mu_;                      // guards the three below
  std::map<std::string, std::deque<TeamSample>> team_samples_;
  std::map<std::string, std::int64_t> team_starts_;  // since the last team sample
  std::int64_t last_team_sample_ms_ = 0;
  // The key every checkpoint and snapshot is sealed with (<home>/checkpoint.key, 0600).
  std::string checkpoint_key_;
  // Killed sandboxes' teardowns (teardown.h). Destroyed after the pool, before everything else,
  // finishing its jobs while everything they use is still there.
  TeardownQueue teardown_;
  // Last: destroyed first, its refill stopped and its sandboxes discarded while the rest of the
  // manager is still there. Null: --sandbox-pool 0.
  std::unique_ptr<SandboxPool> pool_;
};

// Whether team `team_id` may use template `template_id`: one no team owns (built-in, catalog
// and template.yaml templates) or one it built (store::Store::template_owner). Fails closed: a
// store error is "not visible".
bool template_visible_to(store::Store& store, const std::string& template_id,
                         const std::string& team_id);

}  // namespace abx::platform
