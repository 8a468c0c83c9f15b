// The Streamable HTTP session store (open, look-up by id and credential, protocol version, end,
// LRU eviction) and the Origin check shared by the command server's and abxd's /mcp.
#include "abx/mcp/session.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace abx::mcp {
namespace {

Message request(std::string method) {
  Message m;
  m.kind = Message::Kind::kRequest;
  m.id = 1;
  m.method = std::move(method);
  return m;
}

// An initialized session opened by `credential`, stored; returns its id.
std::string open_session(SessionStore& store, std::string credential,
                         std::string version = "2025-06-18") {
  auto s = store.session_for(request("initialize"), "", "", credential);
  EXPECT_TRUE(s.ok());
  (*s)->state.protocol_version = std::move(version);
  (*s)->state.initialized = true;
  auto id = store.open(*s);
  EXPECT_TRUE(id.ok());
  return *id;
}

TEST(McpSessionStore, InitializeMakesAnUnstoredSessionBoundToTheCredential) {
  SessionStore store(4);
  auto s = store.session_for(request("initialize"), "", "", "tok-a");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->credential.has_value());
  EXPECT_TRUE((*s)->credential->matches("tok-a"));
  EXPECT_FALSE((*s)->credential->matches("tok-b"));
  EXPECT_TRUE((*s)->id.empty());
  EXPECT_EQ(store.size(), 0u);

  auto id = store.open(*s);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->size(), 32u);
  EXPECT_EQ(id->find_first_not_of("0123456789abcdef"), std::string::npos) << *id;
  EXPECT_EQ((*s)->id, *id);
  EXPECT_EQ(store.size(), 1u);
  EXPECT_NE(*id, open_session(store, "tok-a"));  // fresh random ids
}

TEST(McpSessionStore, InitializeNamingASessionIsRefused) {
  SessionStore store(4);
  auto s = store.session_for(request("initialize"), "abc", "", "tok");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(rpc_code(s.error()), kInvalidRequest);
  EXPECT_NE(s.error().message().find("without Mcp-Session-Id"), std::string::npos);
}

TEST(McpSessionStore, LaterMessagesFindTheirSessionOnlyWithItsCredential) {
  SessionStore store(4);
  std::string id = open_session(store, "tok-a");

  auto found = store.session_for(request("tools/list"), id, "", "tok-a");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->id, id);

  auto missing = store.session_for(request("tools/list"), "", "", "tok-a");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(rpc_code(missing.error()), kInvalidRequest);

  auto unknown = store.session_for(request("tools/list"), "0123", "", "tok-a");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(rpc_code(unknown.error()), kSessionNotFound);

  // Another credential cannot tell the session exists.
  auto other = store.session_for(request("tools/list"), id, "", "tok-b");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(rpc_code(other.error()), kSessionNotFound);
  EXPECT_EQ(other.error().message(), unknown.error().message());
}

TEST(McpSessionStore, ProtocolVersionHeaderMustBeTheSessions) {
  SessionStore store(4);
  std::string id = open_session(store, "tok", "2025-06-18");
  EXPECT_TRUE(store.session_for(request("ping"), id, "2025-06-18", "tok").ok());
  auto wrong = store.session_for(request("ping"), id, "2024-11-05", "tok");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(rpc_code(wrong.error()), kInvalidRequest);
  EXPECT_NE(wrong.error().message().find("'2024-11-05' is not this session's (2025-06-18)"),
            std::string::npos)
      << wrong.error().message();
}

TEST(McpSessionStore, EndNeedsTheCredentialAndForgetsTheSession) {
  SessionStore store(4);
  std::string id = open_session(store, "tok");
  auto foreign = store.end(id, "other");
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(rpc_code(foreign.error()), kSessionNotFound);
  EXPECT_EQ(store.size(), 1u);

  EXPECT_TRUE(store.end(id, "tok").ok());
  EXPECT_EQ(store.size(), 0u);
  auto again = store.end(id, "tok");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(rpc_code(again.error()), kSessionNotFound);
  EXPECT_FALSE(store.session_for(request("ping"), id, "", "tok").ok());
}

TEST(McpSessionStore, EvictsTheLeastRecentlyUsed) {
  SessionStore store(2);
  std::string a = open_session(store, "tok");
  std::string b = open_session(store, "tok");
  // Using `a` makes `b` the oldest, so the third session evicts `b`.
  ASSERT_TRUE(store.session_for(request("ping"), a, "", "tok").ok());
  std::string c = open_session(store, "tok");
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.session_for(request("ping"), a, "", "tok").ok());
  EXPECT_TRUE(store.session_for(request("ping"), c, "", "tok").ok());
  auto evicted = store.session_for(request("ping"), b, "", "tok");
  ASSERT_FALSE(evicted.ok());
  EXPECT_EQ(rpc_code(evicted.error()), kSessionNotFound);
}

TEST(McpSessionStore, ZeroCapacityStillKeepsOne) {
  SessionStore store(0);
  std::string a = open_session(store, "tok");
  EXPECT_EQ(store.size(), 1u);
  EXPECT_TRUE(store.session_for(request("ping"), a, "", "tok").ok());
}

TEST(McpOrigin, LoopbackHttpOriginsOnly) {
  for (const char* ok : {"http://localhost", "http://localhost:5173", "https://LOCALHOST",
                         "HTTP://127.0.0.1:8080", "http://[::1]:3000", "https://[::1]"}) {
    EXPECT_TRUE(origin_allowed(ok)) << ok;
  }
  for (const char* bad :
       {"https://evil.example", "http://localhost.evil.example", "http://127.0.0.2", "null",
        "file://localhost", "ws://localhost", "http://localhost/path", "http://[::1", "http://",
        "localhost", "http://evil.example#localhost"}) {
    EXPECT_FALSE(origin_allowed(bad)) << bad;
  }
}

TEST(McpOrigin, AllowListIsExactAndCaseInsensitive) {
  std::vector<std::string> allow{"https://app.example.com"};
  EXPECT_TRUE(origin_allowed("https://APP.example.com", allow));
  EXPECT_FALSE(origin_allowed("https://app.example.com:8443", allow));
  EXPECT_FALSE(origin_allowed("http://app.example.com", allow));
  EXPECT_TRUE(origin_allowed("http://localhost", allow));  // loopback stays allowed
  std::vector<std::string> any{"*"};
  EXPECT_TRUE(origin_allowed("https://evil.example", any));
  EXPECT_TRUE(origin_allowed("null", any));
}

TEST(McpOrigin, CheckOriginNamesTheOrigin) {
  EXPECT_TRUE(check_origin("").ok());  // no Origin header: not a browser
  EXPECT_TRUE(check_origin("http://localhost:1").ok());
  auto st = check_origin("https://evil.example", {}, " (see --mcp-allow-origin)");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(st.error().message(),
            "Origin 'https://evil.example' may not use /mcp (see --mcp-allow-origin)");
  auto long_origin = check_origin("https://" + std::string(200, 'a'));
  ASSERT_FALSE(long_origin.ok());
  EXPECT_NE(long_origin.error().message().find(std::string(92, 'a') + "...'"), std::string::npos)
      << long_origin.error().message();
}

}  // namespace
}  // namespace abx::mcp
