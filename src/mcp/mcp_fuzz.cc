// Fuzz target: raw bytes -> decode() -> dispatch() on an initialized session with a provider
// that answers at once. Never crashes; every message gets at most one reply, and every reply is
// a JSON-RPC 2.0 response with either a result or an error with an integer code.
#include <boost/json.hpp>
#include <cstdint>
#include <cstdlib>

#include "abx/mcp/mcp.h"

namespace {

namespace json = boost::json;

class Tools : public abx::mcp::ToolProvider {
 public:
  std::vector<abx::mcp::Tool> list_tools() override {
    abx::mcp::Tool t;
    t.name = "t";
    return {t};
  }
  void call_tool(std::string_view name, const json::object& args,
                 abx::mcp::ToolDone done) override {
    if (name != "t") return done(abx::not_found("unknown tool"));
    abx::mcp::ToolResult r;
    r.structured = args;
    done(r);
  }
};

void check(const std::optional<json::object>& r) {
  if (!r) return;
  if (r->at("jsonrpc") != "2.0") std::abort();
  const bool result = r->contains("result");
  const bool error = r->contains("error");
  if (result == error) std::abort();
  if (error && !r->at("error").at("code").is_int64()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const abx::mcp::Dispatcher dispatcher(abx::mcp::ServerInfo{}, {65536, {}});
  static Tools tools;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool initialized : {false, true}) {
    abx::mcp::SessionState session;
    session.initialized = initialized;
    int replies = 0;
    dispatcher.handle(text, session, tools, [&](std::optional<json::object> r) {
      ++replies;
      check(r);
    });
    if (replies != 1) std::abort();
  }
  return 0;
}
