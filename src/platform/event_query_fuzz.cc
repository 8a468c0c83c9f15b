// Fuzz target: the event query of GET /events and /events/sandboxes (events.h
// parse_event_params) never crashes, and what it accepts stays within its documented bounds.
#include <boost/url/parse.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "events.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace abx::platform;
  std::string in(reinterpret_cast<const char*>(data), size);
  // The query, then (after a NUL) a Last-Event-ID value.
  const auto nul = in.find('\0');
  const std::string query = in.substr(0, nul);
  const std::string last = nul == std::string::npos ? std::string() : in.substr(nul + 1);
  const std::string target = "/events?" + query;  // the view below refers to it
  auto url = boost::urls::parse_origin_form(target);
  if (!url) return 0;
  for (bool sse_default : {true, false}) {
    auto q = parse_event_params(url->params(), last, sse_default);
    if (!q.ok()) continue;
    const auto& f = q->filter;
    if (f.limit < 1 || f.limit > 1000 || f.offset > 1'000'000 || f.after_id < 0) std::abort();
    if (f.types.size() > 32) std::abort();
    for (const auto& t : f.types)
      if (!known_event_type(t)) std::abort();
    if (q->has_cursor && f.descending) std::abort();  // a cursor reads forward
    if (f.team_id || !f.sandbox_id.empty()) std::abort();
  }
  return 0;
}
