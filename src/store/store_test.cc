#include "abx/store/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <thread>

#include "abx/testing/temp_dir.h"
#include "sqlite.h"

namespace abx::store {
namespace {

namespace fs = std::filesystem;

using abx::testing::TempDir;

std::unique_ptr<Store> open_or_die(const fs::path& p) {
  auto s = Store::open(p);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
  return s.ok() ? std::move(*s) : nullptr;
}

std::string id_for(int i) {
  std::string s = std::to_string(i);
  return std::string(20 - s.size(), 'a') + s;
}

SandboxRecord make(int i, std::int64_t created = 0) {
  SandboxRecord r;
  r.id = id_for(i);
  r.template_id = i % 2 ? "base" : "demo";
  r.client_id = "6532622b";
  r.created_at_ms = created ? created : 1'000'000 + i;
  r.end_at_ms = r.created_at_ms + 300'000;
  r.access_token_digest = token_digest("token-" + std::to_string(i));
  r.cpu_count = 1.5;
  r.memory_mb = 512;
  r.disk_mb = 1024;
  r.metadata = {{"i", std::to_string(i)}, {"parity", i % 2 ? "odd" : "even"}};
  r.env_vars = {{"FOO", "bar"}};
  r.domain = "localhost";
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Store, OpensWithMode0600AndCurrentSchema) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->schema_version(), kSchemaVersion);
  struct stat sb {};
  ASSERT_EQ(::stat((d.path() / "abx.db").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_TRUE(s->check_integrity().ok());
}

TEST(Store, TightensModeOfExistingFile) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  { std::ofstream(p) << ""; }
  ::chmod(p.c_str(), 0644);
  auto s = open_or_die(p);
  struct stat sb {};
  ASSERT_EQ(::stat(p.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
}

TEST(Store, RefusesNewerSchema) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  { auto s = open_or_die(p); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(p.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 99", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = Store::open(p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kFailedPrecondition);
}

TEST(Store, LifecycleRoundTripsAndAVersion1FileMigrates) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  {
    auto s = open_or_die(p);
    SandboxRecord r = make(1);
    r.pause_on_timeout = true;
    r.auto_resume = true;
    r.timeout_s = 42;
    r.network = R"({"enabled":true})";
    r.pause_keeps_memory = false;
    ASSERT_TRUE(s->insert_sandbox(r).ok());
    ASSERT_TRUE(s->set_network(r.id, R"({"enabled":false})").ok());
    EXPECT_FALSE(s->set_network(id_for(9), "{}").ok());
    ASSERT_TRUE(s->insert_sandbox(make(2)).ok());
    auto got = s->get_sandbox(r.id);
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(got->pause_on_timeout);
    EXPECT_TRUE(got->auto_resume);
    EXPECT_EQ(got->timeout_s, 42);
    EXPECT_EQ(got->network, R"({"enabled":false})");
    EXPECT_FALSE(got->pause_keeps_memory);
    got = s->get_sandbox(id_for(2));
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->pause_on_timeout);
    EXPECT_FALSE(got->auto_resume);
    EXPECT_TRUE(got->pause_keeps_memory);
  }
  // Back to the version 1 layout (no lifecycle columns), as an older abxd left it.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(p.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "ALTER TABLE sandboxes DROP COLUMN on_timeout;"
                         "ALTER TABLE sandboxes DROP COLUMN auto_resume;"
                         "ALTER TABLE sandboxes DROP COLUMN timeout_s;"
                         "ALTER TABLE sandboxes DROP COLUMN network;"
                         "ALTER TABLE sandboxes DROP COLUMN checkpoint;"
                         "DROP INDEX sandboxes_by_team;"
                         "ALTER TABLE sandboxes DROP COLUMN team_id;"
                         "ALTER TABLE api_keys DROP COLUMN team_id;"
                         "ALTER TABLE access_keys DROP COLUMN team_id;"
                         "DROP TABLE teams; DROP TABLE template_owners; DROP TABLE events;"
                         "DROP TABLE webhooks; DROP TABLE secrets;"
                         "ALTER TABLE sandboxes DROP COLUMN on_timeout_memory;"
                         "ALTER TABLE sandboxes DROP COLUMN filesystem_only;"
                         "DROP TABLE volumes; ALTER TABLE sandboxes DROP COLUMN volume_mounts;"
                         "DROP TABLE template_builds; DROP TABLE template_build_logs;"
                         "UPDATE schema_version SET version = 1",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto s = open_or_die(p);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->schema_version(), kSchemaVersion);
  auto got = s->get_sandbox(id_for(1));
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_FALSE(got->pause_on_timeout);  // E2B's defaults: kill at the deadline, no auto-resume
  EXPECT_FALSE(got->auto_resume);
  EXPECT_EQ(got->timeout_s, 300);
  EXPECT_EQ(got->network, "");           // loopback only: what every sandbox before schema 3 had
  EXPECT_TRUE(got->pause_keeps_memory);  // before schema 8 every pause kept memory
  EXPECT_FALSE(got->filesystem_only);
}

TEST(Store, SandboxCrud) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  SandboxRecord r = make(1);
  ASSERT_TRUE(s->insert_sandbox(r).ok());

  auto dup = s->insert_sandbox(r);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(dup.error().message().find("insert sandbox"), std::string::npos);

