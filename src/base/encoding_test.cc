#include <gtest/gtest.h>

#include "abx/base/base64.h"
#include "abx/base/hex.h"
#include "abx/base/try.h"

namespace abx {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> v[] = {{"", ""},
                                                   {"f", "Zg=="},
                                                   {"fo", "Zm8="},
                                                   {"foo", "Zm9v"},
                                                   {"foob", "Zm9vYg=="},
                                                   {"fooba", "Zm9vYmE="},
                                                   {"foobar", "Zm9vYmFy"}};
  for (auto [plain, enc] : v) {
    EXPECT_EQ(base64_encode(plain), enc);
    auto d = base64_decode(enc);
    ASSERT_TRUE(d.ok()) << enc;
    EXPECT_EQ(*d, plain);
  }
}

TEST(Base64, UrlAlphabetHasNoPaddingAndRoundTrips) {
  const std::string bin("\xfb\xff\xbf\x00\x01\x00", 6);
  EXPECT_EQ(base64_encode(bin), "+/+/AAEA");
  EXPECT_EQ(base64url_encode(bin), "-_-_AAEA");
  EXPECT_EQ(base64url_encode("f"), "Zg");
  EXPECT_EQ(*base64url_decode("-_-_AAEA"), bin);
  EXPECT_EQ(*base64_decode("-_-_AAEA"), bin);  // lenient decoder takes both alphabets
  EXPECT_EQ(*base64_decode("Zg"), "f");        // padding optional
}

TEST(Base64, UrlRoundTripsEveryLength) {
  std::string s;
  for (int i = 0; i < 40; ++i) {
    s.push_back(static_cast<char>(i * 37 + 251));
    auto enc = base64url_encode(s);
    EXPECT_EQ(enc.find_first_of("+/="), std::string::npos);
    auto dec = base64url_decode(enc);
    ASSERT_TRUE(dec.ok());
    EXPECT_EQ(*dec, s);
  }
}

TEST(Base64, RejectsBadInput) {
  EXPECT_FALSE(base64_decode("Zg=").ok());    // wrong padding
  EXPECT_FALSE(base64_decode("Z").ok());      // impossible length
  EXPECT_FALSE(base64_decode("Zm9v!").ok());  // bad character
  EXPECT_FALSE(base64_decode("Zm=v").ok());   // padding in the middle
  EXPECT_FALSE(base64url_decode("+/+/").ok());
  EXPECT_FALSE(base64url_decode("Zg==").ok());
  EXPECT_EQ(base64_decode("Zm9v!").error().code(), ErrorCode::kInvalidArgument);
}

TEST(Hex, LowerCase) {
  EXPECT_EQ(to_hex(std::string_view("\x00\xff\x10", 3)), "00ff10");
  EXPECT_EQ(to_hex(""), "");
  EXPECT_EQ(from_hex("00ff10"), std::string("\x00\xff\x10", 3));
  EXPECT_EQ(from_hex(""), std::string());
  EXPECT_EQ(from_hex("abc"), std::nullopt);  // odd length
  EXPECT_EQ(from_hex("0g"), std::nullopt);
  EXPECT_EQ(from_hex("FF"), std::nullopt);  // lower case only, as to_hex writes
}

Result<int> half(int x) {
  if (x % 2) return invalid_argument("odd");
  return x / 2;
}
Result<int> quarter(int x) {
  ABX_ASSIGN_OR_RETURN(int h, half(x));
  ABX_ASSIGN_OR_RETURN(auto q, half(h));
  return q;
}
Status check_even(int x) {
  ABX_TRY(half(x));
  return {};
}

TEST(Try, PropagatesTheFirstError) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).error().message(), "odd");
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_FALSE(check_even(3).ok());
}

}  // namespace
}  // namespace abx

#include "abx/base/time.h"

namespace abx {
namespace {

TEST(Time, Rfc3339) {
  EXPECT_EQ(rfc3339(0, 0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(rfc3339(1, 500000000), "1970-01-01T00:00:01.500Z");
  EXPECT_EQ(rfc3339(1, 1000), "1970-01-01T00:00:01.000001Z");
  EXPECT_EQ(rfc3339(1, 7), "1970-01-01T00:00:01.000000007Z");
  EXPECT_EQ(rfc3339_ms(1796049570123), "2026-11-30T14:39:30.123Z");
  EXPECT_EQ(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
}

}  // namespace
}  // namespace abx
