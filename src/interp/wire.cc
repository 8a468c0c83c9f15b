#include "abx/interp/wire.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

#include "abx/base/hex.h"
#include "abx/base/json.h"
#include "abx/token/token.h"

namespace abx::interp {
namespace json = boost::json;

namespace {

// "2026-12-01T08:44:11.123456Z": jupyter_client's own date form (isoformat, +00:00 as Z).
std::string iso_now_us() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  long frac = static_cast<long>(us % 1'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[96];
  std::snprintf(out, sizeof out, "%.*s.%06ldZ", static_cast<int>(n), buf, frac);
  return out;
}

Error bad(std::string why) { return invalid_argument("jupyter message: " + std::move(why)); }

Result<json::object> parse_object(std::string_view frame, std::string_view what,
                                  const WireLimits& limits) {
  auto v = parse_json_strict(frame, JsonLimits{.max_depth = limits.max_json_depth});
  if (!v.ok()) return bad(std::string(what) + ": " + v.error().message());
  if (!v->is_object()) return bad(std::string(what) + " is not a JSON object");
  return std::move(v->get_object());
}

}  // namespace

// Lenient, as the protocol requires (wire.h).
std::string_view Message::msg_type() const { return json_string_or_empty(header, "msg_type"); }
std::string_view Message::msg_id() const { return json_string_or_empty(header, "msg_id"); }
std::string_view Message::parent_id() const {
  return json_string_or_empty(parent_header, "msg_id");
}

Message make_message(std::string_view msg_type, json::object content, std::string_view session) {
  Message m;
  m.header["msg_id"] = token::random_uuid();
  m.header["session"] = session;
  m.header["username"] = "abx";
  m.header["date"] = iso_now_us();
  m.header["msg_type"] = msg_type;
  m.header["version"] = kProtocolVersion;
  m.content = std::move(content);
  return m;
}

std::string sign(std::string_view key, const std::vector<std::string_view>& parts) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  std::size_t len = 0;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()),
                                           key.size(), params) == 1;
  for (std::string_view p : parts) {
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  ok = ok && EVP_MAC_final(ctx, out.data(), &len, out.size()) == 1;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  // A failed HMAC yields "", which never equals a real 64-digit signature.
  return ok ? to_hex(out.data(), len) : std::string();
}

std::vector<std::string> encode(const Message& msg, std::string_view key) {
  std::vector<std::string> frames;
  frames.reserve(msg.identities.size() + 6 + msg.buffers.size());
  frames.insert(frames.end(), msg.identities.begin(), msg.identities.end());
  frames.emplace_back(kDelimiter);
  std::string header = json::serialize(msg.header);
  std::string parent = json::serialize(msg.parent_header);
  std::string metadata = json::serialize(msg.metadata);
  std::string content = json::serialize(msg.content);
  frames.push_back(key.empty() ? std::string() : sign(key, {header, parent, metadata, content}));
  frames.push_back(std::move(header));
  frames.push_back(std::move(parent));
  frames.push_back(std::move(metadata));
  frames.push_back(std::move(content));
  frames.insert(frames.end(), msg.buffers.begin(), msg.buffers.end());
  return frames;
}

Result<Message> decode(std::vector<std::string> frames, std::string_view key,
                       const WireLimits& limits) {
  if (frames.size() > limits.max_frames) {
    return bad(std::to_string(frames.size()) + " frames, over the limit of " +
               std::to_string(limits.max_frames));
  }
  std::size_t total = 0;
  for (const auto& f : frames) total += f.size();
  if (total > limits.max_total_bytes) {
    return bad(std::to_string(total) + " bytes, over the limit of " +
               std::to_string(limits.max_total_bytes));
  }
  std::size_t delim = 0;
  while (delim < frames.size() && frames[delim] != kDelimiter) ++delim;
  if (delim == frames.size()) return bad("no <IDS|MSG> delimiter");
  const std::size_t sig = delim + 1;
  if (frames.size() < sig + 5) return bad("fewer than four frames after the signature");

  // The signature is checked before any JSON is parsed. With no key the protocol sends "" and
  // checks nothing (jupyter_client's Session does the same).
  if (!key.empty()) {
    std::string expected =
        sign(key, {frames[sig + 1], frames[sig + 2], frames[sig + 3], frames[sig + 4]});
    if (expected.empty() || !token::constant_time_equal(expected, frames[sig])) {
      return bad("bad signature");
    }
  }

  Message m;
  auto header = parse_object(frames[sig + 1], "header", limits);
  if (!header.ok()) return header.error();
  auto parent = parse_object(frames[sig + 2], "parent_header", limits);
  if (!parent.ok()) return parent.error();
  auto metadata = parse_object(frames[sig + 3], "metadata", limits);
  if (!metadata.ok()) return metadata.error();
  auto content = parse_object(frames[sig + 4], "content", limits);
  if (!content.ok()) return content.error();
  m.header = std::move(*header);
  m.parent_header = std::move(*parent);
  m.metadata = std::move(*metadata);
  m.content = std::move(*content);
  m.identities.assign(std::make_move_iterator(frames.begin()),
                      std::make_move_iterator(frames.begin() + static_cast<std::ptrdiff_t>(delim)));
  m.buffers.assign(std::make_move_iterator(frames.begin() + static_cast<std::ptrdiff_t>(sig + 5)),
                   std::make_move_iterator(frames.end()));
  return m;
}

}  // namespace abx::interp
