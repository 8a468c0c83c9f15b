#include "abx/egress/transform.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace abx::egress {
namespace {

namespace json = boost::json;

Result<TransformRules> parse(std::string_view text) {
  return parse_transforms(json::parse(text), "network.rules");
}

std::string error_of(std::string_view text) {
  auto r = parse(text);
  EXPECT_FALSE(r) << text;
  return r ? std::string() : r.error().message();
}

TEST(Transforms, ParsesE2bShape) {
  auto r = parse(R"({"API.Example.com": [{"transform": {"headers": {"Authorization": "Bearer s"}}}],
                     "*.example.org": [{"transform": {"headers": {"X-A": "1"}}},
                                       {"transform": {"headers": {"x-a": "2", "X-B": "3"}}}],
                     "*.com": [], "none.example": [{}]})");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->hosts.size(), 4u);
  EXPECT_EQ(r->hosts[0].pattern.str(), "api.example.com");  // lower-cased
  EXPECT_EQ(r->hosts[0].headers(), (std::vector<Header>{{"Authorization", "Bearer s"}}));
  // A later rule's header of the same name (any case) wins.
  EXPECT_EQ(r->hosts[1].headers(), (std::vector<Header>{{"x-a", "2"}, {"X-B", "3"}}));
  EXPECT_TRUE(r->hosts[3].headers().empty());
  EXPECT_TRUE(parse("null")->empty());
  EXPECT_TRUE(parse("{}")->empty());
}

TEST(Transforms, ExactBeatsLongestWildcard) {
  auto r = *parse(R"({"*.example.com": [{"transform": {"headers": {"X": "short"}}}],
                      "*.api.example.com": [{"transform": {"headers": {"X": "long"}}}],
                      "v1.api.example.com": [{"transform": {"headers": {"X": "exact"}}}]})");
  auto value = [&](std::string_view host) -> std::string {
    const HostTransforms* h = r.match(host);
    return h ? h->headers().at(0).second : "none";
  };
  EXPECT_EQ(value("V1.API.example.com."), "exact");
  EXPECT_EQ(value("v2.api.example.com"), "long");
  EXPECT_EQ(value("a.b.api.example.com"), "long");  // any depth
  EXPECT_EQ(value("api.example.com"), "short");     // the apex of the longer wildcard
  EXPECT_EQ(value("www.example.com"), "short");
  EXPECT_EQ(value("example.com"), "none");  // never the apex
  EXPECT_EQ(value("example.org"), "none");
  EXPECT_EQ(value("badexample.com"), "none");
}

TEST(Transforms, BadInputNamesTheField) {
  EXPECT_NE(error_of(R"({"*": []})").find(R"(network.rules["*"])"), std::string::npos);
  EXPECT_NE(error_of(R"({"a.*.com": []})").find(R"(network.rules["a.*.com"])"), std::string::npos);
  EXPECT_NE(error_of(R"({"*.": []})").find("network.rules"), std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": {}})").find("must be a list"), std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [{"transform": {"headers": {"": "v"}}}]})")
                .find(R"(network.rules["a.com"][0].transform.headers[""]: a header name may not)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [{}, {"transform": {"headers": {"X": "a\r\nEvil: 1"}}}]})")
                .find(R"(network.rules["a.com"][1].transform.headers["X"]: CR or LF)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [{"transform": {"headers": {"X": "a\nb"}}}]})").find("CR or LF"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [{"transform": {"headers": {"X": "a\u0000b"}}}]})")
                .find("control character"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [{"transform": {"headers": {"Bad Name": "v"}}}]})")
                .find("not a header name"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [{"transform": {"headers": {"X": 1}}}]})").find("a string"),
            std::string::npos);
  for (const char* owned : {"Host", "content-length", "Transfer-Encoding", "Connection", "Upgrade"})
    EXPECT_NE(error_of(std::string(R"({"a.com": [{"transform": {"headers": {")") + owned +
                       R"(": "v"}}}]})")
                  .find("does not set"),
              std::string::npos)
        << owned;
  EXPECT_NE(error_of(R"({"a.com": [{"transform": {"body": {}}}]})").find("transform.body"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [{"match": {}}]})").find("[0].match is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"a.com": [], "A.com": []})").find("the same host"), std::string::npos);
  EXPECT_NE(error_of(R"([])").find("must be an object"), std::string::npos);
}

