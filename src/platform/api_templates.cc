// /templates and /templates/{id}: the catalog, with each template's capabilities and commands.
#include <boost/json.hpp>

#include "api_routes.h"

namespace abx::platform::api {

namespace json = boost::json;
using http::Response;

namespace {

json::object template_json(const templates::Template& t) {
  json::object o = t.to_json();
  o["envdVersion"] = kEnvdVersion;
  o["buildID"] = t.id;
  return o;
}

}  // namespace

Result<Response> list_templates(Context& ctx) {
  json::array out;
  auto cat = ctx.sandboxes.catalog();
  for (const auto* t : cat->list()) out.push_back(template_json(*t));
  return http::json_response(200, out);
}

Result<Response> get_template(Context& ctx) {
  auto cat = ctx.sandboxes.catalog();
  const std::string& id = ctx.params.at(0);
  if (const auto* t = cat->get(id)) {
    json::object o = template_json(*t);
    o["builds"] = json::array{};
    return http::json_response(200, o);
  }
  for (const auto& e : cat->errors()) {
    if (e.id_hint == id) return not_found("template '" + id + "' failed to load: " + e.message);
  }
  return not_found("template '" + id + "' not found");
}

}  // namespace abx::platform::api
