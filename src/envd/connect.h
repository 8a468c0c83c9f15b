// Connect protocol framing and the envd error mappings (the two wire shapes envd speaks).
//
// Streaming Connect calls carry *envelopes*: 1 flag byte, a 4-byte big-endian length, then the
// message. Flag 0x02 marks the end-stream frame whose JSON carries the error or `{}`; 0x01
// (compressed) is never valid here since envd negotiates no compression. Parsing is a pure
// function over bytes (fuzzed by envelope_fuzz) with an explicit size cap.
//
// Errors travel two ways: Connect calls answer `{"code":"not_found","message":…}` with the HTTP
// status Connect assigns to the code (or, inside a stream, in the end-stream frame with 200);
// the REST routes (/files, auth) answer `{"code":<http status>,"message":…}` as envd does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/http/server.h"

namespace abx::envd {

inline constexpr std::uint8_t kFlagCompressed = 0x01;
inline constexpr std::uint8_t kFlagEndStream = 0x02;
inline constexpr std::size_t kMaxEnvelopeBytes = 4 * 1024 * 1024;

struct Envelope {
  std::uint8_t flags = 0;
  std::string_view payload;  // a view into the parsed buffer
};

// Splits `body` into envelopes. Errors (kInvalidArgument): a truncated header or payload, a
// payload over `max_payload`, a compressed flag or an unknown flag bit.
Result<std::vector<Envelope>> parse_envelopes(std::string_view body,
                                              std::size_t max_payload = kMaxEnvelopeBytes);

// The one request message of a server-streaming call: exactly one data envelope.
Result<std::string_view> parse_single_request(std::string_view body);

std::string encode_envelope(std::uint8_t flags, std::string_view payload);

// Connect's code string for an Error ("not_found", "invalid_argument", …).
std::string_view connect_code(ErrorCode code);
// The HTTP status Connect uses for a code on unary calls (not_found 404, already_exists 409, …).
unsigned connect_http_status(ErrorCode code);

// Unary error response: {"code":…,"message":…} with Connect's status.
http::Response connect_error_response(const Error& err, unsigned version);
// End-stream frame payload: `{}` or {"error":{"code":…,"message":…}}.
std::string end_stream_payload(const Error* err);
// A whole streaming response that is only an end-stream error frame (status 200).
http::Response connect_stream_error_response(const Error& err, unsigned version);

// The REST shape: {"code":<status>,"message":…}, application/json; charset=utf-8.
http::Response rest_error_response(const Error& err, unsigned version);

}  // namespace abx::envd
