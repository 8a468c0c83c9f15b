#include "abx/runtime/confined_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <utility>

#include "abx/base/os.h"
#include "abx/base/scope_exit.h"
#include "abx/base/try.h"

namespace abx::runtime {

namespace {

constexpr std::size_t kMaxPathBytes = 4096;
constexpr int kMaxRemoveDepth = 64;
constexpr int kMaxListDepth = 16;
constexpr std::size_t kCopyChunk = 1 << 16;

std::int64_t ms_of(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
}

// Errors of an operation on the tree: the path (from its root) and the errno's canonical code;
// ENOTDIR and ELOOP (a component that is not a directory) are not_found, as a missing one is,
// EXDEV (RESOLVE_NO_XDEV: a mount point inside the tree) is permission_denied.
Error tree_error(std::string_view what, const std::string& path, int err) {
  ErrorCode code = os::code_for_errno(err);
  if (err == ENOTDIR || err == ELOOP) code = ErrorCode::kNotFound;
  if (err == EXDEV) code = ErrorCode::kPermissionDenied;
  if (err == EISDIR || err == ENOTEMPTY) code = ErrorCode::kInvalidArgument;
  return Error(code, std::string(what) + " " + path + ": " + os::errno_name(err));
}

// Closes a DIR* (which owns its descriptor).
struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

Result<DirPtr> open_dir_stream(int dir_fd, const std::string& path) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return tree_error("open directory", path, errno);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int e = errno;
    ::close(fd);
    return tree_error("open directory", path, e);
  }
  return DirPtr(d);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

}  // namespace

std::string_view tree_entry_type_name(TreeEntry::Type t) {
  switch (t) {
    case TreeEntry::Type::kFile:
      return "file";
    case TreeEntry::Type::kDirectory:
      return "directory";
    case TreeEntry::Type::kSymlink:
      return "symlink";
    case TreeEntry::Type::kUnknown:
      break;
  }
  return "unknown";
}

Result<std::string> normalize_tree_path(std::string_view path) {
  if (path.size() > kMaxPathBytes)
    return invalid_argument("path over " + std::to_string(kMaxPathBytes) + " bytes");
  if (std::any_of(path.begin(), path.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
    return invalid_argument("path has a control character");
  std::string out;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "..")
      return invalid_argument("path '" + std::string(path.substr(0, 256)) +
                              "' must not have .. components");
    if (!part.empty() && part != ".") (out += '/') += part;
    start = end + 1;
  }
  return out.empty() ? std::string("/") : out;
}

Result<ConfinedTree> ConfinedTree::open(const std::string& root, TreeOwner default_owner) {
  int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return os::errno_error("open " + root, errno);
  return ConfinedTree(UniqueFd(fd), default_owner);
}

Result<UniqueFd> ConfinedTree::resolve(const std::string& norm, int flags) const {
  const std::string rel = norm == "/" ? std::string(".") : norm.substr(1);
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  const long fd = os::retry_eintr(
      [&] { return ::syscall(SYS_openat2, root_.get(), rel.c_str(), &how, sizeof how); });
  if (fd < 0) return tree_error("open", norm, errno);
  return UniqueFd(static_cast<int>(fd));
}

Result<std::pair<UniqueFd, std::string>> ConfinedTree::parent_of(const std::string& norm) const {
  if (norm == "/") return invalid_argument("the volume's root has no parent");
  const auto slash = norm.rfind('/');
  const std::string parent = slash == 0 ? std::string("/") : norm.substr(0, slash);
  ABX_ASSIGN_OR_RETURN(UniqueFd dir, resolve(parent, O_PATH | O_DIRECTORY));
  return std::pair{std::move(dir), norm.substr(slash + 1)};
}

Result<TreeEntry> ConfinedTree::stat_at(int dir, const std::string& name,
                                        const std::string& norm) const {
  struct stat st {};
  const int rc =
      name.empty() ? ::fstat(dir, &st) : ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
  if (rc != 0) return tree_error("stat", norm, errno);
  TreeEntry e;
  e.name = name;
  e.path = norm;
  e.type = S_ISREG(st.st_mode)   ? TreeEntry::Type::kFile
           : S_ISDIR(st.st_mode) ? TreeEntry::Type::kDirectory
           : S_ISLNK(st.st_mode) ? TreeEntry::Type::kSymlink
                                 : TreeEntry::Type::kUnknown;
  e.size = st.st_size;
  e.mode = st.st_mode & 07777;
  e.uid = st.st_uid;
  e.gid = st.st_gid;
  e.atime_ms = ms_of(st.st_atim);
  e.mtime_ms = ms_of(st.st_mtim);
  e.ctime_ms = ms_of(st.st_ctim);
  if (e.type == TreeEntry::Type::kSymlink && !name.empty()) {
    std::string buf(4096, '\0');
    const ssize_t n = ::readlinkat(dir, name.c_str(), buf.data(), buf.size());
    if (n >= 0) e.target = buf.substr(0, static_cast<std::size_t>(n));
  }
  return e;
}

