#include "abx/store/store.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>

#include "abx/base/base64.h"
#include "abx/base/hex.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/token/token.h"
#include "sqlite.h"

namespace abx::store {
namespace json = boost::json;

namespace {

constexpr std::size_t kMaxPresentedKey = 256;
constexpr std::int64_t kLastUsedGranularityMs = 60'000;
constexpr int kPruneEvery = 256;

std::array<unsigned char, SHA256_DIGEST_LENGTH> sha256(std::string_view s) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> out{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), out.data());
  return out;
}

// Uniform characters from `alphabet` (rejection sampling: no modulo bias).
Result<std::string> random_chars(std::string_view alphabet, std::size_t n) {
  const unsigned limit = 256 - (256 % alphabet.size());
  std::string out;
  while (out.size() < n) {
    unsigned char buf[64];
    if (RAND_bytes(buf, sizeof buf) != 1) return internal_error("RAND_bytes failed");
    for (unsigned char b : buf) {
      if (b < limit && out.size() < n) out += alphabet[b % alphabet.size()];
    }
  }
  return out;
}

std::string encode_map(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return json::serialize(o);
}

Result<std::map<std::string, std::string>> decode_map(const std::string& s, std::string_view what) {
  std::error_code ec;
  json::value v = json::parse(s, ec);
  if (ec || !v.is_object()) return internal_error("store: corrupt " + std::string(what) + " JSON");
  std::map<std::string, std::string> m;
  for (const auto& kv : v.get_object()) {
    if (!kv.value().is_string()) {
      return internal_error("store: corrupt " + std::string(what) + " JSON");
    }
    m.emplace(std::string(kv.key()), std::string(kv.value().get_string()));
  }
  return m;
}

std::string encode_mounts(const std::vector<VolumeMount>& mounts) {
  json::array a;
  for (const auto& m : mounts)
    a.emplace_back(json::object{{"volumeID", m.volume_id}, {"name", m.name}, {"path", m.path}});
  return json::serialize(a);
}

Result<std::vector<VolumeMount>> decode_mounts(const std::string& s) {
  std::error_code ec;
  json::value v = json::parse(s, ec);
  if (ec || !v.is_array()) return internal_error("store: corrupt volume_mounts JSON");
  std::vector<VolumeMount> out;
  for (const auto& e : v.get_array()) {
    const json::object* o = e.if_object();
    const json::value* id = o ? o->if_contains("volumeID") : nullptr;
    const json::value* name = o ? o->if_contains("name") : nullptr;
    const json::value* path = o ? o->if_contains("path") : nullptr;
    if (!id || !name || !path || !id->is_string() || !name->is_string() || !path->is_string())
      return internal_error("store: corrupt volume_mounts JSON");
    out.push_back({std::string(id->get_string()), std::string(name->get_string()),
                   std::string(path->get_string())});
  }
  return out;
}

constexpr const char* kSandboxColumns =
    "id, template_id, client_id, created_at, end_at, state, init_pid, init_start_time, "
    "token_digest, cpu_count, memory_mb, disk_mb, metadata, env_vars, domain, on_timeout, "
    "auto_resume, timeout_s, network, checkpoint, team_id, on_timeout_memory, filesystem_only, "
    "volume_mounts";

Result<SandboxRecord> read_sandbox(const sql::Stmt& s) {
  SandboxRecord r;
  r.id = s.text(0);
  r.template_id = s.text(1);
  r.client_id = s.text(2);
  r.created_at_ms = s.int64(3);
  r.end_at_ms = s.int64(4);
  auto st = parse_state(s.text(5));
  if (!st) return internal_error("store: corrupt sandbox state for " + r.id);
  r.state = *st;
  r.init_pid = s.int64(6);
  r.init_start_time = static_cast<std::uint64_t>(s.int64(7));
  r.access_token_digest = s.text(8);
  r.cpu_count = s.real(9);
  r.memory_mb = s.int64(10);
  r.disk_mb = s.int64(11);
  ABX_ASSIGN_OR_RETURN(r.metadata, decode_map(s.text(12), "metadata"));
  ABX_ASSIGN_OR_RETURN(r.env_vars, decode_map(s.text(13), "env_vars"));
  r.domain = s.text(14);
  r.pause_on_timeout = s.text(15) == "pause";
  r.auto_resume = s.int64(16) != 0;
  r.timeout_s = s.int64(17);
  r.network = s.text(18);
  r.checkpoint = s.text(19);
  r.team_id = s.text(20);
  r.pause_keeps_memory = s.int64(21) != 0;
  r.filesystem_only = s.int64(22) != 0;
  ABX_ASSIGN_OR_RETURN(r.volume_mounts, decode_mounts(s.text(23)));
  return r;
}

// Schema migrations, applied in order; migration i brings the file to version i + 1. Never edit a
// released entry: append a new one.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE sandboxes (
  id              TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 20),
  template_id     TEXT NOT NULL,
  client_id       TEXT NOT NULL,
  created_at      INTEGER NOT NULL,
  end_at          INTEGER NOT NULL,
  state           TEXT NOT NULL CHECK (state IN ('running', 'paused', 'killed')),
  init_pid        INTEGER NOT NULL DEFAULT 0,
  init_start_time INTEGER NOT NULL DEFAULT 0,
  token_digest    TEXT NOT NULL,
  cpu_count       REAL NOT NULL,
  memory_mb       INTEGER NOT NULL,
  disk_mb         INTEGER NOT NULL,
  metadata        TEXT NOT NULL DEFAULT '{}',
  env_vars        TEXT NOT NULL DEFAULT '{}',
  domain          TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX sandboxes_by_created ON sandboxes (created_at, id);
CREATE INDEX sandboxes_by_deadline ON sandboxes (state, end_at);
CREATE TABLE api_keys (
  id         TEXT PRIMARY KEY NOT NULL,
  name       TEXT NOT NULL,
  prefix     TEXT NOT NULL,
  digest     TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  last_used  INTEGER,
  revoked    INTEGER NOT NULL DEFAULT 0
);
-- The secret must stay usable for HMAC, so it is stored as-is; the file is mode 0600.
CREATE TABLE access_keys (
  id         TEXT PRIMARY KEY NOT NULL,
  secret     TEXT NOT NULL,
  name       TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  revoked    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE nonces (
  nonce      TEXT PRIMARY KEY NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX nonces_by_expiry ON nonces (expires_at);
CREATE TABLE templates_seen (
  id             TEXT PRIMARY KEY NOT NULL,
  last_loaded_at INTEGER NOT NULL,
  status         TEXT NOT NULL,
  error          TEXT NOT NULL DEFAULT ''
);
)sql",
    // 2: E2B's lifecycle (onTimeout, autoResume) and the create timeout a resume restores.
    R"sql(
ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'kill'
  CHECK (on_timeout IN ('kill', 'pause'));
ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN timeout_s INTEGER NOT NULL DEFAULT 300;
)sql",
    // 3: the sandbox's network (its outbound rules as JSON; '' = loopback only).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '';
)sql",
    // 4: a sandbox paused to disk: its checkpoint directory ('' = in memory or running).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN checkpoint TEXT NOT NULL DEFAULT '';
)sql",
    // 5: tenants. Every key and sandbox belongs to a team; what existed joins 'default'. (No
    // REFERENCES on the added columns: SQLite adds one only with a NULL default; create_api_key
    // and create_access_key check the team instead.)
    R"sql(
CREATE TABLE teams (
  id         TEXT PRIMARY KEY NOT NULL,
  created_at INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO teams (id, created_at) VALUES ('default', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
ALTER TABLE api_keys ADD COLUMN team_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE access_keys ADD COLUMN team_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE sandboxes ADD COLUMN team_id TEXT NOT NULL DEFAULT 'default';
CREATE INDEX sandboxes_by_team ON sandboxes (team_id, created_at, id);
CREATE TABLE template_owners (
  template_id TEXT PRIMARY KEY NOT NULL,
  team_id     TEXT NOT NULL
) WITHOUT ROWID;
)sql",
    // 6: the lifecycle event log (GET /events/sandboxes, webhooks). AUTOINCREMENT: an id is
    // never reused after pruning, so a client's cursor stays meaningful.
    R"sql(
CREATE TABLE events (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  ts          INTEGER NOT NULL,
  team_id     TEXT NOT NULL,
  sandbox_id  TEXT NOT NULL,
  template_id TEXT NOT NULL,
  type        TEXT NOT NULL,
  data        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_team ON events (team_id, id);
CREATE INDEX events_by_sandbox ON events (sandbox_id, id);
CREATE INDEX events_by_ts ON events (ts);
)sql",
    // 7: webhooks (POST /events/webhooks): where a team's events are delivered.
    R"sql(
CREATE TABLE webhooks (
  id         TEXT PRIMARY KEY NOT NULL,
  team_id    TEXT NOT NULL,
  name       TEXT NOT NULL,
  url        TEXT NOT NULL,
  enabled    INTEGER NOT NULL,
  events     TEXT NOT NULL,
  secret     TEXT NOT NULL,
  created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX webhooks_by_team ON webhooks (team_id, created_at);
)sql",
    // 8: E2B's filesystem-only pause: whether the deadline's pause keeps memory
    // (autoPauseMemory), and whether a paused sandbox was paused without it (`checkpoint` then
    // holds its writable layer only).
    R"sql(
ALTER TABLE sandboxes ADD COLUMN on_timeout_memory INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sandboxes ADD COLUMN filesystem_only INTEGER NOT NULL DEFAULT 0;
)sql",
    // 9: secrets (POST /secrets): a team's named values, sealed by abxd (never plaintext here).
    R"sql(
