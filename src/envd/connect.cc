#include "envd/connect.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace abx::envd {

namespace bhttp = boost::beast::http;

Result<std::vector<Envelope>> parse_envelopes(std::string_view body, std::size_t max_payload) {
  std::vector<Envelope> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    if (body.size() - pos < 5) {
      return invalid_argument("truncated envelope header at byte " + std::to_string(pos));
    }
    auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(body[pos + i]); };
    std::uint8_t flags = b(0);
    std::uint32_t len = (std::uint32_t{b(1)} << 24) | (std::uint32_t{b(2)} << 16) |
                        (std::uint32_t{b(3)} << 8) | std::uint32_t{b(4)};
    if (flags & kFlagCompressed) {
      return invalid_argument("compressed envelope, but no compression was negotiated");
    }
    if (flags & ~kFlagEndStream) {
      return invalid_argument("unknown envelope flags " + std::to_string(flags));
    }
    if (len > max_payload) {
      return invalid_argument("envelope of " + std::to_string(len) +
                              " bytes exceeds the limit of " + std::to_string(max_payload));
    }
    if (body.size() - pos - 5 < len) {
      return invalid_argument("truncated envelope: header says " + std::to_string(len) +
                              " bytes, " + std::to_string(body.size() - pos - 5) + " present");
    }
    out.push_back({flags, body.substr(pos + 5, len)});
    pos += 5 + std::size_t{len};
  }
  return out;
}

Result<std::string_view> parse_single_request(std::string_view body) {
  auto envs = parse_envelopes(body);
  if (!envs.ok()) return envs.error();
  std::vector<Envelope> data;
  for (const auto& e : *envs) {
    if (!(e.flags & kFlagEndStream)) data.push_back(e);
  }
  if (data.size() != 1) {
    return invalid_argument("expected exactly one request message, got " +
                            std::to_string(data.size()));
  }
  return data[0].payload;
}

std::string encode_envelope(std::uint8_t flags, std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  auto n = static_cast<std::uint32_t>(payload.size());
  out.push_back(static_cast<char>(flags));
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.append(payload);
  return out;
}

std::string_view connect_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kMethodNotAllowed:
      return "unimplemented";
    case ErrorCode::kAlreadyExists:
      return "already_exists";
    case ErrorCode::kFailedPrecondition:
      return "failed_precondition";
    case ErrorCode::kPayloadTooLarge:
      return "resource_exhausted";
    case ErrorCode::kUnsupportedMediaType:
      return "invalid_argument";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorCode::kInsufficientStorage:
      return "resource_exhausted";
  }
  return "unknown";
}

unsigned connect_http_status(ErrorCode code) {
  // https://connectrpc.com/docs/protocol#error-codes
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    // An unknown procedure is answered like connect-go's mux does: 404 with code
    // "unimplemented" (the JS client maps 404 to unimplemented as well).
    case ErrorCode::kMethodNotAllowed:
      return 404;
    case ErrorCode::kUnimplemented:
      return 404;
    case ErrorCode::kAlreadyExists:
      return 409;
    case ErrorCode::kFailedPrecondition:
      return 400;
    case ErrorCode::kPayloadTooLarge:
      return 429;
    case ErrorCode::kUnsupportedMediaType:
      return 400;
    case ErrorCode::kResourceExhausted:
      return 429;
    case ErrorCode::kInternal:
      return 500;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    case ErrorCode::kInsufficientStorage:
      return 429;
  }
  return 500;
}

namespace {
boost::json::object error_object(const Error& err) {
  return {{"code", connect_code(err.code())}, {"message", err.message()}};
}
}  // namespace

http::Response connect_error_response(const Error& err, unsigned version) {
  http::Response res{static_cast<bhttp::status>(connect_http_status(err.code())), version};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = boost::json::serialize(error_object(err));
  return res;
}

std::string end_stream_payload(const Error* err) {
  if (!err) return "{}";
  return boost::json::serialize(boost::json::object{{"error", error_object(*err)}});
}

http::Response connect_stream_error_response(const Error& err, unsigned version) {
  http::Response res{bhttp::status::ok, version};
  res.set(bhttp::field::content_type, "application/connect+json");
  res.body() = encode_envelope(kFlagEndStream, end_stream_payload(&err));
  return res;
}

http::Response rest_error_response(const Error& err, unsigned version) {
  unsigned status = http::http_status(err.code());
  http::Response res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::content_type, "application/json; charset=utf-8");
  res.body() =
      boost::json::serialize(boost::json::object{{"code", status}, {"message", err.message()}});
  return res;
}

}  // namespace abx::envd
