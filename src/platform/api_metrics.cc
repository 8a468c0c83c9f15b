// GET /sandboxes/{id}/metrics: one sample of the sandbox's usage, in E2B's SandboxMetric shape.
#include <boost/json.hpp>

#include "abx/base/time.h"
#include "abx/base/try.h"
#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;
using http::Response;

Result<Response> sandbox_metrics(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(auto sb, live_sandbox(ctx));
  const runtime::CgroupUsage usage = sb->sandbox.cgroups().usage();
  const std::int64_t now = now_ms();
  json::object m{{"timestamp", rfc3339_ms(now)},
                 {"timestampUnix", now / 1000},
                 {"cpuCount", static_cast<std::int64_t>(sb->record.cpu_count + 0.999)},
                 {"cpuUsedPct", 0.0},
                 {"memUsed", static_cast<std::int64_t>(usage.memory_bytes)},
                 {"memTotal", sb->record.memory_mb << 20},
                 {"diskUsed", 0},
                 {"diskTotal", sb->record.disk_mb << 20}};
  return http::json_response(200, json::array{m});
}

}  // namespace abx::platform::api