CREATE TABLE secrets (
  id         TEXT PRIMARY KEY NOT NULL,
  team_id    TEXT NOT NULL,
  name       TEXT NOT NULL,
  metadata   TEXT NOT NULL DEFAULT '{}',
  version    INTEGER NOT NULL,
  sealed     BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (team_id, name)
) WITHOUT ROWID;
)sql",
    // 10: volumes (POST /volumes): a team's named persistent directories, and which of them each
    // sandbox mounts where (JSON: [{"volumeID","name","path"}]).
    R"sql(
CREATE TABLE volumes (
  id         TEXT PRIMARY KEY NOT NULL,
  team_id    TEXT NOT NULL,
  name       TEXT NOT NULL,
  token      TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  UNIQUE (team_id, name)
) WITHOUT ROWID;
ALTER TABLE sandboxes ADD COLUMN volume_mounts TEXT NOT NULL DEFAULT '[]';
)sql",
    // 11: the e2b SDK's template builds (POST /v3/templates): their status, tags (JSON array of
    // strings) and requested resources, and their log lines (bounded by abxd), so a build's
    // status, logs and tags outlive an abxd restart.
    R"sql(
CREATE TABLE template_builds (
  id          TEXT PRIMARY KEY NOT NULL,
  template_id TEXT NOT NULL,
  team_id     TEXT NOT NULL,
  status      TEXT NOT NULL CHECK (status IN ('waiting', 'building', 'ready', 'error')),
  reason      TEXT NOT NULL DEFAULT '',
  reason_step TEXT NOT NULL DEFAULT '',
  tags        TEXT NOT NULL DEFAULT '[]',
  created_at  INTEGER NOT NULL,
  cpu_count   REAL NOT NULL DEFAULT 0,
  memory_mb   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX template_builds_by_template ON template_builds (template_id, created_at);
CREATE TABLE template_build_logs (
  build_id TEXT NOT NULL,
  seq      INTEGER NOT NULL,
  ts       INTEGER NOT NULL,
  level    TEXT NOT NULL,
  message  TEXT NOT NULL,
  step     TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (build_id, seq)
) WITHOUT ROWID;
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion);

Error bad_id(std::string_view id) {
  return invalid_argument("invalid sandbox id '" + std::string(id.substr(0, 64)) + "'");
}

}  // namespace

std::string_view state_name(SandboxState s) {
  switch (s) {
    case SandboxState::kRunning:
      return "running";
    case SandboxState::kPaused:
      return "paused";
    case SandboxState::kKilled:
      return "killed";
  }
  return "running";
}

std::optional<SandboxState> parse_state(std::string_view name) {
  if (name == "running") return SandboxState::kRunning;
  if (name == "paused") return SandboxState::kPaused;
  if (name == "killed") return SandboxState::kKilled;
  return std::nullopt;
}

std::string token_digest(std::string_view secret) {
  auto d = sha256(secret);
  return to_hex(d.data(), d.size());
}

bool digest_matches(std::string_view stored_hex_digest, std::string_view presented) {
  std::string want = token_digest(presented);
  if (stored_hex_digest.size() != want.size()) return false;
  return CRYPTO_memcmp(stored_hex_digest.data(), want.data(), want.size()) == 0;
}

bool valid_team_id(std::string_view id) {
  if (id.empty() || id.size() > 63 || id[0] == '-') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

struct Store::Impl {
  sql::Connection conn;
  std::mutex mu;
  int version = 0;
  int nonce_calls = 0;

  // Runs `write` (one commit; the caller holds mu) as durable as `durability` asks.
  // kProcessCrash: with synchronous = NORMAL, which in WAL mode writes the WAL without fsyncing
  // it (the fdatasync of a growing WAL: 1.28 ms in one traced connect); then back to FULL
  // whatever the write did, as every other write counts on it.
  template <class Write>
  auto with_durability(Durability durability, Write&& write) -> decltype(write()) {
    const bool relaxed = durability == Durability::kProcessCrash;
    if (relaxed) ABX_TRY(conn.exec("PRAGMA synchronous = NORMAL", "relax synchronous"));
    auto wrote = write();
    if (relaxed) ABX_TRY(conn.exec("PRAGMA synchronous = FULL", "set synchronous"));
    return wrote;
  }

  // BEGIN IMMEDIATE … COMMIT, rolled back unless committed.
  class Tx {
   public:
    explicit Tx(sql::Connection& c) : c_(c) {}
    Status begin() {
      auto st = c_.exec("BEGIN IMMEDIATE", "begin");
      open_ = st.ok();
      return st;
    }
    Status commit() {
      auto st = c_.exec("COMMIT", "commit");
      if (st.ok()) open_ = false;
      return st;
    }
    ~Tx() {
      if (open_) (void)c_.exec("ROLLBACK", "rollback");
    }

   private:
    sql::Connection& c_;
    bool open_ = false;
  };

  Status migrate() {
    if (auto st = conn.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
                            "create schema_version");
        !st.ok()) {
      return st;
    }
    for (;;) {
      Tx tx(conn);
      ABX_TRY(tx.begin());
      // Read inside the write transaction: two processes opening a new file at once must not
      // both apply the same migration.
      int v = 0;
      bool has_row = false;
      {
        ABX_ASSIGN_OR_RETURN(
            auto s, conn.prepare("SELECT version FROM schema_version", "read schema_version"));
        ABX_ASSIGN_OR_RETURN(auto row, s.step());
        has_row = row;
        if (has_row) v = static_cast<int>(s.int64(0));
      }
      if (v > kSchemaVersion) {
        return Error(ErrorCode::kFailedPrecondition,
                     "store: database schema version " + std::to_string(v) +
                         " is newer than this build (" + std::to_string(kSchemaVersion) + ")");
      }
      if (v == kSchemaVersion) {
        version = v;
        return tx.commit();
      }
      ABX_TRY(conn.exec(kMigrations[v], "migrate"));
      ABX_ASSIGN_OR_RETURN(
          auto up, conn.prepare(has_row ? "UPDATE schema_version SET version = ?1"
                                        : "INSERT INTO schema_version (version) VALUES (?1)",
                                "write schema_version"));
      ABX_TRY(up.bind(1, v + 1).exec());
      ABX_TRY(tx.commit());
    }
  }

  Status expect_one_change(std::string_view id) {
    if (conn.changes() == 0) return not_found("sandbox '" + std::string(id) + "' not found");
    return {};
  }
};

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path& file,
                                           const StoreOptions& options) {
  // Create the file ourselves so it is 0600 from the first byte; tighten an existing one.
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    int e = errno;
    ErrorCode code = (e == EACCES || e == EPERM || e == EROFS) ? ErrorCode::kPermissionDenied
                                                               : ErrorCode::kUnavailable;
    return Error(code, "store: open " + file.string() + ": " + std::strerror(e));
  }
  struct stat sb {};
  if (::fstat(fd, &sb) == 0 && (sb.st_mode & 077) != 0) (void)::fchmod(fd, 0600);
  ::close(fd);

  ABX_ASSIGN_OR_RETURN(
      auto conn,
      sql::Connection::open(file.string(), static_cast<int>(options.busy_timeout.count())));
  auto impl = std::make_unique<Impl>();
  impl->conn = std::move(conn);

  {
    ABX_ASSIGN_OR_RETURN(auto s,
                         impl->conn.prepare("PRAGMA journal_mode = WAL", "set journal_mode"));
    auto row = s.step();
    if (!row.ok()) return row.error();
    if (!*row || s.text(0) != "wal") {
      return unavailable("store: " + file.string() + " cannot use WAL journaling");
    }
  }
  // FULL: in WAL mode each commit fsyncs the WAL, so an acknowledged write survives a crash.
  if (auto st = impl->conn.exec("PRAGMA synchronous = FULL", "set synchronous"); !st.ok()) {
    return st.error();
  }
  if (auto st = impl->conn.exec("PRAGMA foreign_keys = ON", "set foreign_keys"); !st.ok()) {
    return st.error();
  }
  ABX_TRY(impl->migrate());
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

