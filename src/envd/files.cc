#include "files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "abx/base/ascii.h"
#include "abx/base/fd.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "creds.h"
#include "fs.h"

namespace abx::envd {

namespace bhttp = boost::beast::http;

namespace {

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A deflate stream with a gzip wrapper (windowBits 15 + 16), ended with its owner. Level 1
// (fastest): Node's fetch asks for gzip on every request, so every SDK read from Node is
// compressed, on the connection's I/O thread, mostly over loopback.
struct Deflater {
  z_stream z{};
  bool ok = false;
  Deflater() {
    ok = ::deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK;
  }
  ~Deflater() {
    if (ok) ::deflateEnd(&z);
  }
  Deflater(const Deflater&) = delete;
  Deflater& operator=(const Deflater&) = delete;
  // Compresses `in` (all of it; `finish` ends the stream) and returns what zlib produced.
  std::string run(std::string_view in, bool finish) {
    std::string out;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    char buf[64 * 1024];
    int rc = Z_OK;
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      rc = ::deflate(&z, finish ? Z_FINISH : Z_NO_FLUSH);
      out.append(buf, sizeof buf - z.avail_out);
    } while (z.avail_out == 0 || (finish && rc == Z_OK));
    return out;
  }
};

// Feeds a file to a StreamWriter from the connection's executor, a block at a time, pausing
// while the writer's queue is full; gzip-compressed when `gzip` is set.
struct Download : std::enable_shared_from_this<Download> {
  UniqueFd fd;
  std::uint64_t offset = 0;
  std::uint64_t remaining = 0;
  std::shared_ptr<http::StreamWriter> writer;
  std::unique_ptr<Deflater> gzip;

  void pump() {
    while (remaining > 0) {
      if (writer->closed()) return;
      if (!writer->ready()) {
        writer->when_ready([self = shared_from_this()] { self->pump(); });
        return;
      }
      std::string block(static_cast<std::size_t>(std::min<std::uint64_t>(remaining, 64 * 1024)),
                        '\0');
      ssize_t n = os::retry_eintr([&] {
        return ::pread(fd.get(), block.data(), block.size(), static_cast<off_t>(offset));
      });
      // Shrank or failed: the writer is dropped unfinished, so the connection is aborted and
      // the client sees a truncated body (a gzip one without its trailer).
      if (n <= 0) return;
      block.resize(static_cast<std::size_t>(n));
      offset += static_cast<std::uint64_t>(n);
      remaining -= static_cast<std::uint64_t>(n);
      if (gzip) {
        block = gzip->run(block, false);
        if (block.empty()) continue;
      }
      if (!writer->write(std::move(block))) return;
    }
    if (gzip && !writer->write(gzip->run({}, true))) return;
    writer->finish();
  }
};

std::string quote_filename(const std::string& name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) continue;
    out += c;
  }
  return out + "\"";
}

}  // namespace

Status serve_download(const std::string& path, const User& user, unsigned version, Coding coding,
                      const http::Responder& respond) {
  UniqueFd fd;
  {
    // Opened as the user (the permission check happens here); read later through the fd.
    ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(user));
    fd.reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  }
  if (!fd.valid()) {
    if (errno == ENOENT) return not_found("file not found: " + path);
    if (errno == EISDIR) return invalid_argument("path is a directory: " + path);
    return errno_error(errno, "open " + path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error(errno, "stat " + path);
  if (S_ISDIR(st.st_mode)) return invalid_argument("path is a directory: " + path);
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument("not a regular file (FIFO, device or socket): " + path);
  }
  http::Response h{bhttp::status::ok, version};
  h.set(bhttp::field::content_type, "application/octet-stream");
  h.set(bhttp::field::content_disposition, "inline; filename=" + quote_filename(name_of(path)));
  h.set(bhttp::field::vary, "Accept-Encoding");
  auto d = std::make_shared<Download>();
  if (coding == Coding::kGzip) {
    d->gzip = std::make_unique<Deflater>();
    if (!d->gzip->ok) return internal_error("zlib: deflateInit2 failed");
    h.set(bhttp::field::content_encoding, "gzip");
  } else {
    h.content_length(static_cast<std::uint64_t>(st.st_size));
  }
  d->fd = std::move(fd);
  d->remaining = static_cast<std::uint64_t>(st.st_size);
  d->writer = respond.stream(std::move(h));
  if (!d->writer) return {};
  d->pump();
  return {};
}

