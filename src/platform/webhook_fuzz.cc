// Fuzz target: a webhook registration body and URL (webhooks.h) never crash the decoder; what
// it accepts stays within the documented limits, and the URL policy is monotonic (what is
// allowed without --webhook-allow-private is allowed with it).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "events.h"
#include "webhooks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace abx::platform;
  std::string in(reinterpret_cast<const char*>(data), size);
  // Body, then (after a NUL) a URL on its own.
  const auto nul = in.find('\0');
  const std::string body = in.substr(0, nul);
  const std::string url = nul == std::string::npos ? std::string() : in.substr(nul + 1);
  for (bool create : {true, false}) {
    auto w = parse_webhook_body(body, create);
    if (!w.ok()) continue;
    if (create && (!w->url || !w->secret)) std::abort();
    if (w->url && (w->url->empty() || w->url->size() > 2048)) std::abort();
    if (w->secret && (w->secret->empty() || w->secret->size() > 256)) std::abort();
    if (w->name && w->name->size() > 256) std::abort();
    if (w->events) {
      if (w->events->size() > 32) std::abort();
      for (const auto& t : *w->events)
        if (!known_event_type(t)) std::abort();
    }
    if (w->url && check_webhook_url(*w->url, false).ok() && !check_webhook_url(*w->url, true).ok())
      std::abort();
  }
  if (check_webhook_url(url, false).ok() && !check_webhook_url(url, true).ok()) std::abort();
  (void)is_private_address(url);
  return 0;
}