  auto got = s->get_sandbox(r.id);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got->template_id, "base");
  EXPECT_EQ(got->client_id, "6532622b");
  EXPECT_EQ(got->state, SandboxState::kRunning);
  EXPECT_EQ(got->metadata, r.metadata);
  EXPECT_EQ(got->env_vars, r.env_vars);
  EXPECT_DOUBLE_EQ(got->cpu_count, 1.5);
  EXPECT_EQ(got->memory_mb, 512);
  EXPECT_EQ(got->access_token_digest, r.access_token_digest);
  EXPECT_TRUE(digest_matches(got->access_token_digest, "token-1"));
  EXPECT_FALSE(digest_matches(got->access_token_digest, "token-2"));

  ASSERT_TRUE(s->update_state(r.id, SandboxState::kPaused).ok());
  ASSERT_TRUE(s->set_deadline(r.id, 42).ok());
  ASSERT_TRUE(s->set_init(r.id, 1234, 0xFFFFFFFFFULL).ok());
  got = s->get_sandbox(r.id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, SandboxState::kPaused);
  EXPECT_EQ(got->end_at_ms, 42);
  EXPECT_EQ(got->init_pid, 1234);
  EXPECT_EQ(got->init_start_time, 0xFFFFFFFFFULL);
  EXPECT_EQ(got->checkpoint, "");

  // A pause to disk and the resume from it: state and checkpoint change together.
  ASSERT_TRUE(s->set_checkpoint(r.id, SandboxState::kPaused, "/home/checkpoints/x/1").ok());
  EXPECT_EQ(s->get_sandbox(r.id)->checkpoint, "/home/checkpoints/x/1");
  ASSERT_TRUE(s->set_checkpoint(r.id, SandboxState::kRunning, "").ok());
  EXPECT_EQ(s->get_sandbox(r.id)->state, SandboxState::kRunning);
  EXPECT_EQ(s->get_sandbox(r.id)->checkpoint, "");
  EXPECT_FALSE(s->get_sandbox(r.id)->filesystem_only);
  // A filesystem-only pause: the layer's directory, flagged in the same write; a resume clears it.
  ASSERT_TRUE(s->set_checkpoint(r.id, SandboxState::kPaused, "/home/checkpoints/x", true).ok());
  EXPECT_EQ(s->get_sandbox(r.id)->state, SandboxState::kPaused);
  EXPECT_EQ(s->get_sandbox(r.id)->checkpoint, "/home/checkpoints/x");
  EXPECT_TRUE(s->get_sandbox(r.id)->filesystem_only);
  ASSERT_TRUE(s->set_checkpoint(r.id, SandboxState::kRunning, "").ok());
  EXPECT_FALSE(s->get_sandbox(r.id)->filesystem_only);
  EXPECT_EQ(s->set_checkpoint(r.id, SandboxState::kKilled, "").error().code(),
            ErrorCode::kInvalidArgument);
  ASSERT_TRUE(s->update_state(r.id, SandboxState::kKilled).ok());
  EXPECT_EQ(s->set_checkpoint(r.id, SandboxState::kPaused, "/c").error().code(),
            ErrorCode::kNotFound);  // a killed sandbox is never paused again

  // A deadline written only for abxd's death (a connect's extension): another connection reads
  // it, and this one is back at synchronous = FULL for every write after it, a failed one too.
  EXPECT_EQ(*s->synchronous_setting(), 2);
  ASSERT_TRUE(s->set_deadline(r.id, 77, Store::Durability::kProcessCrash).ok());
  EXPECT_EQ(*s->synchronous_setting(), 2);
  EXPECT_EQ(open_or_die(d.path() / "abx.db")->get_sandbox(r.id)->end_at_ms, 77);
  EXPECT_EQ(
      s->set_deadline("0000000000000000000x", 1, Store::Durability::kProcessCrash).error().code(),
      ErrorCode::kNotFound);
  EXPECT_EQ(*s->synchronous_setting(), 2);
  // A state written the same way (abxd's DELETE of a running sandbox marks it killed so).
  ASSERT_TRUE(s->update_state(r.id, SandboxState::kRunning, Store::Durability::kProcessCrash).ok());
  EXPECT_EQ(open_or_die(d.path() / "abx.db")->get_sandbox(r.id)->state, SandboxState::kRunning);
  ASSERT_TRUE(s->update_state(r.id, SandboxState::kKilled, Store::Durability::kProcessCrash).ok());
  EXPECT_EQ(open_or_die(d.path() / "abx.db")->get_sandbox(r.id)->state, SandboxState::kKilled);
  EXPECT_EQ(*s->synchronous_setting(), 2);

  ASSERT_TRUE(s->delete_sandbox(r.id).ok());
  for (auto st : {s->delete_sandbox(r.id), s->update_state(r.id, SandboxState::kKilled),
                  s->set_deadline(r.id, 1)}) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code(), ErrorCode::kNotFound);
  }
  EXPECT_EQ(s->get_sandbox(r.id).error().code(), ErrorCode::kNotFound);
}

TEST(Store, RejectsMalformedRecords) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  SandboxRecord r = make(1);
  r.id = "UPPERCASEUPPERCASE00";
  EXPECT_EQ(s->insert_sandbox(r).error().code(), ErrorCode::kInvalidArgument);
  r.id = "short";
  EXPECT_EQ(s->insert_sandbox(r).error().code(), ErrorCode::kInvalidArgument);
  r = make(1);
  r.access_token_digest = "the-token-itself";  // the store only takes digests
  EXPECT_EQ(s->insert_sandbox(r).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s->get_sandbox("'; DROP TABLE sandboxes; --").error().code(),
            ErrorCode::kInvalidArgument);
}

// secure=false: a sandbox without a token is stored with an empty digest and read back so.
TEST(Store, AcceptsASandboxWithoutAToken) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  SandboxRecord r = make(2);
  r.access_token_digest.clear();
  ASSERT_TRUE(s->insert_sandbox(r).ok());
  auto got = s->get_sandbox(r.id);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->access_token_digest.empty());
  EXPECT_FALSE(digest_matches(got->access_token_digest, ""));
}

TEST(Store, ListFilters) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  for (int i = 1; i <= 10; ++i) {
    SandboxRecord r = make(i);
    if (i == 3) r.state = SandboxState::kPaused;
    if (i == 4) r.state = SandboxState::kKilled;
    if (i == 5) r.metadata["we\"ird.key"] = "v'al";
    ASSERT_TRUE(s->insert_sandbox(r).ok());
  }
  auto ids = [](const SandboxPage& p) {
    std::vector<std::string> out;
    for (const auto& r : p.items) out.push_back(r.id);
    return out;
  };
  SandboxFilter f;
  auto p = s->list_sandboxes(f);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_EQ(p->items.size(), 10u);
  EXPECT_TRUE(p->next_token.empty());

  f.states = {SandboxState::kRunning, SandboxState::kPaused};
  p = s->list_sandboxes(f);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->items.size(), 9u);

  f.states = {SandboxState::kPaused};
  p = s->list_sandboxes(f);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(ids(*p), std::vector<std::string>{id_for(3)});

  f = {};
  f.template_id = "demo";
  f.metadata = {{"parity", "even"}, {"i", "6"}};
  p = s->list_sandboxes(f);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(ids(*p), std::vector<std::string>{id_for(6)});

  f.metadata = {{"parity", "odd"}};  // odd ids are "base"
  p = s->list_sandboxes(f);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->items.empty());

  f = {};
  f.metadata = {{"we\"ird.key", "v'al"}};
  p = s->list_sandboxes(f);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  EXPECT_EQ(ids(*p), std::vector<std::string>{id_for(5)});

  f = {};
  f.started_after_ms = 1'000'008;  // inclusive: the sandbox started at that very ms is in
  f.descending = true;
  p = s->list_sandboxes(f);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(ids(*p), (std::vector<std::string>{id_for(10), id_for(9), id_for(8)}));

  f = {};
  f.limit = 0;
  EXPECT_EQ(s->list_sandboxes(f).error().code(), ErrorCode::kInvalidArgument);
  f.limit = 5;
  for (std::string bad :
       {std::string("x"), std::string("!!!"), std::string("YzE6MTI6Zm9v"), std::string(500, 'a')}) {
    f.page_token = bad;
    auto r = s->list_sandboxes(f);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
}

