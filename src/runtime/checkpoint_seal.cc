// Checkpoint integrity and privacy (checkpoint.h: seal_checkpoint, verify_checkpoint,
// make_private, load_checkpoint_key).
//
// The seal is a manifest of the tree — one line per entry, sorted by relative path:
//   <type> <mode, octal> <size> <sha256 of the content, or "-"> <path>
// (type f: regular file, d: directory, l: symlink, whose content is its target) — followed by
// "hmac-sha256 <hex>" over "abx-checkpoint-seal-v1\n" + the manifest, keyed by abxd's key. The
// manifest lets a mismatch name what changed; the MAC makes the manifest itself trustworthy.
// A regular file's content hash covers its data extents (SEEK_DATA/SEEK_HOLE) with their
// offsets, so a sparse 1 GiB layer costs what was written to it, not 1 GiB of zeros.
// Every walk here goes through directory fds with O_NOFOLLOW: a symlink is an entry, never a
// way out of the tree.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "abx/base/try.h"
#include "abx/runtime/checkpoint.h"
#include "checkpoint_internal.h"
#include "sys.h"

namespace abx::runtime {
namespace {

// The names in the directory `dirfd` (not "." and ".."), read through a duplicate of it so the
// caller's fd keeps its offset. `what` names the directory in errors.
Result<std::vector<std::string>> entry_names(int dirfd, const std::string& what) {
  int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return os::errno_error("dup " + what, errno);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return os::errno_error("opendir " + what, errno);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  return names;
}

constexpr std::string_view kSealDomain = "abx-checkpoint-seal-v1\n";
constexpr std::string_view kMacPrefix = "hmac-sha256 ";
// A pending entry is listed by name only ("p 0000 0 - rw.img"): a keep_frozen checkpoint's
// layer, still the frozen sandbox's, whose content is sealed once that sandbox is gone.
constexpr const char* kPendingLine = "p 0000 0 -";

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

std::string octal(mode_t m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

Error seal_error(const std::string& dir, const std::string& why) {
  return Error(ErrorCode::kFailedPrecondition,
               "checkpoint " + dir + " failed its integrity check, refusing to restore it: " + why);
}

// SHA-256 of the file's data extents, each as "<offset> <length>\n" + its bytes.
Result<std::string> hash_file(int fd, const std::string& what, off_t size) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) return internal_error("EVP_MD_CTX_new");
  struct Free {
    EVP_MD_CTX* c;
    ~Free() { EVP_MD_CTX_free(c); }
  } free_ctx{ctx};
  if (EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) return internal_error("sha256 init");
  std::vector<char> buf(1 << 20);
  off_t pos = 0;
  while (pos < size) {
    off_t data = ::lseek(fd, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole is left
      return os::errno_error("lseek SEEK_DATA " + what, errno);
    }
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return os::errno_error("lseek SEEK_HOLE " + what, errno);
    const std::string head = std::to_string(data) + " " + std::to_string(hole - data) + "\n";
    EVP_DigestUpdate(ctx, head.data(), head.size());
    for (off_t at = data; at < hole;) {
      const auto want = static_cast<std::size_t>(std::min<off_t>(hole - at, buf.size()));
      const ssize_t n = os::retry_eintr([&] { return ::pread(fd, buf.data(), want, at); });
      if (n < 0) return os::errno_error("read " + what, errno);
      if (n == 0) return internal_error(what + " shrank while it was hashed");
      EVP_DigestUpdate(ctx, buf.data(), static_cast<std::size_t>(n));
      at += n;
    }
    pos = hole;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md, &len) != 1) return internal_error("sha256 final");
  return hex(md, len);
}

