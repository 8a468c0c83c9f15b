#include "abx/runtime/cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string_view>
#include <thread>

#include "abx/base/try.h"
#include "sys.h"

namespace abx::runtime {
namespace {

constexpr const char* kLimitControllers[] = {"memory", "pids", "cpu"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<pid_t> read_pids(const std::string& dir) {
  std::vector<pid_t> out;
  auto text = read_file(dir + "/cgroup.procs");
  if (!text) return out;
  std::istringstream in(*text);
  pid_t p;
  while (in >> p) out.push_back(p);
  return out;
}

// Polls `done` every millisecond for up to `limit`.
template <class F>
bool wait_until(F done, std::chrono::milliseconds limit) {
  return os::poll_until(std::chrono::steady_clock::now() + limit,
                        os::Backoff{std::chrono::milliseconds(1), std::chrono::milliseconds(1)},
                        done);
}

// Writes `limits` into the groups of `g` (`v2_dir`: its cgroup2 directory, "" if none).
Status write_limits(const SandboxCgroups& g, const std::string& v2_dir,
                    const CgroupLimits& limits) {
  auto write = [&](const std::string& dir, const std::string& file,
                   const std::string& value) -> Status {
    return write_file(dir + "/" + file, value);
  };
  Status s;
  if (limits.memory_bytes) {
    std::string dir = g.dir_for("memory"), v = std::to_string(limits.memory_bytes);
    if (dir == v2_dir) {
      s = write(dir, "memory.max", v);
      // No swap, and an OOM kills the whole sandbox rather than one random process.
      if (s && exists(dir + "/memory.swap.max")) s = write(dir, "memory.swap.max", "0");
      if (s) s = write(dir, "memory.oom.group", "1");
    } else {
      s = write(dir, "memory.limit_in_bytes", v);
      // memsw (memory+swap) must be >= the memory limit; equal means no swap.
      if (s && exists(dir + "/memory.memsw.limit_in_bytes"))
        s = write(dir, "memory.memsw.limit_in_bytes", v);
    }
  }
  if (s && limits.pids_max)
    s = write(g.dir_for("pids"), "pids.max", std::to_string(limits.pids_max));
  if (s && limits.cpu_millicores) {
    std::string dir = g.dir_for("cpu");
    unsigned long long quota = limits.cpu_millicores * 100ull;  // of a 100000 us period
    if (dir == v2_dir) {
      s = write(dir, "cpu.max", std::to_string(quota) + " 100000");
    } else {
      s = write(dir, "cpu.cfs_period_us", "100000");
      if (s) s = write(dir, "cpu.cfs_quota_us", std::to_string(quota));
    }
  }
  return s;
}

}  // namespace

Result<CgroupLayout> CgroupLayout::detect(const std::string& mountinfo_path) {
  ABX_ASSIGN_OR_RETURN(const std::string text, read_file(mountinfo_path));
  CgroupLayout layout;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "<id> <parent> <maj:min> <root> <mount point> <opts> [optional...] - <fstype> <src> <super>"
    auto sep = line.find(" - ");
    if (sep == std::string::npos) continue;
    auto left = split(line.substr(0, sep), ' ');
    auto right = split(line.substr(sep + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    const std::string& mount_point = left[4];
    const std::string& fstype = right[0];
    if (fstype == "cgroup2") {
      if (layout.v2_root.empty()) layout.v2_root = mount_point;
    } else if (fstype == "cgroup") {
      for (const auto& opt : split(right[2], ',')) {
        if (opt == "rw" || opt == "ro" || opt.find('=') != std::string::npos) continue;
        layout.v1.emplace(opt, mount_point);  // first mount of a hierarchy wins
      }
    }
  }
  if (!layout.v2_root.empty()) {
    if (auto c = read_file(layout.v2_root + "/cgroup.controllers")) {
      std::istringstream cs(*c);
      std::string name;
      while (cs >> name) layout.v2_controllers.insert(name);
    }
  }
  return layout;
}

std::string CgroupLayout::where(const std::string& controller) const {
  if (v2_controllers.count(controller)) return "v2";
  if (v1.count(controller)) return "v1";
  return "";
}

SandboxCgroups SandboxCgroups::existing(const CgroupLayout& layout, const std::string& parent,
                                        const std::string& id) {
  SandboxCgroups g;
  auto add = [&](const std::string& dir) {
    for (const auto& d : g.dirs_)
      if (d == dir) return;
    g.dirs_.push_back(dir);
  };
  if (!layout.v2_root.empty()) {
    g.v2_dir_ = layout.v2_root + "/" + parent + "/" + id;
    add(g.v2_dir_);
  }
  for (const char* c : kLimitControllers) {
    std::string where = layout.where(c);
    if (where == "v2") {
      g.controller_dir_[c] = g.v2_dir_;
    } else if (where == "v1") {
      std::string dir = layout.v1.at(c) + "/" + parent + "/" + id;
      g.controller_dir_[c] = dir;
      add(dir);
    }
  }
  // The v1 freezer kills a tree when there is no cgroup.kill. create() drops it again when
  // cgroup.kill works; listing it here lets cleanup remove it either way.
  if (layout.v1.count("freezer")) {
    g.freezer_dir_ = layout.v1.at("freezer") + "/" + parent + "/" + id;
    add(g.freezer_dir_);
  }
  return g;
}

CgroupUsage SandboxCgroups::usage() const {
  CgroupUsage u;
  if (!v2_dir_.empty()) {
    // cpu.stat is in every v2 cgroup, whichever controllers are enabled: "usage_usec N\n...".
    if (auto stat = read_file(v2_dir_ + "/cpu.stat", 4096)) {
      constexpr std::string_view kKey = "usage_usec ";
      if (auto at = stat->find(kKey);
          at != std::string::npos && (at == 0 || (*stat)[at - 1] == '\n')) {
        u.cpu_usec = std::strtoull(stat->c_str() + at + kKey.size(), nullptr, 10);
      }
    }
  }
  auto number = [](const std::string& path) -> std::uint64_t {
    auto text = read_file(path, 64);
    return text ? std::strtoull(text->c_str(), nullptr, 10) : 0;
  };
  // Without cgroup v2, cpuacct's total (ns) where it shares the cpu hierarchy ("cpu,cpuacct",
  // as systemd mounts v1), which is where the sandbox's cpu group lives.
  if (v2_dir_.empty()) {
    if (const std::string cpu = dir_for("cpu"); !cpu.empty())
      u.cpu_usec = number(cpu + "/cpuacct.usage") / 1000;
  }
  const std::string mem = dir_for("memory");
  if (mem.empty()) return u;
  u.memory_bytes = number(mem + "/memory.usage_in_bytes");                    // v1
  if (u.memory_bytes == 0) u.memory_bytes = number(mem + "/memory.current");  // v2
  return u;
}

std::uint64_t SandboxCgroups::oom_kills() const {
  const std::string mem = dir_for("memory");
  if (mem.empty()) return 0;
  // v2 memory.events and v1 memory.oom_control both carry an "oom_kill N" line.
  for (const char* name : {"/memory.events", "/memory.oom_control"}) {
    auto text = read_file(mem + name, 4096);
    if (!text) continue;
    constexpr std::string_view kKey = "oom_kill ";
    for (std::size_t at = text->find(kKey); at != std::string::npos;
         at = text->find(kKey, at + 1)) {
      if (at == 0 || (*text)[at - 1] == '\n')
        return std::strtoull(text->c_str() + at + kKey.size(), nullptr, 10);
    }
  }
  return 0;
}

std::string SandboxCgroups::dir_for(const std::string& controller) const {
  auto it = controller_dir_.find(controller);
  return it == controller_dir_.end() ? "" : it->second;
}

Result<SandboxCgroups> SandboxCgroups::create(const CgroupLayout& layout, const std::string& parent,
                                              const std::string& id, const CgroupLimits& limits) {
  SandboxCgroups g = existing(layout, parent, id);
  if (limits.memory_bytes && g.dir_for("memory").empty())
    return Error(ErrorCode::kFailedPrecondition,
                 "memory limit set but no memory cgroup controller");
  if (limits.pids_max && g.dir_for("pids").empty())
    return Error(ErrorCode::kFailedPrecondition, "pids limit set but no pids cgroup controller");
  if (limits.cpu_millicores && g.dir_for("cpu").empty())
    return Error(ErrorCode::kFailedPrecondition, "cpu limit set but no cpu cgroup controller");

  // v2: controllers must be enabled in every ancestor's subtree_control before the leaf has
  // their files. Only the root and our parent group are ancestors we own.
  std::string enable;
  for (const char* c : kLimitControllers)
    if (layout.where(c) == "v2") enable += std::string(enable.empty() ? "+" : " +") + c;

  std::vector<std::string> created;
  auto undo = [&] {
    for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());
  };
  for (const auto& dir : g.dirs_) {
    std::string parent_dir = dir.substr(0, dir.rfind('/'));
    if (::mkdir(parent_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      int e = errno;
      undo();
      return os::errno_error("mkdir " + parent_dir, e);
    }
    if (dir == g.v2_dir_ && !enable.empty()) {
      for (const auto& ctl : {layout.v2_root, parent_dir}) {
        if (Status s = write_file(ctl + "/cgroup.subtree_control", enable); !s) {
          undo();
          return s.error();
        }
      }
    }
    if (::mkdir(dir.c_str(), 0755) != 0) {
      int e = errno;
      undo();
      return os::errno_error("mkdir " + dir, e);
    }
    created.push_back(dir);
  }

  if (Status s = write_limits(g, g.v2_dir_, limits); !s) {
    undo();
    return s.error();
  }
  // With a working cgroup.kill the freezer group is redundant; keep it otherwise.
  if (!g.v2_dir_.empty() && exists(g.v2_dir_ + "/cgroup.kill") && !g.freezer_dir_.empty()) {
    ::rmdir(g.freezer_dir_.c_str());
    std::erase(g.dirs_, g.freezer_dir_);
    g.freezer_dir_.clear();
  }
  return g;
}

Status SandboxCgroups::attach(pid_t pid) const {
  std::string p = std::to_string(pid);
  for (const auto& dir : dirs_) ABX_TRY(write_file(dir + "/cgroup.procs", p));
  return {};
}

std::vector<pid_t> SandboxCgroups::pids() const {
  for (const auto& dir : dirs_) {
    auto p = read_pids(dir);
    if (!p.empty()) return p;
  }
  return {};
}

Status SandboxCgroups::send_kill() const {
  if (!v2_dir_.empty() && exists(v2_dir_ + "/cgroup.kill"))
    return write_file(v2_dir_ + "/cgroup.kill", "1");
  if (!freezer_dir_.empty() && exists(freezer_dir_)) return kill();  // freeze, kill, thaw: waits
  for (pid_t p : pids()) ::kill(p, SIGKILL);
  return {};
}

Status SandboxCgroups::kill() const {
  auto empty = [&] { return pids().empty(); };
  if (!v2_dir_.empty() && exists(v2_dir_ + "/cgroup.kill")) {
    ABX_TRY(write_file(v2_dir_ + "/cgroup.kill", "1"));
  } else if (!freezer_dir_.empty() && exists(freezer_dir_)) {
    // Frozen tasks cannot fork, so one pass over cgroup.procs catches the whole tree; SIGKILL
    // is delivered once the group thaws.
    std::string state = freezer_dir_ + "/freezer.state";
    ABX_TRY(write_file(state, "FROZEN"));
    wait_until(
        [&] {
          auto st = read_file(state);
          return st && st->rfind("FROZEN", 0) == 0;
        },
        std::chrono::seconds(2));
    for (pid_t p : read_pids(freezer_dir_)) ::kill(p, SIGKILL);
    ABX_TRY(write_file(state, "THAWED"));
  } else {
    // No freezer: repeat until nothing is left (forks racing the loop are caught next round).
    for (int round = 0; round < 100 && !empty(); ++round)
      for (pid_t p : pids()) ::kill(p, SIGKILL);
  }
  if (!wait_until(empty, std::chrono::seconds(5)))
    return Error(ErrorCode::kDeadlineExceeded, "cgroup " + dirs_.front() + " still has tasks");
  return {};
}

bool SandboxCgroups::frozen() const {
  if (!v2_dir_.empty() && exists(v2_dir_ + "/cgroup.freeze")) {
    auto v = read_file(v2_dir_ + "/cgroup.freeze");
    return v && v->rfind('1', 0) == 0;
  }
  if (!freezer_dir_.empty() && exists(freezer_dir_)) {
    auto st = read_file(freezer_dir_ + "/freezer.state");
    return st && (st->rfind("FROZEN", 0) == 0 || st->rfind("FREEZING", 0) == 0);
  }
  return false;
}

Status SandboxCgroups::freeze(bool frozen) const {
  if (!v2_dir_.empty() && exists(v2_dir_ + "/cgroup.freeze")) {
    // cgroup v2's core freezer needs no controller; cgroup.events reports when it has settled.
    ABX_TRY(write_file(v2_dir_ + "/cgroup.freeze", frozen ? "1" : "0"));
    std::string want = frozen ? "frozen 1" : "frozen 0";
    bool settled = wait_until(
        [&] {
          auto ev = read_file(v2_dir_ + "/cgroup.events");
          return ev && ev->find(want) != std::string::npos;
        },
        std::chrono::seconds(5));
    if (!settled)
      return Error(ErrorCode::kDeadlineExceeded,
                   "cgroup " + v2_dir_ + " did not " + (frozen ? "freeze" : "thaw"));
    return {};
  }
  if (!freezer_dir_.empty() && exists(freezer_dir_)) {
    std::string state = freezer_dir_ + "/freezer.state";
    ABX_TRY(write_file(state, frozen ? "FROZEN" : "THAWED"));
    std::string want = frozen ? "FROZEN" : "THAWED";
    bool settled = wait_until(
        [&] {
          auto st = read_file(state);
          return st && st->rfind(want, 0) == 0;
        },
        std::chrono::seconds(5));
    if (!settled) return Error(ErrorCode::kDeadlineExceeded, "freezer " + freezer_dir_ + " stuck");
    return {};
  }
  return Error(ErrorCode::kFailedPrecondition, "no cgroup freezer available for this sandbox");
}

std::string SandboxCgroups::freezer_dir() const {
  if (!v2_dir_.empty() && exists(v2_dir_ + "/cgroup.freeze")) return v2_dir_;
  if (!freezer_dir_.empty() && exists(freezer_dir_)) return freezer_dir_;
  return {};
}

Status SandboxCgroups::remove() const {
  for (const auto& dir : dirs_) {
    // A killed task leaves the group shortly after it is reaped; rmdir says EBUSY meanwhile.
    int err = 0;
    bool ok = wait_until(
        [&] {
          if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
          err = errno;
          return false;
        },
        std::chrono::seconds(5));
    if (!ok) return os::errno_error("rmdir " + dir, err);
  }
  return {};
}

}  // namespace abx::runtime