// Pages through the table while another connection keeps inserting: every row that existed
// before paging began is returned exactly once, and no row is returned twice.
TEST(Store, PagingIsStableUnderConcurrentInserts) {
  for (bool desc : {false, true}) {
    TempDir d;
    fs::path p = d.path() / "abx.db";
    auto s = open_or_die(p);
    std::set<std::string> before;
    for (int i = 0; i < 40; ++i) {
      // Several rows share a created_at, so the id tie-break matters.
      SandboxRecord r = make(i, 1'000'000 + i / 3);
      ASSERT_TRUE(s->insert_sandbox(r).ok());
      before.insert(r.id);
    }
    std::atomic<bool> stop{false};
    std::atomic<int> inserted{0};
    std::thread writer([&] {
      auto w = open_or_die(p);
      for (int i = 1000; !stop && i < 1200; ++i) {
        // Newer rows, plus one with an old timestamp (a clock that stepped back).
        SandboxRecord r = make(i, i % 7 == 0 ? 1'000'005 : 2'000'000 + i);
        if (w->insert_sandbox(r).ok()) ++inserted;
      }
    });
    std::vector<std::string> seen;
    SandboxFilter f;
    f.limit = 7;
    f.descending = desc;
    int pages = 0;
    do {
      auto page = s->list_sandboxes(f);
      ASSERT_TRUE(page.ok()) << page.error().to_string();
      for (auto& r : page->items) seen.push_back(r.id);
      f.page_token = page->next_token;
      ++pages;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } while (!f.page_token.empty() && pages < 1000);
    stop = true;
    writer.join();
    std::set<std::string> uniq(seen.begin(), seen.end());
    EXPECT_EQ(uniq.size(), seen.size()) << "a row was returned twice";
    for (const auto& id : before) EXPECT_TRUE(uniq.count(id)) << id << " skipped";
    EXPECT_GT(pages, 5);
  }
}

TEST(Store, Expired) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  for (int i = 1; i <= 4; ++i) {
    SandboxRecord r = make(i);
    r.end_at_ms = 100 * i;
    if (i == 2) r.state = SandboxState::kKilled;
    if (i == 3) r.state = SandboxState::kPaused;
    ASSERT_TRUE(s->insert_sandbox(r).ok());
  }
  auto e = s->expired(300);
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->size(), 2u);
  EXPECT_EQ((*e)[0].id, id_for(1));
  EXPECT_EQ((*e)[1].id, id_for(3));
  EXPECT_TRUE(s->expired(50)->empty());
}

TEST(Store, ApiKeysCreateVerifyRevoke) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  auto k = s->create_api_key("ci");
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(std::regex_match(k->key, std::regex("^e2b_[0-9a-f]{40}$"))) << k->key;
  EXPECT_EQ(k->info.prefix, k->key.substr(0, 8));
  auto k2 = s->create_api_key("other");
  ASSERT_TRUE(k2.ok());

  auto v = s->verify_api_key(k->key);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->id, k->info.id);
  EXPECT_EQ(v->team_id, kDefaultTeam);
  EXPECT_EQ(s->verify_api_key(k2->key)->id, k2->info.id);

  std::string wrong = k->key;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  for (std::string bad : {wrong, std::string(), std::string("e2b_"), std::string(100000, 'a'),
                          k->info.id, token_digest(k->key)}) {
    auto r = s->verify_api_key(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kUnauthenticated);
    EXPECT_EQ(r.error().message(), "invalid API key");
  }

  auto list = s->list_api_keys();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_TRUE((*list)[0].last_used_ms.has_value() || (*list)[1].last_used_ms.has_value());

  // By unique id prefix.
  ASSERT_TRUE(s->revoke_api_key(k->info.id.substr(0, 12)).ok());
  EXPECT_EQ(s->verify_api_key(k->key).error().code(), ErrorCode::kUnauthenticated);
  EXPECT_TRUE(s->verify_api_key(k2->key).ok());
  // By the plaintext key.
  ASSERT_TRUE(s->revoke_api_key(k2->key).ok());
  EXPECT_FALSE(s->verify_api_key(k2->key).ok());

  EXPECT_EQ(s->revoke_api_key("zzzzzzzz").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->revoke_api_key("abc").error().code(), ErrorCode::kNotFound);  // prefix too short

  auto k3 = s->create_api_key("by id");
  ASSERT_TRUE(s->revoke_api_key(k3->info.id).ok());
  list = s->list_api_keys();
  ASSERT_EQ(list->size(), 3u);
  for (const auto& i : *list) EXPECT_TRUE(i.revoked);
}

