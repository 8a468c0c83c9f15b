// Store: images (add_image, get, directory_image), names (refs.json) and gc.
#include <dirent.h>
#include <sys/stat.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstdio>

#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/image/manifest.h"
#include "abx/image/store.h"
#include "extract.h"
#include "store_state.h"

namespace abx::image {
namespace {

constexpr std::size_t kMaxRefsBytes = 16 << 20;
constexpr std::size_t kMaxNameBytes = 512;

std::string short_digest(std::string_view d) { return std::string(d.substr(0, 19)); }

std::string human_size(std::int64_t n) {
  char buf[32];
  if (n >= (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(n) / (1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(n) / 1024);
  }
  return buf;
}

// Names in one directory (no "." and "..").
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(std::move(n));
  }
  ::closedir(d);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Images

Status Store::State::ensure_layer(std::string_view digest,
                                  const std::function<void(std::string_view)>& progress) {
  std::string dir = layer_dir(digest);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    if (progress) progress("layer " + short_digest(digest) + ": already extracted");
    return {};
  }
  std::string blob = blob_file(digest);
  if (::stat(blob.c_str(), &st) != 0) {
    return not_found("layer " + std::string(digest) + " is not in the image store");
  }
  if (progress) {
    progress("layer " + short_digest(digest) + ": extracting (" + human_size(st.st_size) + ")");
  }
  std::string tmp = tmp_dir() + "/extract-" + random_name();
  if (::mkdir(tmp.c_str(), 0755) != 0) return errno_error("mkdir", tmp, errno);
  auto stats = extract_layer(blob, tmp, limits, digest);
  if (!stats.ok()) {
    (void)remove_tree(tmp);
    return stats.error();
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    int err = errno;
    (void)remove_tree(tmp);
    // Another process extracted the same layer first: theirs is as good as ours.
    if (err == EEXIST || err == ENOTEMPTY) return {};
    return errno_error("rename", dir, err);
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// LayerWriter

struct LayerWriter::State {
  Store::State* store = nullptr;
  std::string digest;
  BlobWriter blob;
  std::unique_ptr<LayerStream> stream;  // null when the layer is already extracted
  std::string tmp;                      // the extraction under tmp/
  bool done = false;                    // committed, or failed for good
  // Shared store lock until the extraction has left tmp/ (the blob writer's ends at its commit).
  FileLock lock;

  explicit State(BlobWriter b) : blob(std::move(b)) {}
  void discard() {
    stream.reset();  // stops and joins the extraction before its tree goes
    if (!tmp.empty()) (void)remove_tree(tmp);
    tmp.clear();
  }
};

LayerWriter::LayerWriter(std::unique_ptr<State> s) : s_(std::move(s)) {}
LayerWriter::LayerWriter(LayerWriter&&) noexcept = default;
LayerWriter& LayerWriter::operator=(LayerWriter&& other) noexcept {
  if (this != &other) {
    if (s_) s_->discard();
    s_ = std::move(other.s_);
  }
  return *this;
}
LayerWriter::~LayerWriter() {
  if (s_) s_->discard();
}

std::int64_t LayerWriter::written() const { return s_ ? s_->blob.written() : 0; }

Status LayerWriter::write(std::string_view chunk) {
  if (!s_ || s_->done) return Error(ErrorCode::kFailedPrecondition, "layer writer is closed");
  if (Status st = s_->blob.write(chunk); !st.ok()) {
    s_->done = true;
    s_->discard();
    return st;
  }
  if (s_->stream) s_->stream->feed(chunk);
  return {};
}

Status LayerWriter::commit() {
  if (!s_ || s_->done) return Error(ErrorCode::kFailedPrecondition, "layer writer is closed");
  State& s = *s_;
  s.done = true;
  Result<ExtractStats> extracted = ExtractStats{};
  if (s.stream) {
    extracted = s.stream->finish(/*complete=*/true);
    s.stream.reset();
  }
  if (Status st = s.blob.commit(); !st.ok()) {
    s.discard();
    return st;
  }
  if (!extracted.ok()) {
    s.discard();
    return extracted.error();
  }
  if (s.tmp.empty()) return {};
  std::string dir = s.store->layer_dir(s.digest);
  if (::rename(s.tmp.c_str(), dir.c_str()) != 0) {
    int err = errno;
    s.discard();
    // Another process extracted the same layer first: theirs is as good as ours.
    if (err == EEXIST || err == ENOTEMPTY) return {};
    return errno_error("rename", dir, err);
  }
  s.tmp.clear();
  return {};
}

Result<LayerWriter> Store::layer_writer(std::string_view digest, std::int64_t size) {
  if (!valid_digest(digest) || size < 0) {
    return invalid_argument("a layer writer needs a digest and a size");
  }
  // The shared lock first, so that no one sweeps tmp/ under the extraction.
  ABX_ASSIGN_OR_RETURN(auto lock, s_->shared_lock());
  ABX_ASSIGN_OR_RETURN(auto blob, blob_writer(digest, size));
  auto st = std::make_unique<LayerWriter::State>(std::move(blob));
  st->lock = std::move(lock);
  st->store = s_.get();
  st->digest = std::string(digest);
  struct stat sb {};
  if (::lstat(s_->layer_dir(digest).c_str(), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    return LayerWriter(std::move(st));
  }
  st->tmp = s_->tmp_dir() + "/extract-" + random_name();
  if (::mkdir(st->tmp.c_str(), 0755) != 0) {
    Error e = errno_error("mkdir", st->tmp, errno);
    st->tmp.clear();
    return e;
  }
  auto stream = LayerStream::start(st->tmp, static_cast<std::uint64_t>(size), s_->limits, digest);
  if (!stream.ok()) {
    st->discard();
    return stream.error();
  }
  st->stream = std::move(*stream);
  return LayerWriter(std::move(st));
}

Result<Image> Store::State::load_image(std::string_view manifest_digest,
                                       const std::function<void(std::string_view)>& progress,
                                       bool extract) {
  std::string ctx = "image " + std::string(manifest_digest);
  if (!valid_digest(manifest_digest)) {
    return invalid_argument("invalid manifest digest \"" +
                            std::string(manifest_digest.substr(0, 100)) + "\"");
  }
  auto body = read_file(blob_file(manifest_digest), kMaxManifestBytes);
  if (!body.ok()) {
    if (body.error().code() == ErrorCode::kNotFound) {
      return not_found(ctx + ": the manifest is not in the image store");
    }
    return body.error().with_context(ctx);
  }
  auto manifest = parse_manifest(*body);
  if (!manifest.ok()) return manifest.error().with_context(ctx);

  Image img;
  img.manifest_digest = std::string(manifest_digest);
  img.config_digest = manifest->config.digest;
  auto cfg = read_file(blob_file(img.config_digest), kMaxConfigBytes);
  if (!cfg.ok()) {
    if (cfg.error().code() == ErrorCode::kNotFound) {
      return not_found(ctx + ": config " + img.config_digest + " is not in the image store");
    }
    return cfg.error().with_context(ctx);
  }
  auto config = parse_image_config(*cfg);
  if (!config.ok()) return config.error().with_context(ctx + " config " + img.config_digest);
  img.config = std::move(*config);

  for (const Descriptor& l : manifest->layers) {
    auto comp = layer_compression(l.media_type);
    if (!comp.ok()) return comp.error().with_context(ctx + " layer " + l.digest);
    struct stat st {};
    if (::stat(blob_file(l.digest).c_str(), &st) != 0) {
      return not_found(ctx + ": layer " + l.digest + " is not in the image store");
    }
    if (st.st_size != l.size) {
      return invalid_argument(ctx + ": layer " + l.digest + " is " + std::to_string(st.st_size) +
                              " bytes, the manifest says " + std::to_string(l.size));
    }
    if (extract) {
      ABX_TRY(ensure_layer(l.digest, progress));
    } else if (::stat(layer_dir(l.digest).c_str(), &st) != 0) {
      return not_found(ctx + ": layer " + l.digest + " is not extracted");
    }
    img.layers.push_back(l.digest);
    img.layer_dirs.push_back(layer_dir(l.digest));
    img.size += l.size;
  }
  return img;
}

Result<Image> Store::add_image(std::string_view manifest_digest,
                               const std::function<void(std::string_view)>& progress) {
  ABX_ASSIGN_OR_RETURN(auto lock, s_->shared_lock());
  return s_->load_image(manifest_digest, progress, /*extract=*/true);
}

Result<Image> Store::get(std::string_view name_or_digest) {
  std::string digest;
  if (valid_digest(name_or_digest)) {
    digest = std::string(name_or_digest);
  } else {
    ABX_ASSIGN_OR_RETURN(auto refs, s_->read_refs());
    auto it = refs.find(std::string(name_or_digest));
    if (it == refs.end()) {
      return not_found("no image named \"" + std::string(name_or_digest.substr(0, 300)) +
                       "\" in the image store");
    }
    digest = it->second;
  }
  ABX_ASSIGN_OR_RETURN(auto lock, s_->shared_lock());
  // Extracts again what a crash between blob and layer left unextracted.
  return s_->load_image(digest, {}, /*extract=*/true);
}

Result<Image> Store::directory_image(const std::string& dir) {
  struct stat st {};
  if (dir.empty() || dir.front() != '/') {
    return invalid_argument("image directory \"" + dir + "\" is not an absolute path");
  }
  if (::stat(dir.c_str(), &st) != 0) return errno_error("image directory", dir, errno);
  if (!S_ISDIR(st.st_mode))
    return invalid_argument("image directory " + dir + " is not a directory");
  Image img;
  img.layer_dirs.push_back(dir);
  return img;
}

// ---------------------------------------------------------------------------------------------
// Names

Result<std::map<std::string, std::string>> Store::State::read_refs() const {
  std::map<std::string, std::string> refs;
  auto body = read_file(refs_path(), kMaxRefsBytes);
  if (!body.ok()) {
    if (body.error().code() == ErrorCode::kNotFound) return refs;
    return body.error();
  }
  auto v = parse_json_strict(*body);
  if (!v.ok() || !v->is_object() || !v->as_object().contains("refs") ||
      !v->as_object().at("refs").is_object()) {
    return internal_error(refs_path() + " is damaged (want {\"refs\": {name: digest}})");
  }
  for (const auto& kv : v->as_object().at("refs").as_object()) {
    if (kv.value().is_string())
      refs.emplace(std::string(kv.key()), std::string(kv.value().as_string()));
  }
  return refs;
}

Status Store::State::write_refs(const std::map<std::string, std::string>& refs) {
  boost::json::object m;
  for (const auto& [k, v] : refs) m[k] = v;
  boost::json::object doc;
  doc["refs"] = std::move(m);
  return write_file_atomic(tmp_dir(), refs_path(), to_json_string(doc) + "\n");
}

namespace {
Status check_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return invalid_argument("image name must be 1 to 512 bytes");
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return invalid_argument("image name contains control characters");
    }
  }
  if (valid_digest(name)) return invalid_argument("an image name cannot be a digest");
  return {};
}
}  // namespace

Status Store::tag(std::string_view name, std::string_view manifest_digest) {
  ABX_TRY(check_name(name));
  // Held shared so gc cannot remove the manifest between the check and the write.
  ABX_ASSIGN_OR_RETURN(auto lock, s_->shared_lock());
  auto body = read_blob(manifest_digest, kMaxManifestBytes);
  if (!body.ok()) return body.error().with_context("tag \"" + std::string(name) + "\"");
  if (auto m = parse_manifest(*body); !m.ok()) {
    return m.error().with_context("tag \"" + std::string(name) +
                                  "\": " + std::string(manifest_digest));
  }
  std::lock_guard<std::mutex> g(s_->refs_mu);
  ABX_ASSIGN_OR_RETURN(auto refs_lock,
                       FileLock::acquire(s_->refs_lock_path(), FileLock::Mode::kExclusive));
  ABX_ASSIGN_OR_RETURN(auto refs, s_->read_refs());
  refs[std::string(name)] = std::string(manifest_digest);
  return s_->write_refs(refs);
}

Status Store::untag(std::string_view name) {
  std::lock_guard<std::mutex> g(s_->refs_mu);
  ABX_ASSIGN_OR_RETURN(auto refs_lock,
                       FileLock::acquire(s_->refs_lock_path(), FileLock::Mode::kExclusive));
  ABX_ASSIGN_OR_RETURN(auto refs, s_->read_refs());
  if (refs.erase(std::string(name)) == 0) {
    return not_found("no image named \"" + std::string(name.substr(0, 300)) + "\" to untag");
  }
  return s_->write_refs(refs);
}

std::map<std::string, std::string> Store::tags() const {
  auto refs = s_->read_refs();
  return refs.ok() ? std::move(*refs) : std::map<std::string, std::string>{};
}

// ---------------------------------------------------------------------------------------------
// gc

Result<std::uint64_t> Store::gc(const std::set<std::string>& keep) {
  // Exclusive: no writer, extraction or tag is in flight in any process. Not waiting: a caller
  // holding a BlobWriter in this thread would deadlock, and gc can always run later.
  ABX_ASSIGN_OR_RETURN(auto lock, FileLock::acquire(s_->lock_path(), FileLock::Mode::kExclusive,
                                                    /*wait=*/false));
  std::lock_guard<std::mutex> g(s_->refs_mu);
  ABX_ASSIGN_OR_RETURN(auto refs, s_->read_refs());

  std::set<std::string> live;
  std::vector<std::pair<std::string, int>> work;  // digest, depth (indexes nest once or twice)
  for (const auto& [name, d] : refs) work.emplace_back(d, 0);
  for (const auto& d : keep) work.emplace_back(d, 0);
  while (!work.empty()) {
    auto [d, depth] = work.back();
    work.pop_back();
    if (!valid_digest(d) || !live.insert(d).second) continue;
    auto body = read_file(s_->blob_file(d), kMaxManifestBytes);
    if (!body.ok() || depth > 3) continue;
    auto kind = manifest_kind(*body);
    if (!kind.ok()) continue;  // a config or layer named in `keep`
    if (*kind == ManifestKind::kManifest) {
      if (auto m = parse_manifest(*body); m.ok()) {
        live.insert(m->config.digest);
        for (const auto& l : m->layers) live.insert(l.digest);
      }
    } else if (auto idx = parse_index(*body); idx.ok()) {
      for (const auto& e : idx->manifests) work.emplace_back(e.digest, depth + 1);
    }
  }

  std::uint64_t freed = 0;
  for (const std::string& hex : list_dir(s_->blobs_dir())) {
    if (live.count("sha256:" + hex) != 0) continue;
    ABX_TRY(remove_tree(s_->blobs_dir() + "/" + hex, &freed));
  }
  for (const std::string& hex : list_dir(s_->layers_dir())) {
    if (live.count("sha256:" + hex) != 0) continue;
    ABX_TRY(remove_tree(s_->layers_dir() + "/" + hex, &freed));
  }
  for (const std::string& t : list_dir(s_->tmp_dir())) {
    ABX_TRY(remove_tree(s_->tmp_dir() + "/" + t, &freed));
  }
  return freed;
}

}  // namespace abx::image
