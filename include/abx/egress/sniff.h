// abx::egress sniffing: the domain a sandbox's connection names in its first bytes.
//
// The egress proxy sees a redirected TCP connection before anything is sent upstream. For port
// 443 the name is the TLS ClientHello's server_name (SNI); for port 80 the HTTP request's Host.
// These parsers take the bytes received so far (a prefix of the stream) and say whether they
// are enough: `need_more` while the prefix is a valid beginning, then `found`, `none` (valid,
// but no name) or `malformed`. The proxy reads until the answer is not `need_more`, or until
// kMaxSniffBytes, or a deadline.
//
// Pure (no I/O), and every input is hostile: nothing asserts on the bytes, every length is
// checked against the one that contains it. Fuzzed by egress_sniff_fuzz.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace abx::egress {

// The most bytes either parser looks at: a ClientHello (with its record headers) or an HTTP
// request line and header block must fit. Given this many bytes (or more), neither parser
// answers `need_more`.
inline constexpr std::size_t kMaxSniffBytes = 16 * 1024;

// Longest DNS name (RFC 1035), without a trailing dot.
inline constexpr std::size_t kMaxSniffedName = 253;

struct SniffResult {
  enum class Kind {
    kNeedMore,   // a valid prefix; more bytes may give an answer
    kFound,      // `name` is the domain
    kNone,       // valid, but names no domain (no SNI extension; no or empty Host)
    kMalformed,  // not TLS / not HTTP, or a length or a name is wrong; `reason` says which
  };
  Kind kind = Kind::kNeedMore;
  std::string name;    // kFound: lower-cased, [a-z0-9.-_], 1..253 characters, no trailing dot
  std::string reason;  // kMalformed: what was wrong, for logs
  // TLS, kFound or kNone: the ClientHello's ALPN extension offers "h2" (a malformed ALPN
  // extension offers nothing; it is the TLS server's to refuse, not the sniffer's).
  bool alpn_h2 = false;

  static SniffResult need_more() { return {}; }
  static SniffResult found(std::string name) { return {Kind::kFound, std::move(name), {}}; }
  static SniffResult none() { return {Kind::kNone, {}, {}}; }
  static SniffResult malformed(std::string reason) {
    return {Kind::kMalformed, {}, std::move(reason)};
  }
};

// The server_name (host_name entry) of the TLS ClientHello at the start of `bytes`. The
// ClientHello may span several handshake records (each at most 2^14 bytes); the answer is given
// once the whole ClientHello is in, so that a later duplicate or overrunning extension is still
// caught. Bytes after the ClientHello are ignored. malformed for anything but a handshake record
// carrying a ClientHello, a ClientHello over kMaxSniffBytes (record headers included), a
// duplicate server_name extension or host_name, or a name outside [A-Za-z0-9.-_] or over 253.
SniffResult tls_server_name(std::string_view bytes);

// The Host of the HTTP/1.x request at the start of `bytes`: request line, then header fields up
// to the empty line (CRLF or bare LF line ends), all within kMaxSniffBytes. The field name is
// matched case-insensitively, the value loses surrounding whitespace and its `:port`. For an
// absolute-form request target (`GET http://a.example/ HTTP/1.1`, which a server must prefer
// over Host) the target's host is the answer, and a Host that disagrees is malformed.
// malformed also for: a request line that is not `token SP target SP HTTP/d.d`, obs-fold (a
// line starting with whitespace), whitespace before a field's colon, control bytes, two Host
// fields, a name outside [A-Za-z0-9.-_] (so IP-literal `[::1]` too) or over 253.
// none for a request without Host or with an empty one.
SniffResult http_host(std::string_view bytes);

}  // namespace abx::egress
