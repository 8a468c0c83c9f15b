#include "connect.h"

#include <boost/json.hpp>

#include "abx/base/json.h"
#include "abx/connect/connect.h"
#include "transport.h"

namespace abx::client::detail {

Status read_connect_stream(http::Connection& conn, http::Request req,
                           const std::function<Status(const boost::json::value&)>& on_message,
                           std::chrono::milliseconds idle_timeout) {
  std::string what = std::string(req.target());
  if (auto slash = what.rfind('/', what.rfind('/') - 1); slash != std::string::npos)
    what = what.substr(slash + 1);  // "process.Process/Start"
  connect::EnvelopeReader reader;   // the client-side cap: kMaxStreamMessageBytes
  std::optional<Error> failure;
  bool ended = false;
  bool raw_mode = false;  // a JSON error body instead of envelopes
  std::string raw;
  auto res = conn.send_streaming(
      std::move(req),
      [&](std::string_view piece) {
        // An envelope starts with flag 0x00 or 0x02; an error body with '{'.
        if (raw_mode ||
            (reader.empty() && raw.empty() && !ended && !piece.empty() && piece.front() == '{')) {
          raw_mode = true;
          if (raw.size() < 64 * 1024) raw.append(piece);
          return true;
        }
        reader.feed(piece);
        for (;;) {
          auto env = reader.next();
          if (!env.ok()) {
            failure = env.error();
            return false;
          }
          if (!*env) return true;
          auto v = parse_json_strict((*env)->payload);
          if (!v.ok()) {
            failure =
                Error(ErrorCode::kInternal, "bad JSON in a Connect frame: " + v.error().message());
            return false;
          }
          if ((*env)->end_stream()) {
            ended = true;
            if (auto e = connect::end_stream_error(*v)) failure = *e;
            return true;
          }
          if (auto st = on_message(*v); !st.ok()) {
            failure = st.error();
            return false;
          }
        }
      },
      idle_timeout);
  if (!res.ok()) return failure ? *failure : res.error();
  if (res->result_int() != 200 || raw_mode) {
    http::Response copy = *res;
    copy.body() = raw;
    return error_from_response(copy, Plane::kEnvd, what);
  }
  if (failure) return *failure;
  if (!ended) return unavailable("Connect stream ended without an end-stream frame");
  return {};
}

}  // namespace abx::client::detail
