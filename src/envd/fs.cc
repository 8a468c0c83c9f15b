#include "fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "abx/base/os.h"
#include "abx/base/scope_exit.h"
#include "abx/base/try.h"
#include "creds.h"
#include "proto_json.h"

namespace abx::envd {

namespace json = boost::json;

namespace {

std::string user_name(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) return pw.pw_name;
  return std::to_string(uid);
}

std::string group_name(gid_t gid) {
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found) return gr.gr_name;
  return std::to_string(gid);
}

// Go's os.FileMode.String(): type letters, then rwx triplets.
std::string mode_string(mode_t m) {
  std::string out;
  if (S_ISDIR(m)) out += 'd';
  if (S_ISLNK(m)) out += 'L';
  if (S_ISBLK(m)) out += 'D';
  if (S_ISFIFO(m)) out += 'p';
  if (S_ISSOCK(m)) out += 'S';
  if (S_ISCHR(m)) out += "Dc";
  if (m & S_ISUID) out += 'u';
  if (m & S_ISGID) out += 'g';
  if (m & S_ISVTX) out += 't';
  if (out.empty()) out += '-';
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (m & (1 << (8 - i))) ? rwx[i] : '-';
  return out;
}

std::string base_name(const std::string& path) {
  if (path == "/") return "/";
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool printable_ascii(std::string_view s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// E2B's namespace for file metadata (`filesystem.MetadataXattrPrefix` in E2B's envd): `user.` is
// what the kernel lets unprivileged processes set, `e2b.` keeps other tools' `user.*` attributes
// out of the map.
constexpr std::string_view kMetadataXattrPrefix = "user.e2b.";

// The `user.e2b.*` extended attributes of `path` (not followed when a symlink) as a JSON map keyed
// without the prefix; empty when there are none or they cannot be read. Bounded: the name list by
// the kernel's own limit (64 KiB), each value by kMaxMetadataValueBytes (longer ones, not set by
// envd, are skipped).
json::object user_xattrs(const std::string& path) {
  json::object out;
  std::string names(64 * 1024, '\0');
  ssize_t n = ::llistxattr(path.c_str(), names.data(), names.size());
  if (n <= 0) return out;
  names.resize(static_cast<std::size_t>(n));
  std::string value(kMaxMetadataValueBytes, '\0');
  std::string_view rest(names);
  while (!rest.empty() && out.size() < 4 * kMaxMetadataEntries) {
    auto nul = rest.find('\0');
    std::string name(rest.substr(0, nul));
    rest.remove_prefix(nul == std::string_view::npos ? rest.size() : nul + 1);
    if (!name.starts_with(kMetadataXattrPrefix) || name.size() == kMetadataXattrPrefix.size() ||
        !printable_ascii(name)) {
      continue;
    }
    ssize_t len = ::lgetxattr(path.c_str(), name.c_str(), value.data(), value.size());
    if (len < 0) continue;
    std::string_view v(value.data(), static_cast<std::size_t>(len));
    if (!printable_ascii(v)) continue;
    out[name.substr(kMetadataXattrPrefix.size())] = v;
  }
  return out;
}

}  // namespace

Status set_file_metadata(int fd, const FileMetadata& metadata) {
  for (const auto& [key, value] : metadata) {
    std::string name = std::string(kMetadataXattrPrefix) + key;
    if (::fsetxattr(fd, name.c_str(), value.data(), value.size(), 0) != 0) {
      int err = errno;
      if (err == ENOTSUP) {
        return Error(ErrorCode::kFailedPrecondition,
                     "the filesystem does not support user extended attributes (file metadata)");
      }
      if (err == ENOSPC || err == E2BIG || err == ERANGE) {
        return invalid_argument("file metadata too large for the filesystem");
      }
      return errno_error(err, "set file metadata '" + key + "'");
    }
  }
  return {};
}

Result<json::object> entry_info(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno_error(errno, "stat " + path);
  json::object e;
  e["name"] = base_name(path);
  const char* type = "FILE_TYPE_FILE";
  if (S_ISDIR(st.st_mode)) type = "FILE_TYPE_DIRECTORY";
  if (S_ISLNK(st.st_mode)) type = "FILE_TYPE_SYMLINK";
  e["type"] = type;
  e["path"] = path;
  e["size"] = std::to_string(st.st_size);  // int64 → JSON string
  e["mode"] = static_cast<std::uint32_t>(st.st_mode & 0777);
  e["permissions"] = mode_string(st.st_mode);
  e["owner"] = user_name(st.st_uid);
  e["group"] = group_name(st.st_gid);
  e["modifiedTime"] = rfc3339(st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = ::readlink(path.c_str(), target, sizeof target);
    if (n >= 0) {
      std::string t(target, static_cast<std::size_t>(n));
      if (!t.empty() && t[0] != '/') t = parent_of(path) + "/" + t;
      e["symlinkTarget"] = t;
    }
  }
  if (auto md = user_xattrs(path); !md.empty()) e["metadata"] = std::move(md);
  return e;
}

namespace {
Status list_into(const std::string& dir, std::uint32_t depth, json::array& out) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return errno_error(errno, "open directory " + dir);
  DIR* d = ::fdopendir(fd.get());
  if (!d) return errno_error(errno, "read directory " + dir);
  (void)fd.release();  // owned by d now
  std::vector<std::string> names;
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::string p = dir == "/" ? "/" + n : dir + "/" + n;
    auto e = entry_info(p);
    if (!e.ok()) continue;  // removed meanwhile
    bool is_dir = e->at("type").as_string() == "FILE_TYPE_DIRECTORY";
    out.push_back(std::move(*e));
    if (is_dir && depth > 1) {
      auto s = list_into(p, depth - 1, out);
      (void)s;  // an unreadable subdirectory is listed but not descended into
    }
  }
  return {};
}
}  // namespace

