// GET /sandboxes/{id}/logs?start=<ms>&limit=N: what a sandbox's programs printed and what
// happened to it, in E2B's SandboxLogs shape:
//   {"logs":       [{"timestamp": RFC 3339, "line": "…"}],
//    "logEntries": [{"timestamp", "level", "message", "fields": {"source", "stream"}}]}
// Two sources, merged oldest first: envd's output log (the start command's and command
// server's stdout/stderr and the supervisor's started/exited/restarting events; envd's GET
// /logs, src/envd/output_log.h) and abxd's own lifecycle events of the sandbox (created,
// paused, resumed, timeout set or reached, killed; source "abxd"). `start` (Unix ms, inclusive)
// and `limit` (default 1000, at most 10 000) select as E2B's do. A paused sandbox is not woken
// for its logs: only abxd's events are returned, with a note.
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

namespace {

struct Entry {
  std::int64_t ms;
  std::string level, message, source, stream;
};

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

}  // namespace

Result<Response> sandbox_logs(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  ABX_ASSIGN_OR_RETURN(std::int64_t start, query_number(ctx, "start", 0, INT64_MAX));
  ABX_ASSIGN_OR_RETURN(std::int64_t limit, query_number(ctx, "limit", 1000, 10'000));
  std::vector<Entry> all;
  for (const auto& e : sb->events_since(start))
    all.push_back({e.timestamp_ms, e.level, e.message, "abxd", "event"});
  auto rt = sb->runtime();
  Result<std::vector<EnvdLogLine>> lines =
      rt ? Result<std::vector<EnvdLogLine>>(std::vector<EnvdLogLine>{})
         : Error(ErrorCode::kUnavailable, "the sandbox is paused to disk");
  if (sb->paused) {
    all.push_back({now_ms(), "info",
                   "the sandbox is paused: its programs' output is shown once it runs again",
                   "abxd", "event"});
  } else if (rt && (lines = read_envd_log(*rt, sb->access_token, start, limit)).ok()) {
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
  if (all.size() > static_cast<std::size_t>(limit)) all.resize(static_cast<std::size_t>(limit));
  json::array logs, entries;
  for (const auto& e : all) {
    std::string ts = rfc3339_ms(e.ms);
    logs.push_back(json::object{{"timestamp", ts}, {"line", e.message}});
    entries.push_back(
        json::object{{"timestamp", ts},
                     {"level", e.level},
                     {"message", e.message},
                     {"fields", json::object{{"source", e.source}, {"stream", e.stream}}}});
  }
  return http::json_response(
      200, json::object{{"logs", std::move(logs)}, {"logEntries", std::move(entries)}});
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
