#include "abx/templates/template.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>

#include "abx/base/os.h"
#include "abx/base/try.h"
#include "yaml_strict.h"

namespace abx::templates {
namespace json = boost::json;
namespace fs = std::filesystem;
using yaml::Node;

bool Template::has(Capability c) const {
  return std::find(capabilities.begin(), capabilities.end(), c) != capabilities.end();
}

const CustomCommand* Template::find_command(std::string_view name) const {
  for (const auto& c : custom_commands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

namespace {

// abx-server as every sandbox sees it (the /opt/abx bundle): `server: {python: …}` runs it.
constexpr std::string_view kBundledServerPath = "/opt/abx/bin/abx-server";

// Converts the YAML tree to a Template; every error names the node's position.
class SchemaReader {
 public:
  explicit SchemaReader(std::string file) : file_(std::move(file)) {}

  Error err(const Node& n, const std::string& msg) const {
    return invalid_argument(file_ + ":" + std::to_string(n.line) + ":" + std::to_string(n.column) +
                            ": " + msg);
  }

  // Rejects keys outside `allowed`, naming the key and its line.
  Status only_keys(const Node& map, std::initializer_list<std::string_view> allowed,
                   std::string_view where) const {
    for (const auto& [k, v] : map.entries) {
      if (std::find(allowed.begin(), allowed.end(), k.value) == allowed.end()) {
        std::string list;
        for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        return err(k, "unknown key '" + k.value + "' in " + std::string(where) +
                          " (allowed: " + list + ")");
      }
    }
    return {};
  }

  Result<std::string> image_reference(const Node& v, const std::string& ref,
                                      const fs::path& file) const;

  Result<std::string> string(const Node& n, std::string_view what) const {
    if (n.kind != Node::Kind::kScalar) return err(n, std::string(what) + " must be a string");
    if (n.value.find('\0') != std::string::npos) return err(n, std::string(what) + " contains NUL");
    return n.value;
  }

  Result<std::int64_t> integer(const Node& n, std::string_view what, std::int64_t lo,
                               std::int64_t hi) const {
    std::int64_t v = 0;
    if (n.kind != Node::Kind::kScalar || n.quoted || !parse_int(n.value, v)) {
      return err(n, std::string(what) + " must be an integer");
    }
    if (v < lo || v > hi) {
      return err(n, std::string(what) + " must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
    }
    return v;
  }

  Result<double> number(const Node& n, std::string_view what) const {
    double d = 0;
    if (n.kind != Node::Kind::kScalar || n.quoted || !parse_double(n.value, d)) {
      return err(n, std::string(what) + " must be a number");
    }
    return d;
  }

  Result<bool> boolean(const Node& n, std::string_view what) const {
    if (n.kind == Node::Kind::kScalar && !n.quoted && n.value == "true") return true;
    if (n.kind == Node::Kind::kScalar && !n.quoted && n.value == "false") return false;
    return err(n, std::string(what) + " must be true or false");
  }

  // "512Mi", "1Gi", "100M", "1048576": binary (Ki, Mi, Gi, Ti) or decimal (K, M, G, T) units.
  Result<std::int64_t> size(const Node& n, std::string_view what) const {
    Error bad = err(n, std::string(what) + " must be a size such as 512Mi, 1Gi or 1048576");
    if (n.kind != Node::Kind::kScalar) return bad;
    std::string_view s = n.value;
    std::size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
    std::int64_t v = 0;
    if (digits == 0 || !parse_int(s.substr(0, digits), v)) return bad;
    std::string_view unit = s.substr(digits);
    static const std::pair<std::string_view, std::int64_t> kUnits[] = {
        {"", 1},           {"K", 1000},          {"M", 1000000},
        {"G", 1000000000}, {"T", 1000000000000}, {"Ki", 1LL << 10},
        {"Mi", 1LL << 20}, {"Gi", 1LL << 30},    {"Ti", 1LL << 40}};
    for (const auto& [u, mult] : kUnits) {
      if (u == unit) {
        if (v <= 0 || v > (std::int64_t{1} << 50) / mult) {
          return err(n, std::string(what) + " is out of range");
        }
        return v * mult;
      }
    }
    return bad;
  }

  // A command: a string (run by /bin/sh -c) or a non-empty list of strings (argv).
  Result<std::vector<std::string>> command(const Node& n, std::string_view what) const {
    if (n.kind == Node::Kind::kScalar) {
      ABX_ASSIGN_OR_RETURN(auto s, string(n, what));
      if (s.empty()) return err(n, std::string(what) + " is empty");
      return std::vector<std::string>{"/bin/sh", "-c", s};
    }
    if (n.kind != Node::Kind::kSeq || n.items.empty()) {
      return err(n, std::string(what) + " must be a string or a non-empty list of strings");
    }
    std::vector<std::string> argv;
    for (const auto& item : n.items) {
      ABX_ASSIGN_OR_RETURN(auto s, string(item, what));
      argv.push_back(std::move(s));
    }
    return argv;
  }

  Result<std::int64_t> duration_seconds(const Node& n, std::string_view what) const {
    constexpr std::int64_t kMax = 30LL * 24 * 3600;
    Error bad = err(n, std::string(what) + " must be seconds or a duration such as 90s, 5m, 2h");
    if (n.kind != Node::Kind::kScalar || n.value.empty()) return bad;
    std::string_view s = n.value;
    std::int64_t mult = 1;
    switch (s.back()) {
      case 's':
        s.remove_suffix(1);
        break;
      case 'm':
        mult = 60;
        s.remove_suffix(1);
        break;
      case 'h':
        mult = 3600;
        s.remove_suffix(1);
        break;
      default:
        if (n.quoted) return bad;
    }
    std::int64_t v = 0;
    if (s.empty() || s[0] == '-' || !parse_int(s, v) || v <= 0 || v > kMax / mult) {
      return err(n, std::string(what) + " must be between 1s and 30 days");
    }
    return v * mult;
  }

  static bool parse_int(std::string_view s, std::int64_t& out) {
    if (s.empty() || s[0] == '+') return false;
    if (s.size() > 1 && s[0] == '0') return false;  // no octal look-alikes
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  }

  static bool parse_double(std::string_view s, double& out) {
    if (s.empty() || s[0] == '+') return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
  }

  Result<Template> read(const Node& root, const fs::path& file) const;

 private:
  Status read_resources(const Node& n, Resources& r) const;
  Result<std::optional<ServerSpec>> read_server(const Node& n, const std::string& key,
                                                std::uint16_t default_port) const;
  Status read_capabilities(const Node& n, Template& t) const;
  Result<CustomCommand> read_custom_command(const Node& key, const Node& n) const;
  Result<registry::CommandArg> read_arg(const Node& n) const;

  std::string file_;
};

bool valid_template_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(id[0])) return false;
  return std::all_of(id.begin(), id.end(),
                     [&](char c) { return alnum(c) || c == '.' || c == '_' || c == '-'; });
}

bool valid_env_name(std::string_view s) {
  if (s.empty() || s.size() > 256 || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// The `image:` value with relative archive and layout paths resolved against the file's folder.
// Only the shape is checked here (abxd parses the reference when it resolves it).
Result<std::string> SchemaReader::image_reference(const Node& v, const std::string& ref,
                                                  const fs::path& file) const {
  constexpr std::size_t kMaxRef = 1024;
  if (ref.empty() || ref.size() > kMaxRef) return err(v, "image must be 1-1024 characters");
  for (char c : ref) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return err(v, "image must not contain spaces or control characters");
    }
  }
  for (std::string_view prefix : {"oci-archive:", "docker-archive:", "oci:"}) {
    if (ref.rfind(prefix, 0) != 0) continue;
    std::string rest = ref.substr(prefix.size());
    if (rest.empty()) return err(v, "image '" + ref + "' names no path");
    if (rest[0] == '/') return ref;
    return std::string(prefix) + (file.parent_path() / rest).lexically_normal().string();
  }
  if (ref.rfind("abx:", 0) == 0 && !valid_template_id(ref.substr(4))) {
    return err(v, "image '" + ref + "': abx:NAME needs a template name ([a-z0-9][a-z0-9._-]*)");
  }
  return ref;
}

// One function of ~90 lines on purpose: one branch per template.yaml key, in one loop over the
// mapping (each branch's detail is a reader above).
Result<Template> SchemaReader::read(const Node& root, const fs::path& file) const {
  if (root.kind != Node::Kind::kMap) {
    Node at = root;
    if (at.line == 0) at.line = at.column = 1;
    return err(at, "a template must be a mapping with at least 'id'");
  }
  ABX_TRY(
      only_keys(root,
                {"id", "description", "image", "rootfs", "env", "start", "server", "interpreter",
                 "resources", "network", "timeout", "capabilities", "custom_commands"},
                "template"));
  Template t;
  t.source = file.string();
  const Node* id = root.find("id");
  if (id == nullptr) return err(root, "missing required key 'id'");
  ABX_ASSIGN_OR_RETURN(t.id, string(*id, "id"));
  if (!valid_template_id(t.id)) return err(*id, "id must match [a-z0-9][a-z0-9._-]{0,63}");

  for (const auto& [k, v] : root.entries) {
    if (v.kind == Node::Kind::kNull) continue;  // `key:` with no value means "default"
    const std::string& key = k.value;
    if (key == "id") continue;
    if (key == "description") {
      ABX_ASSIGN_OR_RETURN(t.description, string(v, "description"));
    } else if (key == "image") {
      std::string ref;
      ABX_ASSIGN_OR_RETURN(ref, string(v, "image"));
      ABX_ASSIGN_OR_RETURN(t.image, image_reference(v, ref, file));
      if (!t.rootfs.empty()) return err(v, "image and rootfs are mutually exclusive");
    } else if (key == "rootfs") {
      std::string r;
      ABX_ASSIGN_OR_RETURN(r, string(v, "rootfs"));
      if (r.empty()) return err(v, "rootfs must be a directory (or 'host', development mode)");
      if (root.find("image") != nullptr && root.find("image")->kind != Node::Kind::kNull) {
        return err(v, "image and rootfs are mutually exclusive");
      }
      if (r == "host") {
        t.rootfs = r;
      } else {
        fs::path p(r);
        if (p.is_relative()) p = file.parent_path() / p;
        t.rootfs = p.lexically_normal().string();
      }
      t.image.clear();
    } else if (key == "env") {
      if (v.kind != Node::Kind::kMap) return err(v, "env must be a mapping of NAME: value");
      for (const auto& [ek, ev] : v.entries) {
        if (!valid_env_name(ek.value)) {
          return err(ek, "invalid environment variable name '" + ek.value + "'");
        }
        std::string val;
        if (ev.kind != Node::Kind::kNull) {
          ABX_ASSIGN_OR_RETURN(val, string(ev, "env value"));
        }
        t.env[ek.value] = std::move(val);
      }
    } else if (key == "start") {
      ABX_ASSIGN_OR_RETURN(t.start, command(v, "start"));
    } else if (key == "server") {
      ABX_ASSIGN_OR_RETURN(t.server, read_server(v, "server", kDefaultServerPort));
    } else if (key == "interpreter") {
      ABX_ASSIGN_OR_RETURN(t.interpreter, read_server(v, "interpreter", kDefaultInterpreterPort));
    } else if (key == "resources") {
      ABX_TRY(read_resources(v, t.resources));
    } else if (key == "network") {
      std::string mode;
      ABX_ASSIGN_OR_RETURN(mode, string(v, "network"));
      if (mode == "default") {
        t.network = NetworkMode::kDefault;
      } else if (mode == "none") {
        t.network = NetworkMode::kNone;
      } else if (mode == "host") {
        t.network = NetworkMode::kHost;
      } else {
        return err(v, "network must be 'default', 'none' or 'host'");
      }
    } else if (key == "timeout") {
      ABX_ASSIGN_OR_RETURN(t.timeout_seconds, duration_seconds(v, "timeout"));
    } else if (key == "capabilities") {
      ABX_TRY(read_capabilities(v, t));
    } else if (key == "custom_commands") {
      if (v.kind != Node::Kind::kMap) return err(v, "custom_commands must be a mapping");
      for (const auto& [ck, cv] : v.entries) {
        CustomCommand c;
        ABX_ASSIGN_OR_RETURN(c, read_custom_command(ck, cv));
        t.custom_commands.push_back(std::move(c));
      }
      std::sort(t.custom_commands.begin(), t.custom_commands.end(),
                [](const auto& a, const auto& b) { return a.name < b.name; });
    }
  }
  return t;
}

Status SchemaReader::read_resources(const Node& n, Resources& r) const {
  if (n.kind != Node::Kind::kMap) return err(n, "resources must be a mapping");
  ABX_TRY(only_keys(n, {"cpu", "memory", "pids", "disk"}, "resources"));
  for (const auto& [k, v] : n.entries) {
    if (k.value == "cpu") {
      ABX_ASSIGN_OR_RETURN(r.cpu, number(v, "resources.cpu"));
      if (!(r.cpu > 0 && r.cpu <= 1024)) return err(v, "resources.cpu must be in (0, 1024]");
    } else if (k.value == "memory") {
      ABX_ASSIGN_OR_RETURN(r.memory_bytes, size(v, "resources.memory"));
      if (r.memory_bytes < (1 << 20)) return err(v, "resources.memory must be at least 1Mi");
    } else if (k.value == "pids") {
      ABX_ASSIGN_OR_RETURN(r.pids, integer(v, "resources.pids", 1, 4194304));
    } else if (k.value == "disk") {
      ABX_ASSIGN_OR_RETURN(r.disk_bytes, size(v, "resources.disk"));
    }
  }
  return {};
}

// `server` and `interpreter`: {command, port}.
Result<std::optional<ServerSpec>> SchemaReader::read_server(const Node& n, const std::string& key,
                                                            std::uint16_t default_port) const {
  // The command server may name a Python module instead of a command (docs/python.md).
  const bool python_allowed = key == "server";
  if (n.kind != Node::Kind::kMap) {
    return err(n, key + (python_allowed ? " must be a mapping with 'command' or 'python'"
                                        : " must be a mapping with 'command'"));
  }
  if (python_allowed) {
    ABX_TRY(only_keys(n, {"command", "python", "port"}, key));
  } else {
    ABX_TRY(only_keys(n, {"command", "port"}, key));
  }
  ServerSpec s;
  s.port = default_port;
  if (const Node* port = n.find("port")) {
    std::int64_t p = 0;
    ABX_ASSIGN_OR_RETURN(p, integer(*port, key + ".port", 1, 65535));
    s.port = static_cast<std::uint16_t>(p);
  }
  const Node* cmd = n.find("command");
  const Node* py = python_allowed ? n.find("python") : nullptr;
  if (cmd != nullptr && py != nullptr) {
    return err(*py, key + " takes 'command' or 'python', not both");
  }
  if (py != nullptr) {
    std::string module;
    ABX_ASSIGN_OR_RETURN(module, string(*py, key + ".python"));
    if (module.empty() || module.front() != '/') {
      return err(*py, key + ".python must be the module's absolute path inside the sandbox, got '" +
                          module + "'");
    }
    s.argv = {std::string(kBundledServerPath), "--python", module, "--port",
              std::to_string(s.port)};
    s.python_module = module;
    return std::optional<ServerSpec>(std::move(s));
  }
  if (cmd == nullptr) {
    return err(n, key + (python_allowed ? " needs a 'command' or a 'python' module"
                                        : " needs a 'command'"));
  }
  ABX_ASSIGN_OR_RETURN(s.argv, command(*cmd, key + ".command"));
  return std::optional<ServerSpec>(std::move(s));
}

Status SchemaReader::read_capabilities(const Node& n, Template& t) const {
  std::vector<std::pair<std::string, const Node*>> names;
  if (n.kind == Node::Kind::kSeq) {
    for (const auto& item : n.items) {
      std::string s;
      ABX_ASSIGN_OR_RETURN(s, string(item, "capability"));
      names.emplace_back(std::move(s), &item);
    }
  } else if (n.kind == Node::Kind::kScalar) {  // "shell, files"
    std::string_view rest = n.value;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      std::string_view part = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
      while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
      names.emplace_back(std::string(part), &n);
    }
  } else {
    return err(n, "capabilities must be a list of shell, files, code, ports");
  }
  t.capabilities.clear();
  for (const auto& [name, node] : names) {
    auto c = parse_capability(name);
    if (!c) return err(*node, "unknown capability '" + name + "' (use shell, files, code, ports)");
    if (t.has(*c)) return err(*node, "capability '" + name + "' listed twice");
    t.capabilities.push_back(*c);
  }
  return {};
}

Result<registry::CommandArg> SchemaReader::read_arg(const Node& n) const {
  if (n.kind != Node::Kind::kMap) return err(n, "each arg must be a mapping with name and type");
  ABX_TRY(only_keys(n, {"name", "type", "required", "default", "description"}, "arg"));
  const Node* name = n.find("name");
  const Node* type = n.find("type");
  if (name == nullptr) return err(n, "arg needs a 'name'");
  if (type == nullptr) return err(n, "arg needs a 'type' (string, integer, float, boolean)");
  std::string name_s;
  std::string type_s;
  std::string desc;
  bool required = false;
  ABX_ASSIGN_OR_RETURN(name_s, string(*name, "arg name"));
  if (!registry::valid_arg_name(name_s)) {
    return err(*name, "invalid arg name '" + name_s + "': use [A-Za-z_][A-Za-z0-9_]{0,63}");
  }
  ABX_ASSIGN_OR_RETURN(type_s, string(*type, "arg type"));
  auto at = registry::parse_arg_type(type_s);
  if (!at) return err(*type, "unknown arg type '" + type_s + "' (string, integer, float, boolean)");
  if (const Node* r = n.find("required"); r && r->kind != Node::Kind::kNull) {
    ABX_ASSIGN_OR_RETURN(required, boolean(*r, "required"));
  }
  if (const Node* d = n.find("description"); d && d->kind != Node::Kind::kNull) {
    ABX_ASSIGN_OR_RETURN(desc, string(*d, "description"));
  }
  json::value def = nullptr;
  if (const Node* d = n.find("default"); d && d->kind != Node::Kind::kNull) {
    if (required) return err(*d, "a required arg cannot have a default");
    std::string what = "default of '" + name_s + "' (" + type_s + ")";
    switch (*at) {
      case registry::ArgType::kString: {
        std::string s;
        ABX_ASSIGN_OR_RETURN(s, string(*d, what));
        def = json::string(s);
        break;
      }
      case registry::ArgType::kInteger: {
        std::int64_t i = 0;
        ABX_ASSIGN_OR_RETURN(i, integer(*d, what, INT64_MIN, INT64_MAX));
        def = i;
        break;
      }
      case registry::ArgType::kFloat: {
        double f = 0;
        ABX_ASSIGN_OR_RETURN(f, number(*d, what));
        def = f;
        break;
      }
      case registry::ArgType::kBoolean: {
        bool b = false;
        ABX_ASSIGN_OR_RETURN(b, boolean(*d, what));
        def = b;
        break;
      }
    }
  }
  try {
    return registry::CommandArg(name_s, *at, required, std::move(def), std::move(desc));
  } catch (const registry::RegistryError& e) {
    return err(n, e.what());
  }
}

Result<CustomCommand> SchemaReader::read_custom_command(const Node& key, const Node& n) const {
  CustomCommand c;
  c.name = key.value;
  if (!registry::valid_command_name(c.name)) {
    return err(key, "invalid custom command name '" + c.name + "'");
  }
  if (n.kind != Node::Kind::kMap)
    return err(n, "custom command '" + c.name + "' must be a mapping");
  ABX_TRY(only_keys(n, {"description", "command", "args"}, "custom command '" + c.name + "'"));
  const Node* cmd = n.find("command");
  if (cmd == nullptr) return err(n, "custom command '" + c.name + "' needs a 'command'");
  ABX_ASSIGN_OR_RETURN(c.command, string(*cmd, "command"));
  if (const Node* d = n.find("description"); d && d->kind != Node::Kind::kNull) {
    ABX_ASSIGN_OR_RETURN(c.description, string(*d, "description"));
  }
  if (const Node* args = n.find("args"); args && args->kind != Node::Kind::kNull) {
    if (args->kind != Node::Kind::kSeq) return err(*args, "args must be a list");
    for (const auto& a : args->items) {
      registry::CommandArg arg;
      ABX_ASSIGN_OR_RETURN(arg, read_arg(a));
      if (std::any_of(c.args.begin(), c.args.end(),
                      [&](const auto& x) { return x.name == arg.name; })) {
        return err(a, "arg '" + arg.name + "' declared twice");
      }
      c.args.push_back(std::move(arg));
    }
  }
  if (auto st = validate_custom_command(c); !st.ok()) {
    return err(*cmd, "custom command '" + c.name + "': " + st.error().message());
  }
  return c;
}

json::array argv_json(const std::vector<std::string>& argv) {
  json::array a;
  for (const auto& s : argv) a.push_back(json::string(s));
  return a;
}

Result<std::string> read_regular_file(const fs::path& file, std::size_t cap) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    return Error(os::code_for_errno(e), file.string() + ":1:1: cannot open: " + std::strerror(e));
  }
  struct stat sb {};
  std::string out;
  Status st;
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st = invalid_argument(file.string() + ":1:1: not a regular file");
  } else if (static_cast<std::size_t>(sb.st_size) > cap) {
    st = Error(ErrorCode::kPayloadTooLarge,
               file.string() + ":1:1: larger than " + std::to_string(cap) + " bytes");
  } else {
    char buf[16384];
    for (;;) {
      ssize_t n = os::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
      if (n < 0) {
        st = internal_error(file.string() + ":1:1: read: " + std::strerror(errno));
        break;
      }
      if (n == 0) break;
      out.append(buf, static_cast<std::size_t>(n));
      if (out.size() > cap) {  // grew while we read
        st = Error(ErrorCode::kPayloadTooLarge,
                   file.string() + ":1:1: larger than " + std::to_string(cap) + " bytes");
        break;
      }
    }
  }
  ::close(fd);
  if (!st.ok()) return st.error();
  return out;
}

}  // namespace

