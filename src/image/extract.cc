// Layer extraction with libarchive (see extract.h for what is kept and what is refused).
//
// archive_write_disk resolves entry names against the process's working directory, and abxd is
// multi-threaded. So each extraction runs on a thread of its own that first unshares its
// filesystem context (unshare(CLONE_FS): cwd, root and umask become per-thread, no privilege
// needed) and then fchdir()s into the destination. Nothing else in the process sees that cwd.
#include "extract.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "abx/base/fd.h"
#include "fs.h"

namespace abx::image {
namespace {

constexpr std::uint64_t kRatioGrace = 1 << 20;  // ratios of tiny layers mean nothing
constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaque = ".wh..wh..opq";

struct ReadDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct WriteDeleter {
  void operator()(archive* a) const { archive_write_free(a); }
};

// "./a//b/" -> "a/b"; empty for the root entry; nullopt-like "" with bad=true for ".." or
// absolute names.
struct CleanName {
  std::string path;
  bool bad = false;
};
CleanName clean_name(std::string_view name) {
  CleanName out;
  if (!name.empty() && name.front() == '/') {
    out.bad = true;
    return out;
  }
  std::size_t i = 0;
  while (i <= name.size()) {
    std::size_t j = name.find('/', i);
    if (j == std::string_view::npos) j = name.size();
    std::string_view comp = name.substr(i, j - i);
    if (comp == "..") {
      out.bad = true;
      return out;
    }
    if (!comp.empty() && comp != ".") {
      if (!out.path.empty()) out.path += '/';
      out.path += comp;
    }
    i = j + 1;
  }
  return out;
}

std::string parent_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? std::string() : p.substr(0, s);
}
std::string base_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

bool keep_xattr(std::string_view name) {
  return name.rfind("user.", 0) == 0 || name == "security.capability";
}

class Extractor {
 public:
  // `compressed`: the blob's size, for the expansion ratio.
  Extractor(std::uint64_t compressed, const LayerLimits& limits, std::string_view layer)
      : limits_(limits), layer_(layer), compressed_(compressed) {}

  // Runs on the extraction thread, whose cwd is the destination. `open` opens `in` (already
  // set up for tar behind none, gzip or zstd) on the layer's bytes.
  Result<ExtractStats> run(const std::function<int(archive*)>& open) {
    std::unique_ptr<archive, ReadDeleter> in(archive_read_new());
    std::unique_ptr<archive, WriteDeleter> out(archive_write_disk_new());
    if (!in || !out) return internal_error("layer " + layer_ + ": out of memory");
    writer_ = out.get();
    // Only what layers use: tar (ustar, pax, GNU) behind none, gzip or zstd.
    archive_read_support_format_tar(in.get());
    archive_read_support_filter_gzip(in.get());
    archive_read_support_filter_zstd(in.get());
    if (open(in.get()) != ARCHIVE_OK) return fail(in.get(), "cannot open");
    // Numeric uid/gid only (no archive_write_disk_set_standard_lookup): names would be looked
    // up in the host's passwd, not the image's.
    archive_write_disk_set_options(
        out.get(), ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                       ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                       ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);

    archive_entry* e = nullptr;
    for (;;) {
      int r = archive_read_next_header(in.get(), &e);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) return fail(in.get(), "corrupt archive");
      Status st2 = entry(in.get(), out.get(), e);
      if (!st2.ok()) return st2.error();
    }
    if (Status s = finish_whiteouts(); !s.ok()) return s.error();
    // Applies deferred directory modes and mtimes (after the whiteouts touched them).
    if (archive_write_close(out.get()) != ARCHIVE_OK) return fail(out.get(), "cannot finish");
    return stats_;
  }

 private:
  Error fail(archive* a, std::string_view what) const {
    const char* msg = archive_error_string(a);
    std::string text = "layer " + layer_ + ": " + std::string(what) + ": " +
                       (msg != nullptr ? msg : "unknown libarchive error");
    // On the disk writer, libarchive's "Can't create '...'" leaves out why (stop 53's CI: most
    // likely a full disk); its errno is the system's there.
    if (int err = archive_errno(a); a == writer_ && err > 0) {
      std::string why = std::strerror(err);
      if (text.find(why) == std::string::npos) text += " (" + why + ")";
    }
    return invalid_argument(text);
  }
  Error refuse(const std::string& name, std::string_view why) const {
    return invalid_argument("layer " + layer_ + ": entry \"" + name.substr(0, 300) + "\" " +
                            std::string(why));
  }
  Error exhausted(std::string_view limit, std::uint64_t value) const {
    return Error(ErrorCode::kResourceExhausted, "layer " + layer_ + " exceeds the " +
                                                    std::string(limit) + " limit of " +
                                                    std::to_string(value));
  }

