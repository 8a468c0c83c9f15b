// abx::store — abxd's durable state in one SQLite 3 file: teams, sandboxes, API keys, AK/SK
// credentials, the signing nonce cache, the templates seen and who built which template, lifecycle
// events, webhooks, secrets, volumes and the e2b SDK's template builds with their logs.
//
// Tenants: every API key and access key belongs to a team, and every sandbox records the team
// of the key that created it (E2B scopes its API per team key the same way). Schema 5 brought
// teams: a file from before it has one team, kDefaultTeam, which every existing key and sandbox
// joined, so a single-key home works exactly as it did.
//
// The file is opened in WAL mode with synchronous=FULL, so a call that returned ok is on disk
// (survives kill -9 of abxd; power loss too, as far as the disk honours fsync). Secrets are
// stored as SHA-256 digests (API keys, sandbox access tokens); the AK/SK secret has to stay
// usable for HMAC, so it is stored as-is and the database file is created with mode 0600 (SQLite
// gives its -wal and -shm files the same mode). Encrypting it at rest is out of scope for now.
//
// A Store is safe to share between threads (one connection behind a mutex); several processes
// may open the same file (WAL + busy timeout). The schema is versioned (table schema_version);
// open() applies the missing migrations in order and refuses a file newer than this code.
//
// Error codes (every message names the SQL step that failed):
//   kInvalidArgument     malformed input (bad id, state, digest, limit, page token)
//   kNotFound            no such sandbox / key
//   kAlreadyExists       primary-key or unique constraint (e.g. a sandbox id taken)
//   kUnauthenticated     verify_api_key: unknown, revoked or malformed key (one message for all)
//   kUnavailable         the database is busy/locked past the busy timeout, or cannot be opened
//   kPermissionDenied    the file or directory is read-only / not ours
//   kInsufficientStorage disk full
//   kFailedPrecondition  the file's schema is newer than this build, or integrity_check failed
//   kInternal            anything else SQLite reports (corruption included)
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/store/sandbox_id.h"

