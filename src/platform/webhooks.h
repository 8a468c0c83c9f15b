// Lifecycle webhooks (docs/events.md): a team registers URLs (POST /events/webhooks, E2B's
// shape) and abxd POSTs each of that team's lifecycle events to every enabled webhook whose
// event list names its type (an empty list: every type).
//
// One delivery is one POST of the event's E2B v1 JSON (EventLog::to_json), signed two ways:
//   e2b-signature: unpadded base64 of SHA-256(secret + body)    (E2B's, so E2B receivers work)
//   abx-signature: v1=<hex HMAC-SHA256(secret, "<abx-timestamp>.<body>")>
// with e2b-webhook-id, e2b-delivery-id (the same for every attempt of one delivery: receivers
// deduplicate on it), e2b-signature-version: v1, abx-timestamp (unix seconds, the attempt's:
// receivers refuse stale ones) and abx-delivery-attempt (1, 2, ...).
//
// A 2xx answer delivers; anything else (a status, no connection, the attempt's deadline) is
// retried `retries` times, `retry_delay` after the first failure and twice as long after each
// next one. Each attempt re-reads the webhook: a webhook deleted or disabled meanwhile gets no
// more attempts, and a changed URL or secret is used from then on. Deliveries wait in memory
// (at most max_queue; past that the newest are dropped, logged): an abxd restart loses what was
// not delivered yet, but for a short drain at stop (GET /events with a cursor is the durable
// record).
//
// Where a webhook may point: http:// or https:// (TLS verified against the system CAs, SNI),
// no user info, at most 2048 bytes. Unless allow_private, a host that is or resolves to a
// loopback, private (RFC 1918, fc00::/7), link-local, CGNAT, multicast or unspecified address
// is refused, at registration (a literal address) and again at every attempt (after
// resolution, before connecting), so a webhook cannot make abxd call into its own network.
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/log.h"
#include "abx/store/store.h"

namespace abx::platform {

struct WebhookOptions {
  bool allow_private = false;  // abxd --webhook-allow-private
  std::chrono::milliseconds attempt_timeout{10'000};
  std::chrono::milliseconds retry_delay{10'000};  // before the first retry; doubles after
  int retries = 3;
  std::size_t max_queue = 10'000;  // deliveries waiting, all webhooks together
  std::size_t max_per_team = 10;   // webhooks a team may register
  int workers = 2;
};

// A POST or PATCH /events/webhooks body, decoded (fields absent from a PATCH stay nullopt).
struct WebhookSpec {
  std::optional<std::string> name, url, secret;
  std::optional<bool> enabled;
  std::optional<std::vector<std::string>> events;
};
// `create`: url and signatureSecret are required. Errors are invalid_argument with the field.
Result<WebhookSpec> parse_webhook_body(std::string_view body, bool create);
// The static checks of a webhook URL (scheme, size, user info, a literal address's range).
Status check_webhook_url(std::string_view url, bool allow_private);
// Whether `address` (a literal IPv4 or IPv6 address) is one a webhook must not reach.
bool is_private_address(std::string_view address);

// The signatures above.
std::string e2b_signature(std::string_view secret, std::string_view body);
std::string abx_signature(std::string_view secret, std::int64_t unix_seconds,
                          std::string_view body);

// The API's JSON of a webhook (never its secret).
boost::json::object webhook_json(const store::WebhookRecord& w);

class WebhookDispatcher {
 public:
  WebhookDispatcher(store::Store& store, WebhookOptions options);
  ~WebhookDispatcher();  // stop()
  WebhookDispatcher(const WebhookDispatcher&) = delete;
  WebhookDispatcher& operator=(const WebhookDispatcher&) = delete;

  // Queues one delivery of `e` per matching enabled webhook of its team. Never blocks on a
  // receiver.
  void dispatch(const store::EventRecord& e);
  // Waits (at most until `deadline`) for every delivery due before it to be attempted: what
  // abxd's stop recorded last (the `shutdown` ends of --kill-sandboxes) still goes out.
  void drain(std::chrono::steady_clock::time_point deadline);
  // Ends the workers (an attempt under way runs to its deadline); what waits is dropped.
  void stop();
  const WebhookOptions& options() const { return opt_; }

  struct Stats {
    std::uint64_t delivered = 0, failed_attempts = 0, given_up = 0, dropped = 0;
  };
  Stats stats() const;

 private:
  struct Delivery {
    std::string webhook_id, team_id, delivery_id, body;
    int attempt = 1;
  };
  void work();
  // One attempt; true when the receiver answered 2xx.
  bool attempt(const Delivery& d);

  store::Store& store_;
  WebhookOptions opt_;
  Logger log_{"webhooks"};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int in_flight_ = 0;                                                     // attempts under way
  std::multimap<std::chrono::steady_clock::time_point, Delivery> queue_;  // by when due
  Stats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace abx::platform
