// Manifest, index and config parsing (include/abx/image/manifest.h) on abx's strict JSON.
#include "abx/image/manifest.h"

#include <boost/json.hpp>

#include "abx/base/json.h"
#include "abx/base/try.h"

namespace abx::image {
namespace json = boost::json;
namespace {

constexpr JsonLimits kJsonLimits{.max_depth = 64};
constexpr std::size_t kMaxLayers = 1000;  // Docker's limit is 127; registries allow more
constexpr std::size_t kMaxIndexEntries = 1000;

Result<json::object> parse_object(std::string_view body, std::string_view what,
                                  std::size_t max_bytes) {
  if (body.size() > max_bytes) {
    return invalid_argument(std::string(what) + " is " + std::to_string(body.size()) +
                            " bytes, over the limit of " + std::to_string(max_bytes));
  }
  auto v = parse_json_strict(body, kJsonLimits);
  if (!v.ok()) return invalid_argument(std::string(what) + ": " + v.error().message());
  if (!v->is_object()) return invalid_argument(std::string(what) + " is not a JSON object");
  return std::move(v->as_object());
}

// Optional fields: absent or null is empty; another type is an error naming the field.
Result<std::string> opt_string(const json::object& o, std::string_view key, std::string_view ctx) {
  ABX_ASSIGN_OR_RETURN(auto s, json_optional_string(o, key, ctx));
  return std::move(s).value_or("");
}

Result<Descriptor> parse_descriptor(const json::value& v, const std::string& ctx) {
  ABX_ASSIGN_OR_RETURN(const json::object* op, json_as_object(v, ctx));
  const json::object& o = *op;
  Descriptor d;
  ABX_ASSIGN_OR_RETURN(d.media_type, opt_string(o, "mediaType", ctx));
  ABX_ASSIGN_OR_RETURN(d.digest, opt_string(o, "digest", ctx));
  if (!valid_digest(d.digest)) {
    if (d.digest.rfind("sha256:", 0) != 0 && d.digest.find(':') != std::string::npos) {
      return invalid_argument(ctx + ": digest algorithm of \"" + d.digest.substr(0, 80) +
                              "\" is not supported (only sha256)");
    }
    return invalid_argument(ctx + ": invalid digest \"" + d.digest.substr(0, 80) + "\"");
  }
  ABX_ASSIGN_OR_RETURN(d.size, json_required_int(o, "size", ctx, 0));
  ABX_ASSIGN_OR_RETURN(d.urls, json_optional_string_list(o, "urls", ctx));
  ABX_ASSIGN_OR_RETURN(d.annotations, json_optional_string_map(o, "annotations", ctx));
  ABX_ASSIGN_OR_RETURN(const json::object* po, json_optional_object(o, "platform", ctx));
  if (po != nullptr) {
    const std::string at = json_path_key(ctx, "platform");
    ABX_ASSIGN_OR_RETURN(d.platform.os, opt_string(*po, "os", at));
    ABX_ASSIGN_OR_RETURN(d.platform.architecture, opt_string(*po, "architecture", at));
    ABX_ASSIGN_OR_RETURN(d.platform.variant, opt_string(*po, "variant", at));
  }
  return d;
}

Status check_schema_version(const json::object& o, std::string_view what) {
  auto it = o.find("schemaVersion");
  if (it == o.end() || !it->value().is_int64() || it->value().as_int64() != 2) {
    if (it != o.end() && it->value().is_int64() && it->value().as_int64() == 1) {
      return invalid_argument(std::string(what) +
                              " is Docker image manifest schema 1, which is not supported "
                              "(deprecated; re-push the image with a current client)");
    }
    return invalid_argument(std::string(what) + ": \"schemaVersion\" must be 2");
  }
  return {};
}

Result<ManifestKind> kind_of(const json::object& o, std::string_view content_type) {
  ABX_ASSIGN_OR_RETURN(std::string mt, opt_string(o, "mediaType", "manifest"));
  // The body's own mediaType wins over a transport header (which a proxy may have rewritten).
  if (mt.empty()) {
    std::string_view ct = content_type.substr(0, content_type.find(';'));
    while (!ct.empty() && ct.back() == ' ') ct.remove_suffix(1);
    mt = std::string(ct);
  }
  if (is_index_media_type(mt)) return ManifestKind::kIndex;
  if (is_manifest_media_type(mt)) return ManifestKind::kManifest;
  if (mt.empty() || mt == "application/json" || mt == "application/octet-stream") {
    if (o.contains("manifests")) return ManifestKind::kIndex;
    if (o.contains("config") && o.contains("layers")) return ManifestKind::kManifest;
    if (o.contains("fsLayers")) {
      return invalid_argument(
          "manifest is Docker image manifest schema 1, which is not supported (deprecated; "
          "re-push the image with a current client)");
    }
    return invalid_argument("manifest has no mediaType and is neither a manifest nor an index");
  }
  if (mt.find("manifest.v1+") != std::string::npos && mt.find("docker") != std::string::npos) {
    return invalid_argument("manifest media type " + mt +
                            " (Docker schema 1) is not supported (deprecated; re-push the image)");
  }
  return invalid_argument("unsupported manifest media type \"" + mt.substr(0, 200) + "\"");
}

}  // namespace

bool is_index_media_type(std::string_view mt) {
  return mt == kOciIndex || mt == kDockerManifestList;
}
bool is_manifest_media_type(std::string_view mt) {
  return mt == kOciManifest || mt == kDockerManifest;
}

Result<ManifestKind> manifest_kind(std::string_view body, std::string_view content_type) {
  ABX_ASSIGN_OR_RETURN(auto o, parse_object(body, "manifest", kMaxManifestBytes));
  return kind_of(o, content_type);
}

Result<Manifest> parse_manifest(std::string_view body, std::string_view content_type) {
  ABX_ASSIGN_OR_RETURN(auto o, parse_object(body, "manifest", kMaxManifestBytes));
  ABX_ASSIGN_OR_RETURN(auto kind, kind_of(o, content_type));
  if (kind == ManifestKind::kIndex) {
    return invalid_argument(
        "manifest is an image index (a multi-platform image or manifest list), not an image "
        "manifest; select a platform first (select_platform; the registry client does)");
  }
  ABX_TRY(check_schema_version(o, "manifest"));
  Manifest m;
  ABX_ASSIGN_OR_RETURN(m.media_type, opt_string(o, "mediaType", "manifest"));
  if (m.media_type.empty()) m.media_type = std::string(kOciManifest);
  auto cfg = o.find("config");
  if (cfg == o.end()) return invalid_argument("manifest has no \"config\"");
  ABX_ASSIGN_OR_RETURN(m.config, parse_descriptor(cfg->value(), "manifest.config"));
  if (!m.config.media_type.empty() && m.config.media_type != kOciConfig &&
      m.config.media_type != kDockerConfig) {
    // Helm charts, WASM modules, signatures and other artifacts use the manifest format.
    return invalid_argument("manifest config media type \"" + m.config.media_type.substr(0, 200) +
                            "\" is not a container image config (an OCI artifact?)");
  }
  auto layers = o.find("layers");
  if (layers == o.end() || !layers->value().is_array()) {
    return invalid_argument("manifest has no \"layers\" array");
  }
  const auto& arr = layers->value().as_array();
  if (arr.size() > kMaxLayers) {
    return invalid_argument("manifest has " + std::to_string(arr.size()) +
                            " layers, over the limit of " + std::to_string(kMaxLayers));
  }
  for (std::size_t i = 0; i < arr.size(); ++i) {
    ABX_ASSIGN_OR_RETURN(auto d, parse_descriptor(arr[i], json_path_index("manifest.layers", i)));
    m.layers.push_back(std::move(d));
  }
  return m;
}

Result<Index> parse_index(std::string_view body, std::string_view content_type) {
  ABX_ASSIGN_OR_RETURN(auto o, parse_object(body, "image index", kMaxManifestBytes));
  ABX_ASSIGN_OR_RETURN(auto kind, kind_of(o, content_type));
  if (kind != ManifestKind::kIndex) {
    return invalid_argument("image index is an image manifest, not an index");
  }
  ABX_TRY(check_schema_version(o, "image index"));
  Index idx;
  ABX_ASSIGN_OR_RETURN(idx.media_type, opt_string(o, "mediaType", "image index"));
  if (idx.media_type.empty()) idx.media_type = std::string(kOciIndex);
  auto ms = o.find("manifests");
  if (ms == o.end() || !ms->value().is_array()) {
    return invalid_argument("image index has no \"manifests\" array");
  }
  const auto& arr = ms->value().as_array();
  if (arr.size() > kMaxIndexEntries) {
    return invalid_argument("image index has " + std::to_string(arr.size()) +
                            " entries, over the limit of " + std::to_string(kMaxIndexEntries));
  }
  for (std::size_t i = 0; i < arr.size(); ++i) {
    ABX_ASSIGN_OR_RETURN(auto d,
                         parse_descriptor(arr[i], json_path_index("image index.manifests", i)));
    idx.manifests.push_back(std::move(d));
  }
  return idx;
}

Result<Descriptor> select_platform(const Index& index, std::string_view os,
                                   std::string_view architecture, std::string_view variant) {
  const Descriptor* best = nullptr;
  int best_score = -1;
  std::string seen;
  for (const Descriptor& d : index.manifests) {
    if (!seen.empty()) seen += ", ";
    seen += d.platform.os.empty() ? "?" : d.platform.os;
    seen += "/";
    seen += d.platform.architecture.empty() ? "?" : d.platform.architecture;
    if (!d.platform.variant.empty()) seen += "/" + d.platform.variant;
    if (d.platform.os != os || d.platform.architecture != architecture) continue;
    if (!d.media_type.empty() && !is_manifest_media_type(d.media_type) &&
        !is_index_media_type(d.media_type))
      continue;
    int score = 0;
    if (!variant.empty()) {
      if (d.platform.variant != variant) continue;
      score = 2;
    } else if (d.platform.variant.empty() || d.platform.variant == "v8") {
      score = 1;  // arm64's default variant
    }
    if (score > best_score) {
      best = &d;
      best_score = score;
    }
  }
  if (best == nullptr) {
    std::string want = std::string(os) + "/" + std::string(architecture);
    if (!variant.empty()) want += "/" + std::string(variant);
    return not_found("image index has no manifest for " + want +
                     " (it has: " + (seen.empty() ? "none" : seen.substr(0, 500)) + ")");
  }
  return *best;
}

Result<LayerCompression> layer_compression(std::string_view mt) {
  if (mt == kOciLayerTar || mt == kDockerLayerTar) return LayerCompression::kNone;
  if (mt == kOciLayerGzip || mt == kDockerLayerGzip) return LayerCompression::kGzip;
  if (mt == kOciLayerZstd) return LayerCompression::kZstd;
  if (mt.find("nondistributable") != std::string_view::npos ||
      mt.find("rootfs.foreign") != std::string_view::npos) {
    return invalid_argument("layer media type " + std::string(mt) +
                            " (a foreign / non-distributable layer) is not supported: its "
                            "content is not in the registry");
  }
  return invalid_argument(
      "unsupported layer media type \"" + std::string(mt.substr(0, 200)) +
      "\" (supported: OCI tar, tar+gzip, tar+zstd; Docker rootfs.diff.tar.gzip)");
}

Result<ImageConfig> parse_image_config(std::string_view body) {
  ABX_ASSIGN_OR_RETURN(auto o, parse_object(body, "image config", kMaxConfigBytes));
  ImageConfig c;
  // OCI: config is optional.
  ABX_ASSIGN_OR_RETURN(const json::object* cfg, json_optional_object(o, "config", "image config"));
  if (cfg == nullptr) return c;
  constexpr std::string_view kCtx = "image config.config";
  ABX_ASSIGN_OR_RETURN(c.env, json_optional_string_list(*cfg, "Env", kCtx));
  ABX_ASSIGN_OR_RETURN(c.entrypoint, json_optional_string_list(*cfg, "Entrypoint", kCtx));
  ABX_ASSIGN_OR_RETURN(c.cmd, json_optional_string_list(*cfg, "Cmd", kCtx));
  ABX_ASSIGN_OR_RETURN(c.working_dir, opt_string(*cfg, "WorkingDir", kCtx));
  ABX_ASSIGN_OR_RETURN(c.user, opt_string(*cfg, "User", kCtx));
  ABX_ASSIGN_OR_RETURN(c.labels, json_optional_string_map(*cfg, "Labels", kCtx));
  return c;
}

std::string oci_manifest_json(const Descriptor& config, const std::vector<Descriptor>& layers) {
  auto desc = [](const Descriptor& d) {
    json::object o;
    o["mediaType"] = d.media_type;
    o["digest"] = d.digest;
    o["size"] = d.size;
    return o;
  };
  json::object m;
  m["schemaVersion"] = 2;
  m["mediaType"] = kOciManifest;
  m["config"] = desc(config);
  json::array arr;
  for (const auto& l : layers) arr.push_back(desc(l));
  m["layers"] = std::move(arr);
  return json::serialize(m);
}

}  // namespace abx::image
