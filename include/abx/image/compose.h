// Writing new images into the store: a layer from a tar file, and an image (OCI config and
// manifest) from layers and a config. Used by `abxd image import` (a root filesystem tarball,
// e.g. what mmdebstrap writes) and by template builds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/image/manifest.h"  // the media types (kOciLayerTar, ...)
#include "abx/image/store.h"

namespace abx::image {

struct LayerRef {
  std::string digest;      // of the blob as stored
  std::int64_t size = 0;   // of the blob
  std::string media_type;  // kOciLayerTar or kOciLayerGzip
  std::string diff_id;     // sha256 of the uncompressed tar (== digest for kOciLayerTar)
};

// Streams an uncompressed tar file into the store as a layer blob (hashing while copying).
Result<LayerRef> add_tar_layer(Store& store, const std::string& tar_path);

// Writes the OCI config (linux/amd64, `config`, the layers' diff_ids) and manifest blobs and
// returns the manifest digest. Deterministic (no timestamps): the same layers and config give
// the same digests, so an unchanged rebuild writes nothing new.
Result<std::string> write_image_blobs(Store& store, const std::vector<LayerRef>& layers,
                                      const ImageConfig& config);

// write_image_blobs, then registers the image (Store::add_image extracts the layers). Does not
// tag it.
Result<Image> compose_image(Store& store, const std::vector<LayerRef>& layers,
                            const ImageConfig& config,
                            const std::function<void(std::string_view)>& progress = {});

// Where abx's in-sandbox binaries live in every image (bind-mounted by abxd, a layer elsewhere).
inline constexpr std::string_view kRuntimeDir = "/opt/abx";
// The entrypoint of an image made portable by with_runtime(): envd serves the E2B protocol on
// all interfaces of the container's network namespace (its port is what E2B clients expect).
inline const std::vector<std::string> kRuntimeEntrypoint = {"/opt/abx/bin/abx-envd", "--host",
                                                            "0.0.0.0", "--port", "49983"};

// The image plus one layer holding `bundle_dir` (abx's bundle: bin/abx-envd, its own loader and
// glibc in lib/) at /opt/abx, with kRuntimeEntrypoint as Entrypoint (the image's own Entrypoint
// and Cmd become envd's start command, --start-cmd), so that any OCI runtime (runc, crun,
// Kubernetes) runs it as an E2B sandbox. The layer tar is deterministic (sorted, mtime 0, root
// owned): the same bundle gives the same layer digest, shared by every image. Not tagged.
Result<Image> with_runtime(Store& store, const Image& image, const std::string& bundle_dir);

}  // namespace abx::image
