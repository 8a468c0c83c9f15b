#include "abx/connect/connect.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <string>

namespace abx::connect {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

TEST(ConnectEnvelope, EncodesHeaderBigEndian) {
  EXPECT_EQ(encode_envelope(0, ""), bytes({0, 0, 0, 0, 0}));
  EXPECT_EQ(encode_envelope(kFlagEndStream, "{}"), bytes({2, 0, 0, 0, 2}) + "{}");
  std::string big(0x010203, 'x');
  EXPECT_EQ(encode_envelope(0, big).substr(0, 5), bytes({0, 0, 1, 2, 3}));
  EXPECT_EQ(encode_end_stream(nullptr), bytes({2, 0, 0, 0, 2}) + "{}");
}

TEST(ConnectEnvelope, ParsesSequenceAndSingleRequest) {
  std::string two = encode_envelope(0, R"({"a":1})") + encode_envelope(kFlagEndStream, "{}");
  auto envs = parse_envelopes(two);
  ASSERT_TRUE(envs.ok());
  ASSERT_EQ(envs->size(), 2u);
  EXPECT_EQ((*envs)[0].payload, R"({"a":1})");
  EXPECT_FALSE((*envs)[0].end_stream());
  EXPECT_TRUE((*envs)[1].end_stream());
  auto one = parse_single_request(two);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, R"({"a":1})");
  // An empty data message is a message.
  auto empty = parse_single_request(encode_envelope(0, ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
  EXPECT_TRUE(parse_envelopes("")->empty());
}

TEST(ConnectEnvelope, RejectsMalformedBodies) {
  for (const std::string& bad : {
           bytes({0, 0, 0}),                       // short header
           bytes({0, 0, 0, 0, 9}) + "{}",          // short payload
           bytes({1, 0, 0, 0, 2}) + "{}",          // compressed
           bytes({0x80, 0, 0, 0, 0}),              // unknown flag bit
           bytes({0x04, 0, 0, 0, 0}),              // unknown flag bit next to end-stream
           bytes({0, 0xff, 0xff, 0xff, 0xff}),     // over the cap
           encode_envelope(0, "{}") + bytes({0}),  // trailing partial header
       }) {
    auto r = parse_envelopes(bad);
    ASSERT_FALSE(r.ok()) << bad.size();
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_FALSE(parse_single_request("").ok());
  EXPECT_FALSE(parse_single_request(encode_end_stream(nullptr)).ok());
  EXPECT_FALSE(parse_single_request(encode_envelope(0, "{}") + encode_envelope(0, "{}")).ok());
}

TEST(ConnectEnvelope, LimitIsInclusive) {
  std::string at(16, 'x');
  EXPECT_TRUE(parse_envelopes(encode_envelope(0, at), 16).ok());
  EXPECT_FALSE(parse_envelopes(encode_envelope(0, at + "x"), 16).ok());
  // The header alone is enough to refuse an oversize frame: nothing of it needs to be buffered.
  auto d = decode_envelope(bytes({0, 0, 0, 0, 17}), 16);
  EXPECT_FALSE(d.ok());
  static_assert(kMaxRequestMessageBytes < kMaxStreamMessageBytes);
}

TEST(ConnectEnvelope, DecodeReportsPartialInput) {
  std::string wire = encode_envelope(0, "hello");
  for (std::size_t n = 0; n < wire.size(); ++n) {
    auto d = decode_envelope(std::string_view(wire).substr(0, n), 64);
    ASSERT_TRUE(d.ok()) << n;
    EXPECT_FALSE(d->has_value()) << n;
  }
  const std::string with_tail = wire + "tail";  // the decoded payload is a view into it
  auto d = decode_envelope(with_tail, 64);
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->envelope.payload, "hello");
  EXPECT_EQ((*d)->wire_size, wire.size());
}

TEST(ConnectEnvelopeReader, RoundTripsAcrossArbitrarySplits) {
  std::string wire = encode_envelope(0, R"({"a":1})") + encode_envelope(0, "") +
                     encode_envelope(kFlagEndStream, "{}");
  for (std::size_t split = 0; split <= wire.size(); ++split) {
    EnvelopeReader r;
    std::vector<EnvelopeReader::Frame> got;
    for (std::string_view piece :
         {std::string_view(wire).substr(0, split), std::string_view(wire).substr(split)}) {
      r.feed(piece);
      for (;;) {
        auto e = r.next();
        ASSERT_TRUE(e.ok());
        if (!*e) break;
        got.push_back(**e);
      }
    }
    ASSERT_EQ(got.size(), 3u) << split;
    EXPECT_EQ(got[0].payload, R"({"a":1})");
    EXPECT_EQ(got[1].payload, "");
    EXPECT_TRUE(got[2].end_stream());
    EXPECT_TRUE(r.empty());
  }
}

TEST(ConnectEnvelopeReader, RejectsCompressedAndOversizeFrames) {
  EnvelopeReader r;
  r.feed(bytes({1, 0, 0, 0, 2}) + "{}");
  EXPECT_FALSE(r.next().ok());
  EnvelopeReader big;
  big.feed(bytes({0, 0x7f, 0xff, 0xff, 0xff}));
  EXPECT_FALSE(big.next().ok());
  EnvelopeReader small(4);
  small.feed(encode_envelope(0, "12345"));
  EXPECT_FALSE(small.next().ok());
}

TEST(ConnectCodes, EveryErrorCodeHasAConnectCodeAndStatus) {
  struct Row {
    ErrorCode code;
    std::string_view name;
    unsigned status;
  };
  for (const Row& r : std::initializer_list<Row>{
           {ErrorCode::kInvalidArgument, "invalid_argument", 400},
           {ErrorCode::kUnauthenticated, "unauthenticated", 401},
           {ErrorCode::kPermissionDenied, "permission_denied", 403},
           {ErrorCode::kNotFound, "not_found", 404},
           {ErrorCode::kMethodNotAllowed, "unimplemented", 404},
           {ErrorCode::kAlreadyExists, "already_exists", 409},
           {ErrorCode::kFailedPrecondition, "failed_precondition", 400},
           {ErrorCode::kPayloadTooLarge, "resource_exhausted", 429},
           {ErrorCode::kUnsupportedMediaType, "invalid_argument", 400},
           {ErrorCode::kResourceExhausted, "resource_exhausted", 429},
           {ErrorCode::kInternal, "internal", 500},
           {ErrorCode::kUnimplemented, "unimplemented", 404},
           {ErrorCode::kUnavailable, "unavailable", 503},
           {ErrorCode::kDeadlineExceeded, "deadline_exceeded", 504},
           {ErrorCode::kInsufficientStorage, "resource_exhausted", 429},
       }) {
    EXPECT_EQ(connect_code(r.code), r.name) << r.name;
    EXPECT_EQ(connect_http_status(r.code), r.status) << r.name;
  }
}

TEST(ConnectCodes, ConnectCodesMapBack) {
  // Canonical codes survive the round trip.
  for (ErrorCode c :
       {ErrorCode::kInvalidArgument, ErrorCode::kUnauthenticated, ErrorCode::kPermissionDenied,
        ErrorCode::kNotFound, ErrorCode::kAlreadyExists, ErrorCode::kFailedPrecondition,
        ErrorCode::kResourceExhausted, ErrorCode::kInternal, ErrorCode::kUnimplemented,
        ErrorCode::kUnavailable, ErrorCode::kDeadlineExceeded}) {
    EXPECT_EQ(code_from_connect(connect_code(c)), c) << connect_code(c);
  }
  // Connect's codes with no ErrorCode of their own.
  EXPECT_EQ(code_from_connect("out_of_range"), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_from_connect("aborted"), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(code_from_connect("canceled"), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(code_from_connect("data_loss"), ErrorCode::kInternal);
  EXPECT_EQ(code_from_connect("unknown"), ErrorCode::kInternal);
  EXPECT_EQ(code_from_connect("NOT_FOUND"), ErrorCode::kInternal);  // case matters on the wire
  EXPECT_EQ(code_from_connect(""), ErrorCode::kInternal);
}

TEST(ConnectCodes, HttpStatusWithoutErrorBody) {
  EXPECT_EQ(connect_code_for_http_status(400), "internal");
  EXPECT_EQ(connect_code_for_http_status(401), "unauthenticated");
  EXPECT_EQ(connect_code_for_http_status(403), "permission_denied");
  EXPECT_EQ(connect_code_for_http_status(404), "unimplemented");
  for (unsigned s : {429u, 502u, 503u, 504u})
    EXPECT_EQ(connect_code_for_http_status(s), "unavailable");
  EXPECT_EQ(connect_code_for_http_status(500), "unknown");
  EXPECT_EQ(connect_code_for_http_status(418), "unknown");
}

TEST(ConnectErrors, JsonBothWays) {
  Error e(ErrorCode::kNotFound, "no \"such\" file");
  EXPECT_EQ(error_json(e), R"({"code":"not_found","message":"no \"such\" file"})");
  EXPECT_EQ(end_stream_payload(nullptr), "{}");
  std::string payload = end_stream_payload(&e);
  EXPECT_EQ(payload, R"({"error":{"code":"not_found","message":"no \"such\" file"}})");
  auto back = end_stream_error(boost::json::parse(payload));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->code(), ErrorCode::kNotFound);
  EXPECT_EQ(back->message(), e.message());
  EXPECT_EQ(encode_end_stream(&e), encode_envelope(kFlagEndStream, payload));

  EXPECT_FALSE(end_stream_error(boost::json::parse("{}")).has_value());
  EXPECT_FALSE(end_stream_error(boost::json::parse("[]")).has_value());
  EXPECT_FALSE(end_stream_error(boost::json::parse(R"({"error":"x"})")).has_value());
  auto bare = end_stream_error(boost::json::parse(R"({"error":{}})"));
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->code(), ErrorCode::kInternal);
  EXPECT_EQ(bare->message(), "unknown");
  auto no_msg = end_stream_error(boost::json::parse(R"({"error":{"code":"canceled"}})"));
  EXPECT_EQ(no_msg->message(), "canceled");
}

}  // namespace
}  // namespace abx::connect
