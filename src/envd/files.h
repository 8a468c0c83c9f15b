// GET/POST /files: downloads streamed from disk, uploads spooled to disk and moved into place.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/http/server.h"
#include "envd/users.h"

namespace abx::envd {

// Streams a regular file as the response (Content-Length, no buffering beyond the writer's
// bound). Refuses directories, FIFOs, devices and sockets without blocking on them (the open is
// O_NONBLOCK and fstat decides). Errors are returned before anything is sent.
Status serve_download(const std::string& path, unsigned version, const http::Responder& respond);

// Moves an uploaded body into `target` atomically: a temp file in the target's directory,
// chowned to `owner`, renamed over the target. `spooled` is the body already on disk; when it
// lies in the target directory it is renamed without a copy.
Status place_file(http::BodyFile& spooled, std::uint64_t offset, std::uint64_t length,
                  const std::string& target, const User& owner);

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
