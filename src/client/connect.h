// Internal: the Connect protocol with JSON encoding, as envd speaks it (e2b-protocol.md §3.2):
// unary calls are a bare JSON body; server streams send one envelope and receive envelopes ending
// with an end-stream frame. The framing, limits and code maps are abx::connect's.
#pragma once

#include <boost/json/value.hpp>
#include <chrono>
#include <functional>

#include "abx/base/error.h"
#include "abx/http/client.h"

namespace abx::client::detail {

// Reads a Connect server stream on `conn`: sends `req` (the caller has framed its body with
// connect::encode_envelope and set the headers), calls `on_message` for each data frame's JSON in
// order (a non-ok Status from it stops the stream and is returned), and returns the end-stream
// frame's error, if any. A non-200 answer becomes an Error from its JSON body. A body that ends
// without an end-stream frame is kUnavailable ("stream ended early").
Status read_connect_stream(http::Connection& conn, http::Request req,
                           const std::function<Status(const boost::json::value&)>& on_message,
                           std::chrono::milliseconds idle_timeout);

}  // namespace abx::client::detail
