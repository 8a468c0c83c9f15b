#include "abx/auth/signing.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <map>
#include <random>
#include <set>

namespace abx::auth {
namespace {

// --- AWS SigV4 test-suite vectors -------------------------------------------------------------
// Our canonical request is SigV4's, so computing SigV4's key derivation on top of it must give
// the published signatures (aws-sig-v4-test-suite, as pinned by aws-sdk-js-v3's
// signature-v4 suite fixture: AKIDEXAMPLE, us-east-1, service "service", 2015-08-30T12:36:00Z).

std::string hmac(std::string_view key, std::string_view msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string hex(std::string_view s) {
  static constexpr char k[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += k[c >> 4];
    out += k[c & 15];
  }
  return out;
}

std::string sigv4(const std::string& creq) {
  std::string sts =
      "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n" +
      sha256_hex(creq);
  std::string k = hmac("AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830");
  k = hmac(k, "us-east-1");
  k = hmac(k, "service");
  k = hmac(k, "aws4_request");
  return hex(hmac(k, sts));
}

struct Vector {
  const char* name;
  const char* method;
  const char* target;
  std::vector<Header> extra_headers;
  const char* body;
  const char* signature;
};

TEST(SigV4Vectors, CanonicalRequestMatchesPublishedSignatures) {
  const std::vector<Vector> vectors = {
      {"get-vanilla",
       "GET",
       "/",
       {},
       "",
       "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
      {"get-vanilla-query-order-key-case",
       "GET",
       "/?Param2=value2&Param1=value1",
       {},
       "",
       "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
      {"get-vanilla-query-unreserved",
       "GET",
       "/?-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
       "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
       {},
       "",
       "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
      {"get-vanilla-utf8-query",
       "GET",
       "/?\xe1\x88\xb4=bar",
       {},
       "",
       "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
      {"get-unreserved",
       "GET",
       "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
       {},
       "",
       "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
      {"get-utf8",
       "GET",
       "/\xe1\x88\xb4",
       {},
       "",
       "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
      {"get-header-value-trim",
       "GET",
       "/",
       {{"My-Header1", " value1 "}, {"My-Header2", "\"a   b   c\""}},
       "",
       "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
      {"get-header-key-duplicate",
       "GET",
       "/",
       {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}},
       "",
       "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
      {"get-header-value-order",
       "GET",
       "/",
       {{"My-Header1", "value4"},
        {"My-Header1", "value1"},
        {"My-Header1", "value3"},
        {"My-Header1", "value2"}},
       "",
       "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
      {"post-vanilla",
       "POST",
       "/",
       {},
       "",
       "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"},
      {"post-header-key-sort",
       "POST",
       "/",
       {{"My-Header1", "value1"}},
       "",
       "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"},
      {"post-header-value-case",
       "POST",
       "/",
       {{"My-Header1", "VALUE1"}},
       "",
       "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
      {"post-vanilla-query",
       "POST",
       "/?Param1=value1",
       {},
       "",
       "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
      {"post-vanilla-query-nonunreserved",
       "POST",
       "/?%40%23%24%25%5E=&%2B=%2F%2C%3F%3E%3C%60%22%3B%3A%5C%7C%5D%5B%7B%7D",
       {},
       "",
       "66c82657c86e26fb25238d0e69f011edc4c6df5ae71119d7cb98ed9b87393c1e"},
      {"post-vanilla-query-space",
       "POST",
       "/?p",
       {},
       "",
       "e71688addb58a26418614085fb730ba3faa623b461c17f48f2fbdb9361b94a9b"},
      {"post-x-www-form-urlencoded",
       "POST",
       "/",
       {{"Content-Type", "application/x-www-form-urlencoded"}},
       "Param1=value1",
       "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"},
  };
  for (const auto& v : vectors) {
    HttpRequest r{v.method,
                  v.target,
                  {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}}};
    std::set<std::string> names = {"host", "x-amz-date"};
    for (const auto& h : v.extra_headers) {
      r.headers.push_back(h);
      std::string n = h.name;
      for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      names.insert(n);
    }
    auto creq = canonical_request(r, {names.begin(), names.end()}, sha256_hex(v.body));
    ASSERT_TRUE(creq.ok()) << v.name << ": " << creq.error().to_string();
    EXPECT_EQ(sigv4(*creq), v.signature) << v.name << "\n" << *creq;
  }
}

TEST(SigV4Vectors, GetVanillaCanonicalRequestText) {
  HttpRequest r{
      "GET", "/", {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}}};
  auto creq = canonical_request(r, {"host", "x-amz-date"}, sha256_hex(""));
  ASSERT_TRUE(creq.ok());
  EXPECT_EQ(*creq,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(*creq), "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
}

TEST(Canonical, UriAndQueryRules) {
  EXPECT_EQ(*canonical_uri(""), "/");
  EXPECT_EQ(*canonical_uri("/example space/"), "/example%20space/");  // get-space
  EXPECT_EQ(*canonical_uri("/example%20space/"), "/example%20space/");
  EXPECT_EQ(*canonical_uri("/a%2fb"), "/a%2Fb");  // an encoded slash is not a separator
  EXPECT_NE(*canonical_uri("/a%2fb"), *canonical_uri("/a/b"));
  EXPECT_EQ(*canonical_uri("/a/../b//c"), "/a/../b//c");  // not normalised: signs what is routed
  EXPECT_EQ(*canonical_uri("/a+b"), "/a%2Bb");            // "+" is literal in a path
  EXPECT_FALSE(canonical_uri("/%zz").ok());
  EXPECT_FALSE(canonical_uri("/%2").ok());
  EXPECT_FALSE(canonical_uri("relative").ok());
  EXPECT_EQ(*canonical_query("b=2&a=1&a=0"), "a=0&a=1&b=2");  // repeated keys, sorted by value
  EXPECT_EQ(*canonical_query("a=x+y"), "a=x%20y");            // "+" is a space in a query
  EXPECT_EQ(*canonical_query("a=x%2By"), "a=x%2By");
  EXPECT_EQ(*canonical_query("a&&b="), "a=&b=");
  EXPECT_EQ(*canonical_query("k=%7e%2f"), "k=~%2F");
  EXPECT_FALSE(canonical_query("a=%G0").ok());
}

TEST(Dates, FormatAndParse) {
  EXPECT_EQ(format_date(1440938160), "20150830T123600Z");
  EXPECT_EQ(*parse_date("20150830T123600Z"), 1440938160);
  EXPECT_EQ(*parse_date("20240229T000000Z"), 1709164800);
  for (std::int64_t t : {0LL, 951782400LL, 4102444799LL, 1709164800LL}) {
    EXPECT_EQ(parse_date(format_date(t)), t);
  }
  for (const char* bad :
       {"", "20150830T123600", "2015-08-30T12:36:00Z", "20150230T000000Z", "20230229T000000Z",
        "20151330T000000Z", "20150830T246000Z", "2015083OT123600Z", "20150830t123600Z"}) {
    EXPECT_FALSE(parse_date(bad).has_value()) << bad;
  }
}

// --- sign / verify ----------------------------------------------------------------------------

constexpr std::int64_t kNow = 1'800'000'000;
const Credentials kCreds{"ABXTESTKEY0000000001", std::string(64, 'a')};

struct Server {
  std::map<std::string, std::string> secrets{{kCreds.access_key_id, kCreds.secret}};
  std::map<std::string, std::int64_t> nonces;
  int lookups = 0;
  VerifyOptions options(std::int64_t now = kNow) {
    VerifyOptions o;
    o.now_unix = now;
    o.lookup_secret = [this](std::string_view ak) -> Result<std::optional<std::string>> {
      ++lookups;
      auto it = secrets.find(std::string(ak));
      if (it == secrets.end()) return std::optional<std::string>();
      return std::optional<std::string>(it->second);
    };
    o.remember_nonce = [this](std::string_view key, std::int64_t exp) -> Result<bool> {
      return !nonces.emplace(std::string(key), exp).second;
    };
    return o;
  }
};

SignOptions opts(std::int64_t now, std::string nonce = {}, std::vector<std::string> extra = {}) {
  SignOptions o;
  o.now_unix = now;
  o.nonce = std::move(nonce);
  o.extra_signed_headers = std::move(extra);
  return o;
}

HttpRequest base_request() {
  return {"POST",
          "/sandboxes/abc/timeout?x=1&y=two%20words",
          {{"Host", "localhost:3000"},
           {"Content-Type", "application/json"},
           {"User-Agent", "test"},
           {"E2b-Sandbox-Id", "abc"}}};
}

HttpRequest signed_request(const HttpRequest& r, std::string_view body, SignOptions o = {}) {
  if (o.now_unix == 0) o.now_unix = kNow;
  auto h = sign(r, body, kCreds, o);
  EXPECT_TRUE(h.ok()) << h.error().to_string();
  HttpRequest out = r;
  for (auto& x : *h) out.headers.push_back(x);
  return out;
}

std::string auth_of(const HttpRequest& r) {
  for (const auto& h : r.headers) {
    if (h.name == "authorization") return h.value;
  }
  return {};
}

TEST(Signing, VerifyAcceptsWhatSignProduces) {
  Server s;
  std::string body = R"({"timeout":60})";
  HttpRequest r = signed_request(base_request(), body, opts(kNow, "", {"e2b-sandbox-id"}));
  EXPECT_NE(auth_of(r).find("SignedHeaders=content-type;e2b-sandbox-id;host;x-abx-content-sha256;"
                            "x-abx-date;x-abx-nonce,"),
            std::string::npos)
      << auth_of(r);
  auto v = verify(r, body, s.options());
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  EXPECT_EQ(*v, kCreds.access_key_id);

  // Random requests, random bodies.
  std::mt19937 rng(42);
  for (int i = 0; i < 200; ++i) {
    HttpRequest q{i % 2 ? "GET" : "PUT",
                  "/p/" + std::to_string(i) + "?k" + std::to_string(i % 7) + "=v&z=%41",
                  {{"Host", "h" + std::to_string(i)}}};
    std::string b(static_cast<std::size_t>(rng() % 300), '\0');
    for (char& c : b) c = static_cast<char>(rng());
    HttpRequest sq = signed_request(q, b);
    auto ok = verify(sq, b, s.options());
    ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  }
}

TEST(Signing, UnsignedHeadersDoNotMatter) {
  Server s;
  HttpRequest r = signed_request(base_request(), "{}");
  for (auto& h : r.headers) {
    if (h.name == "User-Agent") h.value = "something else";
  }
  r.headers.push_back({"X-Forwarded-For", "1.2.3.4"});
  EXPECT_TRUE(verify(r, "{}", s.options()).ok());
}

TEST(Signing, FlippingAnySignedByteFails) {
  std::string body = R"({"timeout":60})";
  HttpRequest good = signed_request(base_request(), body);
  int checked = 0;
  auto expect_rejected = [&](const HttpRequest& r, std::string_view b, const std::string& what) {
    Server s;
    auto v = verify(r, b, s.options());
    EXPECT_FALSE(v.ok()) << what;
    if (!v.ok()) {
      EXPECT_EQ(v.error().code(), ErrorCode::kUnauthenticated) << what;
    }
    ++checked;
  };
  // Each byte of the target, except where the change is canonically the same request (hex case
  // inside a %XX escape).
  for (std::size_t i = 0; i < good.target.size(); ++i) {
    HttpRequest r = good;
    r.target[i] = static_cast<char>(r.target[i] ^ 0x01);
    if (canonical_uri(r.target.substr(0, r.target.find('?'))).ok() &&
        *canonical_request(r, {"host"}, "") == *canonical_request(good, {"host"}, "")) {
      continue;
    }
    expect_rejected(r, body, "target byte " + std::to_string(i));
  }
  for (std::size_t i = 0; i < body.size(); ++i) {
    std::string b = body;
    b[i] = static_cast<char>(b[i] ^ 0x01);
    expect_rejected(good, b, "body byte " + std::to_string(i));
  }
  {
    HttpRequest r = good;
    r.method = "PUT";
    expect_rejected(r, body, "method");
  }
  // Each signed header value (not the Authorization header itself).
  for (std::size_t h = 0; h < good.headers.size(); ++h) {
    std::string n = good.headers[h].name;
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n == "user-agent" || n == "e2b-sandbox-id" || n == "authorization") continue;
    for (std::size_t i = 0; i < good.headers[h].value.size(); ++i) {
      HttpRequest r = good;
      char& c = r.headers[h].value[i];
      c = static_cast<char>(c == 'a' ? 'b' : (c == '0' ? '1' : c ^ 0x02));
      expect_rejected(r, body, n + " byte " + std::to_string(i));
    }
  }
  // Each byte of the signature.
  for (std::size_t h = 0; h < good.headers.size(); ++h) {
    if (good.headers[h].name != "authorization") continue;
    std::size_t at = good.headers[h].value.find("Signature=") + 10;
    for (std::size_t i = at; i < good.headers[h].value.size(); ++i) {
      HttpRequest r = good;
      char& c = r.headers[h].value[i];
      c = c == 'f' ? '0' : (c == '9' ? 'a' : static_cast<char>(c + 1));
      expect_rejected(r, body, "signature byte " + std::to_string(i));
    }
  }
  EXPECT_GT(checked, 150);
}

// Builds a request whose Authorization signs exactly `names` (correctly), to test the verifier's
// downgrade checks rather than the signature.
HttpRequest sign_only(HttpRequest r, std::string_view body, const std::vector<std::string>& names) {
  r.headers.push_back({"x-abx-date", format_date(kNow)});
  r.headers.push_back({"x-abx-nonce", std::string(32, 'c')});
  r.headers.push_back({"x-abx-content-sha256", sha256_hex(body)});
  auto creq = canonical_request(r, names, sha256_hex(body));
  EXPECT_TRUE(creq.ok());
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ";") + n;
  r.headers.push_back({"Authorization", "ABX-HMAC-SHA256 Credential=" + kCreds.access_key_id +
                                            ",SignedHeaders=" + list + ",Signature=" +
                                            hex(hmac(kCreds.secret, string_to_sign(*creq)))});
  return r;
}

TEST(Signing, DroppingARequiredSignedHeaderFails) {
  HttpRequest r{"GET", "/sandboxes", {{"Host", "localhost"}}};
  std::vector<std::string> all = {"host", "x-abx-content-sha256", "x-abx-date", "x-abx-nonce"};
  {
    Server s;
    ASSERT_TRUE(verify(sign_only(r, "", all), "", s.options()).ok());
  }
  for (std::size_t drop = 0; drop < all.size(); ++drop) {
    std::vector<std::string> names = all;
    names.erase(names.begin() + static_cast<long>(drop));
    Server s;
    auto v = verify(sign_only(r, "", names), "", s.options());
    ASSERT_FALSE(v.ok()) << "dropped " << all[drop];
    EXPECT_EQ(v.error().type(), "IncompleteSignature");
    EXPECT_NE(v.error().message().find(all[drop]), std::string::npos);
  }
  // A content-type that is present must be signed too.
  r.headers.push_back({"Content-Type", "application/json"});
  Server s;
  auto v = verify(sign_only(r, "", all), "", s.options());
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message().find("content-type"), std::string::npos);

  // Removing a signed header from the request itself.
  HttpRequest signed_r = signed_request(base_request(), "{}");
  for (std::string_view gone : {"Host", "Content-Type", "x-abx-nonce", "x-abx-date"}) {
    HttpRequest x = signed_r;
    std::erase_if(x.headers, [&](const Header& h) { return h.name == gone; });
    Server s2;
    EXPECT_FALSE(verify(x, "{}", s2.options()).ok()) << gone;
  }
  // Duplicating one.
  HttpRequest dup = signed_r;
  dup.headers.push_back({"Host", "evil.example"});
  Server s3;
  EXPECT_FALSE(verify(dup, "{}", s3.options()).ok());
}

TEST(Signing, TimestampWindow) {
  HttpRequest r = signed_request(base_request(), "{}");
  for (std::int64_t skew : {-300, -299, 0, 299, 300}) {
    Server s;
    EXPECT_TRUE(verify(r, "{}", s.options(kNow + skew)).ok()) << skew;
  }
  for (std::int64_t skew : {-301, 301, -86400, 86400}) {
    Server s;
    auto v = verify(r, "{}", s.options(kNow + skew));
    ASSERT_FALSE(v.ok()) << skew;
    EXPECT_EQ(v.error().type(), "RequestTimeTooSkewed");
  }
}

TEST(Signing, ReplayIsRefused) {
  Server s;
  HttpRequest r = signed_request(base_request(), "{}");
  ASSERT_TRUE(verify(r, "{}", s.options()).ok());
  auto again = verify(r, "{}", s.options(kNow + 10));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().type(), "NonceReused");
  ASSERT_EQ(s.nonces.size(), 1u);
  EXPECT_EQ(s.nonces.begin()->second, kNow + 2 * kDefaultWindowSeconds);
  EXPECT_EQ(s.nonces.begin()->first.rfind(kCreds.access_key_id + "/", 0), 0u);
  // A forged request never consumes a nonce.
  HttpRequest forged = signed_request(base_request(), "{}", opts(kNow, std::string(32, 'e')));
  Server s2;
  ASSERT_FALSE(verify(forged, "tampered", s2.options()).ok());
  EXPECT_TRUE(s2.nonces.empty());
  // Store failures pass through (e.g. 503 when the database is busy).
  Server s3;
  VerifyOptions o = s3.options();
  o.remember_nonce = [](std::string_view, std::int64_t) -> Result<bool> {
    return unavailable("store busy");
  };
  auto busy = verify(signed_request(base_request(), "{}"), "{}", o);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code(), ErrorCode::kUnavailable);
}

TEST(Signing, UnknownKeyLooksLikeABadSignatureAndDoesTheWork) {
  Server s;
  s.secrets.clear();
  HttpRequest r = signed_request(base_request(), "{}");
  auto v = verify(r, "{}", s.options());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().type(), "SignatureDoesNotMatch");
  EXPECT_EQ(s.lookups, 1);
  Server wrong;
  wrong.secrets[kCreds.access_key_id] = std::string(64, 'b');
  auto w = verify(r, "{}", wrong.options());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().type(), v.error().type());
  EXPECT_EQ(w.error().message(), v.error().message());
}

TEST(Signing, BodyHashIsRecomputed) {
  Server s;
  HttpRequest r = signed_request(base_request(), "{\"timeout\":60}");
  auto v = verify(r, "{\"timeout\":99999}", s.options());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().type(), "SignatureDoesNotMatch");
}

TEST(Signing, SignRefusesWhatItCannotSign) {
  EXPECT_FALSE(sign({"GET", "/", {}}, "", kCreds, opts(kNow)).ok());  // no Host
  EXPECT_FALSE(
      sign({"GET", "/", {{"Host", "h"}, {"X-Abx-Date", "x"}}}, "", kCreds, opts(kNow)).ok());
  EXPECT_FALSE(sign({"GET", "/", {{"Host", "h"}}}, "", {"", "s"}, opts(kNow)).ok());
  EXPECT_FALSE(sign({"GET", "/%zz", {{"Host", "h"}}}, "", kCreds, opts(kNow)).ok());
}

TEST(Authorization, ParsesStrictly) {
  std::string sig(64, 'a');
  auto p = parse_authorization(
      "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host;x-abx-date,"
      "Signature=" +
      sig);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_EQ(p->access_key_id, "AK1");
  EXPECT_EQ(p->signed_headers, (std::vector<std::string>{"host", "x-abx-date"}));
  EXPECT_TRUE(parse_authorization("ABX-HMAC-SHA256 Signature=" + sig +
                                  ", Credential=AK1, SignedHeaders=host")
                  .ok());
  for (std::string bad : {
           std::string(""),
           std::string("ABX-HMAC-SHA256"),
           std::string("ABX-HMAC-SHA256 "),
           "AWS4-HMAC-SHA256 Credential=AK1,SignedHeaders=host,Signature=" + sig,
           "abx-hmac-sha256 Credential=AK1,SignedHeaders=host,Signature=" + sig,
           std::string("ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host"),
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host,Signature=" + sig + ",",
           "ABX-HMAC-SHA256 Credential=AK1,Credential=AK2,SignedHeaders=host,Signature=" + sig,
           "ABX-HMAC-SHA256 Credential=AK/1,SignedHeaders=host,Signature=" + sig,
           "ABX-HMAC-SHA256 Credential=,SignedHeaders=host,Signature=" + sig,
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=x-abx-date;host,Signature=" + sig,
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host;host,Signature=" + sig,
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=Host,Signature=" + sig,
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host;,Signature=" + sig,
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host,Signature=" + sig.substr(1),
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host,Signature=" + std::string(64, 'A'),
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host,Signature=" + sig + ",Extra=1",
           "ABX-HMAC-SHA256 Credential=AK1,SignedHeaders=host,Signature=" + sig +
               std::string(5000, ' '),
       }) {
    auto r = parse_authorization(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kUnauthenticated);
    EXPECT_EQ(r.error().type(), "IncompleteSignature");
  }
}

TEST(Authorization, MissingOrDuplicatedHeaderIsRefused) {
  Server s;
  HttpRequest r = signed_request(base_request(), "{}");
  HttpRequest none = r;
  std::erase_if(none.headers, [](const Header& h) { return h.name == "authorization"; });
  EXPECT_EQ(verify(none, "{}", s.options()).error().type(), "IncompleteSignature");
  HttpRequest two = r;
  two.headers.push_back({"Authorization", auth_of(r)});
  EXPECT_EQ(verify(two, "{}", s.options()).error().type(), "IncompleteSignature");
}

}  // namespace
}  // namespace abx::auth
