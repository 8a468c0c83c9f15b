// Store::import: the local transports (oci:, oci-archive:, docker-archive:). Every blob goes
// through a BlobWriter, so a damaged layout or archive is caught by digest before it is used.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <map>
#include <memory>

#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/image/manifest.h"
#include "abx/image/store.h"
#include "store_state.h"

namespace abx::image {
namespace {

constexpr std::string_view kRefNameAnnotation = "org.opencontainers.image.ref.name";
constexpr std::size_t kMaxArchiveEntries = 100'000;
constexpr std::size_t kSmallFile = 64 << 10;         // docker-archive: kept in memory
constexpr std::size_t kMaxSmallTotal = 64ull << 20;  // ... up to this much in all
constexpr int kMaxIndexDepth = 3;

// "./a//b" -> "a/b"; "" for names with ".." or absolute ones (ignored by the importers).
std::string clean_member(std::string_view name) {
  if (!name.empty() && name.front() == '/') return {};
  std::string out;
  std::size_t i = 0;
  while (i <= name.size()) {
    std::size_t j = name.find('/', i);
    if (j == std::string_view::npos) j = name.size();
    std::string_view c = name.substr(i, j - i);
    if (c == "..") return {};
    if (!c.empty() && c != ".") {
      if (!out.empty()) out += '/';
      out += c;
    }
    i = j + 1;
  }
  return out;
}

// A tar read once from start to end (libarchive; plain or gzip/zstd-compressed).
class TarReader {
 public:
  struct Deleter {
    void operator()(archive* a) const { archive_read_free(a); }
  };
  static Result<TarReader> open(const std::string& path, const std::string& ctx) {
    TarReader r;
    r.ctx_ = ctx;
    r.a_.reset(archive_read_new());
    if (!r.a_) return internal_error(ctx + ": out of memory");
    archive_read_support_format_tar(r.a_.get());
    archive_read_support_filter_gzip(r.a_.get());
    archive_read_support_filter_zstd(r.a_.get());
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return errno_error(ctx + ": open", path, errno);
    if (archive_read_open_filename(r.a_.get(), path.c_str(), 1 << 16) != ARCHIVE_OK) {
      return r.fail("cannot open");
    }
    return r;
  }
  // Next entry, or nullptr at the end.
  Result<archive_entry*> next() {
    archive_entry* e = nullptr;
    int rc = archive_read_next_header(a_.get(), &e);
    if (rc == ARCHIVE_EOF) return static_cast<archive_entry*>(nullptr);
    if (rc < ARCHIVE_WARN) return fail("corrupt archive");
    if (++entries_ > kMaxArchiveEntries) {
      return Error(ErrorCode::kResourceExhausted,
                   ctx_ + ": more than " + std::to_string(kMaxArchiveEntries) + " entries");
    }
    return e;
  }
  // Streams the current entry's data to `sink`.
  template <class Sink>
  Status read_data(Sink&& sink) {
    const void* buf = nullptr;
    std::size_t len = 0;
    la_int64_t off = 0;
    for (;;) {
      int rc = archive_read_data_block(a_.get(), &buf, &len, &off);
      if (rc == ARCHIVE_EOF) return {};
      if (rc < ARCHIVE_WARN) return fail("corrupt data");
      ABX_TRY(sink(std::string_view(static_cast<const char*>(buf), len)));
    }
  }

