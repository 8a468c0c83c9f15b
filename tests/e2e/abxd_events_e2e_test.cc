// Lifecycle events end to end (issue 39 item 7): a real abxd and base-image sandboxes. An SSE
// subscriber sees created then killed (reason killed); a short deadline gives timeout_warning
// then killed (reason timeout); an init killed from outside gives killed (reason died); a cursor
// taken before an abxd restart resumes with only the newer events; another team's key sees
// none of them; abxd's stop ends an open stream cleanly. Needs root (CI runs as root).
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "abx/base/base64.h"
#include "abx/http/client.h"
#include "abx/testing/abxd.h"
#include "abx/testing/child_process.h"

namespace abx::e2e {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;

struct Event {
  std::int64_t id = 0;  // the SSE id: line
  json::object body;    // the data: line
  std::string type() const { return std::string(body.at("type").as_string()); }
  std::string sandbox() const { return std::string(body.at("sandboxId").as_string()); }
  std::string reason() const {
    const auto& d = body.at("eventData");
    return d.is_object() && d.as_object().contains("reason")
               ? std::string(d.at("reason").as_string())
               : std::string();
  }
};

// One GET /events stream read on its own thread; its frames are parsed as they come.
class SseStream {
 public:
  SseStream(std::uint16_t port, const std::string& key, const std::string& target,
            const std::string& last_event_id = {}) {
    auto c = http::Connection::open("127.0.0.1", port);
    EXPECT_TRUE(c.ok()) << c.error().message();
    if (!c.ok()) return;
    conn_ = std::move(*c);
    auto req = http::make_request(bhttp::verb::get, target);
    req.erase(bhttp::field::content_type);
    req.set("X-API-KEY", key);
    req.set(bhttp::field::accept, "text/event-stream");
    if (!last_event_id.empty()) req.set("Last-Event-ID", last_event_id);
    thread_ = std::thread([this, req = std::move(req)]() mutable {
      auto r = conn_->send_streaming(
          std::move(req),
          [this](std::string_view piece) {
            std::lock_guard lock(mu_);
            raw_ += piece;
            parse();
            cv_.notify_all();
            return true;
          },
          60s);
      std::lock_guard lock(mu_);
      ended_ = true;
      ended_ok_ = r.ok();
      if (r.ok()) status_ = r->result_int();
      cv_.notify_all();
    });
  }
  ~SseStream() {
    if (conn_) conn_->cancel();
    if (thread_.joinable()) thread_.join();
  }
  // Waits (at most `limit`) until `pred` holds over the events so far; returns it.
  bool wait(const std::function<bool(const std::vector<Event>&)>& pred,
            std::chrono::milliseconds limit = 30s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return pred(events_) || ended_; }) && pred(events_);
  }
  bool wait_ended(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return ended_; });
  }
  bool wait_raw(const std::string& needle, std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] {
      return raw_.find(needle) != std::string::npos || ended_;
    }) && raw_.find(needle) != std::string::npos;
  }
  std::vector<Event> events() {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::string raw() {
    std::lock_guard lock(mu_);
    return raw_;
  }
  bool ended_ok() {
    std::lock_guard lock(mu_);
    return ended_ && ended_ok_;
  }

 private:
  // Complete frames (up to a blank line) out of raw_ from parsed_ on.
  void parse() {
    for (;;) {
      auto end = raw_.find("\n\n", parsed_);
      if (end == std::string::npos) return;
      std::string frame = raw_.substr(parsed_, end - parsed_);
      parsed_ = end + 2;
      Event e;
      bool has_data = false;
      std::size_t at = 0;
      while (at <= frame.size()) {
        auto nl = frame.find('\n', at);
        std::string line = frame.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
        at = nl == std::string::npos ? frame.size() + 1 : nl + 1;
        if (line.rfind("id: ", 0) == 0) e.id = std::stoll(line.substr(4));
        if (line.rfind("data: ", 0) == 0) {
          e.body = json::parse(line.substr(6)).as_object();
          has_data = true;
        }
      }
      if (has_data) events_.push_back(std::move(e));
    }
  }

  std::unique_ptr<http::Connection> conn_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string raw_;
  std::size_t parsed_ = 0;
  std::vector<Event> events_;
  bool ended_ = false, ended_ok_ = false;
  unsigned status_ = 0;
};

