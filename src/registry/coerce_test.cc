// The coercion table of coerce.h, row by row (and the §2.2 kwargs rows of the bad-input catalogue).
#include "abx/registry/coerce.h"

#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>
#include <limits>
#include <string>

namespace abx::registry {
namespace {

namespace json = boost::json;

struct Row {
  const char* name;
  ArgType type;
  const char* input;  // JSON text of the value
  bool accept;
  const char* normalised = nullptr;  // JSON text of the accepted value, if it changes
};

class CoerceTable : public ::testing::TestWithParam<Row> {};

TEST_P(CoerceTable, Row) {
  const Row& row = GetParam();
  CommandArg arg("v", row.type);
  auto parsed = parse_json_strict(row.input);
  ASSERT_TRUE(parsed.ok()) << row.input;
  auto r = coerce_value(arg, *parsed);
  EXPECT_EQ(r.ok(), row.accept) << row.name << ": " << row.input;
  if (r.ok()) {
    std::string want = row.normalised ? row.normalised : row.input;
    EXPECT_EQ(json::serialize(*r), want);
  } else {
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find("'v'"), std::string::npos) << r.error().message();
  }
}

constexpr ArgType I = ArgType::kInteger, F = ArgType::kFloat, B = ArgType::kBoolean,
                  S = ArgType::kString;

INSTANTIATE_TEST_SUITE_P(
    Table, CoerceTable,
    ::testing::Values(
        Row{"int_ok", I, "42", true}, Row{"int_negative", I, "-7", true},
        Row{"int_minus_zero", I, "-0", true, "0"}, Row{"int_max", I, "9223372036854775807", true},
        Row{"int_min", I, "-9223372036854775808", true},
        Row{"int_beyond_2_53_exact", I, "9007199254740993", true},
        Row{"int_over_int64", I, "9223372036854775808", false},
        Row{"int_from_float", I, "1.5", false}, Row{"int_from_integral_float", I, "1.0", false},
        Row{"int_from_exp", I, "1e3", false}, Row{"int_from_string", I, "\"5\"", false},
        Row{"int_from_bool", I, "true", false}, Row{"int_from_null", I, "null", false},
        Row{"int_from_array", I, "[1]", false}, Row{"float_ok", F, "1.5", true, "1.5E0"},
        Row{"float_from_int", F, "2", true, "2E0"}, Row{"float_exp", F, "1e300", true, "1E300"},
        Row{"float_from_string", F, "\"1.0\"", false}, Row{"float_from_null", F, "null", false},
        Row{"float_from_bool", F, "false", false}, Row{"bool_true", B, "true", true},
        Row{"bool_false", B, "false", true}, Row{"bool_from_string", B, "\"true\"", false},
        Row{"bool_from_one", B, "1", false}, Row{"bool_from_zero", B, "0", false},
        Row{"bool_from_null", B, "null", false}, Row{"string_ok", S, "\"hi\"", true},
        Row{"string_empty", S, "\"\"", true}, Row{"string_from_int", S, "5", false},
        Row{"string_from_null", S, "null", false}, Row{"string_from_object", S, "{}", false}),
    [](const auto& tc) { return std::string(tc.param.name); });

TEST(Coerce, IntegerRangeOfTheCxxType) {
  CommandArg a("v", ArgType::kInteger);
  a.minimum = std::numeric_limits<int>::min();
  a.maximum = std::numeric_limits<int>::max();
  EXPECT_TRUE(coerce_value(a, json::value(2147483647)).ok());
  auto r = coerce_value(a, json::value(2147483648LL));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("out of range"), std::string::npos);
  EXPECT_FALSE(coerce_value(a, json::value(-2147483649LL)).ok());
}

TEST(Coerce, FloatMagnitudeOfTheCxxType) {
  CommandArg a("v", ArgType::kFloat);
  a.max_magnitude = std::numeric_limits<float>::max();
  EXPECT_TRUE(coerce_value(a, json::value(1e38)).ok());
  EXPECT_FALSE(coerce_value(a, json::value(1e39)).ok());
}

