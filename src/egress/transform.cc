// E2B's network.rules (transform.h).
#include "abx/egress/transform.h"

#include <algorithm>
#include <boost/json.hpp>

#include "abx/base/ascii.h"
#include "abx/base/try.h"

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

bool valid_secret_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxSecretNameBytes || name.starts_with("sec_")) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '.' || c == '_' || c == '-'; });
}

namespace {

// One piece of a header value: literal text, or a placeholder (`text` as written, `name`).
struct Piece {
  std::string_view text;
  std::string name;  // empty: literal
};

constexpr std::string_view kE2bPlaceholder = "${e2b.";

Result<std::vector<Piece>> split_placeholders(std::string_view value) {
  std::vector<Piece> out;
  std::size_t pos = 0;
  while (pos < value.size()) {
    const std::size_t at = value.find(kE2bPlaceholder, pos);
    if (at == std::string_view::npos) {
      out.push_back({value.substr(pos), {}});
      break;
    }
    if (at > pos) out.push_back({value.substr(pos, at - pos), {}});
    if (value.substr(at, kSecretPlaceholderOpen.size()) != kSecretPlaceholderOpen)
      return invalid_argument(
          "only ${e2b.secrets.<name>} placeholders are supported (abxd mints no workload "
          "identity tokens)");
    const std::size_t start = at + kSecretPlaceholderOpen.size();
    const std::size_t close = value.find('}', start);
    if (close == std::string_view::npos)
      return invalid_argument("a ${e2b.secrets.<name>} placeholder has no closing '}'");
    std::string name = ascii_lower(value.substr(start, close - start));
    if (!valid_secret_name(name))
      return invalid_argument("secret name " + quoted(value.substr(start, close - start)) +
                              " in a placeholder is not a valid secret name ([a-z0-9][a-z0-9._-]*, "
                              "at most " +
                              std::to_string(kMaxSecretNameBytes) + " bytes, not sec_…)");
    out.push_back({value.substr(at, close + 1 - at), std::move(name)});
    pos = close + 1;
  }
  return out;
}

bool auth_scheme(std::string_view s) {
  if (s.size() < 2 || s.back() != ' ') return false;
  return std::all_of(s.begin(), s.end() - 1,
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); });
}

}  // namespace

Result<std::vector<std::string>> secret_names_in(std::string_view value) {
  ABX_ASSIGN_OR_RETURN(auto pieces, split_placeholders(value));
  std::vector<std::string> out;
  for (auto& p : pieces)
    if (!p.name.empty()) out.push_back(std::move(p.name));
  return out;
}

Result<std::string> expand_secrets(
    std::string_view value, const std::function<Result<std::string>(std::string_view)>& resolve,
    std::size_t max_bytes) {
  ABX_ASSIGN_OR_RETURN(auto pieces, split_placeholders(value));
  std::string out;
  for (const auto& p : pieces) {
    if (p.name.empty()) {
      out += p.text;
    } else {
      ABX_ASSIGN_OR_RETURN(std::string v, resolve(p.name));
      out += v;
    }
    if (out.size() > max_bytes)
      return invalid_argument("the header value with its secrets is over " +
                              std::to_string(max_bytes) + " bytes");
  }
  return out;
}

std::string masked_value(std::string_view value) {
  auto pieces = split_placeholders(value);
  if (!pieces ||
      std::none_of(pieces->begin(), pieces->end(), [](const Piece& p) { return !p.name.empty(); }))
    return std::string(kMaskedValue);
  std::string out;
  for (std::size_t i = 0; i < pieces->size(); ++i) {
    const Piece& p = (*pieces)[i];
    if (!p.name.empty() || (i == 0 && auth_scheme(p.text)))
      out += p.text;
    else
      out += kMaskedValue;
  }
  return out;
}

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
      for (const auto& [k, v] : rule) {
        if (reveal)
          headers[k] = v;
        else
          headers[k] = masked_value(v);
      }
      list.push_back(json::object{{"transform", json::object{{"headers", std::move(headers)}}}});
    }
    out[h.pattern.str()] = std::move(list);
  }
  return out;
}

std::vector<SecretReference> TransformRules::secret_references(std::string_view field) const {
  std::vector<SecretReference> out;
  for (const auto& h : hosts)
    for (std::size_t i = 0; i < h.rules.size(); ++i)
      for (const auto& [k, v] : h.rules[i]) {
        auto names = secret_names_in(v);
        if (!names) continue;  // parse_transforms refused such a value
        for (auto& n : *names)
          out.push_back({std::move(n), std::string(field) + "[" + quoted(h.pattern.str()) + "][" +
                                           std::to_string(i) + "].transform.headers[" + quoted(k) +
                                           "]"});
      }
  return out;
}

bool TransformRules::references(std::string_view name) const {
  for (const auto& h : hosts)
    for (const auto& rule : h.rules)
      for (const auto& kv : rule) {
        auto names = secret_names_in(kv.second);
        if (names && std::find(names->begin(), names->end(), name) != names->end()) return true;
      }
  return false;
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
            if (auto refs = secret_names_in(value); !refs)
              return invalid_argument(nat + ": " + refs.error().message());
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
