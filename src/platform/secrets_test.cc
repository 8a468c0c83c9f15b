// Secrets (secrets.h): the bodies' checks, the JSON (never a value) and the sealing.
#include "secrets.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "abx/base/json.h"
#include "abx/testing/temp_dir.h"

namespace abx::platform {
namespace {

namespace json = boost::json;

json::object obj(std::string_view text) { return parse_json_strict(text).value().as_object(); }

std::string error_of(std::string_view body, bool create) {
  auto r = parse_secret_body(obj(body), create);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return {};
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << body;
  return r.error().message();
}

TEST(SecretBodies, CreateReadsNameValueMetadataAndLowerCasesTheName) {
  auto s = parse_secret_body(obj(R"({"name":"OpenAI-Key","value":"sk-1\tx","metadata":{"a":"b"}})"),
                             true);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->name, "openai-key");
  EXPECT_EQ(s->value, "sk-1\tx");
  EXPECT_EQ(s->metadata->at("a"), "b");
  auto bare = parse_secret_body(obj(R"({"name":"a","value":""})"), true);
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->metadata.has_value());
  // An update takes no name; metadata null is "not given".
  auto u = parse_secret_body(obj(R"({"value":"v2","metadata":null})"), false);
  ASSERT_TRUE(u.ok()) << u.error().message();
}

TEST(SecretBodies, BadNamesAreRefusedNamingTheField) {
  for (const char* bad :
       {R"({"name":"","value":"v"})", R"({"name":"sec_x","value":"v"})",
        R"({"name":"-x","value":"v"})", R"({"name":"a b","value":"v"})",
        R"({"name":"a}","value":"v"})", R"({"name":"a{","value":"v"})",
        R"({"name":"ünï","value":"v"})", R"({"name":7,"value":"v"})", R"({"value":"v"})"})
    EXPECT_NE(error_of(bad, true).find("name"), std::string::npos) << bad;
  EXPECT_NE(
      error_of(R"({"name":")" + std::string(129, 'a') + R"(","value":"v"})", true).find("name"),
      std::string::npos);
  EXPECT_TRUE(
      parse_secret_body(obj(R"({"name":")" + std::string(128, 'a') + R"(","value":"v"})"), true)
          .ok());
}

TEST(SecretBodies, ValuesAreBoundedAndNeverEchoed) {
  const std::string big(kMaxSecretValueBytes + 1, 'x');
  EXPECT_NE(error_of(R"({"name":"a","value":")" + big + R"("})", true).find("value: at most"),
            std::string::npos);
  EXPECT_TRUE(
      parse_secret_body(
          obj(R"({"name":"a","value":")" + std::string(kMaxSecretValueBytes, 'x') + R"("})"), true)
          .ok());
  for (const char* bad : {R"({"name":"a","value":"line1\nline2-sk-canary"})",
                          R"({"name":"a","value":"x\r\ny-sk-canary"})",
                          R"({"name":"a","value":"nul\u0000-sk-canary"})"}) {
    const std::string e = error_of(bad, true);
    EXPECT_NE(e.find("value"), std::string::npos) << bad;
    EXPECT_EQ(e.find("canary"), std::string::npos) << e;
  }
  EXPECT_NE(error_of(R"({"name":"a","value":5})", true).find("value"), std::string::npos);
  EXPECT_NE(error_of(R"({"name":"a"})", true).find("value is required"), std::string::npos);
  EXPECT_NE(error_of(R"({"metadata":{}})", false).find("value is required"), std::string::npos);
}

TEST(SecretBodies, MetadataHasE2bsLimitsAndUnknownFieldsAreRefused) {
  std::string many = R"({"name":"a","value":"v","metadata":{)";
  for (int i = 0; i < 33; ++i)
    many += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":\"v\"";
  many += "}}";
  EXPECT_NE(error_of(many, true).find("metadata"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"name":"a","value":"v","metadata":{")" + std::string(129, 'k') + R"(":"v"}})",
               true)
          .find("metadata"),
      std::string::npos);
  EXPECT_NE(
      error_of(R"({"name":"a","value":"v","metadata":{"k":")" + std::string(1025, 'v') + R"("}})",
               true)
          .find(R"(metadata.k)"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"name":"a","value":"v","metadata":{"k":1}})", true).find("metadata"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name":"a","value":"v","description":"d"})", true).find("description"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"name":"a","value":"v"})", false).find("name is not a field"),
            std::string::npos);
}

