// abxd end to end: the real daemon, real sandboxes (namespaces, cgroups, abx-envd as init), the
// demo template's command server reached through the proxy. Needs root (CI runs as root).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "abx/auth/signing.h"
#include "abx/base/base64.h"
#include "abx/http/client.h"
#include "abx/runtime/cgroup.h"
#include "abx/testing/abxd.h"

namespace abx::e2e {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
namespace fs = std::filesystem;

// The loop devices backed by files under `dir`, as "<device> on <backing file>".
std::vector<std::string> loops_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
    std::ifstream f(e.path() / "loop/backing_file");
    std::string backing;
    std::getline(f, backing);
    if (backing.starts_with(dir + "/"))
      out.push_back(e.path().filename().string() + " on " + backing);
  }
  return out;
}

// What sandbox `id` of `home` puts on the host: its state, run and checkpoint directories, its
// cgroups, loop devices backed by files of its state directory and mounts under it.
std::vector<std::string> host_traces(const fs::path& home, const std::string& id) {
  std::vector<std::string> out;
  for (const fs::path& p : {home / "sandboxes" / id, home / "run" / id, home / "checkpoints" / id})
    if (fs::exists(p)) out.push_back(p.string());
  if (auto layout = runtime::CgroupLayout::detect(); layout.ok()) {
    const auto cgroups = runtime::SandboxCgroups::existing(*layout, "abx", id);
    for (const auto& d : cgroups.dirs())
      if (fs::exists(d)) out.push_back(d);
  }
  const std::string state = (home / "sandboxes" / id).string();
  for (auto& l : loops_under(state)) out.push_back(std::move(l));
  std::ifstream mi("/proc/self/mountinfo");
  for (std::string line; std::getline(mi, line);)
    if (line.find(state + "/") != std::string::npos) out.push_back("mount " + line);
  return out;
}

// host_traces of every id in `ids`, after waiting (up to 30 s) for them to go: a teardown runs
// after its DELETE answered, and a loop device clears itself after its last mount is gone.
std::vector<std::string> traces_left(const fs::path& home, const std::vector<std::string>& ids) {
  std::vector<std::string> all;
  for (int i = 0; i < 600; ++i) {
    all.clear();
    for (const auto& id : ids)
      for (auto& t : host_traces(home, id)) all.push_back(std::move(t));
    if (all.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return all;
}

// Whether `pid` runs (exists and is not a zombie).
bool runs(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(f)), {});
  auto close = all.rfind(')');
  return close != std::string::npos && close + 2 < all.size() && all[close + 2] != 'Z';
}

class AbxdE2E : public testing::AbxdFixture {
 protected:
  AbxdE2E() : AbxdFixture("abxd-e2e") {}
  void start() { ASSERT_TRUE(abxd().start()); }