namespace {
// With envd's errno map (errno_error: a request's own path decides the code).
Status write_all(int to, const char* p, std::size_t left) {
  if (int err = os::write_all_errno(to, std::string_view(p, left)); err != 0)
    return errno_error(err, "write");
  return {};
}

Status copy_range(int from, std::uint64_t offset, std::uint64_t length, int to) {
  std::vector<char> buf(256 * 1024);
  while (length > 0) {
    ssize_t n = os::retry_eintr([&] {
      return ::pread(from, buf.data(), std::min<std::uint64_t>(length, buf.size()),
                     static_cast<off_t>(offset));
    });
    if (n < 0) return errno_error(errno, "read upload");
    if (n == 0) return invalid_argument("upload shorter than announced");
    ABX_TRY(write_all(to, buf.data(), static_cast<std::size_t>(n)));
    offset += static_cast<std::uint64_t>(n);
    length -= static_cast<std::uint64_t>(n);
  }
  return {};
}

// Decodes the gzip stream (one member or several, concatenated) in [offset, offset + length) of
// `from` into `to`, at most `max_out` bytes.
Status gunzip_range(int from, std::uint64_t offset, std::uint64_t length, int to,
                    std::uint64_t max_out) {
  z_stream z{};
  if (::inflateInit2(&z, 15 + 16) != Z_OK) return internal_error("zlib: inflateInit2 failed");
  struct End {
    z_stream* z;
    ~End() { ::inflateEnd(z); }
  } end{&z};
  std::vector<char> in(256 * 1024);
  std::vector<char> out(256 * 1024);
  std::uint64_t produced = 0;
  bool member_done = false;  // the last member ended (or nothing was read yet: empty is invalid)
  // Writes `got` decoded bytes from `out`, within the cap on the decoded size.
  auto emit = [&](std::size_t got) -> Status {
    produced += got;
    if (produced > max_out)
      return Error(ErrorCode::kPayloadTooLarge,
                   "the gzip upload decodes to more than " + std::to_string(max_out) + " bytes");
    return write_all(to, out.data(), got);
  };
  while (length > 0) {
    ssize_t n = os::retry_eintr([&] {
      return ::pread(from, in.data(), std::min<std::uint64_t>(length, in.size()),
                     static_cast<off_t>(offset));
    });
    if (n < 0) return errno_error(errno, "read upload");
    if (n == 0) return invalid_argument("upload shorter than announced");
    offset += static_cast<std::uint64_t>(n);
    length -= static_cast<std::uint64_t>(n);
    z.next_in = reinterpret_cast<Bytef*>(in.data());
    z.avail_in = static_cast<uInt>(n);
    while (z.avail_in > 0) {
      if (member_done) {  // another member follows
        if (::inflateReset(&z) != Z_OK) return internal_error("zlib: inflateReset failed");
        member_done = false;
      }
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      int rc = ::inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
        return invalid_argument(std::string("the gzip upload is not valid gzip: ") +
                                (z.msg ? z.msg : "corrupt data"));
      }
      std::size_t got = out.size() - z.avail_out;
      ABX_TRY(emit(got));
      if (rc == Z_STREAM_END) member_done = true;
      if (rc == Z_BUF_ERROR && got == 0) break;  // needs more input
    }
  }
  // The output may still hold decoded bytes when the input ran out exactly at a block's end.
  while (!member_done) {
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    int rc = ::inflate(&z, Z_FINISH);
    std::size_t got = out.size() - z.avail_out;
    ABX_TRY(emit(got));
    if (rc == Z_STREAM_END) break;
    if (got == 0) return invalid_argument("the gzip upload is truncated");
  }
  return {};
}
}  // namespace

