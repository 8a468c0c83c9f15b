#include "abx/base/json.h"

#include <gtest/gtest.h>

#include <string>

namespace abx {
namespace {

struct RejectCase {
  const char* name;
  std::string text;
};

class JsonRejects : public ::testing::TestWithParam<RejectCase> {};

TEST_P(JsonRejects, IsInvalidArgument) {
  auto r = parse_json_strict(GetParam().text);
  ASSERT_FALSE(r.ok()) << GetParam().name;
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("malformed JSON"), std::string::npos);
}

// The JSON rows of the bad-input catalogue (security-catalogue.md §2.2).
INSTANTIATE_TEST_SUITE_P(
    Catalogue, JsonRejects,
    ::testing::Values(RejectCase{"duplicate_key", R"({"a":1,"a":2})"},
                      RejectCase{"nested_duplicate", R"({"o":{"b":1,"b":1}})"},
                      RejectCase{"deep", std::string(10000, '[') + std::string(10000, ']')},
                      RejectCase{"overlong_utf8", "{\"s\":\"\xc0\xaf\"}"},
                      RejectCase{"encoded_surrogate", "{\"s\":\"\xed\xa0\x80\"}"},
                      RejectCase{"lone_surrogate", R"({"s":"\ud800"})"},
                      RejectCase{"nul_in_key", R"({"\u0000":1})"},
                      RejectCase{"nan", R"({"x":NaN})"},
                      RejectCase{"infinity", R"({"x":Infinity})"},
                      RejectCase{"overflow", R"({"x":1e400})"}, RejectCase{"comment", "/*c*/{}"},
                      RejectCase{"trailing_comma", R"({"a":1,})"},
                      RejectCase{"trailing_garbage", "{} x"}, RejectCase{"bom", "\xef\xbb\xbf{}"},
                      RejectCase{"empty", ""}, RejectCase{"truncated", R"({"a":)"}),
    [](const auto& tc) { return std::string(tc.param.name); });

TEST(Json, AcceptsOrdinaryDocuments) {
  auto r = parse_json_strict(R"({"x":42,"y":"world","z":[1,2.5,true,null],"u":"\u00e9"})");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->at("x").as_int64(), 42);
  EXPECT_EQ(r->at("y").as_string(), "world");
  EXPECT_EQ(r->at("u").as_string(), "\xc3\xa9");
}

TEST(Json, SameKeyInSiblingObjectsIsFine) {
  auto r = parse_json_strict(R"({"a":{"k":1},"b":{"k":2}})");
  ASSERT_TRUE(r.ok()) << r.error().message();
}

TEST(Json, DepthCapIsExact) {
  JsonLimits lim{.max_depth = 3};
  EXPECT_TRUE(parse_json_strict("[[[1]]]", lim).ok());
  auto r = parse_json_strict("[[[[1]]]]", lim);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("nesting deeper than 3"), std::string::npos);
}

TEST(Json, KeepsBigIntegersExact) {
  auto r = parse_json_strict(R"({"n":9007199254740993})");
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->at("n").is_int64());
  EXPECT_EQ(r->at("n").as_int64(), 9007199254740993LL);
}

}  // namespace
}  // namespace abx