// A webhook receiver on loopback: every POST is recorded; the first `fail_first` requests are
// answered 500, the rest 200.
class Receiver {
 public:
  struct Hit {
    std::map<std::string, std::string> headers;  // lower-case names
    std::string target, body;
  };
  explicit Receiver(int fail_first) : fail_left_(fail_first) {
    namespace asio = boost::asio;
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~Receiver() {
    ioc_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  std::vector<Hit> hits() {
    std::lock_guard lock(mu_);
    return hits_;
  }
  bool wait(const std::function<bool(const std::vector<Hit>&)>& pred,
            std::chrono::milliseconds limit = 30s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return pred(hits_); });
  }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, boost::asio::ip::tcp::socket s) {
      if (ec) return;
      serve(std::move(s));
      accept();
    });
  }
  void serve(boost::asio::ip::tcp::socket s) {
    boost::beast::flat_buffer buf;
    bhttp::request<bhttp::string_body> req;
    boost::system::error_code ec;
    bhttp::read(s, buf, req, ec);
    if (ec) return;
    Hit h;
    for (const auto& f : req) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      h.headers[name] = std::string(f.value());
    }
    h.target = std::string(req.target());
    h.body = req.body();
    bool fail = false;
    {
      std::lock_guard lock(mu_);
      fail = fail_left_ > 0;
      if (fail) --fail_left_;
      h.headers["x-test-answered"] = fail ? "500" : "200";
      hits_.push_back(std::move(h));
    }
    cv_.notify_all();
    bhttp::response<bhttp::string_body> res{
        fail ? bhttp::status::internal_server_error : bhttp::status::ok, 11};
    res.body() = fail ? "try again" : "ok";
    res.prepare_payload();
    bhttp::write(s, res, ec);
  }

  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_{ioc_};
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Hit> hits_;
  int fail_left_ = 0;
};

std::string S(const json::value& v) { return v.is_string() ? std::string(v.as_string()) : ""; }

std::string hmac_hex(const std::string& key, const std::string& msg) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 15];
  }
  return out;
}

// E2B's: unpadded base64 of SHA-256(secret + body).
std::string e2b_sig(const std::string& secret, const std::string& body) {
  const std::string msg = secret + body;
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), d);
  std::string b = base64_encode(std::string_view(reinterpret_cast<const char*>(d), sizeof d));
  while (!b.empty() && b.back() == '=') b.pop_back();
  return b;
}

const Event* find(const std::vector<Event>& evs, const std::string& sandbox,
                  const std::string& type) {
  for (const auto& e : evs)
    if (e.sandbox() == sandbox && e.type() == "sandbox.lifecycle." + type) return &e;
  return nullptr;
}

class EventsE2E : public testing::AbxdFixture {
 protected:
  EventsE2E() : AbxdFixture("abxd-events") {}
  std::vector<std::string> abxd_args() const override {
    // Webhooks to the test's loopback receiver, retried quickly.
    return {"--timeout-warning",
            "2",
            "--webhook-allow-private",
            "--webhook-retry-delay",
            "0.2",
            "--webhook-timeout",
            "5",
            "--max-event-streams",
            "4",
            "--max-event-streams-per-team",
            "3"};
  }

