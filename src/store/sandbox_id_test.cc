#include "abx/store/sandbox_id.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace abx::store {
namespace {

TEST(SandboxId, GeneratedIdsAreValidAndDistinct) {
  std::set<std::string> seen;
  std::set<char> chars;
  for (int i = 0; i < 500; ++i) {
    auto id = SandboxId::generate();
    ASSERT_TRUE(id.ok());
    EXPECT_TRUE(SandboxId::valid(id->str())) << id->str();
    EXPECT_TRUE(SandboxId::routable(id->str())) << id->str();
    seen.insert(id->str());
    chars.insert(id->str().begin(), id->str().end());
  }
  EXPECT_EQ(seen.size(), 500u);
  // 10,000 draws from 36 characters: every one appears (a biased or truncated alphabet would not).
  EXPECT_EQ(chars.size(), 36u);
}

TEST(SandboxId, ParseTakesExactlyTheGeneratedForm) {
  auto ok = SandboxId::parse("abcdefghij0123456789");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->str(), "abcdefghij0123456789");
  EXPECT_EQ(*ok, *SandboxId::parse("abcdefghij0123456789"));
  for (const std::string& bad : std::initializer_list<std::string>{
           "", "abcdefghij012345678", "abcdefghij01234567890", "Abcdefghij0123456789",
           "abcdefghij-123456789", "abcdefghij/123456789",
           std::string("abcdefghij\0"
                       "123456789",
                       20),
           "../../../../../etc/x"}) {
    auto r = SandboxId::parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_FALSE(SandboxId::valid(bad)) << bad;
  }
  // The message names the input, cut to 64 bytes.
  auto long_one = SandboxId::parse(std::string(1000, 'a'));
  ASSERT_FALSE(long_one.ok());
  EXPECT_LT(long_one.error().message().size(), 100u);
}

TEST(SandboxId, RoutableIsTheAlphabetAtOneToSixtyFour) {
  EXPECT_TRUE(SandboxId::routable("a"));
  EXPECT_TRUE(SandboxId::routable("nosuchsandbox"));
  EXPECT_TRUE(SandboxId::routable(std::string(64, 'z')));
  EXPECT_FALSE(SandboxId::routable(""));
  EXPECT_FALSE(SandboxId::routable(std::string(65, 'z')));
  EXPECT_FALSE(SandboxId::routable("has-dash"));
  EXPECT_FALSE(SandboxId::routable("UPPER"));
  EXPECT_FALSE(SandboxId::routable("dot.ted"));
}

}  // namespace
}  // namespace abx::store
