// E2B's network.rules (transform.h).
#include "abx/egress/transform.h"

#include <algorithm>
#include <boost/json.hpp>

#include "abx/base/ascii.h"

namespace abx::egress {

namespace json = boost::json;

namespace {

std::string quoted(std::string_view s) { return json::serialize(json::value(json::string(s))); }

// Whether some name `a` matches is also matched by `b` (both patterns).
bool overlaps(const DomainPattern& a, const DomainPattern& b) {
  if (!a.wildcard && !b.wildcard) return a.name == b.name;
  if (!a.wildcard) return b.matches(a.name);
  if (!b.wildcard) return a.matches(b.name);
  return a.name == b.name || DomainPattern{b.name, true}.matches(a.name) ||
         DomainPattern{a.name, true}.matches(b.name);
}

}  // namespace

std::string check_header_name(std::string_view name) {
  if (name.empty()) return "a header name may not be empty";
  if (name.size() > kMaxHeaderNameBytes)
    return "a header name has at most " + std::to_string(kMaxHeaderNameBytes) + " bytes";
  if (!std::all_of(name.begin(), name.end(), is_token_char))
    return "not a header name (letters, digits and !#$%&'*+-.^_`|~ only)";
  for (std::string_view owned : {"host", "content-length", "transfer-encoding", "connection",
                                 "upgrade", "te", "trailer", "keep-alive", "proxy-connection"})
    if (ascii_iequals(name, owned)) return "the proxy does not set " + std::string(name);
  return {};
}

std::vector<Header> HostTransforms::headers() const {
  std::vector<Header> out;
  for (const auto& rule : rules)
    for (const auto& h : rule) {
      auto same = std::find_if(out.begin(), out.end(),
                               [&](const Header& o) { return ascii_iequals(o.first, h.first); });
      if (same != out.end()) out.erase(same);
      out.push_back(h);
    }
  return out;
}

const HostTransforms* TransformRules::match(std::string_view host) const {
  const HostTransforms* best = nullptr;
  for (const auto& h : hosts) {
    if (!h.pattern.matches(host)) continue;
    if (!h.pattern.wildcard) return &h;
    if (!best || h.pattern.name.size() > best->pattern.name.size()) best = &h;
  }
  return best;
}

json::object TransformRules::to_json(bool reveal) const {
  json::object out;
  for (const auto& h : hosts) {
    json::array list;
    for (const auto& rule : h.rules) {
      json::object headers;
      for (const auto& [k, v] : rule) headers[k] = reveal ? std::string_view(v) : kMaskedValue;
      list.push_back(json::object{{"transform", json::object{{"headers", std::move(headers)}}}});
    }
    out[h.pattern.str()] = std::move(list);
  }
  return out;
}

Result<TransformRules> parse_transforms(const json::value& v, std::string_view field) {
  TransformRules out;
  if (v.is_null()) return out;
  const std::string f(field);
  if (!v.is_object())
    return invalid_argument(f + " must be an object of host name -> list of rules");
  const json::object& o = v.get_object();
  if (o.size() > kMaxTransformHosts)
    return invalid_argument(f + ": at most " + std::to_string(kMaxTransformHosts) + " hosts");
  std::size_t bytes = 0;
  for (const auto& kv : o) {
    const std::string key(kv.key());
    const std::string at = f + "[" + quoted(key) + "]";
    if (key == "*") return invalid_argument(at + ": a bare '*' matches every host; name them");
    auto pattern = parse_domain(key, 1);
    if (!pattern) return invalid_argument(at + ": " + pattern.error().message());
    for (const auto& seen : out.hosts)
      if (seen.pattern == *pattern)
        return invalid_argument(at + ": the same host as " + quoted(seen.pattern.str()));
    HostTransforms host{std::move(*pattern), {}};
    if (!kv.value().is_array()) return invalid_argument(at + " must be a list of rules");
    const json::array& list = kv.value().get_array();
    if (list.size() > kMaxTransformsPerHost)
      return invalid_argument(at + ": at most " + std::to_string(kMaxTransformsPerHost) + " rules");
    std::size_t headers_of_host = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string rat = at + "[" + std::to_string(i) + "]";
      if (!list[i].is_object()) return invalid_argument(rat + " must be an object");
      std::vector<Header> rule;
      for (const auto& rkv : list[i].get_object()) {
        if (rkv.key() != "transform")
          return invalid_argument(rat + "." + std::string(rkv.key()) + " is not supported");
        const std::string tat = rat + ".transform";
        if (rkv.value().is_null()) continue;
        if (!rkv.value().is_object()) return invalid_argument(tat + " must be an object");
        for (const auto& tkv : rkv.value().get_object()) {
          if (tkv.key() != "headers")
            return invalid_argument(tat + "." + std::string(tkv.key()) + " is not supported");
          const std::string hat = tat + ".headers";
          if (tkv.value().is_null()) continue;
          if (!tkv.value().is_object())
            return invalid_argument(hat + " must be an object of header name -> value");
          for (const auto& hkv : tkv.value().get_object()) {
            const std::string_view name = hkv.key();
            const std::string nat = hat + "[" + quoted(name) + "]";
            if (std::string why = check_header_name(name); !why.empty())
              return invalid_argument(nat + ": " + why);
            if (!hkv.value().is_string()) return invalid_argument(nat + " must be a string");
            const std::string_view value = hkv.value().get_string();
            if (value.size() > kMaxHeaderValueBytes)
              return invalid_argument(nat + ": a value has at most " +
                                      std::to_string(kMaxHeaderValueBytes) + " bytes");
            for (char c : value) {
              const auto u = static_cast<unsigned char>(c);
              if (c == '\r' || c == '\n') return invalid_argument(nat + ": CR or LF in the value");
              if ((u < 0x20 && c != '\t') || u == 0x7f)
                return invalid_argument(nat + ": a control character in the value");
            }
            if (++headers_of_host > kMaxTransformHeaders)
              return invalid_argument(at + ": at most " + std::to_string(kMaxTransformHeaders) +
                                      " headers for one host");
            bytes += name.size() + value.size();
            if (bytes > kMaxTransformBytes)
              return invalid_argument(f + ": at most " + std::to_string(kMaxTransformBytes) +
                                      " bytes of header names and values in all");
            rule.emplace_back(std::string(name), std::string(value));
          }
        }
      }
      host.rules.push_back(std::move(rule));
    }
    out.hosts.push_back(std::move(host));
  }
  return out;
}

std::vector<std::string> transform_warnings(const Rules& rules, const TransformRules& transforms) {
  std::vector<std::string> out;
  const bool deny_all = std::any_of(rules.deny_cidrs.begin(), rules.deny_cidrs.end(),
                                    [](const Cidr& c) { return c.prefix == 0; });
  if (!deny_all || !rules.allow_cidrs.empty()) return out;  // reachable, or perhaps by address
  for (const auto& h : transforms.hosts) {
    bool reachable = std::any_of(rules.allow_domains.begin(), rules.allow_domains.end(),
                                 [&](const DomainPattern& d) { return overlaps(d, h.pattern); });
    if (!reachable)
      out.push_back("network.rules[" + quoted(h.pattern.str()) +
                    "]: the sandbox may not reach this host (no allowOut entry matches it); the "
                    "rule is kept and applies once allowOut does");
  }
  return out;
}

}  // namespace abx::egress
