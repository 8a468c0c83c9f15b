#include "abx/mcp/session.h"

#include <algorithm>
#include <cctype>

#include "abx/base/ascii.h"
#include "abx/base/try.h"
#include "abx/token/token.h"

namespace abx::mcp {

namespace {

constexpr std::size_t kSessionIdBytes = 16;  // 128 random bits, hex
constexpr std::size_t kShownOriginBytes = 100;

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && ascii_iequals(s.substr(0, prefix.size()), prefix);
}

// The host of an origin "scheme://host[:port]" when the scheme is http(s); empty otherwise.
std::string_view origin_host(std::string_view origin) {
  std::string_view rest;
  if (istarts_with(origin, "http://")) {
    rest = origin.substr(7);
  } else if (istarts_with(origin, "https://")) {
    rest = origin.substr(8);
  } else {
    return {};
  }
  if (rest.find('/') != std::string_view::npos) return {};
  if (!rest.empty() && rest.front() == '[') {  // [v6]:port
    auto close = rest.find(']');
    return close == std::string_view::npos ? std::string_view{} : rest.substr(0, close + 1);
  }
  return rest.substr(0, rest.find(':'));
}

bool is_initialize(const Message& m) {
  return m.kind == Message::Kind::kRequest && m.method == "initialize";
}

}  // namespace

Result<std::shared_ptr<Session>> SessionStore::session_for(const Message& m,
                                                           std::string_view session_id,
                                                           std::string_view protocol_version,
                                                           std::string_view credential) {
  if (is_initialize(m)) {
    if (!session_id.empty()) {
      return invalid_request("initialize opens a new session: send it without Mcp-Session-Id");
    }
    // Not shared until open(), so the dispatcher may write its state unlocked.
    auto s = std::make_shared<Session>();
    s->credential.emplace(credential);
    return s;
  }
  ABX_ASSIGN_OR_RETURN(auto s, find(session_id, credential));
  if (!protocol_version.empty() && protocol_version != s->state.protocol_version) {
    return invalid_request("MCP-Protocol-Version '" + std::string(protocol_version.substr(0, 32)) +
                           "' is not this session's (" + s->state.protocol_version + ")");
  }
  return s;
}

Result<std::string> SessionStore::open(const std::shared_ptr<Session>& s) {
  ABX_ASSIGN_OR_RETURN(s->id, token::random_hex(kSessionIdBytes));
  std::lock_guard lock(mu_);
  while (lru_.size() >= capacity_) {
    by_id_.erase(lru_.back()->id);
    lru_.pop_back();
  }
  lru_.push_front(s);
  by_id_[s->id] = lru_.begin();
  return s->id;
}

Status SessionStore::end(std::string_view session_id, std::string_view credential) {
  ABX_ASSIGN_OR_RETURN(auto s, find(session_id, credential));
  std::lock_guard lock(mu_);
  // Another request may have ended it since find(): then there is nothing left to do.
  if (auto it = by_id_.find(s->id); it != by_id_.end()) {
    lru_.erase(it->second);
    by_id_.erase(it);
  }
  return {};
}

std::size_t SessionStore::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

Result<std::shared_ptr<Session>> SessionStore::find(std::string_view session_id,
                                                    std::string_view credential) {
  if (session_id.empty()) {
    return invalid_request(
        "Mcp-Session-Id header is required (send initialize first to open a session)");
  }
  std::lock_guard lock(mu_);
  auto it = by_id_.find(session_id);
  // A session opened with another credential is as unknown as a made-up id.
  if (it == by_id_.end() || !(*it->second)->credential ||
      !(*it->second)->credential->matches(credential)) {
    return session_not_found("unknown or ended MCP session (send initialize again)");
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return *it->second;
}

bool origin_allowed(std::string_view origin, std::span<const std::string> also_allowed) {
  for (const auto& a : also_allowed) {
    if (a == "*" || ascii_iequals(a, origin)) return true;
  }
  std::string_view host = origin_host(origin);
  return ascii_iequals(host, "localhost") || host == "127.0.0.1" || host == "[::1]";
}

Status check_origin(std::string_view origin, std::span<const std::string> also_allowed,
                    std::string_view hint) {
  if (origin.empty() || origin_allowed(origin, also_allowed)) return {};
  std::string shown = origin.size() > kShownOriginBytes
                          ? std::string(origin.substr(0, kShownOriginBytes)) + "..."
                          : std::string(origin);
  return Error(ErrorCode::kPermissionDenied,
               "Origin '" + shown + "' may not use /mcp" + std::string(hint));
}

}  // namespace abx::mcp
