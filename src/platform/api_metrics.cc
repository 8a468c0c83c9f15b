// Usage metrics in E2B's shapes: GET /sandboxes/{id}/metrics?start=&end= (one sandbox's samples,
// one every 5 s, the last hour kept, oldest first), GET /sandboxes/metrics (the latest of each of
// several), GET /teams and GET /teams/{teamID}/metrics[/max] (the team's running sandboxes and
// start rate, sampled every 5 s). GET /metrics: abxd's own figures in Prometheus' text format
// (where creates spend their time, step by step).
#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <string>

#include "abx/base/time.h"
#include "abx/base/try.h"
#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;
using http::Response;

namespace {

// Unix seconds, as the SDK sends them (Math.round(date.getTime() / 1000)).
Result<std::optional<std::int64_t>> unix_seconds(const Context& ctx, const char* key) {
  for (auto p : ctx.url.params()) {
    if (p.key != key) continue;
    std::string v = p.has_value ? std::string(p.value) : std::string();
    if (v.empty()) return std::optional<std::int64_t>();
    if (v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos) {
      return invalid_argument(std::string(key) + " must be a Unix time in seconds");
    }
    return std::optional<std::int64_t>(std::stoll(v));
  }
  return std::optional<std::int64_t>();
}

json::object metric_json(const LiveSandbox& sb, const MetricSample& m) {
  const auto cpus = static_cast<std::int64_t>(sb.record.cpu_count + 0.999);
  return json::object{
      {"timestamp", rfc3339_ms(m.timestamp_ms)},
      {"timestampUnix", m.timestamp_ms / 1000},
      {"cpuCount", cpus},
      {"cpuUsedPct", m.cpu_used_pct},
      {"memUsed", static_cast<std::int64_t>(m.mem_used_bytes)},
      {"memTotal", sb.record.memory_mb << 20},
      {"diskUsed", m.disk_used_bytes},
      {"diskTotal", m.disk_total_bytes ? m.disk_total_bytes : sb.record.disk_mb << 20}};
}

// The [start, end] window of a metrics route in ms: Unix seconds, each covering its whole
// second; `default_start_ms` when start is absent, now when end is.
Result<std::pair<std::int64_t, std::int64_t>> window_ms(const Context& ctx,
                                                        std::int64_t default_start_ms) {
  ABX_ASSIGN_OR_RETURN(auto start_s, unix_seconds(ctx, "start"));
  ABX_ASSIGN_OR_RETURN(auto end_s, unix_seconds(ctx, "end"));
  if (start_s && end_s && *end_s < *start_s)
    return invalid_argument("end must not be before start");
  return std::pair{start_s ? *start_s * 1000 : default_start_ms,
                   end_s ? *end_s * 1000 + 999 : now_ms()};
}

std::string seconds_text(std::chrono::nanoseconds d) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9f", static_cast<double>(d.count()) / 1e9);
  return buf;
}

}  // namespace