  http::Response api(bhttp::verb verb, const std::string& target, const std::string& body = {},
                     const std::string& key = "<default>") {
    auto req = http::make_request(verb, target, body);
    if (body.empty() && verb != bhttp::verb::post) req.erase(bhttp::field::content_type);
    if (key == "<default>") {
      req.set("X-API-KEY", abxd().api_key());
    } else if (!key.empty()) {
      req.set("X-API-KEY", key);
    }
    auto r = http::fetch("127.0.0.1", abxd().port(), std::move(req), std::chrono::seconds(30));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : http::Response{};
  }
  // A request to `port` inside sandbox `id`, routed by the SDK's headers.
  http::Response sandbox_call(const std::string& id, int port, bhttp::verb verb,
                              const std::string& target, const std::string& body,
                              const std::string& token) {
    auto req = http::make_request(verb, target, body);
    req.set("E2b-Sandbox-Id", id);
    req.set("E2b-Sandbox-Port", std::to_string(port));
    if (!token.empty()) req.set("X-Access-Token", token);
    auto r = http::fetch("127.0.0.1", abxd().port(), std::move(req), std::chrono::seconds(30));
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : http::Response{};
  }
  json::object create(const std::string& body) {
    auto r = api(bhttp::verb::post, "/sandboxes", body);
    EXPECT_EQ(r.result_int(), 201) << r.body();
    auto v = json::parse(r.body());
    return v.is_object() ? v.as_object() : json::object{};
  }
  // The command server starts just after envd; wait (bounded) until it answers.
  http::Response call_demo(const std::string& id, const std::string& token,
                           const std::string& body) {
    http::Response r;
    for (int i = 0; i < 200; ++i) {
      r = sandbox_call(id, 49982, bhttp::verb::post, "/commands/demo", body, token);
      if (r.result_int() != 502) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return r;
  }
};

TEST_F(AbxdE2E, MainJobCreateASandboxAndCallACommand) {
  auto sb = create(R"({"templateID":"demo","timeout":120,"metadata":{"owner":"e2e"}})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  EXPECT_EQ(id.size(), 20u);
  EXPECT_EQ(sb.at("clientID"), "6532622b");
  EXPECT_EQ(sb.at("envdVersion"), "0.6.4");
  EXPECT_EQ(sb.at("templateID"), "demo");

  auto r = call_demo(id, token, R"({"x":42,"y":"world"})");
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r.body(), R"({"result":"42: world"})");

  // Discovery through the proxy, with the same credential.
  auto list = sandbox_call(id, 49982, bhttp::verb::get, "/commands", "", token);
  EXPECT_EQ(list.result_int(), 200);
  EXPECT_NE(list.body().find(R"("name":"demo")"), std::string::npos);

  // envd answers too.
  EXPECT_EQ(sandbox_call(id, 49983, bhttp::verb::get, "/health", "", token).result_int(), 204);

  auto info = api(bhttp::verb::get, "/sandboxes/" + id);
  ASSERT_EQ(info.result_int(), 200);
  auto iv = json::parse(info.body());
  EXPECT_EQ(iv.at("state"), "running");
  EXPECT_EQ(iv.at("metadata").at("owner"), "e2e");

  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
  auto again = api(bhttp::verb::delete_, "/sandboxes/" + id);
  EXPECT_EQ(again.result_int(), 404);
  EXPECT_EQ(json::parse(again.body()).at("code"), 404);
  // Gone from the proxy as well.
  EXPECT_EQ(sandbox_call(id, 49983, bhttp::verb::get, "/health", "", token).result_int(), 502);
}

// The JS SDK from 2.46 creates with POST /v2/sandboxes (no `secure` field any more) and
// connects with POST /v2/sandboxes/{id}/connect; the shapes are those of the v1 routes.
TEST_F(AbxdE2E, V2CreateAndConnectRoutesOfNewerSdks) {
  auto r = api(bhttp::verb::post, "/v2/sandboxes", R"({"templateID":"base","timeout":60})");
  ASSERT_EQ(r.result_int(), 201) << r.body();
  auto sb = json::parse(r.body()).as_object();
  std::string id(sb.at("sandboxID").as_string());
  EXPECT_EQ(sb.at("templateID"), "base");
  EXPECT_EQ(sb.at("clientID"), "6532622b");
  ASSERT_TRUE(sb.contains("envdAccessToken"));  // secure is the default when the field is absent
  std::string token(sb.at("envdAccessToken").as_string());
  EXPECT_EQ(sandbox_call(id, 49983, bhttp::verb::get, "/health", "", token).result_int(), 204);

  auto c = api(bhttp::verb::post, "/v2/sandboxes/" + id + "/connect", R"({"timeout":120})");
  ASSERT_EQ(c.result_int(), 200) << c.body();
  EXPECT_EQ(json::parse(c.body()).at("sandboxID").as_string(), id);
  EXPECT_EQ(json::parse(c.body()).at("envdAccessToken").as_string(), token);

  auto missing = api(bhttp::verb::post, "/v2/sandboxes/" + std::string(20, 'a') + "/connect", "{}");
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_EQ(json::parse(missing.body()).at("code"), 404);
  // Only create and connect live under /v2 for POST.
  EXPECT_EQ(
      api(bhttp::verb::post, "/v2/sandboxes/" + id + "/timeout", R"({"timeout":5})").result_int(),
      404);
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
}

// abxd without the sandbox pool (on by default): every create boots its own sandbox, so a
// test can count the steps, layers and sandboxes of each.
class AbxdNoPoolE2E : public AbxdE2E {
 protected:
  std::vector<std::string> abxd_args() const override { return {"--sandbox-pool", "0"}; }
};

// GET /metrics (issue 44): where successful creates spent their time, step by step, in
// Prometheus' text format; a failed create counts in no step.
TEST_F(AbxdNoPoolE2E, MetricsShowEachCreateStep) {
  EXPECT_EQ(api(bhttp::verb::get, "/metrics", "", "").result_int(), 401);
  // A series' value, or -1 when the series is absent.
  auto value = [](const std::string& text, const std::string& series) -> double {
    auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  };
  auto before = api(bhttp::verb::get, "/metrics");
  ASSERT_EQ(before.result_int(), 200);
  EXPECT_EQ(before[bhttp::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(value(before.body(), "abx_create_seconds_count"), 0);

  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i)
    ids.emplace_back(create(R"({"templateID":"base","timeout":60})").at("sandboxID").as_string());
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes", R"({"templateID":"nope"})").result_int(), 404);

  auto after = api(bhttp::verb::get, "/metrics");
  ASSERT_EQ(after.result_int(), 200);
  const std::string& m = after.body();
  EXPECT_EQ(value(m, "abx_create_seconds_count"), 2) << m;
  EXPECT_EQ(value(m, "abx_create_seconds_bucket{le=\"+Inf\"}"), 2) << m;
  EXPECT_EQ(value(m, "abx_sandboxes_live"), 2) << m;
  // Every step of the path, abxd's and the runtime's, was timed once per create.
  for (const char* step :
       {"admit", "image", "run_dir", "config", "state_dir", "rw_layer", "userns_slot", "cgroups",
        "plan", "clone", "child_ready", "mounts", "hold_slot", "init_record", "cgroup_attach",
        "netns", "release", "envd_ready", "record"}) {
    std::string sel = std::string("{step=\"") + step + "\"}";
    EXPECT_EQ(value(m, "abx_create_step_seconds_count" + sel), 2) << step << "\n" << m;
    double sum = value(m, "abx_create_step_seconds_sum" + sel);
    EXPECT_GE(sum, 0) << step;
    // The longest of two is at least their mean.
    EXPECT_GE(value(m, "abx_create_step_max_seconds" + sel), sum / 2 - 1e-9) << step;
  }
  // The steps (these and any other, veth with a network) cover the create: their sums add up
  // to the histogram's (both end at the last mark).
  double steps = 0;
  std::istringstream lines(m);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("abx_create_step_seconds_sum{"))
      steps += std::stod(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_NEAR(steps, value(m, "abx_create_seconds_sum"), 1e-6) << m;
  for (const auto& id : ids)
    EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
}

// The writable-layer pool (issue 44; docs/abxd.md, "The layer pool"): the first create of a
// size makes its layer and from then on the pool keeps --layer-pool (2) ready, which the next
// creates take; abxd's SIGTERM and its kill -9 each leave no mount and no loop device of the
// home, and the next start removes the files a killed abxd left.
TEST_F(AbxdNoPoolE2E, LayerPoolKeepsLayersReadyAndLeavesNothingOnStopOrCrash) {
  auto value = [](const std::string& text, const std::string& series) -> double {
    auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  };
  auto metric = [&](const std::string& series) {
    return value(api(bhttp::verb::get, "/metrics").body(), series);
  };
  auto wait_ready = [&](double n) {
    for (int i = 0; i < 400 && metric("abx_layer_pool_ready") != n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return metric("abx_layer_pool_ready") == n;
  };
  const std::string home_path = home().string();
  // Loop devices backed by files of this home, and mounts under it (bounded waits: a loop
  // device clears itself asynchronously after its last mount is gone).
  auto loops = [&] { return loops_under(home_path).size(); };
  auto mounts = [&] {
    int n = 0;
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);)
      if (line.find(home_path + "/sandboxes/") != std::string::npos) ++n;
    return n;
  };
  auto settles_at = [&](std::size_t want) {
    for (int i = 0; i < 200 && (loops() != want || mounts() != 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return loops() == want && mounts() == 0;
  };
  const fs::path pool = home() / "sandboxes" / ".rw-pool";
  auto files = [&] {
    std::error_code ec;
    int n = 0;
    for (auto it = fs::directory_iterator(pool, ec); !ec && it != fs::directory_iterator(); ++it)
      ++n;
    return n;
  };

  EXPECT_EQ(metric("abx_layer_pool_ready"), 0);
  std::string first(create(R"({"templateID":"base","timeout":60})").at("sandboxID").as_string());
  EXPECT_EQ(metric("abx_layer_pool_takes_total{result=\"miss\"}"), 1);
  ASSERT_TRUE(wait_ready(2));
  std::string second(create(R"({"templateID":"base","timeout":60})").at("sandboxID").as_string());
  EXPECT_EQ(metric("abx_layer_pool_takes_total{result=\"hit\"}"), 1);
  // The taken layer is the sandbox's: its file in the sandbox's state dir, its mount there.
  EXPECT_TRUE(fs::exists(home() / "sandboxes" / second / "rw.img"));
  for (const auto& id : {first, second})
    EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
  ASSERT_TRUE(wait_ready(2));
  // Ready layers are mounted nowhere; each has its loop device and its file.
  EXPECT_TRUE(settles_at(2)) << loops() << " loop devices, " << mounts() << " mounts";
  EXPECT_EQ(files(), 2);

  EXPECT_EQ(abxd().stop(), 0);
  EXPECT_TRUE(settles_at(0)) << loops() << " loop devices, " << mounts() << " mounts";
  EXPECT_EQ(files(), 0);

  start();
  std::string third(create(R"({"templateID":"base","timeout":60})").at("sandboxID").as_string());
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + third).result_int(), 204);
  ASSERT_TRUE(wait_ready(2));
  abxd().kill9();
  // The kernel closed the dead abxd's fds: its ready layers' mounts and loop devices are gone.
  // (The deleted sandbox's layer may still be mounted: a teardown cut short by the kill, which
  // the next start finishes.)
  const std::string pool_path = pool.string();
  for (int i = 0; i < 200 && !loops_under(pool_path).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(loops_under(pool_path), std::vector<std::string>{});
  EXPECT_EQ(files(), 2);  // only the files remain, until the next start
  start();
  EXPECT_TRUE(settles_at(0)) << loops() << " loop devices, " << mounts() << " mounts";
  EXPECT_EQ(files(), 0);
  EXPECT_EQ(metric("abx_layer_pool_ready"), 0);  // kept warm again only once a create takes one
}

// The sandbox pool (issue 44; docs/abxd.md, "The sandbox pool"), on: abxd --sandbox-pool 2.
class SandboxPoolE2E : public AbxdE2E {
 protected:
  std::vector<std::string> abxd_args() const override { return {"--sandbox-pool", "2"}; }
  double metric(const std::string& series) {
    const std::string text = api(bhttp::verb::get, "/metrics").body();
    auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }
  bool pool_ready(double n) {
    for (int i = 0; i < 400 && metric("abx_sandbox_pool_ready") != n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return metric("abx_sandbox_pool_ready") == n;
  }
  // The sandboxes runtime keeps state for under this home (pooled ones included).
  std::set<std::string> state_dirs() {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(home() / "sandboxes", ec)) {
      const std::string name = e.path().filename().string();
      if (!name.starts_with(".")) out.insert(name);
    }
    return out;
  }
  std::set<std::string> run_dirs() {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(home() / "run", ec))
      out.insert(e.path().filename().string());
    return out;
  }
};

// The first create of a template misses and from then on two sandboxes of it are kept booted:
// a create takes one (its command server answers the first call, no retry), each is handed out
// once, with an id, token and environment of its own (a request that spells out the default
// network too); a create asking for what a pooled one was not booted with (envVars) boots its
// own. SIGTERM destroys the pooled ones; after kill -9 the
// next start removes them (sandbox state and run directories alike).
TEST_F(SandboxPoolE2E, PooledSandboxesServeCreatesOnceEachAndLeaveNothingOnStopOrCrash) {
  EXPECT_EQ(metric("abx_sandbox_pool_ready"), 0);
  auto first = create(R"({"templateID":"demo","timeout":60})");
  EXPECT_EQ(metric("abx_sandbox_pool_takes_total{result=\"miss\"}"), 1);
  ASSERT_TRUE(pool_ready(2));
  std::set<std::string> pooled = state_dirs();
  pooled.erase(std::string(first.at("sandboxID").as_string()));
  ASSERT_EQ(pooled.size(), 2u);

  std::set<std::string> ids = {std::string(first.at("sandboxID").as_string())};
  std::set<std::string> tokens = {std::string(first.at("envdAccessToken").as_string())};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(pool_ready(2)) << i;
    auto sb = create(R"({"templateID":"demo","timeout":60,"metadata":{"n":"x"}})");
    const std::string id(sb.at("sandboxID").as_string());
    const std::string token(sb.at("envdAccessToken").as_string());
    // The first is one of the two stocked before; the second one booted after that take.
    if (i == 0) {
      EXPECT_TRUE(pooled.contains(id)) << id << " is not one of the pooled";
    }
    EXPECT_TRUE(ids.insert(id).second) << id << " handed out twice";
    EXPECT_TRUE(tokens.insert(token).second) << "a token handed out twice";
    // Ready when taken: the command server answers at once.
    auto r = sandbox_call(id, 49982, bhttp::verb::post, "/commands/demo", R"({"x":42,"y":"pool"})",
                          token);
    EXPECT_EQ(r.result_int(), 200) << r.body();
    EXPECT_NE(r.body().find("42: pool"), std::string::npos) << r.body();
    // The record is the create's: its metadata, its deadline from now.
    auto info = api(bhttp::verb::get, "/sandboxes/" + id);
    EXPECT_EQ(info.result_int(), 200);
    EXPECT_NE(info.body().find(R"("n":"x")"), std::string::npos) << info.body();
  }
  // A request that spells out the default network (allowInternetAccess: true) is served too.
  ASSERT_TRUE(pool_ready(2));
  const std::set<std::string> stocked = state_dirs();
  auto spelled = create(R"({"templateID":"demo","timeout":60,"allowInternetAccess":true})");
  const std::string spelled_id(spelled.at("sandboxID").as_string());
  EXPECT_TRUE(stocked.contains(spelled_id)) << "not a pooled sandbox";
  ids.insert(spelled_id);
  EXPECT_EQ(metric("abx_sandbox_pool_takes_total{result=\"hit\"}") +
                metric("abx_sandbox_pool_takes_total{result=\"wait\"}"),
            3);
  // envVars: the pooled ones were booted without them, so this create boots its own.
  ASSERT_TRUE(pool_ready(2));
  const std::set<std::string> before = state_dirs();
  auto own = create(R"({"templateID":"demo","timeout":60,"envVars":{"POOLED":"no"}})");
  const std::string own_id(own.at("sandboxID").as_string());
  EXPECT_FALSE(before.contains(own_id)) << "a pooled sandbox for a create with envVars";
  EXPECT_EQ(metric("abx_sandbox_pool_takes_total{result=\"hit\"}") +
                metric("abx_sandbox_pool_takes_total{result=\"wait\"}"),
            3);
  EXPECT_EQ(metric("abx_sandbox_pool_ready"), 2);
  ids.insert(own_id);
  // allowInternetAccess: false is not the default network: never a pooled sandbox (which has
  // the internet), whatever the network object says.
  for (const char* body : {R"({"templateID":"demo","timeout":60,"allowInternetAccess":false})",
                           R"({"templateID":"demo","timeout":60,"allowInternetAccess":false,)"
                           R"("network":{"allowPublicTraffic":true}})"}) {
    ASSERT_TRUE(pool_ready(2));
    const std::set<std::string> stocked_now = state_dirs();
    auto closed = create(body);
    const std::string closed_id(closed.at("sandboxID").as_string());
    EXPECT_FALSE(stocked_now.contains(closed_id)) << "a pooled sandbox for " << body;
    auto info = api(bhttp::verb::get, "/sandboxes/" + closed_id);
    EXPECT_NE(info.body().find(R"("allowInternetAccess":false)"), std::string::npos) << info.body();
    ids.insert(closed_id);
  }
  EXPECT_EQ(metric("abx_sandbox_pool_takes_total{result=\"hit\"}") +
                metric("abx_sandbox_pool_takes_total{result=\"wait\"}"),
            3);
  EXPECT_EQ(state_dirs().size(), ids.size() + 2);
  for (const auto& id : ids)
    EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);

  // SIGTERM: the pooled ones are destroyed (no create took them; nobody adopts them).
  EXPECT_EQ(abxd().stop(), 0);
  EXPECT_TRUE(state_dirs().empty()) << state_dirs().size() << " sandboxes left";
  EXPECT_TRUE(run_dirs().empty()) << run_dirs().size() << " run directories left";

  // kill -9: they outlive abxd; the next start removes them.
  start();
  EXPECT_EQ(metric("abx_sandbox_pool_ready"), 0);  // stocked again only once a create asks
  auto again = create(R"({"templateID":"demo","timeout":60})");
  const std::string kept(again.at("sandboxID").as_string());
  ASSERT_TRUE(pool_ready(2));
  abxd().kill9();
  EXPECT_EQ(state_dirs().size(), 3u);
  start();
  EXPECT_EQ(state_dirs(), std::set<std::string>{kept});  // the created one is adopted
  EXPECT_EQ(run_dirs(), std::set<std::string>{kept});
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + kept).result_int(), 204);
}