// abxd --cluster: a key made on one node's store works on another's once imported; a revocation
// travels the same way and is never undone; what is malformed or clashes is refused.
TEST(Store, ApiKeysExportedFromOneStoreWorkInAnotherAndStayRevoked) {
  auto imported = [](const Result<bool>& r) -> std::string {
    if (!r.ok()) return r.error().message();
    return *r ? "changed" : "unchanged";
  };
  TempDir d;
  auto one = open_or_die(d.path() / "one.db");
  auto two = open_or_die(d.path() / "two.db");
  ASSERT_TRUE(one->create_team("acme").ok());
  auto k = one->create_api_key("ci", "acme");
  ASSERT_TRUE(k.ok());
  auto shared = one->export_api_keys();
  ASSERT_TRUE(shared.ok());
  ASSERT_EQ(shared->size(), 1u);
  EXPECT_EQ((*shared)[0].digest, token_digest(k->key));
  EXPECT_EQ((*shared)[0].info.team_id, "acme");

  EXPECT_EQ(two->verify_api_key(k->key).error().code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(imported(two->import_api_key((*shared)[0])), "changed");
  auto v = two->verify_api_key(k->key);
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(v->id, k->info.id);
  EXPECT_EQ(v->team_id, "acme");  // the team came with its key
  EXPECT_EQ(imported(two->import_api_key((*shared)[0])), "unchanged");  // nothing new

  // Revoked on one: exported revoked, and the import revokes it on two.
  ASSERT_TRUE(one->revoke_api_key(k->info.id).ok());
  auto revoked = one->export_api_keys();
  ASSERT_TRUE(revoked.ok());
  ASSERT_TRUE((*revoked)[0].info.revoked);
  EXPECT_EQ(imported(two->import_api_key((*revoked)[0])), "changed");
  EXPECT_EQ(two->verify_api_key(k->key).error().code(), ErrorCode::kUnauthenticated);
  // An active copy of it later never brings it back.
  EXPECT_EQ(imported(two->import_api_key((*shared)[0])), "unchanged");
  EXPECT_EQ(two->verify_api_key(k->key).error().code(), ErrorCode::kUnauthenticated);

  // Malformed records, and a record whose id names another key of this store.
  SharedApiKey bad = (*shared)[0];
  bad.digest = "not hex";
  EXPECT_EQ(two->import_api_key(bad).error().code(), ErrorCode::kInvalidArgument);
  bad = (*shared)[0];
  bad.info.team_id = "Acme!";
  EXPECT_EQ(two->import_api_key(bad).error().code(), ErrorCode::kInvalidArgument);
  bad = (*shared)[0];
  bad.digest = token_digest("e2b_another");
  EXPECT_EQ(two->import_api_key(bad).error().code(), ErrorCode::kAlreadyExists);
  auto own = two->create_api_key("own");
  ASSERT_TRUE(own.ok());
  bad = (*shared)[0];
  bad.info.id = "00000000000000ff";
  bad.digest = token_digest(own->key);  // another id with a digest two has
  EXPECT_EQ(two->import_api_key(bad).error().code(), ErrorCode::kAlreadyExists);
  EXPECT_TRUE(two->verify_api_key(own->key).ok());
}

TEST(Store, StoresOnlyDigestsOfKeysAndTokens) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  std::string key;
  std::string tok = "envd-token-0123456789abcdef0123456789abcdef";
  {
    auto s = open_or_die(p);
    auto k = s->create_api_key("ci");
    ASSERT_TRUE(k.ok());
    key = k->key;
    SandboxRecord r = make(1);
    r.access_token_digest = token_digest(tok);
    ASSERT_TRUE(s->insert_sandbox(r).ok());
    // Look at the files while the store is open (rows may sit in the WAL) and after close.
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::string bytes = slurp(p.string() + suffix);
      EXPECT_EQ(bytes.find(key), std::string::npos) << suffix;
      EXPECT_EQ(bytes.find(key.substr(4)), std::string::npos) << suffix;
      EXPECT_EQ(bytes.find(tok), std::string::npos) << suffix;
    }
  }
  std::string all;
  for (const auto& e : fs::directory_iterator(d.path())) all += slurp(e.path());
  EXPECT_EQ(all.find(key), std::string::npos);
  EXPECT_EQ(all.find(key.substr(4)), std::string::npos);
  EXPECT_EQ(all.find(tok), std::string::npos);
  EXPECT_NE(all.find(token_digest(key)), std::string::npos);  // the digest is what is kept
  EXPECT_NE(all.find(token_digest(tok)), std::string::npos);
}

TEST(Store, SurvivesReopen) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  std::string key;
  std::string ak;
  {
    auto s = open_or_die(p);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->insert_sandbox(make(i)).ok());
    ASSERT_TRUE(s->update_state(id_for(2), SandboxState::kPaused).ok());
    key = s->create_api_key("ci")->key;
    ak = s->create_access_key("sdk")->access_key_id;
    ASSERT_FALSE(*s->remember_nonce("n1", 10'000, 0));
    ASSERT_TRUE(s->record_template({"demo", 5, "ok", ""}).ok());
  }
  auto s = open_or_die(p);
  EXPECT_TRUE(s->check_integrity().ok());
  EXPECT_EQ(s->list_sandboxes({})->items.size(), 5u);
  EXPECT_EQ(s->get_sandbox(id_for(2))->state, SandboxState::kPaused);
  EXPECT_TRUE(s->verify_api_key(key).ok());
  EXPECT_TRUE(s->access_key_secret(ak)->has_value());
  EXPECT_TRUE(*s->remember_nonce("n1", 10'000, 1));  // replay after restart
  ASSERT_EQ(s->list_templates_seen()->size(), 1u);
}

// A home from before teams (schema 4): its keys, access keys and sandboxes join the default
// team, so the single key it has keeps seeing everything it saw.
TEST(Store, Version4FileMigratesIntoTheDefaultTeam) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  std::string key, ak;
  {
    auto s = open_or_die(p);
    auto k = s->create_api_key("first-start");
    ASSERT_TRUE(k.ok());
    key = k->key;
    auto a = s->create_access_key("sdk");
    ASSERT_TRUE(a.ok());
    ak = a->access_key_id;
    ASSERT_TRUE(s->insert_sandbox(make(1)).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(p.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP INDEX sandboxes_by_team;"
                         "ALTER TABLE sandboxes DROP COLUMN team_id;"
                         "ALTER TABLE api_keys DROP COLUMN team_id;"
                         "ALTER TABLE access_keys DROP COLUMN team_id;"
                         "DROP TABLE teams; DROP TABLE template_owners; DROP TABLE events;"
                         "DROP TABLE webhooks; DROP TABLE secrets;"
                         "ALTER TABLE sandboxes DROP COLUMN on_timeout_memory;"
                         "ALTER TABLE sandboxes DROP COLUMN filesystem_only;"
                         "DROP TABLE volumes; ALTER TABLE sandboxes DROP COLUMN volume_mounts;"
                         "DROP TABLE template_builds; DROP TABLE template_build_logs;"
                         "UPDATE schema_version SET version = 4",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto s = open_or_die(p);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->schema_version(), kSchemaVersion);
  auto teams = s->list_teams();
  ASSERT_TRUE(teams.ok());
  ASSERT_EQ(teams->size(), 1u);
  EXPECT_EQ((*teams)[0].id, kDefaultTeam);
  EXPECT_GT((*teams)[0].created_at_ms, 1'600'000'000'000);
  EXPECT_EQ((*teams)[0].active_keys, 2);
  auto v = s->verify_api_key(key);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->team_id, kDefaultTeam);
  EXPECT_EQ(s->access_key_team(ak)->value_or(""), kDefaultTeam);
  auto got = s->get_sandbox(id_for(1));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->team_id, kDefaultTeam);
  SandboxFilter f;
  f.team_id = std::string(kDefaultTeam);
  EXPECT_EQ(s->list_sandboxes(f)->items.size(), 1u);
  // A key made without naming a team is the default team's, as every key was.
  auto k2 = s->create_api_key("later");
  ASSERT_TRUE(k2.ok());
  EXPECT_EQ(s->verify_api_key(k2->key)->team_id, kDefaultTeam);
}

TEST(Store, TeamsOwnKeysSandboxesAndTemplates) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  ASSERT_TRUE(s->create_team("acme").ok());
  EXPECT_EQ(s->create_team("acme").error().code(), ErrorCode::kAlreadyExists);
  for (const char* bad : {"", "Acme", "-x", "a/b", "a b"})
    EXPECT_EQ(s->create_team(bad).error().code(), ErrorCode::kInvalidArgument) << bad;
  EXPECT_EQ(s->create_team(std::string(64, 'a')).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s->create_api_key("x", "nope").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->create_access_key("x", "nope").error().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(s->list_api_keys()->empty());  // the refused create left nothing

  auto ka = s->create_api_key("a", "acme");
  ASSERT_TRUE(ka.ok());
  EXPECT_EQ(ka->info.team_id, "acme");
  EXPECT_EQ(s->verify_api_key(ka->key)->team_id, "acme");
  auto aka = s->create_access_key("a", "acme");
  ASSERT_TRUE(aka.ok());
  EXPECT_EQ(s->access_key_team(aka->access_key_id)->value_or(""), "acme");
  EXPECT_EQ(s->list_access_keys()->at(0).team_id, "acme");
  EXPECT_EQ(s->list_api_keys()->at(0).team_id, "acme");
  ASSERT_TRUE(s->revoke_access_key(aka->access_key_id).ok());
  EXPECT_FALSE(s->access_key_team(aka->access_key_id)->has_value());

  SandboxRecord a = make(1);
  a.team_id = "acme";
  ASSERT_TRUE(s->insert_sandbox(a).ok());
  ASSERT_TRUE(s->insert_sandbox(make(2)).ok());  // default team
  SandboxRecord bad = make(3);
  bad.team_id = "";
  EXPECT_EQ(s->insert_sandbox(bad).error().code(), ErrorCode::kInvalidArgument);
  SandboxFilter f;
  f.team_id = "acme";
  auto page = s->list_sandboxes(f);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].id, id_for(1));
  EXPECT_EQ(page->items[0].team_id, "acme");
  f.team_id = std::string(kDefaultTeam);
  page = s->list_sandboxes(f);
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].id, id_for(2));
  f.team_id.reset();
  EXPECT_EQ(s->list_sandboxes(f)->items.size(), 2u);

  EXPECT_FALSE(s->template_owner("web")->has_value());
  ASSERT_TRUE(s->claim_template("web", "acme").ok());
  ASSERT_TRUE(s->claim_template("web", "acme").ok());  // a rebuild by the owner
  EXPECT_EQ(s->claim_template("web", kDefaultTeam).error().code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(s->template_owner("web")->value_or(""), "acme");
  ASSERT_TRUE(s->release_template("web").ok());
  EXPECT_FALSE(s->template_owner("web")->has_value());
  ASSERT_TRUE(s->claim_template("web", kDefaultTeam).ok());

  auto teams = s->list_teams();
  ASSERT_EQ(teams->size(), 2u);
}

