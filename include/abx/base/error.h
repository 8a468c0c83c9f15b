// abx::Error and abx::Result<T>: how every module reports a recoverable failure.
//
// An Error carries a canonical code (a small closed set, as in abseil's Status), a message with
// enough context to act on, and a wire `type` (the error class shown to HTTP callers; defaults to
// the code's PascalCase name). Exceptions stay inside a registered command's body and CLI parsing;
// module boundaries return Result<T>.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace abx {

enum class ErrorCode {
  kInvalidArgument,       // bad input from the caller (400)
  kUnauthenticated,       // missing or wrong credentials (401)
  kPermissionDenied,      // authenticated but not allowed (403)
  kNotFound,              // no such thing (404)
  kMethodNotAllowed,      // route exists, verb does not (405)
  kAlreadyExists,         // (409)
  kFailedPrecondition,    // state does not allow it (409)
  kPayloadTooLarge,       // body or field over a limit (413)
  kUnsupportedMediaType,  // body is not the expected content type (415)
  kResourceExhausted,     // quota or capacity (429)
  kInternal,              // a bug or an unexpected failure (500)
  kUnimplemented,         // (501)
  kUnavailable,           // shutting down or not ready (503)
  kDeadlineExceeded,      // (504)
  kInsufficientStorage,   // disk full (507)
};

// PascalCase name of a code, e.g. "InvalidArgument"; used as the default wire type.
std::string_view error_code_name(ErrorCode code);

class Error {
 public:
  Error(ErrorCode code, std::string message, std::string type = {})
      : code_(code), message_(std::move(message)), type_(std::move(type)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The error class as shown on the wire: an explicit type if one was given, else the code name.
  std::string type() const { return type_.empty() ? std::string(error_code_name(code_)) : type_; }

  // "InvalidArgument: message" — for logs and CLI output.
  std::string to_string() const;

  // The same error with "<context>: " before its message (code and type kept): what failed, then
  // why, as `image pull alpine: manifest: not found`.
  Error with_context(std::string_view context) const {
    return Error(code_, std::string(context) + ": " + message_, type_);
  }

 private:
  ErrorCode code_;
  std::string message_;
  std::string type_;
};

inline Error invalid_argument(std::string msg) {
  return {ErrorCode::kInvalidArgument, std::move(msg)};
}
inline Error not_found(std::string msg) { return {ErrorCode::kNotFound, std::move(msg)}; }
inline Error internal_error(std::string msg) { return {ErrorCode::kInternal, std::move(msg)}; }
inline Error unavailable(std::string msg) { return {ErrorCode::kUnavailable, std::move(msg)}; }

// Result<T>: a value or an Error. Result<void> holds only the error case.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_{ErrorCode::kInternal, {}};
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace abx