int Store::schema_version() const { return impl_->version; }

Status Store::check_integrity() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare("PRAGMA integrity_check", "integrity_check"));
  std::string report;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    if (!report.empty()) report += "; ";
    report += s.text(0);
  }
  if (report != "ok") {
    return Error(ErrorCode::kFailedPrecondition, "store: integrity_check: " + report);
  }
  return {};
}

// --- sandboxes ---

Status Store::insert_sandbox(const SandboxRecord& r) {
  if (!SandboxId::valid(r.id)) return bad_id(r.id);
  // Empty: the sandbox was created with secure=false and has no token at all.
  if (!r.access_token_digest.empty() &&
      (r.access_token_digest.size() != 64 || !is_lower_hex(r.access_token_digest))) {
    return invalid_argument(
        "access_token_digest must be 64 lowercase hex (token_digest()) or empty (no token)");
  }
  if (r.template_id.empty()) return invalid_argument("sandbox needs a template id");
  if (!valid_team_id(r.team_id)) return invalid_argument("sandbox needs a valid team id");
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare(
          "INSERT INTO sandboxes (id, template_id, client_id, created_at, end_at, state, init_pid, "
          "init_start_time, token_digest, cpu_count, memory_mb, disk_mb, metadata, env_vars, "
          "domain, on_timeout, auto_resume, timeout_s, network, checkpoint, team_id, "
          "on_timeout_memory, filesystem_only, volume_mounts) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
          "?18, ?19, ?20, ?21, ?22, ?23, ?24)",
          "insert sandbox"));
  s.bind(1, r.id)
      .bind(2, r.template_id)
      .bind(3, r.client_id)
      .bind(4, r.created_at_ms)
      .bind(5, r.end_at_ms)
      .bind(6, state_name(r.state))
      .bind(7, r.init_pid)
      .bind(8, static_cast<std::int64_t>(r.init_start_time))
      .bind(9, r.access_token_digest)
      .bind(10, r.cpu_count)
      .bind(11, r.memory_mb)
      .bind(12, r.disk_mb)
      .bind(13, encode_map(r.metadata))
      .bind(14, encode_map(r.env_vars))
      .bind(15, r.domain)
      .bind(16, std::string_view(r.pause_on_timeout ? "pause" : "kill"))
      .bind(17, static_cast<std::int64_t>(r.auto_resume ? 1 : 0))
      .bind(18, r.timeout_s)
      .bind(19, r.network)
      .bind(20, r.checkpoint)
      .bind(21, r.team_id)
      .bind(22, static_cast<std::int64_t>(r.pause_keeps_memory ? 1 : 0))
      .bind(23, static_cast<std::int64_t>(r.filesystem_only ? 1 : 0))
      .bind(24, encode_mounts(r.volume_mounts));
  return s.exec();
}

Result<SandboxRecord> Store::get_sandbox(std::string_view id) {
  if (!SandboxId::valid(id)) return bad_id(id);
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare(std::string("SELECT ") + kSandboxColumns +
                                                       " FROM sandboxes WHERE id = ?1",
                                                   "get sandbox"));
  s.bind(1, id);
  ABX_ASSIGN_OR_RETURN(auto row, s.step());
  if (!row) return not_found("sandbox '" + std::string(id) + "' not found");
  return read_sandbox(s);
}

namespace {

std::string encode_cursor(std::int64_t created_at, const std::string& id) {
  return base64url_encode("c1:" + std::to_string(created_at) + ":" + id);
}

Result<std::pair<std::int64_t, std::string>> decode_cursor(std::string_view tok) {
  Error bad = invalid_argument("invalid page token");
  if (tok.size() > 128) return bad;
  auto raw = base64url_decode(tok);
  if (!raw.ok()) return bad;
  std::string_view s = *raw;
  if (s.substr(0, 3) != "c1:") return bad;
  s.remove_prefix(3);
  auto colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 19) return bad;
  std::int64_t created = 0;
  for (char c : s.substr(0, colon)) {
    if (c < '0' || c > '9') return bad;
    created = created * 10 + (c - '0');
  }
  std::string id(s.substr(colon + 1));
  if (!SandboxId::valid(id)) return bad;
  return std::make_pair(created, std::move(id));
}

}  // namespace

Result<SandboxPage> Store::list_sandboxes(const SandboxFilter& f) {
  if (f.limit == 0 || f.limit > 1000) return invalid_argument("limit must be 1..1000");
  std::optional<std::pair<std::int64_t, std::string>> cursor;
  if (!f.page_token.empty()) {
    ABX_ASSIGN_OR_RETURN(cursor, decode_cursor(f.page_token));
  }
  // The SQL text depends only on which filters are present; every value is bound.
  std::string q = std::string("SELECT ") + kSandboxColumns + " FROM sandboxes AS s WHERE 1";
  int n = 0;
  std::vector<std::function<void(sql::Stmt&)>> binds;
  if (f.team_id) {
    q += " AND team_id = ?" + std::to_string(++n);
    binds.push_back([n, v = *f.team_id](sql::Stmt& s) { s.bind(n, v); });
  }
  if (!f.states.empty()) {
    q += " AND state IN (";
    for (std::size_t i = 0; i < f.states.size(); ++i) {
      q += (i ? ", ?" : "?") + std::to_string(++n);
      binds.push_back([n, v = f.states[i]](sql::Stmt& s) { s.bind(n, state_name(v)); });
    }
    q += ")";
  }
  if (!f.template_id.empty()) {
    q += " AND template_id = ?" + std::to_string(++n);
    binds.push_back([n, v = f.template_id](sql::Stmt& s) { s.bind(n, v); });
  }
  for (const auto& [k, v] : f.metadata) {
    int kn = ++n;
    int vn = ++n;
    q += " AND EXISTS (SELECT 1 FROM json_each(s.metadata) WHERE json_each.key = ?" +
         std::to_string(kn) + " AND json_each.value = ?" + std::to_string(vn) +
         " AND json_each.type = 'text')";
    binds.push_back([kn, vn, k = k, v = v](sql::Stmt& s) { s.bind(kn, k).bind(vn, v); });
  }
  if (f.started_after_ms) {
    q += " AND created_at >= ?" + std::to_string(++n);
    binds.push_back([n, v = *f.started_after_ms](sql::Stmt& s) { s.bind(n, v); });
  }
  if (cursor) {
    int cn = ++n;
    int in = ++n;
    q += std::string(" AND (created_at, id) ") + (f.descending ? "<" : ">") + " (?" +
         std::to_string(cn) + ", ?" + std::to_string(in) + ")";
    binds.push_back(
        [cn, in, c = *cursor](sql::Stmt& s) { s.bind(cn, c.first).bind(in, c.second); });
  }
  q += f.descending ? " ORDER BY created_at DESC, id DESC" : " ORDER BY created_at ASC, id ASC";
  int ln = ++n;
  q += " LIMIT ?" + std::to_string(ln);
  // One extra row says whether another page exists.
  binds.push_back(
      [ln, v = static_cast<std::int64_t>(f.limit + 1)](sql::Stmt& s) { s.bind(ln, v); });

  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare(q, "list sandboxes"));
  for (auto& b : binds) b(s);
  SandboxPage page;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    if (page.items.size() == f.limit) {
      const auto& last = page.items.back();
      page.next_token = encode_cursor(last.created_at_ms, last.id);
      break;
    }
    auto rec = read_sandbox(s);
    if (!rec.ok()) return rec.error();
    page.items.push_back(std::move(*rec));
  }
  return page;
}

Status Store::update_state(std::string_view id, SandboxState state, Durability durability) {
  if (!SandboxId::valid(id)) return bad_id(id);
  std::lock_guard lock(impl_->mu);
  return impl_->with_durability(durability, [&]() -> Status {
    ABX_ASSIGN_OR_RETURN(
        auto s,
        impl_->conn.prepare("UPDATE sandboxes SET state = ?2 WHERE id = ?1", "update state"));
    ABX_TRY(s.bind(1, id).bind(2, state_name(state)).exec());
    return impl_->expect_one_change(id);
  });
}

Status Store::set_checkpoint(std::string_view id, SandboxState state, std::string_view checkpoint,
                             bool filesystem_only) {
  if (!SandboxId::valid(id)) return bad_id(id);
  if (state == SandboxState::kKilled) return invalid_argument("set_checkpoint: a live state");
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s,
                       impl_->conn.prepare("UPDATE sandboxes SET state = ?2, checkpoint = ?3, "
                                           "filesystem_only = ?4 WHERE id = ?1 "
                                           "AND state IN ('running', 'paused')",
                                           "set checkpoint"));
  ABX_TRY(s.bind(1, id)
              .bind(2, state_name(state))
              .bind(3, checkpoint)
              .bind(4, static_cast<std::int64_t>(filesystem_only ? 1 : 0))
              .exec());
  return impl_->expect_one_change(id);
}

