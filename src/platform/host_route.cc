#include "abx/platform/host_route.h"

#include <boost/asio/ip/address.hpp>
#include <optional>

#include "abx/base/ascii.h"
#include "abx/store/sandbox_id.h"

namespace abx::platform {

Result<std::uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5 || s[0] == '0') {
    return invalid_argument("invalid sandbox port '" + std::string(s.substr(0, 16)) +
                            "': use 1-65535 without leading zeros");
  }
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return invalid_argument("invalid sandbox port '" + std::string(s.substr(0, 16)) + "'");
    }
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > 65535)
    return invalid_argument("invalid sandbox port '" + std::string(s) + "': over 65535");
  return static_cast<std::uint16_t>(v);
}

namespace {

// Lower-cases and drops one trailing dot and a numeric `:port`; nullopt for a malformed Host
// (a non-numeric port, empty labels).
std::optional<std::string> normalise_host(std::string_view host) {
  std::string h = ascii_lower(host);
  if (!h.empty() && h[0] == '[') {  // [v6] or [v6]:port
    auto close = h.find(']');
    if (close == std::string::npos) return std::nullopt;
    std::string rest = h.substr(close + 1);
    if (!rest.empty() && (rest[0] != ':' || rest.size() == 1 ||
                          rest.find_first_not_of("0123456789", 1) != std::string::npos)) {
      return std::nullopt;
    }
    return h.substr(0, close + 1);
  }
  auto colon = h.find(':');
  if (colon != std::string::npos) {
    std::string port = h.substr(colon + 1);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    h.erase(colon);
  }
  if (!h.empty() && h.back() == '.') h.pop_back();
  if (h.empty() || h.front() == '.' || h.find("..") != std::string::npos) return std::nullopt;
  return h;
}

bool is_ip_literal(std::string_view h) {
  boost::system::error_code ec;
  // Dotted digits (127.0.0.1, the usual Host of a local client) can only be IPv4: no IPv6 try.
  if (!h.empty() && h.find_first_not_of("0123456789.") == std::string_view::npos) {
    boost::asio::ip::make_address_v4(std::string(h), ec);
    return !ec;
  }
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  boost::asio::ip::make_address(std::string(h), ec);
  return !ec;
}

}  // namespace

std::string normalise_domain(std::string_view domain) {
  return normalise_host(domain).value_or(std::string(domain));
}

Result<Route> route_request(std::string_view host, std::string_view id_header,
                            std::string_view port_header, std::string_view domain) {
  if (host.find('@') != std::string_view::npos) {
    return invalid_argument("userinfo is not allowed in Host");
  }
  auto normalised = normalise_host(host);
  if (!normalised) return invalid_argument("malformed Host header");
  const std::string& h = *normalised;
  // sandbox.<domain>, compared in place: as a string it outgrew the inline buffer per request.
  constexpr std::string_view kShared = "sandbox.";
  const bool shared =
      h.starts_with(kShared) && std::string_view(h).substr(kShared.size()) == domain;
  if (h == "localhost" || h == domain || shared || is_ip_literal(h)) {
    if (id_header.empty() && port_header.empty()) return Route{};
    if (id_header.empty() || port_header.empty()) {
      return invalid_argument("E2b-Sandbox-Id and E2b-Sandbox-Port must be sent together");
    }
    if (!store::SandboxId::routable(id_header)) {
      return invalid_argument("invalid E2b-Sandbox-Id: use lowercase letters and digits");
    }
    auto port = parse_port(port_header);
    if (!port.ok()) return port.error();
    return Route{Route::Kind::kSandbox, std::string(id_header), *port};
  }
  // <port>-<id>.<domain>: the first label, then exactly the domain.
  auto dot = h.find('.');
  if (dot == std::string::npos || h.compare(dot + 1, std::string::npos, domain) != 0) {
    return Route{};  // not a sandbox host of ours: the control API answers (and 404s unknown paths)
  }
  std::string_view label = std::string_view(h).substr(0, dot);
  auto dash = label.find('-');
  if (dash == std::string_view::npos)
    return invalid_argument("sandbox host must be <port>-<id>." + std::string(domain));
  auto port = parse_port(label.substr(0, dash));
  if (!port.ok()) return port.error();
  std::string_view id = label.substr(dash + 1);
  if (!store::SandboxId::routable(id)) {
    return invalid_argument("invalid sandbox id in Host: use lowercase letters and digits");
  }
  return Route{Route::Kind::kSandbox, std::string(id), *port};
}

}  // namespace abx::platform