namespace abx::store {

enum class SandboxState { kRunning, kPaused, kKilled };

// "running" | "paused" | "killed".
std::string_view state_name(SandboxState s);
std::optional<SandboxState> parse_state(std::string_view name);

// The team every key and sandbox of a store from before teams belongs to, and the team of keys
// created without one.
inline constexpr std::string_view kDefaultTeam = "default";
// A team id: [a-z0-9][a-z0-9-]{0,62}.
bool valid_team_id(std::string_view id);

// One of a sandbox's volume mounts: which volume, and where inside the sandbox.
struct VolumeMount {
  std::string volume_id;
  std::string name;
  std::string path;  // absolute, normalised (platform's check_mount_path)
  friend bool operator==(const VolumeMount&, const VolumeMount&) = default;
};

struct SandboxRecord {
  std::string id;                                   // 20 lowercase alphanumerics
  std::string team_id = std::string(kDefaultTeam);  // the team of the key that created it
  std::string template_id;
  std::string client_id;
  std::int64_t created_at_ms = 0;  // unix ms
  std::int64_t end_at_ms = 0;      // deadline, unix ms
  SandboxState state = SandboxState::kRunning;
  std::int64_t init_pid = 0;  // host pid of the sandbox's init (0 = not started yet)
  // /proc/<pid>/stat field 22 (start time in clock ticks since boot): with the pid it names one
  // process across pid reuse, so a restarted abxd re-adopts (pidfd_open) the right one.
  std::uint64_t init_start_time = 0;
  std::string
      access_token_digest;  // token_digest(envdAccessToken): 64 lowercase hex, never the token
  double cpu_count = 0;
  std::int64_t memory_mb = 0;
  std::int64_t disk_mb = 0;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env_vars;
  std::string domain;
  // E2B's lifecycle: at the deadline the sandbox is paused (onTimeout "pause", E2B's autoPause)
  // instead of killed; a paused sandbox is woken by proxied traffic only with auto_resume.
  bool pause_on_timeout = false;
  bool auto_resume = false;
  // The timeout the sandbox was created with: a sandbox resumed after its deadline gets it again.
  std::int64_t timeout_s = 300;
  // The sandbox's network as JSON (platform's encoding of its outbound rules); empty: the sandbox
  // has loopback only (network: none, or created before schema 3).
  std::string network;
  // Whether the deadline's pause (pause_on_timeout) keeps the sandbox's memory: false is E2B's
  // autoPauseMemory false, a filesystem-only pause.
  bool pause_keeps_memory = true;
  // Paused to disk: the directory of its checkpoint (the sandbox manager's; absolute). Empty
  // while it runs or is paused in memory.
  std::string checkpoint;
  // Paused without its memory (E2B's filesystem-only pause): its processes are gone and
  // `checkpoint` holds its writable layer only; a resume boots it again on those files.
  bool filesystem_only = false;
  // E2B's volumeMounts (schema 10): the team's volumes mounted into the sandbox, in the order
  // given at create. A fork or a sandbox made from a snapshot has its parent's (a volume is
  // shared, never copied).
  std::vector<VolumeMount> volume_mounts;
};

struct SandboxFilter {
  std::optional<std::string> team_id;            // nullopt: every team's (abxd's own lookups)
  std::vector<SandboxState> states;              // empty: any state
  std::string template_id;                       // empty: any template
  std::map<std::string, std::string> metadata;   // every pair must be present and equal
  std::optional<std::int64_t> started_after_ms;  // created_at_ms >= this (inclusive, as E2B)
  bool descending = false;                       // order by (created_at, id)
  std::size_t limit = 100;                       // 1..1000
  std::string page_token;                        // next_token of the previous page, or empty
};

struct SandboxPage {
  std::vector<SandboxRecord> items;
  // Opaque cursor (base64url of the last row's created_at and id); empty when no more rows.
  // Paging is stable: rows inserted meanwhile are never returned twice and never make the
  // listing skip a row that existed when paging began.
  std::string next_token;
};

struct ApiKeyInfo {
  std::string id;  // 16 hex; not secret
  std::string team_id;
  std::string name;
  std::string prefix;  // "e2b_" + first 4 hex of the key, for humans to tell keys apart
  std::int64_t created_at_ms = 0;
  std::optional<std::int64_t> last_used_ms;
  bool revoked = false;
};

// Who a verified API key is: its id and its team.
struct ApiKeyIdentity {
  std::string id;
  std::string team_id;
};

struct TeamInfo {
  std::string id;
  std::int64_t created_at_ms = 0;
  int active_keys = 0;  // API keys and access keys not revoked
};

struct NewApiKey {
  ApiKeyInfo info;
  std::string key;  // the plaintext "e2b_<40 hex>", returned once and never stored
};

// An API key as abxd --cluster shares it with the other nodes (docs/cluster.md, "Keys and
// teams"): the key's record and the hex SHA-256 digest the store checks a presented key against
// (never the key). last_used_ms is the node's own and not shared.
struct SharedApiKey {
  ApiKeyInfo info;
  std::string digest;
};

struct AccessKey {
  std::string access_key_id;  // "ABX" + 17 uppercase alphanumerics
  std::string secret;         // 64 hex; empty in list_access_keys()
  std::string name;
  std::string team_id;
  std::int64_t created_at_ms = 0;
  bool revoked = false;
};

struct TemplateSeen {
  std::string id;
  std::int64_t last_loaded_at_ms = 0;
  std::string status;  // e.g. "ok" | "error"
  std::string error;   // "file:line:col: message" when status is "error"
};

struct StoreOptions {
  std::chrono::milliseconds busy_timeout{5000};
};

// Lowercase hex SHA-256 of a secret: how sandbox access tokens and API keys are stored.
std::string token_digest(std::string_view secret);
// True if SHA-256(presented) equals the stored hex digest; constant time in the content.
bool digest_matches(std::string_view stored_hex_digest, std::string_view presented);

// One lifecycle event (schema 6): a sandbox was created, paused, resumed, ... or ended.
struct EventRecord {
  std::int64_t id = 0;  // monotonically increasing, never reused (the stream's cursor)
  std::int64_t ts_ms = 0;
  std::string team_id;
  std::string sandbox_id;
  std::string template_id;
  std::string type;  // e.g. "sandbox.lifecycle.killed"
  std::string data;  // a JSON object (e.g. {"reason":"timeout"}); "{}" when nothing more
};

struct EventFilter {
  std::optional<std::string> team_id;  // nullopt: every team's (abxd's own use)
  std::string sandbox_id;              // empty: every sandbox's
  std::vector<std::string> types;      // empty: any type (at most 32)
  std::int64_t after_id = 0;           // ids > after_id (the cursor)
  bool descending = false;             // by id
  std::size_t offset = 0;
  std::size_t limit = 100;  // 1..1000
};

// A registered webhook (schema 7): where a team's lifecycle events are POSTed, signed with
// `secret` (kept as given: abxd needs it to sign; the file is 0600, see above).
struct WebhookRecord {
  std::string id;  // 32 lowercase hex
  std::string team_id;
  std::string name;
  std::string url;
  bool enabled = true;
  std::vector<std::string> events;  // event types; empty: every type
  std::string secret;
  std::int64_t created_at_ms = 0;
};

// A team's secret (schema 9, POST /secrets): metadata and the current value, sealed by abxd
// (platform/secrets.h: AES-256-GCM under a key in abxd's home) before it reaches the store. A
// new value replaces the old one (version + 1): earlier values are not kept.
struct SecretRecord {
  std::string id;  // "sec_" + 24 lowercase hex
  std::string team_id;
  std::string name;  // unique within the team; canonical (lower-case) form
  std::map<std::string, std::string> metadata;
  std::int64_t version = 1;
  std::string sealed;  // the sealed value (opaque bytes); never leaves abxd
  std::int64_t created_at_ms = 0;
  std::int64_t updated_at_ms = 0;
};

struct SecretPage {
  std::vector<SecretRecord> items;  // by name
  std::string next_token;           // the last name of a full page; empty when no more
};

// A team's volume (schema 10, POST /volumes): a named persistent directory of abxd's home that
// sandboxes mount (platform/volumes.h). `token` authenticates the volume content API (E2B's
// VolumeAndToken); kept as given, as webhook secrets are (the file is 0600).
struct VolumeRecord {
  std::string id;  // a version-4 UUID, as E2B's volume ids
  std::string team_id;
  std::string name;  // unique within the team
  std::string token;
  std::int64_t created_at_ms = 0;
};

// A build of the e2b SDK's Template builder (schema 11, POST /v3/templates; platform's
// template_jobs.h): its state, failure, tags and the resources the request gave the template.
struct TemplateBuildRecord {
  std::string build_id;  // a UUID
  std::string template_id;
  std::string team_id;
  std::string status;       // waiting | building | ready | error
  std::string reason;       // status error: why
  std::string reason_step;  // status error: the SDK's step it failed at
  std::vector<std::string> tags;
  std::int64_t created_at_ms = 0;
  double cpu_count = 0;        // the request's cpuCount; 0: not given
  std::int64_t memory_mb = 0;  // the request's memoryMB; 0: not given
};

// One line of a build's log (schema 11); `seq` orders a build's lines from 0.
struct TemplateBuildLogLine {
  std::int64_t seq = 0;
  std::int64_t ts_ms = 0;
  std::string level;  // debug | info | warn | error
  std::string message;
  std::string step;
};

inline constexpr int kSchemaVersion = 11;

class Store {
 public:
  // Opens (creating with mode 0600 if missing) and migrates the database at `file`. The parent
  // directory must exist.
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& file,
                                             const StoreOptions& options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  int schema_version() const;
  // PRAGMA integrity_check; kFailedPrecondition with SQLite's report unless it says "ok".
  Status check_integrity();