Status Store::set_deadline(std::string_view id, std::int64_t end_at_ms, Durability durability) {
  if (!SandboxId::valid(id)) return bad_id(id);
  std::lock_guard lock(impl_->mu);
  return impl_->with_durability(durability, [&]() -> Status {
    ABX_ASSIGN_OR_RETURN(
        auto s,
        impl_->conn.prepare("UPDATE sandboxes SET end_at = ?2 WHERE id = ?1", "set deadline"));
    ABX_TRY(s.bind(1, id).bind(2, end_at_ms).exec());
    return impl_->expect_one_change(id);
  });
}

Result<int> Store::synchronous_setting() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare("PRAGMA synchronous", "read synchronous"));
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return internal_error("PRAGMA synchronous returned no row");
  return static_cast<int>(s.int64(0));
}

Status Store::set_network(std::string_view id, std::string_view network) {
  if (!SandboxId::valid(id)) return bad_id(id);
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare("UPDATE sandboxes SET network = ?2 WHERE id = ?1", "set network"));
  ABX_TRY(s.bind(1, id).bind(2, network).exec());
  return impl_->expect_one_change(id);
}

Status Store::set_init(std::string_view id, std::int64_t pid, std::uint64_t start_time) {
  if (!SandboxId::valid(id)) return bad_id(id);
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare("UPDATE sandboxes SET init_pid = ?2, init_start_time = ?3 WHERE id = ?1",
                          "set init"));
  auto st = s.bind(1, id).bind(2, pid).bind(3, static_cast<std::int64_t>(start_time)).exec();
  if (!st.ok()) return st;
  return impl_->expect_one_change(id);
}

Status Store::delete_sandbox(std::string_view id) {
  if (!SandboxId::valid(id)) return bad_id(id);
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("DELETE FROM sandboxes WHERE id = ?1", "delete sandbox"));
  ABX_TRY(s.bind(1, id).exec());
  return impl_->expect_one_change(id);
}

Result<std::vector<SandboxRecord>> Store::expired(std::int64_t now) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(std::string("SELECT ") + kSandboxColumns +
                                      " FROM sandboxes WHERE state IN ('running', 'paused') AND "
                                      "end_at <= ?1 ORDER BY end_at, id",
                                  "list expired"));
  s.bind(1, now);
  std::vector<SandboxRecord> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    auto rec = read_sandbox(s);
    if (!rec.ok()) return rec.error();
    out.push_back(std::move(*rec));
  }
  return out;
}

// --- teams ---

namespace {

Status team_exists(sql::Connection& c, std::string_view team_id) {
  if (!valid_team_id(team_id)) {
    return invalid_argument("invalid team id '" + std::string(team_id.substr(0, 64)) +
                            "' (want [a-z0-9][a-z0-9-]{0,62})");
  }
  ABX_ASSIGN_OR_RETURN(auto s, c.prepare("SELECT 1 FROM teams WHERE id = ?1", "find team"));
  s.bind(1, team_id);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return not_found("no team '" + std::string(team_id) + "'");
  return {};
}

}  // namespace

Status Store::create_team(std::string_view id) {
  if (!valid_team_id(id)) {
    return invalid_argument("invalid team id '" + std::string(id.substr(0, 64)) +
                            "' (want [a-z0-9][a-z0-9-]{0,62})");
  }
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare("INSERT INTO teams (id, created_at) VALUES (?1, ?2)", "insert team"));
  auto st = s.bind(1, id).bind(2, now_ms()).exec();
  if (!st.ok() && st.error().code() == ErrorCode::kAlreadyExists)
    return Error(ErrorCode::kAlreadyExists, "team '" + std::string(id) + "' exists");
  return st;
}

Result<std::vector<TeamInfo>> Store::list_teams() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(
                  "SELECT t.id, t.created_at, "
                  "(SELECT count(*) FROM api_keys k WHERE k.team_id = t.id AND k.revoked = 0) + "
                  "(SELECT count(*) FROM access_keys a WHERE a.team_id = t.id AND a.revoked = 0) "
                  "FROM teams t ORDER BY t.created_at, t.id",
                  "list teams"));
  std::vector<TeamInfo> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    out.push_back({s.text(0), s.int64(1), static_cast<int>(s.int64(2))});
  }
  return out;
}

// --- API keys ---

Result<NewApiKey> Store::create_api_key(std::string_view name, std::string_view team_id) {
  if (name.size() > 256) return invalid_argument("API key name longer than 256 bytes");
  ABX_ASSIGN_OR_RETURN(auto secret, token::random_hex(20));
  auto id = token::random_hex(8);
  if (!id.ok()) return id.error();
  NewApiKey k;
  k.key = "e2b_" + secret;
  k.info.id = *id;
  k.info.team_id = std::string(team_id);
  k.info.name = std::string(name);
  k.info.prefix = k.key.substr(0, 8);
  k.info.created_at_ms = now_ms();
  std::lock_guard lock(impl_->mu);
  Impl::Tx tx(impl_->conn);
  ABX_TRY(tx.begin());
  ABX_TRY(team_exists(impl_->conn, team_id));
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, impl_->conn.prepare("INSERT INTO api_keys (id, name, prefix, digest, created_at, "
                                    "team_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                    "insert api key"));
    auto st = s.bind(1, k.info.id)
                  .bind(2, k.info.name)
                  .bind(3, k.info.prefix)
                  .bind(4, token_digest(k.key))
                  .bind(5, k.info.created_at_ms)
                  .bind(6, k.info.team_id)
                  .exec();
    if (!st.ok()) return st.error();
  }
  ABX_TRY(tx.commit());
  return k;
}

Result<ApiKeyIdentity> Store::verify_api_key(std::string_view presented) {
  Error denied(ErrorCode::kUnauthenticated, "invalid API key");
  // Cap before hashing: a 10 MB header must not cost a 10 MB hash.
  if (presented.empty() || presented.size() > kMaxPresentedKey) return denied;
  std::string digest = token_digest(presented);
  std::lock_guard lock(impl_->mu);
  std::string id, team;
  std::int64_t last_used = 0;
  {
    auto s = impl_->conn.prepare(
        "SELECT id, digest, revoked, last_used, team_id FROM api_keys WHERE digest = ?1",
        "verify api key");
    if (!s.ok()) return s.error();
    s->bind(1, digest);
    ABX_ASSIGN_OR_RETURN(auto row, s->step());
    if (!row) return denied;
    std::string stored = s->text(1);
    // The lookup already matched on the digest; compare again in constant time so the decision
    // never rests on the index's early-exit string compare.
    if (stored.size() != digest.size() ||
        CRYPTO_memcmp(stored.data(), digest.data(), digest.size()) != 0 || s->int64(2) != 0) {
      return denied;
    }
    id = s->text(0);
    last_used = s->is_null(3) ? 0 : s->int64(3);
    team = s->text(4);
  }
  std::int64_t now = now_ms();
  if (now - last_used >= kLastUsedGranularityMs) {
    auto u =
        impl_->conn.prepare("UPDATE api_keys SET last_used = ?2 WHERE id = ?1", "touch api key");
    if (u.ok()) (void)u->bind(1, id).bind(2, now).exec();  // best effort: never fails auth
  }
  return ApiKeyIdentity{std::move(id), std::move(team)};
}

Result<std::vector<ApiKeyInfo>> Store::list_api_keys() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare("SELECT id, name, prefix, created_at, last_used, revoked, team_id "
                          "FROM api_keys ORDER BY created_at, id",
                          "list api keys"));
  std::vector<ApiKeyInfo> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    ApiKeyInfo k;
    k.id = s.text(0);
    k.name = s.text(1);
    k.prefix = s.text(2);
    k.created_at_ms = s.int64(3);
    if (!s.is_null(4)) k.last_used_ms = s.int64(4);
    k.revoked = s.int64(5) != 0;
    k.team_id = s.text(6);
    out.push_back(std::move(k));
  }
  return out;
}