  http::Response api(bhttp::verb verb, const std::string& target, const std::string& body = {},
                     const std::string& with_key = {}) {
    auto req = http::make_request(verb, target, body);
    if (body.empty() && verb != bhttp::verb::post) req.erase(bhttp::field::content_type);
    req.set("X-API-KEY", with_key.empty() ? key() : with_key);
    auto r = http::fetch("127.0.0.1", port(), std::move(req), 30s);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : http::Response{};
  }
  std::string create(int timeout, const std::string& extra = {}) {
    auto r = api(bhttp::verb::post, "/sandboxes",
                 R"({"templateID":"base","timeout":)" + std::to_string(timeout) + extra + "}");
    EXPECT_EQ(r.result_int(), 201) << r.body();
    if (r.result_int() != 201) return {};
    return std::string(json::parse(r.body()).at("sandboxID").as_string());
  }
  // The JSON page of GET <target> as events.
  std::vector<Event> page(const std::string& target, const std::string& with_key = {}) {
    auto r = api(bhttp::verb::get, target, {}, with_key);
    EXPECT_EQ(r.result_int(), 200) << target << ": " << r.body();
    std::vector<Event> out;
    if (r.result_int() != 200) return out;
    boost::system::error_code ec;
    auto parsed = json::parse(r.body(), ec);
    EXPECT_FALSE(ec) << target << ": " << r.body();
    EXPECT_TRUE(parsed.is_array()) << target << ": " << r.body();
    if (ec || !parsed.is_array()) return out;
    for (const auto& v : parsed.as_array()) {
      Event e;
      e.body = v.as_object();
      e.id = std::stoll(std::string(e.body.at("id").as_string()));
      out.push_back(std::move(e));
    }
    return out;
  }
  // Polls the JSON form until sandbox `id` has a killed event (bounded); returns its events.
  std::vector<Event> until_killed(const std::string& id, const std::string& type = "killed") {
    std::vector<Event> evs;
    for (int i = 0; i < 300; ++i) {
      evs = page("/sandboxes/" + id + "/events?stream=false&cursor=0");
      if (find(evs, id, type)) break;
      std::this_thread::sleep_for(100ms);
    }
    return evs;
  }
  std::pair<std::string, int> admin(std::vector<std::string> args) {
    std::vector<std::string> argv{testing::abxd_bin(), "--home", home().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::ChildProcess p(argv);
    std::string out = p.read_all();
    out.erase(out.find_last_not_of("\n") + 1);
    return {out, p.wait()};
  }
};

TEST_F(EventsE2E, StreamShowsCreatedThenKilledWithItsReason) {
  SseStream s(port(), key(), "/events");
  ASSERT_TRUE(s.wait_raw(": cursor ")) << s.raw();  // subscribed: what follows is delivered
  const std::string id = create(120);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
  ASSERT_TRUE(s.wait([&](const auto& evs) { return find(evs, id, "killed") != nullptr; }))
      << s.raw();
  auto evs = s.events();
  const Event* created = find(evs, id, "created");
  const Event* killed = find(evs, id, "killed");
  ASSERT_TRUE(created);
  ASSERT_TRUE(killed);
  EXPECT_LT(created->id, killed->id);
  EXPECT_EQ(killed->reason(), "killed");
  EXPECT_EQ(created->body.at("sandboxTemplateId"), "base");
  EXPECT_EQ(created->body.at("sandboxTeamId"), "default");
  EXPECT_EQ(created->body.at("version"), "v1");
  EXPECT_EQ(std::to_string(killed->id), std::string(killed->body.at("id").as_string()));

  // The JSON forms: E2B's newest first, the filter by type, the per-sandbox form.
  auto e2b = page("/events/sandboxes/" + id);
  ASSERT_EQ(e2b.size(), 2u);
  EXPECT_EQ(e2b[0].type(), "sandbox.lifecycle.killed");
  EXPECT_EQ(e2b[1].type(), "sandbox.lifecycle.created");
  auto only = page("/events/sandboxes?types=sandbox.lifecycle.killed&limit=100");
  ASSERT_FALSE(only.empty());
  for (const auto& e : only) EXPECT_EQ(e.type(), "sandbox.lifecycle.killed");
  EXPECT_EQ(api(bhttp::verb::get, "/events?stream=false&types=nope").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/events?stream=false&cursor=-1").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/events/sandboxes?limit=0").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/events/sandboxes/bad%21id").result_int(), 400);
}

TEST_F(EventsE2E, ShortDeadlineWarnsThenEndsWithReasonTimeout) {
  // --timeout-warning 2: a warning ~2 s before the end. The warning is armed only while more
  // than 2 s are left, so the deadline leaves a slow create (a loaded CI machine) 6 s for that.
  const std::string id = create(8);
  ASSERT_FALSE(id.empty());
  auto evs = until_killed(id);
  const Event* warning = find(evs, id, "timeout_warning");
  const Event* killed = find(evs, id, "killed");
  ASSERT_TRUE(warning) << "no warning";
  ASSERT_TRUE(killed) << "not killed";
  EXPECT_LT(warning->id, killed->id);
  EXPECT_EQ(killed->reason(), "timeout");
  EXPECT_EQ(warning->body.at("eventData").at("onTimeout"), "kill");
  // A deadline shorter than the warning's lead gets none.
  const std::string quick = create(1);
  ASSERT_FALSE(quick.empty());
  auto q = until_killed(quick);
  EXPECT_TRUE(find(q, quick, "killed"));
  EXPECT_FALSE(find(q, quick, "timeout_warning"));
}

TEST_F(EventsE2E, InitKilledFromOutsideEndsWithReasonDied) {
  const std::string id = create(300);
  ASSERT_FALSE(id.empty());
  std::ifstream init(home() / "sandboxes" / id / "init");
  long pid = 0;
  init >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  auto evs = until_killed(id);
  const Event* killed = find(evs, id, "killed");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->reason(), "died");
}

