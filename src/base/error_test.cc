#include "abx/base/error.h"

#include <gtest/gtest.h>

namespace abx {
namespace {

TEST(Error, DefaultTypeIsCodeName) {
  Error e = invalid_argument("x must be an integer");
  EXPECT_EQ(e.type(), "InvalidArgument");
  EXPECT_EQ(e.to_string(), "InvalidArgument: x must be an integer");
}

TEST(Error, ExplicitTypeWins) {
  Error e(ErrorCode::kInternal, "boom", "std::runtime_error");
  EXPECT_EQ(e.type(), "std::runtime_error");
}

TEST(Error, WithContextPrefixesTheMessageAndKeepsCodeAndType) {
  Error e(ErrorCode::kNotFound, "manifest unknown", "RegistryError");
  Error c = e.with_context("pull alpine:3");
  EXPECT_EQ(c.code(), ErrorCode::kNotFound);
  EXPECT_EQ(c.type(), "RegistryError");
  EXPECT_EQ(c.message(), "pull alpine:3: manifest unknown");
  EXPECT_EQ(e.message(), "manifest unknown");  // the original is unchanged
}

TEST(Result, HoldsValueOrError) {
  Result<int> good = 3;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  Result<int> bad = not_found("no such command: x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kNotFound);
  Status s;
  EXPECT_TRUE(s.ok());
  Status f = unavailable("shutting down");
  EXPECT_FALSE(f.ok());
}

}  // namespace
}  // namespace abx
