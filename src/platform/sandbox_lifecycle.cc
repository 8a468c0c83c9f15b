// The lifecycle of a live sandbox after its create: kill, timeouts, pause and resume in memory,
// network updates, connections into it, and abxd's stop. (Pause to disk, the filesystem-only
// pause, fork and snapshots are persistence.cc's.)
#include <boost/json/serialize.hpp>
#include <cassert>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "abx/base/time.h"
#include "abx/base/try.h"
#include "sandboxes.h"
#include "sandboxes_internal.h"

namespace abx::platform {

namespace fs = std::filesystem;

// How long a kill waits for the sandbox's processes to exit after their SIGKILL (they have
// exited when its init has: runtime::Sandbox::kill). Past it the caller is answered anyway;
// nothing of the sandbox runs user code once SIGKILL is pending, and the teardown waits for them.
constexpr std::chrono::milliseconds kKillExitWait{5000};

namespace {
// Paused to disk or without its memory (both record a checkpoint directory): no process runs,
// and what is left of it is that directory, the user's data. (Caller holds sb.mu.)
bool on_disk(const LiveSandbox& sb) { return !sb.record.checkpoint.empty(); }

// A running sandbox's end (its killed state and event) needs to outlive abxd, not the machine:
// a power loss ends its processes too, and the next abxd, finding none, marks it killed with a
// `lost` event. One on disk would come back from its checkpoint after a power loss: its end is
// fsynced. (Caller holds sb.mu.)
store::Store::Durability end_durability(const LiveSandbox& sb) {
  return on_disk(sb) ? store::Store::Durability::kPowerLoss
                     : store::Store::Durability::kProcessCrash;
}
}  // namespace

Status SandboxManager::end_now(LiveSandbox& sb) {
  Status s;
  if (auto rt = sb.runtime()) {
    if (sb.paused) (void)rt->cgroups().freeze(false);  // frozen tasks would not die
    s = rt->kill(kKillExitWait);
  }
  sb.paused = false;
  if (sb.network.enabled && opt_.network) opt_.network->detach(sb.record.id);
  (void)store_->update_state(sb.record.id, store::SandboxState::kKilled, end_durability(sb));
  return s;
}

void SandboxManager::tear_down(std::shared_ptr<LiveSandbox> sb) {
  const std::string id = sb->record.id;
  if (teardown_.push(id, [this, sb] { finish_teardown(*sb); })) return;
  sb->note("info", "teardown queue full (" + std::to_string(TeardownQueue::kDefaultCapacity) +
                       " waiting): torn down before the answer");
  finish_teardown(*sb);
}

void SandboxManager::finish_teardown(LiveSandbox& sb) {
  // Its lock as the kill's was: a caller that found the sandbox before it left live_ and waits
  // for the lock (a pause, a resume) finds it torn down after, not half way.
  std::lock_guard lock(sb.mu);
  Status s;
  if (auto rt = sb.runtime()) s = rt->destroy();
  std::error_code ec;
  fs::remove_all(fs::path(opt_.home) / "run" / sb.record.id, ec);
  // A sandbox paused to disk: its checkpoint goes with it (and a crashed pause's leftovers).
  std::error_code cec;
  fs::remove_all(checkpoint_dir(sb.record.id), cec);
  sb.record.checkpoint.clear();
  if (!s) sb.note("warn", "teardown: " + s.error().message());
  if (ec) sb.note("warn", "teardown: removing its run directory: " + ec.message());
  if (cec) sb.note("warn", "teardown: removing its checkpoint: " + cec.message());
}

Result<std::vector<std::string>> SandboxManager::update_network(const std::string& id,
                                                                const boost::json::object& body) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  std::lock_guard lock(sb->mu);
  if (sb->moved) return not_found("sandbox '" + id + "' not found");
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
  Status s;
  store::Store::Durability durability;
  bool paused_on_disk = false;
  {
    // A move to another node (move_out) holds its lock: once it is done the sandbox is that
    // node's, and not here to kill. (move_out takes no sandbox that left live_.)
    std::lock_guard lock(sb->mu);
    if (sb->moved) return not_found("sandbox '" + id + "' not found");
    sb->note("info", std::string("killed (") + reason + ")");
    durability = end_durability(*sb);
    paused_on_disk = on_disk(*sb);
    s = end_now(*sb);
  }
  emit(kEventKilled, sb->record, {{"reason", reason}}, durability);
  // One paused to disk or without its memory has no process to wait for: what is left is its
  // checkpoint or kept layer, the user's data, gone before the answer as E2B's kill of a paused
  // sandbox promises (and fast: no tree to reap, no layer mounted).
  if (paused_on_disk) {
    finish_teardown(*sb);
  } else {
    tear_down(std::move(sb));
  }
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
  // Checked at the edge (api::set_sandbox_timeout, refresh_sandbox, resume_or_connect).
  assert(seconds >= 0 && seconds <= opt_.max_timeout_seconds);
  // The sandbox's lock covers read, store write and update, so two concurrent extensions
  // cannot leave the earlier deadline in place.
  std::lock_guard lock(sb->mu);
  if (sb->moved) return not_found("sandbox '" + id + "' not found");
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

Status SandboxManager::pause(const std::string& id, const char* reason, bool memory) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  std::lock_guard lock(sb->mu);
  if (sb->moved) return not_found("sandbox '" + id + "' not found");
  if (sb->paused)
    return Error(ErrorCode::kFailedPrecondition, "sandbox '" + id + "' is already paused");
  if (!memory) {
    ABX_TRY(pause_filesystem_only(*sb));
  } else if (pause_to_disk_ && can_checkpoint(*sb)) {
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
  emit(kEventPaused, sb->record, {{"reason", reason}, {"memory", memory}});
  return {};
}

Result<bool> SandboxManager::resume(const std::string& id, ResumeOptions options) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  std::lock_guard lock(sb->mu);
  if (sb->moved) return not_found("sandbox '" + id + "' not found");
  if (!sb->paused) return false;
  if (sb->record.filesystem_only) {
    if (options.by_traffic)
      return Error(ErrorCode::kFailedPrecondition,
                   "sandbox '" + id +
                       "' is paused without its memory (filesystem-only): traffic does not resume "
                       "it (autoResume); resume it with connect or resume, which boot it again");
    ABX_TRY(resume_filesystem_only(*sb));
  } else if (!options.memory) {
    // E2B: the files alone, any memory ignored and never modified or deleted.
    if (sb->record.checkpoint.empty())
      return invalid_argument(
          "memory: false (a boot on the files alone) needs a sandbox paused to disk or without "
          "its memory; sandbox '" +
          id +
          "' is paused in RAM (abxd --pause memory, or a template CRIU cannot take), its memory "
          "in the processes such a boot would end: resume it without memory: false");
    ABX_TRY(resume_filesystem_only(*sb, /*from_checkpoint=*/true));
  } else if (!sb->record.checkpoint.empty()) {
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
    // Traffic resumes a paused sandbox created with autoResume (not one paused filesystem-only).
    ABX_TRY(resume(id, ResumeOptions{.by_traffic = true}));
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
  pool_.reset();  // pooled sandboxes are nobody's: destroyed either way
  std::map<std::string, std::shared_ptr<LiveSandbox>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(live_);
  }
  for (auto& [id, sb] : all) {
    store::Store::Durability durability;
    {
      std::lock_guard lock(sb->mu);
      durability = end_durability(*sb);
      (void)end_now(*sb);
    }
    emit(kEventKilled, sb->record, {{"reason", kEndShutdown}}, durability);
    tear_down(sb);
  }
  teardown_.drain();
}

std::size_t SandboxManager::detach_all() {
  pool_.reset();  // pooled sandboxes are nobody's: destroyed either way
  std::map<std::string, std::shared_ptr<LiveSandbox>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(live_);
  }
  for (auto& [id, sb] : all) {
    std::lock_guard lock(sb->mu);
    if (auto rt = sb->runtime()) rt->detach();
  }
  teardown_.drain();  // killed before the stop: those are not left half removed
  return all.size();
}

}  // namespace abx::platform
