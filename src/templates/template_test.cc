#include "abx/templates/template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <fstream>

#include "abx/testing/temp_dir.h"

namespace abx::templates {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

using abx::testing::TempDir;

void write_file(const fs::path& p, std::string_view text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

constexpr std::string_view kFull = R"(# a complete template
id: python
description: "Python 3 with the toolbox"
rootfs: rootfs
env:
  LANG: C.UTF-8
  DEBUG: 1
start: ["/usr/bin/python3", "-m", "http.server"]
server:
  command: "abx-server --module /opt/tools.so --port 49982"
  port: 49982
resources:
  cpu: 1.5
  memory: 1Gi
  pids: 256
  disk: 2G
network: host
timeout: 5m
capabilities: [shell, files, ports]
custom_commands:
  greet:
    description: Say hello
    command: "echo hello {name} x{times} {{braces}}"
    args:
      - {name: name, type: string, required: true, description: who}
      - {name: times, type: integer, default: 1}
  check:
    command: "test {flag} = true && echo {ratio}"
    args:
      - name: flag
        type: boolean
        default: false
      - name: ratio
        type: float
        default: 2
)";

Result<Template> parse(std::string_view text) { return parse_template(text, "/t/x/template.yaml"); }

// Expects a parse error whose message starts with the file and the given line.
void expect_error(std::string_view text, int line, std::string_view needle) {
  auto t = parse(text);
  ASSERT_FALSE(t.ok()) << "accepted:\n" << text;
  const std::string& m = t.error().message();
  std::string prefix = "/t/x/template.yaml:" + std::to_string(line) + ":";
  EXPECT_EQ(m.rfind(prefix, 0), 0u) << m;
  EXPECT_NE(m.find(needle), std::string::npos) << m;
}

TEST(Capability, NamesRoundTripAndAreExact) {
  for (Capability c : kAllCapabilities) EXPECT_EQ(parse_capability(capability_name(c)), c);
  EXPECT_EQ(capability_name(Capability::kPorts), "ports");
  EXPECT_FALSE(parse_capability("Shell").has_value());
  EXPECT_FALSE(parse_capability("").has_value());
  static_assert(parse_capability("files") == Capability::kFiles);  // usable at compile time
}

TEST(TemplateParse, FullTemplate) {
  auto t = parse(kFull);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->id, "python");
  EXPECT_EQ(t->description, "Python 3 with the toolbox");
  EXPECT_EQ(t->rootfs, "/t/x/rootfs");
  EXPECT_EQ(t->image, "");  // a rootfs directory replaces the default image
  EXPECT_EQ(t->env.at("LANG"), "C.UTF-8");
  EXPECT_EQ(t->env.at("DEBUG"), "1");
  EXPECT_EQ(t->start, (std::vector<std::string>{"/usr/bin/python3", "-m", "http.server"}));
  ASSERT_TRUE(t->server);
  EXPECT_EQ(t->server->argv,
            (std::vector<std::string>{"/bin/sh", "-c",
                                      "abx-server --module /opt/tools.so --port 49982"}));
  EXPECT_EQ(t->server->port, 49982);
  EXPECT_DOUBLE_EQ(t->resources.cpu, 1.5);
  EXPECT_EQ(t->resources.memory_bytes, 1LL << 30);
  EXPECT_EQ(t->resources.pids, 256);
  EXPECT_EQ(t->resources.disk_bytes, 2'000'000'000);
  EXPECT_EQ(t->network, NetworkMode::kHost);
  EXPECT_EQ(t->timeout_seconds, 300);
  EXPECT_TRUE(t->has(Capability::kPorts));
  EXPECT_FALSE(t->has(Capability::kCode));
  ASSERT_EQ(t->custom_commands.size(), 2u);
  EXPECT_EQ(t->custom_commands[0].name, "check");  // ordered by name
  const CustomCommand* g = t->find_command("greet");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->args.size(), 2u);
  EXPECT_TRUE(g->args[0].required);
  EXPECT_EQ(g->args[1].type, registry::ArgType::kInteger);
  EXPECT_EQ(g->args[1].default_value, json::value(1));
  const CustomCommand* c = t->find_command("check");
  EXPECT_TRUE(c->args[1].default_value.is_double());  // int default of a float arg widened
}

