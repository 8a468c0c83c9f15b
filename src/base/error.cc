#include "abx/base/error.h"

namespace abx {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kUnauthenticated:
      return "Unauthenticated";
    case ErrorCode::kPermissionDenied:
      return "PermissionDenied";
    case ErrorCode::kNotFound:
      return "NotFound";
    case ErrorCode::kMethodNotAllowed:
      return "MethodNotAllowed";
    case ErrorCode::kAlreadyExists:
      return "AlreadyExists";
    case ErrorCode::kFailedPrecondition:
      return "FailedPrecondition";
    case ErrorCode::kPayloadTooLarge:
      return "PayloadTooLarge";
    case ErrorCode::kUnsupportedMediaType:
      return "UnsupportedMediaType";
    case ErrorCode::kResourceExhausted:
      return "ResourceExhausted";
    case ErrorCode::kInternal:
      return "Internal";
    case ErrorCode::kUnimplemented:
      return "Unimplemented";
    case ErrorCode::kUnavailable:
      return "Unavailable";
    case ErrorCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case ErrorCode::kInsufficientStorage:
      return "InsufficientStorage";
  }
  return "Unknown";
}

std::string Error::to_string() const { return type() + ": " + message_; }

}  // namespace abx