TEST_F(EventsE2E, CursorResumesAfterARestartAndOtherTeamsSeeNothing) {
  const std::string first = create(300);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + first).result_int(), 204);
  auto before = page("/events?stream=false&cursor=0");
  ASSERT_FALSE(before.empty());
  const std::int64_t cursor = before.back().id;
  EXPECT_TRUE(find(before, first, "killed"));

  // An open stream ends cleanly (its last chunk) when abxd stops.
  {
    SseStream s(port(), key(), "/events");
    ASSERT_TRUE(s.wait_raw(": cursor "));
    EXPECT_EQ(abxd().stop(), 0);
    EXPECT_TRUE(s.wait_ended(20s));
    EXPECT_TRUE(s.ended_ok()) << s.raw();
  }
  ASSERT_TRUE(abxd().start());
  const std::string second = create(300);
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + second).result_int(), 204);

  // The JSON page and the stream (Last-Event-ID) from the old cursor: only the newer events.
  auto after = page("/events?stream=false&cursor=" + std::to_string(cursor));
  ASSERT_FALSE(after.empty());
  for (const auto& e : after) {
    EXPECT_GT(e.id, cursor);
    EXPECT_NE(e.sandbox(), first);
  }
  EXPECT_TRUE(find(after, second, "created"));
  EXPECT_TRUE(find(after, second, "killed"));
  SseStream s(port(), key(), "/events", std::to_string(cursor));
  ASSERT_TRUE(s.wait([&](const auto& evs) { return find(evs, second, "killed") != nullptr; }))
      << s.raw();
  for (const auto& e : s.events()) EXPECT_GT(e.id, cursor);

  // Another team's key: none of them, in every form.
  ASSERT_EQ(admin({"teams", "create", "team-b"}).second, 0);
  auto [b, rc] = admin({"keys", "create", "--name", "b", "--team", "team-b"});
  ASSERT_EQ(rc, 0);
  const std::string key_b = b.substr(b.rfind('\n') + 1);
  EXPECT_TRUE(page("/events?stream=false&cursor=0", key_b).empty());
  EXPECT_TRUE(page("/events/sandboxes?limit=100", key_b).empty());
  EXPECT_TRUE(page("/events/sandboxes/" + second, key_b).empty());
  SseStream sb(port(), key_b, "/events?cursor=0");
  ASSERT_TRUE(sb.wait_raw(": cursor 0"));
  // Its own sandbox's events do reach it, and nothing of the first team's came before them.
  auto rb = api(bhttp::verb::post, "/sandboxes", R"({"templateID":"base","timeout":300})", key_b);
  ASSERT_EQ(rb.result_int(), 201) << rb.body();
  const std::string mine(json::parse(rb.body()).at("sandboxID").as_string());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + mine, {}, key_b).result_int(), 204);
  ASSERT_TRUE(sb.wait([&](const auto& evs) { return find(evs, mine, "killed") != nullptr; }));
  for (const auto& e : sb.events()) EXPECT_EQ(e.sandbox(), mine);
}

TEST_F(EventsE2E, PauseResumeAndTimeoutPauseCarryTheirReason) {
  const std::string id = create(300);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/pause").result_int(), 204);
  auto r = api(bhttp::verb::post, "/sandboxes/" + id + "/resume", R"({"timeout":300})");
  ASSERT_EQ(r.result_int(), 201) << r.body();
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
  auto evs = until_killed(id);
  const Event* paused = find(evs, id, "paused");
  const Event* resumed = find(evs, id, "resumed");
  const Event* killed = find(evs, id, "killed");
  ASSERT_TRUE(paused && resumed && killed);
  EXPECT_EQ(paused->reason(), "requested");
  EXPECT_LT(paused->id, resumed->id);
  EXPECT_LT(resumed->id, killed->id);
  EXPECT_EQ(killed->reason(), "killed");

  // autoPause (lifecycle.onTimeout "pause"): the deadline pauses, with reason timeout, and the
  // warning says so.
  const std::string sleeper = create(8, R"(,"autoPause":true)");  // 6 s to arm the warning
  ASSERT_FALSE(sleeper.empty());
  auto s = until_killed(sleeper, "paused");
  const Event* p = find(s, sleeper, "paused");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->reason(), "timeout");
  EXPECT_FALSE(find(s, sleeper, "killed"));
  const Event* w = find(s, sleeper, "timeout_warning");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->body.at("eventData").at("onTimeout"), "pause");
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + sleeper).result_int(), 204);
}

