#include "sys.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "abx/base/try.h"

namespace abx::runtime {

Result<UniqueFd> open_fd(const std::string& path, int flags, mode_t mode) {
  int fd = os::retry_eintr([&] { return ::open(path.c_str(), flags | O_CLOEXEC, mode); });
  if (fd < 0) return os::errno_error("open " + path, errno);
  return UniqueFd(fd);
}

namespace {
Status write_once(const std::string& path, std::string_view data, int flags) {
  ABX_ASSIGN_OR_RETURN(auto fd, open_fd(path, flags, 0600));
  ssize_t n = os::retry_eintr([&] { return ::write(fd.get(), data.data(), data.size()); });
  if (n < 0) return os::errno_error("write " + path, errno);
  if (static_cast<size_t>(n) != data.size()) return internal_error("short write to " + path);
  return {};
}
}  // namespace

Status write_file(const std::string& path, std::string_view data) {
  return write_once(path, data, O_WRONLY | O_TRUNC);
}

Status create_file(const std::string& path, std::string_view data) {
  return write_once(path, data, O_WRONLY | O_CREAT | O_EXCL);
}

Result<std::string> read_file(const std::string& path, std::size_t max) {
  ABX_ASSIGN_OR_RETURN(auto fd, open_fd(path, O_RDONLY));
  std::string out;
  char buf[4096];
  while (out.size() < max) {
    ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
    if (n < 0) return os::errno_error("read " + path, errno);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

namespace {

// Depth-first removal relative to `dirfd`. O_NOFOLLOW everywhere: a symlink is unlinked, never
// followed, so a planted link cannot redirect the removal onto host files.
Status remove_children(int dirfd, const std::string& where, dev_t dev) {
  int dup = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return os::errno_error("dup " + where, errno);
  DIR* d = fdopendir(dup);
  if (!d) {
    int e = errno;
    ::close(dup);
    return os::errno_error("fdopendir " + where, e);
  }
  Status result;
  while (dirent* ent = readdir(d)) {
    std::string_view name = ent->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(dirfd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      result = os::errno_error("stat " + where + "/" + ent->d_name, errno);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev) {
        result = internal_error("refusing to remove mount point " + where + "/" + ent->d_name);
        break;
      }
      int sub = openat(dirfd, ent->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        result = os::errno_error("open " + where + "/" + ent->d_name, errno);
        break;
      }
      Status s = remove_children(sub, where + "/" + ent->d_name, dev);
      ::close(sub);
      if (!s) {
        result = s;
        break;
      }
      if (unlinkat(dirfd, ent->d_name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
        result = os::errno_error("rmdir " + where + "/" + ent->d_name, errno);
        break;
      }
    } else if (unlinkat(dirfd, ent->d_name, 0) != 0 && errno != ENOENT) {
      result = os::errno_error("unlink " + where + "/" + ent->d_name, errno);
      break;
    }
  }
  closedir(d);
  return result;
}

}  // namespace

Status remove_tree(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};
    return os::errno_error("open " + path, errno);
  }
  UniqueFd dir(fd);
  struct stat st;
  if (fstat(dir.get(), &st) != 0) return os::errno_error("stat " + path, errno);
  ABX_TRY(remove_children(dir.get(), path, st.st_dev));
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return os::errno_error("rmdir " + path, errno);
  return {};
}

unsigned long long process_start_time(pid_t pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!stat) return 0;
  // comm (field 2) may contain spaces and parentheses: fields restart after the last ')'.
  auto close = stat->rfind(')');
  if (close == std::string::npos) return 0;
  const char* p = stat->c_str() + close + 1;
  // After ')' come fields 3..; starttime is field 22, i.e. the 20th after the ')'.
  for (int field = 3; field < 22 && *p; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

void lower_thread_priority(int levels) {
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  if (errno == 0 && levels > 0)
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), std::min(nice + levels, 19));
}

void match_daemon_priority(pid_t pid) {
  errno = 0;
  const int daemon = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::getpid()));
  if (errno != 0) return;
  const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid));
  if (errno == 0 && now != daemon)
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(pid), daemon);
}

}  // namespace abx::runtime
