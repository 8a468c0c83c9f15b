#include "abx/egress/dns.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string_view>

namespace abx::egress::dns {
namespace {

using Msg = std::vector<std::uint8_t>;

void add(Msg& m, std::initializer_list<int> bytes) {
  for (int b : bytes) m.push_back(static_cast<std::uint8_t>(b));
}
void add16(Msg& m, int v) { add(m, {(v >> 8) & 0xff, v & 0xff}); }
void add32(Msg& m, std::uint32_t v) {
  add(m, {static_cast<int>(v >> 24), static_cast<int>((v >> 16) & 0xff),
          static_cast<int>((v >> 8) & 0xff), static_cast<int>(v & 0xff)});
}
// "www.example.com" -> 3www7example3com0 (no compression).
void add_name(Msg& m, std::string_view dotted) {
  while (!dotted.empty()) {
    auto dot = dotted.find('.');
    auto label = dotted.substr(0, dot);
    m.push_back(static_cast<std::uint8_t>(label.size()));
    m.insert(m.end(), label.begin(), label.end());
    dotted = dot == std::string_view::npos ? std::string_view{} : dotted.substr(dot + 1);
  }
  m.push_back(0);
}
void add_header(Msg& m, int id, int flags, int qd, int an, int ns, int ar) {
  add16(m, id);
  add16(m, flags);
  add16(m, qd);
  add16(m, an);
  add16(m, ns);
  add16(m, ar);
}
Msg query(std::string_view name, int qtype = kTypeA, int id = 0x1234, int flags = 0x0100) {
  Msg m;
  add_header(m, id, flags, 1, 0, 0, 0);
  add_name(m, name);
  add16(m, qtype);
  add16(m, kClassIn);
  return m;
}
// A record header after its owner name.
void add_rr(Msg& m, int type, std::uint32_t ttl, int rdlength) {
  add16(m, type);
  add16(m, kClassIn);
  add32(m, ttl);
  add16(m, rdlength);
}

TEST(DnsQuery, ParsesTheQuestion) {
  auto q = parse_query(query("WWW.Example.COM", kTypeAaaa, 0xbeef));
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(q->id, 0xbeef);
  EXPECT_EQ(q->flags, 0x0100);
  EXPECT_EQ(q->opcode(), 0);
  EXPECT_EQ(q->question.name, "www.example.com");
  EXPECT_EQ(q->question.qtype, kTypeAaaa);
  EXPECT_EQ(q->question.qclass, kClassIn);
  EXPECT_EQ(q->question.wire_name, std::string("\3WWW\7Example\3COM\0", 17));
}

TEST(DnsQuery, RootAndEscapedLabels) {
  auto root = parse_query(query(""));
  ASSERT_TRUE(root);
  EXPECT_EQ(root->question.name, "");
  // One label "a.b" (a dot inside it) and a label with a space and a byte over 0x7e.
  Msg m;
  add_header(m, 1, 0, 1, 0, 0, 0);
  add(m, {3, 'a', '.', 'b', 3, 'x', ' ', 0xff, 3, 'c', 'o', 'm', 0});
  add16(m, kTypeA);
  add16(m, kClassIn);
  auto q = parse_query(m);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(q->question.name, "a\\.b.x\\032\\255.com");
}

TEST(DnsQuery, AcceptsAnEdnsOptRecord) {
  Msg m;
  add_header(m, 7, 0x0120, 1, 0, 0, 1);
  add_name(m, "example.com");
  add16(m, kTypeA);
  add16(m, kClassIn);
  add(m, {0});           // root owner
  add16(m, 41);          // OPT
  add16(m, 1232);        // UDP payload size
  add32(m, 0x00008000);  // DO
  add16(m, 0);
  auto q = parse_query(m);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(q->question.name, "example.com");
}

TEST(DnsQuery, FollowsABackwardPointerInTheQuestion) {
  // Pointers in a question are odd but legal: this one points into the header's last octets,
  // which happen to read as the root name.
  Msg m;
  add_header(m, 1, 0, 1, 0, 0, 0);
  add(m, {3, 'w', 'w', 'w', 0xc0, 11});  // offset 11 holds the 0 of arcount
  add16(m, kTypeA);
  add16(m, kClassIn);
  auto q = parse_query(m);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(q->question.name, "www");
  EXPECT_EQ(q->question.wire_name, std::string("\3www\0", 5));
}

TEST(DnsQuery, RejectsMalformed) {
  auto good = query("example.com");
  ASSERT_TRUE(parse_query(good));

  EXPECT_FALSE(parse_query(Msg(good.begin(), good.begin() + 11)));  // short header
  for (std::size_t n = kHeaderSize; n < good.size(); ++n) {
    EXPECT_FALSE(parse_query(Msg(good.begin(), good.begin() + static_cast<long>(n)))) << n;
  }
  Msg trailing = good;
  trailing.push_back(0);
  EXPECT_FALSE(parse_query(trailing));

  Msg response = good;
  response[2] |= 0x80;
  EXPECT_FALSE(parse_query(response));

  Msg none = good;
  none[5] = 0;
  EXPECT_FALSE(parse_query(none));
  Msg two = good;
  two[5] = 2;
  EXPECT_FALSE(parse_query(two));

  // A record promised in the answer count but absent.
  Msg promised = good;
  promised[7] = 1;
  EXPECT_FALSE(parse_query(promised));
}

TEST(DnsQuery, RejectsOversized) {
  // A legal query padded with an additional record to just over 4096 bytes.
  auto padded = [](std::size_t total) {
    Msg m;
    add_header(m, 1, 0, 1, 0, 0, 1);
    add_name(m, "example.com");
    add16(m, kTypeA);
    add16(m, kClassIn);
    add(m, {0});
    std::size_t rdlength = total - m.size() - 10;
    add_rr(m, 16, 0, static_cast<int>(rdlength));
    m.resize(total, 'x');
    return m;
  };
  EXPECT_TRUE(parse_query(padded(kMaxUdpMessage)));
  EXPECT_FALSE(parse_query(padded(kMaxUdpMessage + 1)));
  EXPECT_TRUE(parse_query(padded(kMaxUdpMessage + 1), kMaxTcpMessage));
}

TEST(DnsQuery, RejectsBadLabelsAndNames) {
  auto with_name = [](const Msg& name) {
    Msg m;
    add_header(m, 1, 0, 1, 0, 0, 0);
    m.insert(m.end(), name.begin(), name.end());
    add16(m, kTypeA);
    add16(m, kClassIn);
    return m;
  };
  Msg label63 = {63};
  label63.resize(64, 'a');
  label63.push_back(0);
  EXPECT_TRUE(parse_query(with_name(label63)));
  Msg label64 = {64};  // 0x40: the reserved "extended label" type
  label64.resize(65, 'a');
  label64.push_back(0);
  EXPECT_FALSE(parse_query(with_name(label64)));
  Msg label_80 = {0x80, 0};
  EXPECT_FALSE(parse_query(with_name(label_80)));

  // Four 63-octet labels: 4*64+1 = 257 octets, over 255. Three and one of 61: exactly 255.
  Msg long_name, max_name;
  for (int i = 0; i < 4; ++i) {
    long_name.push_back(63);
    long_name.insert(long_name.end(), 63, 'a');
  }
  long_name.push_back(0);
  for (int i = 0; i < 3; ++i) {
    max_name.push_back(63);
    max_name.insert(max_name.end(), 63, 'a');
  }
  max_name.push_back(61);
  max_name.insert(max_name.end(), 61, 'b');
  max_name.push_back(0);
  ASSERT_EQ(max_name.size(), 255u);
  EXPECT_TRUE(parse_query(with_name(max_name)));
  EXPECT_FALSE(parse_query(with_name(long_name)));

  // 127 one-octet labels fit in 255 octets; 128 do not.
  Msg many, too_many;
  for (int i = 0; i < 127; ++i) add(many, {1, 'a'});
  too_many = many;
  add(too_many, {1, 'a'});
  many.push_back(0);
  too_many.push_back(0);
  EXPECT_TRUE(parse_query(with_name(many)));
  EXPECT_FALSE(parse_query(with_name(too_many)));
}

TEST(DnsQuery, RejectsPointerLoopsAndForwardPointers) {
  auto with_name = [](std::initializer_list<int> name) {
    Msg m;
    add_header(m, 1, 0, 1, 0, 0, 0);
    add(m, name);
    add16(m, kTypeA);
    add16(m, kClassIn);
    return m;
  };
  EXPECT_FALSE(parse_query(with_name({0xc0, 12})));             // points at itself
  EXPECT_FALSE(parse_query(with_name({1, 'a', 0xc0, 12})));     // back to its own start: a loop
  EXPECT_FALSE(parse_query(with_name({0xc0, 14, 1, 'a', 0})));  // forward
  EXPECT_FALSE(parse_query(with_name({0xff, 0xff})));           // beyond the message
  EXPECT_FALSE(parse_query(with_name({0xc0})));                 // cut pointer
}

// A response for `qname` whose answer is: qname CNAME alias.cdn.test (compressed against the
// question), alias CNAME edge.cdn.test (compressed against alias), two A records for edge, an A
// for an unrelated name, then one NS in authority.
Msg cname_chain_response(std::string_view qname, int id = 0x4242) {
  Msg m;
  add_header(m, id, 0x8180, 1, 5, 1, 0);
  add_name(m, qname);
  add16(m, kTypeA);
  add16(m, kClassIn);
  // 1: qname (pointer to the question at 12) CNAME alias.cdn.test
  add(m, {0xc0, 12});
  Msg alias;
  add_name(alias, "alias.cdn.test");
  add_rr(m, kTypeCname, 600, static_cast<int>(alias.size()));
  const std::size_t alias_at = m.size();
  m.insert(m.end(), alias.begin(), alias.end());
  const int cdn_at = static_cast<int>(alias_at + 6);  // "cdn.test" inside alias
  // 2: alias CNAME edge + pointer to cdn.test
  add(m, {0xc0, static_cast<int>(alias_at)});
  add_rr(m, kTypeCname, 120, 7);
  const int edge_at = static_cast<int>(m.size());
  add(m, {4, 'e', 'd', 'g', 'e', 0xc0, cdn_at});
  // 3, 4: edge A 192.0.2.1 (ttl 300), 192.0.2.2 (ttl 60)
  add(m, {0xc0, edge_at});
  add_rr(m, kTypeA, 300, 4);
  add(m, {192, 0, 2, 1});
  add(m, {0xc0, edge_at});
  add_rr(m, kTypeA, 60, 4);
  add(m, {192, 0, 2, 2});
  // 5: other.test A 6.6.6.6: not on the chain
  add_name(m, "other.test");
  add_rr(m, kTypeA, 1, 4);
  add(m, {6, 6, 6, 6});
  // authority: cdn.test NS edge.cdn.test
  add(m, {0xc0, cdn_at});
  add_rr(m, 2, 3600, 2);
  add(m, {0xc0, edge_at});
  return m;
}

TEST(DnsResponse, FollowsTheCnameChainThroughCompressedNames) {
  auto r = parse_response(cname_chain_response("WWW.example.com"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->id, 0x4242);
  EXPECT_EQ(r->rcode(), Rcode::kNoError);
  EXPECT_FALSE(r->truncated());
  EXPECT_EQ(r->question.name, "www.example.com");
  EXPECT_EQ(r->a, (std::vector<std::uint32_t>{0xc0000201, 0xc0000202}));
  EXPECT_EQ(r->min_ttl, 60u);
}

TEST(DnsResponse, DirectAnswersAndNoAnswers) {
  Msg m;
  add_header(m, 9, 0x8180, 1, 1, 0, 0);
  add_name(m, "example.com");
  add16(m, kTypeA);
  add16(m, kClassIn);
  add(m, {0xc0, 12});
  add_rr(m, kTypeA, 42, 4);
  add(m, {93, 184, 216, 34});
  auto r = parse_response(m);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->a, (std::vector<std::uint32_t>{0x5db8d822}));
  EXPECT_EQ(r->min_ttl, 42u);

  Msg nx;
  add_header(nx, 9, 0x8183, 1, 0, 0, 0);
  add_name(nx, "nope.example.com");
  add16(nx, kTypeA);
  add16(nx, kClassIn);
  auto n = parse_response(nx);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->rcode(), Rcode::kNxDomain);
  EXPECT_TRUE(n->a.empty());
  EXPECT_EQ(n->min_ttl, 0u);
}

TEST(DnsResponse, CnameLoopEnds) {
  // a CNAME b, b CNAME a, b A 1.2.3.4
  Msg m;
  add_header(m, 1, 0x8180, 1, 3, 0, 0);
  add_name(m, "a.test");
  add16(m, kTypeA);
  add16(m, kClassIn);
  add(m, {0xc0, 12});
  add_rr(m, kTypeCname, 10, 8);
  const int b_at = static_cast<int>(m.size());
  add_name(m, "b.test");
  add(m, {0xc0, b_at});
  add_rr(m, kTypeCname, 10, 2);
  add(m, {0xc0, 12});
  add(m, {0xc0, b_at});
  add_rr(m, kTypeA, 10, 4);
  add(m, {1, 2, 3, 4});
  auto r = parse_response(m);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->a, (std::vector<std::uint32_t>{0x01020304}));
}

