// GET /sandboxes/{id}/metrics?start=&end=: the sandbox's usage samples (one every 5 s, the last
// hour kept) in E2B's SandboxMetric shape, oldest first.
#include <boost/json.hpp>
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

}  // namespace

Result<Response> sandbox_metrics(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  ABX_ASSIGN_OR_RETURN(auto start_s, unix_seconds(ctx, "start"));
  ABX_ASSIGN_OR_RETURN(auto end_s, unix_seconds(ctx, "end"));
  // Defaults as E2B's: from the sandbox's start until now. Seconds cover their whole second.
  const std::int64_t start_ms = start_s ? *start_s * 1000 : 0;
  const std::int64_t end_ms = end_s ? *end_s * 1000 + 999 : now_ms();
  if (start_s && end_s && *end_s < *start_s)
    return invalid_argument("end must not be before start");
  json::array out;
  const auto cpus = static_cast<std::int64_t>(sb->record.cpu_count + 0.999);
  for (const MetricSample& m : sb->metrics_between(start_ms, end_ms)) {
    out.push_back(json::object{
        {"timestamp", rfc3339_ms(m.timestamp_ms)},
        {"timestampUnix", m.timestamp_ms / 1000},
        {"cpuCount", cpus},
        {"cpuUsedPct", m.cpu_used_pct},
        {"memUsed", static_cast<std::int64_t>(m.mem_used_bytes)},
        {"memTotal", sb->record.memory_mb << 20},
        {"diskUsed", m.disk_used_bytes},
        {"diskTotal", m.disk_total_bytes ? m.disk_total_bytes : sb->record.disk_mb << 20}});
  }
  return http::json_response(200, out);
}

}  // namespace abx::platform::api
