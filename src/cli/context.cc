#include <boost/json.hpp>
#include <charconv>
#include <iostream>

#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

client::ConnectionConfig Context::config() const {
  auto c = client::ConnectionConfig::from_env();
  if (!flags.domain.empty()) c.domain = flags.domain;
  if (!flags.api_url.empty()) c.api_url = flags.api_url;
  if (!flags.api_key.empty()) c.api_key = flags.api_key;
  if (!flags.sandbox_url.empty()) c.sandbox_url = flags.sandbox_url;
  if (!flags.server_url.empty()) c.server_url = flags.server_url;
  if (!flags.access_token.empty()) c.access_token = flags.access_token;
  if (!flags.home.empty()) c.home = flags.home;
  return c;
}

Result<client::Sandbox> Context::open_sandbox(const std::string& id) const {
  auto c = config();
  if ((!c.server_url.empty() || !c.sandbox_url.empty()) && !c.access_token.empty()) {
    client::SandboxInfo info;
    info.sandbox_id = id;
    info.template_id = flags.template_id;
    return client::Sandbox::attach(info, c);
  }
  return client::Sandbox::connect(id, c);
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

int Context::fail(const Error& e) const {
  std::cerr << "abx: " << e.message();
  if (e.type() != error_code_name(e.code())) std::cerr << " (" << e.type() << ")";
  std::cerr << "\n";
  if (flags.json) {
    print_json(json::object{
        {"error", e.message()}, {"type", e.type()}, {"code", error_code_name(e.code())}});
  }
  return exit_code_for(e);
}

int Context::usage(const std::string& message) const { return fail(invalid_argument(message)); }

void Context::print_json(const json::value& v) const { std::cout << json::serialize(v) << "\n"; }

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

CLI::App* add_sandbox_subcommand(CLI::App& parent, const std::string& name, const std::string& help,
                                 std::string& id) {
  CLI::App* sub = parent.add_subcommand(name, help);
  sub->add_option("sandbox", id, "Sandbox id")->required();
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
