// Test-only helpers of the image tests: tarballs built with libarchive's writer, and images and
// OCI layouts assembled from them.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "abx/image/manifest.h"
#include "abx/image/store.h"

namespace abx::image::testing {

// Mode, owner, mtime and xattrs of a TarBuilder entry.
struct Meta {
  int mode = 0644;
  int uid = 0;
  int gid = 0;
  long mtime = 1'600'000'000;
  std::vector<std::pair<std::string, std::string>> xattrs;
};

class TarBuilder {
 public:
  enum class Compression { kNone, kGzip, kZstd };
  explicit TarBuilder(Compression c = Compression::kNone) : a_(archive_write_new()) {
    archive_write_set_format_pax_restricted(a_);
    if (c == Compression::kGzip) archive_write_add_filter_gzip(a_);
    if (c == Compression::kZstd) archive_write_add_filter_zstd(a_);
    // No padding after the compressed stream (zstd readers reject trailing zeros).
    archive_write_set_bytes_in_last_block(a_, 1);
    archive_write_open(a_, &out_, nullptr, &TarBuilder::on_write, nullptr);
  }
  ~TarBuilder() { archive_write_free(a_); }
  TarBuilder(const TarBuilder&) = delete;
  TarBuilder& operator=(const TarBuilder&) = delete;

  TarBuilder& file(const std::string& path, const std::string& data, Meta m = {}) {
    return add(path, AE_IFREG, m, &data);
  }
  TarBuilder& dir(const std::string& path, Meta m = {.mode = 0755}) {
    return add(path, AE_IFDIR, m, nullptr);
  }
  TarBuilder& symlink(const std::string& path, const std::string& target) {
    archive_entry* e = entry(path, AE_IFLNK, {.mode = 0777});
    archive_entry_set_symlink(e, target.c_str());
    return write(e, nullptr);
  }
  TarBuilder& hardlink(const std::string& path, const std::string& target) {
    archive_entry* e = entry(path, AE_IFREG, {});
    archive_entry_set_hardlink(e, target.c_str());
    archive_entry_set_size(e, 0);
    return write(e, nullptr);
  }
  TarBuilder& special(const std::string& path, unsigned type, dev_t rdev = 0) {
    archive_entry* e = entry(path, type, {.mode = 0600});
    archive_entry_set_rdev(e, rdev);
    return write(e, nullptr);
  }
  // A regular-file header of `size` bytes of zeros (written in chunks: bombs stay cheap).
  TarBuilder& zeros(const std::string& path, std::size_t size) {
    archive_entry* e = entry(path, AE_IFREG, {});
    archive_entry_set_size(e, static_cast<la_int64_t>(size));
    archive_write_header(a_, e);
    std::string chunk(1 << 16, '\0');
    for (std::size_t left = size; left > 0;) {
      std::size_t n = std::min(left, chunk.size());
      archive_write_data(a_, chunk.data(), n);
      left -= n;
    }
    archive_entry_free(e);
    return *this;
  }
  std::string finish() {
    archive_write_close(a_);
    return out_;
  }

 private:
  static la_ssize_t on_write(archive*, void* ctx, const void* buf, size_t n) {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  }
  archive_entry* entry(const std::string& path, unsigned type, const Meta& m) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, path.c_str());
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, static_cast<mode_t>(m.mode));
    archive_entry_set_uid(e, m.uid);
    archive_entry_set_gid(e, m.gid);
    archive_entry_set_mtime(e, m.mtime, 0);
    for (const auto& [k, v] : m.xattrs)
      archive_entry_xattr_add_entry(e, k.c_str(), v.data(), v.size());
    return e;
  }
  TarBuilder& add(const std::string& path, unsigned type, const Meta& m, const std::string* data) {
    archive_entry* e = entry(path, type, m);
    if (data != nullptr) archive_entry_set_size(e, static_cast<la_int64_t>(data->size()));
    return write(e, data);
  }
  TarBuilder& write(archive_entry* e, const std::string* data) {
    archive_write_header(a_, e);
    if (data != nullptr && !data->empty()) archive_write_data(a_, data->data(), data->size());
    archive_entry_free(e);
    return *this;
  }
  archive* a_;
  std::string out_;
};

inline constexpr char kConfig[] =
    R"({"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin","A=b"],)"
    R"("Entrypoint":["/bin/sh"],"Cmd":["-c","true"],"WorkingDir":"/w","User":"1000",)"
    R"("Labels":{"l":"v"}},"rootfs":{"type":"layers","diff_ids":[]}})";

struct Built {
  std::string manifest;  // manifest digest
  std::string body;      // manifest JSON
  std::vector<Descriptor> layers;
  Descriptor config;
};

// Puts config, layers and an OCI manifest into `store` (blobs only; nothing extracted).
inline Result<Built> put_image(Store& store, const std::vector<std::string>& layers,
                               std::string_view layer_type = kOciLayerTar) {
  Built b;
  auto cfg = store.put_blob(kConfig);
  if (!cfg.ok()) return cfg.error();
  b.config = {.media_type = std::string(kOciConfig),
              .digest = *cfg,
              .size = static_cast<std::int64_t>(std::string_view(kConfig).size())};
  for (const auto& l : layers) {
    auto d = store.put_blob(l);
    if (!d.ok()) return d.error();
    b.layers.push_back({.media_type = std::string(layer_type),
                        .digest = *d,
                        .size = static_cast<std::int64_t>(l.size())});
  }
  b.body = oci_manifest_json(b.config, b.layers);
  auto m = store.put_blob(b.body);
  if (!m.ok()) return m.error();
  b.manifest = *m;
  return b;
}

inline void write_file(const std::filesystem::path& p, std::string_view data) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << data;
}

// An OCI image layout at `dir` holding one image (the blobs of `store` named by `b`), tagged.
inline void write_layout(Store& store, const Built& b, const std::filesystem::path& dir,
                         const std::string& tag) {
  write_file(dir / "oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  std::vector<std::string> digests{b.manifest, b.config.digest};
  for (const auto& l : b.layers) digests.push_back(l.digest);
  for (const auto& d : digests) {
    std::filesystem::create_directories(dir / "blobs/sha256");
    std::filesystem::copy_file(store.blob_path(d), dir / "blobs/sha256" / d.substr(7),
                               std::filesystem::copy_options::overwrite_existing);
  }
  write_file(dir / "index.json",
             R"({"schemaVersion":2,"manifests":[{"mediaType":")" + std::string(kOciManifest) +
                 R"(","digest":")" + b.manifest + R"(","size":)" + std::to_string(b.body.size()) +
                 R"(,"annotations":{"org.opencontainers.image.ref.name":")" + tag + R"("}}]})");
}

}  // namespace abx::image::testing