Result<TreeEntry> ConfinedTree::stat(std::string_view path) const {
  ABX_ASSIGN_OR_RETURN(std::string norm, normalize_tree_path(path));
  if (norm == "/") return stat_at(root_.get(), "", norm);
  ABX_ASSIGN_OR_RETURN(auto parent, parent_of(norm));
  return stat_at(parent.first.get(), parent.second, norm);
}

Result<std::vector<TreeEntry>> ConfinedTree::list(std::string_view path, int depth,
                                                  std::size_t max_entries) const {
  ABX_ASSIGN_OR_RETURN(std::string norm, normalize_tree_path(path));
  if (depth < 1 || depth > kMaxListDepth)
    return invalid_argument("depth must be between 1 and " + std::to_string(kMaxListDepth));
  ABX_ASSIGN_OR_RETURN(UniqueFd dir, resolve(norm, O_RDONLY | O_DIRECTORY));
  std::vector<TreeEntry> out;
  std::function<Status(int, const std::string&, int)> walk = [&](int fd, const std::string& at,
                                                                 int level) -> Status {
    ABX_ASSIGN_OR_RETURN(DirPtr d, open_dir_stream(fd, at));
    std::vector<std::string> names;
    while (dirent* de = ::readdir(d.get())) {
      const std::string name = de->d_name;
      if (name == "." || name == "..") continue;
      names.push_back(name);
      if (out.size() + names.size() > max_entries)
        return Error(ErrorCode::kResourceExhausted,
                     "more than " + std::to_string(max_entries) + " entries under " + norm);
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      auto e = stat_at(fd, name, join(at, name));
      if (!e.ok()) {
        if (e.error().code() == ErrorCode::kNotFound) continue;  // gone meanwhile
        return e.error();
      }
      const bool descend = e->type == TreeEntry::Type::kDirectory && level < depth;
      out.push_back(std::move(*e));
      if (descend) {
        int sub = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) continue;  // replaced meanwhile (by a symlink, say): not entered
        UniqueFd owned(sub);
        ABX_TRY(walk(owned.get(), join(at, name), level + 1));
      }
    }
    return {};
  };
  ABX_TRY(walk(dir.get(), norm, 1));
  return out;
}