TEST(TemplateParse, Images) {
  auto reg = parse("id: py\nimage: python:3.12-slim\n");
  ASSERT_TRUE(reg.ok()) << reg.error().to_string();
  EXPECT_EQ(reg->image, "python:3.12-slim");  // abxd normalises it when it pulls
  EXPECT_EQ(reg->rootfs, "");
  auto rel = parse("id: a\nimage: oci-archive:img/app.tar\n");
  ASSERT_TRUE(rel.ok()) << rel.error().to_string();
  EXPECT_EQ(rel->image, "oci-archive:/t/x/img/app.tar");  // against the file's folder
  auto abs = parse("id: a\nimage: oci:/srv/layout:v1\n");
  ASSERT_TRUE(abs.ok());
  EXPECT_EQ(abs->image, "oci:/srv/layout:v1");
  auto host = parse("id: h\nrootfs: host\n");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->rootfs, "host");
  EXPECT_EQ(host->image, "");

  for (const char* bad :
       {"id: b\nimage: ''\n", "id: b\nimage: 'a b'\n", "id: b\nimage: 'oci-archive:'\n",
        "id: b\nimage: abx:Bad/Name\n", "id: b\nimage: busybox\nrootfs: host\n",
        "id: b\nrootfs: host\nimage: busybox\n"}) {
    auto t = parse(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.error().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(t.error().message().find("image"), std::string::npos) << t.error().message();
  }
}

TEST(TemplateParse, Defaults) {
  auto t = parse("id: tiny\n");
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  EXPECT_EQ(t->rootfs, "");
  EXPECT_EQ(t->image, "abx:base");  // never the host's files by default
  EXPECT_EQ(t->network, NetworkMode::kDefault);
  EXPECT_EQ(t->timeout_seconds, 300);
  EXPECT_FALSE(t->server);
  EXPECT_TRUE(t->start.empty());
  EXPECT_TRUE(t->has(Capability::kShell) && t->has(Capability::kFiles) &&
              t->has(Capability::kCode) && !t->has(Capability::kPorts));
  auto s = parse("id: s\nserver: {command: [srv]}\ntimeout: 90\ncapabilities: 'shell, code'\n");
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->server->port, kDefaultServerPort);
  EXPECT_EQ(s->timeout_seconds, 90);
  EXPECT_TRUE(s->has(Capability::kCode) && !s->has(Capability::kFiles));
  EXPECT_EQ(parse("id: s\ntimeout: 2h\n")->timeout_seconds, 7200);
  EXPECT_EQ(parse("id: s\ntimeout: 45s\n")->timeout_seconds, 45);
}

TEST(TemplateParse, ServerPythonRunsTheBundledServerOnTheModule) {
  auto t = parse("id: py\nserver: {python: /opt/tools/tools.py}\n");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_TRUE(t->server);
  EXPECT_EQ(t->server->argv, (std::vector<std::string>{"/opt/abx/bin/abx-server", "--python",
                                                       "/opt/tools/tools.py", "--port", "49982"}));
  auto p = parse("id: py\nserver:\n  python: /opt/t.py\n  port: 50000\n");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->server->argv.back(), "50000");
  EXPECT_EQ(p->server->port, 50000);
  expect_error("id: a\nserver: {python: tools.py}\n", 2, "absolute path");
  expect_error("id: a\nserver: {python: /t.py, command: x}\n", 2, "not both");
  expect_error("id: a\ninterpreter: {python: /t.py}\n", 2, "unknown key 'python'");
}

