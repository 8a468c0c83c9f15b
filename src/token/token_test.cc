#include "abx/token/token.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "abx/testing/temp_dir.h"

namespace abx::token {
namespace {

constexpr std::string_view kFull = "0123456789abcdef0123456789abcdef";

TEST(ConstantTimeEqual, ComparesContent) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secret2"));
  EXPECT_FALSE(constant_time_equal("", "x"));
}

TEST(SecretMatcher, MatchesOnlyTheSecret) {
  SecretMatcher m("secret");
  EXPECT_TRUE(m.matches("secret"));
  EXPECT_FALSE(m.matches("secreT"));
  EXPECT_FALSE(m.matches("secret2"));
  EXPECT_FALSE(m.matches(""));
  EXPECT_TRUE(SecretMatcher("").matches(""));
}

TEST(Scoped, MintVerifyRoundTrip) {
  auto tok = mint_scoped(kFull, {{"demo", "add"}, 2000});
  ASSERT_TRUE(tok.ok());
  EXPECT_TRUE(looks_scoped(*tok));
  auto c = verify_scoped(kFull, *tok, 1999);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->commands, (std::vector<std::string>{"demo", "add"}));
  EXPECT_EQ(c->expires_at, 2000);
}

TEST(Scoped, ExpiredIsRefused) {
  auto tok = mint_scoped(kFull, {{"demo"}, 2000});
  auto c = verify_scoped(kFull, *tok, 2000);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kUnauthenticated);
  EXPECT_NE(c.error().message().find("expired"), std::string::npos);
}

TEST(Scoped, OtherKeyIsRefused) {
  auto tok = mint_scoped(kFull, {{"demo"}, 2000});
  EXPECT_FALSE(verify_scoped("another-sandbox-token", *tok, 1).ok());
}

TEST(Scoped, EveryFlippedByteIsRefused) {
  auto tok = *mint_scoped(kFull, {{"demo"}, 2000});
  for (std::size_t i = 0; i < tok.size(); ++i) {
    std::string bad = tok;
    bad[i] = bad[i] == 'A' ? 'B' : 'A';
    EXPECT_FALSE(verify_scoped(kFull, bad, 1).ok()) << "byte " << i;
  }
}

TEST(Scoped, MintRefusesBadClaims) {
  EXPECT_FALSE(mint_scoped("", {{"demo"}, 10}).ok());
  EXPECT_FALSE(mint_scoped(kFull, {{}, 10}).ok());
  EXPECT_FALSE(mint_scoped(kFull, {{"demo"}, 0}).ok());
  EXPECT_FALSE(mint_scoped(kFull, {{"../x"}, 10}).ok());
}

TEST(Scoped, GarbageIsUnauthenticated) {
  for (std::string_view junk : {"", "abxs1.", "abxs1..", "abxs1.e30.", "abxs1.!!!.???", "demo"}) {
    auto c = verify_scoped(kFull, junk, 1);
    ASSERT_FALSE(c.ok()) << junk;
    EXPECT_EQ(c.error().code(), ErrorCode::kUnauthenticated);
  }
  EXPECT_FALSE(verify_scoped(kFull, "abxs1." + std::string(5000, 'a'), 1).ok());
}

TEST(RandomHex, LengthAndAlphabet) {
  auto a = random_hex(16);
  auto b = random_hex(16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  ASSERT_TRUE(reseed_random().ok());  // (what a reseed changes is not observable from here)
}

TEST(RandomUuid, IsVersion4) {
  const std::string u = random_uuid();
  ASSERT_EQ(u.size(), 36u);
  for (std::size_t i : {8u, 13u, 18u, 23u}) EXPECT_EQ(u[i], '-') << u;
  EXPECT_EQ(u[14], '4') << u;
  EXPECT_NE(std::string("89ab").find(u[19]), std::string::npos) << u;
  EXPECT_NE(u, random_uuid());
}

TEST(ReadTokenFile, TrimsTheEndAndRefusesEmptyOrMissingFiles) {
  abx::testing::TempDir dir("abx-token");
  const std::string path = (dir / "token").string();
  std::ofstream(path) << "tok en\r\n \n";
  auto t = read_token_file(path);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(*t, "tok en");
  std::ofstream(path) << " \n";
  EXPECT_EQ(read_token_file(path).error().code(), ErrorCode::kInvalidArgument);
  std::remove(path.c_str());
  EXPECT_EQ(read_token_file(path).error().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace abx::token