TEST(Store, AccessKeys) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  auto k = s->create_access_key("sdk");
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(std::regex_match(k->access_key_id, std::regex("^ABX[A-Z0-9]{17}$")));
  EXPECT_EQ(k->secret.size(), 64u);
  auto sec = s->access_key_secret(k->access_key_id);
  ASSERT_TRUE(sec.ok());
  ASSERT_TRUE(sec->has_value());
  EXPECT_EQ(**sec, k->secret);
  EXPECT_FALSE(s->access_key_secret("ABXNOPE")->has_value());
  auto list = s->list_access_keys();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE((*list)[0].secret.empty());
  ASSERT_TRUE(s->revoke_access_key(k->access_key_id).ok());
  EXPECT_FALSE(s->access_key_secret(k->access_key_id)->has_value());
  EXPECT_EQ(s->revoke_access_key("ABXNOPE").error().code(), ErrorCode::kNotFound);
}

TEST(Store, NonceReplayAndPruning) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  EXPECT_FALSE(*s->remember_nonce("ak/abc", 1000, 0));
  EXPECT_TRUE(*s->remember_nonce("ak/abc", 1000, 500));
  EXPECT_TRUE(*s->remember_nonce("ak/abc", 5000, 999));
  // Expired entries do not count as seen, and are taken over.
  EXPECT_FALSE(*s->remember_nonce("ak/abc", 3000, 1000));
  EXPECT_TRUE(*s->remember_nonce("ak/abc", 3000, 2000));
  EXPECT_FALSE(*s->remember_nonce("ak/def", 100, 0));
  EXPECT_FALSE(*s->remember_nonce("ak/ghi", 200, 0));
  auto pruned = s->prune_nonces(150);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(*pruned, 1);
  EXPECT_EQ(s->remember_nonce("", 1, 0).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s->remember_nonce(std::string(300, 'n'), 1, 0).error().code(),
            ErrorCode::kInvalidArgument);
}

EventRecord event(std::string team, std::string sandbox, std::string type, std::int64_t ts) {
  EventRecord e;
  e.ts_ms = ts;
  e.team_id = std::move(team);
  e.sandbox_id = std::move(sandbox);
  e.template_id = "base";
  e.type = std::move(type);
  return e;
}

TEST(StoreEvents, IdsIncreaseAndCursorFilters) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  ASSERT_TRUE(s);
  EXPECT_EQ(*s->last_event_id(), 0);
  std::vector<std::int64_t> ids;
  const char* types[] = {"sandbox.lifecycle.created", "sandbox.lifecycle.killed"};
  for (int i = 0; i < 10; ++i) {
    auto id = s->append_event(event(i % 2 ? "b" : "a", id_for(i / 2), types[i % 2], 1000 + i));
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    if (!ids.empty()) {
      EXPECT_GT(*id, ids.back());
    }
    ids.push_back(*id);
  }
  EXPECT_EQ(*s->last_event_id(), ids.back());
  // Team a's events after the third id, oldest first.
  EventFilter f;
  f.team_id = "a";
  f.after_id = ids[2];
  auto page = s->list_events(f);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 3u);  // ids[4], ids[6], ids[8]
  EXPECT_EQ((*page)[0].id, ids[4]);
  EXPECT_EQ((*page)[2].id, ids[8]);
  for (const auto& e : *page) {
    EXPECT_EQ(e.team_id, "a");
    EXPECT_EQ(e.data, "{}");
  }
  // Types, sandbox, descending, offset and limit.
  EventFilter g;
  g.types = {"sandbox.lifecycle.killed"};
  g.descending = true;
  g.limit = 2;
  g.offset = 1;
  page = s->list_events(g);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].id, ids[7]);
  EXPECT_EQ((*page)[1].id, ids[5]);
  EventFilter h;
  h.sandbox_id = id_for(1);
  page = s->list_events(h);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].id, ids[2]);
  EXPECT_EQ((*page)[1].id, ids[3]);
  // Bad input.
  EXPECT_FALSE(s->append_event(event("Not A Team", id_for(1), "x", 1)).ok());
  EXPECT_FALSE(s->append_event(event("a", id_for(1), "", 1)).ok());
  auto big = event("a", id_for(1), "x", 1);
  big.data = std::string(5000, 'x');
  EXPECT_FALSE(s->append_event(big).ok());
  EventFilter bad;
  bad.limit = 0;
  EXPECT_FALSE(s->list_events(bad).ok());
  // An event written for abxd's death only (a DELETE's killed event): another connection reads
  // it, and this one is back at synchronous = FULL after it, after a refused one too.
  auto relaxed = s->append_event(event("a", id_for(9), "sandbox.lifecycle.killed", 2000),
                                 Store::Durability::kProcessCrash);
  ASSERT_TRUE(relaxed.ok()) << relaxed.error().to_string();
  EXPECT_EQ(*open_or_die(d.path() / "abx.db")->last_event_id(), *relaxed);
  EXPECT_EQ(*s->synchronous_setting(), 2);
  EXPECT_FALSE(s->append_event(big, Store::Durability::kProcessCrash).ok());
  EXPECT_EQ(*s->synchronous_setting(), 2);
}

