// The one mapping between errors and HTTP statuses, and the JSON bodies built on it.
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "abx/http/server.h"

namespace abx::http {

namespace bhttp = boost::beast::http;

ErrorCode error_code_for_status(unsigned status) {
  switch (status) {
    case 400:
      return ErrorCode::kInvalidArgument;
    case 401:
      return ErrorCode::kUnauthenticated;
    case 403:
      return ErrorCode::kPermissionDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 405:
      return ErrorCode::kMethodNotAllowed;
    case 409:
      return ErrorCode::kFailedPrecondition;
    case 413:
      return ErrorCode::kPayloadTooLarge;
    case 415:
      return ErrorCode::kUnsupportedMediaType;
    case 429:
      return ErrorCode::kResourceExhausted;
    case 501:
      return ErrorCode::kUnimplemented;
    case 502:
    case 503:
      return ErrorCode::kUnavailable;
    case 504:
      return ErrorCode::kDeadlineExceeded;
    case 507:
      return ErrorCode::kInsufficientStorage;
    default:
      return status >= 500 ? ErrorCode::kInternal : ErrorCode::kInvalidArgument;
  }
}

unsigned http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kMethodNotAllowed:
      return 405;
    case ErrorCode::kAlreadyExists:
      return 409;
    case ErrorCode::kFailedPrecondition:
      return 409;
    case ErrorCode::kPayloadTooLarge:
      return 413;
    case ErrorCode::kUnsupportedMediaType:
      return 415;
    case ErrorCode::kResourceExhausted:
      return 429;
    case ErrorCode::kInternal:
      return 500;
    case ErrorCode::kUnimplemented:
      return 501;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    case ErrorCode::kInsufficientStorage:
      return 507;
  }
  return 500;
}

namespace {

template <class Json>
Response json_response_of(unsigned status, const Json& body, unsigned version, bool keep_alive) {
  Response res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = boost::json::serialize(body);
  res.keep_alive(keep_alive);
  return res;
}

}  // namespace

Response json_response(unsigned status, const boost::json::value& body, unsigned version,
                       bool keep_alive) {
  return json_response_of(status, body, version, keep_alive);
}
Response json_response(unsigned status, const boost::json::object& body, unsigned version,
                       bool keep_alive) {
  return json_response_of(status, body, version, keep_alive);
}
Response json_response(unsigned status, const boost::json::array& body, unsigned version,
                       bool keep_alive) {
  return json_response_of(status, body, version, keep_alive);
}

Response empty_response(bhttp::status status, unsigned version, bool keep_alive) {
  Response r{status, version};
  r.keep_alive(keep_alive);
  r.prepare_payload();
  return r;
}

Response error_response(const Error& error, unsigned version, bool keep_alive) {
  return json_response(http_status(error.code()),
                       boost::json::object{{"error", error.message()}, {"type", error.type()}},
                       version, keep_alive);
}

}  // namespace abx::http
