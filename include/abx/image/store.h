// abx::image::Store: the content-addressed image store under $ABX_HOME/images.
//
//   blobs/sha256/<hex>        manifests, configs and compressed layers, verified on write
//   layers/sha256/<hex>/      each layer blob extracted once (libarchive), shared by every
//                             image, template and sandbox; OCI whiteouts become overlay ones
//   tmp/                      partial blobs and extractions; never visible under the names above
//   refs.json                 name -> manifest digest (template ids, pulled references)
//
// Writes are atomic: a blob is streamed to tmp/, its sha256 and size checked while streaming,
// and renamed into place only when both match; an extraction happens in tmp/ and is renamed
// into layers/ when complete (a LayerWriter's, which runs while the blob arrives, only once the
// blob's digest matched). A failure or crash leaves at most files under tmp/, which open()
// removes. Nothing here talks to the network (see registry.h) or spawns sandboxes.
//
// Concurrency: one Store may be used from several threads, and several processes may open the
// same root. <root>/lock is an flock held shared by every writer (a BlobWriter for its whole
// life, add_image, import, tag) and exclusive by gc() and by open()'s tmp/ cleanup, which is
// skipped while anyone writes; refs.json updates are serialised by <root>/refs.lock. gc() does
// not wait: it returns unavailable while any writer is active, so it cannot deadlock a thread
// that holds a BlobWriter. Between operations nothing is pinned: blobs written for an image
// that is not yet tagged are unreferenced, so a pull should pass its manifest digest in gc's
// `keep` (or tag before gc can run); a gc in between makes add_image fail with not_found, never
// produce a broken image.
// Layer extraction (see src/image/extract.h) keeps owners, modes incl. setuid and mtimes (the
// store runs as root), skips device nodes, fifos and sockets, keeps only user.* and
// security.capability xattrs (never trusted.*, so a layer cannot forge overlayfs metadata), and
// refuses the whole layer for any entry that would land outside it.
//
// Who can reach the store: only its owner. Extracted layers hold host-root-owned setuid binaries
// and file capabilities (a Dockerfile's `chmod 4755`, an imported image's sudo), which any host
// user who can reach them could run as host root; so open() keeps <root>, tmp/, blobs/,
// blobs/sha256/, layers/ and layers/sha256/ at mode 0700, owned by this process's euid (an
// existing store with other modes is repaired), and new files at 0600. It refuses
// (failed_precondition) a store another user could have written to: <root> or one of those
// directories owned by another uid or writable by group or others, or a directory above <root>
// (symlinks resolved) owned by neither root nor this euid, or writable by group or others
// without the sticky bit (as /tmp has). abxd (root) resolves the layer paths itself when it
// mounts a sandbox's overlay (idmapped descriptors with a user namespace, plain paths without),
// so the sandboxes' own uids need no access to the store's directories.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/image/reference.h"

namespace abx::image {

// The parts of an OCI image config that become a template's defaults.
struct ImageConfig {
  std::vector<std::string> env;  // "K=V"
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::string working_dir;
  std::string user;
  std::map<std::string, std::string> labels;
};

struct Image {
  std::string manifest_digest;  // "sha256:..." of the image manifest (never an index)
  std::string config_digest;
  std::vector<std::string> layers;      // layer blob digests, lowest first
  std::vector<std::string> layer_dirs;  // extracted directories, lowest first (overlay lowers)
  ImageConfig config;
  std::int64_t size = 0;  // sum of the compressed layer sizes
};

// Extraction limits (hostile layers): entries, expanded bytes, and expanded/compressed ratio.
struct LayerLimits {
  std::uint64_t max_entries = 1'000'000;
  std::uint64_t max_bytes = 64ull << 30;
  std::uint64_t max_ratio = 1000;  // expanded bytes per compressed byte (after 1 MiB)
};

// Streams one blob into the store. write() hashes as it goes; commit() checks digest and size
// and renames the blob into place (already_exists is not an error: the blob is just there).
// Destroying an uncommitted writer removes the partial file.
class BlobWriter {
 public:
  BlobWriter(BlobWriter&&) noexcept;
  BlobWriter& operator=(BlobWriter&&) noexcept;
  ~BlobWriter();
  Status write(std::string_view chunk);
  std::int64_t written() const;
  // invalid_argument "digest mismatch: expected X, got Y" / "size mismatch" on failure.
  Status commit();
  // The blob's digest once commit() succeeded (what the content hashed to), else empty.
  const std::string& digest() const;