TEST(StoreEvents, PruneKeepsNewestAndIdsAreNeverReused) {
  TempDir d;
  std::int64_t last = 0;
  {
    auto s = open_or_die(d.path() / "abx.db");
    ASSERT_TRUE(s);
    for (int i = 0; i < 20; ++i) {
      auto id = s->append_event(event("a", id_for(i), "sandbox.lifecycle.created", 1000 + i));
      ASSERT_TRUE(id.ok());
      last = *id;
    }
    // Older than ts 1005 go, and all but the newest 10.
    auto n = s->prune_events(1005, 10);
    ASSERT_TRUE(n.ok()) << n.error().to_string();
    EXPECT_EQ(*n, 10);
    auto all = s->list_events(EventFilter{});
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), 10u);
    EXPECT_EQ(all->front().ts_ms, 1010);
    // Retention by time alone.
    EXPECT_EQ(*s->prune_events(1012, 1000), 2);
    // Everything pruned: the last id is still known.
    EXPECT_EQ(*s->prune_events(5000, 0), 8);
    EXPECT_EQ(*s->last_event_id(), last);
  }
  // After a reopen (abxd restarted) the next id is past every id given before.
  auto s = open_or_die(d.path() / "abx.db");
  ASSERT_TRUE(s);
  auto id = s->append_event(event("a", id_for(1), "sandbox.lifecycle.created", 6000));
  ASSERT_TRUE(id.ok());
  EXPECT_GT(*id, last);
}

TEST(StoreWebhooks, CrudIsPerTeam) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  ASSERT_TRUE(s);
  WebhookRecord w;
  w.id = std::string(32, 'a');
  w.team_id = "a";
  w.name = "hook";
  w.url = "http://127.0.0.1:9/x";
  w.events = {"sandbox.lifecycle.created", "sandbox.lifecycle.killed"};
  w.secret = "s3cret";
  w.created_at_ms = 1000;
  ASSERT_TRUE(s->create_webhook(w).ok());
  EXPECT_EQ(s->create_webhook(w).error().code(), ErrorCode::kAlreadyExists);
  WebhookRecord other = w;
  other.id = std::string(32, 'b');
  other.team_id = "b";
  other.events.clear();
  ASSERT_TRUE(s->create_webhook(other).ok());

  auto mine = s->list_webhooks(std::string("a"));
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].events, w.events);
  EXPECT_EQ((*mine)[0].secret, "s3cret");
  EXPECT_TRUE((*mine)[0].enabled);
  EXPECT_EQ(s->list_webhooks(std::nullopt)->size(), 2u);
  // Another team's id is not found, for every verb.
  EXPECT_EQ(s->get_webhook("b", w.id).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->delete_webhook("b", w.id).error().code(), ErrorCode::kNotFound);
  WebhookRecord stolen = w;
  stolen.team_id = "b";
  EXPECT_EQ(s->update_webhook(stolen).error().code(), ErrorCode::kNotFound);

  w.enabled = false;
  w.events = {};
  w.url = "http://127.0.0.1:9/y";
  ASSERT_TRUE(s->update_webhook(w).ok());
  auto got = s->get_webhook("a", w.id);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->enabled);
  EXPECT_TRUE(got->events.empty());
  EXPECT_EQ(got->url, "http://127.0.0.1:9/y");
  EXPECT_EQ(got->created_at_ms, 1000);
  ASSERT_TRUE(s->delete_webhook("a", w.id).ok());
  EXPECT_EQ(s->get_webhook("a", w.id).error().code(), ErrorCode::kNotFound);

  // Bad input.
  WebhookRecord bad = other;
  bad.id = "short";
  EXPECT_EQ(s->create_webhook(bad).error().code(), ErrorCode::kInvalidArgument);
  bad = other;
  bad.id = std::string(32, 'c');
  bad.url = std::string(3000, 'x');
  EXPECT_EQ(s->create_webhook(bad).error().code(), ErrorCode::kInvalidArgument);
  bad.url = "http://x";
  bad.events = {"a,b"};
  EXPECT_EQ(s->create_webhook(bad).error().code(), ErrorCode::kInvalidArgument);
}

TEST(Store, TemplatesSeenUpsert) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  ASSERT_TRUE(s->record_template({"a", 1, "error", "t.yaml:3:5: unknown key"}).ok());
  ASSERT_TRUE(s->record_template({"a", 2, "ok", ""}).ok());
  ASSERT_TRUE(s->record_template({"b", 2, "ok", ""}).ok());
  auto l = s->list_templates_seen();
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[0].status, "ok");
  EXPECT_EQ((*l)[0].last_loaded_at_ms, 2);
}