Result<json::array> list_dir(const std::string& dir, std::uint32_t depth) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return errno_error(errno, "stat " + dir);
  if (!S_ISDIR(st.st_mode)) return invalid_argument("path is not a directory: " + dir);
  json::array out;
  // Resolve a symlinked directory once, at the top, so the listing shows its entries.
  char real[PATH_MAX];
  std::string top = dir;
  struct stat lst {};
  if (::lstat(dir.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode) && ::realpath(dir.c_str(), real)) {
    top = real;
  }
  ABX_TRY(list_into(top, depth == 0 ? 1 : depth, out));
  return out;
}

void chown_to(int fd, const User& user) {
  if (::geteuid() != 0) return;
  // Best effort: the file is usable either way; a failure only leaves it owned by root.
  if (::fchown(fd, user.uid, user.gid) != 0) return;
}

Status make_dirs(const std::string& path, const User& owner, bool fail_if_exists) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return invalid_argument("path exists and is not a directory: " + path);
    if (fail_if_exists)
      return Error(ErrorCode::kAlreadyExists, "directory already exists: " + path);
    return {};
  }
  if (errno == ELOOP) return errno_error(errno, "stat " + path);
  std::string parent = parent_of(path);
  if (parent != path) ABX_TRY(make_dirs(parent, owner, false));
  if (::mkdir(path.c_str(), 0755) != 0) {
    if (errno == EEXIST && !fail_if_exists) return {};
    return errno_error(errno, "mkdir " + path);
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.valid()) chown_to(fd.get(), owner);
  return {};
}