json::object Template::to_json() const {
  json::array caps;
  std::string caps_csv;
  for (auto c : capabilities) {
    caps.push_back(json::string(capability_name(c)));
    caps_csv += (caps_csv.empty() ? "" : ",") + std::string(capability_name(c));
  }
  json::array cmds;
  for (const auto& c : custom_commands) {
    registry::RegisteredCommand rc;
    rc.name = c.name;
    rc.description = c.description;
    rc.args = c.args;
    json::object o = registry::describe(rc);
    o["command"] = c.command;
    cmds.push_back(std::move(o));
  }
  auto server_json = [](const std::optional<ServerSpec>& s) {
    return s ? json::value(json::object{{"command", argv_json(s->argv)}, {"port", s->port}})
             : json::value(nullptr);
  };
  json::array alias_json{json::string(id)};
  for (const auto& a : aliases) alias_json.emplace_back(a);
  constexpr double kMiB = 1 << 20;
  json::object o{
      {"templateID", id},
      {"description", description},
      {"aliases", alias_json},
      {"names", alias_json},
      {"public", true},
      {"cpuCount", static_cast<std::int64_t>(std::ceil(resources.cpu))},
      {"cpu", resources.cpu},
      {"memoryMB", static_cast<std::int64_t>(std::ceil(resources.memory_bytes / kMiB))},
      {"diskSizeMB", static_cast<std::int64_t>(std::ceil(resources.disk_bytes / kMiB))},
      {"pids", resources.pids},
      {"image", image},
      {"rootfs", rootfs},
      {"network", network == NetworkMode::kHost   ? "host"
                  : network == NetworkMode::kNone ? "none"
                                                  : "default"},
      {"timeout", timeout_seconds},
      {"start", argv_json(start)},
      {"server", server_json(server)},
      {"interpreter", server_json(interpreter)},
      {"capabilities", caps},
      {"customCommands", cmds},
      // E2B clients type metadata as a string map: the same data, as strings.
      {"metadata",
       json::object{{"capabilities", caps_csv}, {"custom_commands", json::serialize(cmds)}}},
  };
  return o;
}

