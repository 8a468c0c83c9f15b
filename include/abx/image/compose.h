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
#include "abx/image/store.h"

namespace abx::image {

inline constexpr std::string_view kOciManifestType = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kOciConfigType = "application/vnd.oci.image.config.v1+json";
inline constexpr std::string_view kOciLayerTar = "application/vnd.oci.image.layer.v1.tar";
inline constexpr std::string_view kOciLayerTarGzip = "application/vnd.oci.image.layer.v1.tar+gzip";

struct LayerRef {
  std::string digest;      // of the blob as stored
  std::int64_t size = 0;   // of the blob
  std::string media_type;  // kOciLayerTar or kOciLayerTarGzip
  std::string diff_id;     // sha256 of the uncompressed tar (== digest for kOciLayerTar)
};

// Streams an uncompressed tar file into the store as a layer blob (hashing while copying).
Result<LayerRef> add_tar_layer(Store& store, const std::string& tar_path);

// Writes the OCI config (linux/amd64, `config`, the layers' diff_ids) and manifest blobs and
// registers the image (Store::add_image extracts the layers). Does not tag it.
Result<Image> compose_image(Store& store, const std::vector<LayerRef>& layers,
                            const ImageConfig& config,
                            const std::function<void(std::string_view)>& progress = {});

}  // namespace abx::image