TEST_F(AbxdE2E, AuthIsRequiredAndTokensDoNotCrossSandboxes) {
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes", "", "").result_int(), 401);
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes", "", "e2b_0000").result_int(), 401);
  auto a = create(R"({"templateID":"demo"})");
  auto b = create(R"({"templateID":"demo"})");
  std::string ida(a.at("sandboxID").as_string()), idb(b.at("sandboxID").as_string());
  std::string ta(a.at("envdAccessToken").as_string());
  ASSERT_EQ(call_demo(ida, ta, R"({"x":1})").result_int(), 200);
  // A's token on B: refused at the proxy, for envd and the command server alike.
  EXPECT_EQ(sandbox_call(idb, 49983, bhttp::verb::get, "/health", "", ta).result_int(), 401);
  EXPECT_EQ(sandbox_call(idb, 49982, bhttp::verb::get, "/commands", "", ta).result_int(), 401);
  EXPECT_EQ(sandbox_call(ida, 49983, bhttp::verb::get, "/health", "", "").result_int(), 401);
  // Other ports of a template without the `ports` capability are private.
  EXPECT_EQ(sandbox_call(ida, 8080, bhttp::verb::get, "/", "", ta).result_int(), 403);
}

// A signed file URL (the SDK's downloadUrl / uploadUrl) carries no X-Access-Token: the proxy
// lets GET/POST /files with a `signature` parameter through to envd, which checks it. Everything
// else, a signature parameter or not, still needs the token at the proxy.
TEST_F(AbxdE2E, SignedFileUrlsPassTheProxyOnlyForEnvdFiles) {
  auto sb = create(R"({"templateID":"demo"})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  auto put = http::make_request(bhttp::verb::post, "/files?path=%2Ftmp%2Fs.txt", "signed",
                                "application/octet-stream");
  put.set("E2b-Sandbox-Id", id);
  put.set("E2b-Sandbox-Port", "49983");
  put.set("X-Access-Token", token);
  auto up = http::fetch("127.0.0.1", abxd().port(), std::move(put), std::chrono::seconds(30));
  ASSERT_TRUE(up.ok()) << up.error().message();
  ASSERT_EQ(up->result_int(), 200) << up->body();
  // v1_ + base64(sha256("path:read:user:token")) without padding, percent-encoded for the query.
  auto sign = [&](const std::string& material) {
    std::string hex = auth::sha256_hex(material), raw;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
      raw += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    std::string sig = "v1_" + base64_encode(raw), q;
    while (sig.back() == '=') sig.pop_back();
    for (char c : sig) q += c == '+' ? "%2B" : c == '/' ? "%2F" : std::string(1, c);
    return q;
  };
  std::string sig = sign("/tmp/s.txt:read::" + token);
  auto r = sandbox_call(id, 49983, bhttp::verb::get, "/files?path=%2Ftmp%2Fs.txt&signature=" + sig,
                        "", "");
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r.body(), "signed");
  // A wrong signature passes the proxy and is refused by envd.
  r = sandbox_call(id, 49983, bhttp::verb::get, "/files?path=%2Ftmp%2Fs.txt&signature=v1_x", "",
                   "");
  EXPECT_EQ(r.result_int(), 401);
  EXPECT_NE(r.body().find("invalid signature"), std::string::npos) << r.body();
  // No signature, another envd route, another port: the proxy's own 401.
  for (auto [port, target] : std::vector<std::pair<int, std::string>>{
           {49983, "/files?path=%2Ftmp%2Fs.txt"},
           {49983, "/health?signature=" + sig},
           {49983, "/files/x?path=%2Ftmp%2Fs.txt&signature=" + sig},
           {49983, "/process.Process/List?signature=" + sig},
           {49982, "/files?path=%2Ftmp%2Fs.txt&signature=" + sig}}) {
    auto verb = target.starts_with("/process.") ? bhttp::verb::post : bhttp::verb::get;
    r = sandbox_call(id, port, verb, target, verb == bhttp::verb::post ? "{}" : "", "");
    EXPECT_EQ(r.result_int(), 401) << port << " " << target;
    EXPECT_NE(r.body().find("missing X-Access-Token"), std::string::npos) << r.body();
  }
}

