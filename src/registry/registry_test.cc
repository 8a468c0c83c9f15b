#include "abx/registry/registry.h"

#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>

#include "abx/registry/register.h"

namespace abx::registry {
namespace {

namespace json = boost::json;

RegisteredCommand echo_cmd(std::string name) {
  RegisteredCommand c;
  c.name = std::move(name);
  c.fn = [](const json::object& kw) { return json::value(kw); };
  c.args = {CommandArg("x", "integer", true)};
  return c;
}

TEST(CommandArg, RejectsUnknownType) {
  EXPECT_THROW(CommandArg("x", "list"), RegistryError);
  EXPECT_THROW(CommandArg("x", "int"), RegistryError);
  EXPECT_NO_THROW(CommandArg("x", "integer"));
}

TEST(CommandArg, RejectsDefaultOfWrongType) {
  EXPECT_THROW(CommandArg("x", "integer", false, "5"), RegistryError);
  EXPECT_THROW(CommandArg("b", "boolean", false, 1), RegistryError);
  CommandArg f("f", "float", false, 2);
  EXPECT_TRUE(f.default_value.is_double());  // an integer default of a float arg is normalised
}

TEST(CommandArg, RejectsBadNames) {
  EXPECT_THROW(CommandArg("", "string"), RegistryError);
  EXPECT_THROW(CommandArg("1x", "string"), RegistryError);
  EXPECT_THROW(CommandArg("a-b", "string"), RegistryError);
}

TEST(CommandRegistry, RegisterGetList) {
  CommandRegistry reg;
  reg.register_command(echo_cmd("b"));
  reg.register_command(echo_cmd("a"));
  ASSERT_NE(reg.get("a"), nullptr);
  EXPECT_EQ(reg.get("a")->name, "a");
  EXPECT_EQ(reg.get("zzz"), nullptr);
  auto all = reg.list_all();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->name, "a");  // ordered by name
  EXPECT_EQ(all[1]->name, "b");
}

TEST(CommandRegistry, RefusesDuplicatesAndMalformedNames) {
  CommandRegistry reg;
  reg.register_command(echo_cmd("demo"));
  EXPECT_THROW(reg.register_command(echo_cmd("demo")), RegistryError);
  for (const char* bad : {"", "1abc", "../admin", "a b", "a/b", "caf\xc3\xa9"}) {
    EXPECT_THROW(reg.register_command(echo_cmd(bad)), RegistryError) << bad;
  }
  EXPECT_THROW(reg.register_command(echo_cmd(std::string(65, 'a'))), RegistryError);
  EXPECT_NO_THROW(reg.register_command(echo_cmd("with-dash_and_1")));
}

TEST(CommandRegistry, RefusesBadArgLists) {
  CommandRegistry reg;
  auto dup = echo_cmd("dup");
  dup.args.push_back(CommandArg("x", "string"));
  EXPECT_THROW(reg.register_command(dup), RegistryError);
  auto req_default = echo_cmd("rd");
  req_default.args[0].default_value = 3;
  EXPECT_THROW(reg.register_command(req_default), RegistryError);
  auto no_fn = echo_cmd("nofn");
  no_fn.fn = nullptr;
  EXPECT_THROW(reg.register_command(no_fn), RegistryError);
}

TEST(CommandRegistry, FreezeStopsRegistration) {
  CommandRegistry reg;
  reg.register_command(echo_cmd("a"));
  reg.freeze();
  EXPECT_TRUE(reg.frozen());
  EXPECT_THROW(reg.register_command(echo_cmd("b")), RegistryError);
  EXPECT_NE(reg.get("a"), nullptr);
  EXPECT_EQ(reg.get("b"), nullptr);
}

TEST(CommandRegistry, DefaultRegistryIsOneInstance) {
  EXPECT_EQ(&default_registry(), &default_registry());
}

TEST(CommandBuilder, InfersTypesFromCallable) {
  CommandRegistry reg;
  reg.command("add")
      .description("Add two integers.")
      .arg("a", "first addend")
      .arg("b", "second addend", 2)
      .bind([](int a, int b) { return a + b; });
  const RegisteredCommand* c = reg.get("add");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->description, "Add two integers.");
  ASSERT_EQ(c->args.size(), 2u);
  EXPECT_EQ(c->args[0].type, ArgType::kInteger);
  EXPECT_TRUE(c->args[0].required);
  EXPECT_EQ(c->args[0].description, "first addend");
  EXPECT_FALSE(c->args[1].required);
  EXPECT_EQ(c->args[1].default_value, json::value(2));
  EXPECT_EQ(c->args[1].maximum, INT32_MAX);
  EXPECT_EQ(c->fn(json::object{{"a", 40}, {"b", 2}}), json::value(42));
}

TEST(CommandBuilder, RunsOnThePoolUnlessMarkedInline) {
  CommandRegistry reg;
  reg.command("pooled").bind([] { return 1; });
  reg.command("quick").run_inline().bind([] { return 2; });
  EXPECT_EQ(reg.get("pooled")->execution, Execution::kWorkerPool);
  EXPECT_EQ(reg.get("quick")->execution, Execution::kInline);
  reg.set_execution("pooled", Execution::kInline);
  EXPECT_EQ(reg.get("pooled")->execution, Execution::kInline);
  EXPECT_THROW(reg.set_execution("absent", Execution::kInline), RegistryError);
  reg.freeze();
  EXPECT_THROW(reg.set_execution("quick", Execution::kWorkerPool), RegistryError);
}

TEST(CommandBuilder, RefusesMismatchedNames) {
  CommandRegistry reg;
  EXPECT_THROW(reg.command("f").arg("a").bind([](int, int) { return 0; }), RegistryError);
  EXPECT_THROW(reg.command("g").arg("a", "", 1).arg("b").bind([](int, int) { return 0; }),
               RegistryError);
  EXPECT_THROW(reg.command("h").arg("s", "", 5).bind([](std::string s) { return s; }),
               RegistryError);
}

TEST(Describe, MatchesWireSchema) {
  CommandRegistry reg;
  reg.command("greet")
      .description("Say hello.")
      .arg("name", "who")
      .arg("loud", "shout", false)
      .bind([](const std::string& n, bool loud) { return loud ? n + "!" : n; });
  json::object d = describe(*reg.get("greet"));
  EXPECT_EQ(
      json::serialize(d),
      R"({"name":"greet","description":"Say hello.","args":[)"
      R"({"name":"name","type":"string","required":true,"default":null,"description":"who"},)"
      R"({"name":"loud","type":"boolean","required":false,"default":false,"description":"shout"}]})");
}

}  // namespace
}  // namespace abx::registry
