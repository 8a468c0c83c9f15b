// Template builds and management against abxd (abx/client/templates.h).
#include "abx/client/templates.h"

#include <archive.h>
#include <archive_entry.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "abx/base/fd.h"
#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "state.h"
#include "transport.h"

namespace abx::client {

namespace fs = std::filesystem;
using detail::Transport;

namespace {

// libarchive, loaded when a build first needs a tar rather than linked: its NEEDED chain (libxml2,
// ICU, nettle, lzma, zstd, lz4, bz2, acl) cost every abx process ~0.85 ms of start-up CPU and
// ~110 page faults (bench/sdk.sh), and only `abx template build` uses it. archive.h gives the
// types and constants; the calls go through these pointers.
struct LibArchive {
// clang-format off
#define ABX_ARCHIVE_FNS(X)                                                                        \
  X(archive_write_new) X(archive_write_free) X(archive_write_set_format_pax_restricted)          \
  X(archive_write_set_bytes_in_last_block) X(archive_write_open2) X(archive_write_header)        \
  X(archive_write_data) X(archive_write_close) X(archive_error_string) X(archive_entry_new)     \
  X(archive_entry_free) X(archive_entry_copy_stat) X(archive_entry_set_pathname)                \
  X(archive_entry_set_uid) X(archive_entry_set_gid) X(archive_entry_set_nlink)                  \
  X(archive_entry_set_symlink)
// clang-format on
#define ABX_ARCHIVE_FIELD(f) decltype(&::f) f = nullptr;
  ABX_ARCHIVE_FNS(ABX_ARCHIVE_FIELD)
#undef ABX_ARCHIVE_FIELD

  // The process's one copy; kUnavailable naming the library when it cannot be loaded.
  static Result<const LibArchive*> get() {
    static const Result<LibArchive> lib = load();
    if (!lib.ok()) return lib.error();
    return &lib.value();
  }

 private:
  static Result<LibArchive> load() {
    // libarchive 3's soname (the archive.h included here is 3.x).
    const char* const name = "libarchive.so.13";
    void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = ::dlerror();
      return unavailable(std::string("building a template needs libarchive (") + name +
                         ", Debian's libarchive13): " + (why ? why : "dlopen failed"));
    }
    LibArchive lib;  // h stays open: the pointers live as long as the process
#define ABX_ARCHIVE_LOAD(f)                                 \
  lib.f = reinterpret_cast<decltype(&::f)>(::dlsym(h, #f)); \
  if (lib.f == nullptr) return unavailable(std::string(name) + " lacks " #f);
    ABX_ARCHIVE_FNS(ABX_ARCHIVE_LOAD)
#undef ABX_ARCHIVE_LOAD
    return lib;
  }
#undef ABX_ARCHIVE_FNS
};

struct TarSink {
  std::string data;
  std::uint64_t max = 0;
  bool over = false;
};

la_ssize_t tar_write(struct archive*, void* client, const void* buf, size_t n) {
  auto* s = static_cast<TarSink*>(client);
  if (s->data.size() + n > s->max) {
    s->over = true;
    return -1;
  }
  s->data.append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

struct WriteDeleter {
  const LibArchive* lib;
  void operator()(struct archive* a) const { lib->archive_write_free(a); }
};
struct EntryDeleter {
  const LibArchive* lib;
  void operator()(archive_entry* e) const { lib->archive_entry_free(e); }
};

class ContextTar {
 public:
  ContextTar(const LibArchive& lib, struct archive* a, TarSink& sink)
      : lib_(lib), a_(a), sink_(sink) {}

  Status add_tree(const fs::path& host, const std::string& rel) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(host, ec)) names.push_back(e.path().filename());
    if (ec) return invalid_argument("cannot read " + host.string() + ": " + ec.message());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const fs::path p = host / n;
      const std::string r = rel.empty() ? n : rel + "/" + n;
      struct stat st;
      if (::lstat(p.c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        ABX_TRY(entry(p, r, st, {}));
        ABX_TRY(add_tree(p, r));
      } else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
        ABX_TRY(entry(p, r, st, {}));
      }
    }
    return {};
  }

