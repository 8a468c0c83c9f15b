#include "abx/base/json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
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

// --- Readers ---

boost::json::object object_of_text(std::string_view text) {
  auto v = parse_json_strict(text);
  EXPECT_TRUE(v.ok()) << v.error().message();
  return v->as_object();
}

template <class T>
std::string error_of(const Result<T>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  return r.error().message();
}

TEST(JsonReaders, PathText) {
  EXPECT_EQ(json_path_key("", "network"), "network");
  EXPECT_EQ(json_path_key("network", "rules"), "network.rules");
  EXPECT_EQ(json_path_key("network.rules", "a.com"), R"(network.rules["a.com"])");
  EXPECT_EQ(json_path_key("", "a b"), R"(["a b"])");
  EXPECT_EQ(json_path_key("m", "x\"y"), R"(m["x\"y"])");
  EXPECT_EQ(json_path_key("m", "_x9"), "m._x9");
  EXPECT_EQ(json_path_key("m", "9x"), R"(m["9x"])");
  EXPECT_EQ(json_path_key("m", ""), R"(m[""])");
  EXPECT_EQ(json_path_index(R"(network.rules["a.com"])", 0), R"(network.rules["a.com"][0])");
}

TEST(JsonReaders, NestedPathInErrors) {
  auto o = object_of_text(R"({"network":{"rules":{"a.com":[{"transform":"x"}]}}})");
  auto net = json_required_object(o, "network", "");
  ASSERT_TRUE(net.ok());
  auto rules = json_required_object(**net, "rules", "network");
  ASSERT_TRUE(rules.ok());
  auto list = json_required_array(**rules, "a.com", "network.rules");
  ASSERT_TRUE(list.ok());
  auto rule = json_as_object((**list)[0], json_path_index(R"(network.rules["a.com"])", 0));
  ASSERT_TRUE(rule.ok());
  EXPECT_EQ(error_of(json_required_object(**rule, "transform", R"(network.rules["a.com"][0])")),
            R"(network.rules["a.com"][0].transform: expected an object, got string)");
}

TEST(JsonReaders, MissingField) {
  auto o = object_of_text(R"({"a":1})");
  EXPECT_EQ(error_of(json_required_string(o, "name", "")), "name: required field is missing");
  EXPECT_EQ(error_of(json_required_int(o, "n", "spec")), "spec.n: required field is missing");
  EXPECT_EQ(error_of(json_required_bool(o, "b", "")), "b: required field is missing");
  EXPECT_EQ(error_of(json_required_object(o, "o", "")), "o: required field is missing");
  EXPECT_EQ(error_of(json_required_array(o, "l", "")), "l: required field is missing");
  // A required field given as null is there, with the wrong type.
  auto n = object_of_text(R"({"name":null})");
  EXPECT_EQ(error_of(json_required_string(n, "name", "")), "name: expected a string, got null");
}

TEST(JsonReaders, WrongType) {
  auto o = object_of_text(
      R"({"s":1,"b":"true","i":"3","o":[],"l":{},"f":2.5,"e":1e3,"t":3.0,"m":{"x":1},"sl":["a",2]})");
  EXPECT_EQ(error_of(json_required_string(o, "s", "")), "s: expected a string, got number");
  EXPECT_EQ(error_of(json_required_bool(o, "b", "")), "b: expected a boolean, got string");
  EXPECT_EQ(error_of(json_required_int(o, "i", "")), "i: expected an integer, got string");
  EXPECT_EQ(error_of(json_required_object(o, "o", "")), "o: expected an object, got array");
  EXPECT_EQ(error_of(json_required_array(o, "l", "")), "l: expected an array, got object");
  EXPECT_EQ(error_of(json_required_int(o, "f", "")), "f: expected an integer, got number");
  EXPECT_EQ(error_of(json_required_int(o, "e", "")), "e: expected an integer, got number");
  EXPECT_EQ(error_of(json_required_int(o, "t", "")), "t: expected an integer, got number");
  EXPECT_EQ(error_of(json_optional_string_map(o, "m", "")), "m.x: expected a string, got number");
  EXPECT_EQ(error_of(json_optional_string_list(o, "sl", "")),
            "sl[1]: expected a string, got number");
  // An optional field's wrong type is still an error.
  EXPECT_EQ(error_of(json_optional_string(o, "s", "x")), "x.s: expected a string, got number");
  EXPECT_EQ(error_of(json_optional_bool(o, "b", "")), "b: expected a boolean, got string");
  EXPECT_EQ(error_of(json_optional_int(o, "i", "")), "i: expected an integer, got string");
  EXPECT_EQ(error_of(json_optional_object(o, "o", "")), "o: expected an object, got array");
  EXPECT_EQ(error_of(json_optional_array(o, "l", "")), "l: expected an array, got object");
}

