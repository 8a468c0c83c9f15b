// abx::image layer tarballs: a directory (a build step's files, or a sandbox's overlay upper
// dir) written as an OCI layer — a gzip-compressed tar (libarchive) with its blob digest and
// its diff_id (the sha256 of the uncompressed tar, which the image config lists).
//
// From an overlay upper dir (LayerWriteOptions::overlay_upper) the kernel's whiteouts become
// OCI ones: a character device 0:0 `x` is written as an empty file `.wh.x`, and a directory
// with the xattr trusted.overlay.opaque=y gets a `.wh..wh..opq` entry inside it. Other device
// nodes, sockets and fifos are left out. Hard links inside the directory stay hard links.
//
// The output is deterministic for the same tree (entries sorted by name, gzip header without
// a timestamp), so rebuilding an unchanged step reproduces the same digest. The same walk writes
// plain tars too (write_tar: the runtime layer of compose.h's with_runtime).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/base/fd.h"

namespace abx::image {

class Store;

inline constexpr const char* kLayerMediaType = "application/vnd.oci.image.layer.v1.tar+gzip";

struct LayerBlob {
  std::string digest;  // sha256:... of the compressed blob
  std::int64_t size = 0;
  std::string diff_id;  // sha256:... of the uncompressed tar
};

struct LayerWriteOptions {
  bool overlay_upper = false;
  // Paths relative to the directory ("proc", "opt/abx") left out when they hold nothing but
  // other such paths: mount points a sandbox's runtime created in its upper dir.
  std::set<std::string> skip_if_empty;
  // The directory's entries go under this relative path ("opt/abx"), after an entry for each
  // of its directories (0755, owned by 0:0, mtime 0). Empty: at the archive's root.
  std::string prefix;
  // Owners 0:0 and mtimes 0 on every entry, so the same files give the same bytes wherever and
  // whenever they were written (modes, links and contents are kept).
  bool reproducible = false;
};

// Writes the layer for `dir` to `out` (a file open for writing). Errors: internal, naming the
// path that could not be read.
Result<LayerBlob> write_layer_to(const std::string& dir, int out,
                                 const LayerWriteOptions& options = {});

// The same tar, uncompressed, handed to `out` piece by piece (no file): what compose's
// with_runtime() makes the runtime layer of. Errors: internal, or `out`'s own.
Status write_tar(const std::string& dir, const std::function<Status(std::string_view)>& out,
                 const LayerWriteOptions& options = {});

// Writes the layer into `store` as a blob (through a file under the store's tmp/, removed
// afterwards whatever happens).
Result<LayerBlob> write_layer(Store& store, const std::string& dir,
                              const LayerWriteOptions& options = {});

}  // namespace abx::image