TEST_F(EventsE2E, ASandboxThatDiedWhileAbxdWasDownEndsWithReasonLost) {
  const std::string id = create(300);
  ASSERT_FALSE(id.empty());
  long pid = 0;
  {
    std::ifstream init(home() / "sandboxes" / id / "init");
    init >> pid;
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(abxd().stop(), 0);  // SIGTERM: the sandbox is left running for the next abxd
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_TRUE(abxd().start());
  auto evs = until_killed(id);
  const Event* killed = find(evs, id, "killed");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->reason(), "lost");
  EXPECT_TRUE(killed->body.at("eventData").as_object().contains("detail"));
}

TEST_F(EventsE2E, StreamsAreLimited) {
  // --max-event-streams-per-team 3: a team's fourth concurrent stream is refused (429);
  // --max-event-streams 4: so is a fifth of all teams together. The JSON form is not.
  const auto refused = [&](const std::string& with_key) {
    auto req = http::make_request(bhttp::verb::get, "/events");
    req.erase(bhttp::field::content_type);
    req.set("X-API-KEY", with_key);
    req.set(bhttp::field::accept, "text/event-stream");
    auto r = http::fetch("127.0.0.1", port(), std::move(req), 10s);
    EXPECT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r.ok() ? r->result_int() : 0, 429u) << (r.ok() ? r->body() : "");
    return r.ok() && r->result_int() == 429;
  };
  std::vector<std::unique_ptr<SseStream>> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(std::make_unique<SseStream>(port(), key(), "/events"));
    ASSERT_TRUE(open.back()->wait_raw(": cursor "));
  }
  EXPECT_TRUE(refused(key()));
  ASSERT_EQ(admin({"teams", "create", "team-s"}).second, 0);
  auto [b, rc] = admin({"keys", "create", "--name", "s", "--team", "team-s"});
  ASSERT_EQ(rc, 0);
  const std::string key_s = b.substr(b.rfind('\n') + 1);
  open.push_back(std::make_unique<SseStream>(port(), key_s, "/events"));
  ASSERT_TRUE(open.back()->wait_raw(": cursor "));  // another team's first: allowed
  EXPECT_TRUE(refused(key_s));                      // the fifth of all
  // A closed stream gives its slot back (once abxd notices the peer went away).
  open.erase(open.begin());
  bool reopened = false;
  for (int i = 0; i < 100 && !reopened; ++i) {
    SseStream again(port(), key(), "/events");
    reopened = again.wait_raw(": cursor ", 2s);
    if (!reopened) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(reopened);
  EXPECT_EQ(api(bhttp::verb::get, "/events?stream=false").result_int(), 200);
  EXPECT_EQ(api(bhttp::verb::get, "/events?stream=false&limit=1001").result_int(), 400);
}