// Walks down from "/" with the user's credentials (the caller's FsCreds), so it only reaches
// directories the user can search, and without following symlinks: a link the user planted must
// not steer root's mkdir. Only the mkdir and the chown of a missing directory take envd's
// credentials, on the directory fd the walk holds.
Status make_upload_dirs(const std::string& dir, const User& owner) {
  Status as_user = make_dirs(dir, owner, false);
  if (as_user.ok() || as_user.error().code() != ErrorCode::kPermissionDenied) return as_user;
  if (::geteuid() != 0 || dir.empty() || dir[0] != '/') return as_user;
  UniqueFd cur(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cur.valid()) return as_user;
  std::string shown;
  std::string_view rest(dir);
  while (!rest.empty()) {
    auto slash = rest.find('/');
    std::string name(rest.substr(0, slash));
    rest.remove_prefix(slash == std::string_view::npos ? rest.size() : slash + 1);
    if (name.empty() || name == ".") continue;
    if (name == "..") return as_user;  // resolve_path() leaves none; refuse rather than guess
    shown += "/" + name;
    constexpr int kWalk = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    UniqueFd next(::openat(cur.get(), name.c_str(), kWalk));
    if (!next.valid() && errno == ENOENT) {
      ABX_ASSIGN_OR_RETURN(auto as_envd, FsCreds::act_as_envd());
      if (::mkdirat(cur.get(), name.c_str(), 0755) == 0) {
        UniqueFd made(
            ::openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        // 0755 whatever envd's umask: what E2B's envd (Go's os.Mkdir, umask 022) leaves.
        if (!made.valid() || ::fchown(made.get(), owner.uid, owner.gid) != 0 ||
            ::fchmod(made.get(), 0755) != 0) {
          return errno_error(errno, "give " + shown + " to " + owner.name);
        }
      } else if (errno != EEXIST) {
        return errno_error(errno, "mkdir " + shown);
      }
    }
    if (!next.valid()) next.reset(::openat(cur.get(), name.c_str(), kWalk));  // as the user
    // A symlink, a file, or a directory the user cannot search: as without root's help.
    if (!next.valid()) return as_user;
    cur = std::move(next);
  }
  return {};
}

Status move_path(const std::string& from, const std::string& to, const User& owner) {
  struct stat st {};
  if (::lstat(from.c_str(), &st) != 0) return errno_error(errno, "stat " + from);
  ABX_TRY(make_dirs(parent_of(to), owner, false));
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return errno_error(errno, "rename " + from + " to " + to);
  }
  return {};
}

namespace {
Status remove_tree_at(int dirfd, const char* name, const std::string& shown) {
  if (::unlinkat(dirfd, name, 0) == 0) return {};
  if (errno == ENOENT) return {};
  if (errno != EISDIR && errno != EPERM) return errno_error(errno, "remove " + shown);
  UniqueFd fd(::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return errno_error(errno, "remove " + shown);
  int dup = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
  DIR* d = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (!d) {
    if (dup >= 0) ::close(dup);
    return errno_error(errno, "read directory " + shown);
  }
  std::vector<std::string> names;
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  ::closedir(d);
  for (const auto& n : names) ABX_TRY(remove_tree_at(fd.get(), n.c_str(), shown + "/" + n));
  if (::unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return errno_error(errno, "remove " + shown);
  }
  return {};
}
}  // namespace

Status remove_path(const std::string& path) {
  if (path == "/") return invalid_argument("refusing to remove /");
  std::string parent = parent_of(path);
  UniqueFd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    if (errno == ENOENT) return {};
    return errno_error(errno, "open " + parent);
  }
  return remove_tree_at(dir.get(), base_name(path).c_str(), path);
}

std::string_view fs_event_type_name(FsEventType t) {
  switch (t) {
    case FsEventType::kCreate:
      return "EVENT_TYPE_CREATE";
    case FsEventType::kWrite:
      return "EVENT_TYPE_WRITE";
    case FsEventType::kRemove:
      return "EVENT_TYPE_REMOVE";
    case FsEventType::kRename:
      return "EVENT_TYPE_RENAME";
    case FsEventType::kChmod:
      return "EVENT_TYPE_CHMOD";
  }
  return "EVENT_TYPE_UNSPECIFIED";
}

namespace {
constexpr std::uint32_t kWatchMask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM |
                                     IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_ONLYDIR;
}

Result<std::unique_ptr<Watcher>> Watcher::start(const std::string& dir, bool recursive,
                                                const User& user, Sink sink, Tick tick,
                                                std::chrono::milliseconds interval,
                                                const std::function<void()>& watching) {
  ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(user));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return errno_error(errno, "watch " + dir);
  if (!S_ISDIR(st.st_mode)) return invalid_argument("path is not a directory: " + dir);
  std::unique_ptr<Watcher> w(new Watcher());
  w->dir_ = dir;
  w->user_ = user;
  w->recursive_ = recursive;
  w->sink_ = std::move(sink);
  w->tick_ = std::move(tick);
  w->tick_interval_ = interval;
  w->inotify_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!w->inotify_.valid()) return errno_error(errno, "inotify_init1");
  w->wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!w->wake_.valid()) return errno_error(errno, "eventfd");
  int wd = ::inotify_add_watch(w->inotify_.get(), dir.c_str(), kWatchMask);
  if (wd < 0) return errno_error(errno, "inotify_add_watch " + dir);
  w->paths_[wd] = "";
  if (recursive) {
    // Subdirectories already there.
    json::array all;
    auto listed = list_dir(dir, 64);
    if (listed.ok()) {
      for (const auto& e : *listed) {
        if (e.at("type").as_string() != "FILE_TYPE_DIRECTORY") continue;
        std::string p(e.at("path").as_string());
        int sub = ::inotify_add_watch(w->inotify_.get(), p.c_str(), kWatchMask);
        if (sub >= 0) w->paths_[sub] = p.substr(dir.size() + (dir == "/" ? 0 : 1));
      }
    }
  }
  if (watching) watching();
  w->thread_ = std::thread([raw = w.get()] { raw->run(); });
  return w;
}

