// abx-envd's start configuration: one typed struct that abxd writes as JSON and abx-envd reads
// with one parser (style rule 14: flags overlay the same struct).
//
// abxd renders a template into an EnvdConfig (platform/sandboxes.cc), writes it to the
// sandbox's run directory as envd.json and hands it to the sandbox's init on a descriptor
// (`abx-envd --config-fd 3`); a user or a test may start abx-envd with `--config FILE` or with
// the flags alone. Each flag given on the command line replaces that field of the file's config.
//
// The JSON is an object with every field below (version 1): abxd and abx-envd come from the
// same bundle, so a missing or unknown field is version skew or a typo, never a default.
//   {"version": 1, "host": "127.0.0.1", "port": 49983, "tokenFile": "/run/abx/token",
//    "startCmd": "", "serverCmd": "", "serverArgv": [...], "serverCompanionArgv": [...],
//    "interpreterArgv": [...], "defaultUser": "user", "maxUploadBytes": 17179869184,
//    "logLevel": ""}
// Errors are kInvalidArgument naming the field ("envd config: serverArgv[1] must be a string").
//
// A small library of its own (abx::envd_config, base only), so that abxd links the format
// without envd's server.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::envd {

inline constexpr int kEnvdConfigVersion = 1;

struct EnvdConfig {
  // Where envd's API listens (0 picks a free port). EnvdOptions' defaults.
  std::string host = "0.0.0.0";
  std::uint16_t port = 49983;
  // The access token (X-Access-Token) is read from this file, again on SIGHUP. Empty: the
  // ABX_ACCESS_TOKEN variable, else no auth.
  std::string token_file;
  // Run once at start (/bin/sh -c), as the default user. Empty: none.
  std::string start_cmd;
  // The command server, kept running and restarted with backoff: a shell command line, or an
  // argv executed directly (no shell needed in the image). At most one of the two.
  std::string server_cmd;
  std::vector<std::string> server_argv;
  // Started just before each run of the server (needs server_argv), connected to it by a
  // socketpair on descriptor 3 of both (abx-server's Python worker, docs/python.md).
  std::vector<std::string> server_companion_argv;
  // The code interpreter (abx-interp), run as the default user and restarted with backoff.
  std::vector<std::string> interpreter_argv;
  std::string default_user = "user";  // for requests that name none
  // A process's cwd when its request names none (the image's WorkingDir, E2B's setWorkdir);
  // empty, or not a directory: the user's home.
  std::string default_workdir;
  std::uint64_t max_upload_bytes = 16ULL << 30;  // a larger POST /files body gets 413
  std::string log_level;  // trace, debug, info, warn, error or off; empty: the default

  bool operator==(const EnvdConfig&) const = default;
};

// Every field, with "version".
boost::json::object to_json(const EnvdConfig& config);
// The inverse of to_json; then check_envd_config. Errors name the field at fault.
Result<EnvdConfig> envd_config_from_json(const boost::json::value& v);
// Strict JSON text (abx::parse_json_strict) into envd_config_from_json.
Result<EnvdConfig> parse_envd_config(std::string_view text);

// The rules across fields, whatever the source (file, flags or both): argv lists non-empty with
// a non-empty argv[0] when given, server_cmd or server_argv but not both, a companion only with
// server_argv.
Status check_envd_config(const EnvdConfig& config);

// A JSON array of strings (an argv, as the --server-argv flag takes it): non-empty, argv[0]
// non-empty. `what` names it in the error.
Result<std::vector<std::string>> parse_argv_json(std::string_view text, const std::string& what);

}  // namespace abx::envd