RegisteredCommand demo() {
  RegisteredCommand c;
  c.name = "demo";
  c.fn = [](const json::object&) { return json::value(); };
  c.args = {CommandArg("x", "integer", true), CommandArg("y", "string", false, "hello"),
            CommandArg("z", "float")};
  return c;
}

TEST(CoerceKwargs, AppliesDefaultsOnlyToMissingOptionals) {
  auto r = coerce_kwargs(demo(), json::object{{"x", 1}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(json::serialize(*r), R"({"x":1,"y":"hello"})");  // z has no default: absent
  auto explicit_null = coerce_kwargs(demo(), json::object{{"x", 1}, {"y", nullptr}});
  ASSERT_FALSE(explicit_null.ok());  // null is not a string; defaults are not for explicit nulls
}

TEST(CoerceKwargs, MissingRequiredIsNamed) {
  auto r = coerce_kwargs(demo(), json::object{{"y", "a"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "missing required argument 'x' for command 'demo'");
}

TEST(CoerceKwargs, UnknownArgsAreNamed) {
  auto r = coerce_kwargs(demo(), json::object{{"x", 1}, {"w", 2}, {"q", 3}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("'w'"), std::string::npos);
  EXPECT_NE(r.error().message().find("'q'"), std::string::npos);
  EXPECT_NE(r.error().message().find("it takes: x, y, z"), std::string::npos);
}

// The message names eight of them, each cut at 64 characters, and counts the rest: its size
// does not grow with the body's (a body of 80,000 names was echoed back whole).
TEST(CoerceKwargs, ManyUnknownArgsGiveABoundedMessage) {
  json::object many{{"x", 1}};
  for (int i = 0; i < 1000; ++i) many["u" + std::to_string(i)] = i;
  many[std::string(500, 'L')] = 0;
  auto r = coerce_kwargs(demo(), many);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.error().message();
  EXPECT_EQ(m.rfind("unknown arguments '", 0), 0u) << m;
  EXPECT_NE(m.find(" and 993 more for command 'demo'"), std::string::npos) << m;
  EXPECT_LT(m.size(), 1000u) << m;
  auto one = coerce_kwargs(demo(), json::object{{"x", 1}, {std::string(500, 'L'), 0}});
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.error().message().find("unknown argument '" + std::string(64, 'L') + "...'"),
            std::string::npos)
      << one.error().message();
  // A name with a comma is still one name.
  auto comma = coerce_kwargs(demo(), json::object{{"x", 1}, {"a,b", 0}});
  ASSERT_FALSE(comma.ok());
  EXPECT_EQ(comma.error().message().rfind("unknown argument 'a,b'", 0), 0u)
      << comma.error().message();
}

TEST(CoerceKwargs, BodyMustBeAnObject) {
  for (const char* body : {"[]", "1", "\"x\"", "null", "true"}) {
    auto r = parse_kwargs(demo(), body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.error().message().find("JSON object"), std::string::npos);
  }
}

TEST(ParseKwargs, RejectsMalformedBeforeCoercion) {
  // Duplicate keys would otherwise be a parser differential on a valid arg.
  auto r = parse_kwargs(demo(), R"({"x":1,"x":2})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("duplicate"), std::string::npos);
  EXPECT_FALSE(parse_kwargs(demo(), std::string(5000, '[')).ok());
  EXPECT_FALSE(parse_kwargs(demo(), R"({"x":NaN})").ok());
}

TEST(ParseKwargs, EmptyBodyIsNoArguments) {
  auto r = parse_kwargs(demo(), "");
  ASSERT_FALSE(r.ok());  // x is required
  EXPECT_NE(r.error().message().find("'x'"), std::string::npos);
}

}  // namespace
}  // namespace abx::registry
