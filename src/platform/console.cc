#include "console.h"

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>
#include <string>

namespace abx::platform::console {

namespace bhttp = boost::beast::http;

bool is_console_path(std::string_view path) {
  return path == "/console" || path.starts_with("/console/");
}

Result<http::Response> serve(const http::Request& req, std::string_view path) {
  if (req.method() != bhttp::verb::get) {
    return invalid_argument("the console's files are read with GET");
  }
  if (path == "/console") path = "/console/";
  const Asset* found = nullptr;
  for (const Asset& a : assets()) {
    if (a.path == path) found = &a;
  }
  if (!found) return not_found("no console file " + std::string(path));
  http::Response res(bhttp::status::ok, req.version());
  res.set(bhttp::field::content_type, found->content_type);
  res.set("Content-Security-Policy", kContentSecurityPolicy);
  res.set("X-Content-Type-Options", "nosniff");
  res.set("X-Frame-Options", "DENY");
  res.set("Referrer-Policy", "no-referrer");
  res.set("Cross-Origin-Opener-Policy", "same-origin");
  // The page holds no key, but nothing of the console is kept anywhere: a new abxd's files are
  // always the ones served.
  res.set(bhttp::field::cache_control, "no-store");
  res.body() = std::string(found->body);
  res.prepare_payload();
  res.keep_alive(req.keep_alive());
  return res;
}

}  // namespace abx::platform::console
