// ABX_REGISTER: the schema is read from real functions, and calls reach them.
#include "abx/registry/register.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <stdexcept>

#include "abx/registry/coerce.h"

ABX_REGISTER(std::string, reg_demo, (int x, std::string y = "hello"), "Run a demo command.") {
  return std::to_string(x) + ": " + y;
}

ABX_REGISTER(double, reg_types,
             (long a, std::int64_t b, float c, double d = -1.5e2, bool e = true,
              const std::string& f = "q\"uo\\te\n", short g = -0x10, unsigned h = 7u),
             "Every parameter type.") {
  return static_cast<double>(a + b) + c + d + (e ? 1 : 0) + static_cast<double>(f.size()) + g + h;
}

ABX_REGISTER(void, reg_void, (), "Returns nothing.") {}

ABX_REGISTER((std::map<std::string, std::vector<int>>), reg_map, (int n = 3), "A map result.") {
  return {{"n", std::vector<int>(static_cast<std::size_t>(n), 1)}};
}

ABX_REGISTER(int, reg_throws, (int x), "Throws.") {
  if (x > 0) throw std::runtime_error("positive");
  return x;
}

constexpr int kNotALiteral = 5;
ABX_REGISTER(int, reg_non_literal, (int v = kNotALiteral), "Non-literal default.") { return v; }

ABX_REGISTER(int, reg_inline, (int x), "Quick.") { return x; }
ABX_INLINE(reg_inline);
ABX_INLINE(reg_not_registered);

namespace abx::registry {
namespace {

namespace json = boost::json;

const RegisteredCommand& cmd(const char* name) {
  const RegisteredCommand* c = default_registry().get(name);
  if (c == nullptr) throw std::runtime_error(std::string("not registered: ") + name);
  return *c;
}

TEST(AbxRegister, DemoSchema) {
  const auto& c = cmd("reg_demo");
  EXPECT_EQ(c.description, "Run a demo command.");
  ASSERT_EQ(c.args.size(), 2u);
  EXPECT_EQ(c.args[0].name, "x");
  EXPECT_EQ(c.args[0].type, ArgType::kInteger);
  EXPECT_TRUE(c.args[0].required);
  EXPECT_TRUE(c.args[0].default_value.is_null());
  EXPECT_EQ(c.args[1].name, "y");
  EXPECT_EQ(c.args[1].type, ArgType::kString);
  EXPECT_FALSE(c.args[1].required);
  EXPECT_EQ(c.args[1].default_value, json::value("hello"));
}

TEST(AbxRegister, InlineMarksTheCommandAndRecordsMistakes) {
  EXPECT_EQ(cmd("reg_inline").execution, Execution::kInline);
  EXPECT_EQ(cmd("reg_demo").execution, Execution::kWorkerPool);
  bool recorded = false;
  for (const auto& e : default_registry().errors()) {
    if (e.find("ABX_INLINE(reg_not_registered)") != std::string::npos) recorded = true;
  }
  EXPECT_TRUE(recorded);
}

TEST(AbxRegister, DemoCallUsesDefaultsAndValues) {
  const auto& c = cmd("reg_demo");
  auto kw = parse_kwargs(c, R"({"x":42})");
  ASSERT_TRUE(kw.ok());
  EXPECT_EQ(c.fn(*kw), json::value("42: hello"));
  kw = parse_kwargs(c, R"({"x":42,"y":"world"})");
  ASSERT_TRUE(kw.ok());
  EXPECT_EQ(c.fn(*kw), json::value("42: world"));
  // The function itself still has its defaults for ordinary C++ callers.
  EXPECT_EQ(reg_demo(1), "1: hello");
}

TEST(AbxRegister, EveryParameterType) {
  const auto& c = cmd("reg_types");
  ASSERT_EQ(c.args.size(), 8u);
  const char* types[] = {"integer", "integer", "float",   "float",
                         "boolean", "string",  "integer", "integer"};
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(arg_type_name(c.args[i].type), types[i]) << i;
  EXPECT_EQ(c.args[0].maximum, std::numeric_limits<long>::max());
  EXPECT_EQ(c.args[6].minimum, -32768);
  EXPECT_EQ(c.args[6].maximum, 32767);
  EXPECT_EQ(c.args[7].minimum, 0);
  EXPECT_EQ(c.args[7].maximum, 4294967295LL);
  EXPECT_EQ(c.args[3].default_value, json::value(-150.0));
  EXPECT_EQ(c.args[4].default_value, json::value(true));
  EXPECT_EQ(c.args[5].default_value, json::value("q\"uo\\te\n"));
  EXPECT_EQ(c.args[6].default_value, json::value(-16));
  EXPECT_EQ(c.args[7].default_value, json::value(7));
  auto kw = parse_kwargs(c, R"({"a":1,"b":2,"c":0.5})");
  ASSERT_TRUE(kw.ok()) << kw.error().message();
  // 1 + 2 + 0.5 - 150 + 1 (e) + 8 (size of f) - 16 + 7
  EXPECT_DOUBLE_EQ(c.fn(*kw).as_double(), -146.5);
  // A short parameter refuses values outside its range, at coercion time.
  EXPECT_FALSE(parse_kwargs(c, R"({"a":1,"b":2,"c":0.5,"g":40000})").ok());
  EXPECT_FALSE(parse_kwargs(c, R"({"a":1,"b":2,"c":0.5,"h":-1})").ok());
}

TEST(AbxRegister, VoidAndContainers) {
  EXPECT_TRUE(cmd("reg_void").fn({}).is_null());
  EXPECT_TRUE(cmd("reg_void").args.empty());
  auto kw = parse_kwargs(cmd("reg_map"), "{}");
  ASSERT_TRUE(kw.ok());
  EXPECT_EQ(json::serialize(cmd("reg_map").fn(*kw)), R"({"n":[1,1,1]})");
}

TEST(AbxRegister, ExceptionsPropagateToTheCaller) {
  EXPECT_THROW(cmd("reg_throws").fn(json::object{{"x", 1}}), std::runtime_error);
}

TEST(AbxRegister, NonLiteralDefaultIsReportedNotGuessed) {
  EXPECT_EQ(default_registry().get("reg_non_literal"), nullptr);
  auto errors = default_registry().errors();
  ASSERT_EQ(errors.size(), 2u);  // this one and ABX_INLINE(reg_not_registered)
  EXPECT_NE(errors[0].find("reg_non_literal"), std::string::npos);
  EXPECT_NE(errors[0].find("kNotALiteral"), std::string::npos);
  EXPECT_EQ(reg_non_literal(), 5);
}

TEST(ParamList, SplitsNamesAndDefaults) {
  auto r = detail::parse_param_list(
      R"((int x, const std::string& s = "a, b = c", std::map<int, int> m, double d = 1'000.5))");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].name, "x");
  EXPECT_EQ((*r)[1].name, "s");
  EXPECT_EQ((*r)[1].default_text, R"("a, b = c")");
  EXPECT_EQ((*r)[2].name, "m");
  EXPECT_EQ((*r)[3].default_text, "1'000.5");
  EXPECT_TRUE(detail::parse_param_list("()")->empty());
  EXPECT_TRUE(detail::parse_param_list("(void)")->empty());
  EXPECT_FALSE(detail::parse_param_list("(int)").ok());  // unnamed parameter
}