// The manifest lines of the tree under `dirfd` (relative paths prefixed by `prefix`), keyed by
// path. `skip` (a top-level name) is left out: the seal file itself, and its ".tmp" (a
// sealing cut short by kill -9 of abxd between the write and the rename leaves it beside the
// previous seal, which still holds).
Status walk(int dirfd, const std::string& prefix, const std::string& what,
            std::map<std::string, std::string>* out, std::string_view skip,
            const std::vector<std::string>& pending) {
  ABX_ASSIGN_OR_RETURN(std::vector<std::string> names, entry_names(dirfd, what));
  if (prefix.empty()) {
    std::erase(names, skip);
    std::erase(names, std::string(skip) + ".tmp");
  }
  for (const auto& name : names) {
    const std::string rel = prefix + name, path = what + "/" + name;
    if (rel.find('\n') != std::string::npos)
      return internal_error("a file name with a newline: " + path);
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return os::errno_error("stat " + path, errno);
    std::string line;
    if (S_ISREG(st.st_mode) && std::find(pending.begin(), pending.end(), rel) != pending.end()) {
      line = kPendingLine;
    } else if (S_ISREG(st.st_mode)) {
      int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return os::errno_error("open " + path, errno);
      UniqueFd file(fd);
      struct stat again;
      if (::fstat(fd, &again) != 0) return os::errno_error("fstat " + path, errno);
      if (again.st_ino != st.st_ino || again.st_dev != st.st_dev)
        return internal_error(path + " was replaced while the checkpoint was read");
      ABX_ASSIGN_OR_RETURN(std::string sum, hash_file(fd, path, again.st_size));
      line = "f " + octal(again.st_mode) + " " + std::to_string(again.st_size) + " " + sum;
    } else if (S_ISDIR(st.st_mode)) {
      int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return os::errno_error("open " + path, errno);
      UniqueFd sub(fd);
      line = "d " + octal(st.st_mode) + " 0 -";
      (*out)[rel] = line + " " + rel;
      ABX_TRY(walk(fd, rel + "/", path, out, skip, pending));
      continue;
    } else if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
      const ssize_t n = ::readlinkat(dirfd, name.c_str(), target.data(), target.size());
      if (n < 0) return os::errno_error("readlink " + path, errno);
      target.resize(static_cast<std::size_t>(n));
      unsigned char md[32];
      ::SHA256(reinterpret_cast<const unsigned char*>(target.data()), target.size(), md);
      line = "l " + octal(st.st_mode) + " " + std::to_string(n) + " " + hex(md, sizeof md);
    } else {
      line = "o " + octal(st.st_mode) + " 0 -";  // a fifo, socket or device: never CRIU's
    }
    (*out)[rel] = line + " " + rel;
  }
  return {};
}

Result<std::map<std::string, std::string>> manifest_of(const std::string& dir,
                                                       const std::vector<std::string>& pending) {
  ABX_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  std::map<std::string, std::string> out;
  ABX_TRY(walk(fd.get(), "", dir, &out, kSealFile, pending));
  return out;
}

std::string joined(const std::map<std::string, std::string>& m) {
  std::string out;
  for (const auto& [path, line] : m) out += line + "\n";
  return out;
}

Result<std::string> mac_of(std::string_view key, std::string_view manifest) {
  if (key.size() < kCheckpointKeyBytes)
    return invalid_argument("a checkpoint key of at least " + std::to_string(kCheckpointKeyBytes) +
                            " bytes is needed");
  std::string msg(kSealDomain);
  msg += manifest;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
              reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), md, &len))
    return internal_error("HMAC-SHA256 failed");
  return hex(md, len);
}

// "mode 0600 -> 0644, content" for two lines of one path.
std::string difference(const std::string& was, const std::string& now) {
  auto fields = [](const std::string& l) {
    std::vector<std::string> f;
    std::size_t start = 0;
    for (int i = 0; i < 4; ++i) {
      std::size_t sp = l.find(' ', start);
      f.push_back(l.substr(start, sp - start));
      start = sp + 1;
    }
    return f;
  };
  auto a = fields(was), b = fields(now);
  static constexpr const char* kTypes = "f: a file, d: a directory, l: a symlink, o: other";
  if (a[0] != b[0]) return "type " + a[0] + " -> " + b[0] + " (" + kTypes + ")";
  std::string out;
  if (a[1] != b[1]) out += "mode " + a[1] + " -> " + b[1];
  if (a[2] != b[2]) out += std::string(out.empty() ? "" : ", ") + "size " + a[2] + " -> " + b[2];
  if (a[3] != b[3])
    out += std::string(out.empty() ? "" : ", ") + (a[0] == "l" ? "link target" : "content");
  return out;
}

}  // namespace

namespace {

// Writes `manifest` and its MAC as `dir`'s seal (a temporary file, synced, renamed over it).
Status write_seal(const std::string& dir, std::string_view key, const std::string& manifest) {
  ABX_ASSIGN_OR_RETURN(const std::string mac, mac_of(key, manifest));
  const std::string path = dir + "/" + kSealFile, tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return os::errno_error("create " + tmp, errno);
    UniqueFd out(fd);
    const std::string text = manifest + std::string(kMacPrefix) + mac + "\n";
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n =
          os::retry_eintr([&] { return ::write(fd, text.data() + done, text.size() - done); });
      if (n < 0) return os::errno_error("write " + tmp, errno);
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) return os::errno_error("fsync " + tmp, errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return os::errno_error("rename " + tmp, errno);
  return {};
}

}  // namespace

Status seal_checkpoint(const std::string& dir, std::string_view key,
                       const std::vector<std::string>& pending) {
  ABX_ASSIGN_OR_RETURN(const auto m, manifest_of(dir, pending));
  return write_seal(dir, key, joined(m));
}