TEST_F(AbxdE2E, ScopedTokenReachesOnlyItsCommands) {
  auto sb = create(R"({"templateID":"demo"})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  ASSERT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);
  auto minted = api(bhttp::verb::post, "/sandboxes/" + id + "/tokens",
                    R"({"commands":["demo"],"ttlSeconds":600})");
  ASSERT_EQ(minted.result_int(), 201) << minted.body();
  std::string scoped(json::parse(minted.body()).at("token").as_string());
  auto ok = sandbox_call(id, 49982, bhttp::verb::post, "/commands/demo", R"({"x":7})", scoped);
  EXPECT_EQ(ok.result_int(), 200) << ok.body();
  auto list = sandbox_call(id, 49982, bhttp::verb::get, "/commands", "", scoped);
  ASSERT_EQ(list.result_int(), 200);
  EXPECT_EQ(json::parse(list.body()).at("commands").as_array().size(), 1u);
  EXPECT_EQ(sandbox_call(id, 49982, bhttp::verb::post, "/commands/add", R"({"a":1})", scoped)
                .result_int(),
            404);
  // The scoped token never opens envd.
  EXPECT_EQ(sandbox_call(id, 49983, bhttp::verb::get, "/health", "", scoped).result_int(), 401);
}

TEST_F(AbxdE2E, ListFiltersAndPaging) {
  for (int i = 0; i < 3; ++i) {
    create(R"({"templateID":"base","metadata":{"batch":"x","i":")" + std::to_string(i) + R"("}})");
  }
  create(R"({"templateID":"base","metadata":{"batch":"y"}})");
  auto r = api(bhttp::verb::get, "/v2/sandboxes?metadata=batch%3Dx&limit=2");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  auto first = json::parse(r.body()).as_array();
  EXPECT_EQ(first.size(), 2u);
  std::string next(r["X-Next-Token"]);
  ASSERT_FALSE(next.empty());
  auto r2 = api(bhttp::verb::get, "/v2/sandboxes?metadata=batch%3Dx&limit=2&nextToken=" + next);
  ASSERT_EQ(r2.result_int(), 200);
  auto second = json::parse(r2.body()).as_array();
  EXPECT_EQ(second.size(), 1u);
  EXPECT_TRUE(r2["X-Next-Token"].empty());
  for (const auto& s : second) {
    for (const auto& f : first) EXPECT_NE(s.at("sandboxID"), f.at("sandboxID"));
  }
  auto bad = api(bhttp::verb::get, "/v2/sandboxes?limit=0");
  EXPECT_EQ(bad.result_int(), 400);
}

TEST_F(AbxdE2E, TimeoutKillsAndSetTimeoutExtends) {
  auto a = create(R"({"templateID":"base","timeout":1})");
  auto b = create(R"({"templateID":"base","timeout":1})");
  std::string ida(a.at("sandboxID").as_string()), idb(b.at("sandboxID").as_string());
  EXPECT_EQ(
      api(bhttp::verb::post, "/sandboxes/" + idb + "/timeout", R"({"timeout":60})").result_int(),
      204);
  // Poll (bounded) until the reaper has removed A.
  int status = 200;
  for (int i = 0; i < 100 && status == 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = api(bhttp::verb::get, "/sandboxes/" + ida).result_int();
  }
  EXPECT_EQ(status, 404);
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + idb).result_int(), 200);
}

TEST_F(AbxdE2E, PausedSandboxStaysPausedUnderTrafficWithoutAutoResume) {
  auto sb = create(R"({"templateID":"demo"})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  auto info = json::parse(api(bhttp::verb::get, "/sandboxes/" + id).body());
  EXPECT_EQ(info.at("lifecycle"), json::parse(R"({"autoResume":false,"onTimeout":"kill"})"));
  ASSERT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/pause", "{}").result_int(), 204);
  // E2B's proxy answers a paused sandbox with 502 and its id; the sandbox stays paused.
  auto r = sandbox_call(id, 49982, bhttp::verb::post, "/commands/demo", R"({"x":5})", token);
  EXPECT_EQ(r.result_int(), 502) << r.body();
  auto body = json::parse(r.body());
  EXPECT_EQ(std::string(body.at("sandboxId").as_string()), id);
  EXPECT_EQ(body.at("code"), 502);
  EXPECT_EQ(json::parse(api(bhttp::verb::get, "/sandboxes/" + id).body()).at("state"), "paused");
  auto c = api(bhttp::verb::post, "/sandboxes/" + id + "/connect", R"({"timeout":30})");
  EXPECT_EQ(c.result_int(), 201) << c.body();
  EXPECT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
  // Killed, and never known: 502 naming the sandbox too.
  for (const std::string& gone : {id, std::string("abcdefghij0123456789")}) {
    auto k = sandbox_call(gone, 49982, bhttp::verb::post, "/commands/demo", "{}", token);
    EXPECT_EQ(k.result_int(), 502) << k.body();
    EXPECT_EQ(std::string(json::parse(k.body()).at("sandboxId").as_string()), gone);
  }
}

TEST_F(AbxdE2E, LifecycleFieldsAreCheckedAndReported) {
  for (const char* bad :
       {R"({"autoPause":1})", R"({"autoResume":"yes"})", R"({"autoResume":{"enabled":3}})",
        R"({"lifecycle":{"onTimeout":"stop"}})", R"({"lifecycle":[]})"}) {
    EXPECT_EQ(api(bhttp::verb::post, "/sandboxes", bad).result_int(), 400) << bad;
  }
  auto sb = create(R"({"templateID":"demo","lifecycle":{"onTimeout":"pause","autoResume":true}})");
  std::string id(sb.at("sandboxID").as_string());
  auto info = json::parse(api(bhttp::verb::get, "/sandboxes/" + id).body());
  EXPECT_EQ(info.at("lifecycle"), json::parse(R"({"autoResume":true,"onTimeout":"pause"})"));
  // Metrics: start and end are Unix seconds; end may not come before start.
  auto m = api(bhttp::verb::get, "/sandboxes/" + id + "/metrics");
  ASSERT_EQ(m.result_int(), 200) << m.body();
  EXPECT_GE(json::parse(m.body()).as_array().size(), 1u);  // the sample taken at create
  for (const char* q : {"?start=x", "?end=-1", "?start=100&end=50"}) {
    EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id + "/metrics" + q).result_int(), 400) << q;
  }
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id + "/metrics?start=100&end=200").body(), "[]");
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
}

TEST_F(AbxdE2E, PauseFreezesAndTrafficResumes) {
  auto sb = create(R"({"templateID":"demo","autoPause":true,"autoResume":{"enabled":true}})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  ASSERT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/pause", "{}").result_int(), 204);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/pause", "{}").result_int(), 409);
  EXPECT_EQ(json::parse(api(bhttp::verb::get, "/sandboxes/" + id).body()).at("state"), "paused");
  // Traffic to a paused sandbox created with autoResume resumes it.
  auto r = call_demo(id, token, R"({"x":5})");
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(json::parse(api(bhttp::verb::get, "/sandboxes/" + id).body()).at("state"), "running");
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/pause", "{}").result_int(), 204);
  auto c = api(bhttp::verb::post, "/sandboxes/" + id + "/connect", R"({"timeout":30})");
  EXPECT_EQ(c.result_int(), 201) << c.body();
  auto c2 = api(bhttp::verb::post, "/sandboxes/" + id + "/connect", R"({"timeout":30})");
  EXPECT_EQ(c2.result_int(), 200) << c2.body();
}

TEST_F(AbxdE2E, TemplatesCarryCapabilitiesAndBadInputIsRefused) {
  auto t = api(bhttp::verb::get, "/templates/demo");
  ASSERT_EQ(t.result_int(), 200) << t.body();
  auto tv = json::parse(t.body());
  EXPECT_EQ(tv.at("templateID"), "demo");
  EXPECT_TRUE(tv.as_object().contains("capabilities"));
  EXPECT_EQ(api(bhttp::verb::get, "/templates/nope").result_int(), 404);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes", R"({"templateID":"nope"})").result_int(), 404);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes", R"({"templateID":5})").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes", R"({"timeout":-1})").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes", R"({"metadata":{"a":1}})").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes", R"({"a":1,"a":2})").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/..%2fetc").result_int(), 400);
}

TEST_F(AbxdE2E, KillNineAndRestartAdoptsLiveSandboxes) {
  auto sb = create(R"({"templateID":"demo","timeout":300,"autoPause":true})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  ASSERT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);
  abxd().kill9();
  start();
  // The sandbox survived its owner and the new abxd adopted it: same id, same token, usable.
  auto info = api(bhttp::verb::get, "/sandboxes/" + id);
  EXPECT_EQ(info.result_int(), 200) << info.body();
  // Its lifecycle came back from the record.
  EXPECT_EQ(json::parse(info.body()).at("lifecycle"),
            json::parse(R"({"autoResume":false,"onTimeout":"pause"})"));
  EXPECT_EQ(call_demo(id, token, R"({"x":2})").body(), R"({"result":"2: hello"})");
  EXPECT_NE(api(bhttp::verb::get, "/v2/sandboxes").body().find(id), std::string::npos);
  // Killing it after adoption removes everything (its teardown runs after the DELETE answered).
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
  EXPECT_EQ(traces_left(home(), {id}), std::vector<std::string>{});
}

// DELETE (issue 44) answers once nothing of the sandbox runs and the API and the proxy no longer
// know it; its teardown (cgroups, writable layer and its loop device, state and run
// directories) finishes after, on abxd's teardown thread.
TEST_F(AbxdE2E, DeleteAnswersWithItsProcessesGoneAndTheTeardownFollows) {
  auto sb = create(R"({"templateID":"demo","timeout":120})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  ASSERT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);  // envd and its server run
  auto layout = runtime::CgroupLayout::detect();
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  const auto pids = runtime::SandboxCgroups::existing(*layout, "abx", id).pids();
  ASSERT_GE(pids.size(), 2u);  // envd and the command server at least
  ASSERT_NE(host_traces(home(), id), std::vector<std::string>{});

  ASSERT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
  for (pid_t p : pids) EXPECT_FALSE(runs(p)) << "pid " << p << " still runs after the DELETE";
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id).result_int(), 404);
  EXPECT_EQ(sandbox_call(id, 49983, bhttp::verb::get, "/health", "", token).result_int(), 502);
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 404);
  EXPECT_EQ(traces_left(home(), {id}), std::vector<std::string>{});
}