TEST(DnsResponse, RejectsMalformed) {
  auto good = cname_chain_response("example.com");
  ASSERT_TRUE(parse_response(good));
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(parse_response(Msg(good.begin(), good.begin() + static_cast<long>(n)))) << n;
  }
  Msg q = good;
  q[2] &= 0x7f;
  EXPECT_FALSE(parse_response(q));  // not a response

  // An A record with 5 bytes of data.
  Msg bad_a;
  add_header(bad_a, 1, 0x8180, 1, 1, 0, 0);
  add_name(bad_a, "x.test");
  add16(bad_a, kTypeA);
  add16(bad_a, kClassIn);
  add(bad_a, {0xc0, 12});
  add_rr(bad_a, kTypeA, 1, 5);
  add(bad_a, {1, 2, 3, 4, 5});
  EXPECT_FALSE(parse_response(bad_a));

  // A CNAME whose target pointer points forward.
  Msg fwd;
  add_header(fwd, 1, 0x8180, 1, 1, 0, 0);
  add_name(fwd, "x.test");
  add16(fwd, kTypeA);
  add16(fwd, kClassIn);
  add(fwd, {0xc0, 12});
  add_rr(fwd, kTypeCname, 1, 2);
  add(fwd, {0xc0, static_cast<int>(fwd.size() + 2)});
  add_name(fwd, "y.test");
  EXPECT_FALSE(parse_response(fwd));
}