Result<Template> parse_template(std::string_view yaml_text, const fs::path& file) {
  std::string name = file.string();
  if (yaml_text.size() > kMaxTemplateFileBytes) {
    return Error(ErrorCode::kPayloadTooLarge,
                 name + ":1:1: larger than " + std::to_string(kMaxTemplateFileBytes) + " bytes");
  }
  ABX_ASSIGN_OR_RETURN(auto root, yaml::parse(yaml_text, name, kMaxYamlDepth));
  return SchemaReader(name).read(root, file);
}

Result<Template> load_template_file(const fs::path& file) {
  ABX_ASSIGN_OR_RETURN(auto text, read_regular_file(file, kMaxTemplateFileBytes));
  auto t = parse_template(text, file);
  if (!t.ok()) return t.error();
  if (!t->rootfs.empty() && t->rootfs != "host") {
    std::error_code ec;
    if (!fs::is_directory(t->rootfs, ec)) {
      return invalid_argument(file.string() + ":1:1: rootfs '" + t->rootfs +
                              "' is not a directory");
    }
  }
  return t;
}

Template builtin_base() {
  Template t;
  t.id = "base";
  t.description =
      "Debian 12 (bookworm) with bash, coreutils and python3, built from Debian's packages "
      "(scripts/build-images.sh).";
  t.source = "builtin";
  return t;
}

