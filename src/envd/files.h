// GET/POST /files: downloads streamed from disk, uploads spooled to a private staging directory
// and moved into place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"
#include "abx/http/server.h"
#include "fs.h"
#include "users.h"

namespace abx::envd {

// The content codings of /files bodies (E2B's envd 0.5.7): gzip or none.
enum class Coding { kIdentity, kGzip };

// The coding of a download for an Accept-Encoding value (RFC 9110 section 12.5.3): gzip when the
// client accepts it (q > 0, `x-gzip` and `*` count) at least as much as identity, else identity;
// nullopt when the client accepts neither (`identity;q=0` or `*;q=0` without gzip): 406. An
// absent or empty header means identity. Items that do not parse are ignored; only the first 64
// items are read.
std::optional<Coding> download_coding(std::string_view accept_encoding);

// The file metadata of an upload from its `X-Metadata-<key>: <value>` headers (case-insensitive
// prefix; keys are lowercased, as HTTP header names carry no case). Keys are HTTP token
// characters, values printable ASCII; errors (invalid_argument): an empty or invalid key, an
// invalid value, a key given twice, or more than the fs.h bounds (entries, key, value, total).
Result<FileMetadata> upload_metadata(
    const std::vector<std::pair<std::string_view, std::string_view>>& headers);

// Streams a regular file as the response (Content-Length, no buffering beyond the writer's
// bound; with Coding::kGzip compressed on the fly, chunked, `Content-Encoding: gzip`). The file is
// opened with `user`'s credentials (creds.h): permission_denied when they may not read it. Refuses
// directories, FIFOs, devices and sockets without blocking on them (the open is O_NONBLOCK and
// fstat decides). Errors are returned before anything is sent.
Status serve_download(const std::string& path, const User& user, unsigned version, Coding coding,
                      const http::Responder& respond);

// The directory where `owner`'s uploads to `dir` are staged: private to them (mode 0700, owned
// by `owner`, made by envd) and on the same mount as `dir`, so that a staged file is renamed onto
// its target atomically and no listing of the user's directories ever shows it (issue 9 item 8: a
// listing raced the removal of a body spooled next to its target). First choice is below
// `<spool_root>/.abx-spool-<envd's uid>`; when that is on another mount, below the same name at
// the root of `dir`'s mount. envd's own uploads stage in that directory, another user's in its
// subdirectory `<uid>`. Errors: those of stat/mkdir, and internal when a directory exists but is
// not envd's or `owner`'s own.
Result<std::string> staging_dir_for(const std::string& dir, const std::string& spool_root,
                                    const User& owner);

// Moves an uploaded body into `target` atomically: staged in staging_dir_for(target's directory),
// chowned to `owner`, renamed over the target; every step on the user's paths with `owner`'s
// credentials (creds.h), so permissions are the user's. `spooled` is the body already on disk; when
// it is already staged on the target's mount it is renamed without a copy. Watchers of the target's
// directory see CREATE then WRITE of the target and nothing else. `metadata` becomes the new
// file's user.e2b.* extended attributes before it appears. With Coding::kGzip the range is a gzip
// stream (members may be concatenated), decoded into the staged file: invalid_argument when it
// is not valid gzip, payload_too_large when it decodes to more than `max_decoded` bytes.
struct PlaceOptions {
  Coding coding = Coding::kIdentity;
  std::uint64_t max_decoded = 0;
  FileMetadata metadata;
};
Status place_file(http::BodyFile& spooled, std::uint64_t offset, std::uint64_t length,
                  const std::string& target, const User& owner, const std::string& spool_root,
                  const PlaceOptions& options = {});

struct MultipartPart {
  std::string name;          // form field name
  std::string filename;      // may be empty
  std::uint64_t offset = 0;  // of the content within the spooled body
  std::uint64_t length = 0;
};

// Splits a spooled multipart/form-data body (RFC 7578) into parts without loading it.
// Errors: invalid_argument for a missing boundary or a malformed body.
Result<std::vector<MultipartPart>> parse_multipart(int fd, std::uint64_t size,
                                                   std::string_view content_type);

}  // namespace abx::envd