  Status add_data(const std::string& rel, const std::string& data) {
    struct stat st {};
    st.st_mode = S_IFREG | 0644;
    st.st_size = static_cast<off_t>(data.size());
    return entry({}, rel, st, &data);
  }

 private:
  Status fail(const std::string& what) {
    if (sink_.over) {
      return Error(ErrorCode::kResourceExhausted,
                   "the build context is larger than " + std::to_string(sink_.max) + " bytes");
    }
    return internal_error("tar " + what + ": " + lib_.archive_error_string(a_));
  }

  Status entry(const fs::path& host, const std::string& rel, const struct stat& st,
               const std::string* data) {
    std::unique_ptr<archive_entry, EntryDeleter> e(lib_.archive_entry_new(), {&lib_});
    lib_.archive_entry_copy_stat(e.get(), &st);
    lib_.archive_entry_set_pathname(e.get(), rel.c_str());
    lib_.archive_entry_set_uid(e.get(), 0);
    lib_.archive_entry_set_gid(e.get(), 0);
    lib_.archive_entry_set_nlink(e.get(), 1);
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      auto target = fs::read_symlink(host, ec);
      if (ec) return invalid_argument("readlink " + host.string() + ": " + ec.message());
      lib_.archive_entry_set_symlink(e.get(), target.c_str());
    }
    if (lib_.archive_write_header(a_, e.get()) != ARCHIVE_OK) return fail(rel);
    if (data) {
      if (lib_.archive_write_data(a_, data->data(), data->size()) < 0) return fail(rel);
      return {};
    }
    if (!S_ISREG(st.st_mode)) return {};
    UniqueFd fd(::open(host.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return invalid_argument("cannot open " + host.string() + ": " + std::strerror(errno));
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf, sizeof(buf)); });
      if (n < 0) return invalid_argument("read " + host.string() + ": " + std::strerror(errno));
      if (n == 0) break;
      if (lib_.archive_write_data(a_, buf, static_cast<std::size_t>(n)) < 0) return fail(rel);
    }
    return {};
  }

  const LibArchive& lib_;
  struct archive* a_;
  TarSink& sink_;
};

// One event of the build stream; a field absent or null is empty, one of another type an error.
Result<BuildEvent> event_of(json::object o) {
  BuildEvent e;
  ABX_ASSIGN_OR_RETURN(auto type, json_optional_string(o, "type", "build event"));
  constexpr std::int64_t kIntMin = std::numeric_limits<int>::min();
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  ABX_ASSIGN_OR_RETURN(auto step, json_optional_int(o, "step", "build event", kIntMin, kIntMax));
  ABX_ASSIGN_OR_RETURN(auto total, json_optional_int(o, "total", "build event", kIntMin, kIntMax));
  ABX_ASSIGN_OR_RETURN(auto instruction, json_optional_string(o, "instruction", "build event"));
  ABX_ASSIGN_OR_RETURN(auto line, json_optional_string(o, "line", "build event"));
  ABX_ASSIGN_OR_RETURN(auto message, json_optional_string(o, "message", "build event"));
  // "cached" is a step's boolean; the "done" event's is the count of cached steps (left in raw).
  std::optional<bool> cached;
  if (type == "step") {
    ABX_ASSIGN_OR_RETURN(cached, json_optional_bool(o, "cached", "build event"));
  }
  ABX_ASSIGN_OR_RETURN(auto bytes, json_optional_int(o, "bytes", "build event"));
  e.type = std::move(type).value_or("");
  e.step = static_cast<int>(step.value_or(0));
  e.total = static_cast<int>(total.value_or(0));
  e.instruction = std::move(instruction).value_or("");
  e.line = std::move(line).value_or("");
  e.message = std::move(message).value_or("");
  if (cached) e.cached = *cached;
  if (bytes) e.bytes = *bytes;
  e.raw = std::move(o);
  return e;
}