TEST(SecretJson, IsE2bsSecretWithoutTheValue) {
  store::SecretRecord r;
  r.id = "sec_" + std::string(24, 'a');
  r.team_id = "t";
  r.name = "openai";
  r.metadata = {{"env", "prod"}};
  r.version = 3;
  r.sealed = "v1.SEALED";
  r.created_at_ms = 1000;
  r.updated_at_ms = 2000;
  const json::object o = secret_json(r);
  EXPECT_EQ(o.at("secretID").as_string(), r.id);
  EXPECT_EQ(o.at("name").as_string(), "openai");
  EXPECT_EQ(o.at("currentVersion").as_int64(), 3);
  EXPECT_EQ(o.at("metadata").as_object().at("env").as_string(), "prod");
  EXPECT_EQ(o.at("createdAt").as_string(), "1970-01-01T00:00:01.000Z");
  EXPECT_EQ(o.at("updatedAt").as_string(), "1970-01-01T00:00:02.000Z");
  EXPECT_EQ(json::serialize(o).find("SEALED"), std::string::npos);
  EXPECT_EQ(o.size(), 6u);
}

TEST(SecretVault, SealsBoundToTeamAndIdAndOpensOnlyWithItsKey) {
  auto v = SecretVault::with_key(std::string(32, 'k'));
  ASSERT_TRUE(v.ok());
  store::SecretRecord r;
  r.id = "sec_" + std::string(24, 'a');
  r.team_id = "t";
  r.name = "n";
  auto sealed = v->seal(r.team_id, r.id, "sk-plaintext");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->find("sk-plaintext"), std::string::npos);
  EXPECT_NE(*sealed, *v->seal(r.team_id, r.id, "sk-plaintext"));  // a fresh nonce each time
  r.sealed = *sealed;
  EXPECT_EQ(*v->open_value(r), "sk-plaintext");
  store::SecretRecord moved = r;
  moved.id = "sec_" + std::string(24, 'b');
  EXPECT_EQ(v->open_value(moved).error().code(), ErrorCode::kFailedPrecondition);
  moved = r;
  moved.team_id = "other";
  EXPECT_FALSE(v->open_value(moved).ok());
  auto other = SecretVault::with_key(std::string(32, 'o'));
  EXPECT_FALSE(other->open_value(r).ok());
  store::SecretRecord garbage = r;
  garbage.sealed = "v1.!!!";
  EXPECT_FALSE(v->open_value(garbage).ok());
  r.sealed = *v->seal(r.team_id, r.id, "");
  EXPECT_EQ(*v->open_value(r), "");
}

TEST(SecretVault, KeyFileIsMadeOnceAndMustBePrivate) {
  abx::testing::TempDir d;
  const auto key = d.path() / "secrets.key";
  auto v1 = SecretVault::open(key);
  ASSERT_TRUE(v1.ok()) << v1.error().message();
  struct stat st {};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0400u);
  store::SecretRecord r;
  r.id = "sec_" + std::string(24, 'a');
  r.team_id = "t";
  r.sealed = *v1->seal("t", r.id, "value");
  auto v2 = SecretVault::open(key);  // the same key again
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(*v2->open_value(r), "value");
  ::chmod(key.c_str(), 0644);
  EXPECT_EQ(SecretVault::open(key).error().code(), ErrorCode::kFailedPrecondition);
  ::chmod(key.c_str(), 0600);
  { std::ofstream(key) << "not hex\n"; }
  EXPECT_EQ(SecretVault::open(key).error().code(), ErrorCode::kFailedPrecondition);
}

}  // namespace
}  // namespace abx::platform
