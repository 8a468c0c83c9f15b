#include "fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "abx/base/hex.h"
#include "abx/base/os.h"
#include "abx/base/try.h"

namespace abx::image {

// The code is abx::os's table; the message keeps strerror's words (an image error reaches users).
Error errno_error(std::string_view what, std::string_view path, int err) {
  const ErrorCode code = os::code_for_errno(err);
  std::string msg(what);
  msg += ' ';
  msg += path;
  msg += ": ";
  msg += std::strerror(err);
  return {code, std::move(msg)};
}

Status make_dirs(const std::string& path) {
  for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    std::string part = path.substr(0, slash);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return errno_error("mkdir", part, errno);
    }
    if (slash == std::string::npos) return {};
  }
}

namespace {

std::string octal_mode(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

Error refused(const std::string& path, const std::string& why) {
  return {ErrorCode::kFailedPrecondition,
          path + " " + why +
              ": another user could have planted files in the store (fix the ownership and "
              "mode, or choose another --image-store)"};
}

// A directory above the store: root or us own it, and others cannot rename or replace what is
// in it (not group/world-writable, unless sticky like /tmp).
Status check_parent(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return errno_error("mkdir", path, errno);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno_error("stat", path, errno);
  if (!S_ISDIR(st.st_mode)) return refused(path, "is not a directory");
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    return refused(path, "is owned by uid " + std::to_string(st.st_uid) + ", not root or uid " +
                             std::to_string(::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return refused(path,
                   "is writable by other users (mode " + octal_mode(st.st_mode) + ", not sticky)");
  }
  return {};
}

// A directory of the store: ours, writable by no one else, 0700 afterwards.
Status own_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return errno_error("mkdir", path, errno);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOTDIR || errno == ELOOP) return refused(path, "is not a directory");
    return errno_error("open", path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat", path, errno);
  if (st.st_uid != ::geteuid()) {
    return refused(path, "is owned by uid " + std::to_string(st.st_uid) + ", not uid " +
                             std::to_string(::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return refused(path, "is writable by other users (mode " + octal_mode(st.st_mode) + ")");
  }
  if ((st.st_mode & 07777) != 0700 && ::fchmod(fd.get(), 0700) != 0) {
    return errno_error("chmod", path, errno);
  }
  return {};
}

}  // namespace

Status secure_dirs(const std::string& root, const std::vector<std::string>& dirs) {
  if (root.size() < 2 || root.front() != '/') {
    return invalid_argument("not an absolute path below /: " + root);
  }
  ABX_TRY(check_parent("/"));
  for (std::size_t slash = root.find('/', 1); slash != std::string::npos;
       slash = root.find('/', slash + 1)) {
    ABX_TRY(check_parent(root.substr(0, slash)));
  }
  ABX_TRY(own_private_dir(root));
  for (const auto& d : dirs) ABX_TRY(own_private_dir(d));
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
    ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
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

Status write_file_atomic(const std::string& tmp_dir, const std::string& path,
                         std::string_view data) {
  std::string tmp = tmp_dir + "/file-" + random_name();
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return errno_error("create", tmp, errno);
  Status st = os::write_all(fd.get(), data, "write " + tmp);
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
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return errno_error("open", path, errno);
  int op = (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | (wait ? 0 : LOCK_NB);
  if (os::retry_eintr([&] { return ::flock(fd.get(), op); }) != 0) {
    if (errno == EWOULDBLOCK) return unavailable(path + " is held by another operation");
    return errno_error("flock", path, errno);
  }
  return FileLock(std::move(fd));
}

}  // namespace abx::image
