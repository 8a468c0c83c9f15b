// The lifecycle event routes (events.h, webhooks.h; docs/events.md):
//   GET /events/sandboxes, GET /events/sandboxes/{id}   E2B's: a JSON array, newest first
//                                                       (orderAsc, offset, limit, types)
//   GET /events, GET /sandboxes/{id}/events             abx's: a Server-Sent-Events stream
// Either form answers either way: `Accept: text/event-stream` or ?stream=true asks for the
// stream, ?stream=false or `Accept: application/json` for the page. The cursor is an event id:
// ?cursor=N (or the SSE Last-Event-ID header) gives the events after it, oldest first. A stream
// without a cursor starts at the newest event (only what happens from now on).
// Every form is the request's team's only; another team's sandbox id gives an empty answer.
//   POST, GET /events/webhooks; GET, PATCH, DELETE /events/webhooks/{id}   E2B's webhooks
#include <boost/beast/core/string.hpp>
#include <boost/json.hpp>

#include "abx/base/try.h"
#include "abx/token/token.h"
#include "api_routes.h"
#include "webhooks.h"

namespace abx::platform::api {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using http::Response;

namespace {

struct EventsQuery {
  store::EventFilter filter;
  bool stream = false;
  bool has_cursor = false;
};

// `sse_default`: whether the route streams unless asked not to (GET /events and
// /sandboxes/{id}/events) or answers JSON unless asked to stream (E2B's /events/sandboxes).
Result<EventsQuery> parse_events_query(const Context& ctx, bool sse_default) {
  EventsQuery q;
  ABX_ASSIGN_OR_RETURN(EventParams p,
                       parse_event_params(ctx.url.params(), ctx.req["Last-Event-ID"], sse_default));
  q.filter = std::move(p.filter);
  q.has_cursor = p.has_cursor;
  q.filter.team_id = ctx.team;
  q.stream = events_stream_requested(ctx.req, ctx.url, sse_default);
  if (!ctx.params.empty()) {
    ABX_ASSIGN_OR_RETURN(q.filter.sandbox_id, sandbox_id(ctx));
  }
  return q;
}

}  // namespace

bool events_stream_requested(const http::Request& req, boost::urls::url_view url,
                             bool sse_default) {
  bool stream = sse_default;
  std::string_view accept = req[bhttp::field::accept];
  if (accept.find("text/event-stream") != std::string_view::npos) stream = true;
  if (accept.find("application/json") != std::string_view::npos) stream = false;
  for (auto p : url.params()) {
    if (p.key != "stream" || !p.has_value) continue;
    if (p.value == "true" || p.value == "1") stream = true;
    if (p.value == "false" || p.value == "0") stream = false;
  }
  return stream;
}

bool is_events_route(std::span<const std::string> parts, bool& sse_default) {
  if (parts.size() == 1 && parts[0] == "events") {
    sse_default = true;
    return true;
  }
  if (parts.size() == 3 && parts[0] == "sandboxes" && parts[2] == "events") {
    sse_default = true;
    return true;
  }
  if ((parts.size() == 2 || parts.size() == 3) && parts[0] == "events" && parts[1] == "sandboxes") {
    sse_default = false;
    return true;
  }
  return false;
}

Result<http::Response> list_events(Context& ctx, bool sse_default) {
  EventLog* log = ctx.sandboxes.events();
  if (!log) return Error(ErrorCode::kUnimplemented, "abxd records no events");
  ABX_ASSIGN_OR_RETURN(EventsQuery q, parse_events_query(ctx, sse_default));
  ABX_ASSIGN_OR_RETURN(auto events, log->list(q.filter));
  json::array out;
  for (const auto& e : events) out.push_back(EventLog::to_json(e));
  auto res = http::json_response(200, out);
  if (!events.empty()) {
    std::int64_t newest = 0;
    for (const auto& e : events) newest = std::max(newest, e.id);
    res.set("X-Next-Cursor", std::to_string(newest));
  }
  return res;
}

Result<http::Response> list_events_e2b(Context& ctx) { return list_events(ctx, false); }
Result<http::Response> list_events_abx(Context& ctx) { return list_events(ctx, true); }

Status stream_events(Context& ctx, bool sse_default, const http::Responder& respond) {
  EventLog* log = ctx.sandboxes.events();
  if (!log) return Error(ErrorCode::kUnimplemented, "abxd records no events");
  ABX_ASSIGN_OR_RETURN(EventsQuery q, parse_events_query(ctx, sse_default));
  ABX_ASSIGN_OR_RETURN(auto slot, log->reserve(ctx.team));
  // Without a cursor: from now on. Fixed before the header goes out, so nothing recorded after
  // the client saw the stream open is missed.
  if (!q.has_cursor) {
    ABX_ASSIGN_OR_RETURN(q.filter.after_id, ctx.store.last_event_id());
  }
  Response header{bhttp::status::ok, ctx.req.version()};
  header.set(bhttp::field::content_type, "text/event-stream");
  header.set(bhttp::field::cache_control, "no-cache");
  header.set("X-Accel-Buffering", "no");
  auto writer = respond.stream(std::move(header));
  writer->write("retry: 3000\n: cursor " + std::to_string(q.filter.after_id) + "\n\n");
  log->subscribe(std::move(slot), std::move(q.filter), std::move(writer));
  return {};
}

// --- webhooks: /events/webhooks[/{id}] (webhooks.h) ---

namespace {

Result<WebhookDispatcher*> dispatcher(Context& ctx) {
  EventLog* log = ctx.sandboxes.events();
  if (!log || !log->webhooks())
    return Error(ErrorCode::kUnimplemented, "abxd delivers no webhooks");
  return log->webhooks();
}

Status webhooks_enabled(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(WebhookDispatcher * d, dispatcher(ctx));
  (void)d;
  return {};
}

Result<std::string> webhook_id(const Context& ctx) {
  const std::string& id = ctx.params.at(0);
  if (id.size() != 32 || id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return invalid_argument("invalid webhook id");
  return id;
}

}  // namespace

Result<http::Response> create_webhook(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(WebhookDispatcher * d, dispatcher(ctx));
  auto parsed = parse_webhook_body(ctx.req.body(), true);
  if (!parsed.ok()) return parsed.error();
  const WebhookSpec& spec = *parsed;
  // (value_or: parse_webhook_body requires both at create; GCC cannot see that.)
  store::WebhookRecord w;
  w.url = spec.url.value_or(std::string());
  w.secret = spec.secret.value_or(std::string());
  ABX_TRY(check_webhook_url(w.url, d->options().allow_private));
  ABX_ASSIGN_OR_RETURN(auto existing, ctx.store.list_webhooks(ctx.team));
  if (existing.size() >= d->options().max_per_team)
    return Error(ErrorCode::kResourceExhausted, "a team has at most " +
                                                    std::to_string(d->options().max_per_team) +
                                                    " webhooks: delete one first");
  ABX_ASSIGN_OR_RETURN(w.id, token::random_hex(16));
  w.team_id = ctx.team;
  w.name = spec.name.value_or("");
  w.enabled = spec.enabled.value_or(true);
  w.events = spec.events.value_or(std::vector<std::string>{});
  w.created_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  ABX_TRY(ctx.store.create_webhook(w));
  return http::json_response(201, webhook_json(w));
}

Result<http::Response> list_webhooks(Context& ctx) {
  ABX_TRY(webhooks_enabled(ctx));
  ABX_ASSIGN_OR_RETURN(auto hooks, ctx.store.list_webhooks(ctx.team));
  json::array out;
  for (const auto& w : hooks) out.push_back(webhook_json(w));
  return http::json_response(200, out);
}

Result<http::Response> get_webhook(Context& ctx) {
  ABX_TRY(webhooks_enabled(ctx));
  ABX_ASSIGN_OR_RETURN(std::string id, webhook_id(ctx));
  ABX_ASSIGN_OR_RETURN(auto w, ctx.store.get_webhook(ctx.team, id));
  return http::json_response(200, webhook_json(w));
}

Result<http::Response> update_webhook(Context& ctx) {
  ABX_ASSIGN_OR_RETURN(WebhookDispatcher * d, dispatcher(ctx));
  ABX_ASSIGN_OR_RETURN(std::string id, webhook_id(ctx));
  ABX_ASSIGN_OR_RETURN(WebhookSpec spec, parse_webhook_body(ctx.req.body(), false));
  ABX_ASSIGN_OR_RETURN(auto w, ctx.store.get_webhook(ctx.team, id));
  if (spec.url) {
    ABX_TRY(check_webhook_url(*spec.url, d->options().allow_private));
    w.url = *spec.url;
  }
  if (spec.name) w.name = *spec.name;
  if (spec.secret) w.secret = *spec.secret;
  if (spec.enabled) w.enabled = *spec.enabled;
  if (spec.events) w.events = *spec.events;
  ABX_TRY(ctx.store.update_webhook(w));
  return http::json_response(200, webhook_json(w));
}

Result<http::Response> delete_webhook(Context& ctx) {
  ABX_TRY(webhooks_enabled(ctx));
  ABX_ASSIGN_OR_RETURN(std::string id, webhook_id(ctx));
  ABX_TRY(ctx.store.delete_webhook(ctx.team, id));
  return http::Response{bhttp::status::no_content, ctx.req.version()};
}

}  // namespace abx::platform::api
