// abx::connect: the Connect protocol's wire pieces that envd (server) and the client both speak,
// in one place: envelope framing, the size limits, and the error-code maps.
//
// Streaming Connect calls carry *envelopes*: 1 flag byte, a 4-byte big-endian length, then the
// message. Flag 0x02 marks the end-stream frame whose JSON is `{}` or {"error":{code,message}};
// 0x01 (compressed) is refused since abx negotiates no compression, and so is any other bit.
// Decoding is a pure function over bytes (fuzzed by envelope_fuzz) with an explicit size cap.
//
// Errors are {"code":"not_found","message":…}: the body of a unary error (with the HTTP status
// Connect assigns to the code) and the "error" member of an end-stream frame.
// https://connectrpc.com/docs/protocol
#pragma once

#include <boost/json/fwd.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::connect {

inline constexpr std::uint8_t kFlagCompressed = 0x01;
inline constexpr std::uint8_t kFlagEndStream = 0x02;
inline constexpr std::size_t kEnvelopeHeaderBytes = 5;

// The two caps differ on purpose. A server (envd) bounds what any caller can make it buffer for
// one request message; those are small (a process start, a stdin chunk, a watch request). A
// client reads frames its own sandbox's envd produces (process output, watch events) and must not
// refuse a legitimate large one, so it accepts more.
inline constexpr std::size_t kMaxRequestMessageBytes = 4u << 20;  // server side, per message
inline constexpr std::size_t kMaxStreamMessageBytes = 16u << 20;  // client side, per frame

struct Envelope {
  std::uint8_t flags = 0;
  std::string_view payload;  // a view into the decoded buffer
  bool end_stream() const { return (flags & kFlagEndStream) != 0; }
};

// Frames `payload`: flag byte, big-endian length, bytes. `payload` must be under 4 GiB.
std::string encode_envelope(std::uint8_t flags, std::string_view payload);
// A whole end-stream frame: `{}` when `err` is null, else the error.
std::string encode_end_stream(const Error* err);

// Decodes the envelope at the front of `buf`. Returns it with its total size on the wire,
// std::nullopt when `buf` holds only part of one (read more), or kInvalidArgument for a payload
// over `max_payload`, the compressed flag, or an unknown flag bit. Checks the header before
// waiting for the payload, so an oversize frame fails without being buffered.
struct Decoded {
  Envelope envelope;
  std::size_t wire_size = 0;
};
Result<std::optional<Decoded>> decode_envelope(std::string_view buf, std::size_t max_payload);

// Splits a whole body into envelopes. kInvalidArgument as decode_envelope, and for a body that
// ends inside an envelope.
Result<std::vector<Envelope>> parse_envelopes(std::string_view body,
                                              std::size_t max_payload = kMaxRequestMessageBytes);

// The one request message of a server-streaming call: exactly one data envelope (an end-stream
// envelope may follow).
Result<std::string_view> parse_single_request(std::string_view body,
                                              std::size_t max_payload = kMaxRequestMessageBytes);

// Incremental decoder for a response stream: feed bytes as they arrive, take whole envelopes out.
class EnvelopeReader {
 public:
  struct Frame {
    std::uint8_t flags = 0;
    std::string payload;
    bool end_stream() const { return (flags & kFlagEndStream) != 0; }
  };

  explicit EnvelopeReader(std::size_t max_payload = kMaxStreamMessageBytes)
      : max_payload_(max_payload) {}
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // A frame, std::nullopt when more bytes are needed, or decode_envelope's errors.
  Result<std::optional<Frame>> next();
  bool empty() const { return buf_.empty(); }

 private:
  std::size_t max_payload_;
  std::string buf_;
};

// ---- Error codes ----

// Connect's code string for an ErrorCode ("not_found", "invalid_argument", …). Codes Connect has
// no word for take the nearest: kMethodNotAllowed → "unimplemented", kPayloadTooLarge and
// kInsufficientStorage → "resource_exhausted", kUnsupportedMediaType → "invalid_argument".
std::string_view connect_code(ErrorCode code);
// The ErrorCode for a Connect code string; unknown strings (and "unknown", "data_loss",
// "internal") are kInternal. Not the inverse of connect_code for the approximated codes above.
ErrorCode code_from_connect(std::string_view code);

// The HTTP status Connect uses for a code on unary calls (not_found 404, already_exists 409, …).
unsigned connect_http_status(ErrorCode code);
// The Connect code for an HTTP status that came without a Connect error body (a proxy's answer),
// as the protocol's "HTTP to error code" table says: 400 internal, 401 unauthenticated, 403
// permission_denied, 404 unimplemented, 429/502/503/504 unavailable, anything else unknown.
std::string_view connect_code_for_http_status(unsigned status);

// ---- Error JSON ----

// {"code":…,"message":…}, serialized: a unary error body.
std::string error_json(const Error& err);
// An end-stream frame's payload: `{}` or {"error":{"code":…,"message":…}}.
std::string end_stream_payload(const Error* err);
// The error in an end-stream frame's JSON, if any. A missing code reads as "unknown" (kInternal),
// a missing message as the code.
std::optional<Error> end_stream_error(const boost::json::value& v);

}  // namespace abx::connect
