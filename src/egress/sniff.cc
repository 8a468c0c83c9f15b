// TLS SNI and HTTP Host from a connection's first bytes (sniff.h). Every length is checked
// against the structure that declares it before anything is read, so a prefix is classified
// as soon as it is wrong, and need_more means "valid so far".
#include "abx/egress/sniff.h"

#include <cstdint>
#include <optional>

#include "abx/base/ascii.h"

namespace abx::egress {
namespace {

// --- Names ---

bool name_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// found(lower-cased name) or malformed; one trailing dot (an absolute name) is dropped.
SniffResult check_name(std::string_view raw, std::string_view what) {
  if (!raw.empty() && raw.back() == '.') raw.remove_suffix(1);
  if (raw.empty()) return SniffResult::malformed(std::string(what) + " is empty");
  if (raw.back() == '.') return SniffResult::malformed(std::string(what) + " ends with '..'");
  if (raw.size() > kMaxSniffedName) {
    return SniffResult::malformed(std::string(what) + " is longer than 253 characters");
  }
  std::string out;
  out.reserve(raw.size());
  for (char ch : raw) {
    auto c = static_cast<unsigned char>(ch);
    if (!name_char(c)) {
      return SniffResult::malformed(std::string(what) + " has a byte outside [A-Za-z0-9.-_]");
    }
    out += ascii_lower(ch);
  }
  return SniffResult::found(std::move(out));
}

// --- TLS ---

constexpr unsigned kRecordHandshake = 22;
constexpr unsigned kHandshakeClientHello = 1;
constexpr unsigned kExtServerName = 0;
constexpr unsigned kExtAlpn = 16;
constexpr unsigned kNameTypeHostName = 0;
constexpr std::size_t kRecordHeader = 5;
constexpr std::size_t kMaxRecordPayload = std::size_t{1} << 14;  // TLSPlaintext.length
constexpr std::size_t kHandshakeHeader = 4;

enum class Step { kOk, kShort, kBad };

// A structure inside the reassembled handshake bytes: `buf` holds what has arrived, `end` is
// where the structure ends by its declared length (possibly past what has arrived). Reading
// past `end` is malformed; reading past `buf` (but not `end`) needs more bytes.
struct Cursor {
  std::string_view buf;
  std::size_t pos = 0;
  std::size_t end = 0;

  bool at_end() const { return pos == end; }

