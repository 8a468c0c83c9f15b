// The sandbox manager (sandboxes.h): its start, which adopts what a previous abxd left running,
// the template catalog and images, live sandboxes' events and metrics, and the reaper. create is
// sandbox_create.cc; kill, timeouts, pause and resume in memory are sandbox_lifecycle.cc; pause to
// disk, fork and snapshots are persistence.cc.
#include "sandboxes.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/image/reference.h"
#include "abx/image/registry.h"
#include "abx/runtime/process.h"
#include "bundle.h"
#include "sandbox_config.h"
#include "sandboxes_internal.h"

namespace abx::platform {

namespace fs = std::filesystem;

bool template_visible_to(store::Store& store, const std::string& template_id,
                         const std::string& team_id) {
  auto owner = store.template_owner(template_id);
  return owner.ok() && (!owner->has_value() || **owner == team_id);
}

namespace {

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
      if (m->adopt(rec, state_dir, *cat)) {
        ++adopted;
      } else {
        ++lost;
      }
    }
    if (page.next_token.empty()) break;
    f.page_token = page.next_token;
  }
  auto cleaned = runtime::cleanup_stale(state_dir);
  m->remove_orphan_dirs();
  // After cleanup_stale(): the pool's directory is a dot entry it leaves alone, and the pool
  // removes what a dead predecessor left there itself.
  if (m->opt_.layer_pool > 0) {
    runtime::LayerPoolOptions po;
    po.state_dir = state_dir;
    po.per_size = m->opt_.layer_pool;
    po.idle = m->opt_.layer_pool_idle;
    auto pool = runtime::LayerPool::start(std::move(po));
    if (pool.ok()) {
      m->layer_pool_ = std::move(*pool);
    } else {
      m->log_.warn("no writable-layer pool (every create makes its own layer): " +
                   pool.error().message());
    }
  }
  if (m->opt_.sandbox_pool > 0) {
    SandboxPool::Options po;
    po.per_template = m->opt_.sandbox_pool;
    po.idle = m->opt_.sandbox_pool_idle;
    SandboxManager* raw = m.get();
    m->pool_ = std::make_unique<SandboxPool>(
        po, [raw](const std::string& id) { return raw->boot_ahead(id); },
        [raw](BootedSandbox& b) { raw->discard(b); },
        [raw](std::size_t pooled) {
          std::lock_guard lock(raw->mu_);
          return raw->live_.size() + pooled < raw->opt_.max_sandboxes;
        });
  }
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

bool SandboxManager::adopt(const store::SandboxRecord& rec, const std::string& state_dir,
                           const templates::TemplateCatalog& cat) {
  std::error_code ec;
  const fs::path run_dir = fs::path(opt_.home) / "run" / rec.id;
  // Its saved config (sandbox.json), so that it can be checkpointed again.
  auto saved_config = load_sandbox_config(run_dir.string());
  auto sb = runtime::Sandbox::adopt(state_dir, rec.id,
                                    saved_config.ok() ? &saved_config.value() : nullptr);
  const templates::Template* tmpl = cat.get(rec.template_id);
  std::ifstream tin(fs::path(opt_.home) / "run" / rec.id / "token");
  std::string token((std::istreambuf_iterator<char>(tin)), std::istreambuf_iterator<char>());
  bool token_ok = rec.access_token_digest.empty()
                      ? token.empty()
                      : store::digest_matches(rec.access_token_digest, token);
  // Paused to disk, or a pause or resume that a crash cut short: which state holds
  // (persistence.cc). kNotFound: neither a live sandbox nor a complete checkpoint.
  auto settled = settle_checkpoint(rec, sb);
  if (!settled.ok() || tmpl == nullptr || !token_ok) {
    if (sb.ok()) (void)sb->destroy();
    (void)store_->update_state(rec.id, store::SandboxState::kKilled);
    fs::remove_all(opt_.home + "/run/" + rec.id, ec);
    fs::remove_all(checkpoint_dir(rec.id), ec);
    if (!settled.ok()) log_.warn("sandbox " + rec.id + " lost: " + settled.error().message());
    emit(kEventKilled, rec,
         {{"reason", kEndLost},
          {"detail", !settled.ok()     ? settled.error().message()
                     : tmpl == nullptr ? std::string("its template is gone")
                                       : std::string("its token file does not match")}});
    return false;
  }
  std::shared_ptr<runtime::Sandbox> rt;
  if (sb.ok()) rt = std::make_shared<runtime::Sandbox>(std::move(*sb));
  auto live = std::make_shared<LiveSandbox>(*settled, std::move(rt));
  live->set_access_token(std::move(token));
  live->tmpl = std::make_shared<const templates::Template>(*tmpl);
  live->image_digest = read_image_file(fs::path(opt_.home) / "run" / rec.id);
  live->paused = settled->state == store::SandboxState::kPaused;
  {
    std::ifstream tt(fs::path(opt_.home) / "run" / rec.id / "traffic_token");
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
    Status s = !rts->veth() || !opt_.network || !opt_.network->enabled()
                   ? Error(ErrorCode::kFailedPrecondition, "no network link or networking off")
                   : opt_.network->attach(rec.id, *rts->veth(), live->network);
    if (!s) {
      log_.warn("sandbox " + rec.id + " not adopted: its network: " + s.error().message());
      (void)rts->destroy();
      (void)store_->update_state(rec.id, store::SandboxState::kKilled);
      fs::remove_all(opt_.home + "/run/" + rec.id, ec);
      emit(kEventKilled, rec,
           {{"reason", kEndLost}, {"detail", "its network rules cannot be enforced"}});
      return false;
    }
  }
  live->note("info", std::string("adopted by a restarted abxd (") +
                         (live->record.filesystem_only       ? "paused without its memory"
                          : !live->record.checkpoint.empty() ? "paused to disk"
                          : live->paused                     ? "paused"
                                                             : "running") +
                         ")");
  std::lock_guard lock(mu_);  // move_in adopts while abxd serves
  live_[rec.id] = std::move(live);
  return true;
}

