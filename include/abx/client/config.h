// libabx configuration: where the platform is, how to authenticate, how patient to be.
//
// One typed struct, filled from the environment like the E2B SDKs do (every ABX_* variable
// also has an E2B_* spelling; ABX_* wins), then overridable field by field in code or by CLI
// flags:
//
//   ABX_API_URL    / E2B_API_URL      control plane base URL. Default: https://api.<domain> when a
//                                     domain is set, else http://127.0.0.1:3000 (a local abxd)
//   ABX_DOMAIN     / E2B_DOMAIN       sandbox domain (used by get_host); default "localhost"
//   ABX_API_KEY    / E2B_API_KEY      sent as X-API-KEY on control-plane requests
//   ABX_ACCESS_KEY_ID, ABX_SECRET_ACCESS_KEY   AK/SK: sign control-plane requests
//                                     (ABX-HMAC-SHA256, see abx/auth/signing.h) instead
//   ABX_SANDBOX_URL / E2B_SANDBOX_URL envd base URL for every sandbox (else: the API URL, routed
//                                     by the E2b-Sandbox-Id / E2b-Sandbox-Port headers)
//   ABX_SERVER_URL                    command-server base URL (same fallback as envd)
//   ABX_ACCESS_TOKEN                  sandbox access token for direct mode (no control plane)
//   ABX_HOME                          local templates under $ABX_HOME/templates (default ~/.abx)
//   ABX_REQUEST_TIMEOUT_MS, ABX_MAX_RETRIES
//
// Transport: plain HTTP/1.1 (the local platform and envd speak it). An https:// URL is
// reported as kUnimplemented when first used rather than silently downgraded.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/client/export.h"

namespace abx::client {

inline constexpr std::uint16_t kEnvdPort = 49983;
inline constexpr std::uint16_t kCommandServerPort = 49982;

struct ABX_EXPORT ConnectionConfig {
  std::string api_url = "http://127.0.0.1:3000";
  std::string domain = "localhost";
  std::string api_key;
  std::string access_key_id;  // with secret_access_key: AK/SK signing instead of the API key
  std::string secret_access_key;
  std::string sandbox_url;   // envd override; empty: api_url + routing headers
  std::string server_url;    // command-server override; empty: api_url + routing headers
  std::string access_token;  // direct mode only (Sandbox::attach); else from the platform
  std::filesystem::path home;
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds request_timeout{60'000};
  // Idempotent requests (GET, DELETE, PUT, and any request that never reached the server) are
  // retried this many times on connection failures and 502/503/504/429, with exponential
  // backoff from retry_backoff (doubling, with jitter).
  int max_retries = 3;
  std::chrono::milliseconds retry_backoff{100};
  // Responses with a larger body fail with kPayloadTooLarge. 0: no limit. (Streams, such as a
  // command's output, are not bounded by it.)
  std::uint64_t max_response_bytes = 0;

  // For a host that reaches sandboxes itself rather than through a URL (abxd dials into a
  // sandbox's network namespace): returns a connected stream socket to `port` (kEnvdPort or
  // kCommandServerPort) of sandbox `sandbox_id`. When set, every sandbox-plane request goes over
  // it, and sandbox_url, server_url and the routing headers are not used.
  using SandboxDialer =
      std::function<Result<UniqueFd>(const std::string& sandbox_id, std::uint16_t port)>;
  SandboxDialer sandbox_dialer;

  // Defaults overlaid with the environment (see the header comment).
  static ConnectionConfig from_env();
};

}  // namespace abx::client