  // --- sandboxes ---
  Status insert_sandbox(const SandboxRecord& rec);
  Result<SandboxRecord> get_sandbox(std::string_view id);
  Result<SandboxPage> list_sandboxes(const SandboxFilter& filter);
  // How far a write must last. kPowerLoss (every write but where asked otherwise): on disk
  // (the WAL fsynced) before the call returns. kProcessCrash: in the OS's page cache, so it
  // survives abxd's death but not the machine's; the next kPowerLoss write makes it durable too.
  enum class Durability { kPowerLoss, kProcessCrash };
  Status update_state(std::string_view id, SandboxState state,
                      Durability durability = Durability::kPowerLoss);
  Status set_deadline(std::string_view id, std::int64_t end_at_ms,
                      Durability durability = Durability::kPowerLoss);
  // PRAGMA synchronous of the store's connection (2: FULL, as every write but a kProcessCrash one
  // runs). For tests and diagnostics.
  Result<int> synchronous_setting();
  // State, checkpoint and filesystem_only in one write (the commit point of a pause to disk or a
  // resume from it): kNotFound unless the sandbox is running or paused.
  Status set_checkpoint(std::string_view id, SandboxState state, std::string_view checkpoint,
                        bool filesystem_only = false);
  // Replaces the network JSON (PUT /sandboxes/{id}/network).
  Status set_network(std::string_view id, std::string_view network);
  Status set_init(std::string_view id, std::int64_t pid, std::uint64_t start_time);
  Status delete_sandbox(std::string_view id);
  // Running or paused sandboxes whose deadline is at or before now_ms, oldest deadline first.
  Result<std::vector<SandboxRecord>> expired(std::int64_t now_ms);