Status Store::revoke_api_key(std::string_view which) {
  if (which.empty() || which.size() > kMaxPresentedKey) return invalid_argument("no key given");
  std::lock_guard lock(impl_->mu);
  auto& c = impl_->conn;
  if (which.substr(0, 4) == "e2b_") {
    ABX_ASSIGN_OR_RETURN(
        auto s, c.prepare("UPDATE api_keys SET revoked = 1 WHERE digest = ?1", "revoke api key"));
    ABX_TRY(s.bind(1, token_digest(which)).exec());
    if (c.changes() == 0) return not_found("no such API key");
    return {};
  }
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, c.prepare("UPDATE api_keys SET revoked = 1 WHERE id = ?1", "revoke api key"));
    ABX_TRY(s.bind(1, which).exec());
    if (c.changes() > 0) return {};
  }
  if (which.size() < 4) return not_found("no API key with id '" + std::string(which) + "'");
  std::vector<std::string> ids;
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, c.prepare("SELECT id FROM api_keys WHERE substr(id, 1, length(?1)) = ?1 LIMIT 2",
                          "find api key by prefix"));
    s.bind(1, which);
    for (;;) {
      ABX_ASSIGN_OR_RETURN(auto row, s.step());
      if (!row) break;
      ids.push_back(s.text(0));
    }
  }
  if (ids.empty()) return not_found("no API key with id '" + std::string(which) + "'");
  if (ids.size() > 1)
    return invalid_argument("id prefix '" + std::string(which) + "' is ambiguous");
  ABX_ASSIGN_OR_RETURN(
      auto s, c.prepare("UPDATE api_keys SET revoked = 1 WHERE id = ?1", "revoke api key"));
  return s.bind(1, ids[0]).exec();
}

Result<std::vector<SharedApiKey>> Store::export_api_keys() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT id, name, prefix, created_at, revoked, team_id, digest "
                                  "FROM api_keys ORDER BY created_at, id",
                                  "export api keys"));
  std::vector<SharedApiKey> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    SharedApiKey k;
    k.info.id = s.text(0);
    k.info.name = s.text(1);
    k.info.prefix = s.text(2);
    k.info.created_at_ms = s.int64(3);
    k.info.revoked = s.int64(4) != 0;
    k.info.team_id = s.text(5);
    k.digest = s.text(6);
    out.push_back(std::move(k));
  }
  return out;
}

Result<bool> Store::import_api_key(const SharedApiKey& k) {
  auto hex = [](std::string_view v, std::size_t n) { return v.size() == n && is_lower_hex(v); };
  if (!hex(k.info.id, 16)) return invalid_argument("shared API key: malformed id");
  if (!hex(k.digest, 64)) return invalid_argument("shared API key: malformed digest");
  if (!valid_team_id(k.info.team_id)) return invalid_argument("shared API key: malformed team");
  if (k.info.name.size() > 256) return invalid_argument("shared API key: name too long");
  if (!k.info.prefix.starts_with("e2b_") || !hex(std::string_view(k.info.prefix).substr(4), 4))
    return invalid_argument("shared API key: malformed prefix");
  std::lock_guard lock(impl_->mu);
  auto& c = impl_->conn;
  Impl::Tx tx(c);
  ABX_TRY(tx.begin());
  std::optional<bool> have_revoked;
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, c.prepare("SELECT revoked, digest FROM api_keys WHERE id = ?1", "find api key"));
    s.bind(1, k.info.id);
    ABX_ASSIGN_OR_RETURN(bool row, s.step());
    if (row) {
      // Same id, another digest: not the same key (ids are random; refuse rather than mix).
      if (s.text(1) != k.digest)
        return Error(ErrorCode::kAlreadyExists,
                     "shared API key " + k.info.id + ": this node has another key of that id");
      have_revoked = s.int64(0) != 0;
    }
  }
  if (have_revoked) {
    if (*have_revoked || !k.info.revoked) return false;
    ABX_ASSIGN_OR_RETURN(
        auto s, c.prepare("UPDATE api_keys SET revoked = 1 WHERE id = ?1", "revoke api key"));
    ABX_TRY(s.bind(1, k.info.id).exec());
    ABX_TRY(tx.commit());
    return true;
  }
  {
    ABX_ASSIGN_OR_RETURN(
        auto s,
        c.prepare("INSERT OR IGNORE INTO teams (id, created_at) VALUES (?1, ?2)", "insert team"));
    ABX_TRY(s.bind(1, k.info.team_id).bind(2, now_ms()).exec());
  }
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, c.prepare("INSERT INTO api_keys (id, name, prefix, digest, created_at, team_id, "
                          "revoked) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                          "import api key"));
    auto st = s.bind(1, k.info.id)
                  .bind(2, k.info.name)
                  .bind(3, k.info.prefix)
                  .bind(4, k.digest)
                  .bind(5, k.info.created_at_ms)
                  .bind(6, k.info.team_id)
                  .bind(7, std::int64_t{k.info.revoked ? 1 : 0})
                  .exec();
    if (!st.ok() && st.error().code() == ErrorCode::kAlreadyExists)
      return Error(ErrorCode::kAlreadyExists,
                   "shared API key " + k.info.id + ": this node has another key of that digest");
    if (!st.ok()) return st.error();
  }
  ABX_TRY(tx.commit());
  return true;
}

// --- AK/SK ---

Result<AccessKey> Store::create_access_key(std::string_view name, std::string_view team_id) {
  if (name.size() > 256) return invalid_argument("access key name longer than 256 bytes");
  auto id = random_chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 17);
  if (!id.ok()) return id.error();
  auto secret = token::random_hex(32);
  if (!secret.ok()) return secret.error();
  AccessKey k;
  k.access_key_id = "ABX" + *id;
  k.secret = *secret;
  k.name = std::string(name);
  k.team_id = std::string(team_id);
  k.created_at_ms = now_ms();
  std::lock_guard lock(impl_->mu);
  Impl::Tx tx(impl_->conn);
  ABX_TRY(tx.begin());
  ABX_TRY(team_exists(impl_->conn, team_id));
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, impl_->conn.prepare("INSERT INTO access_keys (id, secret, name, created_at, "
                                    "team_id) VALUES (?1, ?2, ?3, ?4, ?5)",
                                    "insert access key"));
    auto st = s.bind(1, k.access_key_id)
                  .bind(2, k.secret)
                  .bind(3, k.name)
                  .bind(4, k.created_at_ms)
                  .bind(5, k.team_id)
                  .exec();
    if (!st.ok()) return st.error();
  }
  ABX_TRY(tx.commit());
  return k;
}

Result<std::optional<std::string>> Store::access_key_secret(std::string_view ak) {
  if (ak.empty() || ak.size() > 128) return std::optional<std::string>();
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT secret FROM access_keys WHERE id = ?1 AND revoked = 0",
                                  "get access key"));
  s.bind(1, ak);
  ABX_ASSIGN_OR_RETURN(auto row, s.step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(s.text(0));
}

Result<std::optional<std::string>> Store::access_key_team(std::string_view ak) {
  if (ak.empty() || ak.size() > 128) return std::optional<std::string>();
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT team_id FROM access_keys WHERE id = ?1 AND revoked = 0",
                                  "get access key team"));
  s.bind(1, ak);
  ABX_ASSIGN_OR_RETURN(auto row, s.step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(s.text(0));
}

Result<std::vector<AccessKey>> Store::list_access_keys() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT id, name, created_at, revoked, team_id FROM access_keys "
                                  "ORDER BY created_at, id",
                                  "list access keys"));
  std::vector<AccessKey> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    AccessKey k;
    k.access_key_id = s.text(0);
    k.name = s.text(1);
    k.created_at_ms = s.int64(2);
    k.revoked = s.int64(3) != 0;
    k.team_id = s.text(4);
    out.push_back(std::move(k));
  }
  return out;
}

Status Store::revoke_access_key(std::string_view ak) {
  std::lock_guard lock(impl_->mu);
  auto s =
      impl_->conn.prepare("UPDATE access_keys SET revoked = 1 WHERE id = ?1", "revoke access key");
  if (!s.ok()) return s.error();
  ABX_TRY(s->bind(1, ak).exec());
  if (impl_->conn.changes() == 0) return not_found("no such access key");
  return {};
}

// --- nonces ---

Result<bool> Store::remember_nonce(std::string_view nonce, std::int64_t expires_at_ms,
                                   std::int64_t now) {
  if (nonce.empty() || nonce.size() > 256) return invalid_argument("nonce must be 1..256 bytes");
  bool seen = false;
  bool prune = false;
  {
    std::lock_guard lock(impl_->mu);
    // Insert, or take over an expired entry; a live entry is left alone (changes() == 0).
    ABX_ASSIGN_OR_RETURN(
        auto s,
        impl_->conn.prepare(
            "INSERT INTO nonces (nonce, expires_at) VALUES (?1, ?2) ON CONFLICT (nonce) DO UPDATE "
            "SET expires_at = excluded.expires_at WHERE nonces.expires_at <= ?3",
            "remember nonce"));
    if (auto st = s.bind(1, nonce).bind(2, expires_at_ms).bind(3, now).exec(); !st.ok()) {
      return st.error();
    }
    seen = impl_->conn.changes() == 0;
    prune = ++impl_->nonce_calls % kPruneEvery == 0;
  }
  if (prune) (void)prune_nonces(now);
  return seen;
}

Result<std::int64_t> Store::prune_nonces(std::int64_t now) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("DELETE FROM nonces WHERE expires_at <= ?1", "prune nonces"));
  ABX_TRY(s.bind(1, now).exec());
  return impl_->conn.changes();
}