namespace {

Result<std::string> read_seal(const std::string& dir) {
  const std::string path = dir + "/" + kSealFile;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return seal_error(dir, errno == ENOENT ? std::string(kSealFile) + " is missing"
                                           : "open " + path + ": " + os::errno_name(errno));
  UniqueFd in(fd);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = os::retry_eintr([&] { return ::read(fd, buf, sizeof buf); });
    if (n < 0) return os::errno_error("read " + path, errno);
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (16u << 20)) return seal_error(dir, std::string(kSealFile) + " is too big");
  }
  return text;
}

// `dir`'s sealed manifest, once its MAC holds: its lines keyed by relative path.
Result<std::map<std::string, std::string>> sealed_manifest(const std::string& dir,
                                                           std::string_view key) {
  if (key.size() < kCheckpointKeyBytes)
    return invalid_argument("a checkpoint key of at least " + std::to_string(kCheckpointKeyBytes) +
                            " bytes is needed");
  const std::string path = dir + "/" + kSealFile;
  ABX_ASSIGN_OR_RETURN(const std::string text, read_seal(dir));
  const std::size_t at = text.rfind(kMacPrefix);
  if (at == std::string::npos || (at != 0 && text[at - 1] != '\n') || text.back() != '\n')
    return seal_error(dir, std::string(kSealFile) + " is malformed");
  const std::string manifest = text.substr(0, at);
  const std::string stored =
      text.substr(at + kMacPrefix.size(), text.size() - 1 - at - kMacPrefix.size());
  ABX_ASSIGN_OR_RETURN(const std::string expected, mac_of(key, manifest));
  if (stored.size() != expected.size() ||
      CRYPTO_memcmp(stored.data(), expected.data(), expected.size()) != 0)
    return seal_error(dir, std::string(kSealFile) +
                               "'s MAC does not match abxd's checkpoint key (its list of files "
                               "was changed, or another key sealed it)");
  // The sealed list is abxd's own: now compare the tree with it, naming what differs.
  std::map<std::string, std::string> sealed;
  for (std::size_t start = 0; start < manifest.size();) {
    std::size_t end = manifest.find('\n', start);
    const std::string line = manifest.substr(start, end - start);
    start = end + 1;
    std::size_t sp = 0;
    for (int i = 0; i < 4 && sp != std::string::npos; ++i) sp = line.find(' ', sp + 1);
    if (sp == std::string::npos) return seal_error(dir, "a malformed line in " + path);
    sealed[line.substr(sp + 1)] = line;
  }
  return sealed;
}

Status verify(const std::string& dir, std::string_view key) {
  ABX_ASSIGN_OR_RETURN(const auto sealed, sealed_manifest(dir, key));
  ABX_ASSIGN_OR_RETURN(const auto now, manifest_of(dir, {}));
  std::vector<std::string> problems;
  for (const auto& [rel, line] : sealed) {
    auto it = now.find(rel);
    if (it == now.end()) {
      problems.push_back(rel + " was removed");
    } else if (line.starts_with(kPendingLine)) {
      problems.push_back(rel + " was never sealed (its pause did not complete)");
    } else if (it->second != line) {
      problems.push_back(rel + " changed (" + difference(line, it->second) + ")");
    }
  }
  for (const auto& [rel, line] : now)
    if (!sealed.count(rel)) problems.push_back(rel + " was added");
  if (problems.empty()) return {};
  std::string why;
  for (std::size_t i = 0; i < problems.size() && i < 4; ++i) why += (i ? "; " : "") + problems[i];
  if (problems.size() > 4) why += "; and " + std::to_string(problems.size() - 4) + " more";
  return seal_error(dir, why);
}

}  // namespace

Status verify_checkpoint(const std::string& dir, std::string_view key) { return verify(dir, key); }

Status mark_pending(const std::string& dir, std::string_view key,
                    const std::vector<std::string>& names) {
  ABX_ASSIGN_OR_RETURN(auto sealed, sealed_manifest(dir, key));
  for (const auto& rel : names) {
    auto it = sealed.find(rel);
    if (it == sealed.end()) return seal_error(dir, rel + " is not in its seal");
    it->second = std::string(kPendingLine) + " " + rel;
  }
  return write_seal(dir, key, joined(sealed));
}

bool seal_pending(const std::string& dir) {
  auto text = read_seal(dir);
  return text.ok() && (text->starts_with(kPendingLine) ||
                       text->find(std::string("\n") + kPendingLine) != std::string::npos);
}