TEST_F(EventsE2E, WebhooksDeliverSignedEventsWithRetries) {
  Receiver rx(/*fail_first=*/1);  // the first delivery attempt fails: a retry must follow
  const std::string secret = "whsec-test-0123456789";
  const std::string url = "http://127.0.0.1:" + std::to_string(rx.port()) + "/hook?src=abx";
  auto r = api(
      bhttp::verb::post, "/events/webhooks",
      R"({"name":"test hook","url":")" + url +
          R"(","enabled":true,"events":["sandbox.lifecycle.created","sandbox.lifecycle.killed"],"signatureSecret":")" +
          secret + R"("})");
  ASSERT_EQ(r.result_int(), 201) << r.body();
  auto hook = json::parse(r.body()).as_object();
  const std::string hook_id(hook.at("id").as_string());
  EXPECT_EQ(S(hook.at("url")), url);
  EXPECT_EQ(hook.at("teamID"), "default");
  EXPECT_EQ(hook.at("enabled"), true);
  EXPECT_FALSE(hook.contains("signatureSecret"));
  EXPECT_EQ(hook.at("events").as_array().size(), 2u);
  auto list = api(bhttp::verb::get, "/events/webhooks");
  ASSERT_EQ(list.result_int(), 200);
  ASSERT_EQ(json::parse(list.body()).as_array().size(), 1u);
  EXPECT_EQ(api(bhttp::verb::get, "/events/webhooks/" + hook_id).result_int(), 200);

  // Bad registrations.
  const auto post = [&](const std::string& body) {
    return api(bhttp::verb::post, "/events/webhooks", body).result_int();
  };
  EXPECT_EQ(post(R"({"url":"ftp://127.0.0.1/x","signatureSecret":"s"})"), 400);
  EXPECT_EQ(post(R"({"url":"http://u:p@127.0.0.1/x","signatureSecret":"s"})"), 400);
  EXPECT_EQ(post(R"({"url":")" + url + R"("})"), 400);  // no secret
  EXPECT_EQ(post(R"({"url":")" + url + R"(","signatureSecret":"s","events":["nope"]})"), 400);
  EXPECT_EQ(post(R"({"url":")" + url + R"(","signatureSecret":"s","color":"red"})"), 400);
  EXPECT_EQ(post("[1]"), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/events/webhooks/nothex").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/events/webhooks/" + std::string(32, '0')).result_int(), 404);

  const std::string id = create(300);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/pause").result_int(), 204);  // filtered
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);

  // Delivered: created (after one failed attempt) and killed, each answered 200 once.
  auto delivered = [&](const std::vector<Receiver::Hit>& hits, const std::string& type) {
    for (const auto& h : hits) {
      if (h.headers.at("x-test-answered") != "200") continue;
      auto b = json::parse(h.body).as_object();
      if (S(b.at("sandboxId")) == id && S(b.at("type")) == "sandbox.lifecycle." + type) return true;
    }
    return false;
  };
  ASSERT_TRUE(rx.wait([&](const auto& hits) {
    return delivered(hits, "created") && delivered(hits, "killed");
  })) << rx.hits().size()
      << " requests";
  auto hits = rx.hits();
  ASSERT_GE(hits.size(), 3u);
  EXPECT_EQ(hits[0].headers.at("x-test-answered"), "500");
  std::map<std::string, std::vector<const Receiver::Hit*>> by_delivery;
  for (const auto& h : hits) {
    EXPECT_EQ(h.target, "/hook?src=abx");
    EXPECT_EQ(h.headers.at("content-type"), "application/json");
    EXPECT_EQ(h.headers.at("e2b-webhook-id"), hook_id);
    EXPECT_EQ(h.headers.at("e2b-signature-version"), "v1");
    // Both signatures verify with the secret; a wrong secret does not.
    EXPECT_EQ(h.headers.at("e2b-signature"), e2b_sig(secret, h.body));
    const std::string ts = h.headers.at("abx-timestamp");
    EXPECT_EQ(h.headers.at("abx-signature"), "v1=" + hmac_hex(secret, ts + "." + h.body));
    EXPECT_NE(h.headers.at("abx-signature"), "v1=" + hmac_hex(secret + "x", ts + "." + h.body));
    auto b = json::parse(h.body).as_object();
    EXPECT_NE(b.at("type"), "sandbox.lifecycle.paused");  // not in the webhook's events
    EXPECT_EQ(b.at("sandboxTeamId"), "default");
    by_delivery[h.headers.at("e2b-delivery-id")].push_back(&h);
  }
  // The failed delivery was retried under the same delivery id, as attempt 2.
  const auto& first = by_delivery.at(hits[0].headers.at("e2b-delivery-id"));
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0]->headers.at("abx-delivery-attempt"), "1");
  EXPECT_EQ(first[1]->headers.at("abx-delivery-attempt"), "2");
  EXPECT_EQ(first[0]->body, first[1]->body);
  for (const auto& h : hits) {
    auto b = json::parse(h.body).as_object();
    if (b.at("type") == "sandbox.lifecycle.killed") {
      EXPECT_EQ(b.at("eventData").at("reason"), "killed");
    }
  }

  // Another team sees none of it and cannot touch it.
  ASSERT_EQ(admin({"teams", "create", "team-w"}).second, 0);
  auto [b, rc] = admin({"keys", "create", "--name", "w", "--team", "team-w"});
  ASSERT_EQ(rc, 0);
  const std::string key_w = b.substr(b.rfind('\n') + 1);
  auto other = api(bhttp::verb::get, "/events/webhooks", {}, key_w);
  ASSERT_EQ(other.result_int(), 200);
  EXPECT_TRUE(json::parse(other.body()).as_array().empty());
  EXPECT_EQ(api(bhttp::verb::get, "/events/webhooks/" + hook_id, {}, key_w).result_int(), 404);
  EXPECT_EQ(api(bhttp::verb::delete_, "/events/webhooks/" + hook_id, {}, key_w).result_int(), 404);
  // ... and its sandboxes' events never reach this team's webhook.
  auto ow = api(bhttp::verb::post, "/sandboxes", R"({"templateID":"base","timeout":300})", key_w);
  ASSERT_EQ(ow.result_int(), 201) << ow.body();
  const std::string theirs(json::parse(ow.body()).at("sandboxID").as_string());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + theirs, {}, key_w).result_int(), 204);

  // Disabled: no delivery. Then enabled again: the next sandbox's events arrive (and none of
  // the disabled period's, which were never queued, nor the other team's).
  auto patch = api(bhttp::verb::patch, "/events/webhooks/" + hook_id, R"({"enabled":false})");
  ASSERT_EQ(patch.result_int(), 200) << patch.body();
  EXPECT_EQ(json::parse(patch.body()).at("enabled"), false);
  const std::string quiet = create(300);
  ASSERT_FALSE(quiet.empty());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + quiet).result_int(), 204);
  patch = api(bhttp::verb::patch, "/events/webhooks/" + hook_id,
              R"({"enabled":true,"events":["sandbox.lifecycle.killed"]})");
  ASSERT_EQ(patch.result_int(), 200) << patch.body();
  const std::string loud = create(300);
  ASSERT_FALSE(loud.empty());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + loud).result_int(), 204);
  ASSERT_TRUE(rx.wait([&](const auto& hs) {
    for (const auto& h : hs)
      if (S(json::parse(h.body).at("sandboxId")) == loud) return true;
    return false;
  }));
  for (const auto& h : rx.hits()) {
    auto body = json::parse(h.body).as_object();
    EXPECT_NE(S(body.at("sandboxId")), quiet);
    EXPECT_NE(S(body.at("sandboxId")), theirs);
    if (S(body.at("sandboxId")) == loud) {
      EXPECT_EQ(body.at("type"), "sandbox.lifecycle.killed");
    }
  }

  EXPECT_EQ(api(bhttp::verb::delete_, "/events/webhooks/" + hook_id).result_int(), 204);
  EXPECT_EQ(api(bhttp::verb::get, "/events/webhooks/" + hook_id).result_int(), 404);
}