// --- lifecycle events ---

Result<std::int64_t> Store::append_event(const EventRecord& e, Durability durability) {
  if (!valid_team_id(e.team_id)) return invalid_argument("invalid team id");
  if (e.type.empty() || e.type.size() > 64)
    return invalid_argument("event type must be 1..64 bytes");
  if (e.data.size() > 4096) return invalid_argument("event data over 4096 bytes");
  std::lock_guard lock(impl_->mu);
  return impl_->with_durability(durability, [&]() -> Result<std::int64_t> {
    ABX_ASSIGN_OR_RETURN(
        auto s, impl_->conn.prepare("INSERT INTO events (ts, team_id, sandbox_id, template_id, "
                                    "type, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
                                    "append event"));
    s.bind(1, e.ts_ms)
        .bind(2, e.team_id)
        .bind(3, e.sandbox_id)
        .bind(4, e.template_id)
        .bind(5, e.type)
        .bind(6, e.data.empty() ? std::string("{}") : e.data);
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) return internal_error("append event: no id returned");
    return s.int64(0);
  });
}

Result<std::vector<EventRecord>> Store::list_events(const EventFilter& f) {
  if (f.limit == 0 || f.limit > 1000) return invalid_argument("limit must be 1..1000");
  if (f.types.size() > 32) return invalid_argument("at most 32 event types");
  std::string q =
      "SELECT id, ts, team_id, sandbox_id, template_id, type, data FROM events WHERE id > ?1";
  int n = 1;
  std::vector<std::function<void(sql::Stmt&)>> binds;
  binds.push_back([v = f.after_id](sql::Stmt& s) { s.bind(1, v); });
  if (f.team_id) {
    q += " AND team_id = ?" + std::to_string(++n);
    binds.push_back([n, v = *f.team_id](sql::Stmt& s) { s.bind(n, v); });
  }
  if (!f.sandbox_id.empty()) {
    q += " AND sandbox_id = ?" + std::to_string(++n);
    binds.push_back([n, v = f.sandbox_id](sql::Stmt& s) { s.bind(n, v); });
  }
  if (!f.types.empty()) {
    q += " AND type IN (";
    for (std::size_t i = 0; i < f.types.size(); ++i) {
      q += (i ? ", ?" : "?") + std::to_string(++n);
      binds.push_back([n, v = f.types[i]](sql::Stmt& s) { s.bind(n, v); });
    }
    q += ")";
  }
  q += f.descending ? " ORDER BY id DESC" : " ORDER BY id ASC";
  const int ln = ++n;
  const int on = ++n;
  q += " LIMIT ?" + std::to_string(ln) + " OFFSET ?" + std::to_string(on);
  binds.push_back([ln, v = static_cast<std::int64_t>(f.limit)](sql::Stmt& s) { s.bind(ln, v); });
  binds.push_back([on, v = static_cast<std::int64_t>(f.offset)](sql::Stmt& s) { s.bind(on, v); });

  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare(q, "list events"));
  for (auto& b : binds) b(s);
  std::vector<EventRecord> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    EventRecord e;
    e.id = s.int64(0);
    e.ts_ms = s.int64(1);
    e.team_id = s.text(2);
    e.sandbox_id = s.text(3);
    e.template_id = s.text(4);
    e.type = s.text(5);
    e.data = s.text(6);
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::int64_t> Store::last_event_id() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = "
                                  "'events'), 0)",
                                  "last event id"));
  ABX_ASSIGN_OR_RETURN(auto row, s.step());
  return row ? s.int64(0) : 0;
}

Result<std::int64_t> Store::prune_events(std::int64_t before_ms, std::int64_t keep_last) {
  if (keep_last < 0) return invalid_argument("keep_last must be >= 0");
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s,
                       impl_->conn.prepare("DELETE FROM events WHERE ts < ?1 OR id <= (SELECT "
                                           "COALESCE(MAX(id), 0) FROM events) - ?2",
                                           "prune events"));
  ABX_TRY(s.bind(1, before_ms).bind(2, keep_last).exec());
  return impl_->conn.changes();
}

// --- webhooks ---

namespace {
Status check_webhook(const WebhookRecord& w) {
  if (!valid_team_id(w.team_id)) return invalid_argument("invalid team id");
  if (w.id.size() != 32 || w.id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return invalid_argument("invalid webhook id");
  if (w.name.size() > 256) return invalid_argument("webhook name over 256 bytes");
  if (w.url.empty() || w.url.size() > 2048)
    return invalid_argument("webhook url must be 1..2048 bytes");
  if (w.secret.size() > 256) return invalid_argument("webhook secret over 256 bytes");
  if (w.events.size() > 32) return invalid_argument("at most 32 webhook event types");
  for (const auto& e : w.events)
    if (e.empty() || e.size() > 64 || e.find(',') != std::string::npos)
      return invalid_argument("invalid webhook event type");
  return {};
}
std::string join_events(const std::vector<std::string>& events) {
  std::string out;
  for (const auto& e : events) out += (out.empty() ? "" : ",") + e;
  return out;
}
std::vector<std::string> split_events(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    auto comma = text.find(',');
    if (comma != 0) out.emplace_back(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return out;
}
constexpr const char* kWebhookColumns =
    "SELECT id, team_id, name, url, enabled, events, secret, created_at FROM webhooks";
WebhookRecord webhook_row(sql::Stmt& s) {
  WebhookRecord w;
  w.id = s.text(0);
  w.team_id = s.text(1);
  w.name = s.text(2);
  w.url = s.text(3);
  w.enabled = s.int64(4) != 0;
  w.events = split_events(s.text(5));
  w.secret = s.text(6);
  w.created_at_ms = s.int64(7);
  return w;
}
}  // namespace

Status Store::create_webhook(const WebhookRecord& w) {
  ABX_TRY(check_webhook(w));
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("INSERT INTO webhooks (id, team_id, name, url, enabled, events, "
                                  "secret, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
                                  "ON CONFLICT (id) DO NOTHING",
                                  "create webhook"));
  ABX_TRY(s.bind(1, w.id)
              .bind(2, w.team_id)
              .bind(3, w.name)
              .bind(4, w.url)
              .bind(5, w.enabled ? 1 : 0)
              .bind(6, join_events(w.events))
              .bind(7, w.secret)
              .bind(8, w.created_at_ms)
              .exec());
  if (impl_->conn.changes() == 0) return Error(ErrorCode::kAlreadyExists, "webhook id taken");
  return {};
}

Result<std::vector<WebhookRecord>> Store::list_webhooks(const std::optional<std::string>& team_id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare(std::string(kWebhookColumns) +
                                                       (team_id ? " WHERE team_id = ?1" : "") +
                                                       " ORDER BY created_at, id LIMIT 1000",
                                                   "list webhooks"));
  if (team_id) s.bind(1, *team_id);
  std::vector<WebhookRecord> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back(webhook_row(s));
  }
  return out;
}

Result<WebhookRecord> Store::get_webhook(std::string_view team_id, std::string_view id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(std::string(kWebhookColumns) + " WHERE team_id = ?1 AND id = ?2",
                                  "get webhook"));
  s.bind(1, team_id).bind(2, id);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return not_found("webhook '" + std::string(id.substr(0, 64)) + "' not found");
  return webhook_row(s);
}

Status Store::update_webhook(const WebhookRecord& w) {
  ABX_TRY(check_webhook(w));
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("UPDATE webhooks SET name = ?3, url = ?4, enabled = ?5, events = "
                                  "?6, secret = ?7 WHERE team_id = ?1 AND id = ?2",
                                  "update webhook"));
  ABX_TRY(s.bind(1, w.team_id)
              .bind(2, w.id)
              .bind(3, w.name)
              .bind(4, w.url)
              .bind(5, w.enabled ? 1 : 0)
              .bind(6, join_events(w.events))
              .bind(7, w.secret)
              .exec());
  if (impl_->conn.changes() == 0) return not_found("webhook '" + w.id + "' not found");
  return {};
}

Status Store::delete_webhook(std::string_view team_id, std::string_view id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare("DELETE FROM webhooks WHERE team_id = ?1 AND id = ?2", "delete webhook"));
  ABX_TRY(s.bind(1, team_id).bind(2, id).exec());
  if (impl_->conn.changes() == 0)
    return not_found("webhook '" + std::string(id.substr(0, 64)) + "' not found");
  return {};
}

// --- secrets ---

