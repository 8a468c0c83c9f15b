#include "abx/envd/config.h"

#include <boost/json/array.hpp>
#include <limits>
#include <set>

#include "abx/base/json.h"
#include "abx/base/try.h"

namespace abx::envd {
namespace json = boost::json;

namespace {

constexpr std::string_view kWhat = "envd config: ";

Error bad(std::string_view field, std::string_view must) {
  return invalid_argument(std::string(kWhat) + std::string(field) + " must be " +
                          std::string(must));
}

json::array strings(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

// The object's fields, each read once with base's readers: a missing one is an error, so is any
// left unread. Errors carry "envd config: " before the reader's own (`port: must be between 0
// and 65535`).
class Fields {
 public:
  explicit Fields(const json::object& o) : o_(o) {}

  Status string(std::string_view name, std::string& out) {
    ABX_ASSIGN_OR_RETURN(const json::value* v, get(name));
    return prefixed(json_as_string(*v, name), out);
  }
  Status strings(std::string_view name, std::vector<std::string>& out) {
    ABX_ASSIGN_OR_RETURN(const json::value* v, get(name));
    return prefixed(json_as_string_list(*v, name), out);
  }
  template <class Int>
  Status integer(std::string_view name, Int& out, std::int64_t max) {
    ABX_ASSIGN_OR_RETURN(const json::value* v, get(name));
    std::int64_t n = 0;
    ABX_TRY(prefixed(json_as_int(*v, name, 0, max), n));
    out = static_cast<Int>(n);
    return {};
  }
  // The first field nobody asked for, as an error.
  Status no_others() const {
    for (const auto& kv : o_) {
      if (!read_.contains(std::string(kv.key())))
        return invalid_argument(std::string(kWhat) + "unknown field " + std::string(kv.key()));
    }
    return {};
  }

 private:
  Result<const json::value*> get(std::string_view name) {
    const json::value* v = o_.if_contains(name);
    if (v == nullptr)
      return invalid_argument(std::string(kWhat) + "missing field " + std::string(name));
    read_.insert(std::string(name));
    return v;
  }
  template <class T, class Out>
  static Status prefixed(Result<T> r, Out& out) {
    if (!r.ok()) return invalid_argument(std::string(kWhat) + r.error().message());
    out = std::move(r).value();
    return {};
  }

  const json::object& o_;
  std::set<std::string> read_;
};

}  // namespace

json::object to_json(const EnvdConfig& c) {
  return {{"version", kEnvdConfigVersion},
          {"host", c.host},
          {"port", c.port},
          {"tokenFile", c.token_file},
          {"startCmd", c.start_cmd},
          {"serverCmd", c.server_cmd},
          {"serverArgv", strings(c.server_argv)},
          {"serverCompanionArgv", strings(c.server_companion_argv)},
          {"interpreterArgv", strings(c.interpreter_argv)},
          {"defaultUser", c.default_user},
          {"defaultWorkdir", c.default_workdir},
          {"maxUploadBytes", c.max_upload_bytes},
          {"logLevel", c.log_level}};
}

Result<EnvdConfig> envd_config_from_json(const json::value& v) {
  if (!v.is_object()) return invalid_argument(std::string(kWhat) + "not a JSON object");
  Fields f(v.get_object());
  int version = 0;
  ABX_TRY(f.integer("version", version, std::numeric_limits<int>::max()));
  if (version != kEnvdConfigVersion) {
    return invalid_argument(std::string(kWhat) + "version " + std::to_string(version) +
                            " is not the one this abx-envd reads (" +
                            std::to_string(kEnvdConfigVersion) + ")");
  }
  EnvdConfig c;
  ABX_TRY(f.string("host", c.host));
  ABX_TRY(f.integer("port", c.port, std::numeric_limits<std::uint16_t>::max()));
  ABX_TRY(f.string("tokenFile", c.token_file));
  ABX_TRY(f.string("startCmd", c.start_cmd));
  ABX_TRY(f.string("serverCmd", c.server_cmd));
  ABX_TRY(f.strings("serverArgv", c.server_argv));
  ABX_TRY(f.strings("serverCompanionArgv", c.server_companion_argv));
  ABX_TRY(f.strings("interpreterArgv", c.interpreter_argv));
  ABX_TRY(f.string("defaultUser", c.default_user));
  ABX_TRY(f.string("defaultWorkdir", c.default_workdir));
  ABX_TRY(
      f.integer("maxUploadBytes", c.max_upload_bytes, std::numeric_limits<std::int64_t>::max()));
  ABX_TRY(f.string("logLevel", c.log_level));
  ABX_TRY(f.no_others());
  ABX_TRY(check_envd_config(c));
  return c;
}

Result<EnvdConfig> parse_envd_config(std::string_view text) {
  auto v = parse_json_strict(text);
  if (!v.ok()) return invalid_argument(std::string(kWhat) + v.error().message());
  return envd_config_from_json(*v);
}

Status check_envd_config(const EnvdConfig& c) {
  for (const auto& [name, argv] : {std::pair{"serverArgv", &c.server_argv},
                                   std::pair{"serverCompanionArgv", &c.server_companion_argv},
                                   std::pair{"interpreterArgv", &c.interpreter_argv}}) {
    if (!argv->empty() && argv->front().empty()) {
      return bad(std::string(name) + "[0]", "a non-empty program name");
    }
  }
  if (!c.server_argv.empty() && !c.server_cmd.empty()) {
    return invalid_argument(std::string(kWhat) +
                            "give serverCmd or serverArgv (--server-cmd or --server-argv), not "
                            "both");
  }
  if (!c.server_companion_argv.empty() && c.server_argv.empty()) {
    return invalid_argument(std::string(kWhat) +
                            "serverCompanionArgv (--server-companion-argv) needs serverArgv "
                            "(--server-argv)");
  }
  return {};
}

Result<std::vector<std::string>> parse_argv_json(std::string_view text, const std::string& what) {
  const Error e = invalid_argument(what +
                                   " must be a non-empty JSON array of strings, e.g. "
                                   "[\"/opt/abx/bin/abx-server\",\"--port\",\"8080\"]");
  auto v = parse_json_strict(text);
  if (!v.ok() || !v->is_array() || v->get_array().empty()) return e;
  std::vector<std::string> out;
  for (const auto& a : v->get_array()) {
    if (!a.is_string()) return e;
    out.emplace_back(a.get_string());
  }
  if (out[0].empty()) return e;
  return out;
}

}  // namespace abx::envd
