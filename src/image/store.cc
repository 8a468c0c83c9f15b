// abx::image::Store: blobs, the writer that verifies them, names (refs.json) and gc.
// Manifest-driven parts: add_image (image.cc), import (import.cc), extraction (extract.cc).
#include "abx/image/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/image/digest.h"
#include "fs.h"
#include "store_state.h"

namespace abx::image {

// ---------------------------------------------------------------------------------------------
// BlobWriter

struct BlobWriter::State {
  std::string tmp_path;
  std::string final_dir;  // blobs/sha256
  UniqueFd fd;
  Sha256 hash;
  std::string expected_digest;  // empty: whatever the content hashes to
  std::int64_t expected_size = -1;
  std::int64_t written = 0;
  std::string digest;  // set by commit()
  bool committed = false;
  FileLock lock;  // shared store lock: gc and tmp cleanup wait for this writer

  std::string name() const { return expected_digest.empty() ? "blob" : "blob " + expected_digest; }
  void discard() {
    fd.reset();
    if (!tmp_path.empty()) ::unlink(tmp_path.c_str());
    tmp_path.clear();
  }
};

BlobWriter::BlobWriter(std::unique_ptr<State> s) : s_(std::move(s)) {}
BlobWriter::BlobWriter(BlobWriter&&) noexcept = default;
BlobWriter& BlobWriter::operator=(BlobWriter&& other) noexcept {
  if (this != &other) {
    if (s_ && !s_->committed) s_->discard();
    s_ = std::move(other.s_);
  }
  return *this;
}
BlobWriter::~BlobWriter() {
  if (s_ && !s_->committed) s_->discard();
}

std::int64_t BlobWriter::written() const { return s_ ? s_->written : 0; }
const std::string& BlobWriter::digest() const {
  static const std::string kEmpty;
  return s_ ? s_->digest : kEmpty;
}

Status BlobWriter::write(std::string_view chunk) {
  if (!s_ || !s_->fd) return Error(ErrorCode::kFailedPrecondition, "blob writer is closed");
  if (s_->expected_size >= 0 &&
      s_->written + static_cast<std::int64_t>(chunk.size()) > s_->expected_size) {
    std::string msg = s_->name() + ": size mismatch: more than the expected " +
                      std::to_string(s_->expected_size) + " bytes";
    s_->discard();
    return invalid_argument(std::move(msg));
  }
  s_->hash.update(chunk);
  s_->written += static_cast<std::int64_t>(chunk.size());
  while (!chunk.empty()) {
    ssize_t n = os::retry_eintr([&] { return ::write(s_->fd.get(), chunk.data(), chunk.size()); });
    if (n < 0) {
      Error e = errno_error("write", s_->tmp_path, errno);
      s_->discard();
      return e;
    }
    chunk.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Status BlobWriter::commit() {
  if (!s_ || !s_->fd) return Error(ErrorCode::kFailedPrecondition, "blob writer is closed");
  State& s = *s_;
  if (s.expected_size >= 0 && s.written != s.expected_size) {
    std::string msg = s.name() + ": size mismatch: expected " + std::to_string(s.expected_size) +
                      " bytes, got " + std::to_string(s.written);
    s.discard();
    return invalid_argument(std::move(msg));
  }
  std::string got = s.hash.finish();
  if (!s.expected_digest.empty() && got != s.expected_digest) {
    std::string msg = "digest mismatch: expected " + s.expected_digest + ", got " + got;
    s.discard();
    return invalid_argument(std::move(msg));
  }
  if (::fsync(s.fd.get()) != 0) {
    Error e = errno_error("fsync", s.tmp_path, errno);
    s.discard();
    return e;
  }
  s.fd.reset();
  std::string final_path = s.final_dir + "/" + std::string(digest_hex(got));
  // rename(2) onto an existing blob replaces identical content atomically: a concurrent writer
  // of the same blob is harmless.
  if (::rename(s.tmp_path.c_str(), final_path.c_str()) != 0) {
    Error e = errno_error("rename", final_path, errno);
    s.discard();
    return e;
  }
  s.tmp_path.clear();
  s.digest = std::move(got);
  s.committed = true;
  s.lock = FileLock();
  return {};
}

// ---------------------------------------------------------------------------------------------
// Store: open, blobs

Store::Store(std::unique_ptr<State> s) : s_(std::move(s)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

const std::string& Store::root() const { return s_->root; }

Result<Store> Store::open(std::string root, LayerLimits limits) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root.empty()) return invalid_argument("image store: empty root path");
  // Layer directories become overlay lowerdirs, which must be absolute; and the ownership
  // checks below are of the directories the path really goes through (symlinks resolved).
  {
    std::error_code ec;
    auto abs = std::filesystem::absolute(root, ec);
    if (!ec) abs = std::filesystem::weakly_canonical(abs, ec);
    if (ec) return errno_error("image store: resolve", root, ec.value());
    root = abs.lexically_normal().string();
    while (root.size() > 1 && root.back() == '/') root.pop_back();
  }
  auto s = std::make_unique<State>();
  s->root = std::move(root);
  s->limits = limits;
  // Layers keep their owners, setuid bits and file capabilities: only we may reach them.
  ABX_TRY(secure_dirs(s->root, {s->tmp_dir(), s->root + "/blobs", s->blobs_dir(),
                                s->root + "/layers", s->layers_dir()}));
  // Leftovers of a crash: only when no other process is writing (they hold the lock shared).
  auto lock = FileLock::acquire(s->lock_path(), FileLock::Mode::kExclusive, /*wait=*/false);
  if (lock.ok()) {
    ABX_TRY(remove_tree(s->tmp_dir()));
    ABX_TRY(make_dirs(s->tmp_dir()));
  } else if (lock.error().code() != ErrorCode::kUnavailable) {
    return lock.error();
  }
  return Store(std::move(s));
}

bool Store::has_blob(std::string_view digest) const {
  if (!valid_digest(digest)) return false;
  struct stat st {};
  return ::stat(s_->blob_file(digest).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Store::blob_path(std::string_view digest) const {
  if (!valid_digest(digest)) return {};
  return s_->blob_file(digest);
}

Result<std::string> Store::read_blob(std::string_view digest, std::size_t max_bytes) const {
  if (!valid_digest(digest)) {
    return invalid_argument("invalid digest \"" + std::string(digest) + "\"");
  }
  auto data = read_file(s_->blob_file(digest), max_bytes);
  if (!data.ok()) {
    if (data.error().code() == ErrorCode::kNotFound) {
      return not_found("blob " + std::string(digest) + " is not in the image store");
    }
    return Error(data.error().code(),
                 "blob " + std::string(digest) + ": " + data.error().message());
  }
  // Blobs are verified on write; checking again here catches a damaged store before a parser
  // trusts the bytes (manifests and configs are small).
  if (std::string got = sha256_digest(*data); got != digest) {
    return Error(ErrorCode::kInternal, "blob " + std::string(digest) +
                                           " is corrupt in the image store (content hashes to " +
                                           got + ")");
  }
  return data;
}

Result<BlobWriter> Store::blob_writer(std::string_view expected_digest,
                                      std::int64_t expected_size) {
  if (!expected_digest.empty() && !valid_digest(expected_digest)) {
    return invalid_argument("invalid digest \"" + std::string(expected_digest) +
                            "\" (want sha256:<64 lowercase hex>)");
  }
  auto st = std::make_unique<BlobWriter::State>();
  ABX_ASSIGN_OR_RETURN(st->lock, s_->shared_lock());
  st->expected_digest = std::string(expected_digest);
  st->expected_size = expected_size;
  st->final_dir = s_->blobs_dir();
  st->tmp_path = s_->tmp_dir() + "/blob-" + random_name();
  st->fd.reset(::open(st->tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!st->fd) {
    Error e = errno_error("create", st->tmp_path, errno);
    st->tmp_path.clear();
    return e;
  }
  return BlobWriter(std::move(st));
}

Result<std::string> Store::put_blob(std::string_view data) {
  std::string digest = sha256_digest(data);
  if (has_blob(digest)) return digest;
  ABX_ASSIGN_OR_RETURN(auto w, blob_writer(digest, static_cast<std::int64_t>(data.size())));
  ABX_TRY(w.write(data));
  ABX_TRY(w.commit());
  return digest;
}

}  // namespace abx::image
