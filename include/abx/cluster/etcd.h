// A small etcd v3 client over etcd's gRPC-JSON gateway (HTTP/1.1, JSON bodies, keys and values
// in base64), on abx's own HTTP client: no gRPC library. It speaks what abxd --cluster needs —
// put, range (one key or a prefix), delete, one compare-and-put transaction, and leases (grant,
// keepalive, revoke) — against etcd 3.4 (Debian 12's etcd-server) and later.
//
// Endpoints: a list of members; a call goes to the member that answered last, and when it cannot
// be reached (connect, read or write fails, or its deadline passes) to the next one, each member
// at most once per call. An answer from etcd (even an error) ends the call: the cluster has
// spoken. The client is safe to use from several threads (one connection per call).
//
// Errors: kUnavailable (no member reachable, or etcd answered 5xx/unavailable), kNotFound (a
// lease that does not exist or expired), kInvalidArgument (bad endpoint list, key, TTL),
// kInternal (an answer that is not what etcd's gateway sends).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/http/client.h"

namespace abx::cluster {

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  bool tls = false;  // https://
  std::string str() const { return host + ":" + std::to_string(port); }
  std::string url() const { return (tls ? "https://" : "http://") + str(); }
};

// "http://127.0.0.1:2379,127.0.0.1:22379": comma-separated HOST:PORT, each with an optional
// http:// prefix, or "https://10.0.0.10:2379,https://etcd2:2379" (TLS: every endpoint https://;
// a mix is refused). At most 16.
Result<std::vector<Endpoint>> parse_endpoints(std::string_view list);

struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t lease = 0;  // 0: none
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
};

// --- The gateway's answers, parsed (no I/O; fuzzed by etcd_response_fuzz) ---
// Every parser refuses a body that is not strict JSON or whose fields have the wrong type, and
// a gateway error body ({"error"|"message", "code"}) becomes that error (code 5 NotFound, e.g.
// "requested lease not found", is kNotFound; 14 Unavailable is kUnavailable; others kInternal).

// POST /v3/kv/range → its kvs (keys and values decoded).
Result<std::vector<KeyValue>> parse_range_response(std::string_view body);
// POST /v3/kv/range → its kvs, `count` (every key in the range, before a min_mod_revision filter
// prunes kvs) and the store's revision when it was read (header.revision).
struct RangeResult {
  std::vector<KeyValue> kvs;
  std::int64_t count = 0;
  std::int64_t revision = 0;
};
Result<RangeResult> parse_range(std::string_view body);
// POST /v3/kv/txn → whether the compares held ("succeeded").
Result<bool> parse_txn_response(std::string_view body);
// POST /v3/kv/deleterange → how many keys went.
Result<std::int64_t> parse_delete_response(std::string_view body);
// POST /v3/lease/grant → the lease's id.
Result<std::int64_t> parse_lease_grant(std::string_view body);
// POST /v3/lease/keepalive (one {"result": …} message) → the lease's TTL in seconds;
// kNotFound when it is gone (etcd answers TTL 0 or leaves it out).
Result<std::int64_t> parse_keepalive(std::string_view body);
// Any other answer (put, revoke): only checked for a gateway error.
Status parse_ok(std::string_view body);

class EtcdClient {
 public:
  // `timeout` bounds each attempt on one member (connect + request + answer).
  // `tls`: required when the endpoints are https:// (their certificates are verified against its
  // CA and their host names; its client certificate, if any, is presented: etcd's
  // --client-cert-auth). A member whose certificate does not verify ends a call with
  // kUnauthenticated naming it (a configuration error, not a member to fail over from).
  explicit EtcdClient(std::vector<Endpoint> endpoints,
                      std::chrono::milliseconds timeout = std::chrono::seconds(2),
                      std::shared_ptr<const http::TlsClient> tls = nullptr);

  Status put(std::string_view key, std::string_view value, std::int64_t lease = 0);
  Result<std::optional<KeyValue>> get(std::string_view key);
  // Every key starting with `prefix`, in key order; at most `limit` (0: no limit).
  Result<std::vector<KeyValue>> get_prefix(std::string_view prefix, std::int64_t limit = 0);
  // The keys starting with `prefix` last modified at `min_mod_revision` or later (all: 0), with
  // or without their values, and how many keys the prefix holds in all (RangeResult::count) at
  // the revision read. Cheap with `keys_only` and a recent `min_mod_revision`: a cache's check.
  Result<RangeResult> range_prefix(std::string_view prefix, std::int64_t min_mod_revision,
                                   bool keys_only);
  Result<std::int64_t> erase(std::string_view key);
  // A transaction: puts `value` at `key` only if the key does not exist (create_revision = 0).
  // Returns false (nothing written) when it does.
  Result<bool> put_if_absent(std::string_view key, std::string_view value, std::int64_t lease = 0);
  // A transaction: puts `value` at `key` only if the key exists and was last modified at
  // `mod_revision` (KeyValue::mod_revision of a get), i.e. nobody changed it since it was read.
  // Returns false (nothing written) otherwise.
  Result<bool> put_if_revision(std::string_view key, std::string_view value,
                               std::int64_t mod_revision);

  // A lease of `ttl_seconds` (1..3600): its id.
  Result<std::int64_t> grant_lease(std::int64_t ttl_seconds);
  // Renews a lease: its TTL again; kNotFound when it expired or was revoked.
  Result<std::int64_t> keep_alive(std::int64_t lease);
  Status revoke_lease(std::int64_t lease);

  // The member that answered last (for logs and tests).
  Endpoint current() const;

 private:
  // POSTs `body` (JSON) to `path` on a member (failing over), returning the answer's body.
  Result<std::string> call(std::string_view path, std::string body);

  std::vector<Endpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<const http::TlsClient> tls_;
  mutable std::mutex mu_;
  std::size_t current_ = 0;
};

}  // namespace abx::cluster
