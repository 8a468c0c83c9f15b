#include "abx/interp/wire.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <regex>
#include <string>
#include <vector>

namespace abx::interp {
namespace {
namespace json = boost::json;

constexpr std::string_view kKey = "key-0123";

Message sample() {
  Message m = make_message("execute_request", json::object{{"code", "print(1)"}}, "sess-1");
  m.identities = {"route-a", "route-b"};
  m.parent_header = json::object{{"msg_id", "parent-1"}, {"msg_type", "kernel_info_request"}};
  m.metadata = json::object{{"k", 1}};
  m.buffers = {std::string("\0\x01\x02", 3), "tail"};
  return m;
}

TEST(Wire, MakeMessageHeader) {
  Message m = make_message("kernel_info_request", {}, "sess");
  EXPECT_EQ(m.msg_type(), "kernel_info_request");
  EXPECT_EQ(m.header.at("session").as_string(), "sess");
  EXPECT_EQ(m.header.at("username").as_string(), "abx");
  EXPECT_EQ(m.header.at("version").as_string(), "5.3");
  EXPECT_TRUE(std::regex_match(std::string(m.msg_id()),
                               std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                                          "[0-9a-f]{12}")))
      << m.msg_id();
  EXPECT_TRUE(std::regex_match(std::string(m.header.at("date").as_string()),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")));
  EXPECT_TRUE(m.parent_header.empty());
  EXPECT_TRUE(m.metadata.empty());
  EXPECT_EQ(m.parent_id(), "");
  EXPECT_NE(make_message("x", {}, "s").msg_id(), m.msg_id());
}

TEST(Wire, RoundTrip) {
  Message m = sample();
  auto frames = encode(m, kKey);
  ASSERT_EQ(frames.size(), 2u + 1 + 1 + 4 + 2);
  EXPECT_EQ(frames[2], kDelimiter);
  EXPECT_EQ(frames[3].size(), 64u);
  auto d = decode(frames, kKey);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->identities, m.identities);
  EXPECT_EQ(d->header, m.header);
  EXPECT_EQ(d->parent_header, m.parent_header);
  EXPECT_EQ(d->metadata, m.metadata);
  EXPECT_EQ(d->content, m.content);
  EXPECT_EQ(d->buffers, m.buffers);
  EXPECT_EQ(d->parent_id(), "parent-1");
  EXPECT_EQ(d->msg_type(), "execute_request");
}

TEST(Wire, EmptyKeyMeansNoSignature) {
  auto frames = encode(sample(), "");
  EXPECT_EQ(frames[3], "");
  EXPECT_TRUE(decode(frames, "").ok());
  frames[3] = "anything";  // ignored without a key, as jupyter_client does
  EXPECT_TRUE(decode(frames, "").ok());
  EXPECT_FALSE(decode(encode(sample(), ""), kKey).ok());  // unsigned but a key is expected
}

TEST(Wire, KnownAnswerHmac) {
  // printf '%s' '{"msg_id":"1"}{}{}{"code":"x"}' | openssl dgst -sha256 -hmac 'key-0123'
  EXPECT_EQ(sign(kKey, {R"({"msg_id":"1"})", "{}", "{}", R"({"code":"x"})"}),
            "540195c6fbd70a3f18107101b5238e23f0493fdde4e65829313f15b252b1f35b");
  // printf '' | openssl dgst -sha256 -hmac 'k'
  EXPECT_EQ(sign("k", {}), "8bb990c40a7d61cb97597a942125025be50ac8beb74436e3735b98893a7f6620");

  std::vector<std::string> frames{
      std::string(kDelimiter),
      "540195c6fbd70a3f18107101b5238e23f0493fdde4e65829313f15b252b1f35b",
      R"({"msg_id":"1"})",
      "{}",
      "{}",
      R"({"code":"x"})"};
  auto d = decode(frames, kKey);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->msg_id(), "1");
  EXPECT_EQ(d->content.at("code").as_string(), "x");
}

TEST(Wire, TamperedFrameRejected) {
  auto frames = encode(sample(), kKey);
  for (std::size_t i = 4; i < 8; ++i) {
    auto t = frames;
    t[i].back() = t[i].back() == '}' ? ' ' : '}';
    auto d = decode(t, kKey);
    ASSERT_FALSE(d.ok()) << i;
    EXPECT_EQ(d.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(d.error().message().find("signature"), std::string::npos) << i;
  }
  auto t = frames;
  t[3][0] = t[3][0] == 'a' ? 'b' : 'a';
  EXPECT_FALSE(decode(t, kKey).ok());
  t = frames;
  t[3] = t[3].substr(0, 63);
  EXPECT_FALSE(decode(t, kKey).ok());
  // Buffers and identities are not signed (per protocol): changing them is not an error.
  t = frames;
  t.back() = "other";
  EXPECT_TRUE(decode(t, kKey).ok());
}

TEST(Wire, WrongKeyRejected) {
  auto frames = encode(sample(), kKey);
  auto d = decode(frames, "key-0124");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("bad signature"), std::string::npos);
}

TEST(Wire, SignatureCheckedBeforeParsing) {
  // Unparseable JSON with a wrong signature reports the signature, not the JSON.
  std::vector<std::string> frames{
      std::string(kDelimiter), std::string(64, '0'), "{", "{}", "{}", "{}"};
  auto d = decode(frames, kKey);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("signature"), std::string::npos);
}