TEST(DnsResponse, TruncatedKeepsWhatArrived) {
  auto m = cname_chain_response("example.com");
  m[2] |= 0x02;  // TC
  // Cut inside the fifth answer: the chain and both A records are complete.
  m.resize(m.size() - 20);
  auto r = parse_response(m);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_TRUE(r->truncated());
  EXPECT_EQ(r->a.size(), 2u);
}

TEST(DnsReply, EchoesIdAndQuestion) {
  auto q = parse_query(query("Example.COM", kTypeA, 0xabcd, 0x0100));
  ASSERT_TRUE(q);
  for (Rcode rc : {Rcode::kRefused, Rcode::kNxDomain, Rcode::kServFail}) {
    auto bytes = build_reply(*q, rc);
    // Header: id, QR|RD|RA + rcode, one question, nothing else; then the question verbatim.
    EXPECT_EQ(bytes[0], 0xab);
    EXPECT_EQ(bytes[1], 0xcd);
    EXPECT_EQ(bytes[2], 0x81);
    EXPECT_EQ(bytes[3], 0x80 | static_cast<int>(rc));
    auto r = parse_response(bytes);
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->id, 0xabcd);
    EXPECT_EQ(r->rcode(), rc);
    EXPECT_TRUE(r->question.same(q->question));
    EXPECT_EQ(r->question.wire_name, q->question.wire_name);  // case kept
    EXPECT_TRUE(r->a.empty());
  }
}

}  // namespace
}  // namespace abx::egress::dns