  Status check_stream(archive* in) const {
    auto expanded = static_cast<std::uint64_t>(archive_filter_bytes(in, 0));
    if (expanded > kRatioGrace && compressed_ > 0 && expanded / limits_.max_ratio > compressed_) {
      return exhausted("expansion ratio", limits_.max_ratio);
    }
    // Headers and padding count too, with a little room above the content limit.
    if (expanded > limits_.max_bytes + (limits_.max_bytes >> 4) + kRatioGrace) {
      return exhausted("expanded size", limits_.max_bytes);
    }
    return {};
  }

  // Every existing component of `rel`'s parents must be a real directory: libarchive checks
  // this too (SECURE_SYMLINKS); this is the second, independent check.
  // Directories seen to be real ones are remembered (only this extraction writes below the
  // destination, and an entry changes nothing but its own path: forget() drops that path and
  // what is below it before it is written).
  Status check_parents(const std::string& rel, const std::string& shown) {
    std::string prefix;
    std::size_t i = 0;
    for (;;) {
      std::size_t j = rel.find('/', i);
      if (j == std::string::npos) return {};
      prefix = rel.substr(0, j);
      i = j + 1;
      if (real_dirs_.count(prefix) != 0) continue;
      struct stat st {};
      if (::lstat(prefix.c_str(), &st) != 0) return {};  // created as a directory later
      if (S_ISLNK(st.st_mode)) return refuse(shown, "goes through the symlink \"" + prefix + "\"");
      if (!S_ISDIR(st.st_mode))
        return refuse(shown, "has the non-directory \"" + prefix + "\" as a parent");
      real_dirs_.insert(prefix);
    }
  }
  void forget(const std::string& rel) {
    real_dirs_.erase(rel);
    const std::string below = rel + "/";
    for (auto it = real_dirs_.lower_bound(below);
         it != real_dirs_.end() && it->compare(0, below.size(), below) == 0;) {
      it = real_dirs_.erase(it);
    }
  }

  // One function of ~90 lines on purpose: every check on an entry (name, whiteout, type,
  // hardlink target, size and ratio) runs before anything of it is written, in this order, and
  // the writing shares the checks' cleaned name; splitting it would hide that order.
  Status entry(archive* in, archive* out, archive_entry* e) {
    if (++stats_.entries > limits_.max_entries)
      return exhausted("entry count", limits_.max_entries);
    const char* raw = archive_entry_pathname(e);
    if (raw == nullptr) return invalid_argument("layer " + layer_ + ": entry without a name");
    CleanName name = clean_name(raw);
    if (name.bad) return refuse(raw, "points outside the layer (absolute or \"..\")");
    if (name.path.empty()) return skip(in);  // "./": the layer root keeps 0755 root:root
    if (name.path.size() >= PATH_MAX) return refuse(name.path, "has a name longer than PATH_MAX");

    std::string base = base_of(name.path);
    if (base.rfind(kWhiteoutPrefix, 0) == 0) {
      if (base == kOpaque) {
        opaque_.insert(parent_of(name.path));
      } else if (base.rfind(".wh..wh.", 0) == 0) {
        ++stats_.skipped;
      } else {
        std::string target = base.substr(kWhiteoutPrefix.size());
        if (target.empty() || target == "." || target == "..") {
          return refuse(name.path, "is a whiteout of nothing");
        }
        std::string p = parent_of(name.path);
        whiteouts_.insert(p.empty() ? target : p + "/" + target);
      }
      return skip(in);
    }

    auto type = archive_entry_filetype(e);
    const char* link = archive_entry_hardlink(e);
    if (link == nullptr && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      ++stats_.skipped;  // character/block devices, fifos, sockets
      return skip(in);
    }
    if (Status s = check_parents(name.path, name.path); !s.ok()) return s;
    if (link != nullptr) {
      CleanName target = clean_name(link);
      if (target.bad || target.path.empty()) {
        return refuse(name.path, "is a hardlink to \"" + std::string(link).substr(0, 300) +
                                     "\", outside the layer");
      }
      if (Status s = check_parents(target.path, name.path); !s.ok()) return s;
      struct stat st {};
      if (::lstat(target.path.c_str(), &st) != 0) {
        return refuse(name.path,
                      "is a hardlink to \"" + target.path + "\", which is not (yet) in the layer");
      }
      if (S_ISDIR(st.st_mode)) return refuse(name.path, "is a hardlink to a directory");
      archive_entry_set_hardlink(e, target.path.c_str());
    }
    if (type == AE_IFREG && archive_entry_size_is_set(e)) {
      auto size = static_cast<std::uint64_t>(std::max<la_int64_t>(0, archive_entry_size(e)));
      if (size > limits_.max_bytes || stats_.bytes + size > limits_.max_bytes) {
        return exhausted("expanded size", limits_.max_bytes);
      }
      std::uint64_t total = stats_.bytes + size;
      if (total > kRatioGrace && compressed_ > 0 && total / limits_.max_ratio > compressed_) {
        return exhausted("expansion ratio", limits_.max_ratio);
      }
    }
    filter_xattrs(e);
    forget(name.path);
    archive_entry_set_pathname(e, name.path.c_str());
    archive_entry_acl_clear(e);

    int r = archive_write_header(out, e);
    if (r < ARCHIVE_WARN) return fail(out, "cannot extract \"" + name.path.substr(0, 300) + "\"");
    if (archive_entry_size(e) > 0 && link == nullptr) {
      const void* buf = nullptr;
      std::size_t len = 0;
      la_int64_t off = 0;
      for (;;) {
        r = archive_read_data_block(in, &buf, &len, &off);
        if (r == ARCHIVE_EOF) break;
        if (r < ARCHIVE_WARN)
          return fail(in, "corrupt data in \"" + name.path.substr(0, 300) + "\"");
        if (archive_write_data_block(out, buf, len, off) < ARCHIVE_WARN) {
          return fail(out, "cannot write \"" + name.path.substr(0, 300) + "\"");
        }
        stats_.bytes += len;
        if (stats_.bytes > limits_.max_bytes) return exhausted("expanded size", limits_.max_bytes);
        if (Status s = check_stream(in); !s.ok()) return s;
      }
    }
    if (archive_write_finish_entry(out) < ARCHIVE_WARN) {
      return fail(out, "cannot finish \"" + name.path.substr(0, 300) + "\"");
    }
    return check_stream(in);
  }