TEST_F(EventsE2E, AbxdStoppingWithKillSandboxesSendsTheShutdownEndsToWebhooks) {
  // The first attempt fails: only the drain at stop (which waits for the retry due 0.2 s
  // later) gets the end delivered before abxd exits.
  Receiver rx(/*fail_first=*/1);
  auto r = api(bhttp::verb::post, "/events/webhooks",
               R"({"url":"http://127.0.0.1:)" + std::to_string(rx.port()) +
                   R"(/","events":["sandbox.lifecycle.killed"],"signatureSecret":"k"})");
  ASSERT_EQ(r.result_int(), 201) << r.body();
  const std::string id = create(300);
  ASSERT_FALSE(id.empty());
  // The same home under an abxd that kills its sandboxes when it stops.
  EXPECT_EQ(abxd().stop(), 0);
  {
    auto args = abxd_args();
    args.push_back("--kill-sandboxes");
    testing::Abxd killer(home(), args);
    ASSERT_TRUE(killer.start());
    EXPECT_EQ(killer.stop(), 0);
  }
  // The drain at stop delivered it before abxd exited.
  auto hits = rx.hits();
  bool seen = false;
  for (const auto& h : hits) {
    auto b = json::parse(h.body).as_object();
    if (S(b.at("sandboxId")) != id || h.headers.at("x-test-answered") != "200") continue;
    EXPECT_EQ(b.at("type"), "sandbox.lifecycle.killed");
    EXPECT_EQ(b.at("eventData").at("reason"), "shutdown");
    seen = true;
  }
  EXPECT_TRUE(seen) << hits.size() << " deliveries";
  ASSERT_TRUE(abxd().start());
  auto evs = page("/sandboxes/" + id + "/events?stream=false&cursor=0");
  const Event* killed = find(evs, id, "killed");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->reason(), "shutdown");
}

}  // namespace
}  // namespace abx::e2e
