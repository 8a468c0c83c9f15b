// Registry credentials and auth challenges: the Docker `auths` file and WWW-Authenticate.
// Pure parsing, no I/O besides reading the auth files; fuzzed (registry_auth_fuzz.cc).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"

namespace abx::image::detail {

struct Credentials {
  std::string username;
  std::string password;
  std::string source;  // the file they came from, for error messages
};

// The entry for `registry` (host[:port]) in a Docker-style auth file's text: keys may carry a
// scheme and a path ("https://index.docker.io/v1/"); docker.io also matches index.docker.io and
// registry-1.docker.io. nullopt when there is no entry; invalid_argument when the file is not
// JSON of that shape or the entry's `auth` is not base64 of "user:password".
Result<std::optional<Credentials>> credentials_from_auth_json(std::string_view text,
                                                              std::string_view registry);

// The auth files to look in, in order: `explicit_file` alone when set; else $ABX_HOME/auth.json
// (~/.abx/auth.json), $REGISTRY_AUTH_FILE, ~/.docker/config.json.
std::vector<std::string> auth_file_candidates(const std::string& explicit_file);

// The first candidate file with an entry for `registry`. Missing files are skipped; a file that
// exists but cannot be read or parsed is an error naming it.
Result<std::optional<Credentials>> find_credentials(const std::vector<std::string>& files,
                                                    std::string_view registry);

// One WWW-Authenticate challenge: `Bearer realm="...",service="...",scope="..."` or
// `Basic realm="..."`. The scheme is lower-cased; parameter names too.
struct Challenge {
  std::string scheme;
  std::map<std::string, std::string> params;
};
// The first challenge in a header value; invalid_argument when there is none.
Result<Challenge> parse_challenge(std::string_view header);

}  // namespace abx::image::detail
