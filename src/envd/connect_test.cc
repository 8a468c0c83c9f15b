// Connect framing, error mappings and proto3 JSON helpers.
#include "connect.h"

#include <gtest/gtest.h>

#include "proto_json.h"

namespace abx::envd {
namespace {

TEST(Envelope, RoundTripsAndSplits) {
  std::string two = encode_envelope(0, R"({"a":1})") + encode_envelope(kFlagEndStream, "{}");
  EXPECT_EQ(two.substr(0, 5), std::string("\x00\x00\x00\x00\x07", 5));
  auto envs = parse_envelopes(two);
  ASSERT_TRUE(envs.ok());
  ASSERT_EQ(envs->size(), 2u);
  EXPECT_EQ((*envs)[0].payload, R"({"a":1})");
  EXPECT_EQ((*envs)[1].flags, kFlagEndStream);
  auto one = parse_single_request(two);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, R"({"a":1})");
}

TEST(Envelope, RejectsMalformedFrames) {
  EXPECT_FALSE(parse_envelopes(std::string("\x00\x00\x00", 3)).ok());            // short header
  EXPECT_FALSE(parse_envelopes(std::string("\x00\x00\x00\x00\x09{}", 7)).ok());  // short payload
  EXPECT_FALSE(parse_envelopes(std::string("\x01\x00\x00\x00\x02{}", 7)).ok());  // compressed
  EXPECT_FALSE(parse_envelopes(std::string("\x80\x00\x00\x00\x00", 5)).ok());    // unknown flag
  EXPECT_FALSE(parse_envelopes(std::string("\x00\xff\xff\xff\xff", 5)).ok());    // over the cap
  EXPECT_FALSE(parse_single_request("").ok());                                   // no message
  EXPECT_FALSE(parse_single_request(encode_envelope(0, "{}") + encode_envelope(0, "{}")).ok());
}

TEST(ConnectErrors, CodesAndStatusesTheSdkDependsOn) {
  auto r = connect_error_response(not_found("nope"), 11);
  EXPECT_EQ(r.result_int(), 404);
  EXPECT_EQ(r.body(), R"({"code":"not_found","message":"nope"})");
  EXPECT_EQ(connect_http_status(ErrorCode::kAlreadyExists), 409u);
  EXPECT_EQ(connect_code(ErrorCode::kAlreadyExists), "already_exists");
  EXPECT_EQ(connect_http_status(ErrorCode::kInvalidArgument), 400u);
  EXPECT_EQ(connect_code(ErrorCode::kUnimplemented), "unimplemented");
  auto s = connect_stream_error_response(invalid_argument("bad"), 11);
  EXPECT_EQ(s.result_int(), 200);
  EXPECT_EQ(s.body(), encode_envelope(kFlagEndStream,
                                      R"({"error":{"code":"invalid_argument","message":"bad"}})"));
  auto rest = rest_error_response(not_found("gone"), 11);
  EXPECT_EQ(rest.body(), R"({"code":404,"message":"gone"})");
}

TEST(ProtoJson, AcceptsBothNamesAndProtoEncodings) {
  auto m = parse_message(R"({"watcher_id":"w","depth":"3","signal":"SIGNAL_SIGKILL","b":"aGk"})");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*get_string(*m, "watcherId", "watcher_id").value(), "w");
  EXPECT_EQ(*get_u32(*m, "depth").value(), 3u);
  EXPECT_EQ(*get_enum(*m, "signal", "", {{"SIGNAL_SIGKILL", 9}}).value(), 9);
  EXPECT_EQ(*get_bytes(*m, "b").value(), "hi");  // unpadded base64 accepted
  EXPECT_FALSE(get_u32(*parse_message(R"({"depth":-1})"), "depth").ok());
  EXPECT_FALSE(parse_message("[1]").ok());
  EXPECT_FALSE(parse_message(R"({"a":1,"a":2})").ok());
  EXPECT_EQ(base64_encode("hi\n"), "aGkK");
  EXPECT_EQ(rfc3339(0, 0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(rfc3339(1, 500000000), "1970-01-01T00:00:01.500Z");
}

}  // namespace
}  // namespace abx::envd
