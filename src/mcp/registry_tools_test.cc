// Registered commands as MCP tools: the JSON Schema of each argument type and range, defaults,
// required, annotations from builder hints and from ABX_HINTS, and the result shapes.
#include "abx/mcp/registry_tools.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdint>

#include "abx/registry/register.h"

ABX_REGISTER(std::int64_t, mcp_test_hinted, (std::int64_t a, unsigned short b = 7),
             "A hinted macro command.") {
  return a + b;
}
ABX_HINTS(mcp_test_hinted, .read_only = true, .idempotent = true);

ABX_HINTS(mcp_test_no_such_command, .destructive = true);

namespace abx::mcp {
namespace {

namespace json = boost::json;

TEST(RegistryTools, SchemaOfEveryArgType) {
  registry::CommandRegistry reg;
  reg.command("all")
      .description("Every type.")
      .arg("i", "an int")
      .arg("f", "a float")
      .arg("d", "a double")
      .arg("b", "a bool")
      .arg("s", "a string", "hi")
      .bind([](int, float, double, bool, std::string) { return 0; });
  Tool t = tool_from_command(*reg.get("all"));
  EXPECT_EQ(t.name, "all");
  EXPECT_EQ(t.description, "Every type.");
  const auto& s = t.input_schema;
  EXPECT_EQ(s.at("type"), "object");
  EXPECT_EQ(s.at("additionalProperties"), false);
  EXPECT_EQ(s.at("required"), (json::array{"i", "f", "d", "b"}));
  const auto& p = s.at("properties").as_object();
  EXPECT_EQ(p.at("i"), (json::object{{"type", "integer"},
                                     {"minimum", -2147483648LL},
                                     {"maximum", 2147483647LL},
                                     {"description", "an int"}}));
  EXPECT_EQ(p.at("f").at("type"), "number");
  EXPECT_GT(p.at("f").at("maximum").as_double(), 3.4e38);
  EXPECT_LT(p.at("f").at("minimum").as_double(), -3.4e38);
  EXPECT_EQ(p.at("d"), (json::object{{"type", "number"}, {"description", "a double"}}));
  EXPECT_EQ(p.at("b"), (json::object{{"type", "boolean"}, {"description", "a bool"}}));
  EXPECT_EQ(p.at("s"),
            (json::object{{"type", "string"}, {"description", "a string"}, {"default", "hi"}}));
  EXPECT_TRUE(t.annotations.empty());
  EXPECT_EQ(json::value(*t.output_schema), json::value(command_output_schema()));
  EXPECT_FALSE(tool_json(t).contains("annotations"));
}

TEST(RegistryTools, Int64BoundsAreLeftOut) {
  registry::CommandRegistry reg;
  reg.command("wide").arg("a").arg("u").bind([](std::int64_t, std::uint64_t) { return 0; });
  Tool t = tool_from_command(*reg.get("wide"));
  const auto& p = t.input_schema.at("properties");
  EXPECT_EQ(p.at("a"), (json::object{{"type", "integer"}}));
  EXPECT_EQ(p.at("u"), (json::object{{"type", "integer"}, {"minimum", 0}}));
}

TEST(RegistryTools, NoArgsStillAClosedObject) {
  registry::CommandRegistry reg;
  reg.command("none").bind([] {});
  auto s = tool_from_command(*reg.get("none")).input_schema;
  EXPECT_EQ(s, (json::object{{"type", "object"},
                             {"properties", json::object{}},
                             {"required", json::array{}},
                             {"additionalProperties", false}}));
}

TEST(RegistryTools, BuilderHintsBecomeAnnotations) {
  registry::CommandRegistry reg;
  reg.command("rm").hints({.read_only = false, .destructive = true}).bind([] {});
  Tool t = tool_from_command(*reg.get("rm"));
  EXPECT_EQ(t.annotations, (json::object{{"readOnlyHint", false}, {"destructiveHint", true}}));
  EXPECT_EQ(tool_json(t).at("annotations"), json::value(t.annotations));
}

TEST(RegistryTools, MacroHints) {
  auto& reg = registry::default_registry();
  const auto* cmd = reg.get("mcp_test_hinted");
  ASSERT_NE(cmd, nullptr);
  Tool t = tool_from_command(*cmd);
  EXPECT_EQ(t.annotations, (json::object{{"readOnlyHint", true}, {"idempotentHint", true}}));
  EXPECT_EQ(
      t.input_schema.at("properties").at("b"),
      (json::object{{"type", "integer"}, {"minimum", 0}, {"maximum", 65535}, {"default", 7}}));
}

TEST(RegistryTools, HintsForAnUnknownCommandAreARegistrationError) {
  bool found = false;
  for (const auto& e : registry::default_registry().errors()) {
    if (e.find("mcp_test_no_such_command") != std::string::npos) found = true;
  }
  EXPECT_TRUE(found);
}

TEST(RegistryTools, SetHintsRefusesWhenFrozenOrUnknown) {
  registry::CommandRegistry reg;
  reg.command("a").bind([] {});
  EXPECT_THROW(reg.set_hints("b", {}), registry::RegistryError);
  reg.set_hints("a", {.idempotent = true});
  EXPECT_EQ(reg.get("a")->hints.idempotent, true);
  reg.freeze();
  EXPECT_THROW(reg.set_hints("a", {}), registry::RegistryError);
}

TEST(RegistryTools, ResultsAreAlwaysWrapped) {
  ToolResult r = command_result(json::value("42: world"));
  EXPECT_EQ(*r.structured, (json::object{{"result", "42: world"}}));
  EXPECT_EQ(r.text, R"({"result":"42: world"})");
  EXPECT_FALSE(r.is_error);
  r = command_result(json::object{{"a", 1}});
  EXPECT_EQ(*r.structured, (json::object{{"result", json::object{{"a", 1}}}}));
  r = command_result(nullptr);
  EXPECT_EQ(*r.structured, (json::object{{"result", nullptr}}));
  auto j = tool_result_json(r);
  EXPECT_EQ(j.at("isError"), false);
  EXPECT_EQ(j.at("content").at(0).at("text"), R"({"result":null})");
}

TEST(RegistryTools, FailuresAreErrorResults) {
  ToolResult r =
      command_failure(Error(ErrorCode::kInternal, "division by zero", "std::domain_error"));
  EXPECT_TRUE(r.is_error);
  EXPECT_EQ(r.text, "std::domain_error: division by zero");
  EXPECT_FALSE(r.structured);
  EXPECT_FALSE(tool_result_json(r).contains("structuredContent"));
}

}  // namespace
}  // namespace abx::mcp