namespace {
Status check_secret(const SecretRecord& r) {
  if (!valid_team_id(r.team_id)) return invalid_argument("invalid team id");
  if (r.id.size() != 28 || !r.id.starts_with("sec_") ||
      r.id.find_first_not_of("0123456789abcdef", 4) != std::string::npos)
    return invalid_argument("invalid secret id");
  if (r.name.empty() || r.name.size() > 128)
    return invalid_argument("secret name must be 1..128 bytes");
  if (r.sealed.size() > 200'000) return invalid_argument("sealed secret over 200000 bytes");
  return {};
}
constexpr const char* kSecretColumns =
    "SELECT id, team_id, name, metadata, version, sealed, created_at, updated_at FROM secrets";
Result<SecretRecord> secret_row(sql::Stmt& s) {
  SecretRecord r;
  r.id = s.text(0);
  r.team_id = s.text(1);
  r.name = s.text(2);
  ABX_ASSIGN_OR_RETURN(r.metadata, decode_map(s.text(3), "secret metadata"));
  r.version = s.int64(4);
  r.sealed = s.text(5);
  r.created_at_ms = s.int64(6);
  r.updated_at_ms = s.int64(7);
  return r;
}
}  // namespace

Status Store::create_secret(const SecretRecord& r, std::size_t max_per_team) {
  ABX_TRY(check_secret(r));
  std::lock_guard lock(impl_->mu);
  Impl::Tx tx(impl_->conn);
  ABX_TRY(tx.begin());
  {
    ABX_ASSIGN_OR_RETURN(
        auto c,
        impl_->conn.prepare("SELECT COUNT(*) FROM secrets WHERE team_id = ?1", "count secrets"));
    c.bind(1, r.team_id);
    ABX_ASSIGN_OR_RETURN(bool row, c.step());
    if (row && static_cast<std::size_t>(c.int64(0)) >= max_per_team)
      return Error(ErrorCode::kResourceExhausted,
                   "the team has " + std::to_string(max_per_team) +
                       " secrets already (the most it may have): delete one first");
  }
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, impl_->conn.prepare("INSERT INTO secrets (id, team_id, name, metadata, version, "
                                    "sealed, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, "
                                    "?6, ?7, ?8)",
                                    "create secret"));
    Status st = s.bind(1, r.id)
                    .bind(2, r.team_id)
                    .bind(3, r.name)
                    .bind(4, encode_map(r.metadata))
                    .bind(5, r.version)
                    .bind(6, r.sealed)
                    .bind(7, r.created_at_ms)
                    .bind(8, r.updated_at_ms)
                    .exec();
    if (!st.ok() && st.error().code() == ErrorCode::kAlreadyExists)
      return Error(ErrorCode::kAlreadyExists, "a secret named '" + r.name + "' exists already");
    ABX_TRY(st);
  }
  return tx.commit();
}

Result<SecretPage> Store::list_secrets(std::string_view team_id, std::string_view after_name,
                                       std::size_t limit) {
  if (limit < 1 || limit > 1000) return invalid_argument("limit must be 1..1000");
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(std::string(kSecretColumns) + " WHERE team_id = ?1 AND name > ?2 "
                                                                "ORDER BY name LIMIT ?3",
                                  "list secrets"));
  s.bind(1, team_id).bind(2, after_name).bind(3, static_cast<std::int64_t>(limit + 1));
  SecretPage page;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    if (page.items.size() == limit) {
      page.next_token = page.items.back().name;
      break;
    }
    ABX_ASSIGN_OR_RETURN(auto r, secret_row(s));
    page.items.push_back(std::move(r));
  }
  return page;
}

Result<SecretRecord> Store::get_secret(std::string_view team_id, std::string_view id_or_name) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(
                  std::string(kSecretColumns) + " WHERE team_id = ?1 AND (id = ?2 OR name = ?2)",
                  "get secret"));
  s.bind(1, team_id).bind(2, id_or_name);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return not_found("secret '" + std::string(id_or_name.substr(0, 128)) + "' not found");
  return secret_row(s);
}

Result<SecretRecord> Store::update_secret(
    std::string_view team_id, std::string_view id, std::string_view sealed,
    const std::optional<std::map<std::string, std::string>>& metadata, std::int64_t now_ms) {
  if (sealed.size() > 200'000) return invalid_argument("sealed secret over 200000 bytes");
  std::lock_guard lock(impl_->mu);
  Impl::Tx tx(impl_->conn);
  ABX_TRY(tx.begin());
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, impl_->conn.prepare("UPDATE secrets SET sealed = ?3, version = version + 1, "
                                    "updated_at = ?4, metadata = COALESCE(?5, metadata) "
                                    "WHERE team_id = ?1 AND id = ?2",
                                    "update secret"));
    s.bind(1, team_id).bind(2, id).bind(3, sealed).bind(4, now_ms);
    if (metadata)
      s.bind(5, encode_map(*metadata));
    else
      s.bind_null(5);
    ABX_TRY(s.exec());
    if (impl_->conn.changes() == 0)
      return not_found("secret '" + std::string(id.substr(0, 128)) + "' not found");
  }
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(std::string(kSecretColumns) + " WHERE team_id = ?1 AND id = ?2",
                                  "get secret"));
  s.bind(1, team_id).bind(2, id);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return internal_error("secret vanished inside its update");
  ABX_ASSIGN_OR_RETURN(auto r, secret_row(s));
  ABX_TRY(tx.commit());
  return r;
}

Status Store::delete_secret(std::string_view team_id, std::string_view id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare("DELETE FROM secrets WHERE team_id = ?1 AND id = ?2", "delete secret"));
  ABX_TRY(s.bind(1, team_id).bind(2, id).exec());
  if (impl_->conn.changes() == 0)
    return not_found("secret '" + std::string(id.substr(0, 128)) + "' not found");
  return {};
}

// --- volumes ---

namespace {
Status check_volume(const VolumeRecord& r) {
  if (!valid_team_id(r.team_id)) return invalid_argument("invalid team id");
  if (r.id.empty() || r.id.size() > 64) return invalid_argument("invalid volume id");
  if (r.name.empty() || r.name.size() > 128)
    return invalid_argument("volume name must be 1..128 bytes");
  if (r.token.empty() || r.token.size() > 256) return invalid_argument("invalid volume token");
  return {};
}
constexpr const char* kVolumeColumns = "SELECT id, team_id, name, token, created_at FROM volumes";
VolumeRecord volume_row(const sql::Stmt& s) {
  return {s.text(0), s.text(1), s.text(2), s.text(3), s.int64(4)};
}
}  // namespace

Status Store::create_volume(const VolumeRecord& r, std::size_t max_per_team) {
  ABX_TRY(check_volume(r));
  std::lock_guard lock(impl_->mu);
  Impl::Tx tx(impl_->conn);
  ABX_TRY(tx.begin());
  {
    ABX_ASSIGN_OR_RETURN(
        auto c,
        impl_->conn.prepare("SELECT COUNT(*) FROM volumes WHERE team_id = ?1", "count volumes"));
    c.bind(1, r.team_id);
    ABX_ASSIGN_OR_RETURN(bool row, c.step());
    if (row && static_cast<std::size_t>(c.int64(0)) >= max_per_team)
      return Error(ErrorCode::kResourceExhausted,
                   "the team has " + std::to_string(max_per_team) +
                       " volumes already (the most it may have): delete one first");
  }
  {
    ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare("INSERT INTO volumes (id, team_id, name, "
                                                     "token, created_at) VALUES (?1, ?2, ?3, "
                                                     "?4, ?5)",
                                                     "create volume"));
    Status st = s.bind(1, r.id)
                    .bind(2, r.team_id)
                    .bind(3, r.name)
                    .bind(4, r.token)
                    .bind(5, r.created_at_ms)
                    .exec();
    if (!st.ok() && st.error().code() == ErrorCode::kAlreadyExists)
      return Error(ErrorCode::kAlreadyExists, "a volume named '" + r.name + "' exists already");
    ABX_TRY(st);
  }
  return tx.commit();
}

Result<std::vector<VolumeRecord>> Store::list_volumes(std::string_view team_id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(std::string(kVolumeColumns) +
                                      " WHERE team_id = ?1 ORDER BY created_at, id LIMIT 10000",
                                  "list volumes"));
  s.bind(1, team_id);
  std::vector<VolumeRecord> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back(volume_row(s));
  }
  return out;
}

Result<VolumeRecord> Store::get_volume(std::string_view team_id, std::string_view id_or_name) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(
                  std::string(kVolumeColumns) + " WHERE team_id = ?1 AND (id = ?2 OR name = ?2)",
                  "get volume"));
  s.bind(1, team_id).bind(2, id_or_name);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return not_found("volume '" + std::string(id_or_name.substr(0, 128)) + "' not found");
  return volume_row(s);
}

Result<VolumeRecord> Store::volume_by_id(std::string_view id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare(std::string(kVolumeColumns) + " WHERE id = ?1",
                                                   "get volume by id"));
  s.bind(1, id);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return not_found("volume '" + std::string(id.substr(0, 128)) + "' not found");
  return volume_row(s);
}

