// abx logs <id> [-f] [--since 5m] [--limit N]: what the sandbox's start command and command
// server printed, their restarts, and the platform's lifecycle events (GET
// /sandboxes/{id}/logs), oldest first. -f keeps polling (once a second, from the last
// timestamp seen) until the sandbox is gone or abx is interrupted. --limit N prints at most N
// lines (oldest first, as the API selects them) and then exits.
#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <iostream>
#include <thread>

#include "cli.h"

namespace abx::cli {

namespace {

struct LogsOpts {
  std::string id, since;
  bool follow = false;
  bool network = false;
  int limit = 1000;
};

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void print(const Context& ctx, const client::LogEntry& e) {
  if (ctx.flags.json) {  // one JSON object per line (NDJSON)
    std::cout << boost::json::serialize(boost::json::object{{"timestamp", e.timestamp},
                                                            {"level", e.level},
                                                            {"source", e.source},
                                                            {"stream", e.stream},
                                                            {"message", e.message}})
              << "\n";
  } else {
    std::cout << e.timestamp << " [" << e.source << (e.stream == "stderr" ? " stderr" : "") << "] "
              << e.message << "\n";
  }
  std::cout.flush();
}

// --network: the sandbox's outbound flows and DNS questions with their verdicts.
int network_logs(Context& ctx, const LogsOpts& o, std::int64_t start) {
  auto cfg = ctx.config();
  std::int64_t last = start - 1;
  std::size_t seen_at_last = 0;
  for (bool first = true;; first = false) {
    auto events = client::Sandbox::network_audit(o.id, cfg, std::max<std::int64_t>(last, 0));
    if (!events.ok()) {
      if (!first && events.error().code() == ErrorCode::kNotFound) return kExitOk;
      return ctx.fail(events.error());
    }
    std::size_t skip = seen_at_last;
    for (const auto& e : *events) {
      if (e.timestamp_ms == last && skip > 0) {
        --skip;
        continue;
      }
      if (ctx.flags.json) {
        std::cout << boost::json::serialize(boost::json::object{{"timestamp", e.timestamp_ms},
                                                                {"protocol", e.protocol},
                                                                {"destination", e.destination},
                                                                {"port", e.port},
                                                                {"domain", e.domain},
                                                                {"verdict", e.verdict}})
                  << "\n";
      } else {
        std::cout << e.timestamp_ms << " " << e.verdict << " " << e.protocol << " " << e.destination
                  << (e.port ? ":" + std::to_string(e.port) : "")
                  << (e.domain.empty() ? "" : " " + e.domain) << "\n";
      }
      if (e.timestamp_ms != last) {
        last = e.timestamp_ms;
        seen_at_last = 0;
      }
      ++seen_at_last;
    }
    std::cout.flush();
    if (!std::cout) return kExitOk;
    if (!o.follow) return kExitOk;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int logs(Context& ctx, const LogsOpts& o) {
  std::int64_t start = 0;
  if (!o.since.empty()) {
    auto d = parse_duration(o.since);
    if (!d.ok()) return ctx.fail(d.error());
    start = unix_ms() - d->count() * 1000;
  }
  if (o.limit <= 0 || o.limit > 10'000) return ctx.usage("--limit must be between 1 and 10000");
  if (o.network) return network_logs(ctx, o, start);
  auto cfg = ctx.config();
  // Entries at the last timestamp already printed: the next poll starts at that timestamp
  // (inclusive, millisecond resolution) and skips them.
  std::size_t seen_at_start = 0;
  int left = o.limit;  // lines still to print: --limit caps the output, -f included
  for (bool first = true;; first = false) {
    // Ask for the ones already seen at `start` on top, so a page always has room for new ones.
    int want = static_cast<int>(std::min<std::size_t>(left + seen_at_start, 10'000));
    auto page = client::Sandbox::logs(o.id, cfg, start, want);
    if (!page.ok()) {
      if (!first && page.error().code() == ErrorCode::kNotFound) {
        if (!ctx.flags.json) std::cerr << "abx: sandbox " << o.id << " is gone\n";
        return kExitOk;
      }
      return ctx.fail(page.error());
    }
    std::size_t skip = seen_at_start, fresh = 0;
    for (const auto& e : *page) {
      if (e.timestamp_ms == start && skip > 0) {
        --skip;
        continue;
      }
      print(ctx, e);
      if (!std::cout) return kExitOk;  // the reader went away (a closed pipe)
      if (--left == 0) return kExitOk;
      ++fresh;
      if (e.timestamp_ms != start) {
        start = e.timestamp_ms;
        seen_at_start = 0;
      }
      ++seen_at_start;
    }
    // A full page with something new: more are waiting, ask again at once.
    if (fresh > 0 && page->size() >= static_cast<std::size_t>(want)) continue;
    if (!o.follow) return kExitOk;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void fill_logs(CLI::App* sub, Context& ctx) {
  auto o = std::make_shared<LogsOpts>();
  add_sandbox_arg(*sub, o->id);
  sub->add_flag("-f,--follow", o->follow, "Keep printing new lines until the sandbox is gone");
  sub->add_option("--since", o->since, "Only lines from this long ago: 90s, 5m, 1h");
  sub->add_flag("--network", o->network,
                "The sandbox's outbound connections and DNS questions with their verdicts "
                "(allow, deny, blocked) instead");
  sub->add_option("--limit", o->limit,
                  "Print at most this many lines (the first ones at or after --since), then exit, "
                  "-f included (1-10000)")
      ->capture_default_str();
  sub->callback([&ctx, o] { ctx.exit_code = logs(ctx, *o); });
}

}  // namespace

const TopCommand kLogsCommand{
    "logs", nullptr,
    "Output of the sandbox's start command and command server (with restarts) and its "
    "lifecycle events; --json: one object per line",
    fill_logs};

}  // namespace abx::cli
