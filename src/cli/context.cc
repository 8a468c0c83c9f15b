#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "abx/base/os.h"
#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

// The host of an http:// URL ("http://127.0.0.1:3000/x" → "127.0.0.1"; "[::1]" → "::1").
std::string url_host(std::string_view url) {
  auto scheme = url.find("://");
  if (scheme != std::string_view::npos) url.remove_prefix(scheme + 3);
  url = url.substr(0, url.find_first_of("/?#"));
  if (auto at = url.rfind('@'); at != std::string_view::npos) url.remove_prefix(at + 1);
  if (!url.empty() && url.front() == '[') return std::string(url.substr(1, url.find(']') - 1));
  return std::string(url.substr(0, url.find(':')));
}

bool is_local_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 ||
         (host.size() > 10 && host.ends_with(".localhost"));
}

std::string first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::filesystem::path Context::home() const {
  if (!flags.home.empty()) return flags.home;
  if (const char* h = std::getenv("ABX_HOME"); h && *h) return h;
  if (const char* h = std::getenv("HOME"); h && *h) return std::filesystem::path(h) / ".abx";
  return ".abx";
}

client::ConnectionConfig Context::config() const {
  auto c = client::ConnectionConfig::from_env();
  if (!flags.domain.empty()) c.domain = flags.domain;
  if (!flags.api_url.empty()) c.api_url = flags.api_url;
  if (!flags.api_key.empty()) c.api_key = flags.api_key;
  if (!flags.sandbox_url.empty()) c.sandbox_url = flags.sandbox_url;
  if (!flags.server_url.empty()) c.server_url = flags.server_url;
  if (!flags.access_token.empty()) c.access_token = flags.access_token;
  if (!flags.home.empty()) c.home = flags.home;
  // First run: no key given, and the platform is an abxd on this host — use the key abxd wrote
  // into its home (the same home resolution as abxd's: --home, $ABX_HOME, ~/.abx).
  if (c.api_key.empty() && c.access_key_id.empty() && is_local_host(url_host(c.api_url))) {
    c.api_key = first_line(api_key_file());
  }
  return c;
}

std::string Context::api_key_source() const {
  if (!flags.api_key.empty()) return "--api-key";
  for (const char* v : {"ABX_API_KEY", "E2B_API_KEY"}) {
    if (const char* k = std::getenv(v); k && *k) return v;
  }
  auto c = config();
  if (!c.access_key_id.empty()) return "ABX_ACCESS_KEY_ID";
  if (!c.api_key.empty()) return api_key_file().string();
  return "";
}

std::string Context::auth_hint(const Error& e) const {
  if (e.code() != ErrorCode::kUnauthenticated && e.code() != ErrorCode::kPermissionDenied)
    return "";
  // Sandbox-plane failures (access tokens) are not about the API key.
  const std::string& m = e.message();
  if (m.find("API key") == std::string::npos && m.find("signature") == std::string::npos) return "";
  auto file = api_key_file();
  std::error_code ec;
  bool has_file = std::filesystem::exists(file, ec);
  std::string fix = "set ABX_API_KEY or pass --api-key";
  fix += has_file ? "; abxd wrote one to " + file.string()
                  : "; a local abxd writes one to " + file.string() + " when it first starts";
  std::string source = api_key_source();
  if (source.empty()) return "no API key was given: " + fix;
  if (source == file.string()) {
    return "the API key in " + source + " was refused: is the abxd at " + config().api_url +
           " serving another home? Set ABX_API_KEY or pass --api-key with the key in that "
           "home's api_key file";
  }
  return "the API key from " + source + " was refused: " + fix;
}

Result<client::Sandbox> Context::open_sandbox(const std::string& id) const {
  auto c = config();
  if ((!c.server_url.empty() || !c.sandbox_url.empty()) && !c.access_token.empty()) {
    client::SandboxInfo info;
    info.sandbox_id = id;
    info.template_id = flags.template_id;
    return client::Sandbox::attach(info, c);
  }
  // The sandbox's lifetime stays as it is (no timeout: connect does not extend it); a paused
  // one is resumed, and the user is told so before it happens.
  client::SandboxInfo probe;
  probe.sandbox_id = id;
  auto info = client::Sandbox::attach(probe, c).info();
  if (info.ok() && info->state == "paused") std::cerr << "abx: resuming " << id << "\n";
  return client::Sandbox::connect(id, c, std::chrono::seconds(0));
}

int exit_code_for(const Error& e) {
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
      return kExitUsage;
    case ErrorCode::kUnauthenticated:
    case ErrorCode::kPermissionDenied:
      return kExitAuth;
    case ErrorCode::kNotFound:
      return kExitNotFound;
    case ErrorCode::kUnavailable:
    case ErrorCode::kDeadlineExceeded:
    case ErrorCode::kUnimplemented:
      return kExitUnavailable;
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kAlreadyExists:
      return kExitPrecondition;
    default:
      return kExitError;
  }
}

