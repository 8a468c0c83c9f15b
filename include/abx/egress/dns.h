// abx::egress::dns — the DNS wire format (RFC 1035) as far as the sandbox resolver needs it.
//
// Every sandbox's DNS traffic is redirected to one forwarder in abxd, which decides per sandbox
// whether a name may be resolved, passes allowed queries on to an upstream resolver and answers
// the others itself; the A records it passes back are what the egress proxy later binds a
// sandbox's connections to. This header is the pure half of that: parsing a query (its single
// question), parsing an upstream response (the A records for the question's name, following
// CNAMEs) and building the forwarder's own short replies. No I/O; the server is
// abx::platform's DnsForwarder.
//
// Everything here reads hostile bytes: a sandbox writes the queries and anyone who can race the
// upstream can write "responses". Every parse is bounded (message size, name length, label
// count, compression pointers only backwards) and fails with invalid_argument and a reason.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "abx/base/error.h"

namespace abx::egress::dns {

// Largest message accepted over UDP (a query from a sandbox) and over TCP (2-byte framing).
inline constexpr std::size_t kMaxUdpMessage = 4096;
inline constexpr std::size_t kMaxTcpMessage = 65535;
inline constexpr std::size_t kHeaderSize = 12;
inline constexpr std::size_t kMaxNameWire = 255;  // a name's wire form, length octets included
inline constexpr std::size_t kMaxLabel = 63;
inline constexpr std::size_t kMaxLabels = 127;  // the most labels 255 octets can hold

inline constexpr std::uint16_t kTypeA = 1;
inline constexpr std::uint16_t kTypeCname = 5;
inline constexpr std::uint16_t kTypeAaaa = 28;
inline constexpr std::uint16_t kTypeIxfr = 251;
inline constexpr std::uint16_t kTypeAxfr = 252;
inline constexpr std::uint16_t kClassIn = 1;

enum class Rcode : std::uint8_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5,
};

// Header flag bits (the 16-bit word after the id).
inline constexpr std::uint16_t kFlagQr = 0x8000;
inline constexpr std::uint16_t kFlagTc = 0x0200;
inline constexpr std::uint16_t kFlagRd = 0x0100;
inline constexpr std::uint16_t kFlagRa = 0x0080;

struct Question {
  // Dotted text without the trailing dot, ASCII lower-cased; the root is "". Bytes that are not
  // printable ASCII, and '.' or '\' inside a label, are escaped as in RFC 1035 §5.1 ("\046",
  // "\\"), so a label "a.b" never reads as two labels.
  std::string name;
  std::uint16_t qtype = 0;
  std::uint16_t qclass = 0;
  // The name as it was on the wire, uncompressed, original case: replies echo it byte for byte.
  std::string wire_name;

  // Same name (case-insensitively), type and class.
  bool same(const Question& other) const {
    return name == other.name && qtype == other.qtype && qclass == other.qclass;
  }
};

struct Query {
  std::uint16_t id = 0;
  std::uint16_t flags = 0;
  Question question;

  std::uint8_t opcode() const { return (flags >> 11) & 0xf; }
};

// A query: QR clear, exactly one question, any other sections well-formed and nothing after
// them. invalid_argument when shorter than a header, longer than `max_size`, truncated
// anywhere, QR set, qdcount != 1, a label over 63 octets or a reserved label type, a name over
// 255 octets or 127 labels, a compression pointer that does not point strictly backwards (loops,
// forward pointers, pointers beyond the message), or trailing bytes.
Result<Query> parse_query(std::span<const std::uint8_t> msg, std::size_t max_size = kMaxUdpMessage);

struct Response {
  std::uint16_t id = 0;
  std::uint16_t flags = 0;
  Question question;
  // IPv4 addresses (host byte order) of the A records (class IN) owned by the question's name or
  // by a name a CNAME chain from it reaches (at most 32 names; a loop ends the chain), in
  // answer-section order.
  std::vector<std::uint32_t> a;
  // The smallest TTL among those A records and the CNAMEs of the chain; 0 when `a` is empty.
  std::uint32_t min_ttl = 0;

  Rcode rcode() const { return static_cast<Rcode>(flags & 0xf); }
  bool truncated() const { return (flags & kFlagTc) != 0; }
};

// A response: QR set, exactly one question, an answer section that parses. The authority and
// additional sections are walked for truncation unless TC is set (a truncated response may be
// cut anywhere after its question; the answers that did arrive are still read). Same limits and
// errors as parse_query.
Result<Response> parse_response(std::span<const std::uint8_t> msg,
                                std::size_t max_size = kMaxTcpMessage);

// The forwarder's own answer to `query`: its id, opcode, RD bit and question echoed, QR and RA
// set, the given rcode, no records.
std::vector<std::uint8_t> build_reply(const Query& query, Rcode rcode);

}  // namespace abx::egress::dns