TEST(Transforms, LimitsAreEnforced) {
  json::object hosts;
  for (std::size_t i = 0; i <= kMaxTransformHosts; ++i)
    hosts["h" + std::to_string(i) + ".example.com"] = json::array();
  EXPECT_NE(parse_transforms(hosts, "network.rules").error().message().find("at most 100 hosts"),
            std::string::npos);

  json::array many;
  for (std::size_t i = 0; i <= kMaxTransformsPerHost; ++i) many.push_back(json::object());
  EXPECT_FALSE(parse_transforms(json::object{{"a.com", many}}, "r"));

  json::object headers;
  for (std::size_t i = 0; i <= kMaxTransformHeaders; ++i) headers["X-" + std::to_string(i)] = "v";
  json::value one{
      {"a.com", json::array{json::object{{"transform", json::object{{"headers", headers}}}}}}};
  EXPECT_NE(parse_transforms(one, "r").error().message().find("at most 32 headers"),
            std::string::npos);

  json::value big{
      {"a.com",
       json::array{json::object{
           {"transform",
            json::object{
                {"headers", json::object{{"X", std::string(kMaxHeaderValueBytes + 1, 'v')}}}}}}}}};
  EXPECT_NE(parse_transforms(big, "r").error().message().find("at most 8192 bytes"),
            std::string::npos);

  // Values within each limit but over the total.
  json::object total;
  for (int i = 0; i < 9; ++i)
    total["h" + std::to_string(i) + ".com"] = json::array{json::object{
        {"transform",
         json::object{{"headers", json::object{{"X", std::string(kMaxHeaderValueBytes, 'v')}}}}}}};
  EXPECT_NE(parse_transforms(total, "r").error().message().find("in all"), std::string::npos);
}

TEST(Transforms, JsonMasksValuesUnlessRevealed) {
  auto r = *parse(R"({"a.com": [{"transform": {"headers": {"Authorization": "secret"}}}]})");
  const std::string masked = json::serialize(r.to_json(false));
  EXPECT_EQ(masked.find("secret"), std::string::npos);
  EXPECT_NE(masked.find("Authorization"), std::string::npos);
  EXPECT_NE(masked.find(kMaskedValue), std::string::npos);
  // The revealed form parses back to the same rules.
  auto again = parse_transforms(r.to_json(true), "r");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->hosts.at(0).headers(), r.hosts.at(0).headers());
}

TEST(SecretPlaceholders, NamesAreFoundAndLowerCased) {
  auto n =
      secret_names_in("Bearer ${e2b.secrets.OpenAI}-${e2b.secrets.b_2.x-y}${e2b.secrets.openai}");
  ASSERT_TRUE(n) << n.error().message();
  EXPECT_EQ(*n, (std::vector<std::string>{"openai", "b_2.x-y", "openai"}));
  EXPECT_TRUE(secret_names_in("plain $ {e2b} ${HOME} e2b.secrets.x")->empty());
}

TEST(SecretPlaceholders, MalformedOnesAreRefused) {
  for (std::string_view bad :
       {"${e2b.secrets.x", "${e2b.secrets.}", "${e2b.secrets.-x}", "${e2b.secrets.sec_abc}",
        "${e2b.secrets.a b}", "${e2b.identity.tokens.aws}", "${e2b.secrets.a{b}"})
    EXPECT_FALSE(secret_names_in(bad)) << bad;
  EXPECT_FALSE(secret_names_in("${e2b.secrets." + std::string(kMaxSecretNameBytes + 1, 'a') + "}"));
  EXPECT_TRUE(secret_names_in("${e2b.secrets." + std::string(kMaxSecretNameBytes, 'a') + "}"));
  EXPECT_TRUE(valid_secret_name("openai-api-key"));
  EXPECT_FALSE(valid_secret_name("OpenAI"));  // names are lower-cased before the check
  EXPECT_FALSE(valid_secret_name(""));
  EXPECT_FALSE(valid_secret_name("_x"));
}