 private:
  friend class Store;
  struct State;
  explicit BlobWriter(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// Streams one layer blob into the store and extracts it while it arrives (a registry pull):
// write() stores and hashes each piece as BlobWriter::write does and hands it to an extraction
// running on a thread of its own under tmp/. commit() checks digest and size, waits for the
// extraction, and only then renames the blob into blobs/ and the extracted tree into layers/.
// A digest or size mismatch is reported in preference to the extraction's error (wrong bytes
// usually break the extraction too). On any failure, and when an uncommitted writer is
// destroyed, the partial blob and the partial extraction are removed: nothing unverified or
// half-extracted ever appears under layers/. Holds the store's lock shared for its life. When
// the layer is already extracted, only the blob is stored.
class LayerWriter {
 public:
  LayerWriter(LayerWriter&&) noexcept;
  LayerWriter& operator=(LayerWriter&&) noexcept;
  ~LayerWriter();
  Status write(std::string_view chunk);
  std::int64_t written() const;
  Status commit();

 private:
  friend class Store;
  struct State;
  explicit LayerWriter(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

class Store {
 public:
  // Opens (creating) the store at `root` (made absolute and canonical: layer_dirs are overlay
  // lowerdirs), secures its directories (see "Who can reach the store" above; failed_precondition
  // for one another user can write) and removes leftovers under tmp/.
  static Result<Store> open(std::string root, LayerLimits limits = {});
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::string& root() const;

  bool has_blob(std::string_view digest) const;
  std::string blob_path(std::string_view digest) const;
  Result<std::string> read_blob(std::string_view digest, std::size_t max_bytes = 4 << 20) const;
  // expected_size < 0: unknown. An empty expected_digest stores the content under whatever it
  // hashes to (local archives whose files are not named by digest); BlobWriter::digest() says.
  // The writer holds the store's lock shared until it commits or is destroyed.
  Result<BlobWriter> blob_writer(std::string_view expected_digest, std::int64_t expected_size);
  // A LayerWriter for the layer blob `digest` of `size` bytes (both required).
  Result<LayerWriter> layer_writer(std::string_view digest, std::int64_t size);
  // Stores `data` as a blob and returns its digest.
  Result<std::string> put_blob(std::string_view data);

  // Registers the image whose manifest (OCI or Docker v2 schema 2) and every blob it names are
  // already blobs: parses manifest and config, extracts each layer not yet extracted, and
  // returns the image. `progress` (may be empty) gets one line per layer.
  Result<Image> add_image(std::string_view manifest_digest,
                          const std::function<void(std::string_view)>& progress = {});

  // Imports from a local transport (oci-archive:, docker-archive:, oci:) — kRegistry is
  // registry.h's pull(). oci:/oci-archive: pick the index.json entry whose
  // org.opencontainers.image.ref.name is the reference's tag (or the only entry when no tag),
  // resolving a nested index to linux/amd64, and copy every blob in through a BlobWriter
  // (digest-checked). docker-archive: manifest.json's entry whose RepoTags has the tag (as
  // written or normalised; the only entry when no tag); layers are hashed on the way in and an
  // OCI manifest is synthesized (so the image's manifest digest is abx's own). Does not tag.
  Result<Image> import(const Reference& ref,
                       const std::function<void(std::string_view)>& progress = {});

  // A plain directory as a one-layer image (its own path is the only lower dir; not copied).
  static Result<Image> directory_image(const std::string& dir);

  // Names: template ids and pulled references -> manifest digests. tag: invalid_argument for an
  // empty, over-512-byte or digest-shaped name, or a digest that is not an image manifest;
  // not_found when the manifest is not stored. untag/get: not_found for an unknown name. get
  // also accepts a manifest digest, and re-extracts a layer whose directory is missing.
  Status tag(std::string_view name, std::string_view manifest_digest);
  Status untag(std::string_view name);
  Result<Image> get(std::string_view name_or_digest);
  std::map<std::string, std::string> tags() const;

  // Removes blobs and layers no tagged image (and no digest in `keep`) references, and tmp/.
  // `keep` may name manifests, indexes (their platform manifests are kept) or single blobs.
  // Returns the number of bytes freed; unavailable while another operation holds the store.
  Result<std::uint64_t> gc(const std::set<std::string>& keep = {});

 private:
  friend class LayerWriter;
  struct State;
  explicit Store(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace abx::image