namespace {

// The mount a path is on: rename(2) works only within one mount, and two bind mounts of one
// filesystem share st_dev, so the mount id is the test.
Result<std::uint64_t> mount_id_of(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_MNT_ID, &sx) != 0) {
    return errno_error(errno, "stat " + path);
  }
  if (!(sx.stx_mask & STATX_MNT_ID)) {  // before Linux 5.8: the device is the best we have
    return (std::uint64_t{1} << 63) | (std::uint64_t{sx.stx_dev_major} << 32) | sx.stx_dev_minor;
  }
  return sx.stx_mnt_id;
}

// The staging directory for `owner`'s uploads below `parent`, made and checked with envd's own
// credentials. envd's own is `parent`/.abx-spool-<envd's uid> (owned by envd, no write for
// others); another user's is a subdirectory <uid> of it, owned by the user and mode 0700: the HTTP
// layer spools bodies into it as envd, and the upload moves them out as the user, who needs write
// access to it for that. The parent being envd's is what keeps the user from swapping their
// directory for a symlink while envd creates a body in it. envd's own directory is 0711 once it
// holds users' directories (they reach theirs, list nothing).
Result<std::string> private_dir_in(const std::string& parent, const User& owner) {
  const uid_t me = ::geteuid();
  std::string top = (parent == "/" ? "" : parent) + "/.abx-spool-" + std::to_string(me);
  ABX_ASSIGN_OR_RETURN(auto as_envd, FsCreds::act_as_envd());
  const bool nested = owner.uid != me;
  if (::mkdir(top.c_str(), nested ? 0711 : 0700) != 0 && errno != EEXIST) {
    return errno_error(errno, "create the upload staging directory " + top);
  }
  struct stat st {};
  if (::lstat(top.c_str(), &st) != 0) return errno_error(errno, "stat " + top);
  // Someone else's directory (or a symlink) there could redirect or expose uploads.
  if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 066) != 0) {
    return internal_error("the upload staging directory " + top +
                          " is not envd's own (a directory of mode 0700 or 0711 owned by uid " +
                          std::to_string(me) + ")");
  }
  if (!nested) return top;
  if ((st.st_mode & 0777) != 0711 && ::chmod(top.c_str(), 0711) != 0) {
    return errno_error(errno, "chmod the upload staging directory " + top);
  }
  std::string dir = top + "/" + std::to_string(owner.uid);
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (::lchown(dir.c_str(), owner.uid, owner.gid) != 0) {
      return errno_error(errno, "chown the upload staging directory " + dir);
    }
  } else if (errno != EEXIST) {
    return errno_error(errno, "create the upload staging directory " + dir);
  }
  if (::lstat(dir.c_str(), &st) != 0) return errno_error(errno, "stat " + dir);
  if (!S_ISDIR(st.st_mode) || st.st_uid != owner.uid || (st.st_mode & 077) != 0) {
    return internal_error("the upload staging directory " + dir +
                          " is not its user's own (a directory of mode 0700 owned by uid " +
                          std::to_string(owner.uid) + ")");
  }
  return dir;
}

// The topmost ancestor of `dir` (an absolute path without symlinks) on mount `mount`.
Result<std::string> mount_root_of(const std::string& dir, std::uint64_t mount) {
  std::string cur = dir;
  while (cur != "/") {
    std::string parent = dir_of(cur);
    ABX_ASSIGN_OR_RETURN(auto id, mount_id_of(parent));
    if (id != mount) break;
    cur = parent;
  }
  return cur;
}

