// Fuzz target: parsing and coercing kwargs for a command with one argument of each type must
// never crash, and whatever it accepts satisfies the schema.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "abx/registry/coerce.h"

namespace {
const abx::registry::RegisteredCommand& command() {
  static const auto* cmd = [] {
    auto* c = new abx::registry::RegisteredCommand;
    c->name = "fuzz";
    c->fn = [](const boost::json::object&) { return boost::json::value(); };
    c->args = {abx::registry::CommandArg("i", "integer", true),
               abx::registry::CommandArg("f", "float", false, 1.5),
               abx::registry::CommandArg("b", "boolean", false, false),
               abx::registry::CommandArg("s", "string", false, "x")};
    c->args[0].minimum = -1000;
    c->args[0].maximum = 1000;
    return c;
  }();
  return *cmd;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto r = abx::registry::parse_kwargs(command(), body);
  if (r.ok()) {
    const auto& kw = *r;
    if (kw.size() != 4) std::abort();
    std::int64_t i = kw.at("i").as_int64();
    if (i < -1000 || i > 1000) std::abort();
    if (!kw.at("f").is_double() || !kw.at("b").is_bool() || !kw.at("s").is_string()) std::abort();
  }
  return 0;
}
