// abx::image manifests: parsing OCI and Docker v2 schema 2 image manifests, image indexes /
// manifest lists (and picking a platform from them), image configs, and the media types.
//
// The parsers are strict about what the store relies on (schemaVersion 2, digests of the form
// sha256:<64 hex>, non-negative sizes, known media types) and lenient about the rest (unknown
// fields are ignored, as the OCI spec requires). Bodies are limited to kMaxManifestBytes and a
// JSON depth of 64; every error is invalid_argument naming what is wrong ("layer 2: ...").
// Used by the store (add_image, import) and by the registry client (index selection, Accept).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/image/store.h"

namespace abx::image {

inline constexpr std::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciConfig = "application/vnd.oci.image.config.v1+json";
inline constexpr std::string_view kOciLayerTar = "application/vnd.oci.image.layer.v1.tar";
inline constexpr std::string_view kOciLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr std::string_view kOciLayerZstd = "application/vnd.oci.image.layer.v1.tar+zstd";
inline constexpr std::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr std::string_view kDockerManifestList =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerConfig = "application/vnd.docker.container.image.v1+json";
inline constexpr std::string_view kDockerLayerGzip =
    "application/vnd.docker.image.rootfs.diff.tar.gzip";
// Uncompressed Docker layers (rare; some tools write them).
inline constexpr std::string_view kDockerLayerTar = "application/vnd.docker.image.rootfs.diff.tar";

// An Accept header for registries: every manifest and index type above.
inline constexpr std::string_view kManifestAccept =
    "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json";

inline constexpr std::size_t kMaxManifestBytes = 4 << 20;
inline constexpr std::size_t kMaxConfigBytes = 8 << 20;

struct Platform {
  std::string os;
  std::string architecture;
  std::string variant;
};

struct Descriptor {
  std::string media_type;
  std::string digest;
  std::int64_t size = 0;
  std::vector<std::string> urls;  // foreign layers
  std::map<std::string, std::string> annotations;
  Platform platform;  // index entries only
};

struct Manifest {
  std::string media_type;  // kOciManifest or kDockerManifest
  Descriptor config;
  std::vector<Descriptor> layers;
};

struct Index {
  std::string media_type;  // kOciIndex or kDockerManifestList
  std::vector<Descriptor> manifests;
};

enum class ManifestKind { kManifest, kIndex };

// What a manifest body is: its mediaType field, else the transport's Content-Type, else
// inferred from the fields (an OCI manifest may omit mediaType: "manifests" -> index,
// "config" -> manifest). invalid_argument for schema 1 and anything else.
Result<ManifestKind> manifest_kind(std::string_view body, std::string_view content_type = {});
bool is_index_media_type(std::string_view media_type);
bool is_manifest_media_type(std::string_view media_type);

// An image manifest; an index is invalid_argument "... is an image index (a multi-platform
// image); select a platform first (select_platform)".
Result<Manifest> parse_manifest(std::string_view body, std::string_view content_type = {});
// An image index / manifest list.
Result<Index> parse_index(std::string_view body, std::string_view content_type = {});

// The entry of `index` for os/architecture (variant optional: "" matches any, preferring none
// or v8 for arm64); not_found listing the platforms the index has. Attestation manifests
// (platform unknown/unknown) never match.
Result<Descriptor> select_platform(const Index& index, std::string_view os = "linux",
                                   std::string_view architecture = "amd64",
                                   std::string_view variant = {});

enum class LayerCompression { kNone, kGzip, kZstd };
// The compression of a layer media type; invalid_argument naming the type for foreign and
// nondistributable layers ("... layers are not supported: it must be fetched from its URLs")
// and for unknown types.
Result<LayerCompression> layer_compression(std::string_view media_type);

// The runtime defaults of an image config (OCI or Docker: same fields under "config").
Result<ImageConfig> parse_image_config(std::string_view body);

// Serialises an OCI image manifest (docker-archive imports synthesize one).
std::string oci_manifest_json(const Descriptor& config, const std::vector<Descriptor>& layers);

}  // namespace abx::image