// A stop (SIGTERM) finishes the teardowns still pending before abxd exits; a kill -9 leaves
// them to the next start, which removes what they would have (issue 44).
TEST_F(AbxdE2E, PendingTeardownsFinishOnStopAndAfterACrash) {
  auto burst = [&](int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i)
      ids.emplace_back(
          create(R"({"templateID":"base","timeout":120})").at("sandboxID").as_string());
    for (const auto& id : ids)
      EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
    return ids;
  };
  auto dirs_left = [&](const std::vector<std::string>& ids) {
    std::vector<std::string> left;
    for (const auto& id : ids)
      for (const fs::path& p : {home() / "sandboxes" / id, home() / "run" / id})
        if (fs::exists(p)) left.push_back(p.string());
    return left;
  };
  auto stopped = burst(3);
  ASSERT_EQ(abxd().stop(), 0);
  // No wait: the stop returned after the teardowns (only loop devices clear asynchronously).
  EXPECT_EQ(dirs_left(stopped), std::vector<std::string>{});
  EXPECT_EQ(traces_left(home(), stopped), std::vector<std::string>{});

  start();
  auto crashed = burst(4);
  abxd().kill9();
  // Four teardowns queued one after the other on one thread, the kill right after the last
  // answer: some were still to run (else this test would not test the crash case).
  EXPECT_NE(dirs_left(crashed), std::vector<std::string>{});
  start();
  EXPECT_EQ(traces_left(home(), crashed), std::vector<std::string>{});
  for (const auto& id : crashed)
    EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id).result_int(), 404) << id;
  // The next create works, and its DELETE is torn down as usual.
  auto next = burst(1);
  EXPECT_EQ(traces_left(home(), next), std::vector<std::string>{});
}

TEST_F(AbxdE2E, KillNineUnderLoadLosesNothingAcknowledged) {
  // Creates keep coming while abxd is killed: every create that was acknowledged (201) must be
  // there after the restart, and no sandbox may be left without a record.
  std::vector<std::string> acked;  // written by the load thread; read after join
  std::atomic<std::size_t> n_acked{0};
  std::atomic<bool> stop{false};
  std::uint16_t port = AbxdE2E::port();
  std::string key = AbxdE2E::key();
  std::thread load([&] {
    while (!stop.load()) {
      auto req = http::make_request(bhttp::verb::post, "/sandboxes", R"({"templateID":"base"})");
      req.set("X-API-KEY", key);
      auto r = http::fetch("127.0.0.1", port, std::move(req), std::chrono::seconds(5));
      if (!r.ok()) break;  // abxd is gone
      if (r->result_int() == 201) {
        acked.emplace_back(json::parse(r->body()).at("sandboxID").as_string());
        ++n_acked;
      }
    }
  });
  for (int i = 0; i < 6000 && n_acked.load() < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  abxd().kill9();
  stop = true;
  load.join();
  ASSERT_GE(n_acked.load(), 5u) << "the load never got going";
  start();
  std::set<std::string> listed;
  std::string token;
  for (;;) {
    auto r = api(bhttp::verb::get,
                 "/v2/sandboxes?limit=100" + (token.empty() ? "" : "&nextToken=" + token));
    ASSERT_EQ(r.result_int(), 200);
    json::value page = json::parse(r.body());  // named: the array must outlive the loop
    for (const auto& s : page.as_array()) listed.emplace(s.at("sandboxID").as_string());
    token = std::string(r["X-Next-Token"]);
    if (token.empty()) break;
  }
  for (const auto& id : acked) EXPECT_TRUE(listed.count(id)) << "acknowledged sandbox lost: " << id;
  // Every sandbox that exists on disk has a record (a create cut off before its record was
  // written was cleaned up, not left running).
  for (const auto& e : fs::directory_iterator(home() / "sandboxes")) {
    if (e.path().filename().string().front() == '.') continue;  // .rw-cache: formatted layers
    EXPECT_TRUE(listed.count(e.path().filename().string())) << "orphan " << e.path();
  }
  auto integrity = api(bhttp::verb::get, "/health");
  EXPECT_EQ(integrity.result_int(), 200);
}

TEST_F(AbxdE2E, SigtermLeavesSandboxesForTheNextAbxd) {
  auto sb = create(R"({"templateID":"demo","timeout":300})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  ASSERT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);
  ASSERT_EQ(abxd().stop(), 0);
  start();
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id).result_int(), 200);
  EXPECT_EQ(call_demo(id, token, R"({"x":3})").body(), R"({"result":"3: hello"})");
}

// A home from before checkpoints were sealed has neither the key nor a seal: its paused
// sandboxes resume after the upgrade (sealed once, when the key is made). Once the key exists,
// a checkpoint without a seal is refused and stays paused.
TEST_F(AbxdE2E, CheckpointsFromBeforeSealsResumeAfterTheUpgrade) {
  auto sb = create(R"({"templateID":"demo","timeout":300})");
  std::string id(sb.at("sandboxID").as_string());
  std::string token(sb.at("envdAccessToken").as_string());
  ASSERT_EQ(call_demo(id, token, R"({"x":1})").result_int(), 200);
  auto pause_and_stop = [&] {
    ASSERT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/pause", "{}").result_int(), 204);
    ASSERT_EQ(abxd().stop(), 0);
  };
  const fs::path seal = home() / "checkpoints" / id / "checkpoint.mac";
  ASSERT_NO_FATAL_FAILURE(pause_and_stop());
  ASSERT_TRUE(fs::exists(seal)) << "this abxd did not pause to disk";
  fs::remove(seal);
  fs::remove(home() / "checkpoint.key");
  start();
  auto c = api(bhttp::verb::post, "/sandboxes/" + id + "/connect", R"({"timeout":60})");
  EXPECT_EQ(c.result_int(), 201) << c.body();
  EXPECT_EQ(call_demo(id, token, R"({"x":2})").body(), R"({"result":"2: hello"})");

  ASSERT_NO_FATAL_FAILURE(pause_and_stop());
  fs::remove(seal);  // the key stays: a seal missing now is a changed checkpoint
  start();
  auto refused = api(bhttp::verb::post, "/sandboxes/" + id + "/connect", R"({"timeout":60})");
  EXPECT_GE(refused.result_int(), 400) << refused.body();
  EXPECT_NE(refused.body().find("checkpoint.mac"), std::string::npos) << refused.body();
  EXPECT_EQ(json::parse(api(bhttp::verb::get, "/sandboxes/" + id).body()).at("state"), "paused");
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
}

TEST_F(AbxdE2E, SandboxKilledWhileAbxdWasDownIsCleanedUp) {
  auto sb = create(R"({"templateID":"base","timeout":300})");
  std::string id(sb.at("sandboxID").as_string());
  abxd().kill9();
  // While abxd is down the sandbox dies (its init is killed from outside).
  std::ifstream init(home() / "sandboxes" / id / "init");
  long pid = 0;
  init >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  for (int i = 0; i < 200 && ::kill(static_cast<pid_t>(pid), 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  start();
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id).result_int(), 404);
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes").body().find(id), std::string::npos);
  EXPECT_FALSE(fs::exists("/sys/fs/cgroup/unified/abx/" + id));
  EXPECT_FALSE(fs::exists(home() / "sandboxes" / id));
}

// A sandbox whose envd dies while abxd runs is removed by the reaper, among others that live on.
TEST_F(AbxdE2E, SandboxWhoseEnvdDiesIsRemovedAndOthersStay) {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto sb = create(R"({"templateID":"base","timeout":300})");
    ids.emplace_back(sb.at("sandboxID").as_string());
  }
  const std::string& victim = ids[1];
  std::ifstream init(home() / "sandboxes" / victim / "init");
  long pid = 0;
  init >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  int status = 200;
  for (int i = 0; i < 500 && status != 404; ++i) {  // the reaper looks every 250 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    status = api(bhttp::verb::get, "/sandboxes/" + victim).result_int();
  }
  EXPECT_EQ(status, 404);
  // The reaper drops the sandbox from the list before it tears it down (a GET then answers
  // 404), so its directory goes a moment after the 404.
  for (int i = 0; i < 250 && fs::exists(home() / "sandboxes" / victim); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(fs::exists(home() / "sandboxes" / victim));
  for (const std::string& id : {ids[0], ids[2]})
    EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id).result_int(), 200) << id;
}