// Successful creates since abxd started: per step (the names SandboxManager::create and
// runtime's spawn mark) the count, the sum and the longest, and the whole create as a histogram.
// abxd-wide, not per team: step timings say nothing about any sandbox.
Result<Response> abxd_metrics(Context& ctx) {
  const TimelineStats::Snapshot s = ctx.sandboxes.create_timings().snapshot();
  std::string out;
  out += "# HELP abx_create_step_seconds Time successful sandbox creates spent in each step.\n";
  out += "# TYPE abx_create_step_seconds summary\n";
  for (const auto& step : s.steps) {
    out += "abx_create_step_seconds_sum{step=\"" + step.name + "\"} " + seconds_text(step.total) +
           "\n";
    out += "abx_create_step_seconds_count{step=\"" + step.name + "\"} " +
           std::to_string(step.count) + "\n";
  }
  out += "# HELP abx_create_step_max_seconds The longest each step took.\n";
  out += "# TYPE abx_create_step_max_seconds gauge\n";
  for (const auto& step : s.steps) {
    out +=
        "abx_create_step_max_seconds{step=\"" + step.name + "\"} " + seconds_text(step.max) + "\n";
  }
  out += "# HELP abx_create_seconds Successful sandbox creates, request to ready.\n";
  out += "# TYPE abx_create_seconds histogram\n";
  for (std::size_t i = 0; i < TimelineStats::kBucketsMs.size(); ++i) {
    char le[32];
    std::snprintf(le, sizeof le, "%g", TimelineStats::kBucketsMs[i] / 1000);
    out += std::string("abx_create_seconds_bucket{le=\"") + le + "\"} " +
           std::to_string(s.buckets[i]) + "\n";
  }
  out += "abx_create_seconds_bucket{le=\"+Inf\"} " + std::to_string(s.count) + "\n";
  out += "abx_create_seconds_sum " + seconds_text(s.total) + "\n";
  out += "abx_create_seconds_count " + std::to_string(s.count) + "\n";
  const runtime::LayerPool::Stats pool = ctx.sandboxes.layer_pool_stats();
  out += "# HELP abx_layer_pool_ready Writable layers made ahead of creates, not yet taken.\n";
  out += "# TYPE abx_layer_pool_ready gauge\n";
  out += "abx_layer_pool_ready " + std::to_string(pool.ready) + "\n";
  out += "# HELP abx_layer_pool_takes_total Creates that took a ready layer (hit) or made one.\n";
  out += "# TYPE abx_layer_pool_takes_total counter\n";
  out += "abx_layer_pool_takes_total{result=\"hit\"} " + std::to_string(pool.hits) + "\n";
  out += "abx_layer_pool_takes_total{result=\"miss\"} " + std::to_string(pool.misses) + "\n";
  const SandboxPool::Stats sp = ctx.sandboxes.sandbox_pool_stats();
  out += "# HELP abx_sandbox_pool_ready Sandboxes booted ahead of creates, not yet taken.\n";
  out += "# TYPE abx_sandbox_pool_ready gauge\n";
  out += "abx_sandbox_pool_ready " + std::to_string(sp.ready) + "\n";
  out +=
      "# HELP abx_sandbox_pool_takes_total Creates that took a ready pooled sandbox (hit), "
      "waited for the one being booted (wait), or booted their own (miss).\n";
  out += "# TYPE abx_sandbox_pool_takes_total counter\n";
  for (const auto& [result, n] :
       {std::pair{"hit", sp.hits}, std::pair{"wait", sp.waits}, std::pair{"miss", sp.misses}})
    out += std::string("abx_sandbox_pool_takes_total{result=\"") + result + "\"} " +
           std::to_string(n) + "\n";
  out +=
      "# HELP abx_sandbox_pool_boots_total Sandboxes the pool booted (ok), failed to boot, "
      "or destroyed untaken (discarded: idle, stale, shutdown).\n";
  out += "# TYPE abx_sandbox_pool_boots_total counter\n";
  for (const auto& [result, n] : {std::pair{"ok", sp.booted}, std::pair{"failed", sp.failed},
                                  std::pair{"discarded", sp.discarded}})
    out += std::string("abx_sandbox_pool_boots_total{result=\"") + result + "\"} " +
           std::to_string(n) + "\n";
  out += "# HELP abx_sandboxes_live Live sandboxes (running or paused).\n";
  out += "# TYPE abx_sandboxes_live gauge\n";
  out += "abx_sandboxes_live " + std::to_string(ctx.sandboxes.all().size()) + "\n";
  Response r{boost::beast::http::status::ok, 11};
  r.set(boost::beast::http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  r.body() = std::move(out);
  r.prepare_payload();
  return r;
}

Result<Response> sandbox_metrics(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  // Defaults as E2B's: from the sandbox's start until now.
  ABX_ASSIGN_OR_RETURN(auto window, window_ms(ctx, 0));
  json::array out;
  for (const MetricSample& m : sb->metrics_between(window.first, window.second))
    out.push_back(metric_json(*sb, m));
  return http::json_response(200, out);
}

// GET /sandboxes/metrics?sandbox_ids=a,b: each listed sandbox's latest sample, keyed by id
// (E2B's SandboxesWithMetrics). Ids that name no live sandbox of the team, or one without a
// sample yet, are left out, as E2B leaves them; more than 100 ids is E2B's 400.
Result<Response> sandboxes_metrics(Context& ctx) {
  std::vector<std::string> ids;
  for (auto p : ctx.url.params()) {
    if (p.key != "sandbox_ids") continue;
    std::string_view v = p.value;
    while (!v.empty()) {
      auto comma = v.find(',');
      std::string id(v.substr(0, comma));
      v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
      if (!id.empty()) ids.push_back(std::move(id));
    }
  }
  if (ids.empty()) return invalid_argument("sandbox_ids is required: a comma-separated list");
  if (ids.size() > 100) return invalid_argument("Too many sandboxes requested, maximum is 100");
  json::object out;
  for (const auto& raw : ids) {
    const std::string id = raw.substr(0, raw.find('-'));  // <id> or <id>-<clientID>
    auto sb = ctx.sandboxes.find(id);
    if (!sb || sb->record.team_id != ctx.team) continue;
    auto samples = sb->metrics_between(0, now_ms());
    if (!samples.empty()) out[id] = metric_json(*sb, samples.back());
  }
  return http::json_response(200, json::object{{"sandboxes", std::move(out)}});
}

namespace {

// A team route's {teamID}: the credential's own team only (E2B's 403 for another).
Status check_team(const Context& ctx) {
  if (ctx.params[0] != ctx.team) {
    return Error(ErrorCode::kPermissionDenied,
                 "You are not authorized to access this team's (" + ctx.params[0] + ") metrics");
  }
  return {};
}

json::object team_metric_json(const TeamSample& s) {
  return json::object{{"concurrentSandboxes", s.concurrent_sandboxes},
                      {"sandboxStartRate", s.sandbox_start_rate},
                      {"timestamp", rfc3339_ms(s.timestamp_ms)},
                      {"timestampUnix", s.timestamp_ms / 1000}};
}

}  // namespace

// GET /teams: the credential's team (abxd's teams are tenants of one operator: a key sees its
// own team only). `apiKey` is the key the request presented (abxd keeps only digests), empty for
// a signed request.
Result<Response> list_teams(Context& ctx) {
  std::string key(ctx.req["X-API-KEY"]);
  if (key.empty()) {
    std::string_view a = ctx.req[boost::beast::http::field::authorization];
    if (a.size() > 7 && boost::beast::iequals(a.substr(0, 7), "bearer ")) key = a.substr(7);
  }
  json::array out;
  out.push_back(
      json::object{{"teamID", ctx.team}, {"name", ctx.team}, {"apiKey", key}, {"isDefault", true}});
  return http::json_response(200, out);
}

// GET /teams/{teamID}/metrics?start=&end=: the team's samples (every 5 s, the last hour since
// abxd started), oldest first; default window: the last hour.
Result<Response> team_metrics(Context& ctx) {
  ABX_TRY(check_team(ctx));
  ABX_ASSIGN_OR_RETURN(auto window, window_ms(ctx, now_ms() - 3600 * 1000));
  json::array out;
  for (const auto& s : ctx.sandboxes.team_metrics(ctx.team, window.first, window.second))
    out.push_back(team_metric_json(s));
  return http::json_response(200, out);
}

// GET /teams/{teamID}/metrics/max?metric=concurrent_sandboxes|sandbox_start_rate: the sample
// with the highest value in the window (the earliest of equals); value 0 at the window's end
// when there is none.
Result<Response> team_metrics_max(Context& ctx) {
  ABX_TRY(check_team(ctx));
  std::string metric;
  for (auto p : ctx.url.params())
    if (p.key == "metric") metric = p.value;
  if (metric != "concurrent_sandboxes" && metric != "sandbox_start_rate")
    return invalid_argument("metric must be concurrent_sandboxes or sandbox_start_rate");
  ABX_ASSIGN_OR_RETURN(auto window, window_ms(ctx, now_ms() - 3600 * 1000));
  std::int64_t at = window.second;
  double best = 0;
  bool any = false;
  for (const auto& s : ctx.sandboxes.team_metrics(ctx.team, window.first, window.second)) {
    double v = metric == "concurrent_sandboxes" ? static_cast<double>(s.concurrent_sandboxes)
                                                : s.sandbox_start_rate;
    if (!any || v > best) {
      best = v;
      at = s.timestamp_ms;
      any = true;
    }
  }
  json::value value = metric == "concurrent_sandboxes"
                          ? json::value(static_cast<std::int64_t>(best))
                          : json::value(best);
  return http::json_response(200, json::object{{"timestamp", rfc3339_ms(at)},
                                               {"timestampUnix", at / 1000},
                                               {"value", std::move(value)}});
}

}  // namespace abx::platform::api
