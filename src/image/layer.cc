// Layer tarballs: libarchive writes the tar into a sink that hashes it (diff_id) and gzips it
// with zlib, hashing the compressed bytes (the blob digest) on their way to the file.
#include "abx/image/layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/image/digest.h"

namespace abx::image {

namespace {

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// Where libarchive's bytes go: hash, gzip, hash again, write.
struct Sink {
  int fd = -1;
  Sha256 raw;
  Sha256 gz;
  z_stream z{};
  std::int64_t size = 0;
  std::string error;
  std::vector<unsigned char> buf = std::vector<unsigned char>(64 * 1024);

  bool init() {
    // windowBits 15 + 16: a gzip wrapper; the header's mtime stays 0 (deterministic output).
    return deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK;
  }
  bool write_all(const unsigned char* p, std::size_t n) {
    gz.update(std::string_view(reinterpret_cast<const char*>(p), n));
    size += static_cast<std::int64_t>(n);
    if (int err = os::write_all_errno(fd, std::string_view(reinterpret_cast<const char*>(p), n));
        err != 0) {
      error = errno_text("write layer", err);
      return false;
    }
    return true;
  }
  bool deflate_some(const void* data, std::size_t n, int flush) {
    z.next_in = static_cast<Bytef*>(const_cast<void*>(data));
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      int rc = deflate(&z, flush);
      if (rc == Z_STREAM_ERROR) {
        error = "gzip failed";
        return false;
      }
      if (!write_all(buf.data(), buf.size() - z.avail_out)) return false;
    } while (z.avail_out == 0);
    return true;
  }
  ~Sink() { deflateEnd(&z); }
};

struct ArchiveDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryDeleter {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

class Walker {
 public:
  Walker(struct archive* a, const LayerWriteOptions& opt) : a_(a), opt_(opt) {}

  // The whole tree: the prefix's directories, then what is in `host`.
  Status tree(const std::string& host) {
    std::string acc;
    for (std::size_t start = 0; start < opt_.prefix.size();) {  // "opt", then "opt/abx"
      std::size_t slash = opt_.prefix.find('/', start);
      if (slash == std::string::npos) slash = opt_.prefix.size();
      acc = opt_.prefix.substr(0, slash);
      start = slash + 1;
      std::unique_ptr<archive_entry, EntryDeleter> e(archive_entry_new());
      archive_entry_set_pathname(e.get(), acc.c_str());
      archive_entry_set_mode(e.get(), S_IFDIR | 0755);
      archive_entry_set_uid(e.get(), 0);
      archive_entry_set_gid(e.get(), 0);
      archive_entry_set_mtime(e.get(), 0, 0);
      ABX_TRY(header(e.get(), acc + "/"));
    }
    return dir(host, "");
  }

 private:
  Status dir(const std::string& host, const std::string& rel) {
    std::vector<std::string> names;
    {
      DIR* d = ::opendir(host.c_str());
      if (!d) return internal_error(errno_text("open " + host, errno));
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(std::move(n));
      }
      ::closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names) ABX_TRY(entry(host + "/" + n, rel.empty() ? n : rel + "/" + n));
    return {};
  }

  // The entry's name in the archive: `rel` (relative to the directory) under the prefix.
  std::string archive_name(const std::string& rel) const {
    return opt_.prefix.empty() ? rel : opt_.prefix + "/" + rel;
  }
  // True if `host` (at `rel`) is a skip_if_empty path holding nothing but other such paths.
  bool skippable(const std::string& host, const std::string& rel, const struct stat& st) const {
    if (!opt_.skip_if_empty.count(rel)) return false;
    if (S_ISREG(st.st_mode)) return st.st_size == 0;
    if (!S_ISDIR(st.st_mode)) return false;
    DIR* d = ::opendir(host.c_str());
    if (!d) return false;
    bool empty = true;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      struct stat cst;
      std::string ch = host + "/" + n;
      if (::lstat(ch.c_str(), &cst) != 0 || !skippable(ch, rel + "/" + n, cst)) {
        empty = false;
        break;
      }
    }
    ::closedir(d);
    return empty;
  }

  Status header(archive_entry* e, const std::string& what) {
    if (archive_write_header(a_, e) != ARCHIVE_OK) {
      return internal_error("tar " + what + ": " + archive_error_string(a_));
    }
    return {};
  }

  Status whiteout(const std::string& rel_dir, const std::string& name, const struct stat& st) {
    std::unique_ptr<archive_entry, EntryDeleter> e(archive_entry_new());
    std::string path = archive_name(rel_dir.empty() ? name : rel_dir + "/" + name);
    archive_entry_set_pathname(e.get(), path.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0644);
    archive_entry_set_size(e.get(), 0);
    archive_entry_set_mtime(e.get(), opt_.reproducible ? 0 : st.st_mtim.tv_sec, 0);
    return header(e.get(), path);
  }

