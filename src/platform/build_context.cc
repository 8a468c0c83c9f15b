#include "build_context.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "abx/base/fd.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/image/digest.h"
#include "abx/image/dockerignore.h"

namespace abx::platform::build {

namespace fs = std::filesystem;

namespace {

struct ReadDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct WriteDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};

std::string errno_msg(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

bool safe_relative(std::string_view p, std::string& out) {
  out.clear();
  if (p.starts_with('/')) return false;
  std::size_t i = 0;
  while (i <= p.size()) {
    std::size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string_view c = p.substr(i, j - i);
    i = j + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") return false;
    if (!out.empty()) out += '/';
    out.append(c);
  }
  return true;
}

namespace {

std::unique_ptr<struct archive, ReadDeleter> open_reader(const std::string& path) {
  std::unique_ptr<struct archive, ReadDeleter> a(archive_read_new());
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 64 * 1024) != ARCHIVE_OK) return nullptr;
  return a;
}

Status hash_tree(image::Sha256& h, const fs::path& p, const std::string& rel) {
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0) return internal_error(errno_msg("stat " + p.string()));
  h.update(rel);
  h.update(std::string(1, '\0') + std::to_string(st.st_mode) + '\0');
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    h.update(fs::read_symlink(p, ec).string());
  } else if (S_ISREG(st.st_mode)) {
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return internal_error(errno_msg("open " + p.string()));
    std::string buf(64 * 1024, '\0');
    for (;;) {
      ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf.data(), buf.size()); });
      if (n < 0) return internal_error(errno_msg("read " + p.string()));
      if (n == 0) break;
      h.update(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    }
  } else if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(p, ec)) names.push_back(e.path().filename());
    if (ec) return internal_error("list " + p.string() + ": " + ec.message());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) ABX_TRY(hash_tree(h, p / n, rel + "/" + n));
  }
  h.update(std::string(1, '\n'));
  return {};
}

