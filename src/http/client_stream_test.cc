// The client's streaming read: pieces reach the caller while the server is still writing, the
// caller can stop early, and cancel() from another thread wakes a blocked read.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "abx/http/client.h"
#include "abx/http/server.h"

namespace abx::http {
namespace {

namespace bhttp = boost::beast::http;

// A server whose stream writes one piece, then waits for the test to release the next.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int released = 0;
  void release() {
    std::lock_guard lk(mu);
    ++released;
    cv.notify_all();
  }
  bool wait_for(int n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(20), [&] { return released >= n; });
  }
};

TEST(HttpClientStream, PiecesArriveBeforeTheBodyEnds) {
  Gate gate;
  auto s = Server::start({}, [&gate](Request&& req, Responder respond) {
    Response h{bhttp::status::ok, req.version()};
    auto w = respond.stream(std::move(h));
    std::thread([w, &gate] {
      for (int i = 0; i < 3; ++i) {
        w->write("piece" + std::to_string(i));
        if (!gate.wait_for(i + 1)) break;
      }
      w->finish();
    }).detach();
  });
  ASSERT_TRUE(s.ok());
  auto c = Connection::open("127.0.0.1", (*s)->port());
  ASSERT_TRUE(c.ok());
  std::string got;
  auto r = (*c)->send_streaming(make_request(bhttp::verb::get, "/"), [&](std::string_view p) {
    got.append(p);
    // Each piece is seen before the server may write the next: the read cannot be buffering.
    gate.release();
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_TRUE(r->body().empty());
  EXPECT_EQ(got, "piece0piece1piece2");
  // The connection is reusable after a complete streamed body (the gate is open by now, so
  // the second stream runs to its end unprompted).
  auto again = (*c)->send(make_request(bhttp::verb::get, "/"));
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again->body(), "piece0piece1piece2");
}

TEST(HttpClientStream, CallerStopsEarlyAndCancelWakesABlockedRead) {
  // Shared with the detached producers, which may still look at it after the test has
  // returned (ThreadSanitizer saw one read a later test's stack where a local flag had been).
  auto stop = std::make_shared<std::atomic<bool>>(false);
  auto s = Server::start({}, [stop](Request&& req, Responder respond) {
    auto w = respond.stream(Response{bhttp::status::ok, req.version()});
    std::thread([w, stop] {
      w->write("first");
      while (!*stop && !w->closed()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      w->finish();
    }).detach();
  });
  ASSERT_TRUE(s.ok());
  {
    auto c = Connection::open("127.0.0.1", (*s)->port());
    ASSERT_TRUE(c.ok());
    int calls = 0;
    auto r = (*c)->send_streaming(make_request(bhttp::verb::get, "/"), [&](std::string_view) {
      ++calls;
      return false;
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(calls, 1);
  }
  auto c = Connection::open("127.0.0.1", (*s)->port());
  ASSERT_TRUE(c.ok());
  std::atomic<bool> first{false};
  std::thread canceller([&] {
    while (!first) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    (*c)->cancel();
  });
  auto r = (*c)->send_streaming(make_request(bhttp::verb::get, "/"), [&](std::string_view) {
    first = true;
    return true;
  });
  canceller.join();
  EXPECT_FALSE(r.ok());
  *stop = true;
}

}  // namespace
}  // namespace abx::http
