// Secrets (E2B's /secrets): a team's named values that sandboxes use without ever holding them.
// A network.rules header value names one with `${e2b.secrets.<name>}` (egress/transform.h); the
// egress proxy puts the current value in at each request.
//
// Values are write-only: POST /secrets and POST /secrets/{id} take one, and no answer, log line,
// audit event or stored sandbox record carries it. In the store (abx.db, 0600) a value is sealed
// with AES-256-GCM under a key of abxd's home (<home>/secrets.key, 32 random bytes as hex, mode
// 0400, made at the first start), bound to its team and secret id (the additional data), so a
// copy of abx.db alone reveals no value and a sealed value moved to another secret does not
// open. Losing secrets.key loses the values (their metadata stays): requests whose rules name
// one are then refused by the proxy until the secrets are written again.
//
// A new value is a new version (currentVersion + 1); the old value is overwritten, not kept.
#pragma once

#include <boost/json/object.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/store/store.h"

namespace abx::platform {

// Limits (a request over any is a 400 naming the field). Metadata's are E2B's (SecretMetadata).
inline constexpr std::size_t kMaxSecretValueBytes = 65536;
inline constexpr std::size_t kMaxSecretMetadataEntries = 32;
inline constexpr std::size_t kMaxSecretMetadataKeyBytes = 128;
inline constexpr std::size_t kMaxSecretMetadataValueBytes = 1024;
inline constexpr std::size_t kMaxSecretMetadataBytes = 8192;
inline constexpr std::size_t kDefaultMaxSecretsPerTeam = 100;

// A POST /secrets (create: name and value required) or POST /secrets/{id} (update: value
// required, metadata optional) body, decoded and checked. The name is lower-cased (E2B's
// canonical form). invalid_argument names the field; the message never holds the value.
struct SecretSpec {
  std::string name;  // create only
  std::string value;
  std::optional<std::map<std::string, std::string>> metadata;
};
Result<SecretSpec> parse_secret_body(const boost::json::object& body, bool create);

// E2B's Secret: secretID, name, currentVersion, metadata, createdAt, updatedAt. Never the value.
boost::json::object secret_json(const store::SecretRecord& r);

class SecretVault {
 public:
  // Loads <key_file>, or makes it when missing (refused when it is not a regular file of this
  // user, readable by nobody else, holding 64 hex digits).
  static Result<SecretVault> open(const std::filesystem::path& key_file);
  // A vault with a given 32-byte key (tests).
  static Result<SecretVault> with_key(std::string_view key);

  // `value` sealed for secret `id` of `team` (opaque text for the store).
  Result<std::string> seal(std::string_view team, std::string_view id,
                           std::string_view value) const;
  // The value of a sealed record; kFailedPrecondition when it does not open (another key, a
  // record changed outside abxd).
  Result<std::string> open_value(const store::SecretRecord& r) const;
  // The current value of `team`'s secret `name` (the proxy's lookup, per request). kNotFound.
  Result<std::string> resolve(store::Store& store, std::string_view team,
                              std::string_view name) const;

 private:
  std::string key_;  // 32 bytes
};

}  // namespace abx::platform
