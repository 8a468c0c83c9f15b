#include "registry_auth.h"

#include <boost/json.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "abx/base/ascii.h"
#include "abx/base/base64.h"
#include "abx/base/json.h"

namespace abx::image::detail {

namespace json = boost::json;

namespace {

// "https://index.docker.io/v1/" -> "index.docker.io"; "host:5000" stays.
std::string normalize_key(std::string_view key) {
  if (auto p = key.find("://"); p != std::string_view::npos) key.remove_prefix(p + 3);
  if (auto slash = key.find('/'); slash != std::string_view::npos) key = key.substr(0, slash);
  return ascii_lower(key);
}

bool is_docker_hub(std::string_view host) {
  return host == "docker.io" || host == "index.docker.io" || host == "registry-1.docker.io";
}

bool key_matches(std::string_view key, std::string_view registry) {
  std::string k = normalize_key(key);
  std::string r = ascii_lower(registry);
  return k == r || (is_docker_hub(k) && is_docker_hub(r));
}

}  // namespace

Result<std::optional<Credentials>> credentials_from_auth_json(std::string_view text,
                                                              std::string_view registry) {
  auto doc = parse_json_strict(text);
  if (!doc.ok()) return invalid_argument("not JSON: " + doc.error().message());
  if (!doc->is_object()) return invalid_argument("not a JSON object");
  const auto* auths = doc->as_object().if_contains("auths");
  if (auths == nullptr) return std::optional<Credentials>();
  if (!auths->is_object()) return invalid_argument("\"auths\" is not an object");
  // An exact key wins over a normalised one ("https://host/v1/").
  const json::value* entry = auths->as_object().if_contains(registry);
  std::string key = std::string(registry);
  if (entry == nullptr) {
    for (const auto& kv : auths->as_object()) {
      if (key_matches(kv.key(), registry)) {
        entry = &kv.value();
        key = std::string(kv.key());
        break;
      }
    }
  }
  if (entry == nullptr) return std::optional<Credentials>();
  if (!entry->is_object()) return invalid_argument("auths[\"" + key + "\"] is not an object");
  const auto* auth = entry->as_object().if_contains("auth");
  if (auth == nullptr) return std::optional<Credentials>();  // e.g. only identitytoken: unsupported
  if (!auth->is_string()) return invalid_argument("auths[\"" + key + "\"].auth is not a string");
  auto decoded = base64_decode(std::string_view(auth->as_string()));
  if (!decoded.ok()) return invalid_argument("auths[\"" + key + "\"].auth is not base64");
  auto colon = decoded->find(':');
  if (colon == std::string::npos) {
    return invalid_argument("auths[\"" + key + "\"].auth is not base64 of \"user:password\"");
  }
  Credentials c;
  c.username = decoded->substr(0, colon);
  c.password = decoded->substr(colon + 1);
  return std::optional<Credentials>(std::move(c));
}

std::vector<std::string> auth_file_candidates(const std::string& explicit_file) {
  if (!explicit_file.empty()) return {explicit_file};
  std::vector<std::string> out;
  const char* home = std::getenv("HOME");
  const char* abx_home = std::getenv("ABX_HOME");
  if (abx_home != nullptr && *abx_home != '\0') {
    out.push_back(std::string(abx_home) + "/auth.json");
  } else if (home != nullptr && *home != '\0') {
    out.push_back(std::string(home) + "/.abx/auth.json");
  }
  if (const char* f = std::getenv("REGISTRY_AUTH_FILE"); f != nullptr && *f != '\0') {
    out.emplace_back(f);
  }
  if (home != nullptr && *home != '\0') out.push_back(std::string(home) + "/.docker/config.json");
  return out;
}

Result<std::optional<Credentials>> find_credentials(const std::vector<std::string>& files,
                                                    std::string_view registry) {
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) continue;
      return invalid_argument("cannot read auth file '" + path + "'");
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto c = credentials_from_auth_json(ss.str(), registry);
    if (!c.ok()) return invalid_argument("auth file '" + path + "': " + c.error().message());
    if (*c) {
      (*c)->source = path;
      return c;
    }
  }
  return std::optional<Credentials>();
}

Result<Challenge> parse_challenge(std::string_view h) {
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  auto is_token = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  };
  std::size_t i = 0;
  while (i < h.size() && is_space(h[i])) ++i;
  std::size_t start = i;
  while (i < h.size() && is_token(h[i])) ++i;
  if (i == start) return invalid_argument("WWW-Authenticate without a scheme");
  Challenge c;
  c.scheme = ascii_lower(h.substr(start, i - start));
  // auth-params: name=token or name="quoted", separated by commas; a second challenge starts
  // where a name is not followed by '='.
  for (;;) {
    while (i < h.size() && (is_space(h[i]) || h[i] == ',')) ++i;
    if (i >= h.size()) break;
    std::size_t ns = i;
    while (i < h.size() && is_token(h[i])) ++i;
    if (i == ns) return invalid_argument("WWW-Authenticate: unexpected character");
    std::string name = ascii_lower(h.substr(ns, i - ns));
    while (i < h.size() && is_space(h[i])) ++i;
    if (i >= h.size() || h[i] != '=') break;  // the next challenge's scheme (or a token68)
    ++i;
    while (i < h.size() && is_space(h[i])) ++i;
    std::string value;
    if (i < h.size() && h[i] == '"') {
      ++i;
      bool closed = false;
      while (i < h.size()) {
        char ch = h[i++];
        if (ch == '\\' && i < h.size()) {
          value += h[i++];
        } else if (ch == '"') {
          closed = true;
          break;
        } else {
          value += ch;
        }
      }
      if (!closed) return invalid_argument("WWW-Authenticate: unterminated quoted string");
    } else {
      std::size_t vs = i;
      while (i < h.size() && is_token(h[i])) ++i;
      value = std::string(h.substr(vs, i - vs));
    }
    c.params.insert_or_assign(std::move(name), std::move(value));
  }
  return c;
}

}  // namespace abx::image::detail
