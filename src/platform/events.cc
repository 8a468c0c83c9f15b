#include "events.h"

#include <boost/json.hpp>
#include <limits>

#include "abx/base/time.h"
#include "abx/base/try.h"
#include "webhooks.h"

namespace abx::platform {

namespace {
std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
constexpr std::int64_t kPruneEvery = 1000;  // appends between prunes (and one at start)
constexpr std::size_t kBatch = 100;         // events written per subscriber per pass
}  // namespace

namespace {
constexpr std::int64_t kMaxPage = 1000;
constexpr std::int64_t kMaxCursor = std::numeric_limits<std::int64_t>::max() / 2;

Result<std::int64_t> parse_count(std::string_view key, std::string_view v, std::int64_t max) {
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string_view::npos)
    return invalid_argument(std::string(key) + " must be a non-negative integer");
  std::int64_t n = 0;
  for (char c : v) n = n * 10 + (c - '0');  // at most 18 digits: no overflow
  if (n > max)
    return invalid_argument(std::string(key) + " must be at most " + std::to_string(max));
  return n;
}
}  // namespace

Result<EventParams> parse_event_params(boost::urls::params_view params,
                                       std::string_view last_event_id, bool sse_default) {
  EventParams q;
  q.filter.limit = sse_default ? 100 : 10;  // E2B's default page is 10
  bool order_asc = false;
  if (!last_event_id.empty()) {
    ABX_ASSIGN_OR_RETURN(q.filter.after_id,
                         parse_count("Last-Event-ID", last_event_id, kMaxCursor));
    q.has_cursor = true;
  }
  std::size_t seen = 0;
  for (auto p : params) {
    if (++seen > 64) return invalid_argument("at most 64 query parameters");
    const std::string v = p.has_value ? std::string(p.value) : std::string();
    if (p.key == "cursor") {
      ABX_ASSIGN_OR_RETURN(q.filter.after_id, parse_count("cursor", v, kMaxCursor));
      q.has_cursor = true;
    } else if (p.key == "types" || p.key == "type") {
      // Repeated (E2B) or comma-separated.
      std::string_view rest = v;
      while (!rest.empty()) {
        auto comma = rest.find(',');
        std::string t(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        if (t.empty()) continue;
        // Short names are accepted too: "killed" is "sandbox.lifecycle.killed".
        if (t.find('.') == std::string::npos) t = "sandbox.lifecycle." + t;
        if (!known_event_type(t))
          return invalid_argument("unknown event type '" + t.substr(0, 80) + "'");
        if (q.filter.types.size() >= 32) return invalid_argument("at most 32 event types");
        q.filter.types.push_back(std::move(t));
      }
    } else if (p.key == "stream") {
      if (v != "true" && v != "1" && v != "false" && v != "0")
        return invalid_argument("stream must be true or false");
    } else if (p.key == "limit") {
      ABX_ASSIGN_OR_RETURN(auto n, parse_count("limit", v, kMaxPage));
      if (n == 0) return invalid_argument("limit must be at least 1");
      q.filter.limit = static_cast<std::size_t>(n);
    } else if (p.key == "offset") {
      ABX_ASSIGN_OR_RETURN(auto n, parse_count("offset", v, 1'000'000));
      q.filter.offset = static_cast<std::size_t>(n);
    } else if (p.key == "orderAsc") {
      if (v != "true" && v != "false") return invalid_argument("orderAsc must be true or false");
      order_asc = v == "true";
    }
  }
  // With a cursor the page reads forward from it; E2B's pages are newest first unless orderAsc.
  q.filter.descending = !q.has_cursor && !order_asc;
  return q;
}

bool known_event_type(std::string_view type) {
  for (auto t : {kEventCreated, kEventPaused, kEventResumed, kEventUpdated, kEventSnapshotted,
                 kEventTimeoutWarning, kEventKilled}) {
    if (t == type) return true;
  }
  return false;
}

EventLog::EventLog(store::Store& store, EventLogOptions options) : store_(store), opt_(options) {
  if (auto last = store_.last_event_id(); last.ok()) latest_id_ = *last;
  prune();
  thread_ = std::thread([this] { loop(); });
}

EventLog::~EventLog() { stop(); }

EventLog::Slot::~Slot() {
  if (!log) return;
  std::lock_guard lock(log->mu_);
  --log->slots_;
  if (auto it = log->team_slots_.find(team); it != log->team_slots_.end() && --it->second == 0)
    log->team_slots_.erase(it);
}

void EventLog::prune() {
  auto n = store_.prune_events(wall_ms() - opt_.retention.count(), opt_.max_events);
  if (!n.ok()) log_.warn("pruning events: " + n.error().message());
}

void EventLog::record(std::string_view type, const store::SandboxRecord& rec,
                      const boost::json::object& data, store::Store::Durability durability) {
  store::EventRecord e;
  e.ts_ms = wall_ms();
  e.team_id = rec.team_id;
  e.sandbox_id = rec.id;
  e.template_id = rec.template_id;
  e.type = std::string(type);
  e.data = data.empty() ? "{}" : boost::json::serialize(data);
  auto id = store_.append_event(e, durability);
  if (!id.ok()) {
    log_.error("event " + e.type + " of sandbox " + rec.id +
               " not recorded: " + id.error().message());
    return;
  }
  e.id = *id;
  if (webhooks_) webhooks_->dispatch(e);
  bool prune_now = false;
  {
    std::lock_guard lock(mu_);
    if (*id > latest_id_) latest_id_ = *id;
    prune_now = ++appended_ % kPruneEvery == 0;
  }
  cv_.notify_all();
  if (prune_now) prune();
}

Result<std::unique_ptr<EventLog::Slot>> EventLog::reserve(const std::string& team) {
  std::lock_guard lock(mu_);
  if (stopping_) return unavailable("abxd is shutting down");
  if (slots_ >= opt_.max_streams) {
    sweep_ = true;
    cv_.notify_all();
    return Error(ErrorCode::kResourceExhausted, "too many event streams open (" +
                                                    std::to_string(opt_.max_streams) +
                                                    "): close one, or poll with ?stream=false");
  }
  std::size_t& mine = team_slots_[team];
  if (mine >= opt_.max_streams_per_team) {
    sweep_ = true;  // the loop drops streams whose peer left: a retry may find room
    cv_.notify_all();
    if (mine == 0) team_slots_.erase(team);
    return Error(ErrorCode::kResourceExhausted, "too many event streams open for this team (" +
                                                    std::to_string(opt_.max_streams_per_team) +
                                                    "): close one, or poll with ?stream=false");
  }
  ++mine;
  ++slots_;
  return std::make_unique<Slot>(this, team);
}

void EventLog::subscribe(std::unique_ptr<Slot> slot, store::EventFilter filter,
                         std::shared_ptr<http::StreamWriter> writer) {
  filter.limit = kBatch;
  filter.offset = 0;
  filter.descending = false;
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      incoming_.push_back(Sub{std::move(slot), std::move(filter), writer});
      writer.reset();
    }
  }
  if (writer) writer->finish();  // stopped meanwhile
  cv_.notify_all();
}

