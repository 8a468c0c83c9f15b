// GET /sandboxes/{id}/logs?start=<ms>&limit=N: what a sandbox's programs printed and what
// happened to it, in E2B's SandboxLogs shape:
//   {"logs":       [{"timestamp": RFC 3339, "line": "{\"level\":…,\"logger\":…,\"message\":…}"}],
//    "logEntries": [{"timestamp", "level", "message", "fields": {"source", "stream"}}]}
// Each `line` is, as E2B's are, one JSON object in a string (level, logger, message; here also
// stream): the official CLI's `e2b sandbox logs` parses it and fails on plain text.
// Two sources, merged oldest first: envd's output log (the start command's and command
// server's stdout/stderr and the supervisor's started/exited/restarting events; envd's GET
// /logs, src/envd/output_log.h) and abxd's own lifecycle events of the sandbox (created,
// paused, resumed, timeout set or reached, killed; source "abxd"). `start` (Unix ms, inclusive)
// and `limit` (default 1000, at most 10 000) select as E2B's do. A paused sandbox is not woken
// for its logs: only abxd's events are returned, with a note.
#include <algorithm>
#include <boost/json.hpp>
#include <chrono>

#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/http/client.h"
#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using http::Response;

Result<std::int64_t> query_number(const Context& ctx, const char* key, std::int64_t dflt,
                                  std::int64_t max) {
  for (auto p : ctx.url.params()) {
    if (p.key != key) continue;
    std::string v = p.has_value ? std::string(p.value) : std::string();
    if (v.empty()) return dflt;
    if (v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument(std::string(key) + " must be a non-negative integer");
    return std::min<std::int64_t>(std::stoll(v), max);
  }
  return dflt;
}

// E2B's LogLevel order; a level outside it (none is made today) ranks as info.
int level_rank(std::string_view level) {
  if (level == "debug") return 0;
  if (level == "warn") return 2;
  if (level == "error") return 3;
  return 1;
}

Result<LogPage> log_page(const Context& ctx, std::int64_t default_limit, std::int64_t max_limit) {
  LogPage page;
  std::string direction = "forward", level;
  for (auto p : ctx.url.params()) {
    if (p.key == "direction") direction = p.value;
    if (p.key == "level") level = p.value;
    if (p.key == "search") page.search = p.value;
  }
  if (direction != "forward" && direction != "backward")
    return invalid_argument("direction must be forward or backward");
  if (!level.empty() && level != "debug" && level != "info" && level != "warn" && level != "error")
    return invalid_argument("level must be one of debug, info, warn, error");
  page.backward = direction == "backward";
  page.min_rank = level.empty() ? 0 : level_rank(level);
  ABX_ASSIGN_OR_RETURN(page.cursor,
                       query_number(ctx, "cursor", page.backward ? now_ms() : 0, INT64_MAX));
  ABX_ASSIGN_OR_RETURN(page.limit, query_number(ctx, "limit", default_limit, max_limit));
  return page;
}

bool LogPage::wants(std::int64_t ms, std::string_view level, std::string_view message) const {
  if (backward ? ms > cursor : ms < cursor) return false;
  if (level_rank(level) < min_rank) return false;
  return search.empty() || message.find(search) != std::string_view::npos;
}

namespace {

struct Entry {
  std::int64_t ms;
  std::string level, message, source, stream;
};

}  // namespace

namespace {

// abxd's events of `sb` and envd's output lines at or after `start` (envd gives at most
// `limit`), merged oldest first.
std::vector<Entry> collect(LiveSandbox& sb, std::int64_t start, std::int64_t limit) {
  std::vector<Entry> all;
  for (const auto& e : sb.events_since(start))
    all.push_back({e.timestamp_ms, e.level, e.message, "abxd", "event"});
  auto rt = sb.runtime();
  Result<std::vector<EnvdLogLine>> lines =
      rt ? Result<std::vector<EnvdLogLine>>(std::vector<EnvdLogLine>{})
         : Error(ErrorCode::kUnavailable, "the sandbox is paused to disk");
  if (sb.paused) {
    all.push_back({now_ms(), "info",
                   "the sandbox is paused: its programs' output is shown once it runs again",
                   "abxd", "event"});
  } else if (rt && (lines = read_envd_log(*rt, sb.access_token, start, limit)).ok()) {
    for (auto& l : *lines) {
      all.push_back({l.timestamp_ms, std::move(l.level), std::move(l.line), std::move(l.source),
                     std::move(l.stream)});
    }
  } else {
    all.push_back(
        {now_ms(), "warn", "cannot read envd's logs: " + lines.error().message(), "abxd", "event"});
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Entry& a, const Entry& b) { return a.ms < b.ms; });
  return all;
}

json::object entry_json(const Entry& e) {
  return json::object{{"timestamp", rfc3339_ms(e.ms)},
                      {"level", e.level},
                      {"message", e.message},
                      {"fields", json::object{{"source", e.source}, {"stream", e.stream}}}};
}

}  // namespace