// Mode, metadata and owner are set while the file is still private, with envd's credentials
// (the HTTP layer spooled it as envd; the metadata is set while envd still owns it).
Status prepare_staged(int fd, const User& owner, const FileMetadata& metadata) {
  ::fchmod(fd, 0644);
  ABX_TRY(set_file_metadata(fd, metadata));
  chown_to(fd, owner);
  return {};
}

// As the user (the caller holds its FsCreds): the rename is what watchers of the target's
// directory see as IN_MOVED_TO (CREATE); the truncate to the file's own size changes nothing but
// raises IN_MODIFY on the target: the WRITE that the e2b SDK waits for after files.write()
// (E2B's envd writes in place, so its watchers see CREATE then WRITE).
Status rename_into_place(int fd, const std::string& staged, const std::string& target) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error(errno, "stat " + staged);
  if (::rename(staged.c_str(), target.c_str()) != 0) {
    return errno_error(errno, "write " + target);
  }
  // Truncating to its own size only raises the WRITE event watchers wait for; the content is
  // already in place, so a failure here is not the upload's failure.
  if (::ftruncate(fd, st.st_size) != 0) return {};
  return {};
}

}  // namespace

Result<std::string> staging_dir_for(const std::string& dir, const std::string& spool_root,
                                    const User& owner) {
  ABX_ASSIGN_OR_RETURN(auto mount, mount_id_of(dir));
  if (auto first = private_dir_in(spool_root, owner); first.ok()) {
    if (auto id = mount_id_of(*first); id.ok() && *id == mount) return first;
  }
  std::unique_ptr<char, decltype(&::free)> real(::realpath(dir.c_str(), nullptr), &::free);
  if (!real) return errno_error(errno, "resolve " + dir);
  ABX_ASSIGN_OR_RETURN(auto root, mount_root_of(real.get(), mount));
  return private_dir_in(root, owner);
}

// Every step on the user's paths runs with the user's credentials; only the staging directory
// (envd's to make) and the spooled body (envd's file until it is handed over) take envd's.
Status place_file(http::BodyFile& spooled, std::uint64_t offset, std::uint64_t length,
                  const std::string& target, const User& owner, const std::string& spool_root,
                  const PlaceOptions& options) {
  std::string dir = dir_of(target);
  {
    ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(owner));
    ABX_TRY(make_upload_dirs(dir, owner));
    struct stat tst {};
    if (::lstat(target.c_str(), &tst) == 0 && S_ISDIR(tst.st_mode)) {
      return invalid_argument("path is a directory: " + target);
    }
  }
  ABX_ASSIGN_OR_RETURN(auto stage, staging_dir_for(dir, spool_root, owner));
  // The whole body, already staged on the target's mount: rename it, no copy.
  if (options.coding == Coding::kIdentity && offset == 0 && length == spooled.size() &&
      dir_of(spooled.path()) == stage) {
    ABX_TRY(prepare_staged(spooled.fd(), owner, options.metadata));
    ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(owner));
    ABX_TRY(rename_into_place(spooled.fd(), spooled.path(), target));
    spooled.release();
    return {};
  }
  ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(owner));
  std::string tmp = stage + "/.abx-upload-XXXXXX";
  UniqueFd out(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!out.valid()) return errno_error(errno, "create a staging file in " + stage);
  auto s = options.coding == Coding::kGzip
               ? gunzip_range(spooled.fd(), offset, length, out.get(), options.max_decoded)
               : copy_range(spooled.fd(), offset, length, out.get());
  if (s.ok()) {
    // The staging file is the user's (made with their credentials): its metadata is set as
    // them, which owning it allows.
    s = prepare_staged(out.get(), owner, options.metadata);
  }
  if (s.ok()) s = rename_into_place(out.get(), tmp, target);
  if (!s.ok()) ::unlink(tmp.c_str());  // the old content stays intact
  return s;
}