json::object Context::error_json(const Error& e) const {
  std::string message = e.message();
  if (auto hint = auth_hint(e); !hint.empty()) message += " — " + hint;
  return {{"error", message}, {"type", e.type()}, {"code", error_code_name(e.code())}};
}

int Context::report(const Error& e) const {
  std::cerr << "abx: " << error_json(e).at("error").as_string().c_str();
  if (e.type() != error_code_name(e.code())) std::cerr << " (" << e.type() << ")";
  std::cerr << "\n";
  return exit_code_for(e);
}

int Context::fail(const Error& e) const {
  int code = report(e);
  if (flags.json) print_json(error_json(e));
  return code;
}

int remove_each(Context& ctx, const std::vector<std::string>& ids, std::string_view noun,
                std::string_view done, std::string_view verb,
                const std::function<Result<bool>(const std::string&)>& remove) {
  int code = kExitOk;
  json::object out;
  for (const auto& id : ids) {
    auto r = remove(id);
    if (!r.ok()) {
      code = ctx.fail(r.error());
      continue;
    }
    if (!*r) {
      code = ctx.fail(not_found("no " + std::string(noun) + " " + id));
      continue;
    }
    out[id] = verb;
    if (!ctx.flags.json) std::cout << done << " " << id << "\n";
  }
  if (ctx.flags.json && code == kExitOk) ctx.print_json(out);
  return code;
}

int Context::usage(const std::string& message) const { return fail(invalid_argument(message)); }

void Context::print_json(const json::value& v) const { std::cout << json_text(v) << "\n"; }

namespace {

void append_json(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_: {
      const double d = v.get_double();
      if (!std::isfinite(d)) {
        out += "null";
        return;
      }
      char buf[32];
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form
      std::string_view text(buf, static_cast<std::size_t>(end - buf));
      // std::to_chars writes 1e+21 and 1e-07; JSON.stringify keeps the sign and drops zeros.
      if (auto e = text.find('e'); e != std::string_view::npos) {
        out.append(text.substr(0, e + 2));
        std::string_view digits = text.substr(e + 2);
        while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
        out.append(digits);
      } else {
        out.append(text);
      }
      return;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v.get_array()) {
        if (!first) out += ',';
        first = false;
        append_json(out, e);
      }
      out += ']';
      return;
    }
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.get_object()) {
        if (!first) out += ',';
        first = false;
        out += json::serialize(json::string(k));
        out += ':';
        append_json(out, e);
      }
      out += '}';
      return;
    }
    default:
      out += json::serialize(v);
  }
}

}  // namespace

std::string json_text(const json::value& v) {
  std::string out;
  append_json(out, v);
  return out;
}

void write_all(int fd, std::string_view d) { (void)os::write_all(fd, d); }

Result<std::chrono::seconds> parse_duration(std::string_view s) {
  if (s.empty()) return invalid_argument("empty duration");
  long long n = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || n < 0) return invalid_argument("bad duration '" + std::string(s) + "'");
  std::string_view unit(p, static_cast<std::size_t>(s.data() + s.size() - p));
  long long mul = 0;
  if (unit.empty() || unit == "s")
    mul = 1;
  else if (unit == "m")
    mul = 60;
  else if (unit == "h")
    mul = 3600;
  else if (unit == "d")
    mul = 86400;
  else
    return invalid_argument("bad duration '" + std::string(s) + "' (use 90, 90s, 5m, 1h or 2d)");
  if (n > (1LL << 40) / mul) return invalid_argument("duration '" + std::string(s) + "' too long");
  return std::chrono::seconds(n * mul);
}

Result<std::map<std::string, std::string>> parse_pairs(const std::vector<std::string>& items,
                                                       std::string_view what) {
  std::map<std::string, std::string> out;
  for (const auto& it : items) {
    auto eq = it.find('=');
    if (eq == std::string::npos || eq == 0)
      return invalid_argument(std::string(what) + " '" + it + "' is not KEY=VALUE");
    out[it.substr(0, eq)] = it.substr(eq + 1);
  }
  return out;
}

void add_sandbox_arg(CLI::App& cmd, std::string& id) {
  cmd.add_option("sandbox", id, "Sandbox id")->required();
}

CLI::App* add_sandbox_subcommand(CLI::App& parent, const std::string& name, const std::string& help,
                                 std::string& id) {
  CLI::App* sub = parent.add_subcommand(name, help);
  add_sandbox_arg(*sub, id);
  return sub;
}

void print_table(const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t i = 0; i < w.size(); ++i) {
      std::string cell = i < r.size() ? r[i] : "";
      s += cell;
      if (i + 1 < w.size()) s += std::string(w[i] - cell.size() + 2, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::cout << s << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

}  // namespace abx::cli