Status Store::delete_volume(std::string_view team_id, std::string_view id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare("DELETE FROM volumes WHERE team_id = ?1 AND id = ?2", "delete volume"));
  ABX_TRY(s.bind(1, team_id).bind(2, id).exec());
  if (impl_->conn.changes() == 0)
    return not_found("volume '" + std::string(id.substr(0, 128)) + "' not found");
  return {};
}

// --- template owners ---

Status Store::claim_template(std::string_view template_id, std::string_view team_id) {
  if (template_id.empty() || template_id.size() > 256)
    return invalid_argument("template id must be 1..256 bytes");
  if (!valid_team_id(team_id)) return invalid_argument("invalid team id");
  std::lock_guard lock(impl_->mu);
  {
    ABX_ASSIGN_OR_RETURN(auto s, impl_->conn.prepare("INSERT INTO template_owners (template_id, "
                                                     "team_id) VALUES (?1, ?2) ON CONFLICT "
                                                     "(template_id) DO NOTHING",
                                                     "claim template"));
    ABX_TRY(s.bind(1, template_id).bind(2, team_id).exec());
    if (impl_->conn.changes() > 0) return {};
  }
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT team_id FROM template_owners WHERE template_id = ?1",
                                  "get template owner"));
  s.bind(1, template_id);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (row && s.text(0) == team_id) return {};
  return Error(ErrorCode::kAlreadyExists,
               "template name '" + std::string(template_id) + "' is taken by another team");
}

Result<std::optional<std::string>> Store::template_owner(std::string_view template_id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT team_id FROM template_owners WHERE template_id = ?1",
                                  "get template owner"));
  s.bind(1, template_id);
  ABX_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(s.text(0));
}

Status Store::release_template(std::string_view template_id) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(auto s,
                       impl_->conn.prepare("DELETE FROM template_owners WHERE template_id = ?1",
                                           "release template"));
  return s.bind(1, template_id).exec();
}

// --- templates seen ---

Status Store::record_template(const TemplateSeen& t) {
  if (t.id.empty()) return invalid_argument("template id is empty");
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s,
      impl_->conn.prepare(
          "INSERT INTO templates_seen (id, last_loaded_at, status, error) VALUES (?1, ?2, ?3, ?4) "
          "ON CONFLICT (id) DO UPDATE SET last_loaded_at = excluded.last_loaded_at, "
          "status = excluded.status, error = excluded.error",
          "record template"));
  return s.bind(1, t.id).bind(2, t.last_loaded_at_ms).bind(3, t.status).bind(4, t.error).exec();
}

Result<std::vector<TemplateSeen>> Store::list_templates_seen() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(
                  "SELECT id, last_loaded_at, status, error FROM templates_seen ORDER BY id",
                  "list templates seen"));
  std::vector<TemplateSeen> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(auto row, s.step());
    if (!row) break;
    out.push_back({s.text(0), s.int64(1), s.text(2), s.text(3)});
  }
  return out;
}

// --- template builds ---

namespace {

constexpr std::size_t kMaxBuildField = 64 * 1024;  // reason, tags JSON
constexpr std::size_t kMaxBuildLogMessage = 64 * 1024;

std::string encode_strings(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return json::serialize(a);
}

Result<std::vector<std::string>> decode_strings(const std::string& s, std::string_view what) {
  std::error_code ec;
  json::value v = json::parse(s, ec);
  if (ec || !v.is_array()) return internal_error("store: corrupt " + std::string(what) + " JSON");
  std::vector<std::string> out;
  for (const auto& e : v.get_array()) {
    if (!e.is_string()) return internal_error("store: corrupt " + std::string(what) + " JSON");
    out.emplace_back(e.get_string());
  }
  return out;
}

}  // namespace

Status Store::put_template_build(const TemplateBuildRecord& b) {
  const std::string tags = encode_strings(b.tags);
  if (b.build_id.empty() || b.build_id.size() > 128 || b.template_id.empty() ||
      b.template_id.size() > 128 || !valid_team_id(b.team_id))
    return invalid_argument("template build: bad id, template or team");
  if (b.reason.size() > kMaxBuildField || tags.size() > kMaxBuildField ||
      b.reason_step.size() > 128)
    return invalid_argument("template build " + b.build_id + ": a field is over its size");
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(
                  "INSERT OR REPLACE INTO template_builds (id, template_id, team_id, status, "
                  "reason, reason_step, tags, created_at, cpu_count, memory_mb) VALUES (?1, ?2, "
                  "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                  "put template build"));
  return s.bind(1, b.build_id)
      .bind(2, b.template_id)
      .bind(3, b.team_id)
      .bind(4, b.status)
      .bind(5, b.reason)
      .bind(6, b.reason_step)
      .bind(7, tags)
      .bind(8, b.created_at_ms)
      .bind(9, b.cpu_count)
      .bind(10, b.memory_mb)
      .exec();
}

Result<std::vector<TemplateBuildRecord>> Store::list_template_builds() {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare(
                  "SELECT id, template_id, team_id, status, reason, reason_step, tags, "
                  "created_at, cpu_count, memory_mb FROM template_builds ORDER BY created_at, id "
                  "LIMIT 100000",
                  "list template builds"));
  std::vector<TemplateBuildRecord> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    TemplateBuildRecord b;
    b.build_id = s.text(0);
    b.template_id = s.text(1);
    b.team_id = s.text(2);
    b.status = s.text(3);
    b.reason = s.text(4);
    b.reason_step = s.text(5);
    ABX_ASSIGN_OR_RETURN(b.tags, decode_strings(s.text(6), "template build tags"));
    b.created_at_ms = s.int64(7);
    b.cpu_count = s.real(8);
    b.memory_mb = s.int64(9);
    out.push_back(std::move(b));
  }
  return out;
}

Status Store::append_template_build_logs(std::string_view build_id,
                                         const std::vector<TemplateBuildLogLine>& lines) {
  if (lines.empty()) return {};
  std::lock_guard lock(impl_->mu);
  Impl::Tx tx(impl_->conn);
  ABX_TRY(tx.begin());
  for (const auto& l : lines) {
    ABX_ASSIGN_OR_RETURN(
        auto s, impl_->conn.prepare("INSERT OR REPLACE INTO template_build_logs (build_id, seq, "
                                    "ts, level, message, step) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                    "append template build log"));
    std::string_view msg(l.message);
    if (msg.size() > kMaxBuildLogMessage) msg = msg.substr(0, kMaxBuildLogMessage);
    ABX_TRY(s.bind(1, build_id)
                .bind(2, l.seq)
                .bind(3, l.ts_ms)
                .bind(4, l.level)
                .bind(5, msg)
                .bind(6, l.step)
                .exec());
  }
  return tx.commit();
}

Result<std::vector<TemplateBuildLogLine>> Store::template_build_logs(std::string_view build_id,
                                                                     std::size_t limit) {
  std::lock_guard lock(impl_->mu);
  ABX_ASSIGN_OR_RETURN(
      auto s, impl_->conn.prepare("SELECT seq, ts, level, message, step FROM template_build_logs "
                                  "WHERE build_id = ?1 ORDER BY seq LIMIT ?2",
                                  "read template build logs"));
  s.bind(1, build_id).bind(2, static_cast<std::int64_t>(limit));
  std::vector<TemplateBuildLogLine> out;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back({s.int64(0), s.int64(1), s.text(2), s.text(3), s.text(4)});
  }
  return out;
}

Result<std::int64_t> Store::delete_template_builds(std::string_view template_id,
                                                   const std::vector<std::string>& statuses) {
  std::lock_guard lock(impl_->mu);
  Impl::Tx tx(impl_->conn);
  ABX_TRY(tx.begin());
  std::vector<std::string> ids;
  {
    ABX_ASSIGN_OR_RETURN(
        auto s, impl_->conn.prepare("SELECT id, status FROM template_builds WHERE template_id = ?1",
                                    "find template builds"));
    s.bind(1, template_id);
    for (;;) {
      ABX_ASSIGN_OR_RETURN(bool row, s.step());
      if (!row) break;
      if (statuses.empty() ||
          std::find(statuses.begin(), statuses.end(), s.text(1)) != statuses.end())
        ids.push_back(s.text(0));
    }
  }
  for (const auto& id : ids) {
    ABX_ASSIGN_OR_RETURN(auto d, impl_->conn.prepare("DELETE FROM template_builds WHERE id = ?1",
                                                     "delete template build"));
    ABX_TRY(d.bind(1, id).exec());
    ABX_ASSIGN_OR_RETURN(auto l,
                         impl_->conn.prepare("DELETE FROM template_build_logs WHERE build_id = ?1",
                                             "delete template build logs"));
    ABX_TRY(l.bind(1, id).exec());
  }
  ABX_TRY(tx.commit());
  return static_cast<std::int64_t>(ids.size());
}

}  // namespace abx::store
