#include "abx/egress/h2_request.h"

#include <algorithm>

#include "abx/base/ascii.h"

namespace abx::egress {

std::string authority_host_name(std::string_view host) {
  auto colon = host.rfind(':');
  if (colon != std::string_view::npos && colon + 1 < host.size() &&
      host.find_first_not_of("0123456789", colon + 1) == std::string_view::npos &&
      host.find(']') == std::string_view::npos)
    host = host.substr(0, colon);
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  return ascii_lower(host);
}

std::optional<H2Refusal> check_h2_request(const std::vector<Header>& fields,
                                          std::string_view tls_name, std::string* host) {
  host->clear();
  std::string_view method, path;
  bool named = false;
  std::optional<std::string> other;  // a name that is not tls_name
  for (const auto& [k, v] : fields) {
    if (k == ":method") {
      method = v;
    } else if (k == ":path") {
      path = v;
    } else if (k == ":authority" || ascii_iequals(k, "host")) {
      std::string n = authority_host_name(v);
      if (host->empty()) *host = n;
      named = true;
      if (n != tls_name && !other) other = std::move(n);
    }
  }
  if (other) {
    *host = *other;
    return H2Refusal{421, "Host differs from the connection's name " + std::string(tls_name)};
  }
  if (method == "CONNECT")
    return H2Refusal{405,
                     "CONNECT over HTTP/2 (RFC 8441 WebSocket included) is not relayed "
                     "on a connection with network.rules; use HTTP/1.1"};
  if (!named)
    return H2Refusal{421,
                     "no :authority or Host: the connection's name is " + std::string(tls_name)};
  if (path.empty() || (path.front() != '/' && path != "*"))
    return H2Refusal{400, "request :path is not a path"};
  return std::nullopt;
}

std::size_t apply_h2_headers(std::vector<Header>& fields, const std::vector<Header>& rule) {
  std::size_t first = fields.size();
  for (const Header& h : rule) {
    const std::string& k = h.first;
    std::size_t removed_before_first = 0;
    std::size_t i = 0;
    auto it = std::remove_if(fields.begin(), fields.end(), [&](const Header& f) {
      bool same = ascii_iequals(f.first, k);
      if (same && i < first) ++removed_before_first;
      ++i;
      return same;
    });
    fields.erase(it, fields.end());
    first -= removed_before_first;
    fields.emplace_back(ascii_lower(k), h.second);
  }
  return first;
}

}  // namespace abx::egress