  Step check(std::size_t n) const {
    if (n > end - pos) return Step::kBad;
    if (pos + n > buf.size()) return Step::kShort;
    return Step::kOk;
  }
  Step uint(std::size_t n, std::size_t* v) {
    Step s = check(n);
    if (s != Step::kOk) return s;
    *v = 0;
    for (std::size_t i = 0; i < n; ++i) *v = (*v << 8) | static_cast<unsigned char>(buf[pos + i]);
    pos += n;
    return Step::kOk;
  }
  Step bytes(std::size_t n, std::string_view* out) {
    Step s = check(n);
    if (s != Step::kOk) return s;
    *out = buf.substr(pos, n);
    pos += n;
    return Step::kOk;
  }
  Step skip(std::size_t n) {
    std::string_view ignored;
    return bytes(n, &ignored);
  }
  // The next `n` bytes as their own structure (which need not have arrived yet).
  Step sub(std::size_t n, Cursor* out) {
    if (n > end - pos) return Step::kBad;
    *out = Cursor{buf, pos, pos + n};
    pos += n;
    return Step::kOk;
  }
  // A vector with an `len_bytes`-byte length prefix, as a structure.
  Step vec(std::size_t len_bytes, Cursor* out) {
    std::size_t n = 0;
    Step s = uint(len_bytes, &n);
    if (s != Step::kOk) return s;
    return sub(n, out);
  }
};

// True when `s` is kOk; otherwise sets `*r` to need_more or malformed("<what>").
bool ok(Step s, const char* what, SniffResult* r) {
  if (s == Step::kOk) return true;
  *r = s == Step::kShort ? SniffResult::need_more()
                         : SniffResult::malformed(std::string("ClientHello: ") + what);
  return false;
}

// The server_name extension's body (RFC 6066 §3): a non-empty list of (type, name) with at most
// one host_name. Sets `*host` (empty when only other name types are listed).
SniffResult parse_server_name(Cursor ext, std::optional<std::string>* host) {
  SniffResult r;
  Cursor list;
  if (!ok(ext.vec(2, &list), "server_name list overruns its extension", &r)) return r;
  if (!ext.at_end()) return SniffResult::malformed("ClientHello: bytes after the server_name list");
  if (list.at_end()) return SniffResult::malformed("ClientHello: empty server_name list");
  while (!list.at_end()) {
    std::size_t type = 0;
    std::string_view name;
    Cursor entry;
    if (!ok(list.uint(1, &type), "server_name entry overruns its list", &r)) return r;
    if (!ok(list.vec(2, &entry), "server_name entry overruns its list", &r)) return r;
    if (!ok(entry.bytes(entry.end - entry.pos, &name), "server_name entry", &r)) return r;
    if (type != kNameTypeHostName) continue;
    if (host->has_value()) return SniffResult::malformed("ClientHello: two host_name entries");
    SniffResult checked = check_name(name, "SNI host_name");
    if (checked.kind != SniffResult::Kind::kFound) return checked;
    *host = std::move(checked.name);
  }
  return SniffResult::none();
}

// The ALPN extension's body (RFC 7301 §3.1): a list of non-empty protocol names; true when
// one is "h2". Anything malformed offers nothing.
bool alpn_offers_h2(Cursor ext) {
  Cursor list;
  if (ext.vec(2, &list) != Step::kOk || !ext.at_end()) return false;
  while (!list.at_end()) {
    Cursor entry;
    std::string_view proto;
    if (list.vec(1, &entry) != Step::kOk) return false;
    if (entry.bytes(entry.end - entry.pos, &proto) != Step::kOk) return false;
    if (proto == "h2") return true;
  }
  return false;
}

// The ClientHello body (RFC 8446 §4.1.2, which also reads TLS 1.0-1.2 hellos).
SniffResult parse_client_hello(Cursor c) {
  SniffResult r;
  std::size_t major = 0;
  if (!ok(c.uint(1, &major), "too short for a version", &r)) return r;
  if (major != 3) return SniffResult::malformed("ClientHello: version is not 3.x");
  if (!ok(c.skip(1 + 32), "too short for version and random", &r)) return r;
  std::size_t session_id_len = 0;
  if (!ok(c.uint(1, &session_id_len), "too short for a session id", &r)) return r;
  if (session_id_len > 32) return SniffResult::malformed("ClientHello: session id over 32 bytes");
  if (!ok(c.skip(session_id_len), "session id overruns the message", &r)) return r;
  std::size_t suites_len = 0;
  if (!ok(c.uint(2, &suites_len), "too short for cipher suites", &r)) return r;
  if (suites_len < 2 || suites_len % 2 != 0) {
    return SniffResult::malformed("ClientHello: cipher suites length is odd or zero");
  }
  if (!ok(c.skip(suites_len), "cipher suites overrun the message", &r)) return r;
  std::size_t compression_len = 0;
  if (!ok(c.uint(1, &compression_len), "too short for compression methods", &r)) return r;
  if (compression_len < 1) return SniffResult::malformed("ClientHello: no compression method");
  if (!ok(c.skip(compression_len), "compression methods overrun the message", &r)) return r;
  if (c.at_end()) return SniffResult::none();  // no extensions at all (SSL 3.0 style)

  Cursor exts;
  if (!ok(c.vec(2, &exts), "extensions overrun the message", &r)) return r;
  if (!c.at_end()) return SniffResult::malformed("ClientHello: bytes after the extensions");
  std::optional<std::string> host;
  bool seen_server_name = false;
  bool alpn_h2 = false;
  while (!exts.at_end()) {
    std::size_t type = 0;
    Cursor body;
    if (!ok(exts.uint(2, &type), "extension header overruns the extensions", &r)) return r;
    if (!ok(exts.vec(2, &body), "extension overruns the extensions", &r)) return r;
    if (type == kExtAlpn) {
      alpn_h2 = alpn_offers_h2(body);
      continue;
    }
    if (type != kExtServerName) {
      if (!ok(body.skip(body.end - body.pos), "extension", &r)) return r;
      continue;
    }
    if (seen_server_name) return SniffResult::malformed("ClientHello: two server_name extensions");
    seen_server_name = true;
    SniffResult sni = parse_server_name(body, &host);
    if (sni.kind != SniffResult::Kind::kNone) return sni;
  }
  SniffResult out = host ? SniffResult::found(std::move(*host)) : SniffResult::none();
  out.alpn_h2 = alpn_h2;
  return out;
}

SniffResult tls_prefix(std::string_view in) {
  // Reassemble the handshake layer from the records until it holds the whole ClientHello.
  std::string hs;
  std::size_t pos = 0;
  std::size_t hs_total = 0;  // header + body of the ClientHello, once its header has arrived
  while (pos < in.size()) {
    auto type = static_cast<unsigned char>(in[pos]);
    if (type != kRecordHandshake) {
      return SniffResult::malformed(pos == 0 ? "not a TLS handshake record"
                                             : "ClientHello continues in a non-handshake record");
    }
    if (in.size() - pos < kRecordHeader) {
      if (in.size() - pos >= 2 && in[pos + 1] != 3) {
        return SniffResult::malformed("TLS record version is not 3.x");
      }
      return SniffResult::need_more();
    }
    if (in[pos + 1] != 3) return SniffResult::malformed("TLS record version is not 3.x");
    std::size_t len = (std::size_t{static_cast<unsigned char>(in[pos + 3])} << 8) |
                      static_cast<unsigned char>(in[pos + 4]);
    if (len == 0) return SniffResult::malformed("empty TLS handshake record");
    if (len > kMaxRecordPayload) return SniffResult::malformed("TLS record longer than 2^14");
    pos += kRecordHeader;
    std::size_t avail = std::min(len, in.size() - pos);
    hs.append(in.substr(pos, avail));
    pos += avail;
    if (hs.empty()) break;  // a record header and nothing of its payload yet
    if (static_cast<unsigned char>(hs[0]) != kHandshakeClientHello) {
      return SniffResult::malformed("first handshake message is not a ClientHello");
    }
    if (hs_total == 0 && hs.size() >= kHandshakeHeader) {
      hs_total = kHandshakeHeader + ((std::size_t{static_cast<unsigned char>(hs[1])} << 16) |
                                     (std::size_t{static_cast<unsigned char>(hs[2])} << 8) |
                                     static_cast<unsigned char>(hs[3]));
      // Each record of it adds a header: it cannot fit if even one header does not.
      if (hs_total + kRecordHeader > kMaxSniffBytes) {
        return SniffResult::malformed("ClientHello larger than 16 KiB");
      }
    }
    if (hs_total != 0 && hs.size() >= hs_total) break;
    if (avail < len) break;  // this record is still arriving
  }
  if (hs_total == 0) return SniffResult::need_more();
  return parse_client_hello(Cursor{std::string_view(hs), kHandshakeHeader, hs_total});
}

// --- HTTP ---

// The request line `method SP target SP HTTP/d.d`. With `complete` false, `line` is all that
// has arrived of it and only has to be a valid beginning. Returns the reason it is not.
std::optional<std::string> check_request_line(std::string_view line, bool complete,
                                              std::string_view* method, std::string_view* target) {
  std::size_t i = 0;
  while (i < line.size() && is_token_char(line[i])) ++i;
  if (i == 0 && !line.empty()) return "request line does not start with a method";
  if (i == line.size()) {
    if (complete) return "request line has no target";
    return std::nullopt;
  }
  if (line[i] != ' ') return "method is not followed by a space";
  *method = line.substr(0, i);
  std::size_t t = ++i;
  while (i < line.size() && line[i] > ' ' && line[i] < 0x7f) ++i;
  if (i == t && i < line.size()) return "empty request target";
  if (i == line.size()) {
    if (complete) return "request line has no HTTP version";
    return std::nullopt;
  }
  if (line[i] != ' ') return "request target has a byte that is not visible ASCII";
  *target = line.substr(t, i - t);
  std::string_view version = line.substr(i + 1);
  constexpr std::string_view kPattern = "HTTP/0.0";
  if (version.size() > kPattern.size() || (complete && version.size() != kPattern.size())) {
    return "request line does not end with HTTP/d.d";
  }
  for (std::size_t k = 0; k < version.size(); ++k) {
    bool digit = kPattern[k] == '0';
    bool good = digit ? version[k] >= '0' && version[k] <= '9' : version[k] == kPattern[k];
    if (!good) return "request line does not end with HTTP/d.d";
  }
  return std::nullopt;
}

// The host of an authority `host[:port]` (Host field value, absolute-form authority, or
// CONNECT target), checked and lower-cased; none when empty.
SniffResult authority_host(std::string_view v, std::string_view what) {
  if (v.empty()) return SniffResult::none();
  if (v.front() == '[') return SniffResult::malformed(std::string(what) + " is an IP literal");
  std::size_t colon = v.find(':');
  if (colon != std::string_view::npos) {
    std::string_view port = v.substr(colon + 1);
    if (port.size() > 5) return SniffResult::malformed(std::string(what) + " has a bad port");
    for (char c : port) {
      if (c < '0' || c > '9') return SniffResult::malformed(std::string(what) + " has a bad port");
    }
    v = v.substr(0, colon);
  }
  return check_name(v, what);
}

// The authority of an absolute-form target (`scheme://authority/...`), if it is one.
std::optional<std::string_view> absolute_form_authority(std::string_view target) {
  std::size_t sep = target.find("://");
  if (sep == std::string_view::npos || sep == 0) return std::nullopt;
  for (std::size_t i = 0; i < sep; ++i) {
    char c = target[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    bool other = (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
    if (!alpha && !(i > 0 && other)) return std::nullopt;
  }
  std::string_view rest = target.substr(sep + 3);
  return rest.substr(0, rest.find_first_of("/?#"));
}

// A field value's bytes: HTAB, SP, VCHAR, obs-text.
bool field_value_ok(std::string_view v) {
  for (char ch : v) {
    auto c = static_cast<unsigned char>(ch);
    if (c != '\t' && (c < ' ' || c == 0x7f)) return false;
  }
  return true;
}

std::string_view trim_ows(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

}  // namespace

SniffResult tls_server_name(std::string_view bytes) {
  SniffResult r = tls_prefix(bytes);
  if (r.kind == SniffResult::Kind::kNeedMore && bytes.size() >= kMaxSniffBytes) {
    return SniffResult::malformed("ClientHello not complete within 16 KiB");
  }
  return r;
}

SniffResult http_host(std::string_view bytes) {
  std::string_view in = bytes.substr(0, kMaxSniffBytes);
  const bool capped = bytes.size() >= kMaxSniffBytes;
  auto need_more = [&] {
    return capped ? SniffResult::malformed("HTTP request head longer than 16 KiB")
                  : SniffResult::need_more();
  };
  // Splits the next line (bare LF or CRLF) off `in`; false when it has not fully arrived.
  std::size_t pos = 0;
  auto next_line = [&](std::string_view* line) {
    std::size_t nl = in.find('\n', pos);
    if (nl == std::string_view::npos) return false;
    *line = in.substr(pos, nl - pos);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    pos = nl + 1;
    return true;
  };

  std::string_view line, method, target;
  if (!next_line(&line)) {
    std::string_view partial = in;
    if (!partial.empty() && partial.back() == '\r') partial.remove_suffix(1);
    auto bad = check_request_line(partial, false, &method, &target);
    if (bad) return SniffResult::malformed(*bad);
    return need_more();
  }
  if (auto bad = check_request_line(line, true, &method, &target)) {
    return SniffResult::malformed(*bad);
  }
  // A server must use the target's authority over Host (RFC 9112 §3.2.2), and CONNECT's target
  // is an authority: that is then the name the request really goes to.
  std::optional<std::string_view> target_authority =
      method == "CONNECT" ? std::optional(target) : absolute_form_authority(target);

  std::optional<std::string_view> host_value;
  for (;;) {
    if (!next_line(&line)) {
      if (pos < in.size() && (in[pos] == ' ' || in[pos] == '\t')) {
        return SniffResult::malformed("obs-fold (a header line starting with whitespace)");
      }
      return need_more();
    }
    if (line.empty()) break;
    if (line.front() == ' ' || line.front() == '\t') {
      return SniffResult::malformed("obs-fold (a header line starting with whitespace)");
    }
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return SniffResult::malformed("header line without ':'");
    std::string_view name = line.substr(0, colon);
    for (char c : name) {
      if (c == ' ' || c == '\t') return SniffResult::malformed("whitespace before a header's ':'");
      if (!is_token_char(c)) {
        return SniffResult::malformed("header name has a byte that is not a token character");
      }
    }
    if (name.empty()) return SniffResult::malformed("empty header name");
    std::string_view value = line.substr(colon + 1);
    if (!field_value_ok(value)) return SniffResult::malformed("control byte in a header value");
    if (!ascii_iequals(name, "host")) continue;
    if (host_value) return SniffResult::malformed("two Host headers");
    host_value = trim_ows(value);
  }

  if (!target_authority) {
    return host_value ? authority_host(*host_value, "Host") : SniffResult::none();
  }
  SniffResult from_target = authority_host(*target_authority, "request target's host");
  if (from_target.kind == SniffResult::Kind::kNone) {
    return SniffResult::malformed("request target has an empty authority");
  }
  if (from_target.kind != SniffResult::Kind::kFound || !host_value || host_value->empty()) {
    return from_target;
  }
  SniffResult from_host = authority_host(*host_value, "Host");
  if (from_host.kind == SniffResult::Kind::kMalformed) return from_host;
  if (from_host.name != from_target.name) {
    return SniffResult::malformed("Host disagrees with the request target's host");
  }
  return from_target;
}

}  // namespace abx::egress
