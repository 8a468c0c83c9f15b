// What envd reports about its sandbox, as E2B's envd does:
//   GET /envs     the default environment of the processes envd starts, a JSON string map
//   GET /metrics  {ts, cpu_count, cpu_used_pct, mem_total, mem_used, mem_total_mib,
//                  mem_used_mib, disk_used, disk_total}
// Both need X-Access-Token when envd has one. The figures come from what the sandbox sees:
// /proc/stat and /proc/meminfo (the host's CPUs and memory: a sandbox shares the host's kernel
// and has no cgroupfs), the CPU affinity mask and statvfs("/") (the sandbox's writable layer).
// The sandbox's own cgroup usage is abxd's GET /sandboxes/{id}/metrics.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "abx/base/error.h"

namespace abx::envd {

// envd's own environment: what every process it starts begins with (process.cc adds the
// user's HOME/USER/LOGNAME and the request's variables on top).
std::map<std::string, std::string> default_environment();

// /etc/hosts naming the sandbox's hostname (abxd sets it to the sandbox id), so that sudo and
// anything else resolving the own hostname find it, in every image (base has no /etc/hosts;
// E2B's and Docker's runtimes write one). `text` is the current file ("" when missing): the
// new text, or nullopt when it already names `hostname`. localhost is added when missing; an
// earlier line of ours (marked "# abx-envd", a forked sandbox's parent's name) is replaced.
std::optional<std::string> hosts_with_hostname(std::string_view text, std::string_view hostname);
// Brings /etc/hosts up to date with the current hostname; cheap when it has not changed since
// the last call (a fork's child runs on with its parent's envd and gets a new hostname).
// Best effort: a read-only root (rootfs: host) is left alone.
void ensure_hosts_entry();

// Aggregate CPU times from /proc/stat's first line: busy and total jiffies.
struct CpuTimes {
  std::uint64_t busy = 0;
  std::uint64_t total = 0;
};
// Parses the "cpu  user nice system idle iowait irq softirq steal …" line; idle and iowait
// are not busy. Errors: invalid_argument for anything else.
Result<CpuTimes> parse_proc_stat(std::string_view text);

// MemTotal and MemAvailable (bytes) from /proc/meminfo; used = total - available.
struct MemInfo {
  std::uint64_t total = 0;
  std::uint64_t used = 0;
};
Result<MemInfo> parse_meminfo(std::string_view text);

// CPU usage between calls, as gopsutil's cpu.Percent(0): each call compares /proc/stat with
// the previous call's reading (the first with the one taken at construction).
class CpuSampler {
 public:
  CpuSampler();
  // Percent of all CPUs busy since the last call, rounded to 2 decimals; 0 if unreadable.
  double used_pct();

 private:
  std::mutex mu_;
  std::optional<CpuTimes> last_;
};

// The /metrics body. Errors: internal when /proc/meminfo or statvfs("/") cannot be read.
Result<boost::json::object> metrics_json(CpuSampler& cpu);

}  // namespace abx::envd
