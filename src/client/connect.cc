#include "client/connect.h"

#include <boost/json.hpp>

#include "abx/base/json.h"
#include "client/transport.h"

namespace abx::client::detail {

std::string encode_envelope(std::string_view json, std::uint8_t flags) {
  std::string out;
  out.reserve(5 + json.size());
  out.push_back(static_cast<char>(flags));
  auto n = static_cast<std::uint32_t>(json.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(json);
  return out;
}

Result<std::optional<Envelope>> EnvelopeReader::next() {
  if (buf_.size() < 5) return std::optional<Envelope>{};
  auto flags = static_cast<std::uint8_t>(buf_[0]);
  std::uint32_t n = 0;
  for (int i = 1; i <= 4; ++i) n = (n << 8) | static_cast<unsigned char>(buf_[i]);
  if (flags & 0x01) return invalid_argument("compressed Connect envelope (not negotiated)");
  if (n > kMaxEnvelopeBytes) return invalid_argument("Connect envelope over 16 MiB");
  if (buf_.size() < 5 + static_cast<std::size_t>(n)) return std::optional<Envelope>{};
  Envelope e{flags, buf_.substr(5, n)};
  buf_.erase(0, 5 + n);
  return std::optional<Envelope>(std::move(e));
}

Status read_connect_stream(http::Connection& conn, http::Request req,
                           const std::function<Status(const boost::json::value&)>& on_message,
                           std::chrono::milliseconds idle_timeout) {
  std::string what = std::string(req.target());
  if (auto slash = what.rfind('/', what.rfind('/') - 1); slash != std::string::npos)
    what = what.substr(slash + 1);  // "process.Process/Start"
  EnvelopeReader reader;
  std::optional<Error> failure;
  bool ended = false;
  bool raw_mode = false;  // a JSON error body instead of envelopes
  std::string raw;
  auto res = conn.send_streaming(
      std::move(req),
      [&](std::string_view piece) {
        // An envelope starts with flag 0x00 or 0x02; an error body with '{'.
        if (raw_mode ||
            (reader.empty() && raw.empty() && !ended && !piece.empty() && piece.front() == '{')) {
          raw_mode = true;
          if (raw.size() < 64 * 1024) raw.append(piece);
          return true;
        }
        reader.feed(piece);
        for (;;) {
          auto env = reader.next();
          if (!env.ok()) {
            failure = env.error();
            return false;
          }
          if (!*env) return true;
          auto v = parse_json_strict((*env)->data);
          if (!v.ok()) {
            failure =
                Error(ErrorCode::kInternal, "bad JSON in a Connect frame: " + v.error().message());
            return false;
          }
          if ((*env)->flags & kEndStreamFlag) {
            ended = true;
            if (auto e = end_stream_error(*v)) failure = *e;
            return true;
          }
          if (auto st = on_message(*v); !st.ok()) {
            failure = st.error();
            return false;
          }
        }
      },
      idle_timeout);
  if (!res.ok()) return failure ? *failure : res.error();
  if (res->result_int() != 200 || raw_mode) {
    http::Response copy = *res;
    copy.body() = raw;
    return error_from_response(copy, Plane::kEnvd, what);
  }
  if (failure) return *failure;
  if (!ended) return unavailable("Connect stream ended without an end-stream frame");
  return {};
}

std::optional<Error> end_stream_error(const boost::json::value& v) {
  if (!v.is_object()) return std::nullopt;
  const auto* e = v.as_object().if_contains("error");
  if (e == nullptr || !e->is_object()) return std::nullopt;
  std::string code = "unknown";
  std::string message;
  if (auto* c = e->as_object().if_contains("code"); c && c->is_string()) code = c->as_string();
  if (auto* m = e->as_object().if_contains("message"); m && m->is_string())
    message = m->as_string();
  return Error(code_for_connect(code), message.empty() ? code : message);
}

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    std::uint32_t v = (static_cast<unsigned char>(in[i]) << 16) |
                      (static_cast<unsigned char>(in[i + 1]) << 8) |
                      static_cast<unsigned char>(in[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  if (i < in.size()) {
    std::uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Result<std::string> base64_decode(std::string_view in) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return invalid_argument("bad base64 length");
  std::string out;
  out.reserve(in.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = b64_value(c);
    if (v < 0) return invalid_argument("bad base64 character");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace abx::client::detail