// abxd's watchdog (watchdog.h) kills a sandbox whose deadline passes while abxd is down.
TEST_F(AbxdE2E, DeadlineHoldsWhileAbxdIsDown) {
  auto sb = create(R"({"templateID":"base","timeout":2})");
  std::string id(sb.at("sandboxID").as_string());
  std::ifstream init(home() / "sandboxes" / id / "init");
  long pid = 0;
  init >> pid;
  ASSERT_GT(pid, 0);
  abxd().kill9();
  // Without the watchdog nothing would ever kill it: no abxd runs.
  bool gone = false;
  for (int i = 0; i < 150 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  }
  EXPECT_TRUE(gone) << "sandbox " << id << " outlived its deadline while abxd was down";
  EXPECT_FALSE(fs::exists(home() / "sandboxes" / id));
  std::ifstream log(home() / "watchdog.log");
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("[sandbox=" + id + "] deadline passed while abxd is down"), std::string::npos)
      << text;
  start();  // the next abxd finds it dead
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id).result_int(), 404);
}

TEST_F(AbxdE2E, SignedRequestsWithAccessKeys) {
  testing::ChildProcess mk(
      {testing::abxd_bin(), "--home", home().string(), "access-keys", "create", "--name", "ci"});
  std::string line = mk.read_all();
  ASSERT_EQ(mk.wait(), 0);
  auto sp = line.find(' ');
  ASSERT_NE(sp, std::string::npos) << line;
  auth::Credentials creds{line.substr(0, sp), line.substr(sp + 1, line.find('\n') - sp - 1)};
  auto signed_get = [&](const std::string& target, std::int64_t now) {
    auth::HttpRequest hr{"GET", target, {{"host", "127.0.0.1:" + std::to_string(port())}}};
    auth::SignOptions so;
    so.now_unix = now;
    auto headers = auth::sign(hr, "", creds, so);
    EXPECT_TRUE(headers.ok()) << headers.error().message();
    auto req = http::make_request(bhttp::verb::get, target);
    req.erase(bhttp::field::content_type);
    req.set(bhttp::field::host, "127.0.0.1:" + std::to_string(port()));
    for (const auto& h : *headers) req.set(h.name, h.value);
    return req;
  };
  std::int64_t now = std::time(nullptr);
  auto req = signed_get("/v2/sandboxes", now);
  auto ok = http::fetch("127.0.0.1", port(), req);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->result_int(), 200) << ok->body();
  // The same signed request again is a replay.
  auto replay = http::fetch("127.0.0.1", port(), req);
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->result_int(), 401) << replay->body();
  // Outside the time window.
  auto old = http::fetch("127.0.0.1", port(), signed_get("/v2/sandboxes", now - 3600));
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->result_int(), 401);
  // Signed for one path, sent to another.
  auto moved = signed_get("/v2/sandboxes", now);
  moved.target("/templates");
  auto m = http::fetch("127.0.0.1", port(), moved);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->result_int(), 401);
}

TEST(AbxdKeys, CreateListRevoke) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root like abxd";
  testing::TempDir tmp("abxd-keys");
  const fs::path& home = tmp.path();
  testing::ChildProcess create(
      {testing::abxd_bin(), "--home", home.string(), "keys", "create", "--name", "ci"});
  std::string key = create.read_all();
  EXPECT_EQ(create.wait(), 0);
  EXPECT_EQ(key.rfind("e2b_", 0), 0u) << key;
  testing::ChildProcess list({testing::abxd_bin(), "--home", home.string(), "keys", "list"});
  std::string listing = list.read_all();
  EXPECT_EQ(list.wait(), 0);
  EXPECT_NE(listing.find("ci"), std::string::npos);
  EXPECT_EQ(listing.find(key.substr(0, 20)), std::string::npos);  // never the key itself
  key.erase(key.find_last_not_of("\n") + 1);
  testing::ChildProcess revoke(
      {testing::abxd_bin(), "--home", home.string(), "keys", "revoke", key});
  EXPECT_EQ(revoke.wait(), 0);
  testing::ChildProcess again(
      {testing::abxd_bin(), "--home", home.string(), "keys", "revoke", "ffffffffff"});
  EXPECT_EQ(again.wait(), 2);
}

// --- E2B parity of the lifecycle API (issues 12 and 16) ---

std::int64_t end_at_ms(const json::value& listed) {
  // "2026-11-30T15:29:46.123Z": compare as text is enough within one test, but the difference
  // in seconds is what the assertions need.
  std::string s(listed.at("endAt").as_string());
  std::tm tm{};
  ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  std::int64_t ms = static_cast<std::int64_t>(::timegm(&tm)) * 1000;
  if (auto dot = s.find('.'); dot != std::string::npos) ms += std::stoi(s.substr(dot + 1, 3));
  return ms;
}

// Connect (v1 and v2) only ever extends the deadline; POST .../timeout still sets it, shorter
// included. Create with timeout 0 is a 400 instead of a sandbox the reaper kills at once.
TEST_F(AbxdE2E, ConnectNeverShortensTheDeadline) {
  auto sb = create(R"({"templateID":"base","timeout":3600})");
  std::string id(sb.at("sandboxID").as_string());
  auto end_of = [&] {
    auto r = api(bhttp::verb::get, "/sandboxes/" + id);
    EXPECT_EQ(r.result_int(), 200) << r.body();
    return end_at_ms(json::parse(r.body()));
  };
  const std::int64_t hour = end_of();
  EXPECT_EQ(
      api(bhttp::verb::post, "/sandboxes/" + id + "/connect", R"({"timeout":300})").result_int(),
      200);
  EXPECT_EQ(end_of(), hour);
  EXPECT_EQ(
      api(bhttp::verb::post, "/v2/sandboxes/" + id + "/connect", R"({"timeout":60})").result_int(),
      200);
  EXPECT_EQ(end_of(), hour);
  // A longer timeout extends.
  ASSERT_EQ(
      api(bhttp::verb::post, "/sandboxes/" + id + "/connect", R"({"timeout":7200})").result_int(),
      200);
  EXPECT_GT(end_of(), hour + 3000 * 1000);
  // setTimeout sets, shorter too.
  ASSERT_EQ(
      api(bhttp::verb::post, "/sandboxes/" + id + "/timeout", R"({"timeout":120})").result_int(),
      204);
  EXPECT_LT(end_of(), hour - 3000 * 1000);

  for (const char* path : {"/sandboxes", "/v2/sandboxes"}) {
    auto zero = api(bhttp::verb::post, path, R"({"templateID":"base","timeout":0})");
    EXPECT_EQ(zero.result_int(), 400) << zero.body();
    EXPECT_NE(zero.body().find("at least 1 second"), std::string::npos) << zero.body();
  }
  auto listed = json::parse(api(bhttp::verb::get, "/v2/sandboxes").body()).as_array();
  EXPECT_EQ(listed.size(), 1u);  // no zero-timeout sandbox was made
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
}