TEST(TemplateParse, StrictErrorsCarryFileLineColumn) {
  expect_error("id: a\nbogus: 1\n", 2, "unknown key 'bogus'");
  expect_error("id: a\nresources:\n  cpu: 1\n  gpu: 2\n", 4, "unknown key 'gpu'");
  expect_error("id: a\nserver:\n  command: x\n  prot: 1\n", 4, "unknown key 'prot'");
  expect_error("id: a\nid: b\n", 2, "duplicate key 'id'");
  expect_error("id: a\nenv:\n  A: 1\n  A: 2\n", 4, "duplicate key 'A'");
  expect_error("id: a\nserver: {command: x, port: \"49982\"}\n", 2, "server.port");
  expect_error("id: a\nserver: {command: x, port: 0}\n", 2, "server.port");
  expect_error("id: a\nserver: {command: x, port: 65536}\n", 2, "server.port");
  expect_error("id: a\nserver: {port: 1}\n", 2, "needs a 'command' or a 'python' module");
  expect_error("id: a\nresources: {memory: 12Q}\n", 2, "resources.memory");
  expect_error("id: a\nresources: {memory: 512}\n", 2, "at least 1Mi");
  expect_error("id: a\nresources: {cpu: -1}\n", 2, "resources.cpu");
  expect_error("id: a\nresources: {cpu: .nan}\n", 2, "resources.cpu");
  expect_error("id: a\nresources: {pids: 010}\n", 2, "resources.pids");
  expect_error("id: a\nnetwork: bridge\n", 2, "network");
  expect_error("id: a\ntimeout: 5x\n", 2, "timeout");
  expect_error("id: a\ntimeout: -5\n", 2, "timeout");
  expect_error("id: a\ncapabilities: [shell, gpu]\n", 2, "unknown capability 'gpu'");
  expect_error("id: a\ncapabilities: [shell, shell]\n", 2, "listed twice");
  expect_error("id: Bad_Id\n", 1, "id must match");
  expect_error("description: no id\n", 1, "missing required key 'id'");
  expect_error("- a\n- b\n", 1, "must be a mapping");
  expect_error("id: a\nenv: {1X: y}\n", 2, "environment variable name");
  expect_error("id: a\nstart: []\n", 2, "start");
  expect_error("id: a\nid2: [unclosed\n", 3, "flow");  // yaml-cpp's own syntax error, with position
}

TEST(TemplateParse, RefusesAnchorsAliasesTagsAndDocuments) {
  // Billion laughs: refused at the first anchor, long before any expansion.
  std::string laughs = "id: a\nx: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  for (int i = 0; i < 9; ++i) {
    laughs += "x" + std::to_string(i) + ": &b" + std::to_string(i) + " [*a,*a,*a,*a,*a,*a]\n";
  }
  expect_error(laughs, 2, "anchors");
  expect_error("id: a\ndescription: *ref\n", 2, "anchor");
  expect_error("id: a\ndescription: !!python/object:os.system x\n", 2, "tags are not allowed");
  expect_error("id: a\ndescription: !custom x\n", 2, "tags are not allowed");
  expect_error("id: a\nenv: !!map {A: b}\n", 2, "tags are not allowed");
  auto t = parse("id: a\n---\nid: b\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("more than one YAML document"), std::string::npos);
}

TEST(TemplateParse, DepthAndSizeCaps) {
  std::string deep = "id: a\nenv: ";
  for (int i = 0; i < 5000; ++i) deep += "[";
  auto t = parse(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("nesting deeper"), std::string::npos);

  std::string big = "id: a\ndescription: \"" + std::string(kMaxTemplateFileBytes, 'x') + "\"\n";
  t = parse(big);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), ErrorCode::kPayloadTooLarge);
  t = parse(std::string("id: a\0\n", 7));
  ASSERT_FALSE(t.ok());
}

TEST(TemplateParse, CustomCommandValidation) {
  auto cmd = [](std::string command, std::string args = "[]") {
    return "id: a\ncustom_commands:\n  c:\n    command: " + command + "\n    args: " + args + "\n";
  };
  expect_error(cmd("\"echo {nope}\""), 4, "{nope} is not a declared arg");
  expect_error(cmd("\"echo {x}\"", "[{name: x, type: list}]"), 5, "unknown arg type 'list'");
  expect_error(cmd("\"echo {x}\"", "[{name: x, type: integer, default: \"5\"}]"), 5,
               "default of 'x'");
  expect_error(cmd("\"echo {x}\"", "[{name: x, type: integer, default: 1.5}]"), 5,
               "default of 'x'");
  expect_error(cmd("\"echo {x}\"", "[{name: x, type: boolean, default: yes}]"), 5,
               "default of 'x'");
  expect_error(cmd("\"echo {x}\"", "[{name: x, type: string, required: true, default: a}]"), 5,
               "required arg cannot have a default");
  expect_error(cmd("\"echo {x}\"", "[{name: x, type: string}, {name: x, type: string}]"), 5,
               "declared twice");
  expect_error(cmd("\"echo {x}\"", "[{name: 'x y', type: string}]"), 5, "invalid arg name");
  expect_error(cmd("\"echo {x}\"", "[{name: x, type: string, extra: 1}]"), 5,
               "unknown key 'extra'");
  expect_error(cmd("\"echo {\""), 4, "unclosed '{'");
  expect_error(cmd("\"echo }\""), 4, "unmatched '}'");
  // Placeholders where single-quoting would not hold.
  const char* unsafe[] = {
      R"x("echo '{x}'")x",         R"x("echo \"{x}\"")x",        R"x("echo `{x}`")x",
      R"x("echo hi # {x}")x",      R"x("cat <<EOF\n{x}\nEOF")x", R"x("echo \\{x}")x",
      R"x("echo ${x}")x",          R"x("echo $(( {x} ))")x",     R"x("[[ {x} -eq 1 ]]")x",
      R"x("echo 'unterminated")x",
  };
  for (const char* u : unsafe) {
    auto t = parse(cmd(u, "[{name: x, type: string}]"));
    EXPECT_FALSE(t.ok()) << u;
  }
  const char* safe[] = {R"x("echo {x}")x",           R"x("echo --n={x}")x",
                        R"x("echo $({x})")x",        R"x("echo 'lit' {x} \"lit\"")x",
                        R"x("echo ${{HOME}} {x}")x", R"x("echo a#b {x}")x"};
  for (const char* s : safe) {
    auto t = parse(cmd(s, "[{name: x, type: string}]"));
    EXPECT_TRUE(t.ok()) << s << ": " << t.error().to_string();
  }
}

