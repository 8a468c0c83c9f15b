#include "abx/image/compose.h"

#include <boost/json.hpp>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <vector>

#include "abx/base/time.h"
#include "abx/base/try.h"

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

Result<Image> compose_image(Store& store, const std::vector<LayerRef>& layers,
                            const ImageConfig& config,
                            const std::function<void(std::string_view)>& progress) {
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
                            {"created", rfc3339(std::time(nullptr), 0)},
                            {"config", std::move(cfg)},
                            {"rootfs", json::object{{"type", "layers"}, {"diff_ids", diff_ids}}}};
  std::string config_text = json::serialize(image_config);
  ABX_ASSIGN_OR_RETURN(std::string config_digest, store.put_blob(config_text));
  json::object manifest{
      {"schemaVersion", 2},
      {"mediaType", kOciManifestType},
      {"config", json::object{{"mediaType", kOciConfigType},
                              {"digest", config_digest},
                              {"size", static_cast<std::int64_t>(config_text.size())}}},
      {"layers", std::move(manifest_layers)}};
  ABX_ASSIGN_OR_RETURN(std::string manifest_digest, store.put_blob(json::serialize(manifest)));
  return store.add_image(manifest_digest, progress);
}

}  // namespace abx::image