  Status entry(const std::string& host, const std::string& rel) {
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) return internal_error(errno_text("stat " + host, errno));
    if (skippable(host, rel, st)) return {};
    const auto slash = rel.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash);
    const std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode) ||
        S_ISSOCK(st.st_mode)) {
      if (opt_.overlay_upper && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
        return whiteout(parent, ".wh." + base, st);
      }
      return {};  // device nodes, fifos and sockets never go into a layer
    }
    std::unique_ptr<archive_entry, EntryDeleter> e(archive_entry_new());
    archive_entry_copy_stat(e.get(), &st);
    const std::string path = archive_name(rel);
    archive_entry_set_pathname(e.get(), path.c_str());
    if (opt_.reproducible) {
      archive_entry_set_uid(e.get(), 0);
      archive_entry_set_gid(e.get(), 0);
      archive_entry_set_mtime(e.get(), 0, 0);
    }
    archive_entry_set_uname(e.get(), "");
    archive_entry_set_gname(e.get(), "");
    archive_entry_set_ino(e.get(), 0);
    archive_entry_set_dev(e.get(), 0);
    archive_entry_set_nlink(e.get(), 1);
    archive_entry_unset_atime(e.get());
    archive_entry_unset_ctime(e.get());
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
      ssize_t n = ::readlink(host.c_str(), target.data(), target.size());
      if (n < 0) return internal_error(errno_text("readlink " + host, errno));
      target.resize(static_cast<std::size_t>(n));
      archive_entry_set_symlink(e.get(), target.c_str());
      return header(e.get(), path);
    }
    if (S_ISDIR(st.st_mode)) {
      ABX_TRY(header(e.get(), path + "/"));
      if (opt_.overlay_upper) {
        char v[4] = {};
        ssize_t n = ::lgetxattr(host.c_str(), "trusted.overlay.opaque", v, sizeof(v));
        if (n == 1 && v[0] == 'y') ABX_TRY(whiteout(rel, ".wh..wh..opq", st));
      }
      return dir(host, rel);
    }
    if (!S_ISREG(st.st_mode)) return {};
    if (st.st_nlink > 1) {
      auto key = std::make_pair(st.st_dev, st.st_ino);
      auto it = links_.find(key);
      if (it != links_.end()) {
        archive_entry_set_size(e.get(), 0);
        archive_entry_set_hardlink(e.get(), it->second.c_str());
        return header(e.get(), path);
      }
      links_.emplace(key, path);
    }
    UniqueFd fd(::open(host.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return internal_error(errno_text("open " + host, errno));
    ABX_TRY(header(e.get(), path));
    std::vector<char> buf(64 * 1024);
    std::int64_t left = st.st_size;
    while (left > 0) {
      ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf.data(), buf.size()); });
      if (n < 0) return internal_error(errno_text("read " + host, errno));
      if (n == 0) return internal_error(host + " shrank while it was being archived");
      n = std::min<ssize_t>(n, static_cast<ssize_t>(left));
      if (archive_write_data(a_, buf.data(), static_cast<std::size_t>(n)) != n) {
        return internal_error("tar " + path + ": " + archive_error_string(a_));
      }
      left -= n;
    }
    return {};
  }

  struct archive* a_;
  const LayerWriteOptions& opt_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;
};

}  // namespace

Result<LayerBlob> write_layer_to(const std::string& dir, int out,
                                 const LayerWriteOptions& options) {
  Sink sink;
  sink.fd = out;
  if (!sink.init()) return internal_error("gzip init failed");
  // write_tar's stream, hashed as it is (the diff id) and gzipped to `out` (the digest).
  Status tarred = write_tar(
      dir,
      [&sink](std::string_view data) -> Status {
        sink.raw.update(data);
        if (!sink.deflate_some(data.data(), data.size(), Z_NO_FLUSH))
          return internal_error(sink.error);
        return {};
      },
      options);
  if (!tarred.ok()) return sink.error.empty() ? tarred.error() : internal_error(sink.error);
  if (!sink.deflate_some(nullptr, 0, Z_FINISH)) return internal_error(sink.error);
  LayerBlob b;
  b.diff_id = sink.raw.finish();
  b.digest = sink.gz.finish();
  b.size = sink.size;
  return b;
}

Status write_tar(const std::string& dir, const std::function<Status(std::string_view)>& out,
                 const LayerWriteOptions& options) {
  struct Out {
    const std::function<Status(std::string_view)>* write;
    std::string error;
  } o{&out, {}};
  auto to_out = [](struct archive* a, void* client, const void* data, size_t n) -> la_ssize_t {
    auto* sink = static_cast<Out*>(client);
    Status s = (*sink->write)(std::string_view(static_cast<const char*>(data), n));
    if (!s.ok()) {
      sink->error = s.error().message();
      archive_set_error(a, EIO, "%s", sink->error.c_str());
      return -1;
    }
    return static_cast<la_ssize_t>(n);
  };
  std::unique_ptr<struct archive, ArchiveDeleter> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open2(a.get(), &o, nullptr, to_out, nullptr, nullptr) != ARCHIVE_OK) {
    return internal_error(std::string("tar: ") + archive_error_string(a.get()));
  }
  Walker w(a.get(), options);
  ABX_TRY(w.tree(dir));
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return internal_error(o.error.empty() ? std::string("tar: ") + archive_error_string(a.get())
                                          : o.error);
  }
  return {};
}

}  // namespace abx::image
