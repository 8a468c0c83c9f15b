#include "abx/base/ascii.h"

#include <gtest/gtest.h>

namespace abx {
namespace {

TEST(Ascii, LowerChangesOnlyAsciiCapitals) {
  EXPECT_EQ(ascii_lower('A'), 'a');
  EXPECT_EQ(ascii_lower('Z'), 'z');
  EXPECT_EQ(ascii_lower('@'), '@');  // just below 'A'
  EXPECT_EQ(ascii_lower('['), '[');  // just above 'Z'
  EXPECT_EQ(ascii_lower("Api.EXAMPLE.com:443"), "api.example.com:443");
  EXPECT_EQ(ascii_lower("\xC3\x89t\xC3\xA9"), "\xC3\x89t\xC3\xA9");  // UTF-8 bytes untouched
}

TEST(Ascii, IequalsIgnoresAsciiCaseOnly) {
  EXPECT_TRUE(ascii_iequals("Content-Type", "content-type"));
  EXPECT_TRUE(ascii_iequals("", ""));
  EXPECT_FALSE(ascii_iequals("host", "hosts"));
  EXPECT_FALSE(ascii_iequals("a", "b"));
  EXPECT_FALSE(ascii_iequals("\xC3\x89", "\xC3\xA9"));  // É and é differ outside ASCII
}

TEST(Ascii, TrimRemovesTheCLocalesSpaces) {
  EXPECT_EQ(ascii_trim(" \t\r\n\v\fx y\f\v\n\r\t "), "x y");
  EXPECT_EQ(ascii_trim("   "), "");
  EXPECT_EQ(ascii_trim(""), "");
  EXPECT_FALSE(ascii_space('\x1f'));
  EXPECT_FALSE(ascii_space('\x0e'));  // just past '\r'
}

TEST(Ascii, TokenCharsAreRfc9110s) {
  for (char c : std::string_view("!#$%&'*+-.^_`|~azAZ09")) EXPECT_TRUE(is_token_char(c)) << c;
  for (char c : std::string_view(" \t\"(),/:;<=>?@[\\]{}\x7f")) EXPECT_FALSE(is_token_char(c)) << c;
  EXPECT_FALSE(is_token_char('\0'));
}

}  // namespace
}  // namespace abx