Status set_meta(const fs::path& p, const struct stat& st, std::uint32_t uid, std::uint32_t gid) {
  if (uid == kKeepOwner) {
    uid = st.st_uid;
    gid = st.st_gid;
  }
  if (::lchown(p.c_str(), uid, gid) != 0) return internal_error(errno_msg("chown " + p.string()));
  if (!S_ISLNK(st.st_mode) && ::chmod(p.c_str(), st.st_mode & 07777) != 0)
    return internal_error(errno_msg("chmod " + p.string()));
  struct timespec ts[2] = {st.st_mtim, st.st_mtim};
  if (::utimensat(AT_FDCWD, p.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
    return internal_error(errno_msg("utimensat " + p.string()));
  return {};
}

// Creates `dir` and its missing parents under `stage` (mode 0755, mtime 0, root-owned).
Status make_parents(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return {};
  ABX_TRY(make_parents(dir.parent_path()));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return internal_error(errno_msg("mkdir " + dir.string()));
  struct timespec ts[2] = {{0, 0}, {0, 0}};
  ::utimensat(AT_FDCWD, dir.c_str(), ts, AT_SYMLINK_NOFOLLOW);
  return {};
}

Status copy_entry(const fs::path& src, const fs::path& dst, std::uint32_t uid, std::uint32_t gid) {
  struct stat st;
  if (::lstat(src.c_str(), &st) != 0) return internal_error(errno_msg("stat " + src.string()));
  std::error_code ec;
  if (S_ISDIR(st.st_mode)) {
    if (!fs::is_directory(dst, ec)) {
      fs::remove(dst, ec);
      if (::mkdir(dst.c_str(), 0755) != 0)
        return internal_error(errno_msg("mkdir " + dst.string()));
    }
    for (const auto& e : fs::directory_iterator(src, ec))
      ABX_TRY(copy_entry(e.path(), dst / e.path().filename(), uid, gid));
    if (ec) return internal_error("list " + src.string() + ": " + ec.message());
    return set_meta(dst, st, uid, gid);
  }
  if (fs::is_directory(fs::symlink_status(dst, ec))) fs::remove_all(dst, ec);
  fs::remove(dst, ec);
  if (S_ISLNK(st.st_mode)) {
    fs::copy_symlink(src, dst, ec);
    if (ec) return internal_error("copy " + src.string() + ": " + ec.message());
  } else if (S_ISREG(st.st_mode)) {
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    if (ec) return internal_error("copy " + src.string() + ": " + ec.message());
  } else {
    return {};  // devices, fifos, sockets: never copied
  }
  return set_meta(dst, st, uid, gid);
}

bool opaque_dir(const fs::path& p) {
  char v[2] = {};
  return ::lgetxattr(p.c_str(), "trusted.overlay.opaque", v, sizeof v) == 1 && v[0] == 'y';
}

// One layer directory in overlayfs form (whiteouts are 0:0 character devices, opaque
// directories carry trusted.overlay.opaque=y) applied onto `dest`.
Status apply_layer(const fs::path& layer, const fs::path& dest) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(layer, ec)) entries.push_back(e.path());
  if (ec) return internal_error("list " + layer.string() + ": " + ec.message());
  for (const auto& src : entries) {
    const fs::path dst = dest / src.filename();
    struct stat st;
    if (::lstat(src.c_str(), &st) != 0) return internal_error(errno_msg("stat " + src.string()));
    struct stat dt;
    bool exists = ::lstat(dst.c_str(), &dt) == 0;
    if (S_ISCHR(st.st_mode) && st.st_rdev == 0) {  // a whiteout: the lower entry is gone
      fs::remove_all(dst, ec);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      if (exists && (!S_ISDIR(dt.st_mode) || opaque_dir(src))) {
        fs::remove_all(dst, ec);
        exists = false;
      }
      if (!exists && ::mkdir(dst.c_str(), 0700) != 0)
        return internal_error(errno_msg("mkdir " + dst.string()));
      ABX_TRY(apply_layer(src, dst));
      ABX_TRY(set_meta(dst, st, kKeepOwner, kKeepOwner));
      continue;
    }
    if (exists) fs::remove_all(dst, ec);
    if (S_ISREG(st.st_mode)) {
      // A hard link to the store's file (only read from here); a copy across filesystems.
      if (::link(src.c_str(), dst.c_str()) == 0) continue;
      fs::copy_file(src, dst, ec);
      if (ec) return internal_error("copy " + src.string() + ": " + ec.message());
      ABX_TRY(set_meta(dst, st, kKeepOwner, kKeepOwner));
    } else if (S_ISLNK(st.st_mode)) {
      fs::copy_symlink(src, dst, ec);
      if (ec) return internal_error("copy " + src.string() + ": " + ec.message());
      ABX_TRY(set_meta(dst, st, kKeepOwner, kKeepOwner));
    }  // devices, fifos, sockets: left out
  }
  return {};
}

Status remove_ignored_in(const fs::path& dir, const std::string& rel,
                         const image::DockerIgnore& di) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  if (ec) return internal_error("list " + dir.string() + ": " + ec.message());
  for (const auto& n : names) {
    const fs::path p = dir / n;
    const std::string r = rel.empty() ? n : rel + "/" + n;
    const bool excluded = di.excluded(r);
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) return internal_error(errno_msg("stat " + p.string()));
    if (S_ISDIR(st.st_mode) && (!excluded || di.has_exceptions())) {
      // An excluded directory is walked only when an exception may re-include something in it.
      ABX_TRY(remove_ignored_in(p, r, di));
      if (!excluded || !fs::is_empty(p, ec)) continue;
    }
    if (excluded) {
      fs::remove_all(p, ec);
      if (ec) return internal_error("remove " + p.string() + ": " + ec.message());
    }
  }
  return {};
}

}  // namespace

Status remove_ignored(const std::string& root, const image::DockerIgnore& di) {
  if (di.empty()) return {};
  return remove_ignored_in(root, "", di);
}

Status flatten_layers(const std::vector<std::string>& layers, const std::string& dest) {
  for (const auto& l : layers) ABX_TRY(apply_layer(l, dest));
  return {};
}

std::string clean_path(const std::string& path, const std::string& base) {
  const std::string joined = path.starts_with('/') ? path : base + "/" + path;
  return "/" + image::clean_relative_path(joined);
}