ErrorCode code_named(std::string_view name) {
  for (auto c :
       {ErrorCode::kInvalidArgument, ErrorCode::kNotFound, ErrorCode::kFailedPrecondition,
        ErrorCode::kResourceExhausted, ErrorCode::kUnavailable, ErrorCode::kDeadlineExceeded,
        ErrorCode::kUnauthenticated, ErrorCode::kPermissionDenied, ErrorCode::kUnimplemented}) {
    if (error_code_name(c) == name) return c;
  }
  return ErrorCode::kInternal;
}

// The Dockerfile of a build: its path inside the context, or one sent along (extra_name,
// extra_data) under a name the context cannot have.
struct BuildDockerfile {
  std::string path = "Dockerfile";
  std::string extra_name, extra_data;
};

Result<BuildDockerfile> place_dockerfile(const std::string& context_dir,
                                         const std::string& dockerfile) {
  BuildDockerfile out;
  if (!dockerfile.empty()) {
    std::error_code ec;
    const fs::path ctx = fs::weakly_canonical(context_dir, ec);
    const fs::path df = fs::weakly_canonical(dockerfile, ec);
    auto rel = df.lexically_relative(ctx);
    if (!rel.empty() && *rel.begin() != ".." && fs::exists(df)) {
      out.path = rel.string();
    } else {
      std::ifstream in(dockerfile, std::ios::binary);
      if (!in) return not_found("Dockerfile " + dockerfile + " not found");
      out.extra_data.assign(std::istreambuf_iterator<char>(in), {});
      out.extra_name = ".abx-build/Dockerfile";
      out.path = out.extra_name;
    }
  }
  return out;
}

// POST /templates/build's target: the name, the Dockerfile's path and the build args.
std::string build_target(const BuildOptions& options, const std::string& dockerfile) {
  std::string target = "/templates/build?name=" + detail::url_encode(options.name) +
                       "&dockerfile=" + detail::url_encode(dockerfile);
  for (const auto& [k, v] : options.build_args) {
    target += "&buildarg=" + detail::url_encode(k + "=" + v);
  }
  return target;
}

}  // namespace

Result<std::string> tar_context(const std::string& context_dir, std::uint64_t max_bytes,
                                const std::string& extra_name, const std::string& extra_data) {
  std::error_code ec;
  if (!fs::is_directory(context_dir, ec)) {
    return not_found("build context " + context_dir + " is not a directory");
  }
  ABX_ASSIGN_OR_RETURN(const LibArchive* lib, LibArchive::get());
  TarSink sink;
  sink.max = max_bytes;
  std::unique_ptr<struct archive, WriteDeleter> a(lib->archive_write_new(), {lib});
  lib->archive_write_set_format_pax_restricted(a.get());
  lib->archive_write_set_bytes_in_last_block(a.get(), 1);
  if (lib->archive_write_open2(a.get(), &sink, nullptr, tar_write, nullptr, nullptr) !=
      ARCHIVE_OK) {
    return internal_error(std::string("tar: ") + lib->archive_error_string(a.get()));
  }
  ContextTar t(*lib, a.get(), sink);
  ABX_TRY(t.add_tree(context_dir, ""));
  if (!extra_name.empty()) ABX_TRY(t.add_data(extra_name, extra_data));
  if (lib->archive_write_close(a.get()) != ARCHIVE_OK) {
    if (sink.over) {
      return Error(ErrorCode::kResourceExhausted,
                   "the build context is larger than " + std::to_string(max_bytes) + " bytes");
    }
    return internal_error(std::string("tar: ") + lib->archive_error_string(a.get()));
  }
  return std::move(sink.data);
}