  Status skip(archive* in) {
    // Reads (and counts) the entry's data through the decompressor without writing it.
    if (archive_read_data_skip(in) < ARCHIVE_WARN) return fail(in, "corrupt archive");
    return check_stream(in);
  }

  static void filter_xattrs(archive_entry* e) {
    if (archive_entry_xattr_reset(e) == 0) return;
    std::vector<std::pair<std::string, std::string>> keep;
    const char* n = nullptr;
    const void* v = nullptr;
    std::size_t len = 0;
    while (archive_entry_xattr_next(e, &n, &v, &len) == ARCHIVE_OK) {
      if (n != nullptr && keep_xattr(n)) {
        keep.emplace_back(n, std::string(static_cast<const char*>(v), len));
      }
    }
    archive_entry_xattr_clear(e);
    for (const auto& [k, val] : keep)
      archive_entry_xattr_add_entry(e, k.c_str(), val.data(), val.size());
  }

  // Opens (creating as 0755 root-owned directories where missing) `rel` below the cwd, one
  // component at a time with O_NOFOLLOW: whiteouts are written through directory fds only.
  Result<UniqueFd> open_dir(const std::string& rel) {
    UniqueFd fd(::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return errno_error("open", "layer root", errno);
    std::size_t i = 0;
    while (i < rel.size()) {
      std::size_t j = rel.find('/', i);
      if (j == std::string::npos) j = rel.size();
      std::string comp = rel.substr(i, j - i);
      if (::mkdirat(fd.get(), comp.c_str(), 0755) != 0 && errno != EEXIST) {
        return errno_error("mkdir", rel, errno);
      }
      UniqueFd next(
          ::openat(fd.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next) {
        if (errno == ELOOP || errno == ENOTDIR) {
          return refuse(rel, "(a whiteout's directory) is not a directory in the layer");
        }
        return errno_error("open", rel, errno);
      }
      fd = std::move(next);
      i = j + 1;
    }
    return fd;
  }

  Status finish_whiteouts() {
    for (const std::string& w : whiteouts_) {
      auto dir = open_dir(parent_of(w));
      if (!dir.ok()) return dir.error();
      std::string name = base_of(w);
      struct stat st {};
      if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
      // The overlayfs whiteout format: a character device 0:0 (this is the file the lint's
      // mknod exception is for; devices from the archive itself are skipped above).
      if (::mknodat(dir->get(), name.c_str(), S_IFCHR | 0, makedev(0, 0)) != 0) {
        return errno_error("whiteout (mknod 0:0)", "layer " + layer_ + ": " + w, errno);
      }
      ++stats_.whiteouts;
    }
    for (const std::string& d : opaque_) {
      auto dir = open_dir(d);
      if (!dir.ok()) return dir.error();
      if (::fsetxattr(dir->get(), "trusted.overlay.opaque", "y", 1, 0) != 0) {
        return errno_error("opaque whiteout (setxattr trusted.overlay.opaque)",
                           "layer " + layer_ + ": " + (d.empty() ? "/" : d), errno);
      }
      ++stats_.whiteouts;
    }
    return {};
  }

  LayerLimits limits_;
  std::string layer_;
  archive* writer_ = nullptr;  // the disk writer of run(), whose errno is the system's
  std::uint64_t compressed_ = 0;
  ExtractStats stats_;
  std::set<std::string> whiteouts_;  // layer-relative paths to hide
  std::set<std::string> opaque_;     // layer-relative directories ("" = root)
  std::set<std::string> real_dirs_;  // checked by check_parents: real directories
};

// On the calling thread, which must be one of its own (see the file comment): unshares the
// filesystem context, moves into `dir` and runs the extraction.
Result<ExtractStats> extract_here(int dir, const std::string& dest, const LayerLimits& limits,
                                  std::uint64_t compressed, std::string_view layer,
                                  const std::function<int(archive*)>& open) {
  if (::unshare(CLONE_FS) != 0) return errno_error("unshare(CLONE_FS) for", dest, errno);
  if (::fchdir(dir) != 0) return errno_error("chdir", dest, errno);
  ::umask(022);
  LayerLimits lim = limits;
  if (lim.max_ratio == 0) lim.max_ratio = 1;
  Extractor x(compressed, lim, layer);
  return x.run(open);
}

}  // namespace

Result<ExtractStats> extract_layer(const std::string& blob_path, const std::string& dest,
                                   const LayerLimits& limits, std::string_view layer) {
  UniqueFd dir(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return errno_error("open", dest, errno);
  struct stat st {};
  if (::stat(blob_path.c_str(), &st) != 0) return errno_error("stat", blob_path, errno);
  Result<ExtractStats> result = internal_error("layer extraction did not run");
  std::thread t([&] {
    result = extract_here(
        dir.get(), dest, limits, static_cast<std::uint64_t>(st.st_size), layer,
        [&](archive* in) { return archive_read_open_filename(in, blob_path.c_str(), 1 << 16); });
  });
  t.join();
  return result;
}

// ---------------------------------------------------------------------------------------------
// LayerStream

LayerStream::LayerStream() : result_(internal_error("layer extraction did not run")) {}

Result<std::unique_ptr<LayerStream>> LayerStream::start(const std::string& dest,
                                                        std::uint64_t compressed_size,
                                                        const LayerLimits& limits,
                                                        std::string_view layer) {
  std::unique_ptr<LayerStream> s(new LayerStream());
  s->dir_.reset(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!s->dir_) return errno_error("open", dest, errno);
  LayerStream* self = s.get();
  s->thread_ = std::thread([self, dest, compressed_size, limits, layer = std::string(layer)] {
    auto r =
        extract_here(self->dir_.get(), dest, limits, compressed_size, layer, [self](archive* in) {
          return archive_read_open(in, self, nullptr, &LayerStream::read, nullptr);
        });
    std::lock_guard l(self->mu_);
    self->result_ = std::move(r);
    self->ended_ = true;
    self->cv_.notify_all();
  });
  return s;
}

LayerStream::~LayerStream() {
  if (thread_.joinable()) (void)finish(false);
}

la_ssize_t LayerStream::read(archive* a, void* client, const void** buf) {
  auto* self = static_cast<LayerStream*>(client);
  std::unique_lock l(self->mu_);
  self->cv_.wait(l, [&] { return !self->queue_.empty() || self->closed_; });
  if (self->abandoned_) {
    archive_set_error(a, ECANCELED, "the layer's download was abandoned");
    return ARCHIVE_FATAL;
  }
  if (self->queue_.empty()) return 0;  // the whole blob was read
  self->current_ = std::move(self->queue_.front());
  self->queue_.pop_front();
  self->queued_ -= self->current_.size();
  self->cv_.notify_all();
  *buf = self->current_.data();
  return static_cast<la_ssize_t>(self->current_.size());
}

void LayerStream::feed(std::string_view piece) {
  if (piece.empty()) return;
  std::unique_lock l(mu_);
  cv_.wait(l, [&] { return queued_ < kMaxQueued || ended_; });
  // An extraction that ended (the tar's end, or an error) reads nothing more.
  if (ended_ || closed_) return;
  queue_.emplace_back(piece);
  queued_ += piece.size();
  cv_.notify_all();
}

Result<ExtractStats> LayerStream::finish(bool complete) {
  {
    std::lock_guard l(mu_);
    closed_ = true;
    abandoned_ = !complete;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  return result_;
}

}  // namespace abx::image