TEST(JsonReaders, IntRangeAndOverflow) {
  auto o = object_of_text(
      R"({"big":9223372036854775807,"over":9223372036854775808,"neg":-9223372036854775808,"t":3601,"z":0})");
  auto big = json_required_int(o, "big", "");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big, std::numeric_limits<std::int64_t>::max());
  auto neg = json_required_int(o, "neg", "");
  ASSERT_TRUE(neg.ok());
  EXPECT_EQ(*neg, std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(error_of(json_required_int(o, "over", "")), "over: integer too large");
  EXPECT_EQ(error_of(json_required_int(o, "over", "", 0, 10)), "over: must be between 0 and 10");
  EXPECT_EQ(error_of(json_required_int(o, "t", "", 0, 3600)), "t: must be between 0 and 3600");
  EXPECT_EQ(error_of(json_optional_int(o, "z", "", 1, 10)), "z: must be between 1 and 10");
  auto in = json_optional_int(o, "z", "", 0, 0);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->value(), 0);
  // A value built from an unsigned type is a uint64 of any size.
  auto small = json_as_int(boost::json::value(std::uint64_t{5}), "u", 0, 5);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small, 5);
  EXPECT_EQ(error_of(json_as_int(boost::json::value(std::uint64_t{6}), "u", 0, 5)),
            "u: must be between 0 and 5");
  EXPECT_EQ(error_of(json_as_int(boost::json::value(-1), "a[0]", 0, 5)),
            "a[0]: must be between 0 and 5");
}

TEST(JsonReaders, AbsentAndNullAreNotGiven) {
  auto o = object_of_text(R"({"n":null,"s":"v","b":false,"i":7,"m":{"k":"v"},"l":["x"]})");
  for (const char* key : {"n", "absent"}) {
    EXPECT_FALSE(json_optional_string(o, key, "").value().has_value()) << key;
    EXPECT_FALSE(json_optional_bool(o, key, "").value().has_value()) << key;
    EXPECT_FALSE(json_optional_int(o, key, "").value().has_value()) << key;
    EXPECT_EQ(json_optional_object(o, key, "").value(), nullptr) << key;
    EXPECT_EQ(json_optional_array(o, key, "").value(), nullptr) << key;
    EXPECT_TRUE(json_optional_string_list(o, key, "").value().empty()) << key;
    EXPECT_TRUE(json_optional_string_map(o, key, "").value().empty()) << key;
    EXPECT_EQ(json_find(o, key), nullptr) << key;
  }
  EXPECT_EQ(json_optional_string(o, "s", "").value(), "v");
  EXPECT_EQ(json_optional_bool(o, "b", "").value(), false);
  EXPECT_EQ(json_optional_int(o, "i", "").value(), 7);
  EXPECT_EQ(json_optional_string_map(o, "m", "").value().at("k"), "v");
  EXPECT_EQ(json_optional_string_list(o, "l", "").value().at(0), "x");
  EXPECT_EQ(json_required_string(o, "s", "").value(), "v");
  EXPECT_EQ(json_required_bool(o, "b", "").value(), false);
  EXPECT_EQ(json_required_int(o, "i", "").value(), 7);
}

TEST(JsonReaders, StringOrEmptyNeverFails) {
  auto o = object_of_text(R"({"s":"v","n":null,"i":1})");
  EXPECT_EQ(json_string_or_empty(o, "s"), "v");
  EXPECT_EQ(json_string_or_empty(o, "n"), "");
  EXPECT_EQ(json_string_or_empty(o, "i"), "");
  EXPECT_EQ(json_string_or_empty(o, "absent"), "");
}

}  // namespace
}  // namespace abx