Status extract_archive(const std::string& archive, const std::string& dest,
                       const ArchiveLimits& limits) {
  auto in = open_reader(archive);
  if (!in) return invalid_argument("not a readable tar archive");
  std::error_code ec;
  const std::string root = fs::canonical(dest, ec).string();
  if (ec) return internal_error("extract into " + dest + ": " + ec.message());
  std::unique_ptr<struct archive, WriteDeleter> out(archive_write_disk_new());
  archive_write_disk_set_options(
      out.get(), ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                     ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_UNLINK);
  std::uint64_t entries = 0, bytes = 0;
  archive_entry* e = nullptr;
  for (;;) {
    int rc = archive_read_next_header(in.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      return invalid_argument(std::string("malformed archive: ") + archive_error_string(in.get()));
    }
    if (++entries > limits.max_entries) {
      return Error(ErrorCode::kResourceExhausted,
                   "archive has more than " + std::to_string(limits.max_entries) + " entries");
    }
    const char* name = archive_entry_pathname(e);
    std::string rel;
    if (!name || !safe_relative(name, rel)) {
      return invalid_argument(std::string("archive entry '") + (name ? name : "") +
                              "' would land outside the destination");
    }
    const auto type = archive_entry_filetype(e);
    const char* link = archive_entry_hardlink(e);  // hard links may carry no file type
    if (rel.empty() || (!link && !(type == AE_IFREG || type == AE_IFDIR || type == AE_IFLNK))) {
      continue;  // the root itself, devices, fifos, sockets
    }
    if (link) {
      std::string lrel;
      if (!safe_relative(link, lrel) || lrel.empty()) {
        return invalid_argument("archive entry '" + rel + "' links outside the destination");
      }
      archive_entry_set_hardlink(e, (root + "/" + lrel).c_str());
    }
    archive_entry_set_pathname(e, (root + "/" + rel).c_str());
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    if (archive_write_header(out.get(), e) != ARCHIVE_OK) {
      return invalid_argument("cannot extract '" + rel + "': " + archive_error_string(out.get()));
    }
    const void* buf = nullptr;
    std::size_t size = 0;
    la_int64_t offset = 0;
    while ((rc = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
      bytes += size;
      if (bytes > limits.max_bytes) {
        return Error(ErrorCode::kResourceExhausted,
                     "archive expands to more than " + std::to_string(limits.max_bytes) + " bytes");
      }
      if (archive_write_data_block(out.get(), buf, size, offset) != ARCHIVE_OK) {
        return internal_error("write '" + rel + "': " + archive_error_string(out.get()));
      }
    }
    if (rc != ARCHIVE_EOF) {
      return invalid_argument("malformed archive at '" + rel +
                              "': " + archive_error_string(in.get()));
    }
    if (archive_write_finish_entry(out.get()) != ARCHIVE_OK) {
      return internal_error("finish '" + rel + "': " + archive_error_string(out.get()));
    }
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) {
    return internal_error(std::string("extract: ") + archive_error_string(out.get()));
  }
  return {};
}

bool is_archive(const std::string& path) {
  auto a = open_reader(path);
  if (!a) return false;
  archive_entry* e = nullptr;
  return archive_read_next_header(a.get(), &e) == ARCHIVE_OK;
}

Result<std::string> resolve_in_root(const std::string& root, const std::string& rel) {
  // Components still to walk, front first; `cur` is the resolved part (relative to root).
  std::vector<std::string> todo;
  auto push_path = [&todo](const std::string& p) {
    std::vector<std::string> parts;
    std::size_t i = 0;
    while (i <= p.size()) {
      std::size_t j = p.find('/', i);
      if (j == std::string::npos) j = p.size();
      std::string c = p.substr(i, j - i);
      i = j + 1;
      if (!c.empty() && c != ".") parts.push_back(std::move(c));
    }
    todo.insert(todo.begin(), parts.begin(), parts.end());
  };
  push_path(rel);
  std::vector<std::string> cur;
  int links = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.erase(todo.begin());
    if (c == "..") {
      if (!cur.empty()) cur.pop_back();
      continue;
    }
    std::string host = root;
    for (const auto& p : cur) host += "/" + p;
    host += "/" + c;
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) return not_found(rel + " is not in the build context");
    if (S_ISLNK(st.st_mode)) {
      if (++links > 40) return invalid_argument(rel + ": too many levels of symbolic links");
      std::error_code ec;
      std::string target = fs::read_symlink(host, ec).string();
      if (ec) return internal_error("readlink " + host + ": " + ec.message());
      if (target.starts_with('/')) cur.clear();
      push_path(target);
      continue;
    }
    if (!todo.empty() && !S_ISDIR(st.st_mode)) {
      return not_found(rel + " is not in the build context");
    }
    cur.push_back(std::move(c));
  }
  std::string out = root;
  for (const auto& p : cur) out += "/" + p;
  return out;
}