TEST(Wire, MissingDelimiter) {
  auto frames = encode(sample(), kKey);
  frames.erase(frames.begin() + 2);
  auto d = decode(frames, kKey);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("delimiter"), std::string::npos);
  EXPECT_FALSE(decode({}, kKey).ok());
}

TEST(Wire, TooFewFrames) {
  auto frames = encode(sample(), kKey);
  frames.resize(3 + 1 + 3);  // identities, delimiter, signature, three JSON frames
  auto d = decode(frames, kKey);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("fewer than four"), std::string::npos);
  EXPECT_FALSE(decode({std::string(kDelimiter)}, "").ok());
}

std::vector<std::string> signed_frames(std::vector<std::string> json_frames) {
  std::vector<std::string> f{std::string(kDelimiter), sign(kKey, {json_frames[0], json_frames[1],
                                                                  json_frames[2], json_frames[3]})};
  f.insert(f.end(), json_frames.begin(), json_frames.end());
  return f;
}

TEST(Wire, NonObjectJson) {
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> j{"{}", "{}", "{}", "{}"};
    j[static_cast<std::size_t>(i)] = "[1]";
    auto d = decode(signed_frames(j), kKey);
    ASSERT_FALSE(d.ok()) << i;
    EXPECT_NE(d.error().message().find("not a JSON object"), std::string::npos);
  }
  EXPECT_FALSE(decode(signed_frames({"{}", "{}", "{}", "\"s\""}), kKey).ok());
  EXPECT_FALSE(decode(signed_frames({"{}", "{}", "{}", "not json"}), kKey).ok());
  EXPECT_FALSE(decode(signed_frames({"{}", "{}", "{}", ""}), kKey).ok());
  EXPECT_FALSE(decode(signed_frames({R"({"a":1,"a":2})", "{}", "{}", "{}"}), kKey).ok());
}

TEST(Wire, TooDeep) {
  std::string deep = R"({"a":)" + std::string(10, '[') + "1" + std::string(10, ']') + "}";
  auto frames = signed_frames({"{}", "{}", "{}", deep});
  EXPECT_TRUE(decode(frames, kKey, WireLimits{.max_json_depth = 64}).ok());
  auto d = decode(frames, kKey, WireLimits{.max_json_depth = 5});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), ErrorCode::kInvalidArgument);
}

TEST(Wire, Limits) {
  Message m = sample();
  m.buffers.assign(10, "b");
  auto frames = encode(m, kKey);  // 2 identities + delimiter + signature + 4 + 10 = 18
  EXPECT_TRUE(decode(frames, kKey, WireLimits{.max_frames = 18}).ok());
  auto d = decode(frames, kKey, WireLimits{.max_frames = 17});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("frames"), std::string::npos);

  std::size_t total = 0;
  for (const auto& f : frames) total += f.size();
  EXPECT_TRUE(decode(frames, kKey, WireLimits{.max_total_bytes = total}).ok());
  d = decode(frames, kKey, WireLimits{.max_total_bytes = total - 1});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("bytes"), std::string::npos);
}

}  // namespace
}  // namespace abx::interp