Template builtin_demo(const BuiltinOptions& b) {
  Template t = builtin_base();
  t.id = "demo";
  t.description = "base plus the example command module served by abx-server on port 49982.";
  t.server = ServerSpec{
      {b.abx_server, "--module", b.demo_module, "--port", std::to_string(kDefaultServerPort)},
      kDefaultServerPort};
  return t;
}

Template builtin_code_interpreter(const BuiltinOptions& b) {
  Template t = builtin_base();
  t.id = "code-interpreter";
  t.aliases = {"code-interpreter-v1"};
  t.description =
      "Stateful Python (Jupyter kernels: numpy, pandas, matplotlib) behind E2B's code-interpreter "
      "API on port 49999, for @e2b/code-interpreter and abx run_code.";
  t.image = "abx:code-interpreter";
  t.interpreter = ServerSpec{{b.abx_interp, "--port", std::to_string(kDefaultInterpreterPort)},
                             kDefaultInterpreterPort};
  t.resources.memory_bytes = 1LL << 30;  // a kernel with pandas and matplotlib loaded is ~150 MiB
  return t;
}

TemplateCatalog TemplateCatalog::load(const fs::path& home, const BuiltinOptions& builtins) {
  constexpr int kMaxDirDepth = 8;
  constexpr std::size_t kMaxFiles = 1000;
  TemplateCatalog cat;
  cat.templates_.emplace("base", builtin_base());
  cat.templates_.emplace("demo", builtin_demo(builtins));
  cat.templates_.emplace("code-interpreter", builtin_code_interpreter(builtins));

  std::vector<fs::path> files;
  std::error_code ec;
  fs::path root = home / "templates";
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() > kMaxDirDepth) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code fec;
    if (it->path().filename() == "template.yaml" && it->is_regular_file(fec)) {
      files.push_back(it->path());
      if (files.size() >= kMaxFiles) {
        cat.errors_.push_back({root.string(), "",
                               root.string() + ": more than " + std::to_string(kMaxFiles) +
                                   " template files; the rest are ignored"});
        break;
      }
    }
  }
  std::sort(files.begin(), files.end());

  std::map<std::string, std::string> from_home;  // id -> file
  for (const auto& f : files) {
    auto t = load_template_file(f);
    if (!t.ok()) {
      cat.errors_.push_back({f.string(), f.parent_path().filename().string(), t.error().message()});
      continue;
    }
    auto [prev, inserted] = from_home.emplace(t->id, f.string());
    if (!inserted) {
      cat.errors_.push_back(
          {f.string(), t->id,
           f.string() + ":1:1: template id '" + t->id + "' already defined in " + prev->second});
      continue;
    }
    std::string id = t->id;
    cat.templates_.insert_or_assign(std::move(id), std::move(*t));
  }
  return cat;
}

const Template* TemplateCatalog::get(std::string_view id) const {
  auto it = templates_.find(id);
  if (it != templates_.end()) return &it->second;
  for (const auto& [tid, t] : templates_) {
    for (const auto& a : t.aliases) {
      if (a == id) return &t;
    }
  }
  return nullptr;
}

std::vector<const Template*> TemplateCatalog::list() const {
  std::vector<const Template*> out;
  for (const auto& [id, t] : templates_) out.push_back(&t);
  return out;
}

}  // namespace abx::templates
