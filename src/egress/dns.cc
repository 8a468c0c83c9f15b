#include "abx/egress/dns.h"

#include <algorithm>
#include <string_view>

namespace abx::egress::dns {
namespace {

using Bytes = std::span<const std::uint8_t>;

std::uint16_t get16(Bytes m, std::size_t at) {
  return static_cast<std::uint16_t>((m[at] << 8) | m[at + 1]);
}
std::uint32_t get32(Bytes m, std::size_t at) {
  return (std::uint32_t{m[at]} << 24) | (std::uint32_t{m[at + 1]} << 16) |
         (std::uint32_t{m[at + 2]} << 8) | std::uint32_t{m[at + 3]};
}
void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v & 0xff));
}

Error truncated(std::string_view what) {
  return invalid_argument("DNS message truncated in " + std::string(what));
}

// One label byte in presentation form (RFC 1035 §5.1), lower-cased.
void append_escaped(std::string& text, std::uint8_t c) {
  if (c >= 'A' && c <= 'Z') {
    text += static_cast<char>(c - 'A' + 'a');
  } else if (c == '.' || c == '\\') {
    text += '\\';
    text += static_cast<char>(c);
  } else if (c < 0x21 || c > 0x7e) {
    text += '\\';
    text += static_cast<char>('0' + c / 100);
    text += static_cast<char>('0' + (c / 10) % 10);
    text += static_cast<char>('0' + c % 10);
  } else {
    text += static_cast<char>(c);
  }
}

struct Name {
  std::string text;
  std::string wire;
};

// Reads the name at `pos` and moves `pos` past it (past its first pointer, if compressed).
// A pointer must point before the start of the run of labels it ends: the name's own start, or
// the previous pointer's target. Run starts then strictly decrease, so no input can loop, and
// every target lies inside the message.
Result<Name> read_name(Bytes m, std::size_t& pos) {
  Name name;
  std::size_t p = pos;
  std::size_t run_start = pos;
  std::size_t after = 0;
  bool jumped = false;
  std::size_t labels = 0;
  for (;;) {
    if (p >= m.size()) return truncated("a name");
    const std::uint8_t len = m[p];
    if ((len & 0xc0) == 0xc0) {
      if (p + 1 >= m.size()) return truncated("a compression pointer");
      const std::size_t target = (std::size_t{len & 0x3fu} << 8) | m[p + 1];
      if (target >= run_start) {
        return invalid_argument("DNS compression pointer at offset " + std::to_string(p) +
                                " does not point backwards (to " + std::to_string(target) + ")");
      }
      if (!jumped) after = p + 2;
      jumped = true;
      p = run_start = target;
      continue;
    }
    if ((len & 0xc0) != 0) {
      return invalid_argument("DNS label type 0x" + std::to_string(len >> 6) + " at offset " +
                              std::to_string(p) + " is reserved");
    }
    if (len == 0) {
      name.wire += '\0';
      if (!jumped) after = p + 1;
      break;
    }
    static_assert(kMaxLabel == 0x3f);  // the length octet's 6 bits cannot exceed it
    if (p + 1 + len > m.size()) return truncated("a label");
    if (++labels > kMaxLabels) return invalid_argument("DNS name has more than 127 labels");
    if (name.wire.size() + 1 + len + 1 > kMaxNameWire) {
      return invalid_argument("DNS name longer than 255 octets");
    }
    if (labels > 1) name.text += '.';
    name.wire += static_cast<char>(len);
    for (std::size_t i = 0; i < len; ++i) {
      const std::uint8_t c = m[p + 1 + i];
      name.wire += static_cast<char>(c);
      append_escaped(name.text, c);
    }
    p += 1 + len;
  }
  pos = after;
  return name;
}

struct Header {
  std::uint16_t id, flags, qd, an, ns, ar;
};

Result<Header> read_header(Bytes m, std::size_t max_size) {
  if (m.size() < kHeaderSize) return truncated("the header");
  if (m.size() > max_size) {
    return invalid_argument("DNS message of " + std::to_string(m.size()) +
                            " bytes is over the limit of " + std::to_string(max_size));
  }
  Header h{get16(m, 0), get16(m, 2), get16(m, 4), get16(m, 6), get16(m, 8), get16(m, 10)};
  if (h.qd != 1) {
    return invalid_argument("DNS message has " + std::to_string(h.qd) +
                            " questions; exactly one is supported");
  }
  return h;
}

Result<Question> read_question(Bytes m, std::size_t& pos) {
  auto name = read_name(m, pos);
  if (!name) return name.error();
  if (pos + 4 > m.size()) return truncated("the question");
  Question q;
  q.name = std::move(name->text);
  q.wire_name = std::move(name->wire);
  q.qtype = get16(m, pos);
  q.qclass = get16(m, pos + 2);
  pos += 4;
  return q;
}

struct Record {
  std::string owner;
  std::uint16_t type = 0;
  std::uint16_t klass = 0;
  std::uint32_t ttl = 0;
  std::size_t rdata = 0;  // offset of the rdata
  std::uint16_t rdlength = 0;
};