Result<TreeEntry> ConfinedTree::make_dir(std::string_view path, bool parents,
                                         const TreeMetadata& meta) const {
  ABX_ASSIGN_OR_RETURN(std::string norm, normalize_tree_path(path));
  // A normalized path starts with '/': one character is the root. (Not `norm == "/"`: GCC 12's
  // -O2 reads that comparison here as of an uninitialized string, -Wmaybe-uninitialized.)
  if (norm.size() == 1) {
    if (!parents) return Error(ErrorCode::kAlreadyExists, "/ exists");
    return stat(norm);
  }
  // Each missing directory from the top (parents), or only the last one.
  std::vector<std::string> todo{norm};
  if (parents) {
    todo.clear();
    for (std::size_t at = norm.find('/', 1); at != std::string::npos; at = norm.find('/', at + 1))
      todo.push_back(norm.substr(0, at));
    todo.push_back(norm);
  }
  for (const auto& p : todo) {
    ABX_ASSIGN_OR_RETURN(auto parent, parent_of(p));
    const std::uint32_t mode = meta.mode.value_or(0755) & 07777;
    if (::mkdirat(parent.first.get(), parent.second.c_str(), mode) != 0) {
      const int e = errno;
      if (e == EEXIST && parents) {
        ABX_ASSIGN_OR_RETURN(TreeEntry there, stat_at(parent.first.get(), parent.second, p));
        if (there.type == TreeEntry::Type::kDirectory) continue;
        if (there.type == TreeEntry::Type::kSymlink && p != norm) {
          // A symlink on the way: resolved in the tree, it must lead to a directory.
          if (resolve(p, O_PATH | O_DIRECTORY).ok()) continue;
        }
        return Error(ErrorCode::kAlreadyExists, p + " exists and is not a directory");
      }
      if (e == EEXIST) return Error(ErrorCode::kAlreadyExists, p + " exists");
      return tree_error("mkdir", p, e);
    }
    // Created here: its owner and the exact mode (mkdir's is under the umask), by descriptor
    // (O_NOFOLLOW: a sandbox that swapped it for a symlink meanwhile gets nothing changed).
    int made = ::openat(parent.first.get(), parent.second.c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (made < 0) return tree_error("open", p, errno);
    UniqueFd m(made);
    const std::uint32_t uid = meta.uid.value_or(owner_.uid), gid = meta.gid.value_or(owner_.gid);
    if (::fchown(m.get(), uid, gid) != 0) return tree_error("chown", p, errno);
    if (::fchmod(m.get(), mode) != 0) return tree_error("chmod", p, errno);
  }
  return stat(norm);
}

Result<std::string> ConfinedTree::read_file(std::string_view path, std::size_t max) const {
  ABX_ASSIGN_OR_RETURN(std::string norm, normalize_tree_path(path));
  // O_NONBLOCK: a FIFO in the tree must not block the open; it is refused below.
  ABX_ASSIGN_OR_RETURN(UniqueFd fd, resolve(norm, O_RDONLY | O_NONBLOCK));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return tree_error("stat", norm, errno);
  if (S_ISDIR(st.st_mode)) return invalid_argument(norm + " is a directory");
  if (!S_ISREG(st.st_mode)) return invalid_argument(norm + " is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > max)
    return Error(ErrorCode::kPayloadTooLarge,
                 norm + " is over " + std::to_string(max) +
                     " bytes (read it in a sandbox that mounts the volume)");
  return os::read_all(fd.get(), max, "read " + norm);
}

Result<TreeEntry> ConfinedTree::write_file(std::string_view path, int source, std::uint64_t max,
                                           bool parents, const TreeMetadata& meta) const {
  ABX_ASSIGN_OR_RETURN(std::string norm, normalize_tree_path(path));
  if (norm == "/") return invalid_argument("/ is the volume's root directory");
  if (parents) {
    const auto slash = norm.rfind('/');
    if (slash > 0) ABX_TRY(make_dir(norm.substr(0, slash), true, {}));
  }
  ABX_ASSIGN_OR_RETURN(auto parent, parent_of(norm));
  const int dir = parent.first.get();
  const std::string& name = parent.second;
  // An existing directory (not a symlink to one) stays: replacing it would drop its contents.
  if (auto there = stat_at(dir, name, norm);
      there.ok() && there->type == TreeEntry::Type::kDirectory)
    return invalid_argument(norm + " is a directory");
  // Unique in the directory: this process, a counter and the time (O_EXCL refuses a clash).
  static std::atomic<std::uint64_t> counter{0};
  const std::string tmp =
      ".abx-write-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  // O_PATH parent: reopen it as a real directory for the *at calls that need one.
  int dfd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return tree_error("open directory of", norm, errno);
  UniqueFd d(dfd);
  const std::uint32_t mode = meta.mode.value_or(0644) & 07777;
  int out =
      ::openat(d.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) return tree_error("create", norm, errno);
  UniqueFd o(out);
  bool done = false;
  // The temporary file goes unless it was renamed into place.
  ScopeExit unlink_tmp{[&] {
    if (!done) ::unlinkat(d.get(), tmp.c_str(), 0);
  }};
  std::uint64_t total = 0;
  std::string buf(kCopyChunk, '\0');
  for (;;) {
    const ssize_t n = os::retry_eintr([&] { return ::read(source, buf.data(), buf.size()); });
    if (n < 0) return os::errno_error("read the upload", errno);
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
    if (total > max)
      return Error(ErrorCode::kPayloadTooLarge,
                   "the file is over " + std::to_string(max) + " bytes");
    ABX_TRY(os::write_all(o.get(), std::string_view(buf.data(), static_cast<std::size_t>(n)),
                          "write " + norm));
  }
  const std::uint32_t uid = meta.uid.value_or(owner_.uid), gid = meta.gid.value_or(owner_.gid);
  if (::fchown(o.get(), uid, gid) != 0) return tree_error("chown", norm, errno);
  if (::fchmod(o.get(), mode) != 0) return tree_error("chmod", norm, errno);
  if (::fsync(o.get()) != 0) return tree_error("fsync", norm, errno);
  if (::renameat(d.get(), tmp.c_str(), d.get(), name.c_str()) != 0)
    return tree_error("rename into", norm, errno);
  done = true;
  return stat_at(d.get(), name, norm);
}

Status ConfinedTree::remove(std::string_view path, std::size_t max_entries) const {
  ABX_ASSIGN_OR_RETURN(std::string norm, normalize_tree_path(path));
  if (norm == "/") return invalid_argument("the volume's root cannot be removed");
  ABX_ASSIGN_OR_RETURN(auto parent, parent_of(norm));
  int pfd = ::openat(parent.first.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) return tree_error("open directory of", norm, errno);
  UniqueFd p(pfd);
  std::size_t removed = 0;
  // Removes `name` of directory `dir`; a directory's contents first (never through a symlink:
  // each level is opened O_NOFOLLOW from its parent's descriptor).
  std::function<Status(int, const std::string&, const std::string&, int)> rm =
      [&](int dir, const std::string& name, const std::string& shown, int level) -> Status {
    if (++removed > max_entries)
      return Error(ErrorCode::kResourceExhausted,
                   "more than " + std::to_string(max_entries) + " entries under " + norm);
    if (::unlinkat(dir, name.c_str(), 0) == 0) return {};
    const int e = errno;
    if (e == ENOENT) return {};
    if (e != EISDIR && e != EPERM) return tree_error("remove", shown, e);
    if (level >= kMaxRemoveDepth)
      return invalid_argument(norm + " is nested over " + std::to_string(kMaxRemoveDepth) +
                              " levels deep");
    int sub = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) return tree_error("open", shown, errno);
    UniqueFd s(sub);
    {
      ABX_ASSIGN_OR_RETURN(DirPtr d, open_dir_stream(s.get(), shown));
      std::vector<std::string> names;
      while (dirent* de = ::readdir(d.get())) {
        const std::string n = de->d_name;
        if (n != "." && n != "..") names.push_back(n);
        if (names.size() > max_entries)
          return Error(ErrorCode::kResourceExhausted,
                       "more than " + std::to_string(max_entries) + " entries under " + norm);
      }
      for (const auto& n : names) ABX_TRY(rm(s.get(), n, join(shown, n), level + 1));
    }
    if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return tree_error("remove", shown, errno);
    return {};
  };
  // The entry must be there: a missing path is not_found, as E2B's 404.
  struct stat st {};
  if (::fstatat(p.get(), parent.second.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return tree_error("remove", norm, errno);
  return rm(p.get(), parent.second, norm, 0);
}

Result<TreeEntry> ConfinedTree::set_metadata(std::string_view path,
                                             const TreeMetadata& meta) const {
  ABX_ASSIGN_OR_RETURN(std::string norm, normalize_tree_path(path));
  int dir = root_.get();
  std::string name;
  UniqueFd parent_fd;
  if (norm != "/") {
    ABX_ASSIGN_OR_RETURN(auto parent, parent_of(norm));
    parent_fd = std::move(parent.first);
    dir = parent_fd.get();
    name = parent.second;
  }
  ABX_ASSIGN_OR_RETURN(TreeEntry e, stat_at(dir, name, norm));
  if (meta.uid || meta.gid) {
    const std::uint32_t uid = meta.uid.value_or(e.uid), gid = meta.gid.value_or(e.gid);
    const int rc = name.empty() ? ::fchown(dir, uid, gid)
                                : ::fchownat(dir, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW);
    if (rc != 0) return tree_error("chown", norm, errno);
  }
  if (meta.mode) {
    if (e.type == TreeEntry::Type::kSymlink)
      return invalid_argument(norm + " is a symlink: its mode cannot change");
    // The entry itself, by descriptor (O_NOFOLLOW: a symlink swapped in meanwhile is the one
    // opened, and a symlink's mode cannot change: EOPNOTSUPP).
    ABX_ASSIGN_OR_RETURN(UniqueFd fd, resolve(norm, O_PATH | O_NOFOLLOW));
    const std::string proc = "/proc/self/fd/" + std::to_string(fd.get());
    if (::chmod(proc.c_str(), *meta.mode & 07777) != 0) return tree_error("chmod", norm, errno);
  }
  return stat_at(dir, name, norm);
}

}  // namespace abx::runtime
