#include "abx/image/compose.h"

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

#include "abx/base/try.h"
#include "abx/image/layer.h"

namespace abx::image {

namespace json = boost::json;

Result<LayerRef> add_tar_layer(Store& store, const std::string& tar_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(tar_path, ec)) {
    return not_found("layer tarball '" + tar_path + "' is not a regular file");
  }
  std::ifstream in(tar_path, std::ios::binary);
  if (!in) return not_found("layer tarball '" + tar_path + "' cannot be opened");
  // The digest is known only at the end: stream into a writer that checks nothing, then ask
  // the store for the digest it computed (blob_writer with an empty expected digest).
  ABX_ASSIGN_OR_RETURN(BlobWriter w, store.blob_writer("", -1));
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) ABX_TRY(w.write(std::string_view(buf.data(), in.gcount())));
  }
  if (in.bad()) return internal_error("read '" + tar_path + "' failed");
  LayerRef l;
  l.size = w.written();
  ABX_TRY(w.commit());
  l.digest = w.digest();
  l.diff_id = l.digest;
  l.media_type = std::string(kOciLayerTar);
  return l;
}

Result<std::string> write_image_blobs(Store& store, const std::vector<LayerRef>& layers,
                                      const ImageConfig& config) {
  auto strings = [](const std::vector<std::string>& v) {
    json::array a;
    for (const auto& s : v) a.emplace_back(s);
    return a;
  };
  json::object cfg;
  if (!config.env.empty()) cfg["Env"] = strings(config.env);
  if (!config.entrypoint.empty()) cfg["Entrypoint"] = strings(config.entrypoint);
  if (!config.cmd.empty()) cfg["Cmd"] = strings(config.cmd);
  if (!config.working_dir.empty()) cfg["WorkingDir"] = config.working_dir;
  if (!config.user.empty()) cfg["User"] = config.user;
  if (!config.labels.empty()) {
    json::object labels;
    for (const auto& [k, v] : config.labels) labels[k] = v;
    cfg["Labels"] = std::move(labels);
  }
  json::array diff_ids, manifest_layers;
  for (const auto& l : layers) {
    diff_ids.emplace_back(l.diff_id);
    manifest_layers.push_back(
        json::object{{"mediaType", l.media_type}, {"digest", l.digest}, {"size", l.size}});
  }
  json::object image_config{{"architecture", "amd64"},
                            {"os", "linux"},
                            {"config", std::move(cfg)},
                            {"rootfs", json::object{{"type", "layers"}, {"diff_ids", diff_ids}}}};
  std::string config_text = json::serialize(image_config);
  ABX_ASSIGN_OR_RETURN(std::string config_digest, store.put_blob(config_text));
  json::object manifest{
      {"schemaVersion", 2},
      {"mediaType", kOciManifest},
      {"config", json::object{{"mediaType", kOciConfig},
                              {"digest", config_digest},
                              {"size", static_cast<std::int64_t>(config_text.size())}}},
      {"layers", std::move(manifest_layers)}};
  return store.put_blob(json::serialize(manifest));
}

Result<Image> compose_image(Store& store, const std::vector<LayerRef>& layers,
                            const ImageConfig& config,
                            const std::function<void(std::string_view)>& progress) {
  ABX_ASSIGN_OR_RETURN(std::string manifest_digest, write_image_blobs(store, layers, config));
  return store.add_image(manifest_digest, progress);
}

Result<Image> with_runtime(Store& store, const Image& image, const std::string& bundle_dir) {
  namespace fs = std::filesystem;
  if (!image.config.entrypoint.empty() &&
      image.config.entrypoint.front() == kRuntimeEntrypoint[0]) {
    return image;  // already portable
  }
  std::error_code ec;
  if (!fs::exists(fs::path(bundle_dir) / "bin" / "abx-envd", ec)) {
    return Error(ErrorCode::kFailedPrecondition,
                 "no abx bundle at '" + bundle_dir + "' (bin/abx-envd missing; see abxd --bundle)");
  }
  ABX_ASSIGN_OR_RETURN(BlobWriter w, store.blob_writer("", -1));
  // Sorted, owners 0:0, mtimes 0: the same bundle always gives the same layer digest.
  ABX_TRY(write_tar(bundle_dir, [&w](std::string_view bytes) { return w.write(bytes); },
                    {.prefix = std::string(kRuntimeDir).substr(1), .reproducible = true}));
  LayerRef layer;
  layer.size = w.written();
  ABX_TRY(w.commit());
  layer.digest = w.digest();
  layer.diff_id = layer.digest;
  layer.media_type = std::string(kOciLayerTar);

  ABX_ASSIGN_OR_RETURN(std::string manifest_text, store.read_blob(image.manifest_digest));
  boost::system::error_code jec;
  json::value manifest = json::parse(manifest_text, jec);
  if (jec || !manifest.is_object() || !manifest.as_object().if_contains("layers")) {
    return invalid_argument("image " + image.manifest_digest + ": unreadable manifest");
  }
  ABX_ASSIGN_OR_RETURN(std::string config_text, store.read_blob(image.config_digest));
  json::value config = json::parse(config_text, jec);
  if (jec || !config.is_object()) {
    return invalid_argument("image " + image.manifest_digest + ": unreadable config");
  }
  // Layers as the manifest has them (media types and sizes kept), then the runtime layer.
  std::vector<LayerRef> layers;
  const json::array* diff_ids = nullptr;
  if (auto* rootfs = config.as_object().if_contains("rootfs"); rootfs && rootfs->is_object()) {
    if (auto* d = rootfs->as_object().if_contains("diff_ids"); d && d->is_array()) {
      diff_ids = &d->as_array();
    }
  }
  const json::array& ml = manifest.as_object().at("layers").as_array();
  if (diff_ids == nullptr || diff_ids->size() != ml.size()) {
    return invalid_argument("image " + image.manifest_digest + ": config lists " +
                            std::to_string(diff_ids ? diff_ids->size() : 0) + " diff_ids for " +
                            std::to_string(ml.size()) + " layers");
  }
  for (std::size_t i = 0; i < ml.size(); ++i) {
    const auto& l = ml[i].as_object();
    LayerRef r;
    r.digest = std::string(l.at("digest").as_string());
    r.size = l.at("size").to_number<std::int64_t>();
    r.media_type = std::string(l.at("mediaType").as_string());
    r.diff_id = std::string((*diff_ids)[i].as_string());
    layers.push_back(std::move(r));
  }
  layers.push_back(layer);
  ImageConfig cfg = image.config;
  std::vector<std::string> start = cfg.entrypoint;
  start.insert(start.end(), cfg.cmd.begin(), cfg.cmd.end());
  cfg.entrypoint = kRuntimeEntrypoint;
  cfg.cmd.clear();
  if (!start.empty()) {
    std::string joined;
    for (const auto& a : start) {
      std::string q = "'";
      for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      joined += (joined.empty() ? "" : " ") + q + "'";
    }
    cfg.cmd = {"--start-cmd", joined};
  }
  return compose_image(store, layers, cfg);
}

}  // namespace abx::image