Result<Record> read_record(Bytes m, std::size_t& pos) {
  auto owner = read_name(m, pos);
  if (!owner) return owner.error();
  if (pos + 10 > m.size()) return truncated("a record");
  Record r;
  r.owner = std::move(owner->text);
  r.type = get16(m, pos);
  r.klass = get16(m, pos + 2);
  r.ttl = get32(m, pos + 4);
  r.rdlength = get16(m, pos + 8);
  r.rdata = pos + 10;
  if (r.rdata + r.rdlength > m.size()) return truncated("a record's data");
  pos = r.rdata + r.rdlength;
  return r;
}

// Walks `count` records for well-formedness only.
Status skip_records(Bytes m, std::size_t& pos, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    auto r = read_record(m, pos);
    if (!r) return r.error();
  }
  return {};
}

}  // namespace

Result<Query> parse_query(std::span<const std::uint8_t> msg, std::size_t max_size) {
  auto h = read_header(msg, max_size);
  if (!h) return h.error();
  if (h->flags & kFlagQr) return invalid_argument("DNS message is a response, not a query");
  std::size_t pos = kHeaderSize;
  auto q = read_question(msg, pos);
  if (!q) return q.error();
  if (auto s = skip_records(msg, pos, std::size_t{h->an} + h->ns + h->ar); !s) return s.error();
  if (pos != msg.size()) {
    return invalid_argument("DNS query has " + std::to_string(msg.size() - pos) +
                            " bytes after its last record");
  }
  return Query{h->id, h->flags, std::move(*q)};
}

Result<Response> parse_response(std::span<const std::uint8_t> msg, std::size_t max_size) {
  auto h = read_header(msg, max_size);
  if (!h) return h.error();
  if (!(h->flags & kFlagQr)) return invalid_argument("DNS message is a query, not a response");
  std::size_t pos = kHeaderSize;
  auto q = read_question(msg, pos);
  if (!q) return q.error();
  Response res;
  res.id = h->id;
  res.flags = h->flags;
  res.question = std::move(*q);

  std::vector<Record> answers;
  answers.reserve(std::min<std::size_t>(h->an, msg.size() / 11));
  std::vector<std::string> cname_targets;  // parallel to `answers`; set for IN CNAMEs
  for (std::size_t i = 0; i < h->an; ++i) {
    auto r = read_record(msg, pos);
    if (!r) {
      if (res.truncated()) break;  // keep what arrived before the cut
      return r.error();
    }
    std::string target;
    if (r->klass == kClassIn && r->type == kTypeA && r->rdlength != 4) {
      return invalid_argument("DNS A record with " + std::to_string(r->rdlength) +
                              " bytes of data");
    }
    if (r->klass == kClassIn && r->type == kTypeCname) {
      std::size_t at = r->rdata;
      auto t = read_name(msg, at);
      if (!t) return t.error();
      if (at != r->rdata + r->rdlength) {
        return invalid_argument("DNS CNAME record's data is not exactly one name");
      }
      target = std::move(t->text);
    }
    answers.push_back(std::move(*r));
    cname_targets.push_back(std::move(target));
  }
  if (!res.truncated()) {
    if (auto s = skip_records(msg, pos, std::size_t{h->ns} + h->ar); !s) return s.error();
  }

  // The chain from the question's name; each name joins once, so a CNAME loop ends it, and it
  // stops at kMaxChain names (resolvers give up far earlier) to keep the walk linear.
  constexpr std::size_t kMaxChain = 32;
  std::vector<std::string> chain{res.question.name};
  std::uint32_t ttl = UINT32_MAX;
  for (bool grew = true; grew && chain.size() < kMaxChain;) {
    grew = false;
    for (std::size_t i = 0; i < answers.size(); ++i) {
      const Record& r = answers[i];
      if (r.klass != kClassIn || r.type != kTypeCname || r.owner != chain.back()) continue;
      if (std::find(chain.begin(), chain.end(), cname_targets[i]) != chain.end()) continue;
      chain.push_back(cname_targets[i]);
      ttl = std::min(ttl, r.ttl);
      grew = true;
      break;
    }
  }
  for (const Record& r : answers) {
    if (r.klass != kClassIn || r.type != kTypeA) continue;
    if (std::find(chain.begin(), chain.end(), r.owner) == chain.end()) continue;
    res.a.push_back(get32(msg, r.rdata));
    ttl = std::min(ttl, r.ttl);
  }
  res.min_ttl = res.a.empty() ? 0 : ttl;
  return res;
}

std::vector<std::uint8_t> build_reply(const Query& query, Rcode rcode) {
  std::vector<std::uint8_t> out;
  out.reserve(kHeaderSize + query.question.wire_name.size() + 4);
  put16(out, query.id);
  const auto flags =
      static_cast<std::uint16_t>(kFlagQr | (query.flags & 0x7800) | (query.flags & kFlagRd) |
                                 kFlagRa | static_cast<std::uint16_t>(rcode));
  put16(out, flags);
  put16(out, 1);
  put16(out, 0);
  put16(out, 0);
  put16(out, 0);
  out.insert(out.end(), query.question.wire_name.begin(), query.question.wire_name.end());
  put16(out, query.question.qtype);
  put16(out, query.question.qclass);
  return out;
}

}  // namespace abx::egress::dns
