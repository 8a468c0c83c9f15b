// abx-envd: the daemon inside each sandbox (PID 1), serving the envd-compatible data plane.
//
// The API is E2B's envd, as the `e2b` SDKs speak it (docs: shared/reference/e2b-protocol.md §3):
//   GET  /health                       204
//   GET  /files?path=…[&username=…]    the file's bytes, streamed
//   POST /files?path=…[&username=…]    multipart/form-data (parts named `file`) or
//                                      application/octet-stream; spooled to disk, atomic replace
//   POST /process.Process/{Start,Connect,List,SendInput,SendSignal,CloseStdin,Update}
//   POST /filesystem.Filesystem/{Stat,ListDir,MakeDir,Move,Remove,WatchDir,
//                                CreateWatcher,GetWatcherEvents,RemoveWatcher}
//   GET  /envs                         the default environment, a JSON string map
//   GET  /metrics                      {ts, cpu_count, cpu_used_pct, mem_*, disk_*} (host_info.h)
//   GET  /logs?start=<ms>&limit=N      (abx) the start command's and command server's output
//                                      and restarts (src/envd/output_log.h)
// RPCs use the Connect protocol with JSON (unary: bare JSON; server streams: envelopes ending
// with an end-stream frame). With an access token configured, every route but /health needs
// `X-Access-Token` (the /files routes also accept a v1 `signature`).
//
// Envd is a library object so tests can run it in-process on port 0; abx-envd wraps it with
// flags and the init duties (reaping, SIGTERM forwarding, supervision).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "abx/base/error.h"

namespace abx::envd {

struct UserSpec {
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::string home;
};

struct EnvdOptions {
  std::string host = "0.0.0.0";
  std::uint16_t port = 49983;  // 0 picks a free port
  int io_threads = 2;
  std::optional<std::string> access_token;  // unset: no auth (as E2B without `secure`)
  std::string default_user = "user";
  std::string default_workdir;  // EnvdConfig::default_workdir
  // Replaces the password database for these names (tests map both users to themselves).
  std::map<std::string, UserSpec> users;
  std::uint64_t max_upload_bytes = 16ULL << 30;  // a larger POST /files body gets 413
  // Upload bodies are staged in a private `.abx-spool-<euid>` directory made here (or, for a
  // target on another mount, at the root of that mount), never in the user's directories.
  // Empty: $TMPDIR or /tmp.
  std::string spool_dir;
  std::chrono::milliseconds default_keepalive{90'000};  // without Keepalive-Ping-Interval
  std::size_t stream_high_water = 256 * 1024;           // per-stream queue bound (back-pressure)
};

class Envd {
 public:
  // Starts serving. Errors: kUnavailable (cannot listen), kInvalidArgument (bad host).
  static Result<std::unique_ptr<Envd>> start(EnvdOptions options);
  ~Envd();  // stops serving, kills the processes it started

  std::uint16_t port() const;
  const std::string& host() const;
  // Sends `sig` to every process started through the API (SIGTERM forwarding).
  void signal_processes(int sig);
  // Replaces the access token: from the return on, `token` is the only one accepted (requests
  // already past the check finish). Turning auth on or off is not a change this makes. Errors:
  // kInvalidArgument for an empty token, kFailedPrecondition when envd serves without one.
  Status set_access_token(std::string token);
  void shutdown(std::chrono::milliseconds drain);

  struct Impl;

 private:
  explicit Envd(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace abx::envd
