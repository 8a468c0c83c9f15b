#include "abx/egress/sniff.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace abx::egress {
namespace {

using Kind = SniffResult::Kind;

std::string unhex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

// The ClientHello of `openssl s_client -servername x.test -connect 127.0.0.1:<port>` (OpenSSL
// 3.0, TLS 1.3 with 1.2 fallback), as it arrived at a listening socket: one record, 312 bytes.
const std::string kOpensslHello = unhex(
    "16030101330100012f0303dc2ba26598340330e6eeeed4b617bbf5fb9d4f"
    "7d063e17e47cbfadfd4b0c026a20f5d190d4b2460c7a8422602a603f03bf"
    "ee63244deb5648dce2fd0869ad313871003e130213031301c02cc030009f"
    "cca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039"
    "c009c0130033009d009c003d003c0035002f00ff010000a80000000b0009"
    "000006782e74657374000b000403000102000a00160014001d0017001e00"
    "19001801000101010201030104002300000016000000170000000d002a00"
    "28040305030603080708080809080a080b08040805080604010501060103"
    "0303010302040205020602002b0009080304030303020301002d00020101"
    "003300260024001d00209ef90ffa30384f6b99e528f43b7123e7f5438837"
    "b2fd393c64504332a438f774");

std::string u16(std::size_t v) {
  return {static_cast<char>((v >> 8) & 0xff), static_cast<char>(v & 0xff)};
}
std::string u24(std::size_t v) { return static_cast<char>((v >> 16) & 0xff) + u16(v); }

std::string ext(unsigned type, const std::string& body) {
  return u16(type) + u16(body.size()) + body;
}

// A server_name extension listing (name_type, name) entries.
std::string sni_ext(const std::vector<std::pair<int, std::string>>& names) {
  std::string list;
  for (const auto& [type, name] : names) list += static_cast<char>(type) + u16(name.size()) + name;
  return ext(0, u16(list.size()) + list);
}
std::string sni_ext(const std::string& name) { return sni_ext({{0, name}}); }

// A ClientHello handshake message (header included) with these extensions; `session_id_len`
// may lie about its bytes to build malformed ones.
std::string hello_message(const std::string& extensions, bool with_extensions = true,
                          std::size_t session_id_len = 32) {
  std::string body = "\x03\x03" + std::string(32, 'r');
  body += static_cast<char>(session_id_len) +
          std::string(std::min<std::size_t>(session_id_len, 32), 's');
  body += u16(4) + "\x13\x01\x13\x02";
  body += std::string("\x01\x00", 2);
  if (with_extensions) body += u16(extensions.size()) + extensions;
  return "\x01" + u24(body.size()) + body;
}

// `handshake` in TLS records of at most `fragment` bytes each.
std::string records(const std::string& handshake, std::size_t fragment = 1 << 14) {
  std::string out;
  for (std::size_t i = 0; i < handshake.size(); i += fragment) {
    std::string piece = handshake.substr(i, fragment);
    out += "\x16\x03\x01" + u16(piece.size()) + piece;
  }
  return out;
}

std::string hello(const std::string& extensions) { return records(hello_message(extensions)); }

// Every proper prefix needs more; the whole gives `want`.
template <class F>
void expect_prefixes_need_more(F parse, const std::string& full) {
  for (std::size_t n = 0; n < full.size(); ++n) {
    SniffResult r = parse(std::string_view(full).substr(0, n));
    ASSERT_EQ(r.kind, Kind::kNeedMore) << "prefix of " << n << " bytes: " << r.reason << r.name;
  }
}

TEST(SniffTls, RealOpensslClientHello) {
  SniffResult r = tls_server_name(kOpensslHello);
  ASSERT_EQ(r.kind, Kind::kFound) << r.reason;
  EXPECT_EQ(r.name, "x.test");
  expect_prefixes_need_more(tls_server_name, kOpensslHello);
  // What follows the ClientHello (a client that sends early data) does not matter.
  EXPECT_EQ(tls_server_name(kOpensslHello + "\x17\x03\x03garbage").name, "x.test");
}

TEST(SniffTls, ReassemblesAcrossRecords) {
  const std::string message = kOpensslHello.substr(5);
  for (std::size_t fragment : {1, 2, 7, 100, 307}) {
    std::string split = records(message, fragment);
    SniffResult r = tls_server_name(split);
    ASSERT_EQ(r.kind, Kind::kFound) << fragment << ": " << r.reason;
    EXPECT_EQ(r.name, "x.test");
    expect_prefixes_need_more(tls_server_name, split);
  }
  // A large ClientHello (padding extension, RFC 7685) in 4 KiB records.
  std::string big = hello_message(sni_ext("big.test") + ext(21, std::string(12000, '\0')));
  SniffResult r = tls_server_name(records(big, 4096));
  ASSERT_EQ(r.kind, Kind::kFound) << r.reason;
  EXPECT_EQ(r.name, "big.test");
}

TEST(SniffTls, NoneWithoutServerName) {
  EXPECT_EQ(tls_server_name(hello(ext(10, u16(2) + u16(29)))).kind, Kind::kNone);
  EXPECT_EQ(tls_server_name(hello("")).kind, Kind::kNone);
  EXPECT_EQ(tls_server_name(records(hello_message("", false))).kind, Kind::kNone);
  // Only a name type other than host_name.
  EXPECT_EQ(tls_server_name(hello(sni_ext({{1, "x"}}))).kind, Kind::kNone);
}

// ALPN (RFC 7301): whether the ClientHello offers h2, which the proxy needs before it connects
// upstream (it offers the upstream h2 only when the sandbox did).
TEST(SniffTls, AlpnOffersH2) {
  auto alpn = [](std::initializer_list<std::string> protos) {
    std::string list;
    for (const auto& p : protos) list += static_cast<char>(p.size()) + p;
    return ext(16, u16(list.size()) + list);
  };
  EXPECT_FALSE(tls_server_name(kOpensslHello).alpn_h2);  // s_client sends no ALPN
  SniffResult r = tls_server_name(hello(sni_ext("x.test") + alpn({"h2", "http/1.1"})));
  ASSERT_EQ(r.kind, Kind::kFound) << r.reason;
  EXPECT_TRUE(r.alpn_h2);
  EXPECT_TRUE(tls_server_name(hello(alpn({"http/1.1", "h2"}) + sni_ext("x.test"))).alpn_h2);
  EXPECT_TRUE(tls_server_name(hello(alpn({"h2"}))).alpn_h2);  // kNone keeps it too
  EXPECT_FALSE(tls_server_name(hello(sni_ext("x.test") + alpn({"http/1.1"}))).alpn_h2);
  EXPECT_FALSE(tls_server_name(hello(sni_ext("x.test") + alpn({"h2c", "h"}))).alpn_h2);
  // A malformed ALPN list offers nothing, and the name is still found.
  r = tls_server_name(hello(sni_ext("x.test") + ext(16, u16(9) + "\x02h2")));
  EXPECT_EQ(r.name, "x.test");
  EXPECT_FALSE(r.alpn_h2);
  EXPECT_FALSE(tls_server_name(hello(sni_ext("x.test") + ext(16, u16(3) + "\x05h2"))).alpn_h2);
}

TEST(SniffTls, NamesAreCheckedAndLowerCased) {
  EXPECT_EQ(tls_server_name(hello(sni_ext("API.Example.COM"))).name, "api.example.com");
  EXPECT_EQ(tls_server_name(hello(sni_ext("a_b-c.example."))).name, "a_b-c.example");
  std::string longest = std::string(63, 'a') + "." + std::string(63, 'b') + "." +
                        std::string(63, 'c') + "." + std::string(61, 'd');
  ASSERT_EQ(longest.size(), 253u);
  EXPECT_EQ(tls_server_name(hello(sni_ext(longest))).name, longest);
  for (const std::string& bad :
       {longest + "e", std::string("a b.test"), std::string("a/b.test"), std::string("a\0b", 3),
        std::string("\xc3\xa9.test"), std::string(""), std::string("."), std::string("a.test..")}) {
    SniffResult r = tls_server_name(hello(sni_ext(bad)));
    EXPECT_EQ(r.kind, Kind::kMalformed) << bad;
    EXPECT_FALSE(r.reason.empty());
  }
}

TEST(SniffTls, Malformed) {
  auto malformed = [](const std::string& bytes) {
    SniffResult r = tls_server_name(bytes);
    return r.kind == Kind::kMalformed && !r.reason.empty();
  };
  // Not TLS at all: decided on the first byte.
  EXPECT_TRUE(malformed("G"));
  EXPECT_TRUE(malformed("GET / HTTP/1.1\r\n"));
  EXPECT_TRUE(malformed("\x17\x03\x03\x00\x10"));
  EXPECT_TRUE(malformed(std::string("\x16\x02", 2)));              // record version 2.x
  EXPECT_TRUE(malformed(std::string("\x16\x03\x01\x00\x00", 5)));  // empty record
  EXPECT_TRUE(malformed(std::string("\x16\x03\x01\x40\x01", 5)));  // over 2^14
  // A ServerHello, not a ClientHello.
  std::string server_hello = hello_message(sni_ext("x.test"));
  server_hello[0] = 2;
  EXPECT_TRUE(malformed(records(server_hello)));
  // A ClientHello that cannot fit in 16 KiB is refused from its header alone.
  EXPECT_TRUE(malformed("\x16\x03\x01" + u16(4) + "\x01" + u24(kMaxSniffBytes)));
  // Tiny records: the ClientHello does not arrive within 16 KiB.
  std::string tiny = records(hello_message(ext(21, std::string(4000, '\0'))), 1);
  EXPECT_TRUE(malformed(tiny.substr(0, kMaxSniffBytes)));
  EXPECT_EQ(tls_server_name(tiny.substr(0, kMaxSniffBytes - 1)).kind, Kind::kNeedMore);
  // A continuation record of another type.
  std::string two = records(kOpensslHello.substr(5), 100);
  two[105] = 0x17;
  EXPECT_TRUE(malformed(two));
  // Structure: duplicates, overruns, bad counts.
  EXPECT_TRUE(malformed(hello(sni_ext("a.test") + sni_ext("b.test"))));
  EXPECT_TRUE(malformed(hello(sni_ext({{0, "a.test"}, {0, "b.test"}}))));
  EXPECT_TRUE(malformed(hello(ext(0, ""))));      // no list
  EXPECT_TRUE(malformed(hello(ext(0, u16(0)))));  // empty list
  EXPECT_TRUE(malformed(hello(ext(0, u16(9) + std::string(3, '\0') + "\x03" + "abc"))));
  EXPECT_TRUE(malformed(hello(sni_ext("a.test") + u16(10) + u16(50) + "xx")));  // overrun
  EXPECT_TRUE(malformed(records(hello_message("", true, 33))));  // session id over 32
  std::string odd = hello_message(sni_ext("a.test"));
  odd[4 + 2 + 32 + 1 + 32 + 1] = 3;  // cipher suites length 3
  EXPECT_TRUE(malformed(records(odd)));
  // Bytes after the extensions inside the message.
  std::string trailing = hello_message(sni_ext("a.test"));
  trailing += "zz";
  trailing.replace(1, 3, u24(trailing.size() - 4));
  EXPECT_TRUE(malformed(records(trailing)));
}

TEST(SniffHttp, FoundAtTheEndOfTheHead) {
  const std::string req =
      "GET /path?q=1 HTTP/1.1\r\nUser-Agent: curl/8\r\nhOsT: \tExample.COM:8080 \r\n"
      "Accept: */*\r\n\r\n";
  SniffResult r = http_host(req);
  ASSERT_EQ(r.kind, Kind::kFound) << r.reason;
  EXPECT_EQ(r.name, "example.com");
  expect_prefixes_need_more(http_host, req);
  EXPECT_EQ(http_host(req + "body bytes").name, "example.com");
  // Bare LF line ends, a trailing dot, an empty port.
  EXPECT_EQ(http_host("POST / HTTP/1.0\nHost: a.test.:\n\n").name, "a.test");
}

TEST(SniffHttp, NoneWithoutHost) {
  EXPECT_EQ(http_host("GET / HTTP/1.0\r\n\r\n").kind, Kind::kNone);
  EXPECT_EQ(http_host("GET / HTTP/1.1\r\nHost:\r\n\r\n").kind, Kind::kNone);
  EXPECT_EQ(http_host("GET / HTTP/1.1\r\nHost:   \r\nX: y\r\n\r\n").kind, Kind::kNone);
}

TEST(SniffHttp, TargetAuthorityWinsAndMustAgree) {
  EXPECT_EQ(http_host("GET http://A.test:80/x HTTP/1.1\r\nHost: a.test\r\n\r\n").name, "a.test");
  EXPECT_EQ(http_host("GET http://a.test HTTP/1.1\r\n\r\n").name, "a.test");
  EXPECT_EQ(http_host("CONNECT b.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n").name, "b.test");
  EXPECT_EQ(http_host("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n").kind,
            Kind::kMalformed);
  EXPECT_EQ(http_host("CONNECT evil.test:443 HTTP/1.1\r\nHost: ok.test\r\n\r\n").kind,
            Kind::kMalformed);
  EXPECT_EQ(http_host("GET http:///x HTTP/1.1\r\nHost: a.test\r\n\r\n").kind, Kind::kMalformed);
  EXPECT_EQ(http_host("GET http://u@a.test/ HTTP/1.1\r\n\r\n").kind, Kind::kMalformed);
}

TEST(SniffHttp, Malformed) {
  auto reason = [](std::string_view bytes) {
    SniffResult r = http_host(bytes);
    return r.kind == Kind::kMalformed ? r.reason : "not malformed: " + r.name;
  };
  // Not HTTP: decided on the first byte (a TLS record sent to port 80).
  EXPECT_EQ(reason("\x16"), "request line does not start with a method");
  EXPECT_EQ(reason(" GET"), "request line does not start with a method");
  EXPECT_EQ(reason("GET\t/"), "method is not followed by a space");
  EXPECT_EQ(reason("GET  / HTTP/1.1\r\n"), "empty request target");
  EXPECT_EQ(reason("GET / HTTP/1.1x\r\n"), "request line does not end with HTTP/d.d");
  EXPECT_EQ(reason("GET / HTTQ"), "request line does not end with HTTP/d.d");
  EXPECT_EQ(reason("GET /\r\n"), "request line has no HTTP version");
  EXPECT_EQ(reason("GET\r\n"), "request line has no target");
  EXPECT_EQ(reason("GET /\x01 HTTP/1.1"), "request target has a byte that is not visible ASCII");
  // Headers.
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost: a.test\r\nhost: a.test\r\n\r\n"), "two Host headers");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost: a.test\r\n  b.test\r\n\r\n"),
            "obs-fold (a header line starting with whitespace)");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nX: y\r\n\tz"),
            "obs-fold (a header line starting with whitespace)");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost : a.test\r\n\r\n"), "whitespace before a header's ':'");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost a.test\r\n\r\n"), "header line without ':'");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\n: a.test\r\n\r\n"), "empty header name");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"), "control byte in a header value");
  EXPECT_EQ(reason(std::string("GET / HTTP/1.1\r\nX: a") + '\0' + "b\r\n\r\n"),
            "control byte in a header value");
  // Host values.
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), "Host is an IP literal");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost: a.test:8x\r\n\r\n"), "Host has a bad port");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
            "Host has a byte outside [A-Za-z0-9.-_]");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost: :80\r\n\r\n"), "Host is empty");
  EXPECT_EQ(reason("GET / HTTP/1.1\r\nHost: " + std::string(254, 'a') + "\r\n\r\n"),
            "Host is longer than 253 characters");
}

TEST(SniffHttp, HeadLimit) {
  std::string head = "GET / HTTP/1.1\r\nHost: a.test\r\nX: ";
  std::string almost = head + std::string(kMaxSniffBytes - 1 - head.size(), 'v');
  EXPECT_EQ(http_host(almost).kind, Kind::kNeedMore);
  EXPECT_EQ(http_host(almost + "v").kind, Kind::kMalformed);
  EXPECT_EQ(http_host(almost + "v\r\n\r\n").kind, Kind::kMalformed);  // the end is past 16 KiB
  std::string fits = head + std::string(kMaxSniffBytes - head.size() - 4, 'v') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), kMaxSniffBytes);
  EXPECT_EQ(http_host(fits).name, "a.test");
}

}  // namespace
}  // namespace abx::egress
