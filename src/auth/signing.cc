#include "abx/auth/signing.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include "abx/base/ascii.h"
#include "abx/base/hex.h"
#include "abx/base/try.h"
#include "abx/token/token.h"

namespace abx::auth {

namespace {

Error incomplete(std::string msg) {
  return Error(ErrorCode::kUnauthenticated, std::move(msg), "IncompleteSignature");
}
Error mismatch(std::string msg = "signature does not match") {
  return Error(ErrorCode::kUnauthenticated, std::move(msg), "SignatureDoesNotMatch");
}

std::string hmac_raw(std::string_view key, std::string_view msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

void encode_into(std::string& out, std::string_view s) {
  static constexpr char kUpper[] = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if (unreserved(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kUpper[c >> 4];
      out += kUpper[c & 15];
    }
  }
}

Result<std::string> decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return invalid_argument("truncated percent-escape");
      int hi = hex_value(s[i + 1]);
      int lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return invalid_argument("bad percent-escape");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// Trim, and collapse inner runs of spaces and tabs to one space (SigV4's rule).
std::string normalise_value(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

bool valid_header_name(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

std::vector<const Header*> find_all(const HttpRequest& req, std::string_view lower_name) {
  std::vector<const Header*> out;
  for (const auto& h : req.headers) {
    if (h.name.size() == lower_name.size() && ascii_lower(h.name) == lower_name) out.push_back(&h);
  }
  return out;
}

// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return to_hex(d.data(), d.size());
}

std::string format_date(std::int64_t t) {
  std::int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
  std::int64_t secs = t - days * 86400;
  // civil_from_days
  days += 719468;
  const std::int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(days - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  std::int64_t y = static_cast<std::int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  y += m <= 2;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04lld%02u%02uT%02lld%02lld%02lldZ", static_cast<long long>(y), m,
                d, static_cast<long long>(secs / 3600), static_cast<long long>(secs / 60 % 60),
                static_cast<long long>(secs % 60));
  return buf;
}

std::optional<std::int64_t> parse_date(std::string_view s) {
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z') return std::nullopt;
  auto num = [&](std::size_t pos, std::size_t len) -> std::optional<int> {
    int v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  auto y = num(0, 4), mo = num(4, 2), d = num(6, 2), h = num(9, 2), mi = num(11, 2),
       se = num(13, 2);
  if (!y || !mo || !d || !h || !mi || !se) return std::nullopt;
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > kDays[*mo - 1] || *h > 23 || *mi > 59 || *se > 59) {
    return std::nullopt;
  }
  bool leap = (*y % 4 == 0 && *y % 100 != 0) || *y % 400 == 0;
  if (*mo == 2 && *d == 29 && !leap) return std::nullopt;
  return days_from_civil(*y, static_cast<unsigned>(*mo), static_cast<unsigned>(*d)) * 86400 +
         *h * 3600 + *mi * 60 + *se;
}

Result<std::string> canonical_uri(std::string_view path) {
  if (path.empty()) return std::string("/");
  if (path[0] != '/') return invalid_argument("request path must start with '/'");
  std::string out;
  std::size_t start = 0;
  // Segment by segment, so an encoded "/" (%2F) stays distinct from a real one.
  while (start <= path.size()) {
    std::size_t slash = path.find('/', start);
    std::string_view seg = path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    ABX_ASSIGN_OR_RETURN(auto dec, decode(seg, /*plus_is_space=*/false));
    encode_into(out, dec);
    if (slash == std::string_view::npos) break;
    out += '/';
    start = slash + 1;
  }
  return out;
}

Result<std::string> canonical_query(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::size_t start = 0;
  while (start <= query.size()) {
    std::size_t amp = query.find('&', start);
    std::string_view part =
        query.substr(start, amp == std::string_view::npos ? std::string_view::npos : amp - start);
    if (!part.empty()) {
      std::size_t eq = part.find('=');
      ABX_ASSIGN_OR_RETURN(auto k, decode(part.substr(0, eq), true));
      std::string v;
      if (eq != std::string_view::npos) {
        ABX_ASSIGN_OR_RETURN(v, decode(part.substr(eq + 1), true));
      }
      std::string ek, ev;
      encode_into(ek, k);
      encode_into(ev, v);
      pairs.emplace_back(std::move(ek), std::move(ev));
    }
    if (amp == std::string_view::npos) break;
    start = amp + 1;
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  for (const auto& [k, v] : pairs) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

Result<std::string> canonical_request(const HttpRequest& req,
                                      const std::vector<std::string>& signed_headers,
                                      std::string_view payload_sha256_hex) {
  if (req.method.empty() || req.method.size() > 32) return invalid_argument("bad method");
  std::string_view target = req.target;
  std::size_t q = target.find('?');
  ABX_ASSIGN_OR_RETURN(auto uri, canonical_uri(target.substr(0, q)));
  auto query =
      canonical_query(q == std::string_view::npos ? std::string_view() : target.substr(q + 1));
  if (!query.ok()) return query.error();
  std::string out = req.method + "\n" + uri + "\n" + *query + "\n";
  std::string list;
  for (const auto& name : signed_headers) {
    auto hs = find_all(req, name);
    if (hs.empty()) return invalid_argument("signed header '" + name + "' is missing");
    std::string joined;
    for (const Header* h : hs) {
      if (h->value.find_first_of("\r\n") != std::string::npos) {
        return invalid_argument("header '" + name + "' contains a line break");
      }
      if (!joined.empty()) joined += ',';
      joined += normalise_value(h->value);
    }
    out += name + ":" + joined + "\n";
    list += (list.empty() ? "" : ";") + name;
  }
  out += "\n" + list + "\n";
  out += payload_sha256_hex;
  return out;
}

std::string string_to_sign(std::string_view creq) {
  return std::string(kAlgorithm) + "\n" + sha256_hex(creq);
}

Result<ParsedAuthorization> parse_authorization(std::string_view v) {
  if (v.size() > kMaxAuthorizationBytes) return incomplete("Authorization header too long");
  if (v.substr(0, kAlgorithm.size()) != kAlgorithm || v.size() == kAlgorithm.size() ||
      v[kAlgorithm.size()] != ' ') {
    return incomplete("Authorization must start with '" + std::string(kAlgorithm) + " '");
  }
  v.remove_prefix(kAlgorithm.size() + 1);
  ParsedAuthorization out;
  bool have_cred = false, have_list = false, have_sig = false;
  while (!v.empty()) {
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    std::size_t comma = v.find(',');
    std::string_view part = v.substr(0, comma);
    v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
    if (comma != std::string_view::npos && v.find_first_not_of(' ') == std::string_view::npos) {
      return incomplete("trailing comma in Authorization");
    }
    std::size_t eq = part.find('=');
    if (eq == std::string_view::npos) return incomplete("malformed Authorization parameter");
    std::string_view key = part.substr(0, eq);
    std::string_view val = part.substr(eq + 1);
    if (key == "Credential" && !have_cred) {
      if (val.empty() || val.size() > 128 || !std::all_of(val.begin(), val.end(), [](char c) {
            return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_';
          })) {
        return incomplete("malformed Credential");
      }
      out.access_key_id = std::string(val);
      have_cred = true;
    } else if (key == "SignedHeaders" && !have_list) {
      std::size_t start = 0;
      while (start <= val.size()) {
        std::size_t semi = val.find(';', start);
        std::string_view name = val.substr(
            start, semi == std::string_view::npos ? std::string_view::npos : semi - start);
        if (!valid_header_name(name)) return incomplete("malformed SignedHeaders");
        if (!out.signed_headers.empty() && !(out.signed_headers.back() < name)) {
          return incomplete("SignedHeaders must be sorted and unique");
        }
        out.signed_headers.emplace_back(name);
        if (out.signed_headers.size() > 64) return incomplete("too many SignedHeaders");
        if (semi == std::string_view::npos) break;
        start = semi + 1;
      }
      have_list = true;
    } else if (key == "Signature" && !have_sig) {
      if (val.size() != 64 || !is_lower_hex(val)) return incomplete("malformed Signature");
      out.signature_hex = std::string(val);
      have_sig = true;
    } else {
      return incomplete("unexpected or repeated Authorization parameter");
    }
  }
  if (!have_cred || !have_list || !have_sig) {
    return incomplete("Authorization needs Credential, SignedHeaders and Signature");
  }
  return out;
}

Result<std::vector<Header>> sign(const HttpRequest& req, std::string_view body,
                                 const Credentials& creds, const SignOptions& opts) {
  if (creds.access_key_id.empty() || creds.secret.empty()) {
    return invalid_argument("signing needs an access key id and a secret");
  }
  if (find_all(req, "host").size() != 1) return invalid_argument("request needs one Host header");
  for (std::string_view h :
       {kDateHeader, kNonceHeader, kContentHashHeader, std::string_view("authorization")}) {
    if (!find_all(req, h).empty()) {
      return invalid_argument("request already carries " + std::string(h));
    }
  }
  std::string nonce = opts.nonce;
  if (nonce.empty()) {
    ABX_ASSIGN_OR_RETURN(nonce, token::random_hex(16));
  }
  std::string body_hash = sha256_hex(body);
  std::vector<Header> added = {{std::string(kDateHeader), format_date(opts.now_unix)},
                               {std::string(kNonceHeader), nonce},
                               {std::string(kContentHashHeader), body_hash}};
  HttpRequest full = req;
  full.headers.insert(full.headers.end(), added.begin(), added.end());

  std::vector<std::string> names = {"host"};
  for (const auto& h : full.headers) {
    std::string n = ascii_lower(h.name);
    if (n.rfind("x-abx-", 0) == 0 || n == "content-type") names.push_back(n);
  }
  for (const auto& e : opts.extra_signed_headers) names.push_back(ascii_lower(e));
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const auto& n : names) {
    if (!valid_header_name(n)) return invalid_argument("cannot sign header '" + n + "'");
  }

  ABX_ASSIGN_OR_RETURN(auto creq, canonical_request(full, names, body_hash));
  std::string mac = hmac_raw(creds.secret, string_to_sign(creq));
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ";") + n;
  added.push_back({"authorization", std::string(kAlgorithm) + " Credential=" + creds.access_key_id +
                                        ",SignedHeaders=" + list + ",Signature=" + to_hex(mac)});
  return added;
}

Result<std::string> verify(const HttpRequest& req, std::string_view body,
                           const VerifyOptions& opts) {
  auto auths = find_all(req, "authorization");
  if (auths.size() != 1) return incomplete("exactly one Authorization header is required");
  ABX_ASSIGN_OR_RETURN(auto parsed, parse_authorization(auths[0]->value));
  const auto& list = parsed.signed_headers;
  auto is_signed = [&](std::string_view n) {
    return std::binary_search(list.begin(), list.end(), n);
  };

  // Refuse downgrades: these must be covered by the signature, and present exactly once.
  std::vector<std::string_view> required = {"host", kDateHeader, kNonceHeader, kContentHashHeader};
  if (!find_all(req, "content-type").empty()) required.push_back("content-type");
  for (std::string_view n : required) {
    if (!is_signed(n)) return incomplete("header '" + std::string(n) + "' must be signed");
    if (find_all(req, n).size() != 1) {
      return incomplete("header '" + std::string(n) + "' must appear exactly once");
    }
  }
  for (const auto& n : list) {
    if (find_all(req, n).empty()) return incomplete("signed header '" + n + "' is missing");
  }

  auto date = parse_date(find_all(req, kDateHeader)[0]->value);
  if (!date) return incomplete("x-abx-date must look like 20260102T030405Z");
  if (*date < opts.now_unix - opts.window_seconds || *date > opts.now_unix + opts.window_seconds) {
    return Error(ErrorCode::kUnauthenticated,
                 "request time " + format_date(*date) + " is outside the ±" +
                     std::to_string(opts.window_seconds) + " s window around " +
                     format_date(opts.now_unix),
                 "RequestTimeTooSkewed");
  }
  const std::string& nonce = find_all(req, kNonceHeader)[0]->value;
  if (nonce.size() < 32 || nonce.size() > 128 || !is_lower_hex(nonce)) {
    return incomplete("x-abx-nonce must be 32-128 lower-case hex characters");
  }

  // Hash the body ourselves: the header is only a claim.
  std::string body_hash = sha256_hex(body);
  const std::string& claimed = find_all(req, kContentHashHeader)[0]->value;
  bool body_ok = claimed.size() == body_hash.size() &&
                 CRYPTO_memcmp(claimed.data(), body_hash.data(), body_hash.size()) == 0;

  auto creq = canonical_request(req, list, body_hash);
  if (!creq.ok()) return incomplete("cannot canonicalise request: " + creq.error().message());

  if (!opts.lookup_secret) return internal_error("verify: no lookup_secret callback");
  ABX_ASSIGN_OR_RETURN(auto secret, opts.lookup_secret(parsed.access_key_id));
  // An unknown key costs the same HMAC as a known one, so timing does not reveal which keys exist.
  static const std::string kDummySecret(64, '0');
  const std::string& key = secret.has_value() ? *secret : kDummySecret;
  std::string want = hmac_raw(key, string_to_sign(*creq));
  std::string got(32, '\0');
  for (std::size_t i = 0; i < 32; ++i) {
    got[i] = static_cast<char>(hex_value(parsed.signature_hex[2 * i]) * 16 +
                               hex_value(parsed.signature_hex[2 * i + 1]));
  }
  bool sig_ok =
      want.size() == got.size() && CRYPTO_memcmp(want.data(), got.data(), got.size()) == 0;
  if (!sig_ok || !secret.has_value()) return mismatch();
  if (!body_ok) return mismatch("body does not match x-abx-content-sha256");

  // Only a correctly signed request may consume a nonce, so forgeries cannot poison the cache.
  // Remember it for two windows past its timestamp: it can never be fresh again after that.
  if (!opts.remember_nonce) return internal_error("verify: no remember_nonce callback");
  auto seen =
      opts.remember_nonce(parsed.access_key_id + "/" + nonce, *date + 2 * opts.window_seconds);
  if (!seen.ok()) return seen.error();
  if (*seen) {
    return Error(ErrorCode::kUnauthenticated, "nonce already used", "NonceReused");
  }
  return parsed.access_key_id;
}

}  // namespace abx::auth
