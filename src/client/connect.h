// Internal: the Connect protocol with JSON encoding, as envd speaks it (e2b-protocol.md §3.2):
// unary calls are a bare JSON body; server streams send one envelope (flag byte, 4-byte
// big-endian length, JSON) and receive envelopes ending with an end-stream frame (flag 0x02).
#pragma once

#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/http/client.h"

namespace abx::client::detail {

inline constexpr std::uint8_t kEndStreamFlag = 0x02;
inline constexpr std::uint32_t kMaxEnvelopeBytes = 16u << 20;

std::string encode_envelope(std::string_view json, std::uint8_t flags = 0);

struct Envelope {
  std::uint8_t flags = 0;
  std::string data;
};

// Incremental decoder: feed bytes as they arrive, take whole envelopes out.
class EnvelopeReader {
 public:
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // An envelope, nullopt when more bytes are needed, or kInvalidArgument (compressed frame,
  // oversize frame).
  Result<std::optional<Envelope>> next();
  bool empty() const { return buf_.empty(); }

 private:
  std::string buf_;
};

// Reads a Connect server stream on `conn`: sends `req` (the caller has framed its body with
// encode_envelope and set the headers), calls `on_message` for each data frame's JSON in order
// (a non-ok Status from it stops the stream and is returned), and returns the end-stream
// frame's error, if any. A non-200 answer becomes an Error from its JSON body. A body that ends
// without an end-stream frame is kUnavailable ("stream ended early").
Status read_connect_stream(http::Connection& conn, http::Request req,
                           const std::function<Status(const boost::json::value&)>& on_message,
                           std::chrono::milliseconds idle_timeout);

// The error of an end-stream frame's JSON ({"error":{"code","message"}}), if any.
std::optional<Error> end_stream_error(const boost::json::value& v);

// Standard base64 with padding (proto3 JSON bytes); decoding also accepts URL-safe and
// unpadded input.
std::string base64_encode(std::string_view in);
Result<std::string> base64_decode(std::string_view in);

}  // namespace abx::client::detail