// GET /v2/sandboxes as E2B: newest first (order=asc for the old order), state as a comma list
// or repeated, metadata as the SDK encodes it, startedAfter, paging in the same order.
TEST_F(AbxdE2E, V2ListIsNewestFirstAndFiltersLikeE2b) {
  std::vector<std::string> ids;
  std::string started_after;
  for (int i = 0; i < 3; ++i) {
    auto sb = create(R"({"templateID":"base","metadata":{"run":"l","n":")" + std::to_string(i) +
                     R"("}})");
    ids.emplace_back(sb.at("sandboxID").as_string());
    if (i == 0) {
      auto info = json::parse(api(bhttp::verb::get, "/sandboxes/" + ids[0]).body());
      started_after = std::string(info.at("startedAt").as_string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // distinct startedAt
  }
  auto listed_ids = [&](const std::string& query) {
    auto r = api(bhttp::verb::get, "/v2/sandboxes" + query);
    EXPECT_EQ(r.result_int(), 200) << query << ": " << r.body();
    std::vector<std::string> out;
    const json::value listed = json::parse(r.body());
    for (const auto& v : listed.as_array()) out.emplace_back(v.at("sandboxID").as_string());
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(listed_ids(""), (V{ids[2], ids[1], ids[0]}));
  EXPECT_EQ(listed_ids("?order=asc"), (V{ids[0], ids[1], ids[2]}));
  // Paging keeps the order.
  auto p1 = api(bhttp::verb::get, "/v2/sandboxes?limit=2");
  std::string next(p1["X-Next-Token"]);
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(listed_ids("?limit=2&nextToken=" + next), (V{ids[0]}));

  ASSERT_EQ(api(bhttp::verb::post, "/sandboxes/" + ids[1] + "/pause", "{}").result_int(), 204);
  EXPECT_EQ(listed_ids("?state=paused"), (V{ids[1]}));
  EXPECT_EQ(listed_ids("?state=running"), (V{ids[2], ids[0]}));
  EXPECT_EQ(listed_ids("?state=running,paused"), (V{ids[2], ids[1], ids[0]}));
  EXPECT_EQ(listed_ids("?state=running&state=paused"), (V{ids[2], ids[1], ids[0]}));
  // The SDK's metadata: encodeURIComponent of "run=l&n=1".
  EXPECT_EQ(listed_ids("?metadata=run%3Dl%26n%3D1"), (V{ids[1]}));
  EXPECT_EQ(listed_ids("?metadata=run%3Dl%26n%3D9"), (V{}));
  // startedAfter is "at or after" (E2B's openapi.yml and its SDK's list test): the first
  // sandbox's own startedAt keeps it.
  EXPECT_EQ(listed_ids("?startedAfter=" + started_after), (V{ids[2], ids[1], ids[0]}));
  // ...and the second's leaves the first out: the filter filters.
  const std::string second_started(json::parse(api(bhttp::verb::get, "/sandboxes/" + ids[1]).body())
                                       .at("startedAt")
                                       .as_string());
  EXPECT_EQ(listed_ids("?startedAfter=" + second_started), (V{ids[2], ids[1]}));
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes?startedAfter=yesterday").result_int(), 400);
  for (const auto& id : ids)
    EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
}

// secure=false (E2B): no envdAccessToken, envd answers without a token, through the proxy and
// for its RPC too; the record survives an abxd restart. A command server always needs a token.
TEST_F(AbxdE2E, InsecureSandboxNeedsNoAccessToken) {
  auto r = api(bhttp::verb::post, "/sandboxes", R"({"templateID":"base","secure":false})");
  ASSERT_EQ(r.result_int(), 201) << r.body();
  auto sb = json::parse(r.body()).as_object();
  std::string id(sb.at("sandboxID").as_string());
  EXPECT_FALSE(sb.contains("envdAccessToken"));
  EXPECT_EQ(sandbox_call(id, 49983, bhttp::verb::get, "/health", "", "").result_int(), 204);
  auto ls = sandbox_call(id, 49983, bhttp::verb::post, "/filesystem.Filesystem/ListDir",
                         R"({"path":"/","depth":1})", "");
  EXPECT_EQ(ls.result_int(), 200) << ls.body();
  auto info = api(bhttp::verb::get, "/sandboxes/" + id);
  ASSERT_EQ(info.result_int(), 200);
  EXPECT_FALSE(json::parse(info.body()).as_object().contains("envdAccessToken"));
  // Minting a scoped token needs a sandbox token to derive it from.
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/tokens", R"({"commands":["demo"]})")
                .result_int(),
            409);
  // Adopted by the next abxd as it is: still open, still listed.
  abxd().kill9();
  start();
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/" + id).result_int(), 200);
  EXPECT_EQ(sandbox_call(id, 49983, bhttp::verb::get, "/health", "", "").result_int(), 204);

  auto demo = api(bhttp::verb::post, "/sandboxes", R"({"templateID":"demo","secure":false})");
  EXPECT_EQ(demo.result_int(), 400) << demo.body();
  EXPECT_NE(demo.body().find("command server"), std::string::npos) << demo.body();
  EXPECT_EQ(api(bhttp::verb::delete_, "/sandboxes/" + id).result_int(), 204);
}

// The nftables table an abxd's log names ("table inet abx_…") is not on the machine any more.
void expect_table_of_log_gone(const std::string& log) {
  const auto at = log.find("table inet abx_");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string table = log.substr(at + 11, log.find_first_of(", \n", at + 11) - at - 11);
  testing::ChildProcess nft({"/bin/sh", "-c", "nft list table inet " + table + " 2>&1"});
  std::string listed = nft.read_all();
  EXPECT_NE(nft.wait(std::chrono::seconds(10)), 0) << "table " << table << " was left:\n" << listed;
  EXPECT_NE(listed.find("No such file or directory"), std::string::npos) << listed;
}

// One abxd per home: a second one on the same --home exits at once (config error, 3) naming
// the home and the first one's pid, and leaves the first serving.
// What abxd needs is checked at start, one clear error each (exit 3), not at the first create.
TEST_F(AbxdE2E, StartupChecksNameWhatIsMissing) {
  auto run = [&](const std::string& prefix, const std::string& args) {
    testing::ChildProcess p({"/bin/sh", "-c",
                             prefix + std::string(testing::abxd_bin()) + " --home '" +
                                 (tmp().path() / "other").string() + "' --listen 127.0.0.1:0 " +
                                 args + " 2>&1; echo \"exit=$?\""});
    EXPECT_TRUE(p.started());
    std::string out = p.read_all();
    EXPECT_EQ(p.wait(std::chrono::seconds(10)), 0);
    return out;
  };
  std::string out = run("setpriv --reuid=65534 --regid=65534 --clear-groups ", "");
  EXPECT_NE(out.find("exit=3"), std::string::npos) << out;
  EXPECT_NE(out.find("abxd must run as root"), std::string::npos) << out;
  out = run("", "--userns-base 1000 --userns-slots 1");  // user uid 1000's range (or root's group)
  EXPECT_NE(out.find("exit=3"), std::string::npos) << out;
  EXPECT_NE(out.find("overlaps /etc/"), std::string::npos) << out;
  out = run("", "--userns-base 0");
  EXPECT_NE(out.find("exit=3"), std::string::npos) << out;
  EXPECT_NE(out.find("above 0"), std::string::npos) << out;
  out = run("", "--bundle '' --envd-bin /nonexistent/abx-envd");
  EXPECT_NE(out.find("exit=3"), std::string::npos) << out;
  EXPECT_NE(out.find("abx-envd not found at '/nonexistent/abx-envd'"), std::string::npos) << out;
  // That start got as far as its network: the nftables table it made is gone with it (its home
  // has no sandbox for the table to keep policing).
  expect_table_of_log_gone(out);
}

