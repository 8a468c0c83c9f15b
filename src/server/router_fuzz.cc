// Fuzz target: raw bytes -> Beast request parser (with the server's limits) -> command-server
// routing, auth and kwarg coercion. Never crashes; every immediate answer is a JSON error or
// listing with a known status; a routed call always has a command within the caller's scope;
// a request passed on to /mcp has a body that the MCP decoder answers without crashing.
#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <cstdlib>
#include <set>

#include "abx/mcp/mcp.h"
#include "abx/registry/registry.h"
#include "router.h"

namespace {

const abx::server::Router& router() {
  static auto* reg = [] {
    auto* r = new abx::registry::CommandRegistry;
    r->command("demo").arg("x").arg("y", "", "hello").bind([](int x, std::string y) {
      return std::to_string(x) + y;
    });
    r->command("flag").arg("on", "", false).arg("ratio", "", 0.5).bind([](bool on, double d) {
      return on ? d : -d;
    });
    r->freeze();
    return r;
  }();
  static abx::server::CommandServerOptions opt = [] {
    abx::server::CommandServerOptions o;
    o.access_token = "fuzz-token";
    return o;
  }();
  static abx::server::Router rt(*reg, opt);
  return rt;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace bhttp = boost::beast::http;
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(1024 * 1024);
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_done()) return 0;
  auto routed = router().route(parser.get(), false);
  if (routed.immediate) {
    static const std::set<unsigned> kKnown = {200, 400, 401, 403, 404, 405, 413, 415, 503};
    if (kKnown.count(routed.immediate->result_int()) == 0) std::abort();
    if (routed.immediate->body().empty()) std::abort();
  } else if (routed.mcp) {
    // /mcp goes on authenticated, with the caller; its body must decode without a crash.
    if (routed.command != nullptr) std::abort();
    auto d = abx::mcp::decode(parser.get().body());
    if (d.message.has_value() == d.error_reply.has_value()) std::abort();
  } else if (routed.command == nullptr) {
    std::abort();
  }
  return 0;
}