std::size_t EventLog::streams() const {
  std::lock_guard lock(mu_);
  return slots_;
}

void EventLog::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

boost::json::object EventLog::to_json(const store::EventRecord& e) {
  boost::json::value data = nullptr;
  if (!e.data.empty() && e.data != "{}") {
    boost::system::error_code ec;
    data = boost::json::parse(e.data, ec);
    if (ec) data = nullptr;
  }
  return boost::json::object{{"version", "v1"},
                             {"id", std::to_string(e.id)},
                             {"type", e.type},
                             {"eventData", std::move(data)},
                             {"sandboxId", e.sandbox_id},
                             {"sandboxTeamId", e.team_id},
                             {"sandboxTemplateId", e.template_id},
                             {"timestamp", rfc3339_ms(e.ts_ms)}};
}

std::string EventLog::sse_frame(const store::EventRecord& e) {
  // The JSON is one line (serialize escapes every newline), so one data: line carries it.
  return "id: " + std::to_string(e.id) + "\nevent: " + e.type +
         "\ndata: " + boost::json::serialize(to_json(e)) + "\n\n";
}

void EventLog::loop() {
  std::vector<Sub> subs;
  auto next_beat = std::chrono::steady_clock::now() + opt_.heartbeat;
  std::unique_lock lock(mu_);
  for (;;) {
    const std::int64_t seen_latest = latest_id_;
    cv_.wait_until(lock, next_beat, [&] {
      return stopping_ || sweep_ || !incoming_.empty() || latest_id_ != seen_latest;
    });
    sweep_ = false;
    if (stopping_) break;
    for (auto& s : incoming_) subs.push_back(std::move(s));
    incoming_.clear();
    const std::int64_t latest = latest_id_;
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    const bool beat = now >= next_beat;
    if (beat) next_beat = now + opt_.heartbeat;
    for (auto& s : subs) {
      if (s.writer->closed()) continue;
      // A subscriber whose connection is full is skipped: it catches up from its cursor later.
      while (s.filter.after_id < latest && s.writer->ready()) {
        auto page = store_.list_events(s.filter);
        if (!page.ok()) {
          log_.warn("event stream: " + page.error().message());
          break;
        }
        if (page->empty()) {
          s.filter.after_id = latest;  // none of the newer ones is this subscriber's
          break;
        }
        for (const auto& e : *page) {
          s.writer->write(sse_frame(e));
          s.filter.after_id = e.id;
        }
      }
      if (beat) s.writer->write(": keep-alive\n\n");
    }
    // Closed streams (the peer went away) give their slot back.
    std::erase_if(subs, [](const Sub& s) { return s.writer->closed(); });
    lock.lock();
  }
  for (auto& s : incoming_) subs.push_back(std::move(s));
  incoming_.clear();
  lock.unlock();
  for (auto& s : subs) {
    s.writer->write(": abxd is shutting down\n\n");
    s.writer->finish();
  }
  subs.clear();
}

}  // namespace abx::platform