void SandboxManager::remove_orphan_dirs() {
  // Only names that are sandbox ids: dot entries (a fork's, a move's, a pause's working
  // directories) are remove_cut_checkpoints()'s and migration's.
  int removed = 0;
  for (const auto& base : {opt_.home + "/run", opt_.home + "/checkpoints"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      if (!store::SandboxId::valid(name)) continue;
      {
        std::lock_guard lock(mu_);
        if (live_.contains(name)) continue;
      }
      std::error_code rec;
      fs::remove_all(e.path(), rec);
      if (rec) {
        log_.warn("cannot remove " + e.path().string() + " (no sandbox has it): " + rec.message());
      } else {
        ++removed;
      }
    }
  }
  if (removed > 0)
    log_.info("removed " + std::to_string(removed) +
              " run or checkpoint director(ies) of sandboxes no record keeps");
}

SandboxManager::~SandboxManager() {
  {
    std::lock_guard lock(reaper_mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

runtime::LayerPool::Stats SandboxManager::layer_pool_stats() const {
  return layer_pool_ ? layer_pool_->stats() : runtime::LayerPool::Stats{};
}

SandboxPool::Stats SandboxManager::sandbox_pool_stats() const {
  return pool_ ? pool_->stats() : SandboxPool::Stats{};
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
  // Booted from the old catalog: never handed out now (create checks), so gone at once.
  if (pool_) pool_->flush();
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
    // (500 syscalls every 250 ms at 500 sandboxes). Each is checked again (remove_exited).
    std::vector<std::string> dead;
    {
      std::vector<const runtime::Sandbox*> inits;
      for (const auto& w : watched) inits.push_back(w.second.get());
      for (std::size_t i : runtime::exited_inits(inits)) dead.push_back(watched[i].first);
    }
    watched.clear();
    const std::vector<std::string> due = past_deadline(all, now);
    for (const auto& sb : to_sample) {
      if (!sb->paused) sb->sample_metrics();  // a frozen sandbox uses nothing new
    }
    sample_teams(all, now);
    end_at_deadline(due);
    remove_exited(dead);
    lock.lock();
  }
}

std::vector<std::string> SandboxManager::past_deadline(
    const std::vector<std::shared_ptr<LiveSandbox>>& all, std::int64_t now) {
  std::vector<std::string> due;
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
  return due;
}

void SandboxManager::end_at_deadline(const std::vector<std::string>& due) {
  for (const auto& id : due) {
    auto sb = find(id);
    if (sb && sb->record.pause_on_timeout) {
      const bool memory = sb->record.pause_keeps_memory;
      sb->note("info", memory ? "timeout reached: pausing (onTimeout: pause)"
                              : "timeout reached: pausing without memory (onTimeout: pause, "
                                "keepMemory: false)");
      if (Status s = pause(id, kEndTimeout, memory);
          s.ok() || s.error().code() == ErrorCode::kFailedPrecondition) {
        continue;
      }
    }
    if (sb) sb->note("info", "timeout reached: killing");
    (void)kill(id, kEndTimeout);
  }
}

void SandboxManager::remove_exited(const std::vector<std::string>& dead) {
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
}

}  // namespace abx::platform