namespace {

// Finds `needle` in the file at or after `from`; returns the offset or npos.
std::uint64_t find_in_file(int fd, std::uint64_t size, std::uint64_t from,
                           std::string_view needle) {
  constexpr std::size_t kBlock = 1 << 20;
  std::string buf;
  while (from < size) {
    std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(kBlock + needle.size(), size - from));
    buf.resize(want);
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(from));
    if (n <= 0) return std::string::npos;
    buf.resize(static_cast<std::size_t>(n));
    auto hit = std::string_view(buf).find(needle);
    if (hit != std::string_view::npos) return from + hit;
    if (static_cast<std::size_t>(n) < needle.size()) return std::string::npos;
    from += static_cast<std::uint64_t>(n) - needle.size() + 1;
  }
  return std::string::npos;
}

std::string param_of(std::string_view header, std::string_view key) {
  // key="value" or key=value, case-insensitive key.
  std::string lower = ascii_lower(header);
  std::string k = std::string(key) + "=";
  std::size_t at = 0;
  while ((at = lower.find(k, at)) != std::string::npos) {
    if (at == 0 || lower[at - 1] == ' ' || lower[at - 1] == ';' || lower[at - 1] == '\t') break;
    at += k.size();
  }
  if (at == std::string::npos) return {};
  std::size_t v = at + k.size();
  if (v < header.size() && header[v] == '"') {
    std::string out;
    for (std::size_t i = v + 1; i < header.size() && header[i] != '"'; ++i) {
      if (header[i] == '\\' && i + 1 < header.size()) ++i;
      out += header[i];
    }
    return out;
  }
  std::size_t end = header.find(';', v);
  std::string out(
      header.substr(v, end == std::string_view::npos ? std::string_view::npos : end - v));
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
  return out;
}

}  // namespace

Result<std::vector<MultipartPart>> parse_multipart(int fd, std::uint64_t size,
                                                   std::string_view content_type) {
  std::string boundary = param_of(content_type, "boundary");
  if (boundary.empty() || boundary.size() > 200) {
    return invalid_argument("multipart/form-data without a valid boundary");
  }
  std::string delim = "--" + boundary;
  std::uint64_t pos = find_in_file(fd, size, 0, delim);
  if (pos == std::string::npos) return invalid_argument("multipart body has no boundary line");
  std::vector<MultipartPart> parts;
  for (int guard = 0; guard < 10000; ++guard) {
    pos += delim.size();
    char two[2] = {0, 0};
    if (::pread(fd, two, 2, static_cast<off_t>(pos)) != 2) {
      return invalid_argument("truncated multipart body");
    }
    if (two[0] == '-' && two[1] == '-') return parts;  // closing delimiter
    if (two[0] != '\r' || two[1] != '\n') return invalid_argument("malformed multipart delimiter");
    pos += 2;
    std::string head(static_cast<std::size_t>(std::min<std::uint64_t>(16 * 1024, size - pos)),
                     '\0');
    ssize_t n = ::pread(fd, head.data(), head.size(), static_cast<off_t>(pos));
    if (n < 0) return errno_error(errno, "read upload");
    head.resize(static_cast<std::size_t>(n));
    auto end = head.find("\r\n\r\n");
    if (end == std::string::npos)
      return invalid_argument("multipart part headers too long or truncated");
    MultipartPart part;
    std::string_view hv(head.data(), end + 2);
    while (!hv.empty()) {
      auto eol = hv.find("\r\n");
      std::string_view line = hv.substr(0, eol);
      hv.remove_prefix(eol + 2);
      auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string name = ascii_lower(line.substr(0, colon));
      if (name == "content-disposition") {
        part.name = param_of(line.substr(colon + 1), "name");
        part.filename = param_of(line.substr(colon + 1), "filename");
      }
    }
    std::uint64_t body = pos + end + 4;
    std::uint64_t next = find_in_file(fd, size, body, "\r\n" + delim);
    if (next == std::string::npos) return invalid_argument("multipart part is not terminated");
    part.offset = body;
    part.length = next - body;
    parts.push_back(std::move(part));
    pos = next + 2;
  }
  return invalid_argument("too many multipart parts");
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// An RFC 9110 qvalue ("0", "0.5", "1", "1.000") in thousandths, or -1.
int qvalue(std::string_view v) {
  if (v.empty() || v.size() > 5 || (v[0] != '0' && v[0] != '1')) return -1;
  int q = (v[0] - '0') * 1000;
  if (v.size() == 1) return q;
  if (v[1] != '.') return -1;
  int scale = 100;
  for (std::size_t i = 2; i < v.size(); ++i, scale /= 10) {
    if (v[i] < '0' || v[i] > '9') return -1;
    q += (v[i] - '0') * scale;
  }
  return q > 1000 ? -1 : q;
}

}  // namespace