Result<std::vector<std::string>> expand_source(const std::string& root, const std::string& src) {
  if (src.find_first_of("*?[") == std::string::npos) return std::vector<std::string>{src};
  std::string rel;
  if (!safe_relative(src.starts_with('/') ? src.substr(1) : src, rel) || rel.empty()) {
    return invalid_argument("source pattern " + src + " leaves the build context");
  }
  glob_t g{};
  const std::string pattern = root + "/" + rel;
  int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) {
      std::string p = g.gl_pathv[i];
      if (p.size() > root.size() + 1 && p.compare(0, root.size() + 1, root + "/") == 0) {
        out.push_back(p.substr(root.size() + 1));
      }
    }
  }
  ::globfree(&g);
  if (out.empty()) return not_found("no file in the build context matches " + src);
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> content_digest(const std::vector<std::string>& paths) {
  image::Sha256 h;
  for (const auto& p : paths) ABX_TRY(hash_tree(h, p, ""));
  return h.finish();
}

Status copy_into(const std::string& src, const std::string& stage, const std::string& dest,
                 bool dest_is_dir, std::uint32_t uid, std::uint32_t gid) {
  struct stat st;
  if (::lstat(src.c_str(), &st) != 0) return internal_error(errno_msg("stat " + src));
  const fs::path target = fs::path(stage).concat(clean_path(dest));
  if (S_ISDIR(st.st_mode)) {
    ABX_TRY(make_parents(target));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(src, ec))
      ABX_TRY(copy_entry(e.path(), target / e.path().filename(), uid, gid));
    if (ec) return internal_error("list " + src + ": " + ec.message());
    return {};
  }
  fs::path file = dest_is_dir ? target / fs::path(src).filename() : target;
  ABX_TRY(make_parents(file.parent_path()));
  return copy_entry(src, file, uid, gid);
}

Status reset_parent_times(const std::string& stage, const std::string& dest) {
  // Creating entries in a directory touches its mtime: put the parents make_parents created
  // back to 0, so that the same COPY makes the same layer.
  fs::path p = fs::path(stage).concat(clean_path(dest));
  const fs::path root(stage);
  struct timespec ts[2] = {{0, 0}, {0, 0}};
  for (; p != root && p.has_relative_path(); p = p.parent_path()) {
    struct stat st;
    if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      ::utimensat(AT_FDCWD, p.c_str(), ts, AT_SYMLINK_NOFOLLOW);
    }
  }
  return {};
}

Status make_dir(const std::string& stage, const std::string& dest) {
  return make_parents(fs::path(stage).concat(clean_path(dest)));
}

Status chown_tree(const std::string& path, std::uint32_t uid, std::uint32_t gid) {
  std::error_code ec;
  if (::lchown(path.c_str(), uid, gid) != 0) return internal_error(errno_msg("chown " + path));
  if (!fs::is_directory(fs::symlink_status(path, ec))) return {};
  for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
    if (::lchown(e.path().c_str(), uid, gid) != 0)
      return internal_error(errno_msg("chown " + e.path().string()));
  }
  return {};
}

Result<std::pair<std::uint32_t, std::uint32_t>> parse_chown(const std::string& spec) {
  auto num = [](std::string_view s, std::uint32_t& out) {
    if (s.empty() || s.size() > 10) return false;
    std::uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (v > 0xfffffffeu) return false;
    out = static_cast<std::uint32_t>(v);
    return true;
  };
  std::uint32_t uid = 0, gid = 0;
  auto colon = spec.find(':');
  std::string_view u = std::string_view(spec).substr(0, colon);
  if (!num(u, uid)) {
    return invalid_argument("--chown=" + spec + ": only numeric uid[:gid] is supported");
  }
  gid = uid;
  if (colon != std::string::npos && !num(std::string_view(spec).substr(colon + 1), gid)) {
    return invalid_argument("--chown=" + spec + ": only numeric uid[:gid] is supported");
  }
  return std::make_pair(uid, gid);
}

}  // namespace abx::platform::build
