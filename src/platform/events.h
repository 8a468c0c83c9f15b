// The lifecycle event log: every sandbox transition (created, paused, resumed, updated,
// snapshotted, timeout warning, killed with the reason it ended) recorded in the store with a
// monotonically increasing id, and fanned out to Server-Sent-Event streams
// (GET /events/sandboxes) and to webhooks (webhooks.h); docs/events.md.
//
// The names are E2B's (type "sandbox.lifecycle.<label>", the v1 event JSON: version, id, type,
// eventData, sandboxId, sandboxTeamId, sandboxTemplateId, timestamp). abx adds
// "sandbox.lifecycle.timeout_warning" and eventData.reason on every killed event.
//
// record() never blocks on a client and never fails its caller: a store error is logged. The
// streams are served by one thread: each subscriber has a cursor (the last id it was sent); on a
// new event or every heartbeat interval the thread writes what each subscriber has not seen yet
// (read from the store, so a cursor from before an abxd restart resumes exactly), skipping a
// subscriber whose connection is still full (it catches up when it drains). stop() ends every
// stream cleanly (the last chunk) before the gateway drains.
#pragma once

#include <boost/json/object.hpp>
#include <boost/url/params_view.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/log.h"
#include "abx/http/server.h"
#include "abx/store/store.h"

namespace abx::platform {

class WebhookDispatcher;  // webhooks.h

// The event types, E2B's names (plus timeout_warning, abx's).
inline constexpr std::string_view kEventCreated = "sandbox.lifecycle.created";
inline constexpr std::string_view kEventPaused = "sandbox.lifecycle.paused";
inline constexpr std::string_view kEventResumed = "sandbox.lifecycle.resumed";
inline constexpr std::string_view kEventUpdated = "sandbox.lifecycle.updated";
inline constexpr std::string_view kEventSnapshotted = "sandbox.lifecycle.snapshotted";
inline constexpr std::string_view kEventTimeoutWarning = "sandbox.lifecycle.timeout_warning";
inline constexpr std::string_view kEventKilled = "sandbox.lifecycle.killed";
// Whether `type` is one of the above (a ?types= filter names only these).
bool known_event_type(std::string_view type);

// The event query of GET /events and /events/sandboxes: cursor (or a Last-Event-ID header
// value), types (repeated or comma-separated, full or short names, at most 32), limit (1..1000;
// default 100, or E2B's 10 when !sse_default), offset (at most 1 000 000), orderAsc, stream
// (true/false/1/0, checked only). Other parameters are ignored (as E2B's are); at most 64.
// Errors: invalid_argument naming the parameter. The filter's team and sandbox are left unset.
struct EventParams {
  store::EventFilter filter;
  bool has_cursor = false;
};
Result<EventParams> parse_event_params(boost::urls::params_view params,
                                       std::string_view last_event_id, bool sse_default);

// Why a sandbox ended (eventData.reason of a killed event).
inline constexpr const char* kEndKilled = "killed";      // DELETE /sandboxes/{id} (or MCP kill)
inline constexpr const char* kEndTimeout = "timeout";    // its deadline passed
inline constexpr const char* kEndDied = "died";          // its init (abx-envd) exited
inline constexpr const char* kEndOom = "oom";            // the OOM killer ended its processes
inline constexpr const char* kEndLost = "lost";          // found gone when abxd started
inline constexpr const char* kEndShutdown = "shutdown";  // abxd stopped with --kill-sandboxes

struct EventLogOptions {
  std::chrono::milliseconds retention{7LL * 24 * 3600 * 1000};  // E2B keeps 7 days
  std::int64_t max_events = 100'000;  // and abx at most this many (the newest)
  std::size_t max_streams = 64;       // concurrent GET /events streams, all teams
  std::size_t max_streams_per_team = 16;
  std::chrono::milliseconds heartbeat{15'000};
};

class EventLog {
 public:
  EventLog(store::Store& store, EventLogOptions options);
  ~EventLog();  // stop()
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends one event for sandbox `rec` (its id, team, template) and wakes the streams.
  // `durability`: store::Store::append_event's.
  void record(std::string_view type, const store::SandboxRecord& rec,
              const boost::json::object& data = {},
              store::Store::Durability durability = store::Store::Durability::kPowerLoss);

  // A page of events (the JSON form of GET /events).
  Result<std::vector<store::EventRecord>> list(const store::EventFilter& f) {
    return store_.list_events(f);
  }

  // A stream slot: kResourceExhausted when max_streams are open. Pass it to subscribe(), or
  // drop it to give the slot back.
  struct Slot {
    EventLog* log = nullptr;
    std::string team;
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot(EventLog* l, std::string t) : log(l), team(std::move(t)) {}
  };
  // Also kResourceExhausted when `team` has max_streams_per_team open.
  Result<std::unique_ptr<Slot>> reserve(const std::string& team);
  // Serves `writer` from `filter.after_id` on (filter.limit is ignored), holding `slot`.
  void subscribe(std::unique_ptr<Slot> slot, store::EventFilter filter,
                 std::shared_ptr<http::StreamWriter> writer);
  std::size_t streams() const;

  // Where each recorded event is also delivered (webhooks.h); null: nowhere. Set before the
  // first record().
  void set_webhooks(WebhookDispatcher* w) { webhooks_ = w; }
  WebhookDispatcher* webhooks() const { return webhooks_; }

  // Ends every stream (each gets its last chunk) and refuses new ones. Idempotent.
  void stop();

  // The E2B v1 JSON of one event; and its SSE frame ("id: N\nevent: <type>\ndata: <json>\n\n").
  static boost::json::object to_json(const store::EventRecord& e);
  static std::string sse_frame(const store::EventRecord& e);

 private:
  struct Sub {
    std::unique_ptr<Slot> slot;
    store::EventFilter filter;
    std::shared_ptr<http::StreamWriter> writer;
  };
  void loop();
  void prune();

  store::Store& store_;
  EventLogOptions opt_;
  Logger log_{"events"};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool sweep_ = false;  // a reserve() was refused: the loop looks for closed streams now
  std::size_t slots_ = 0;
  std::map<std::string, std::size_t> team_slots_;
  std::int64_t latest_id_ = 0;
  std::int64_t appended_ = 0;
  std::vector<Sub> incoming_;  // handed to the loop
  WebhookDispatcher* webhooks_ = nullptr;
  std::thread thread_;
};

}  // namespace abx::platform
