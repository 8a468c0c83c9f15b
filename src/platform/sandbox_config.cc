#include "sandbox_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "abx/base/fd.h"
#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/try.h"

namespace abx::platform {

namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

const char* rootfs_name(runtime::RootfsMode m) {
  switch (m) {
    case runtime::RootfsMode::kImage:
      return "image";
    case runtime::RootfsMode::kDirectory:
      return "directory";
    case runtime::RootfsMode::kHost:
      break;
  }
  return "host";
}

json::array strings(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

}  // namespace

Status save_sandbox_config(const std::string& run_dir, const runtime::SandboxConfig& c) {
  json::object o;
  o["format"] = 1;
  o["id"] = c.id;
  o["rootfs"] = rootfs_name(c.rootfs);
  o["lower_dirs"] = strings(c.lower_dirs);
  o["rootfs_dir"] = c.rootfs_dir;
  o["network"] = c.network == runtime::NetworkMode::kHost ? "host" : "none";
  o["veth"] = c.veth.enabled;
  o["argv"] = strings(c.argv);
  o["env"] = strings(c.env);
  o["cwd"] = c.cwd;
  json::array binds;
  for (const auto& b : c.binds)
    binds.emplace_back(
        json::object{{"source", b.source}, {"target", b.target}, {"writable", b.writable}});
  o["binds"] = std::move(binds);
  o["limits"] = json::object{{"memory_bytes", c.limits.memory_bytes},
                             {"pids_max", c.limits.pids_max},
                             {"cpu_millicores", c.limits.cpu_millicores}};
  o["disk_bytes"] = c.disk_bytes;
  o["shm_bytes"] = c.shm_bytes;
  o["rlimit_nofile"] = c.rlimit_nofile;
  o["rlimit_fsize"] = c.rlimit_fsize;
  o["cgroup_parent"] = c.cgroup_parent;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  return write_run_file((fs::path(run_dir) / kSandboxConfigFile).string(),
                        to_json_string(o) + "\n");
}

Status write_run_secret(const std::string& path, const std::string& value) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec)
    return internal_error("create " + fs::path(path).parent_path().string() + ": " + ec.message());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0400);
  if (fd < 0) return internal_error("create " + path + ": " + std::strerror(errno));
  UniqueFd owned(fd);
  if (int err = os::write_all_errno(fd, value); err != 0)
    return internal_error("write " + path + ": " + std::strerror(err));
  return {};
}

Status write_run_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return internal_error("write " + tmp + " failed");
  }
  std::error_code ec;
  fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, ec);
  fs::rename(tmp, path, ec);
  if (ec) return internal_error("rename " + tmp + ": " + ec.message());
  return {};
}

Result<runtime::SandboxConfig> load_sandbox_config(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / kSandboxConfigFile;
  std::ifstream in(path);
  if (!in) return not_found("no " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kFailedPrecondition, path.string() + ": " + why);
  };
  auto v = parse_json_strict(text.str());
  if (!v) return bad(v.error().message());
  const json::object* o = v->if_object();
  if (!o) return bad("not an object");
  runtime::SandboxConfig c;
  try {
    if (o->at("format").to_number<int>() != 1) return bad("unknown format");
    auto str = [&](const char* k) { return std::string(o->at(k).as_string()); };
    auto list = [&](const char* k) {
      std::vector<std::string> out;
      for (const auto& s : o->at(k).as_array()) out.emplace_back(s.as_string());
      return out;
    };
    auto u64 = [&](const json::value& x) { return x.to_number<std::uint64_t>(); };
    c.id = str("id");
    const std::string rootfs = str("rootfs");
    c.rootfs = rootfs == "image"       ? runtime::RootfsMode::kImage
               : rootfs == "directory" ? runtime::RootfsMode::kDirectory
                                       : runtime::RootfsMode::kHost;
    c.lower_dirs = list("lower_dirs");
    c.rootfs_dir = str("rootfs_dir");
    c.network =
        str("network") == "host" ? runtime::NetworkMode::kHost : runtime::NetworkMode::kNone;
    c.veth.enabled = o->at("veth").as_bool();
    c.argv = list("argv");
    c.env = list("env");
    c.cwd = str("cwd");
    for (const auto& b : o->at("binds").as_array()) {
      const auto& bo = b.as_object();
      c.binds.push_back({std::string(bo.at("source").as_string()),
                         std::string(bo.at("target").as_string()), bo.at("writable").as_bool()});
    }
    const auto& lim = o->at("limits").as_object();
    c.limits.memory_bytes = u64(lim.at("memory_bytes"));
    c.limits.pids_max = static_cast<std::uint32_t>(u64(lim.at("pids_max")));
    c.limits.cpu_millicores = static_cast<std::uint32_t>(u64(lim.at("cpu_millicores")));
    c.disk_bytes = u64(o->at("disk_bytes"));
    c.shm_bytes = u64(o->at("shm_bytes"));
    c.rlimit_nofile = u64(o->at("rlimit_nofile"));
    c.rlimit_fsize = u64(o->at("rlimit_fsize"));
    c.cgroup_parent = str("cgroup_parent");
  } catch (const std::exception& e) {
    return bad(std::string("missing or mistyped field (") + e.what() + ")");
  }
  return c;
}

}  // namespace abx::platform