TEST(TemplateJson, ExposesCapabilitiesAndCustomCommands) {
  auto t = parse(kFull);
  ASSERT_TRUE(t.ok());
  json::object o = t->to_json();
  EXPECT_EQ(o.at("templateID"), "python");
  EXPECT_EQ(o.at("cpuCount"), 2);
  EXPECT_EQ(o.at("memoryMB"), 1024);
  EXPECT_EQ(o.at("capabilities"), (json::array{"shell", "files", "ports"}));
  const json::array& cmds = o.at("customCommands").as_array();
  ASSERT_EQ(cmds.size(), 2u);
  const json::object& greet = cmds[1].as_object();
  EXPECT_EQ(greet.at("name"), "greet");
  EXPECT_EQ(greet.at("command"), "echo hello {name} x{times} {{braces}}");
  EXPECT_EQ(greet.at("args").as_array()[1].as_object().at("type"), "integer");
  EXPECT_EQ(greet.at("args").as_array()[1].as_object().at("default"), 1);
  // Metadata is a string map (the E2B SDKs type it so) carrying the same information.
  const json::object& md = o.at("metadata").as_object();
  EXPECT_EQ(md.at("capabilities"), "shell,files,ports");
  auto round = json::parse(md.at("custom_commands").as_string());
  EXPECT_EQ(round, o.at("customCommands"));
  for (const auto& kv : md) EXPECT_TRUE(kv.value().is_string());
}

TEST(TemplateCatalog, BuiltinsOverridesAndErrors) {
  TempDir home;
  fs::path tdir = home.path() / "templates";
  write_file(tdir / "good" / "template.yaml", "id: good\ndescription: fine\n");
  write_file(tdir / "bad" / "template.yaml", "id: bad\nnetwork: bridge\n");
  write_file(tdir / "deep" / "er" / "template.yaml", "id: base\ndescription: overridden\n");
  write_file(tdir / "zdup" / "template.yaml", "id: good\n");
  write_file(tdir / "rel" / "template.yaml", "id: rel\nrootfs: fs\n");  // fs/ does not exist
  write_file(tdir / "reldir" / "template.yaml", "id: reldir\nrootfs: ./fs\n");
  fs::create_directories(tdir / "reldir" / "fs");
  write_file(tdir / "notes.yaml", "id: ignored\n");  // only files named template.yaml count

  BuiltinOptions b;
  b.demo_module = "/opt/abx/libabx_demo_commands.so";
  auto cat = TemplateCatalog::load(home.path(), b);
  ASSERT_NE(cat.get("good"), nullptr);
  EXPECT_EQ(cat.get("good")->source, (tdir / "good" / "template.yaml").string());
  ASSERT_NE(cat.get("base"), nullptr);
  EXPECT_EQ(cat.get("base")->description, "overridden");
  ASSERT_NE(cat.get("demo"), nullptr);
  ASSERT_TRUE(cat.get("demo")->server);
  EXPECT_EQ(cat.get("demo")->server->argv,
            (std::vector<std::string>{"abx-server", "--module", "/opt/abx/libabx_demo_commands.so",
                                      "--port", "49982"}));
  ASSERT_NE(cat.get("reldir"), nullptr);
  EXPECT_EQ(cat.get("reldir")->rootfs, (tdir / "reldir" / "fs").string());
  EXPECT_EQ(cat.get("bad"), nullptr);
  EXPECT_EQ(cat.get("rel"), nullptr);
  EXPECT_EQ(cat.get("ignored"), nullptr);

  ASSERT_EQ(cat.errors().size(), 3u);
  std::map<std::string, std::string> by_hint;
  for (const auto& e : cat.errors()) by_hint[e.id_hint] = e.message;
  EXPECT_EQ(by_hint["bad"].rfind((tdir / "bad" / "template.yaml").string() + ":2:", 0), 0u)
      << by_hint["bad"];
  EXPECT_NE(by_hint["good"].find("already defined"), std::string::npos);
  EXPECT_NE(by_hint["rel"].find("not a directory"), std::string::npos);

  std::vector<std::string> ids;
  for (const auto* t : cat.list()) ids.push_back(t->id);
  EXPECT_EQ(ids, (std::vector<std::string>{"base", "code-interpreter", "demo", "good", "reldir"}));
}