TEST(DefaultLiteral, Rows) {
  using detail::parse_default_literal;
  EXPECT_EQ(*parse_default_literal("0x1F", ArgType::kInteger), json::value(31));
  EXPECT_EQ(*parse_default_literal("-0b101", ArgType::kInteger), json::value(-5));
  EXPECT_EQ(*parse_default_literal("017", ArgType::kInteger), json::value(15));
  EXPECT_EQ(*parse_default_literal("1'000'000LL", ArgType::kInteger), json::value(1000000));
  EXPECT_EQ(*parse_default_literal("-9223372036854775808", ArgType::kInteger),
            json::value(INT64_MIN));
  EXPECT_FALSE(parse_default_literal("9223372036854775808", ArgType::kInteger).ok());
  EXPECT_FALSE(parse_default_literal("kFoo", ArgType::kInteger).ok());
  EXPECT_EQ(*parse_default_literal("2.5f", ArgType::kFloat), json::value(2.5));
  EXPECT_EQ(*parse_default_literal("3", ArgType::kFloat), json::value(3.0));
  EXPECT_FALSE(parse_default_literal("1e999", ArgType::kFloat).ok());
  EXPECT_EQ(*parse_default_literal(R"("a" "b")", ArgType::kString), json::value("ab"));
  EXPECT_EQ(*parse_default_literal(R"(std::string("x\ty"))", ArgType::kString),
            json::value("x\ty"));
  EXPECT_EQ(*parse_default_literal("{}", ArgType::kString), json::value(""));
  EXPECT_FALSE(parse_default_literal("some_var", ArgType::kString).ok());
  EXPECT_FALSE(parse_default_literal("1", ArgType::kBoolean).ok());
}

}  // namespace
}  // namespace abx::registry