// Only the pending entries are read: every other line is kept as sealed, not hashed again (a
// checkpoint's memory images cost ~1 ms per MiB). That proves nothing about them now, and needs
// not: the new seal still lists what was sealed, so the full check every restore makes
// (verify_checkpoint) still finds any entry that changed, was added or removed meanwhile.
Status complete_seal(const std::string& dir, std::string_view key) {
  if (!seal_pending(dir)) return {};
  ABX_ASSIGN_OR_RETURN(auto sealed, sealed_manifest(dir, key));
  ABX_ASSIGN_OR_RETURN(UniqueFd root, open_fd(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  for (auto& [rel, line] : sealed) {
    if (!line.starts_with(kPendingLine)) continue;
    // Pending entries are top-level files (seal_checkpoint's callers name rw.img).
    if (rel.find('/') != std::string::npos)
      return seal_error(dir, "a pending entry below the top: " + rel);
    const std::string path = dir + "/" + rel;
    int fd = ::openat(root.get(), rel.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ELOOP)
        return seal_error(dir, rel + " is no longer a regular file");
      return os::errno_error("open " + path, errno);
    }
    UniqueFd file(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return os::errno_error("fstat " + path, errno);
    if (!S_ISREG(st.st_mode)) return seal_error(dir, rel + " is no longer a regular file");
    ABX_ASSIGN_OR_RETURN(std::string sum, hash_file(fd, path, st.st_size));
    line = "f " + octal(st.st_mode) + " " + std::to_string(st.st_size) + " " + sum + " " + rel;
  }
  return write_seal(dir, key, joined(sealed));
}

namespace {

Status make_private_at(int dirfd, const std::string& what) {
  ABX_ASSIGN_OR_RETURN(std::vector<std::string> names, entry_names(dirfd, what));
  for (const auto& name : names) {
    const std::string path = what + "/" + name;
    // Only files and directories, each through its own fd: a symlink is left as it is (its
    // own mode means nothing) and never followed.
    int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ELOOP || errno == ENXIO || errno == ENOENT) continue;
      return os::errno_error("open " + path, errno);
    }
    UniqueFd f(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return os::errno_error("fstat " + path, errno);
    if (S_ISDIR(st.st_mode)) {
      if ((st.st_mode & 07777) != 0700 && ::fchmod(fd, 0700) != 0)
        return os::errno_error("chmod " + path, errno);
      ABX_TRY(make_private_at(fd, path));
    } else if (S_ISREG(st.st_mode)) {
      if ((st.st_mode & 07777) != 0600 && ::fchmod(fd, 0600) != 0)
        return os::errno_error("chmod " + path, errno);
    }
  }
  return {};
}

}  // namespace

Status make_private(const std::string& dir) {
  ABX_ASSIGN_OR_RETURN(UniqueFd fd, open_fd(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return os::errno_error("fstat " + dir, errno);
  if ((st.st_mode & 07777) != 0700 && ::fchmod(fd.get(), 0700) != 0)
    return os::errno_error("chmod " + dir, errno);
  return make_private_at(fd.get(), dir);
}

Result<std::string> load_checkpoint_key(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    unsigned char key[kCheckpointKeyBytes];
    if (RAND_bytes(key, sizeof key) != 1) return internal_error("RAND_bytes failed");
    const std::string tmp = path + ".tmp";
    ::unlink(tmp.c_str());
    int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) return os::errno_error("create " + tmp, errno);
    UniqueFd w(out);
    if (os::retry_eintr([&] { return ::write(out, key, sizeof key); }) !=
            static_cast<ssize_t>(sizeof key) ||
        ::fsync(out) != 0)
      return os::errno_error("write " + tmp, errno);
    w.reset();
    // link, not rename: two starting at once keep one key (the first's).
    if (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST)
      return os::errno_error("link " + tmp + " -> " + path, errno);
    ::unlink(tmp.c_str());
    fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) return os::errno_error("open checkpoint key " + path, errno);
  UniqueFd in(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return os::errno_error("fstat " + path, errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return Error(ErrorCode::kFailedPrecondition,
                 "checkpoint key " + path +
                     " must be a regular file of abxd's user, mode 0600 "
                     "(it is " +
                     octal(st.st_mode) + ", uid " + std::to_string(st.st_uid) +
                     "): another user may have read it; remove it to make a new one (existing "
                     "checkpoints then no longer restore)");
  std::string key(kCheckpointKeyBytes + 1, '\0');
  const ssize_t n = os::retry_eintr([&] { return ::read(fd, key.data(), key.size()); });
  if (n != static_cast<ssize_t>(kCheckpointKeyBytes))
    return Error(ErrorCode::kFailedPrecondition, "checkpoint key " + path + " is not " +
                                                     std::to_string(kCheckpointKeyBytes) +
                                                     " bytes long");
  key.resize(kCheckpointKeyBytes);
  return key;
}

}  // namespace abx::runtime