TEST(Store, MapsSqliteErrors) {
  EXPECT_EQ(sql::map_error(SQLITE_CONSTRAINT_PRIMARYKEY, nullptr, "x").code(),
            ErrorCode::kAlreadyExists);
  EXPECT_EQ(sql::map_error(SQLITE_CONSTRAINT_CHECK, nullptr, "x").code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(sql::map_error(SQLITE_BUSY, nullptr, "x").code(), ErrorCode::kUnavailable);
  EXPECT_EQ(sql::map_error(SQLITE_BUSY_SNAPSHOT, nullptr, "x").code(), ErrorCode::kUnavailable);
  EXPECT_EQ(sql::map_error(SQLITE_FULL, nullptr, "x").code(), ErrorCode::kInsufficientStorage);
  EXPECT_EQ(sql::map_error(SQLITE_READONLY, nullptr, "x").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(sql::map_error(SQLITE_CORRUPT, nullptr, "x").code(), ErrorCode::kInternal);
  auto e = sql::map_error(SQLITE_BUSY, nullptr, "insert sandbox");
  EXPECT_NE(e.message().find("insert sandbox"), std::string::npos);
}

TEST(Store, BusyWriterIsUnavailable) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  StoreOptions o;
  o.busy_timeout = std::chrono::milliseconds(50);
  auto s = Store::open(p, o);
  ASSERT_TRUE(s.ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(p.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto st = (*s)->insert_sandbox(make(1));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kUnavailable);
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_TRUE((*s)->insert_sandbox(make(1)).ok());
}

// A child inserts rows and reports each acknowledged insert on a pipe; the parent SIGKILLs it
// mid-stream, reopens the file and checks integrity and that every acknowledged row is there.
TEST(StoreCrash, SigkillLosesNothingAcknowledged) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  { ASSERT_TRUE(open_or_die(p)); }
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto s = Store::open(p);
    if (!s.ok()) ::_exit(2);
    for (int i = 0;; ++i) {
      SandboxRecord r = make(i);
      r.metadata["pad"] = std::string(2000, 'x');  // bigger rows: more pages per commit
      if (!(*s)->insert_sandbox(r).ok()) ::_exit(3);
      int n = i;
      if (::write(fds[1], &n, sizeof n) != sizeof n) ::_exit(4);
    }
  }
  ::close(fds[1]);
  int last = -1;
  int n = 0;
  while (last < 60 && ::read(fds[0], &n, sizeof n) == sizeof n) last = n;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  // Drain acknowledgements written between our last read and the kill.
  while (::read(fds[0], &n, sizeof n) == sizeof n) last = n;
  ::close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_GE(last, 60);

  auto s = open_or_die(p);
  ASSERT_TRUE(s->check_integrity().ok());
  for (int i = 0; i <= last; ++i) {
    EXPECT_TRUE(s->get_sandbox(id_for(i)).ok()) << "acknowledged row " << i << " lost";
  }
}