 private:
  Error fail(std::string_view what) const {
    const char* m = archive_error_string(a_.get());
    return invalid_argument(ctx_ + ": " + std::string(what) + ": " + (m ? m : "unknown error"));
  }
  std::unique_ptr<archive, Deleter> a_;
  std::string ctx_;
  std::size_t entries_ = 0;
};

// A source of blobs named by digest: an OCI layout directory, or the store itself once an
// archive's blobs were copied in.
struct BlobSource {
  std::string ctx;
  std::string layout_dir;  // empty: the blobs are already in the store
};

Status fetch_blob(Store& store, const BlobSource& src, const Descriptor& d) {
  if (store.has_blob(d.digest)) return {};
  if (src.layout_dir.empty()) {
    return not_found(src.ctx + ": blob " + d.digest + " is missing from the archive");
  }
  std::string path = src.layout_dir + "/blobs/sha256/" + d.digest.substr(7);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return not_found(src.ctx + ": blob " + d.digest + " is missing");
    return errno_error(src.ctx + ": open", path, errno);
  }
  ABX_ASSIGN_OR_RETURN(auto w, store.blob_writer(d.digest, d.size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
    if (n < 0) return errno_error(src.ctx + ": read", path, errno);
    if (n == 0) break;
    if (Status st = w.write(std::string_view(buf, static_cast<std::size_t>(n))); !st.ok()) {
      return st.error().with_context(src.ctx);
    }
  }
  if (Status st = w.commit(); !st.ok()) {
    return st.error().with_context(src.ctx + ": blob " + d.digest);
  }
  return {};
}

// From an index.json: the entry named `tag`, or the only entry.
Result<Descriptor> pick_from_layout(const Index& index, const std::string& tag,
                                    const std::string& ctx) {
  std::vector<std::string> names;
  for (const Descriptor& d : index.manifests) {
    auto it = d.annotations.find(std::string(kRefNameAnnotation));
    if (it == d.annotations.end()) continue;
    if (!tag.empty() && it->second == tag) return d;
    names.push_back(it->second);
  }
  if (!tag.empty()) {
    std::string have;
    for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
    return not_found(ctx + ": no image tagged \"" + tag +
                     "\" (it has: " + (have.empty() ? "none" : have) + ")");
  }
  if (index.manifests.size() == 1) return index.manifests.front();
  return invalid_argument(ctx + ": the layout holds " + std::to_string(index.manifests.size()) +
                          " images; name one with :tag");
}

// Resolves `desc` (an image manifest, or an index to select linux/amd64 from) through `src`
// into the store, then registers the image.
Result<Image> import_from(Store& store, const BlobSource& src, Descriptor desc,
                          const std::function<void(std::string_view)>& progress) {
  for (int depth = 0;; ++depth) {
    if (!valid_digest(desc.digest)) return invalid_argument(src.ctx + ": invalid digest");
    ABX_TRY(fetch_blob(store, src, desc));
    ABX_ASSIGN_OR_RETURN(auto body, store.read_blob(desc.digest, kMaxManifestBytes));
    auto kind = manifest_kind(body, desc.media_type);
    if (!kind.ok()) return kind.error().with_context(src.ctx + ": " + desc.digest);
    if (*kind == ManifestKind::kManifest) break;
    if (depth >= kMaxIndexDepth) return invalid_argument(src.ctx + ": image indexes nest too deep");
    auto idx = parse_index(body, desc.media_type);
    if (!idx.ok()) return idx.error().with_context(src.ctx);
    auto sel = select_platform(*idx);
    if (!sel.ok()) return sel.error().with_context(src.ctx);
    desc = *sel;
  }
  ABX_ASSIGN_OR_RETURN(auto body, store.read_blob(desc.digest, kMaxManifestBytes));
  auto m = parse_manifest(body, desc.media_type);
  if (!m.ok()) return m.error().with_context(src.ctx + ": " + desc.digest);
  for (const Descriptor& l : m->layers) {
    if (auto c = layer_compression(l.media_type); !c.ok()) {
      return c.error().with_context(src.ctx + ": layer " + l.digest);
    }
  }
  ABX_TRY(fetch_blob(store, src, m->config));
  for (const Descriptor& l : m->layers) ABX_TRY(fetch_blob(store, src, l));
  return store.add_image(desc.digest, progress);
}

Result<Index> read_layout_index(std::string_view body, const std::string& ctx) {
  auto idx = parse_index(body, kOciIndex);
  if (!idx.ok()) return idx.error().with_context(ctx + ": index.json");
  return idx;
}

Status check_layout_marker(std::string_view body, const std::string& ctx) {
  auto v = parse_json_strict(body);
  if (!v.ok() || !v->is_object() || !v->as_object().contains("imageLayoutVersion")) {
    return invalid_argument(ctx + ": oci-layout is not an OCI image layout marker");
  }
  return {};
}

// Media type of a layer from its first bytes (docker-archive carries none).
std::string sniff_layer_type(std::string_view head) {
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
      static_cast<unsigned char>(head[1]) == 0x8b)
    return std::string(kOciLayerGzip);
  if (head.size() >= 4 && head.substr(0, 4) == std::string_view("\x28\xb5\x2f\xfd", 4)) {
    return std::string(kOciLayerZstd);
  }
  return std::string(kOciLayerTar);
}

// oci:DIR[:tag] — an OCI image layout directory; its blobs are copied in as they are needed.
Result<Image> import_oci_layout(Store& store, const Reference& ref, const std::string& ctx,
                                const std::function<void(std::string_view)>& progress) {
  const std::string& dir = ref.path;
  auto marker = read_file(dir + "/oci-layout", 64 << 10);
  if (!marker.ok()) {
    return marker.error().with_context(ctx + ": not an OCI image layout");
  }
  ABX_TRY(check_layout_marker(*marker, ctx));
  ABX_ASSIGN_OR_RETURN(auto body, read_file(dir + "/index.json", kMaxManifestBytes));
  ABX_ASSIGN_OR_RETURN(auto idx, read_layout_index(body, ctx));
  ABX_ASSIGN_OR_RETURN(auto desc, pick_from_layout(idx, ref.tag, ctx));
  return import_from(store, BlobSource{ctx, dir}, desc, progress);
}

// oci-archive:TAR[:tag] — the same layout as a tar, read once: every blob is stored as it passes
// (checked against its name), then the index picks the image.
Result<Image> import_oci_archive(Store& store, const Reference& ref, const std::string& ctx,
                                 const std::function<void(std::string_view)>& progress) {
  ABX_ASSIGN_OR_RETURN(auto tar, TarReader::open(ref.path, ctx));
  std::string index_body;
  bool marker = false;
  for (;;) {
    ABX_ASSIGN_OR_RETURN(archive_entry * e, tar.next());
    if (e == nullptr) break;
    if (archive_entry_filetype(e) != AE_IFREG) continue;
    std::string name = clean_member(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
    if (name == "index.json" || name == "oci-layout") {
      std::string body;
      ABX_TRY(tar.read_data([&](std::string_view c) -> Status {
        if (body.size() + c.size() > kMaxManifestBytes) {
          return invalid_argument(ctx + ": " + name + " is too large");
        }
        body.append(c);
        return {};
      }));
      if (name == "oci-layout") {
        ABX_TRY(check_layout_marker(body, ctx));
        marker = true;
      } else {
        index_body = std::move(body);
      }
      continue;
    }
    if (name.rfind("blobs/sha256/", 0) != 0) continue;
    std::string digest = "sha256:" + name.substr(13);
    if (!valid_digest(digest)) continue;
    if (store.has_blob(digest)) continue;
    ABX_ASSIGN_OR_RETURN(auto w, store.blob_writer(digest, archive_entry_size(e)));
    ABX_TRY(tar.read_data([&](std::string_view c) { return w.write(c); }));
    if (Status st = w.commit(); !st.ok()) return st.error().with_context(ctx + ": " + name);
  }
  if (!marker || index_body.empty()) {
    return invalid_argument(ctx +
                            ": not an OCI image layout archive (no oci-layout or "
                            "index.json)");
  }
  ABX_ASSIGN_OR_RETURN(auto idx, read_layout_index(index_body, ctx));
  ABX_ASSIGN_OR_RETURN(auto desc, pick_from_layout(idx, ref.tag, ctx));
  return import_from(store, BlobSource{ctx, ""}, desc, progress);
}

// A docker-archive's files, read once: small ones kept in memory until we know they are needed,
// large ones (layers) stored as blobs as they pass; symlinks and hard links (docker save dedups
// layers so) followed by find().
class DockerArchive {
 public:
  struct Member {
    std::string digest;  // large files: stored already
    std::string data;    // small files: kept until we know they are needed
    std::int64_t size = 0;
    std::string head;  // first bytes, for the layer's compression
  };

  static Result<DockerArchive> read(Store& store, const std::string& path, const std::string& ctx) {
    DockerArchive a;
    std::size_t small_total = 0;
    ABX_ASSIGN_OR_RETURN(auto tar, TarReader::open(path, ctx));
    for (;;) {
      ABX_ASSIGN_OR_RETURN(archive_entry * e, tar.next());
      if (e == nullptr) break;
      std::string name = clean_member(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
      if (name.empty()) continue;
      if (archive_entry_filetype(e) == AE_IFLNK && archive_entry_symlink(e) != nullptr) {
        std::string dir =
            name.substr(0, name.rfind('/') == std::string::npos ? 0 : name.rfind('/'));
        std::string target = archive_entry_symlink(e);
        if (target.empty()) continue;
        a.links_[name] = clean_member(
            target.front() == '/' ? target : (dir.empty() ? target : dir + "/" + target));
        continue;
      }
      if (const char* hl = archive_entry_hardlink(e); hl != nullptr) {
        a.links_[name] = clean_member(hl);
        continue;
      }
      if (archive_entry_filetype(e) != AE_IFREG) continue;
      Member m;
      m.size = archive_entry_size(e);
      if (name == "manifest.json" && m.size > static_cast<std::int64_t>(kMaxManifestBytes)) {
        return invalid_argument(ctx + ": manifest.json is over " +
                                std::to_string(kMaxManifestBytes) + " bytes");
      }
      if (name == "manifest.json" ||
          (m.size >= 0 && static_cast<std::size_t>(m.size) <= kSmallFile)) {
        small_total += static_cast<std::size_t>(m.size);
        if (small_total > kMaxSmallTotal) {
          return Error(ErrorCode::kResourceExhausted, ctx + ": too many small files");
        }
        ABX_TRY(tar.read_data([&](std::string_view c) -> Status {
          m.data.append(c);
          return {};
        }));
        m.head = m.data.substr(0, 4);
      } else {
        ABX_ASSIGN_OR_RETURN(auto w, store.blob_writer("", m.size));
        ABX_TRY(tar.read_data([&](std::string_view c) {
          if (m.head.size() < 4) m.head.append(c.substr(0, 4 - m.head.size()));
          return w.write(c);
        }));
        if (Status st = w.commit(); !st.ok()) return st.error().with_context(ctx + ": " + name);
        m.digest = w.digest();
      }
      a.files_[name] = std::move(m);
    }
    return a;
  }

  // The member at `path` (through at most 8 links), or nullptr.
  Member* find(std::string path) {
    for (int hops = 0; hops < 8; ++hops) {
      if (auto it = files_.find(path); it != files_.end()) return &it->second;
      auto l = links_.find(path);
      if (l == links_.end()) return nullptr;
      path = l->second;
    }
    return nullptr;
  }

  // Stores a member as a blob (small ones were kept in memory) and describes it.
  Result<Descriptor> describe(Store& store, const std::string& path, std::string_view what,
                              const std::string& ctx) {
    Member* m = find(clean_member(path));
    if (m == nullptr) {
      return not_found(ctx + ": " + std::string(what) + " \"" + path + "\" is not in the archive");
    }
    if (m->digest.empty()) {
      ABX_ASSIGN_OR_RETURN(m->digest, store.put_blob(m->data));
      m->size = static_cast<std::int64_t>(m->data.size());
    }
    Descriptor d;
    d.digest = m->digest;
    d.size = m->size;
    d.media_type = sniff_layer_type(m->head);
    return d;
  }

 private:
  std::map<std::string, Member> files_;
  std::map<std::string, std::string> links_;
};

// The entry of a docker-archive's manifest.json that `want` names (a tag as written, or one
// that normalizes to the same reference), or the only one when `want` is empty.
Result<const boost::json::object*> pick_docker_image(const boost::json::array& entries,
                                                     const std::string& want,
                                                     const std::string& ctx) {
  const boost::json::object* chosen = nullptr;
  std::string all_tags;
  std::string want_norm;
  if (!want.empty()) {
    if (auto r = parse_reference(want); r.ok()) want_norm = r->str();
  }
  for (const auto& item : entries) {
    if (!item.is_object()) return invalid_argument(ctx + ": manifest.json entry is not an object");
    const auto& o = item.as_object();
    if (want.empty()) {
      if (entries.size() > 1) {
        return invalid_argument(ctx + ": the archive holds " + std::to_string(entries.size()) +
                                " images; name one with docker-archive:PATH:name:tag");
      }
      chosen = &o;
      break;
    }
    if (auto rt = o.find("RepoTags"); rt != o.end() && rt->value().is_array()) {
      for (const auto& t : rt->value().as_array()) {
        if (!t.is_string()) continue;
        std::string s(t.as_string());
        all_tags += (all_tags.empty() ? "" : ", ") + s;
        auto r = parse_reference(s);
        if (s == want || (r.ok() && !want_norm.empty() && r->str() == want_norm)) chosen = &o;
      }
    }
    if (chosen != nullptr) break;
  }
  if (chosen == nullptr) {
    return not_found(ctx + ": no image tagged \"" + want +
                     "\" (it has: " + (all_tags.empty() ? "none" : all_tags) + ")");
  }
  return chosen;
}

// docker-archive:TAR[:name:tag] — `docker save`'s format. The archive has no manifest of its
// own: this stores one, synthesized from its manifest.json entry, and returns its digest.
Result<std::string> import_docker_archive(Store& store, const Reference& ref,
                                          const std::string& ctx) {
  ABX_ASSIGN_OR_RETURN(DockerArchive archive, DockerArchive::read(store, ref.path, ctx));
  DockerArchive::Member* manifest_file = archive.find("manifest.json");
  if (manifest_file == nullptr || !manifest_file->digest.empty()) {
    return invalid_argument(ctx + ": not a docker-archive (no manifest.json)");
  }
  auto v = parse_json_strict(manifest_file->data);
  if (!v.ok() || !v->is_array() || v->as_array().empty()) {
    return invalid_argument(ctx + ": manifest.json is not a non-empty JSON array");
  }
  ABX_ASSIGN_OR_RETURN(const boost::json::object* chosen,
                       pick_docker_image(v->as_array(), ref.tag, ctx));
  auto cfg = chosen->find("Config");
  auto layers = chosen->find("Layers");
  if (cfg == chosen->end() || !cfg->value().is_string() || layers == chosen->end() ||
      !layers->value().is_array()) {
    return invalid_argument(ctx + ": manifest.json entry lacks Config or Layers");
  }
  ABX_ASSIGN_OR_RETURN(
      Descriptor config,
      archive.describe(store, std::string(cfg->value().as_string()), "config", ctx));
  config.media_type = std::string(kOciConfig);
  ABX_ASSIGN_OR_RETURN(auto config_body, store.read_blob(config.digest, kMaxConfigBytes));
  if (auto c = parse_image_config(config_body); !c.ok()) {
    return c.error().with_context(ctx + ": config");
  }
  std::vector<Descriptor> descs;
  for (const auto& l : layers->value().as_array()) {
    if (!l.is_string())
      return invalid_argument(ctx + ": manifest.json Layers entry is not a string");
    ABX_ASSIGN_OR_RETURN(Descriptor d,
                         archive.describe(store, std::string(l.as_string()), "layer", ctx));
    descs.push_back(std::move(d));
  }
  // The synthesized OCI manifest names config and layers by the digests just computed.
  return store.put_blob(oci_manifest_json(config, descs));
}

}  // namespace

Result<Image> Store::import(const Reference& ref,
                            const std::function<void(std::string_view)>& progress) {
  const std::string ctx = ref.str();
  // Shared for the whole import: gc cannot take blobs copied in before add_image names them.
  ABX_ASSIGN_OR_RETURN(auto lock, s_->shared_lock());
  switch (ref.transport) {
    case Transport::kRegistry:
      return invalid_argument(ctx + " is a registry reference: pull it (image/registry.h)");
    case Transport::kOciLayout:
      return import_oci_layout(*this, ref, ctx, progress);
    case Transport::kOciArchive:
      return import_oci_archive(*this, ref, ctx, progress);
    case Transport::kDockerArchive: {
      ABX_ASSIGN_OR_RETURN(std::string manifest_digest, import_docker_archive(*this, ref, ctx));
      return s_->load_image(manifest_digest, progress, /*extract=*/true);
    }
  }
  return invalid_argument(ctx + ": unknown transport");
}

}  // namespace abx::image
