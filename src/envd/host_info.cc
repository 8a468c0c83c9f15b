#include "host_info.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <vector>

#include "abx/base/cpus.h"

extern char** environ;

namespace abx::envd {

namespace json = boost::json;

namespace {

std::optional<std::string> slurp(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<CpuTimes> read_cpu_times() {
  auto text = slurp("/proc/stat");
  if (!text) return internal_error("cannot read /proc/stat");
  return parse_proc_stat(*text);
}

}  // namespace

std::map<std::string, std::string> default_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string_view::npos && eq > 0)
      env[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  // The sandbox id follows the hostname, which abxd sets to the id: a sandbox forked from
  // another (restored from its checkpoint, envd's environment included) gets its own.
  char host[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0') {
    for (const char* k : {"E2B_SANDBOX_ID", "ABX_SANDBOX_ID"}) {
      if (auto it = env.find(k); it != env.end()) it->second = host;
    }
  }
  return env;
}

std::optional<std::string> hosts_with_hostname(std::string_view text, std::string_view hostname) {
  static constexpr std::string_view kMark = "# abx-envd";
  std::string kept;
  bool has_localhost = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.ends_with(kMark)) continue;  // ours, for an earlier hostname
    std::string_view fields = line.substr(0, line.find('#'));
    std::istringstream in{std::string(fields)};
    std::string addr, name;
    in >> addr;
    while (in >> name) {
      if (name == hostname) return std::nullopt;
      if (name == "localhost") has_localhost = true;
    }
    kept.append(line);
    kept += '\n';
  }
  std::string out;
  if (!has_localhost) out = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  out += kept;
  out += "127.0.1.1\t" + std::string(hostname) + "\t" + std::string(kMark) + "\n";
  return out;
}

void ensure_hosts_entry() {
  static std::mutex mu;
  static std::string done_for;  // the hostname /etc/hosts was last brought up to date with
  char host[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return;
  std::lock_guard lock(mu);
  if (done_for == host) return;
  std::string text;
  {
    std::ifstream in("/etc/hosts");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (auto updated = hosts_with_hostname(text, host)) {
    std::ofstream out("/etc/hosts", std::ios::trunc);  // in place: it may be a mount point
    out << *updated;
    out.flush();  // a read-only root fails here, and is not tried again for this hostname
  }
  done_for = host;
}

Result<CpuTimes> parse_proc_stat(std::string_view text) {
  std::string_view line = text.substr(0, text.find('\n'));
  if (!line.starts_with("cpu ")) return invalid_argument("/proc/stat does not start with 'cpu '");
  line.remove_prefix(4);
  std::vector<std::uint64_t> fields;
  while (!line.empty()) {
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty()) break;
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
    if (ec != std::errc() || (end != line.data() + line.size() && *end != ' '))
      return invalid_argument("bad number in /proc/stat's cpu line");
    fields.push_back(v);
    line.remove_prefix(static_cast<std::size_t>(end - line.data()));
  }
  if (fields.size() < 4) return invalid_argument("/proc/stat's cpu line has too few fields");
  // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already
  // counted in user and nice, so only the first eight add up to the total.
  CpuTimes t;
  for (std::size_t i = 0; i < fields.size() && i < 8; ++i) {
    t.total += fields[i];
    if (i != 3 && i != 4) t.busy += fields[i];
  }
  return t;
}

Result<MemInfo> parse_meminfo(std::string_view text) {
  std::optional<std::uint64_t> total, available;
  while (!text.empty()) {
    std::string_view line = text.substr(0, text.find('\n'));
    text.remove_prefix(std::min(text.size(), line.size() + 1));
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon);
    if (key != "MemTotal" && key != "MemAvailable") continue;
    std::string_view rest = line.substr(colon + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    std::uint64_t kib = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kib);
    if (ec != std::errc()) return invalid_argument("bad number for " + std::string(key));
    (key == "MemTotal" ? total : available) = kib * 1024;
  }
  if (!total || !available) return invalid_argument("/proc/meminfo lacks MemTotal/MemAvailable");
  return MemInfo{*total, *total > *available ? *total - *available : 0};
}

CpuSampler::CpuSampler() {
  if (auto t = read_cpu_times(); t.ok()) last_ = *t;
}

double CpuSampler::used_pct() {
  auto now = read_cpu_times();
  if (!now.ok()) return 0;
  std::lock_guard lock(mu_);
  double pct = 0;
  if (last_ && now->total > last_->total && now->busy >= last_->busy) {
    pct = 100.0 * static_cast<double>(now->busy - last_->busy) /
          static_cast<double>(now->total - last_->total);
    pct = std::round(std::min(pct, 100.0) * 100) / 100;
  }
  last_ = *now;
  return pct;
}

Result<boost::json::object> metrics_json(CpuSampler& cpu) {
  auto meminfo = slurp("/proc/meminfo");
  if (!meminfo) return internal_error("cannot read /proc/meminfo");
  auto mem = parse_meminfo(*meminfo);
  if (!mem.ok()) return internal_error(mem.error().message());
  struct statvfs st {};
  if (::statvfs("/", &st) != 0) return internal_error("statvfs(\"/\") failed");
  const std::uint64_t block = st.f_frsize ? st.f_frsize : st.f_bsize;
  const std::uint64_t disk_total = static_cast<std::uint64_t>(st.f_blocks) * block;
  const std::uint64_t disk_avail = static_cast<std::uint64_t>(st.f_bavail) * block;
  return json::object{
      {"ts", static_cast<std::int64_t>(std::time(nullptr))},
      {"cpu_count", usable_cpus()},
      {"cpu_used_pct", cpu.used_pct()},
      {"mem_total", mem->total},
      {"mem_used", mem->used},
      {"mem_total_mib", mem->total >> 20},
      {"mem_used_mib", mem->used >> 20},
      {"disk_used", disk_total > disk_avail ? disk_total - disk_avail : 0},
      {"disk_total", disk_total},
  };
}

}  // namespace abx::envd