// A writer that dies inside an open transaction leaves nothing half-written behind.
TEST(StoreCrash, ExitInsideTransactionRollsBack) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  {
    auto s = open_or_die(p);
    ASSERT_TRUE(s->insert_sandbox(make(1)).ok());
  }
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sqlite3* db = nullptr;
    if (sqlite3_open(p.c_str(), &db) != SQLITE_OK) ::_exit(2);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) ::_exit(3);
    if (sqlite3_exec(db, "UPDATE sandboxes SET state = 'killed'", nullptr, nullptr, nullptr) !=
        SQLITE_OK) {
      ::_exit(4);
    }
    int rc = sqlite3_exec(
        db,
        "INSERT INTO sandboxes (id, template_id, client_id, created_at, end_at, state, "
        "token_digest, cpu_count, memory_mb, disk_mb) VALUES ('bbbbbbbbbbbbbbbbbbbb', "
        "'base', 'c', 1, 2, 'running', 'd', 1, 1, 1)",
        nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) ::_exit(5);
    // Force dirty pages out to the WAL without committing, then die.
    sqlite3_exec(db, "PRAGMA cache_size = 1", nullptr, nullptr, nullptr);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto s = open_or_die(p);
  ASSERT_TRUE(s->check_integrity().ok());
  EXPECT_EQ(s->get_sandbox(id_for(1))->state, SandboxState::kRunning);
  EXPECT_EQ(s->get_sandbox("bbbbbbbbbbbbbbbbbbbb").error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace abx::store

namespace abx::store {
namespace {

TEST(StoreSecrets, CrudIsPerTeamAndVersioned) {
  TempDir d;
  auto s = open_or_die(d.path() / "abx.db");
  ASSERT_TRUE(s);
  SecretRecord r;
  r.id = "sec_" + std::string(24, 'a');
  r.team_id = "a";
  r.name = "openai";
  r.metadata = {{"env", "prod"}};
  r.sealed = "v1.sealed-one";
  r.created_at_ms = r.updated_at_ms = 1000;
  ASSERT_TRUE(s->create_secret(r, 2).ok());
  SecretRecord same_name = r;
  same_name.id = "sec_" + std::string(24, 'b');
  EXPECT_EQ(s->create_secret(same_name, 2).error().code(), ErrorCode::kAlreadyExists);
  SecretRecord other_team = same_name;
  other_team.team_id = "b";
  ASSERT_TRUE(s->create_secret(other_team, 2).ok());  // names are per team
  SecretRecord second = r;
  second.id = "sec_" + std::string(24, 'c');
  second.name = "anthropic";
  ASSERT_TRUE(s->create_secret(second, 2).ok());
  SecretRecord third = second;
  third.id = "sec_" + std::string(24, 'd');
  third.name = "third";
  EXPECT_EQ(s->create_secret(third, 2).error().code(), ErrorCode::kResourceExhausted);

  // By id or by name; another team's is not found.
  EXPECT_EQ(s->get_secret("a", "openai")->id, r.id);
  EXPECT_EQ(s->get_secret("a", r.id)->name, "openai");
  EXPECT_EQ(s->get_secret("b", r.id).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->delete_secret("b", r.id).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->update_secret("b", r.id, "x", std::nullopt, 2000).error().code(),
            ErrorCode::kNotFound);

  // Paged by name.
  auto p1 = s->list_secrets("a", "", 1);
  ASSERT_TRUE(p1.ok());
  ASSERT_EQ(p1->items.size(), 1u);
  EXPECT_EQ(p1->items[0].name, "anthropic");
  EXPECT_EQ(p1->next_token, "anthropic");
  auto p2 = s->list_secrets("a", p1->next_token, 1);
  ASSERT_EQ(p2->items.size(), 1u);
  EXPECT_EQ(p2->items[0].name, "openai");
  EXPECT_TRUE(p2->next_token.empty());

  // An update is a new version; metadata stays unless given.
  auto u = s->update_secret("a", r.id, "v1.sealed-two", std::nullopt, 2000);
  ASSERT_TRUE(u.ok()) << u.error().message();
  EXPECT_EQ(u->version, 2);
  EXPECT_EQ(u->sealed, "v1.sealed-two");
  EXPECT_EQ(u->metadata, r.metadata);
  EXPECT_EQ(u->created_at_ms, 1000);
  EXPECT_EQ(u->updated_at_ms, 2000);
  u = s->update_secret("a", r.id, "v1.sealed-3", std::map<std::string, std::string>{}, 3000);
  EXPECT_EQ(u->version, 3);
  EXPECT_TRUE(u->metadata.empty());

  ASSERT_TRUE(s->delete_secret("a", r.id).ok());
  EXPECT_EQ(s->get_secret("a", "openai").error().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(s->create_secret(third, 2).ok());  // room again

  SecretRecord bad = r;
  bad.id = "nope";
  EXPECT_EQ(s->create_secret(bad, 10).error().code(), ErrorCode::kInvalidArgument);
}

TEST(StoreVolumes, CrudIsPerTeamAndSurvivesReopen) {
  TempDir d;
  VolumeRecord v{"1b4e28ba-2fa1-41d2-883f-0016d3cca427", "a", "data", "tok1", 1000};
  {
    auto s = open_or_die(d.path() / "abx.db");
    ASSERT_TRUE(s);
    ASSERT_TRUE(s->create_volume(v, 2).ok());
    VolumeRecord same_name = v;
    same_name.id = "2b4e28ba-2fa1-41d2-883f-0016d3cca427";
    EXPECT_EQ(s->create_volume(same_name, 2).error().code(), ErrorCode::kAlreadyExists);
    VolumeRecord other_team = same_name;
    other_team.team_id = "b";
    ASSERT_TRUE(s->create_volume(other_team, 2).ok());  // names are per team
    VolumeRecord second{"3b4e28ba-2fa1-41d2-883f-0016d3cca427", "a", "cache", "tok3", 2000};
    ASSERT_TRUE(s->create_volume(second, 2).ok());
    VolumeRecord third{"4b4e28ba-2fa1-41d2-883f-0016d3cca427", "a", "third", "tok4", 3000};
    EXPECT_EQ(s->create_volume(third, 2).error().code(), ErrorCode::kResourceExhausted);
    VolumeRecord bad = third;
    bad.name.clear();
    EXPECT_EQ(s->create_volume(bad, 10).error().code(), ErrorCode::kInvalidArgument);

    // A sandbox's mounts are kept with it.
    SandboxRecord r = make(1);
    r.team_id = "a";
    r.volume_mounts = {{v.id, "data", "/mnt/data"}, {second.id, "cache", "/home/user/.cache"}};
    ASSERT_TRUE(s->insert_sandbox(r).ok());
  }
  auto s = open_or_die(d.path() / "abx.db");  // abxd restarted
  ASSERT_TRUE(s);
  auto list = s->list_volumes("a");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "data");  // oldest first
  EXPECT_EQ((*list)[1].name, "cache");
  EXPECT_EQ(s->get_volume("a", "data")->token, "tok1");
  EXPECT_EQ(s->get_volume("a", v.id)->name, "data");
  EXPECT_EQ(s->get_volume("b", v.id).error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->volume_by_id(v.id)->team_id, "a");  // any team's, by id only
  EXPECT_EQ(s->volume_by_id("data").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->delete_volume("b", v.id).error().code(), ErrorCode::kNotFound);
  auto sb = s->get_sandbox(id_for(1));
  ASSERT_TRUE(sb.ok());
  ASSERT_EQ(sb->volume_mounts.size(), 2u);
  EXPECT_EQ(sb->volume_mounts[1], (VolumeMount{list->at(1).id, "cache", "/home/user/.cache"}));
  ASSERT_TRUE(s->delete_volume("a", v.id).ok());
  EXPECT_EQ(s->get_volume("a", "data").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(s->list_volumes("a")->size(), 1u);
}

}  // namespace
}  // namespace abx::store

namespace abx::store {
namespace {

// Schema 11: the e2b SDK's template builds and their logs outlive a reopen; a file of schema 10
// migrates (its other rows untouched).
TEST(StoreTemplateBuilds, PutListLogsDeleteAndMigrationFrom10) {
  TempDir d;
  fs::path p = d.path() / "abx.db";
  {
    auto s = open_or_die(p);
    ASSERT_TRUE(s->insert_sandbox(make(1)).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(p.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE template_builds; DROP TABLE template_build_logs;"
                         "UPDATE schema_version SET version = 10",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  {
    auto s = open_or_die(p);
    EXPECT_EQ(s->schema_version(), 11);
    EXPECT_TRUE(s->get_sandbox(id_for(1)).ok());
    TemplateBuildRecord b;
    b.build_id = "b1";
    b.template_id = "app";
    b.team_id = "default";
    b.status = "building";
    b.tags = {"default", "v1"};
    b.created_at_ms = 1000;
    b.cpu_count = 2;
    b.memory_mb = 1024;
    ASSERT_TRUE(s->put_template_build(b).ok());
    b.build_id = "b2";
    b.created_at_ms = 2000;
    b.status = "error";
    b.reason = "boom";
    b.reason_step = "3";
    b.tags = {};
    ASSERT_TRUE(s->put_template_build(b).ok());
    ASSERT_TRUE(s->append_template_build_logs(
                     "b1", {{0, 5, "info", "one", "base"}, {1, 6, "error", "two", "1"}})
                    .ok());
    b.build_id = "bad";
    b.team_id = "Not A Team";
    EXPECT_EQ(s->put_template_build(b).error().code(), ErrorCode::kInvalidArgument);
  }
  auto s = open_or_die(p);
  auto all = s->list_template_builds();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].build_id, "b1");
  EXPECT_EQ((*all)[0].status, "building");
  EXPECT_EQ((*all)[0].tags, (std::vector<std::string>{"default", "v1"}));
  EXPECT_EQ((*all)[0].cpu_count, 2);
  EXPECT_EQ((*all)[0].memory_mb, 1024);
  EXPECT_EQ((*all)[1].reason, "boom");
  EXPECT_EQ((*all)[1].reason_step, "3");
  auto logs = s->template_build_logs("b1", 100);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[1].message, "two");
  EXPECT_EQ((*logs)[1].level, "error");
  EXPECT_EQ((*logs)[1].step, "1");
  EXPECT_EQ(s->template_build_logs("b1", 1)->size(), 1u);
  // Only the finished builds of a template go when asked so.
  EXPECT_EQ(*s->delete_template_builds("app", {"ready", "error"}), 1);
  EXPECT_EQ(s->list_template_builds()->size(), 1u);
  EXPECT_EQ(*s->delete_template_builds("app"), 1);
  EXPECT_TRUE(s->list_template_builds()->empty());
  EXPECT_TRUE(s->template_build_logs("b1", 100)->empty());
}

}  // namespace
}  // namespace abx::store
