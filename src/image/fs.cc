#include "fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "abx/base/hex.h"

namespace abx::image {

Error errno_error(std::string_view what, std::string_view path, int err) {
  ErrorCode code = ErrorCode::kInternal;
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      code = ErrorCode::kNotFound;
      break;
    case ENOSPC:
    case EDQUOT:
      code = ErrorCode::kInsufficientStorage;
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      code = ErrorCode::kPermissionDenied;
      break;
    default:
      break;
  }
  std::string msg(what);
  msg += ' ';
  msg += path;
  msg += ": ";
  msg += std::strerror(err);
  return {code, std::move(msg)};
}

Status make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return errno_error("mkdir", path, ec.value());
  return {};
}

Result<std::string> read_file(const std::string& path, std::size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return errno_error("open", path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat", path, errno);
  if (!S_ISREG(st.st_mode)) return invalid_argument(path + " is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return Error(ErrorCode::kPayloadTooLarge, path + " is " + std::to_string(st.st_size) +
                                                  " bytes, over the limit of " +
                                                  std::to_string(max_bytes));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("read", path, errno);
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_bytes) {
      return Error(ErrorCode::kPayloadTooLarge,
                   path + " grew past the limit of " + std::to_string(max_bytes) + " bytes");
    }
  }
  return out;
}

namespace {

Status write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("write", path, errno);
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

Status write_file_atomic(const std::string& tmp_dir, const std::string& path,
                         std::string_view data) {
  std::string tmp = tmp_dir + "/file-" + random_name();
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return errno_error("create", tmp, errno);
  Status st = write_all(fd.get(), data, tmp);
  if (st.ok() && ::fsync(fd.get()) != 0) st = errno_error("fsync", tmp, errno);
  fd.reset();
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = errno_error("rename", path, errno);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

std::string random_name() {
  unsigned char b[8];
  if (RAND_bytes(b, sizeof b) != 1) {
    // Uniqueness, not secrecy: fall back to the pid and a counter.
    static std::uint64_t counter = 0;
    return std::to_string(::getpid()) + "-" + std::to_string(++counter);
  }
  return to_hex(b, sizeof b);
}

namespace {

// Recursion on directory fds: nothing is resolved through a symlink, and a tree deeper than
// PATH_MAX still goes.
Status remove_at(int dirfd, const char* name, const std::string& shown, std::uint64_t* freed) {
  struct stat st {};
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return errno_error("stat", shown, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
      return errno_error("unlink", shown, errno);
    }
    if (freed != nullptr && S_ISREG(st.st_mode) && st.st_nlink <= 1) {
      *freed += static_cast<std::uint64_t>(st.st_size);
    }
    return {};
  }
  int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno_error("open", shown, errno);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    int e = errno;
    ::close(fd);
    return errno_error("opendir", shown, e);
  }
  Status st2;
  while (struct dirent* ent = ::readdir(d)) {
    if (std::strcmp(ent->d_name, ".") == 0 || std::strcmp(ent->d_name, "..") == 0) continue;
    st2 = remove_at(::dirfd(d), ent->d_name, shown + "/" + ent->d_name, freed);
    if (!st2.ok()) break;
  }
  ::closedir(d);
  if (!st2.ok()) return st2;
  if (::unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return errno_error("rmdir", shown, errno);
  }
  return {};
}

}  // namespace

Status remove_tree(const std::string& path, std::uint64_t* freed) {
  return remove_at(AT_FDCWD, path.c_str(), path, freed);
}

Result<FileLock> FileLock::acquire(const std::string& path, Mode mode, bool wait) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return errno_error("open", path, errno);
  int op = (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | (wait ? 0 : LOCK_NB);
  for (;;) {
    if (::flock(fd.get(), op) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return unavailable(path + " is held by another operation");
    return errno_error("flock", path, errno);
  }
  return FileLock(std::move(fd));
}

}  // namespace abx::image
