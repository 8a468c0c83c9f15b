// envd's two error wire shapes, over abx::connect (which owns the framing, limits and code maps;
// they are re-exported here so envd's code reads as before).
//
// Connect calls answer `{"code":"not_found","message":…}` with the HTTP status Connect assigns to
// the code (or, inside a stream, in the end-stream frame with 200); the REST routes (/files,
// auth) answer `{"code":<http status>,"message":…}` as envd does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/connect/connect.h"
#include "abx/http/server.h"

namespace abx::envd {

using connect::encode_envelope;
using connect::end_stream_payload;
using connect::Envelope;
using connect::kFlagCompressed;
using connect::kFlagEndStream;
using connect::parse_envelopes;
using connect::parse_single_request;
// envd is the server side: it takes the request cap.
inline constexpr std::size_t kMaxEnvelopeBytes = connect::kMaxRequestMessageBytes;
using connect::connect_code;
using connect::connect_http_status;

// Unary error response: {"code":…,"message":…} with Connect's status.
http::Response connect_error_response(const Error& err, unsigned version);
// A whole streaming response that is only an end-stream error frame (status 200).
http::Response connect_stream_error_response(const Error& err, unsigned version);

// The REST shape: {"code":<status>,"message":…}, application/json; charset=utf-8.
http::Response rest_error_response(const Error& err, unsigned version);
// 406 in the same shape: an Accept-Encoding /files cannot satisfy (no ErrorCode maps to 406).
http::Response not_acceptable_response(const std::string& message, unsigned version);

}  // namespace abx::envd