Result<json::object> build_template(const std::string& context_dir, const BuildOptions& options,
                                    const BuildCallback& on_event, const ConnectionConfig& config) {
  if (options.name.empty()) return invalid_argument("build: a template name is required");
  ABX_ASSIGN_OR_RETURN(const BuildDockerfile df, place_dockerfile(context_dir, options.dockerfile));
  const std::string& dockerfile = df.path;
  ABX_ASSIGN_OR_RETURN(
      auto body, tar_context(context_dir, options.max_context_bytes, df.extra_name, df.extra_data));
  if (on_event) {
    const auto size = static_cast<std::int64_t>(body.size());
    on_event(*event_of(json::object{{"type", "context"}, {"bytes", size}}));
  }

  Transport t(config);
  ABX_ASSIGN_OR_RETURN(auto ep, detail::parse_http_url(config.api_url));
  auto req =
      http::make_request(bhttp::verb::post, build_target(options, dockerfile), std::move(body));
  req.set(bhttp::field::content_type, "application/x-tar");
  if (!config.api_key.empty()) req.set("X-API-KEY", config.api_key);
  t.prepare(ep, req);
  ABX_ASSIGN_OR_RETURN(auto conn, t.open_stream(ep));

  // Each line is handled as it arrives; an error answer (not a stream) is kept to be mapped
  // to an Error once the status is known.
  std::string pending, raw;
  std::optional<json::object> done;
  std::optional<Error> failed;
  auto handle_line = [&](std::string_view line) {
    auto v = parse_json_strict(line);
    if (!v.ok() || !v->is_object() || !v->as_object().if_contains("type")) return;
    auto read = event_of(std::move(v->as_object()));
    if (!read.ok()) {
      if (!failed) failed = internal_error(read.error().message());
      return;
    }
    BuildEvent& e = *read;
    if (e.type == "done") {
      auto* tv = e.raw.if_contains("template");
      done = tv && tv->is_object() ? tv->as_object() : json::object{};
    } else if (e.type == "error") {
      std::string code;
      if (auto* c = e.raw.if_contains("code"); c && c->is_string()) code = c->as_string();
      failed = Error(code_named(code), e.message);
    }
    if (on_event) on_event(e);
  };
  auto res = conn->send_streaming(
      std::move(req),
      [&](std::string_view piece) {
        if (raw.size() < 64 * 1024) raw.append(piece.substr(0, 64 * 1024 - raw.size()));
        pending.append(piece);
        std::size_t nl;
        while ((nl = pending.find('\n')) != std::string::npos) {
          handle_line(std::string_view(pending).substr(0, nl));
          pending.erase(0, nl + 1);
        }
        return true;
      },
      // A RUN step may print nothing for a long time.
      std::chrono::hours(2));
  if (!res.ok()) return res.error();
  if (res->result_int() / 100 != 2) {
    res->body() = raw;
    return detail::error_from_response(*res, detail::Plane::kControl,
                                       "build template " + options.name);
  }
  if (!pending.empty()) handle_line(pending);
  if (failed) return *failed;
  if (!done) return unavailable("build template " + options.name + ": the stream ended early");
  return std::move(*done);
}

Result<json::object> template_image(std::string_view template_id, const ConnectionConfig& config) {
  Transport t(config);
  ABX_ASSIGN_OR_RETURN(
      auto v, detail::control_json(t, bhttp::verb::get,
                                   "/templates/" + detail::url_encode(template_id) + "/image",
                                   nullptr, true, "template " + std::string(template_id)));
  if (!v.is_object()) return internal_error("template image: expected a JSON object");
  return v.as_object();
}

Status delete_template(std::string_view template_id, const ConnectionConfig& config) {
  Transport t(config);
  ABX_TRY(detail::control_json(t, bhttp::verb::delete_,
                               "/templates/" + detail::url_encode(template_id), nullptr, true,
                               "remove template " + std::string(template_id)));
  return {};
}

Result<json::object> push_template(std::string_view template_id, std::string_view ref,
                                   const ConnectionConfig& config, bool bare) {
  Transport t(config);
  json::value body = json::object{{"ref", ref}, {"bare", bare}};
  // A push takes as long as its layers: no retry (not idempotent in time), a long timeout.
  ABX_ASSIGN_OR_RETURN(
      auto v, detail::control_json(t, bhttp::verb::post,
                                   "/templates/" + detail::url_encode(template_id) + "/push", &body,
                                   false, "push template " + std::string(template_id)));
  if (!v.is_object()) return internal_error("push: expected a JSON object");
  return v.as_object();
}

}  // namespace abx::client
