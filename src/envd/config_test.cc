#include "abx/envd/config.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <string>

#include "abx/envd/envd.h"

namespace abx::envd {
namespace {

namespace json = boost::json;

EnvdConfig full() {
  EnvdConfig c;
  c.host = "127.0.0.1";
  c.port = 49983;
  c.token_file = "/run/abx/token";
  c.start_cmd = "sleep 'infinity'";
  c.server_argv = {"/opt/abx/bin/abx-server", "--python-fd", "3"};
  c.server_companion_argv = {"python3", "/opt/abx/python/abx/server/run.py", "--fd", "3", "m"};
  c.interpreter_argv = {"/opt/abx/bin/abx-interp"};
  c.default_user = "app";
  c.default_workdir = "/srv/app";
  c.max_upload_bytes = 1ULL << 40;
  c.log_level = "debug";
  return c;
}

// The message of the error `text` gives.
std::string error_of(const std::string& text) {
  auto c = parse_envd_config(text);
  EXPECT_FALSE(c.ok()) << text;
  if (c.ok()) return {};
  EXPECT_EQ(c.error().code(), ErrorCode::kInvalidArgument);
  return c.error().message();
}

// `full()`'s JSON with one field replaced (`value` empty: removed).
std::string with(const std::string& field, const std::string& value) {
  json::object o = to_json(full());
  if (value.empty()) {
    o.erase(field);
  } else {
    o[field] = json::parse(value);
  }
  return json::serialize(o);
}

TEST(EnvdConfigTest, RoundTripsEveryField) {
  const EnvdConfig c = full();
  auto back = parse_envd_config(json::serialize(to_json(c)));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, c);
  auto defaults = parse_envd_config(json::serialize(to_json(EnvdConfig{})));
  ASSERT_TRUE(defaults.ok()) << defaults.error().message();
  EXPECT_EQ(*defaults, EnvdConfig{});
}

TEST(EnvdConfigTest, DefaultsAreEnvdOptions) {
  const EnvdConfig c;
  const EnvdOptions o;
  EXPECT_EQ(c.host, o.host);
  EXPECT_EQ(c.port, o.port);
  EXPECT_EQ(c.default_user, o.default_user);
  EXPECT_EQ(c.max_upload_bytes, o.max_upload_bytes);
}

TEST(EnvdConfigTest, AMissingFieldIsNamed) {
  for (const char* f :
       {"version", "host", "port", "tokenFile", "startCmd", "serverCmd", "serverArgv",
        "serverCompanionArgv", "interpreterArgv", "defaultUser", "maxUploadBytes", "logLevel"}) {
    EXPECT_EQ(error_of(with(f, "")), std::string("envd config: missing field ") + f);
  }
}

TEST(EnvdConfigTest, AMistypedFieldIsNamed) {
  EXPECT_EQ(error_of(with("host", "1")), "envd config: host: expected a string, got number");
  EXPECT_EQ(error_of(with("port", "\"49983\"")),
            "envd config: port: expected an integer, got string");
  EXPECT_EQ(error_of(with("port", "65536")), "envd config: port: must be between 0 and 65535");
  EXPECT_EQ(error_of(with("port", "-1")), "envd config: port: must be between 0 and 65535");
  EXPECT_EQ(error_of(with("port", "1.5")), "envd config: port: expected an integer, got number");
  EXPECT_EQ(error_of(with("serverArgv", "\"abx-server\"")),
            "envd config: serverArgv: expected an array, got string");
  EXPECT_EQ(error_of(with("serverArgv", "[\"abx-server\", 3]")),
            "envd config: serverArgv[1]: expected a string, got number");
  EXPECT_EQ(error_of(with("maxUploadBytes", "true")),
            "envd config: maxUploadBytes: expected an integer, got boolean");
  EXPECT_EQ(error_of(with("tokenFile", "null")),
            "envd config: tokenFile: expected a string, got null");
}

TEST(EnvdConfigTest, RefusesUnknownFieldsOtherVersionsAndNonObjects) {
  EXPECT_EQ(error_of(with("serverArgs", "[]")), "envd config: unknown field serverArgs");
  EXPECT_EQ(error_of(with("version", "2")),
            "envd config: version 2 is not the one this abx-envd reads (1)");
  EXPECT_EQ(error_of("[]"), "envd config: not a JSON object");
  EXPECT_NE(error_of("{\"version\": 1,").find("envd config: "), std::string::npos);
  // Strict JSON: a key given twice is refused, not "the last one wins".
  EXPECT_NE(error_of(R"({"version": 1, "version": 1})").find("envd config: "), std::string::npos);
}

TEST(EnvdConfigTest, CrossFieldRules) {
  EXPECT_NE(error_of(with("serverCmd", "\"abx-server\"")).find("not both"), std::string::npos);
  EXPECT_NE(error_of(with("serverArgv", "[]")).find("serverCompanionArgv"), std::string::npos);
  EXPECT_EQ(error_of(with("interpreterArgv", "[\"\"]")),
            "envd config: interpreterArgv[0] must be a non-empty program name");
  EnvdConfig c;
  c.server_cmd = "abx-server --port 8080";
  EXPECT_TRUE(check_envd_config(c).ok());
}

TEST(EnvdConfigTest, ArgvFlagText) {
  auto a = parse_argv_json(R"(["/bin/x", "-v"])", "--server-argv");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<std::string>{"/bin/x", "-v"}));
  for (const char* bad : {"", "[]", "[\"\"]", "[1]", "\"x\"", "[\"x\""}) {
    auto r = parse_argv_json(bad, "--server-argv");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message().rfind("--server-argv must be a non-empty JSON array", 0), 0u)
        << r.error().message();
  }
}

}  // namespace
}  // namespace abx::envd
