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

// An object of many keys: up to 32 each new key is compared with the ones before it; past that
// the object's keys are sorted once at its end (comparing every pair took seconds for an object
// of 80,000 keys).
std::string object_of(int keys, const std::string& last_key) {
  std::string s = "{";
  for (int i = 0; i < keys; ++i) s += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  return s + "\"" + last_key + "\":0}";
}

TEST(Json, LargeObjectsAreCheckedForDuplicatesToo) {
  for (int n : {31, 32, 33, 100, 5000}) {
    auto ok = parse_json_strict(object_of(n, "last"));
    ASSERT_TRUE(ok.ok()) << n << ": " << ok.error().message();
    EXPECT_EQ(ok->as_object().size(), static_cast<std::size_t>(n + 1));
    for (const std::string& dup :
         {std::string("k0"), "k" + std::to_string(n / 2), "k" + std::to_string(n - 1)}) {
      auto bad = parse_json_strict(object_of(n, dup));
      ASSERT_FALSE(bad.ok()) << n << " " << dup;
      EXPECT_NE(bad.error().message().find("duplicate object key \"" + dup + "\""),
                std::string::npos)
          << bad.error().message();
    }
  }
  // Keys split into parts by escapes, in a nested object past the scan limit.
  auto nested = parse_json_strict("{\"o\":" + object_of(40, "k\\u0031") + "}");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.error().message().find("duplicate object key \"k1\""), std::string::npos)
      << nested.error().message();
}

TEST(Json, KeysOfClosedObjectsDoNotCountAsTheParentsKeys) {
  std::string s = "{\"a\":" + object_of(40, "x") + ",\"x\":1,";
  for (int i = 0; i < 40; ++i) s += "\"p" + std::to_string(i) + "\":{\"k0\":1},";
  s += "\"k0\":2}";
  auto r = parse_json_strict(s);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->at("k0").as_int64(), 2);
  EXPECT_EQ(r->at("a").as_object().size(), 41u);
}

TEST(Json, ParsesAgainAfterARefusedDocument) {
  ASSERT_FALSE(parse_json_strict(R"({"a":{"b":{"c":1,"c":2}}})").ok());
  auto r = parse_json_strict(R"({"c":1,"b":{"c":2}})");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->at("b").at("c").as_int64(), 2);
}

}  // namespace
}  // namespace abx