void Watcher::add_tree(const std::string& path, const std::string& rel) {
  int wd = ::inotify_add_watch(inotify_.get(), path.c_str(), kWatchMask);
  if (wd < 0) return;
  paths_[wd] = rel;
}

namespace {

// envd's upload staging directory and the files in it (files.cc): they live outside the user's
// directories, but a recursive watch of a parent of the staging directory would see them.
bool internal_temp_name(std::string_view name) {
  return name.starts_with(".abx-body-") || name.starts_with(".abx-upload-") ||
         name.starts_with(".abx-spool-");
}

// Whether any component of `rel` is one of those (a user's staging directory is a subdirectory
// of envd's, and what happens in it is no event of the watched tree).
bool internal_temp_path(std::string_view rel) {
  while (!rel.empty()) {
    auto slash = rel.find('/');
    if (internal_temp_name(rel.substr(0, slash))) return true;
    if (slash == std::string_view::npos) break;
    rel.remove_prefix(slash + 1);
  }
  return false;
}

}  // namespace

void Watcher::run() {
  // This thread is the watcher's alone: it acts as the user until it ends.
  // The inotify instance goes when the watch ends, not when its Watcher is destroyed (a WatchDir
  // stream's is reaped only by the next WatchDir): a watch left in envd is one that every
  // checkpoint of the sandbox has to save and restore.
  ScopeExit close_watch{[this] { inotify_.reset(); }};
  auto as_user = FsCreds::act_as(user_);
  if (!as_user.ok()) {
    done_ = true;
    return;
  }
  alignas(inotify_event) char buf[16384];
  auto next_tick = std::chrono::steady_clock::now() + tick_interval_;
  while (!done_.load()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      if (!tick_()) break;
      next_tick = now + tick_interval_;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - now).count();
    pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    int r = os::retry_eintr([&] {
      return ::poll(fds, 2, static_cast<int>(std::max<long>(1, std::min<long>(wait, 1000))));
    });
    if (r < 0) break;
    if (fds[1].revents) break;
    if (!(fds[0].revents & POLLIN)) continue;
    ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
    if (n <= 0) continue;
    bool stop = false;
    for (char* p = buf; p < buf + n && !stop;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      p += sizeof(inotify_event) + ev->len;
      auto it = paths_.find(ev->wd);
      if (it == paths_.end()) continue;
      std::string name = ev->len ? std::string(ev->name) : std::string();
      std::string rel =
          it->second.empty() ? name : (name.empty() ? it->second : it->second + "/" + name);
      if (internal_temp_path(rel)) continue;
      std::optional<FsEventType> type;
      if (ev->mask & (IN_CREATE | IN_MOVED_TO)) type = FsEventType::kCreate;
      if (ev->mask & IN_MODIFY) type = FsEventType::kWrite;
      if (ev->mask & (IN_DELETE | IN_DELETE_SELF)) type = FsEventType::kRemove;
      if (ev->mask & IN_MOVED_FROM) type = FsEventType::kRename;
      if (ev->mask & IN_ATTRIB) type = FsEventType::kChmod;
      if (ev->mask & IN_IGNORED) {
        paths_.erase(ev->wd);
        continue;
      }
      if (recursive_ && (ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
        add_tree(dir_ + "/" + rel, rel);
      }
      if (ev->mask & IN_DELETE_SELF) {
        if (!it->second.empty()) continue;  // a subdirectory: its parent reports the removal
        rel = "";
      }
      if (type && !sink_(FsEvent{rel, *type})) stop = true;
    }
    if (stop) break;
  }
  done_ = true;
}

void Watcher::stop() {
  done_ = true;
  std::uint64_t one = 1;
  if (wake_.valid()) (void)!::write(wake_.get(), &one, sizeof one);
}

Watcher::~Watcher() {
  stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace abx::envd