  // --- teams ---
  // kInvalidArgument for a malformed id, kAlreadyExists if it exists.
  Status create_team(std::string_view id);
  Result<std::vector<TeamInfo>> list_teams();

  // --- API keys (X-API-KEY / Authorization: Bearer) ---
  // A key of team `team_id`; kNotFound if there is no such team.
  Result<NewApiKey> create_api_key(std::string_view name, std::string_view team_id = kDefaultTeam);
  // Returns the key's id and team. Hashes the presented key, looks the digest up and compares it
  // with CRYPTO_memcmp; kUnauthenticated ("invalid API key") for unknown, revoked or oversized
  // keys. Updates last_used at most once a minute per key (each write is an fsync).
  Result<ApiKeyIdentity> verify_api_key(std::string_view presented);
  Result<std::vector<ApiKeyInfo>> list_api_keys();
  // Revokes by exact id, by a unique id prefix (>= 4 characters) or by the plaintext key.
  // kNotFound when nothing matches, kInvalidArgument when a prefix matches several keys.
  Status revoke_api_key(std::string_view id_or_prefix);

  // Every API key with its digest, revoked ones included (abxd --cluster publishes them).
  Result<std::vector<SharedApiKey>> export_api_keys();
  // A key another node made: added (its team too, if this store has none of that name), or, for
  // a key this store has, revoked when `k` is. A revoked key never becomes active again, and an
  // imported key is never changed otherwise. Returns whether anything changed.
  // kInvalidArgument for a malformed id, team, prefix or digest; kAlreadyExists when another key
  // of this store has that digest.
  Result<bool> import_api_key(const SharedApiKey& k);

  // --- AK/SK credentials for request signing (abx/auth/signing.h) ---
  // kNotFound if there is no team `team_id`.
  Result<AccessKey> create_access_key(std::string_view name,
                                      std::string_view team_id = kDefaultTeam);
  // The secret of an active access key; nullopt when unknown or revoked.
  Result<std::optional<std::string>> access_key_secret(std::string_view access_key_id);
  // The team of an active access key; nullopt when unknown or revoked.
  Result<std::optional<std::string>> access_key_team(std::string_view access_key_id);
  Result<std::vector<AccessKey>> list_access_keys();
  Status revoke_access_key(std::string_view access_key_id);

  // --- replay guard for signed requests ---
  // Records `nonce` until expires_at_ms. Returns true if it was already recorded and has not
  // expired at now_ms (a replay); false if it is new (now remembered, durably). Prunes expired
  // nonces every few hundred calls.
  Result<bool> remember_nonce(std::string_view nonce, std::int64_t expires_at_ms,
                              std::int64_t now_ms);
  Result<std::int64_t> prune_nonces(std::int64_t now_ms);

  // --- template owners: which team built a template (built-in and catalog ones have none) ---
  // Records `team_id` as the owner of `template_id` unless it has one; kAlreadyExists if another
  // team owns it (a name is one template, whoever built it: E2B's aliases are global too).
  Status claim_template(std::string_view template_id, std::string_view team_id);
  // The owning team; nullopt when no team built it.
  Result<std::optional<std::string>> template_owner(std::string_view template_id);
  Status release_template(std::string_view template_id);