std::optional<Coding> download_coding(std::string_view accept_encoding) {
  int gzip = -1;
  int identity = -1;
  int any = -1;
  std::string_view rest = accept_encoding;
  for (int items = 0; !rest.empty() && items < 64; ++items) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    auto semi = item.find(';');
    std::string_view name = trim(item.substr(0, semi));
    if (name.empty()) continue;
    int q = 1000;
    if (semi != std::string_view::npos) {
      std::string_view param = trim(item.substr(semi + 1));
      if (param.size() < 2 || (param[0] != 'q' && param[0] != 'Q') || param[1] != '=') continue;
      q = qvalue(trim(param.substr(2)));
      if (q < 0) continue;
    }
    if (boost::beast::iequals(name, "gzip") || boost::beast::iequals(name, "x-gzip")) {
      gzip = std::max(gzip, q);
    } else if (boost::beast::iequals(name, "identity")) {
      identity = std::max(identity, q);
    } else if (name == "*") {
      any = std::max(any, q);
    }
  }
  if (gzip < 0) gzip = std::max(any, 0);
  if (identity < 0) identity = any >= 0 ? any : 1;  // identity is acceptable unless excluded
  if (gzip > 0 && gzip >= identity) return Coding::kGzip;
  if (identity > 0) return Coding::kIdentity;
  return std::nullopt;
}

Result<FileMetadata> upload_metadata(
    const std::vector<std::pair<std::string_view, std::string_view>>& headers) {
  constexpr std::string_view kPrefix = "x-metadata-";
  FileMetadata out;
  std::size_t total = 0;
  for (const auto& [name, value] : headers) {
    if (name.size() < kPrefix.size() ||
        !boost::beast::iequals(name.substr(0, kPrefix.size()), kPrefix)) {
      continue;
    }
    std::string key(name.substr(kPrefix.size()));
    if (key.empty()) return invalid_argument("empty file metadata key (X-Metadata- header)");
    if (key.size() > kMaxMetadataKeyBytes) {
      return invalid_argument("file metadata key longer than " +
                              std::to_string(kMaxMetadataKeyBytes) + " bytes");
    }
    for (char& c : key) {
      if (!is_token_char(c)) {
        return invalid_argument("file metadata keys use only HTTP token characters");
      }
      c = ascii_lower(c);
    }
    if (value.size() > kMaxMetadataValueBytes) {
      return invalid_argument("file metadata value of '" + key + "' longer than " +
                              std::to_string(kMaxMetadataValueBytes) + " bytes");
    }
    for (char c : value) {
      if (c < 0x20 || c > 0x7e) {
        return invalid_argument("file metadata value of '" + key + "' is not printable ASCII");
      }
    }
    for (const auto& [k, v] : out) {
      if (k == key) return invalid_argument("file metadata key '" + key + "' given twice");
    }
    total += key.size() + value.size();
    if (out.size() + 1 > kMaxMetadataEntries || total > kMaxMetadataTotalBytes) {
      return invalid_argument("file metadata over the limit of " +
                              std::to_string(kMaxMetadataEntries) + " entries and " +
                              std::to_string(kMaxMetadataTotalBytes) + " bytes");
    }
    out.emplace_back(std::move(key), std::string(value));
  }
  return out;
}

}  // namespace abx::envd
