#include "abx/connect/connect.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace abx::connect {

std::string encode_envelope(std::uint8_t flags, std::string_view payload) {
  std::string out;
  out.reserve(kEnvelopeHeaderBytes + payload.size());
  auto n = static_cast<std::uint32_t>(payload.size());
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(payload);
  return out;
}

std::string encode_end_stream(const Error* err) {
  return encode_envelope(kFlagEndStream, end_stream_payload(err));
}

Result<std::optional<Decoded>> decode_envelope(std::string_view buf, std::size_t max_payload) {
  if (buf.size() < kEnvelopeHeaderBytes) return std::optional<Decoded>{};
  auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(buf[i]); };
  std::uint8_t flags = b(0);
  std::uint32_t len = (std::uint32_t{b(1)} << 24) | (std::uint32_t{b(2)} << 16) |
                      (std::uint32_t{b(3)} << 8) | std::uint32_t{b(4)};
  if (flags & kFlagCompressed) {
    return invalid_argument("compressed Connect envelope, but no compression was negotiated");
  }
  if (flags & ~kFlagEndStream) {
    return invalid_argument("unknown Connect envelope flags " + std::to_string(flags));
  }
  if (len > max_payload) {
    return invalid_argument("Connect envelope of " + std::to_string(len) +
                            " bytes exceeds the limit of " + std::to_string(max_payload));
  }
  if (buf.size() - kEnvelopeHeaderBytes < len) return std::optional<Decoded>{};
  return std::optional<Decoded>(
      Decoded{{flags, buf.substr(kEnvelopeHeaderBytes, len)}, kEnvelopeHeaderBytes + len});
}

Result<std::vector<Envelope>> parse_envelopes(std::string_view body, std::size_t max_payload) {
  std::vector<Envelope> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    auto d = decode_envelope(body.substr(pos), max_payload);
    if (!d.ok()) return d.error();
    if (!*d) {
      return invalid_argument("truncated Connect envelope at byte " + std::to_string(pos) + " (" +
                              std::to_string(body.size() - pos) + " bytes left)");
    }
    out.push_back((*d)->envelope);
    pos += (*d)->wire_size;
  }
  return out;
}

Result<std::string_view> parse_single_request(std::string_view body, std::size_t max_payload) {
  auto envs = parse_envelopes(body, max_payload);
  if (!envs.ok()) return envs.error();
  std::optional<std::string_view> data;
  std::size_t count = 0;
  for (const auto& e : *envs) {
    if (e.end_stream()) continue;
    ++count;
    data = e.payload;
  }
  if (count != 1) {
    return invalid_argument("expected exactly one request message, got " + std::to_string(count));
  }
  return *data;
}

Result<std::optional<EnvelopeReader::Frame>> EnvelopeReader::next() {
  auto d = decode_envelope(buf_, max_payload_);
  if (!d.ok()) return d.error();
  if (!*d) return std::optional<Frame>{};
  Frame f{(*d)->envelope.flags, std::string((*d)->envelope.payload)};
  buf_.erase(0, (*d)->wire_size);
  return std::optional<Frame>(std::move(f));
}

std::string_view connect_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupportedMediaType:
      return "invalid_argument";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kMethodNotAllowed:
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kAlreadyExists:
      return "already_exists";
    case ErrorCode::kFailedPrecondition:
      return "failed_precondition";
    case ErrorCode::kPayloadTooLarge:
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kInsufficientStorage:
      return "resource_exhausted";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
  }
  return "unknown";
}

ErrorCode code_from_connect(std::string_view c) {
  if (c == "invalid_argument" || c == "out_of_range") return ErrorCode::kInvalidArgument;
  if (c == "unauthenticated") return ErrorCode::kUnauthenticated;
  if (c == "permission_denied") return ErrorCode::kPermissionDenied;
  if (c == "not_found") return ErrorCode::kNotFound;
  if (c == "already_exists") return ErrorCode::kAlreadyExists;
  if (c == "failed_precondition" || c == "aborted") return ErrorCode::kFailedPrecondition;
  if (c == "resource_exhausted") return ErrorCode::kResourceExhausted;
  if (c == "unimplemented") return ErrorCode::kUnimplemented;
  if (c == "unavailable") return ErrorCode::kUnavailable;
  if (c == "deadline_exceeded" || c == "canceled") return ErrorCode::kDeadlineExceeded;
  return ErrorCode::kInternal;
}

unsigned connect_http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kUnsupportedMediaType:
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
    case ErrorCode::kUnimplemented:
      return 404;
    case ErrorCode::kAlreadyExists:
      return 409;
    case ErrorCode::kPayloadTooLarge:
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kInsufficientStorage:
      return 429;
    case ErrorCode::kInternal:
      return 500;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
  }
  return 500;
}

std::string_view connect_code_for_http_status(unsigned status) {
  switch (status) {
    case 400:
      return "internal";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "unimplemented";
    case 429:
    case 502:
    case 503:
    case 504:
      return "unavailable";
    default:
      return "unknown";
  }
}

namespace {
boost::json::object error_object(const Error& err) {
  return {{"code", connect_code(err.code())}, {"message", err.message()}};
}
}  // namespace

std::string error_json(const Error& err) { return boost::json::serialize(error_object(err)); }

std::string end_stream_payload(const Error* err) {
  if (!err) return "{}";
  return boost::json::serialize(boost::json::object{{"error", error_object(*err)}});
}

std::optional<Error> end_stream_error(const boost::json::value& v) {
  if (!v.is_object()) return std::nullopt;
  const auto* e = v.as_object().if_contains("error");
  if (e == nullptr || !e->is_object()) return std::nullopt;
  std::string code = "unknown";
  std::string message;
  if (auto* c = e->as_object().if_contains("code"); c && c->is_string()) code = c->as_string();
  if (auto* m = e->as_object().if_contains("message"); m && m->is_string()) {
    message = m->as_string();
  }
  return Error(code_from_connect(code), message.empty() ? code : message);
}

}  // namespace abx::connect