// A SIGTERM that comes while abxd is still starting (here: as soon as it has made its home's API
// key, before any of its threads) is taken once it is up: it stops as on any SIGTERM, exit code
// 0, its nftables table removed. It used to end abxd on the spot by the signal's default action
// (a thread started with SIGTERM unblocked took it while main was not in sigwait), leaving the
// table: seen as the table an MCP e2e test left when it stopped abxd right at "listening on".
TEST_F(AbxdE2E, SigtermWhileStartingStopsAbxdOnceItIsUp) {
  // exec: the pid signalled is abxd's; its log (stderr) is read with its stdout.
  testing::ChildProcess p({"/bin/sh", "-c",
                           "exec " + std::string(testing::abxd_bin()) + " --home '" +
                               (tmp().path() / "starting").string() +
                               "' --listen 127.0.0.1:0 --dns-upstream 127.0.0.1:9 2>&1"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.read_line_starting("created an API key"));
  p.signal(SIGTERM);
  const std::string log = p.read_all();
  EXPECT_EQ(p.wait(std::chrono::seconds(40)), 0) << log;
  EXPECT_NE(log.find("listening on"), std::string::npos) << log;
  EXPECT_NE(log.find("received SIGTERM"), std::string::npos) << log;
  expect_table_of_log_gone(log);
}

TEST_F(AbxdE2E, SecondAbxdOnTheSameHomeExitsAtOnce) {
  std::ifstream lock(home() / "abxd.lock");
  std::string pid;
  std::getline(lock, pid);
  ASSERT_FALSE(pid.empty());
  std::ifstream cmdline("/proc/" + pid + "/cmdline");  // the holder is the running abxd
  std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  EXPECT_NE(args.find(home().string()), std::string::npos) << args;

  // Through sh so that abxd's stderr, where the refusal goes, is captured.
  testing::ChildProcess second({"/bin/sh", "-c",
                                std::string(testing::abxd_bin()) + " --home '" + home().string() +
                                    "' --listen 127.0.0.1:0 2>&1; echo \"exit=$?\""});
  ASSERT_TRUE(second.started());
  std::string out = second.read_all();
  EXPECT_EQ(second.wait(std::chrono::seconds(10)), 0);
  EXPECT_NE(out.find("exit=3"), std::string::npos) << out;
  EXPECT_NE(out.find("pid " + pid), std::string::npos) << out;
  EXPECT_NE(out.find(home().string()), std::string::npos) << out;
  EXPECT_EQ(out.find("listening"), std::string::npos) << out;
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes").result_int(), 200);

  testing::ChildProcess version({testing::abxd_bin(), "--version"});
  std::string v = version.read_all();
  EXPECT_EQ(version.wait(), 0);
  EXPECT_EQ(v.rfind("abxd 0.", 0), 0u) << v;
}

namespace rest39 {  // issue 39, item 6: the routes the SDK has no method for

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace rest39

// POST /sandboxes/{id}/refreshes: E2B's keep-alive, which only ever extends the deadline (at
// least 15 s); GET /sandboxes/metrics: the latest sample of each listed sandbox.
TEST_F(AbxdE2E, RefreshesAndMultiSandboxMetrics) {
  auto sb = create(R"({"templateID":"base","timeout":60})");
  std::string id(sb.at("sandboxID").as_string());
  auto end_at = [&] {
    auto r = api(bhttp::verb::get, "/v2/sandboxes?state=running");
    const json::value listed = json::parse(r.body());
    for (const auto& s : listed.as_array())
      if (s.at("sandboxID").as_string() == id) return std::string(s.at("endAt").as_string());
    return std::string();
  };
  const std::string before = end_at();
  auto r = api(bhttp::verb::post, "/sandboxes/" + id + "/refreshes", R"({"duration":600})");
  EXPECT_EQ(r.result_int(), 204) << r.body();
  const std::string extended = end_at();
  EXPECT_GT(extended, before);  // RFC 3339 in UTC: ordered as strings
  // A shorter refresh (and the 15 s default) leaves the later deadline alone.
  EXPECT_EQ(api(bhttp::verb::post, "/sandboxes/" + id + "/refreshes", "{}").result_int(), 204);
  EXPECT_EQ(
      api(bhttp::verb::post, "/sandboxes/" + id + "/refreshes", R"({"duration":1})").result_int(),
      204);
  EXPECT_EQ(end_at(), extended);
  EXPECT_EQ(
      api(bhttp::verb::post, "/sandboxes/" + id + "/refreshes", R"({"duration":"x"})").result_int(),
      400);
  r = api(bhttp::verb::post, "/sandboxes/" + std::string(20, 'a') + "/refreshes", "{}");
  EXPECT_EQ(r.result_int(), 404);
  EXPECT_EQ(json::parse(r.body()).at("code"), 404);

  r = api(bhttp::verb::get, "/sandboxes/metrics?sandbox_ids=" + id + "," + std::string(20, 'b'));
  ASSERT_EQ(r.result_int(), 200) << r.body();
  const json::value parsed = json::parse(r.body());
  const auto& all = parsed.at("sandboxes").as_object();
  ASSERT_EQ(all.size(), 1u) << r.body();  // the unknown id is left out
  const auto& m = all.at(id).as_object();
  EXPECT_GE(m.at("cpuCount").as_int64(), 1);
  EXPECT_GT(m.at("memTotal").as_int64(), 0);
  EXPECT_GT(m.at("diskTotal").as_int64(), 0);
  EXPECT_TRUE(m.contains("timestampUnix"));
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/metrics").result_int(), 400);
  std::string many;
  for (int i = 0; i < 101; ++i) many += (i ? "," : "") + std::string(20, 'c');
  r = api(bhttp::verb::get, "/sandboxes/metrics?sandbox_ids=" + many);
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_NE(r.body().find("maximum is 100"), std::string::npos) << r.body();
  EXPECT_EQ(api(bhttp::verb::get, "/sandboxes/metrics?sandbox_ids=" + id, "", "").result_int(),
            401);
}

// GET /v2/sandboxes/{id}/logs with E2B's cursor, direction, level, search and limit.
TEST_F(AbxdE2E, LogsV2FiltersByCursorLevelAndSearch) {
  auto sb = create(R"({"templateID":"base","timeout":60})");
  std::string id(sb.at("sandboxID").as_string());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::int64_t after_create = rest39::now_unix_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(
      api(bhttp::verb::post, "/sandboxes/" + id + "/timeout", R"({"timeout":90})").result_int(),
      204);
  auto logs = [&](const std::string& query) {
    auto r = api(bhttp::verb::get, "/v2/sandboxes/" + id + "/logs" + query);
    EXPECT_EQ(r.result_int(), 200) << query << " " << r.body();
    auto v = json::parse(r.body());
    EXPECT_EQ(v.as_object().size(), 1u);  // only "logs", as E2B's SandboxLogsV2Response
    std::vector<std::string> out;
    for (const auto& e : v.at("logs").as_array()) {
      EXPECT_TRUE(e.at("level").is_string());
      EXPECT_TRUE(e.at("fields").is_object());
      EXPECT_TRUE(e.at("timestamp").is_string());
      out.emplace_back(e.at("message").as_string());
    }
    return out;
  };
  auto has = [](const std::vector<std::string>& v, std::string_view part) {
    for (const auto& m : v)
      if (m.find(part) != std::string::npos) return true;
    return false;
  };
  auto all = logs("");
  EXPECT_TRUE(has(all, "created from template 'base'"));
  EXPECT_TRUE(has(all, "timeout set: ends in 90 s"));
  // search: case-sensitive substring; level: that level and above.
  auto found = logs("?search=timeout%20set");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "timeout set: ends in 90 s");
  EXPECT_TRUE(logs("?search=Timeout%20set").empty());
  EXPECT_FALSE(has(logs("?level=warn"), "created from template"));
  EXPECT_TRUE(has(logs("?level=info"), "created from template"));
  // cursor: entries from that time on (forward); backward goes from the cursor to the past,
  // newest first.
  auto later = logs("?cursor=" + std::to_string(after_create));
  EXPECT_FALSE(has(later, "created from template"));
  EXPECT_TRUE(has(later, "timeout set"));
  auto newest = logs("?direction=backward&limit=1");
  ASSERT_EQ(newest.size(), 1u);
  EXPECT_EQ(newest[0], all.back());
  auto earlier = logs("?direction=backward&cursor=" + std::to_string(after_create));
  EXPECT_TRUE(has(earlier, "created from template"));
  EXPECT_FALSE(has(earlier, "timeout set"));
  EXPECT_EQ(logs("?limit=1").size(), 1u);
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes/" + id + "/logs?level=loud").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes/" + id + "/logs?direction=up").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/v2/sandboxes/" + std::string(20, 'a') + "/logs").result_int(),
            404);
}

// GET /teams and GET /teams/{teamID}/metrics[/max]: the credential's team, its running
// sandboxes and start rate sampled every 5 s; another team's metrics are E2B's 403.
TEST_F(AbxdE2E, TeamsAndTeamMetrics) {
  auto r = api(bhttp::verb::get, "/teams");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  auto teams = json::parse(r.body()).as_array();
  ASSERT_EQ(teams.size(), 1u);
  EXPECT_EQ(teams[0].at("teamID"), "default");
  EXPECT_EQ(teams[0].at("name"), "default");
  EXPECT_EQ(teams[0].at("apiKey").as_string(), abxd().api_key());
  EXPECT_EQ(teams[0].at("isDefault"), true);

  auto sb = create(R"({"templateID":"base","timeout":60})");
  json::array samples;
  for (int i = 0; i < 60; ++i) {  // the next 5-second sample, at most 12 s away
    r = api(bhttp::verb::get, "/teams/default/metrics");
    ASSERT_EQ(r.result_int(), 200) << r.body();
    samples = json::parse(r.body()).as_array();
    bool seen = false;
    for (const auto& s : samples) seen |= s.at("concurrentSandboxes").as_int64() >= 1;
    if (seen) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_FALSE(samples.empty());
  bool running = false, started = false;
  for (const auto& s : samples) {
    running |= s.at("concurrentSandboxes").as_int64() == 1;
    started |= s.at("sandboxStartRate").to_number<double>() > 0;
    EXPECT_TRUE(s.at("timestamp").is_string());
    EXPECT_GT(s.at("timestampUnix").as_int64(), 0);
  }
  EXPECT_TRUE(running) << json::serialize(samples);
  EXPECT_TRUE(started) << json::serialize(samples);

  r = api(bhttp::verb::get, "/teams/default/metrics/max?metric=concurrent_sandboxes");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(json::parse(r.body()).at("value").as_int64(), 1);
  r = api(bhttp::verb::get, "/teams/default/metrics/max?metric=sandbox_start_rate");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_GT(json::parse(r.body()).at("value").to_number<double>(), 0);
  EXPECT_EQ(api(bhttp::verb::get, "/teams/default/metrics/max?metric=cpu").result_int(), 400);
  EXPECT_EQ(api(bhttp::verb::get, "/teams/default/metrics/max").result_int(), 400);
  // A window before any sample: empty, and a max of 0.
  r = api(bhttp::verb::get, "/teams/default/metrics?start=1000&end=2000");
  EXPECT_EQ(r.body(), "[]");
  EXPECT_EQ(api(bhttp::verb::get, "/teams/default/metrics?start=20&end=10").result_int(), 400);
  r = api(bhttp::verb::get, "/teams/someone-else/metrics");
  EXPECT_EQ(r.result_int(), 403);
  EXPECT_EQ(json::parse(r.body()).at("code"), 403);
  EXPECT_EQ(api(bhttp::verb::get, "/teams/someone-else/metrics/max?metric=concurrent_sandboxes")
                .result_int(),
            403);
  EXPECT_EQ(api(bhttp::verb::get, "/teams", "", "").result_int(), 401);
}

}  // namespace
}  // namespace abx::e2e