Result<Response> sandbox_logs(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  ABX_ASSIGN_OR_RETURN(std::int64_t start, query_number(ctx, "start", 0, INT64_MAX));
  ABX_ASSIGN_OR_RETURN(std::int64_t limit, query_number(ctx, "limit", 1000, 10'000));
  std::vector<Entry> all = collect(*sb, start, limit);
  if (all.size() > static_cast<std::size_t>(limit)) all.resize(static_cast<std::size_t>(limit));
  json::array logs, entries;
  for (const auto& e : all) {
    json::object line{
        {"level", e.level}, {"logger", e.source}, {"message", e.message}, {"stream", e.stream}};
    logs.push_back(json::object{{"timestamp", rfc3339_ms(e.ms)}, {"line", json::serialize(line)}});
    entries.push_back(entry_json(e));
  }
  return http::json_response(
      200, json::object{{"logs", std::move(logs)}, {"logEntries", std::move(entries)}});
}

// GET /v2/sandboxes/{id}/logs?cursor=<ms>&direction=forward|backward&level=&search=&limit=:
// E2B's SandboxLogsV2Response {"logs": [SandboxLogEntry]}. forward (the default): entries at or
// after `cursor` (default 0), oldest first; backward: entries at or before `cursor` (default
// now), newest first — the next page's cursor is then the last entry's time. `level` keeps that
// level and above (debug < info < warn < error), `search` entries whose message contains it
// (case-sensitive); `limit` defaults to 1000, at most 10 000.
Result<Response> sandbox_logs_v2(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  ABX_ASSIGN_OR_RETURN(LogPage page, log_page(ctx, 1000, 10'000));
  // Filters apply before the limit: everything envd keeps is read (its ring holds at most 10 000
  // lines), from the cursor on when reading forward.
  std::vector<Entry> all = collect(*sb, page.backward ? 0 : page.cursor, 10'000);
  if (page.backward) std::reverse(all.begin(), all.end());
  json::array logs;
  for (const auto& e : all) {
    if (logs.size() >= static_cast<std::size_t>(page.limit)) break;
    if (page.wants(e.ms, e.level, e.message)) logs.push_back(entry_json(e));
  }
  return http::json_response(200, json::object{{"logs", std::move(logs)}});
}

// GET /sandboxes/{id}/network/audit?start=<unix ms>: the sandbox's outbound flows and DNS
// questions with their verdicts, oldest first (abx logs --network).
Result<Response> sandbox_network_audit(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  ABX_ASSIGN_OR_RETURN(std::int64_t start, query_number(ctx, "start", 0, INT64_MAX));
  json::array events;
  if (SandboxNetwork* net = ctx.sandboxes.options().network)
    for (const auto& e : net->audit(sb->record.id, start)) events.push_back(e.to_json());
  return http::json_response(200, json::object{{"events", std::move(events)}});
}

}  // namespace abx::platform::api