TEST(TemplateCatalog, CodeInterpreterBuiltinAnswersToItsAlias) {
  TempDir home;
  BuiltinOptions b;
  b.abx_interp = "/opt/abx/bin/abx-interp";
  auto cat = TemplateCatalog::load(home.path(), b);
  const Template* t = cat.get("code-interpreter");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(cat.get("code-interpreter-v1"), t);  // the @e2b/code-interpreter SDK's default
  EXPECT_EQ(t->image, "abx:code-interpreter");
  ASSERT_TRUE(t->interpreter);
  EXPECT_EQ(t->interpreter->port, 49999);
  EXPECT_EQ(t->interpreter->argv,
            (std::vector<std::string>{"/opt/abx/bin/abx-interp", "--port", "49999"}));
  EXPECT_FALSE(t->server);
  json::object j = t->to_json();
  EXPECT_EQ(j.at("aliases"), (json::array{"code-interpreter", "code-interpreter-v1"}));
  EXPECT_EQ(j.at("interpreter").at("port"), 49999);
  EXPECT_TRUE(cat.get("base")->to_json().at("interpreter").is_null());
  EXPECT_EQ(cat.get("code-interpreter-v2"), nullptr);
}

TEST(TemplateParse, InterpreterKey) {
  auto t = parse_template(
      "id: ci\ninterpreter:\n  command: [/opt/abx/bin/abx-interp, --port, \"8888\"]\n  port: "
      "8888\n",
      "t.yaml");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_TRUE(t->interpreter);
  EXPECT_EQ(t->interpreter->port, 8888);
  auto d = parse_template("id: ci\ninterpreter: {command: abx-interp}\n", "t.yaml");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->interpreter->port, 49999);  // E2B's port by default
  EXPECT_EQ(d->interpreter->argv, (std::vector<std::string>{"/bin/sh", "-c", "abx-interp"}));
  auto bad = parse_template("id: ci\ninterpreter: {port: 1}\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("interpreter needs a 'command'"), std::string::npos)
      << bad.error().message();
  auto extra = parse_template("id: ci\ninterpreter: {command: x, kernel: py}\n", "t.yaml");
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.error().message().find("kernel"), std::string::npos) << extra.error().message();
}

TEST(TemplateCatalog, EmptyHomeHasBuiltins) {
  TempDir home;
  auto cat = TemplateCatalog::load(home.path() / "missing", {});
  EXPECT_NE(cat.get("base"), nullptr);
  EXPECT_FALSE(cat.get("base")->server);
  EXPECT_NE(cat.get("demo"), nullptr);
  EXPECT_TRUE(cat.errors().empty());
}

TEST(TemplateFile, RefusesNonRegularAndOversizedFiles) {
  TempDir d;
  EXPECT_EQ(load_template_file(d.path() / "nope.yaml").error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(load_template_file(d.path()).ok());  // a directory
  fs::path big = d.path() / "big.yaml";
  write_file(big, "id: a\ndescription: " + std::string(kMaxTemplateFileBytes, 'x') + "\n");
  EXPECT_EQ(load_template_file(big).error().code(), ErrorCode::kPayloadTooLarge);
  fs::path fifo = d.path() / "fifo.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(load_template_file(fifo).ok());  // never blocks on a FIFO
}

}  // namespace
}  // namespace abx::templates