TEST(SecretPlaceholders, ParseNamesTheHeaderOfABadPlaceholder) {
  const std::string e =
      error_of(R"({"a.com": [{"transform": {"headers": {"X-Key": "${e2b.secrets.x"}}}]})");
  EXPECT_NE(e.find(R"(network.rules["a.com"][0].transform.headers["X-Key"])"), std::string::npos)
      << e;
  EXPECT_NE(e.find("closing"), std::string::npos) << e;
  EXPECT_NE(
      error_of(R"({"a.com": [{"transform": {"headers": {"X": "${e2b.identity.tokens.a}"}}}]})")
          .find("workload identity"),
      std::string::npos);
}

TEST(SecretPlaceholders, ReferencesNameTheirFields) {
  auto r = *parse(R"({"A.com": [{"transform": {"headers": {"X-A": "1"}}},
                               {"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.K}"}}}],
                     "b.com": [{"transform": {"headers": {"X-B": "${e2b.secrets.j}"}}}]})");
  auto refs = r.secret_references("network.rules");
  ASSERT_EQ(refs.size(), 2u);
  EXPECT_EQ(refs[0].name, "k");
  EXPECT_EQ(refs[0].field, R"(network.rules["a.com"][1].transform.headers["Authorization"])");
  EXPECT_EQ(refs[1].name, "j");
  EXPECT_TRUE(r.references("k"));
  EXPECT_FALSE(r.references("x"));
}

TEST(SecretPlaceholders, ExpandResolvesEachAndPassesErrorsOn) {
  auto resolve = [](std::string_view n) -> Result<std::string> {
    if (n == "a") return std::string("AAA");
    return not_found("secret '" + std::string(n) + "' not found");
  };
  EXPECT_EQ(*expand_secrets("Bearer ${e2b.secrets.A}/${e2b.secrets.a}", resolve), "Bearer AAA/AAA");
  EXPECT_EQ(*expand_secrets("no placeholder", resolve), "no placeholder");
  auto missing = expand_secrets("${e2b.secrets.b}", resolve);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(expand_secrets("${e2b.secrets.a}${e2b.secrets.a}", resolve, 5));
}

TEST(SecretPlaceholders, GetShowsThePlaceholderNeverLiteralText) {
  EXPECT_EQ(masked_value("Bearer ${e2b.secrets.openai}"), "Bearer ${e2b.secrets.openai}");
  EXPECT_EQ(masked_value("${e2b.secrets.a}"), "${e2b.secrets.a}");
  EXPECT_EQ(masked_value("sk-literal${e2b.secrets.a}:tail"),
            std::string(kMaskedValue) + "${e2b.secrets.a}" + std::string(kMaskedValue));
  EXPECT_EQ(masked_value("Bearer sk-literal"), kMaskedValue);
  auto r = *parse(R"({"a.com": [{"transform": {"headers": {"A": "Token ${e2b.secrets.k}"}}}]})");
  EXPECT_NE(json::serialize(r.to_json(false)).find("Token ${e2b.secrets.k}"), std::string::npos);
}

TEST(Transforms, WarnsForHostsTheSandboxCannotReach) {
  auto t = *parse(R"({"api.a.com": [], "*.b.com": [], "x.c.com": [], "*.d.com": []})");
  // Everything allowed: nothing to warn about.
  EXPECT_TRUE(transform_warnings(*parse_rules({}, {}, true), t).empty());
  // Deny-all with some names allowed.
  auto rules = *parse_rules({"*.a.com", "v1.b.com", "*.sub.d.com"}, {"0.0.0.0/0"}, true);
  auto w = transform_warnings(rules, t);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find(R"("x.c.com")"), std::string::npos);
  // An allowed address might be the host's: no warning.
  EXPECT_TRUE(transform_warnings(*parse_rules({"1.2.3.4"}, {"0.0.0.0/0"}, true), t).empty());
  EXPECT_EQ(transform_warnings(*parse_rules({}, {}, false), t).size(), 4u);
}

}  // namespace
}  // namespace abx::egress