  // --- lifecycle events (the abxd event log) ---
  // Appends and returns its id. kInvalidArgument: bad team id, type, or data over 4 KiB.
  // kProcessCrash: as for update_state (abxd's DELETE of a running sandbox writes its killed
  // event so, together with its state).
  Result<std::int64_t> append_event(const EventRecord& e,
                                    Durability durability = Durability::kPowerLoss);
  Result<std::vector<EventRecord>> list_events(const EventFilter& f);
  // The newest id ever given (0 when there has been none).
  Result<std::int64_t> last_event_id();
  // Deletes events older than before_ms and all but the newest keep_last; returns how many.
  Result<std::int64_t> prune_events(std::int64_t before_ms, std::int64_t keep_last);
  // --- webhooks (GET/POST /events/webhooks) ---
  // Errors: kInvalidArgument (bad team or id, a field over its size), kAlreadyExists (the id).
  Status create_webhook(const WebhookRecord& w);
  // Every webhook of `team_id` (nullopt: of every team), oldest first; at most 1000.
  Result<std::vector<WebhookRecord>> list_webhooks(const std::optional<std::string>& team_id);
  // kNotFound when `id` is not one of `team_id`'s.
  Result<WebhookRecord> get_webhook(std::string_view team_id, std::string_view id);
  // Replaces name, url, enabled, events and secret of (w.team_id, w.id); kNotFound.
  Status update_webhook(const WebhookRecord& w);
  Status delete_webhook(std::string_view team_id, std::string_view id);  // kNotFound
  // --- secrets (GET/POST /secrets) ---
  // kAlreadyExists (the name is taken in the team, or the id), kResourceExhausted (the team has
  // `max_per_team` secrets already), kInvalidArgument (bad team, id or a field over its size).
  Status create_secret(const SecretRecord& s, std::size_t max_per_team);
  // The team's secrets ordered by name, after `after_name` (a page token), at most `limit`
  // (1..1000).
  Result<SecretPage> list_secrets(std::string_view team_id, std::string_view after_name,
                                  std::size_t limit);
  // By id ("sec_…") or by name; kNotFound when it is not one of the team's.
  Result<SecretRecord> get_secret(std::string_view team_id, std::string_view id_or_name);
  // A new value (version + 1, updated_at = now_ms) and, when given, new metadata; returns the
  // record as stored. kNotFound.
  Result<SecretRecord> update_secret(
      std::string_view team_id, std::string_view id, std::string_view sealed,
      const std::optional<std::map<std::string, std::string>>& metadata, std::int64_t now_ms);
  Status delete_secret(std::string_view team_id, std::string_view id);  // kNotFound
  // --- volumes (GET/POST /volumes) ---
  // kAlreadyExists (the name is taken in the team, or the id), kResourceExhausted (the team has
  // `max_per_team` volumes already), kInvalidArgument (bad team, id, name or token).
  Status create_volume(const VolumeRecord& v, std::size_t max_per_team);
  // The team's volumes, oldest first.
  Result<std::vector<VolumeRecord>> list_volumes(std::string_view team_id);
  // By id or by name; kNotFound when it is not one of the team's.
  Result<VolumeRecord> get_volume(std::string_view team_id, std::string_view id_or_name);
  // By id, whatever its team (the volume content API, whose credential is the volume's token).
  Result<VolumeRecord> volume_by_id(std::string_view id);
  Status delete_volume(std::string_view team_id, std::string_view id);  // kNotFound
  // --- template builds (the e2b SDK's Template builder) ---
  // Inserts or replaces the build `b.build_id`. kInvalidArgument: a field over its size.
  Status put_template_build(const TemplateBuildRecord& b);
  // Every build, oldest first (abxd reads them once at start); at most 100000.
  Result<std::vector<TemplateBuildRecord>> list_template_builds();
  // Appends log lines of a build (each line's seq given by the caller; a seq already stored is
  // replaced). One transaction for all of them.
  Status append_template_build_logs(std::string_view build_id,
                                    const std::vector<TemplateBuildLogLine>& lines);
  // The build's log lines by seq, at most `limit`.
  Result<std::vector<TemplateBuildLogLine>> template_build_logs(std::string_view build_id,
                                                                std::size_t limit);
  // Removes the build records and logs of `template_id` whose status is in `statuses` (every
  // status when empty); returns how many builds went.
  Result<std::int64_t> delete_template_builds(std::string_view template_id,
                                              const std::vector<std::string>& statuses = {});
  // --- templates seen ---
  Status record_template(const TemplateSeen& t);
  Result<std::vector<TemplateSeen>> list_templates_seen();

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace abx::store
