// The template build engine: one function per kind of step, and build() running them in order
// over a BuildState (the image so far).
#include "template_build.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "abx/auth/signing.h"
#include "abx/base/ascii.h"
#include "abx/base/fd.h"
#include "abx/base/hex.h"
#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/image/compose.h"
#include "abx/image/dockerfile.h"
#include "abx/image/layer.h"
#include "abx/templates/template.h"
#include "build_context.h"

namespace abx::platform {

namespace fs = std::filesystem;
namespace json = boost::json;

bool valid_template_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!lower_alnum(name[0])) return false;
  for (char c : name) {
    if (!lower_alnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

namespace {

constexpr const char* kDefaultPath =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr std::size_t kMaxDockerfileBytes = 1 << 20;
constexpr std::size_t kMaxLogLine = 16 * 1024;

struct Layer {
  std::string digest;
  std::int64_t size = 0;
  std::string diff_id;
  std::string media_type = image::kLayerMediaType;
};

// The image being built.
struct BuildState {
  std::vector<Layer> layers;
  image::ImageConfig config;
  std::map<std::string, std::string> args;  // ARG values in scope
  std::map<std::string, int> unset_args;    // ARGs in scope without a value -> their line
  int user_line = 0;                        // the USER instruction in effect (0: none)
  bool cmd_inherited = false;               // CMD came from the base image
};

// A removable temporary directory.
struct WorkDir {
  std::string path;
  ~WorkDir() {
    if (path.empty()) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Result<std::string> read_small_file(const std::string& path, std::size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return not_found(path + ": " + std::strerror(errno));
  std::string out;
  std::string buf(64 * 1024, '\0');
  for (;;) {
    ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf.data(), buf.size()); });
    if (n < 0) return internal_error("read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    out.append(buf.data(), static_cast<std::size_t>(n));
    if (out.size() > max) {
      return invalid_argument(path + " is larger than " + std::to_string(max) + " bytes");
    }
  }
  return out;
}

Status write_file_atomic(const fs::path& path, std::string_view data) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return internal_error("create " + path.parent_path().string() + ": " + ec.message());
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return internal_error("write " + tmp.string());
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return internal_error("rename " + path.string() + ": " + ec.message());
  }
  return {};
}

std::string random_hex(std::size_t bytes) {
  std::random_device rd;
  std::string raw;
  for (std::size_t i = 0; i < bytes; ++i) raw.push_back(static_cast<char>(rd() & 0xff));
  return to_hex(raw);
}

std::string key_of(std::initializer_list<std::string_view> parts) {
  std::string joined;
  for (auto p : parts) {
    joined.append(p);
    joined.push_back('\0');
  }
  return auth::sha256_hex(joined);
}

std::string chain_id(const BuildState& st) {
  std::string s;
  for (const auto& l : st.layers) s += l.diff_id + "\n";
  return auth::sha256_hex(s);
}

std::map<std::string, std::string> env_map(const image::ImageConfig& c) {
  std::map<std::string, std::string> m;
  for (const auto& kv : c.env) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

void set_env(image::ImageConfig& c, const std::string& k, const std::string& v) {
  for (auto& kv : c.env) {
    if (kv.compare(0, k.size() + 1, k + "=") == 0) {
      kv = k + "=" + v;
      return;
    }
  }
  c.env.push_back(k + "=" + v);
}

// ARGs, then ENV over them: what $VARs expand to.
std::map<std::string, std::string> vars_of(const BuildState& st) {
  auto m = st.args;
  for (auto& [k, v] : env_map(st.config)) m[k] = v;
  return m;
}

// Who a RUN runs as: the Dockerfile's USER resolved in the image so far.
struct RunAs {
  std::uint32_t uid = 0, gid = 0;
  std::vector<std::uint32_t> groups;
  std::string home = "/";
};

bool parse_id(std::string_view s, std::uint32_t& out) {
  if (s.empty() || s.size() > 10) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v >= 0xffffffffu) return false;
  out = static_cast<std::uint32_t>(v);
  return true;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t i = 0;
  for (;;) {
    std::size_t j = s.find(sep, i);
    out.emplace_back(s.substr(i, j == std::string_view::npos ? j : j - i));
    if (j == std::string_view::npos) return out;
    i = j + 1;
  }
}

// The image's `rel` ("etc/passwd"): the topmost layer's regular file, empty when no layer has
// one or a whiteout (of it or of its first component) hides the lower ones.
Result<std::string> image_file(const std::vector<std::string>& lowers, const std::string& rel) {
  auto whiteout = [](const struct stat& st) { return S_ISCHR(st.st_mode) && st.st_rdev == 0; };
  for (auto it = lowers.rbegin(); it != lowers.rend(); ++it) {
    struct stat st;
    const std::string full = *it + "/" + rel;
    if (::lstat(full.c_str(), &st) == 0) {
      if (S_ISREG(st.st_mode)) return read_small_file(full, 4 << 20);
      return std::string();
    }
    const std::string top = *it + "/" + rel.substr(0, rel.find('/'));
    if (::lstat(top.c_str(), &st) == 0 && whiteout(st)) return std::string();
  }
  return std::string();
}

// `name` on the image's `path` (a PATH value), as execvp would find it: the first
// "<dir>/<name>" some layer has (topmost first, a whiteout of it or of its folder hiding the lower
// ones), or `name` itself when it holds a '/'. Empty when none has it.
std::string image_which(const std::vector<std::string>& lowers, const std::string& path,
                        const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  auto whiteout = [](const struct stat& st) { return S_ISCHR(st.st_mode) && st.st_rdev == 0; };
  for (const auto& dir : split(path, ':')) {
    if (!dir.starts_with('/') || dir.find("..") != std::string::npos) continue;
    const std::string full = (dir.ends_with('/') ? dir : dir + "/") + name;
    for (auto it = lowers.rbegin(); it != lowers.rend(); ++it) {
      struct stat st;
      if (::lstat((*it + full).c_str(), &st) == 0) {
        if (!whiteout(st) && !S_ISDIR(st.st_mode)) return full;
        break;
      }
      const std::string folder = *it + dir;
      if (::lstat(folder.c_str(), &st) == 0 && whiteout(st)) break;
    }
  }
  return {};
}

// USER name|uid[:group|gid] as runc resolves it: a name must be in /etc/passwd, which gives the
// uid, the primary gid and HOME; a numeric uid need not be (gid 0 then); without an explicit
// group, the groups of /etc/group that list the user are the supplementary ones.
Result<RunAs> resolve_user(const std::string& spec, const std::vector<std::string>& lowers) {
  RunAs r;
  const auto colon = spec.find(':');
  const std::string user = spec.empty() ? "0" : spec.substr(0, colon);
  ABX_ASSIGN_OR_RETURN(auto passwd, image_file(lowers, "etc/passwd"));
  std::string name;
  bool found = false;
  for (const auto& line : split(passwd, '\n')) {
    auto f = split(line, ':');
    if (f.size() < 4 || line.starts_with('#')) continue;
    if (f[0] != user && f[2] != user) continue;
    if (!parse_id(f[2], r.uid) || !parse_id(f[3], r.gid)) continue;
    if (f.size() > 5 && !f[5].empty()) r.home = f[5];
    name = f[0];
    found = true;
    break;
  }
  if (!found && !parse_id(user, r.uid)) {
    return invalid_argument("USER " + spec + ": no user '" + user + "' in the image's /etc/passwd");
  }
  if (colon != std::string::npos) {
    const std::string group = spec.substr(colon + 1);
    if (!parse_id(group, r.gid)) {
      ABX_ASSIGN_OR_RETURN(auto groups, image_file(lowers, "etc/group"));
      bool gfound = false;
      for (const auto& line : split(groups, '\n')) {
        auto f = split(line, ':');
        if (f.size() >= 3 && f[0] == group && parse_id(f[2], r.gid)) {
          gfound = true;
          break;
        }
      }
      if (!gfound) {
        return invalid_argument("USER " + spec + ": no group '" + group +
                                "' in the image's /etc/group");
      }
    }
  } else if (found && !spec.empty()) {
    ABX_ASSIGN_OR_RETURN(auto groups, image_file(lowers, "etc/group"));
    for (const auto& line : split(groups, '\n')) {
      auto f = split(line, ':');
      std::uint32_t gid = 0;
      if (f.size() < 4 || !parse_id(f[2], gid) || gid == r.gid) continue;
      for (const auto& m : split(f[3], ',')) {
        if (m == name && r.groups.size() < runtime::kMaxGroups) r.groups.push_back(gid);
      }
    }
  }
  return r;
}

json::array str_array(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

std::vector<std::string> strings_of(const json::value* v) {
  std::vector<std::string> out;
  if (v && v->is_array()) {
    for (const auto& e : v->as_array()) {
      if (e.is_string()) out.emplace_back(e.as_string());
    }
  }
  return out;
}

// The build cache: key -> layer, in <store root>/build-cache.json.
class Cache {
 public:
  explicit Cache(std::string path) : path_(std::move(path)) {
    auto text = read_small_file(path_, 64 << 20);
    if (!text.ok()) return;
    boost::system::error_code ec;
    auto v = json::parse(*text, ec);
    if (ec || !v.is_object()) return;
    for (const auto& [k, e] : v.as_object()) {
      if (!e.is_object()) continue;
      const auto& o = e.as_object();
      Layer l;
      if (auto* d = o.if_contains("digest"); d && d->is_string()) l.digest = d->as_string();
      if (auto* d = o.if_contains("diff_id"); d && d->is_string()) l.diff_id = d->as_string();
      if (auto* d = o.if_contains("size"); d && d->is_int64()) l.size = d->as_int64();
      if (!l.digest.empty() && !l.diff_id.empty()) entries_[std::string(k)] = l;
    }
  }
  const Layer* find(const std::string& key, const image::Store& store) const {
    auto it = entries_.find(key);
    if (it == entries_.end() || !store.has_blob(it->second.digest)) return nullptr;
    return &it->second;
  }
  Status put(const std::string& key, const Layer& l) {
    entries_[key] = l;
    json::object o;
    for (const auto& [k, e] : entries_) {
      o[k] = json::object{{"digest", e.digest}, {"diff_id", e.diff_id}, {"size", e.size}};
    }
    return write_file_atomic(path_, json::serialize(o));
  }

 private:
  std::string path_;
  std::map<std::string, Layer> entries_;
};

class Build {
 public:
  Build(const TemplateBuildOptions& opt, const BuildRequest& req, const BuildProgress& progress,
        const Logger& log, const std::atomic<bool>& stopping)
      : stopping_(stopping),
        opt_(opt),
        req_(req),
        progress_(progress),
        log_(log),
        store_(*opt.store),
        cache_(store_.root() + "/build-cache.json") {}

  Result<BuildResult> run();

 private:
  const std::atomic<bool>& stopping_;
  bool cancelled() const { return stopping_ || (req_.cancelled && req_.cancelled()); }
  // `text` with the stage's ARG and ENV values, or the error for a plain $V of an ARG that has no
  // value (no default, no --build-arg): almost always a forgotten --build-arg.
  Result<std::string> expand(std::string_view text, const BuildState& st) const {
    const auto env = env_map(st.config);
    for (const auto& v : image::plain_var_refs(text)) {
      auto u = st.unset_args.find(v);
      if (u != st.unset_args.end() && !env.count(v)) {
        return invalid_argument("$" + v + " has no value: ARG " + v + " (line " +
                                std::to_string(u->second) +
                                ") has no default and the build got no --build-arg " + v + "=…");
      }
    }
    return image::expand_vars(text, vars_of(st));
  }
  Result<std::string> expand(std::string_view text) const { return expand(text, st_); }
  Error at(const image::Instruction& in, const Error& e) const {
    return e.with_context(req_.dockerfile + ":" + std::to_string(in.line));
  }
  // A cache hit for `key`: announces step i as CACHED and takes its layer.
  bool from_cache(const std::string& key, std::size_t i, const image::Instruction& in) {
    if (req_.no_cache_from_line > 0 && in.line >= req_.no_cache_from_line) return false;
    const Layer* hit = cache_.find(key, store_);
    if (hit == nullptr) return false;
    step(i, in, true);
    st_.layers.push_back(*hit);
    return true;
  }

  void step(std::size_t i, const image::Instruction& in, bool cached, std::string shown = {}) {
    if (cached) ++cached_;
    if (!progress_) return;
    progress_(json::object{{"type", "step"},
                           {"step", i + 1},
                           {"total", total_},
                           {"instruction", shown.empty() ? in.text : shown},
                           {"cached", cached}});
  }
  // A step's new layer: into the cache under `key` and onto the image, announced with its
  // size (the progress shows the bytes each step adds).
  Status keep_layer(std::size_t i, const std::string& key, Layer layer) {
    ABX_TRY(cache_.put(key, layer));
    if (progress_) {
      progress_(json::object{
          {"type", "layer"}, {"step", i + 1}, {"digest", layer.digest}, {"bytes", layer.size}});
    }
    st_.layers.push_back(std::move(layer));
    return {};
  }
  void log_line(std::string line) {
    if (progress_) progress_(json::object{{"type", "log"}, {"line", std::move(line)}});
  }

  Result<std::string> derive_template_yaml() const;
  // Makes the workspace under <home>/build-work and extracts the build context into ctx_.
  Status make_workspace();
  // .dockerignore: what it excludes leaves the context before any step.
  Status apply_dockerignore();
  // ENV, LABEL, USER, CMD and ENTRYPOINT: the stage's image configuration, no layer.
  Status config_step(std::size_t i, const image::Instruction& in);
  // Tags the built image `manifest_digest` and writes its template.yaml (`yaml`).
  Status publish(const std::string& manifest_digest, const std::string& yaml);
  // `announce(cached)` emits the step line: before a pull or import (so their progress follows
  // it), after a store lookup otherwise.
  Status from(const image::Instruction& in, const std::function<void(bool)>& announce);
  // The stage starts from `img` (FROM `name`): its layers and configuration.
  Status take_image(const std::string& name, const image::Image& img);
  Status run_step(std::size_t i, const image::Instruction& in);
  // A `server.python` template: the module byte-compiled into its __pycache__ by the image's
  // own python3, as a last layer (docs/python.md). Never fails the build: without it the
  // worker compiles the module at each start, as before.
  Status python_bytecode_step(const std::string& yaml);
  Status copy_step(std::size_t i, const image::Instruction& in);
  Status arg_step(std::size_t i, const image::Instruction& in);
  // An earlier stage's filesystem, flattened once into the workspace (COPY --from).
  Result<std::string> stage_root(int stage);
  Status workdir_step(std::size_t i, const image::Instruction& in);
  Result<Layer> layer_from(const std::string& dir, bool overlay_upper,
                           const std::set<std::string>& skip = {});
  Result<std::string> write_image(const BuildState& st);
  Result<std::string> write_image() { return write_image(st_); }
  Result<std::vector<std::string>> lower_dirs();
  Result<int> run_sandbox(const image::Instruction& in, const std::vector<std::string>& lowers,
                          const std::vector<std::string>& env, const RunAs& as, Layer& layer);
  // A RUN's output from `fd` into the build log, line by line, until EOF, a cancel or
  // run_timeout (true).
  bool stream_output(int fd);
  std::set<std::string> mount_points() const;
  std::string scratch(const std::string& what) {
    std::string p = work_.path + "/" + what + "-" + std::to_string(++scratch_n_);
    fs::create_directories(p);
    return p;
  }

  const TemplateBuildOptions& opt_;
  const BuildRequest& req_;
  const BuildProgress& progress_;
  const Logger& log_;
  image::Store& store_;
  Cache cache_;
  WorkDir work_;
  std::string ctx_;
  BuildState st_;                   // the stage being built
  BuildState globals_;              // ARGs before the first FROM (FROM lines see these)
  std::vector<BuildState> stages_;  // finished stages, by index
  std::map<int, std::string> stage_roots_;
  const image::Dockerfile* df_ = nullptr;
  std::set<std::string> used_build_args_;
  std::size_t total_ = 0;
  int cached_ = 0;
  bool all_cached_ = true;  // every step so far came from the cache
  bool first_from_seen_ = false;
  int scratch_n_ = 0;
};

// template.yaml for the built template: abx metadata from the context's template.yaml (if
// any), id and image set here. Checked with the catalog's own parser before anything runs.
Result<std::string> Build::derive_template_yaml() const {
  YAML::Node out(YAML::NodeType::Map);
  out["id"] = req_.name;
  out["image"] = "abx:" + req_.name;
  const std::string ctx_yaml = ctx_ + "/template.yaml";
  struct stat sst;
  if (::lstat(ctx_yaml.c_str(), &sst) == 0) {
    ABX_ASSIGN_OR_RETURN(auto text, read_small_file(ctx_yaml, templates::kMaxTemplateFileBytes));
    // The catalog's strict parser first: its errors carry file:line:col.
    ABX_TRY(templates::parse_template(text, "template.yaml"));
    YAML::Node in;
    try {
      in = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      return invalid_argument(std::string("template.yaml: ") + e.what());
    }
    for (const char* k : {"description", "server", "capabilities", "resources", "custom_commands",
                          "network", "timeout"}) {
      if (in[k]) out[k] = in[k];
    }
  } else if (out["description"].IsNull() || !out["description"]) {
    out["description"] = "built from " + req_.dockerfile;
  }
  YAML::Emitter em;
  em << out;
  std::string text = std::string(kBuiltMarker) + "\n" + em.c_str() + "\n";
  ABX_TRY(templates::parse_template(text, "template.yaml (generated)"));
  return text;
}

Result<std::vector<std::string>> Build::lower_dirs() {
  if (st_.layers.empty()) return std::vector<std::string>{scratch("empty")};
  ABX_ASSIGN_OR_RETURN(auto digest, write_image());
  ABX_ASSIGN_OR_RETURN(auto img, store_.add_image(digest));
  if (img.layer_dirs.empty()) return std::vector<std::string>{scratch("empty")};
  return img.layer_dirs;
}

// The OCI config and manifest of the image so far, as blobs; returns the manifest digest.
// Both are deterministic (no timestamps), so an unchanged build rewrites the same blobs.
Result<std::string> Build::write_image(const BuildState& st) {
  std::vector<image::LayerRef> layers;
  for (const auto& l : st.layers) layers.push_back({l.digest, l.size, l.media_type, l.diff_id});
  return image::write_image_blobs(store_, layers, st.config);
}

Result<std::string> Build::stage_root(int stage) {
  if (auto it = stage_roots_.find(stage); it != stage_roots_.end()) return it->second;
  const BuildState& st = stages_.at(static_cast<std::size_t>(stage));
  const std::string root = scratch("stage-root");
  if (!st.layers.empty()) {
    ABX_ASSIGN_OR_RETURN(auto digest, write_image(st));
    ABX_ASSIGN_OR_RETURN(auto img, store_.add_image(digest));
    ABX_TRY(build::flatten_layers(img.layer_dirs, root));
  }
  stage_roots_[stage] = root;
  return root;
}

Result<Layer> Build::layer_from(const std::string& dir, bool overlay_upper,
                                const std::set<std::string>& skip) {
  image::LayerWriteOptions lo;
  lo.overlay_upper = overlay_upper;
  lo.skip_if_empty = skip;
  ABX_ASSIGN_OR_RETURN(auto blob, image::write_layer(store_, dir, lo));
  Layer l;
  l.digest = blob.digest;
  l.size = blob.size;
  l.diff_id = blob.diff_id;
  return l;
}

// FROM: the base image's layers (with their descriptors and diff_ids) and config.
Status Build::from(const image::Instruction& in, const std::function<void(bool)>& announce) {
  ABX_ASSIGN_OR_RETURN(auto name, expand(in.args.at(0), globals_));
  if (name == "scratch") return {};
  // An earlier stage (the parser refused this one and later ones by name; $VARs are checked
  // here).
  for (std::size_t k = 0; k < df_->stages.size(); ++k) {
    const std::string lname = ascii_lower(name);
    if (df_->stages[k].name.empty() || df_->stages[k].name != lname) continue;
    if (k >= stages_.size()) {
      return invalid_argument("FROM " + name + ": stage '" + lname + "' is defined at line " +
                              std::to_string(df_->stages[k].line) +
                              ": a stage can only build on earlier stages");
    }
    st_.layers = stages_[k].layers;
    st_.config = stages_[k].config;
    st_.cmd_inherited = stages_[k].cmd_inherited;
    st_.user_line = stages_[k].user_line;
    return {};
  }
  Result<image::Image> img = not_found("");
  // A template or tag the requester may not use (another team's build) is not there for it.
  const std::string bare = name.starts_with("abx:") ? name.substr(4) : name;
  if (req_.may_use && !req_.may_use(bare))
    return not_found("FROM " + name + ": no template or image '" + bare + "'");
  if (name.starts_with("abx:")) {
    img = store_.get(name.substr(4));
    if (!img.ok())
      return not_found("FROM " + name + ": no image '" + name.substr(4) + "' in the store");
  } else {
    if (valid_template_name(name) && opt_.template_image) {
      img = opt_.template_image(name);  // a template of the catalog: its image
      if (!img.ok() && img.error().code() != ErrorCode::kNotFound) {
        return img.error().with_context("FROM " + name);
      }
    }
    if (!img.ok() && valid_template_name(name)) img = store_.get(name);  // a store tag
    if (!img.ok()) {
      ABX_ASSIGN_OR_RETURN(auto ref, image::parse_reference(name));
      img = store_.get(ref.str());
      if (!img.ok()) {
        announce(false);
        if (ref.transport != image::Transport::kRegistry) {
          img = store_.import(ref, [this](std::string_view l) { log_line(std::string(l)); });
        } else if (opt_.pull) {
          img = opt_.pull(ref, progress_);
        } else {
          return unavailable("FROM " + name + ": pulling from registries is not available");
        }
        if (!img.ok()) return img.error().with_context("FROM " + name);
      }
    }
  }
  return take_image(name, *img);
}

Status Build::take_image(const std::string& name, const image::Image& img) {
  ABX_ASSIGN_OR_RETURN(auto manifest_text, store_.read_blob(img.manifest_digest));
  ABX_ASSIGN_OR_RETURN(auto config_text, store_.read_blob(img.config_digest));
  ABX_ASSIGN_OR_RETURN(auto manifest, parse_json_strict(manifest_text));
  ABX_ASSIGN_OR_RETURN(auto config, parse_json_strict(config_text));
  std::vector<std::string> diff_ids;
  if (config.is_object()) {
    if (auto* r = config.as_object().if_contains("rootfs"); r && r->is_object())
      diff_ids = strings_of(r->as_object().if_contains("diff_ids"));
  }
  const json::value* ls =
      manifest.is_object() ? manifest.as_object().if_contains("layers") : nullptr;
  if (!ls || !ls->is_array() || ls->as_array().size() != diff_ids.size()) {
    return internal_error("FROM " + name + ": the image's manifest and config disagree on layers");
  }
  for (std::size_t i = 0; i < diff_ids.size(); ++i) {
    const auto& d = ls->as_array()[i];
    if (!d.is_object()) return internal_error("FROM " + name + ": bad layer descriptor");
    Layer l;
    l.diff_id = diff_ids[i];
    if (auto* v = d.as_object().if_contains("digest"); v && v->is_string())
      l.digest = v->as_string();
    if (auto* v = d.as_object().if_contains("size"); v && v->is_int64()) l.size = v->as_int64();
    if (auto* v = d.as_object().if_contains("mediaType"); v && v->is_string()) {
      std::string mt(v->as_string());
      // Docker's gzip layer type is the same bytes; an OCI manifest names it the OCI way.
      l.media_type = mt == "application/vnd.docker.image.rootfs.diff.tar.gzip"
                         ? std::string(image::kLayerMediaType)
                         : mt;
    }
    st_.layers.push_back(std::move(l));
  }
  st_.config = img.config;
  st_.cmd_inherited = !st_.config.cmd.empty();
  return {};
}

// What the runtime mounts over the image (and so creates in the upper dir when the image lacks
// it): left out of RUN layers when empty.
std::set<std::string> Build::mount_points() const {
  std::set<std::string> s = {"proc", "sys", "dev", "opt", "opt/abx", "run", "run/abx"};
  for (const auto& b : opt_.binds) {
    std::string rel = build::clean_path(b.target).substr(1);
    while (!rel.empty()) {
      s.insert(rel);
      auto slash = rel.rfind('/');
      rel = slash == std::string::npos ? "" : rel.substr(0, slash);
    }
  }
  return s;
}

// Output, line by line, until every process of the sandbox is gone (EOF) or the deadline.
bool Build::stream_output(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + opt_.run_timeout;
  std::string pending;
  char buf[8192];
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (cancelled()) break;
    pollfd pfd{fd, POLLIN, 0};
    int pr = os::retry_eintr([&] {
      return ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    });
    if (pr <= 0) continue;
    ssize_t n = os::retry_eintr([&] { return ::read(fd, buf, sizeof(buf)); });
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos || pending.size() > kMaxLogLine) {
      std::size_t cut = nl == std::string::npos ? kMaxLogLine : nl;
      log_line(pending.substr(0, cut));
      pending.erase(0, nl == std::string::npos ? cut : cut + 1);
    }
  }
  if (!pending.empty()) log_line(pending);
  return timed_out;
}

// Spawns the RUN sandbox, streams its output, waits; the layer comes from its upper dir.
// Returns the wait status.
Result<int> Build::run_sandbox(const image::Instruction& in, const std::vector<std::string>& lowers,
                               const std::vector<std::string>& env, const RunAs& as, Layer& layer) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    return internal_error(std::string("pipe: ") + std::strerror(errno));
  UniqueFd rd(p[0]), wr(p[1]);
  runtime::SandboxConfig sc;
  sc.id = "build-" + random_hex(6);
  sc.state_dir = opt_.state_dir.empty() ? opt_.home + "/builds" : opt_.state_dir;
  sc.rootfs = runtime::RootfsMode::kImage;
  sc.lower_dirs = lowers;
  sc.network = opt_.network;
  sc.userns = opt_.userns;
  sc.argv = in.args;
  sc.env = env;
  sc.cwd = st_.config.working_dir.empty() ? "/" : st_.config.working_dir;
  sc.uid = as.uid;
  sc.gid = as.gid;
  sc.groups = as.groups;
  sc.binds = opt_.binds;
  sc.fds = {{wr.get(), 1}, {wr.get(), 2}};
  sc.limits = opt_.limits;
  sc.disk_bytes = opt_.disk_bytes;
  SandboxNetwork* net = opt_.sandbox_network;
  const bool networked = net && net->enabled() && sc.network == runtime::NetworkMode::kNone;
  const std::string run_id = sc.id;
  struct Detach {
    SandboxNetwork* net;
    std::string id;
    ~Detach() {
      if (net) net->detach(id);
    }
  } detach{networked ? net : nullptr, run_id};
  if (networked) {
    const std::string rc = sc.state_dir + "/resolv.conf";
    std::error_code ec;
    fs::create_directories(sc.state_dir, ec);
    std::ofstream(rc) << net->resolv_conf();
    sc.veth = net->veth_config();
    sc.binds.push_back({rc, "/etc/resolv.conf", false});
    SandboxNetworkSpec spec;
    spec.allow_internet_access = net->default_internet();
    sc.link_rules = [net, run_id, spec](const runtime::VethInfo& link) {
      return net->attach_rules(run_id, link, spec);
    };
    sc.link_ready = [net, run_id](const runtime::VethInfo& link) {
      return net->listen(run_id, link);
    };
  }
  auto sb = runtime::Sandbox::spawn(std::move(sc));
  wr.reset();
  if (!sb.ok()) return Error(sb.error().code(), "RUN could not start: " + sb.error().message());
  const bool timed_out = stream_output(rd.get());
  if (cancelled()) {
    (void)sb->signal(SIGKILL);
    (void)sb->wait();
    (void)sb->destroy();
    return Error(ErrorCode::kUnavailable, "the build was cancelled during RUN");
  }
  if (timed_out) {
    (void)sb->signal(SIGKILL);
    (void)sb->wait();
    (void)sb->destroy();
    return Error(ErrorCode::kDeadlineExceeded,
                 "RUN did not finish within " + std::to_string(opt_.run_timeout.count()) + "s");
  }
  ABX_ASSIGN_OR_RETURN(int status, sb->wait());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::set<std::string> skip = mount_points();
    if (networked) skip.insert("etc/resolv.conf");  // the mount point of abxd's resolv.conf
    auto l = layer_from(sb->upper_dir(), true, skip);
    (void)sb->destroy();
    if (!l.ok()) return l.error();
    layer = std::move(*l);
  } else {
    (void)sb->destroy();
  }
  return status;
}

Status Build::run_step(std::size_t i, const image::Instruction& in) {
  // RUN sees the ARGs as environment variables, under the image's own ENV.
  auto env_vars = st_.args;
  for (auto& [k, v] : env_map(st_.config)) env_vars[k] = v;
  if (!env_vars.count("PATH")) env_vars["PATH"] = std::string(kDefaultPath).substr(5);
  std::vector<std::string> env;
  for (const auto& [k, v] : env_vars) env.push_back(k + "=" + v);
  // The user is part of the key; what it resolves to (ids, HOME) follows from the layers.
  const std::string& user = st_.config.user;
  const std::string key =
      user.empty() ? key_of({"run", chain_id(st_), json::serialize(str_array(in.args)),
                             json::serialize(str_array(env)), st_.config.working_dir})
                   : key_of({"run", chain_id(st_), json::serialize(str_array(in.args)),
                             json::serialize(str_array(env)), st_.config.working_dir, user});
  if (from_cache(key, i, in)) return {};
  all_cached_ = false;
  step(i, in, false);
  ABX_ASSIGN_OR_RETURN(auto lowers, lower_dirs());
  auto as = resolve_user(user, lowers);
  if (!as.ok()) {
    return Error(as.error().code(),
                 as.error().message() +
                     (st_.user_line ? " (USER at line " + std::to_string(st_.user_line) + ")"
                                    : " (the base image's User)"));
  }
  // As Docker: HOME is the user's unless ENV set it.
  if (!env_vars.count("HOME")) env.push_back("HOME=" + as->home);
  Layer layer;
  ABX_ASSIGN_OR_RETURN(int status, run_sandbox(in, lowers, env, *as, layer));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    return Error(ErrorCode::kFailedPrecondition,
                 "RUN exited with " + std::to_string(WEXITSTATUS(status)));
  }
  if (WIFSIGNALED(status)) {
    return Error(ErrorCode::kFailedPrecondition,
                 "RUN was killed by signal " + std::to_string(WTERMSIG(status)));
  }
  return keep_layer(i, key, std::move(layer));
}

// Byte-compiles a `server.python` module (issue 37: create -> first call). Each sandbox gets a
// fresh writable layer, so a module without a usable .pyc is compiled by the worker at every
// start (~1.5 ms of CPU in a sandbox, the .pyc's write into the new layer included). Here the
// image's own interpreter (the one the worker runs: $ABX_PYTHON of the image's ENV, else
// python3 on its PATH) writes <folder>/__pycache__/<name>.<tag>.pyc as a checked-hash pyc
// (PEP 552): valid whatever mtimes the layers' extraction gives, still checked against the
// source at each import, so an edited module is recompiled rather than served stale. It runs as
// root (the worker's user in a sandbox) in a RUN sandbox; its upper dir is the last layer. A
// module that does not compile, or an image without the interpreter, only gets a note in the
// build log: the create then fails with the traceback, as before.
Status Build::python_bytecode_step(const std::string& yaml) {
  auto tmpl = templates::parse_template(yaml, "template.yaml (generated)");
  if (!tmpl.ok() || !tmpl->server || tmpl->server->python_module.empty()) return {};
  const std::string module = tmpl->server->python_module;
  auto env_vars = env_map(st_.config);
  if (!env_vars.count("PATH")) env_vars["PATH"] = std::string(kDefaultPath).substr(5);
  auto py = env_vars.find("ABX_PYTHON");
  const std::string python = py != env_vars.end() && !py->second.empty() ? py->second : "python3";
  if (st_.layers.size() >= runtime::kMaxLowerDirs) {
    log_line("note: " + module + " was not byte-compiled (the image has the most layers already)");
    return {};
  }
  ABX_ASSIGN_OR_RETURN(auto lowers, lower_dirs());
  const std::string exe = image_which(lowers, env_vars["PATH"], python);
  if (exe.empty()) {
    log_line("note: no " + python + " on the image's PATH to byte-compile " + module);
    return {};
  }
  // What runs: py_compile of the one file, into the standard __pycache__ path.
  static constexpr std::string_view kCompile =
      "import py_compile, sys\n"
      "py_compile.compile(sys.argv[1], doraise=True,\n"
      "                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)\n";
  image::Instruction in;
  in.op = image::Op::kRun;
  in.args = {exe, "-I", "-c", std::string(kCompile), module};
  in.text = "(server.python) byte-compile " + module;
  std::vector<std::string> env;
  for (const auto& [k, v] : env_vars) env.push_back(k + "=" + v);
  const std::string key = key_of({"pycompile", chain_id(st_), json::serialize(str_array(in.args)),
                                  json::serialize(str_array(env))});
  if (req_.no_cache_from_line <= 0) {
    if (const Layer* hit = cache_.find(key, store_)) {
      log_line(in.text + ": CACHED");
      st_.layers.push_back(*hit);
      return {};
    }
  }
  log_line(in.text);
  RunAs root;
  root.home = "/root";
  env.push_back("HOME=/root");
  Layer layer;
  ABX_ASSIGN_OR_RETURN(int status, run_sandbox(in, lowers, env, root, layer));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    log_line("note: " + module + " was not byte-compiled (" + python +
             " failed, above): the worker compiles it at each start");
    return {};
  }
  ABX_TRY(cache_.put(key, layer));
  st_.layers.push_back(std::move(layer));
  return {};
}

Status Build::copy_step(std::size_t i, const image::Instruction& in) {
  const bool add = in.op == image::Op::kAdd;
  const bool from_stage = in.from_stage >= 0;
  ABX_ASSIGN_OR_RETURN(auto dest_raw, expand(in.args.back()));
  const std::string base = st_.config.working_dir.empty() ? "/" : st_.config.working_dir;
  const std::string dest = build::clean_path(dest_raw, base);
  // COPY --from keeps the stage's owners unless --chown says otherwise; the context's files
  // belong to root.
  std::uint32_t uid = from_stage ? build::kKeepOwner : 0, gid = uid;
  if (!in.chown.empty()) {
    ABX_ASSIGN_OR_RETURN(auto ug, build::parse_chown(in.chown));
    uid = ug.first;
    gid = ug.second;
  }
  std::string root = ctx_;
  std::string where = "the build context";
  std::string from_chain;
  if (from_stage) {
    ABX_ASSIGN_OR_RETURN(root, stage_root(in.from_stage));
    const auto& s = df_->stages.at(static_cast<std::size_t>(in.from_stage));
    where = "stage " + (s.name.empty() ? std::to_string(in.from_stage) : s.name);
    from_chain = chain_id(stages_.at(static_cast<std::size_t>(in.from_stage)));
  }
  std::vector<std::string> srcs;
  std::string shown = std::string(image::op_name(in.op));
  if (from_stage) shown += " --from=" + in.from;
  bool dest_multi = in.args.size() > 2;  // several sources (or a glob's matches)
  for (std::size_t s = 0; s + 1 < in.args.size(); ++s) {
    ABX_ASSIGN_OR_RETURN(auto src, expand(in.args[s]));
    const std::string what = std::string(image::op_name(in.op)) + " source ";
    auto matches = build::expand_source(root, src);
    if (!matches.ok()) {
      return Error(matches.error().code(), what + src + " not found in " + where);
    }
    for (const auto& m : *matches) {
      auto resolved = build::resolve_in_root(root, m);
      if (!resolved.ok()) {
        return Error(resolved.error().code(), what + m + " not found in " + where);
      }
      srcs.push_back(*resolved);
    }
    if (matches->size() > 1) dest_multi = true;
    shown += " " + src;
  }
  shown += " " + dest_raw;
  const bool dest_is_dir =
      dest_raw.ends_with('/') || dest_multi || dest_raw.ends_with("/.") || dest_raw == ".";
  ABX_ASSIGN_OR_RETURN(auto content, build::content_digest(srcs));
  const std::string key = key_of({add ? "add" : "copy", chain_id(st_), shown, dest,
                                  dest_is_dir ? "dir" : "file", in.chown, content, from_chain});
  if (from_cache(key, i, in)) return {};
  all_cached_ = false;
  step(i, in, false);
  const std::string stage = scratch("stage");
  for (const auto& src : srcs) {
    struct stat s;
    if (add && ::stat(src.c_str(), &s) == 0 && S_ISREG(s.st_mode) && build::is_archive(src)) {
      // ADD of a local archive: its contents go into dest (a directory).
      ABX_TRY(build::make_dir(stage, dest));
      const std::string into = stage + (dest == "/" ? "" : dest);
      ABX_TRY(build::extract_archive(src, into));
      if (!in.chown.empty()) ABX_TRY(build::chown_tree(into, uid, gid));
      continue;
    }
    ABX_TRY(build::copy_into(src, stage, dest, dest_is_dir, uid, gid));
  }
  ABX_TRY(build::reset_parent_times(stage, dest_is_dir ? dest : build::clean_path(dest + "/..")));
  ABX_ASSIGN_OR_RETURN(auto layer, layer_from(stage, false));
  return keep_layer(i, key, std::move(layer));
}

// ARG: a --build-arg, else the default, else (in a stage) the value of the same ARG before the
// first FROM; without any, the ARG has no value and a plain $NAME of it is an error.
Status Build::arg_step(std::size_t i, const image::Instruction& in) {
  const bool global = !first_from_seen_;
  BuildState& st = global ? globals_ : st_;
  const auto& [name, def] = in.pairs.at(0);
  auto given = req_.build_args.find(name);
  st.unset_args.erase(name);
  if (given != req_.build_args.end()) {
    used_build_args_.insert(name);
    st.args[name] = given->second;
  } else if (in.has_default) {
    ABX_ASSIGN_OR_RETURN(st.args[name], expand(def, st));
  } else if (auto g = globals_.args.find(name); !global && g != globals_.args.end()) {
    st.args[name] = g->second;
  } else {
    st.args.erase(name);
    st.unset_args[name] = in.line;
  }
  step(i, in, all_cached_);
  return {};
}

// WORKDIR: the config, and a layer with the directory when no layer has it yet.
Status Build::workdir_step(std::size_t i, const image::Instruction& in) {
  ABX_ASSIGN_OR_RETURN(auto raw, expand(in.args.at(0)));
  const std::string dir =
      build::clean_path(raw, st_.config.working_dir.empty() ? "/" : st_.config.working_dir);
  st_.config.working_dir = dir;
  if (dir == "/") {
    step(i, in, all_cached_);
    return {};
  }
  const std::string key = key_of({"workdir", chain_id(st_), dir});
  if (from_cache(key, i, in)) return {};
  if (!st_.layers.empty()) {
    ABX_ASSIGN_OR_RETURN(auto lowers, lower_dirs());
    for (const auto& l : lowers) {
      struct stat s;
      if (::stat((l + dir).c_str(), &s) == 0 && S_ISDIR(s.st_mode)) {
        step(i, in, all_cached_);
        return {};
      }
    }
  }
  all_cached_ = false;
  step(i, in, false);
  const std::string stage = scratch("workdir");
  ABX_TRY(build::make_dir(stage, dir));
  ABX_ASSIGN_OR_RETURN(auto layer, layer_from(stage, false));
  return keep_layer(i, key, std::move(layer));
}

Status Build::make_workspace() {
  // The workspace (context, staging trees) lives under <home>/build-work, not in the store's
  // tmp/: a gc or a store opened elsewhere empties that. The builder clears leftovers of a
  // crash when abxd starts.
  std::string tmpl = opt_.home + "/build-work/build-XXXXXX";
  std::error_code mk;
  fs::create_directories(opt_.home + "/build-work", mk);
  if (!::mkdtemp(tmpl.data()))
    return internal_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
  work_.path = tmpl;
  ctx_ = work_.path + "/context";
  fs::create_directories(ctx_);
  build::ArchiveLimits al;
  al.max_bytes = opt_.max_context_bytes;
  if (!req_.context_tar.empty()) {
    if (auto s = build::extract_archive(req_.context_tar, ctx_, al); !s.ok()) {
      return Error(s.error().code(), "build context: " + s.error().message());
    }
  }
  for (const auto& [archive, sub] : req_.context_archives) {
    const std::string into = build::clean_path(sub, "/");
    if (into != "/") fs::create_directories(ctx_ + into, mk);
    if (auto s = build::extract_archive(archive, ctx_ + (into == "/" ? "" : into), al); !s.ok()) {
      return Error(s.error().code(), "build context: " + s.error().message());
    }
  }
  for (const auto& [rel, text] : req_.context_files) {
    ABX_TRY(write_file_atomic(fs::path(ctx_ + build::clean_path(rel, "/")), text));
  }
  return {};
}

Status Build::apply_dockerignore() {
  if (struct stat ist; ::lstat((ctx_ + "/.dockerignore").c_str(), &ist) == 0) {
    ABX_ASSIGN_OR_RETURN(auto text, read_small_file(ctx_ + "/.dockerignore", 1 << 20));
    ABX_ASSIGN_OR_RETURN(auto ignore, image::DockerIgnore::parse(text));
    ABX_TRY(build::remove_ignored(ctx_, ignore));
  }
  return {};
}

Status Build::config_step(std::size_t i, const image::Instruction& in) {
  switch (in.op) {
    case image::Op::kEnv:
    case image::Op::kLabel:
      for (const auto& [k, v] : in.pairs) {
        ABX_ASSIGN_OR_RETURN(auto val, expand(v));
        if (in.op == image::Op::kEnv) {
          set_env(st_.config, k, val);
        } else {
          st_.config.labels[k] = val;
        }
      }
      break;
    case image::Op::kUser: {
      ABX_ASSIGN_OR_RETURN(auto val, expand(in.args.at(0)));
      st_.config.user = val;
      st_.user_line = in.line;
      break;
    }
    case image::Op::kCmd:
      st_.config.cmd = in.args;
      st_.cmd_inherited = false;
      break;
    case image::Op::kEntrypoint:
      st_.config.entrypoint = in.args;
      if (st_.cmd_inherited) st_.config.cmd.clear();  // Docker: a new ENTRYPOINT resets CMD
      break;
    default:  // run() sends only the five above here
      break;
  }
  step(i, in, all_cached_);
  return {};
}

Status Build::publish(const std::string& manifest_digest, const std::string& yaml) {
  // Tag, then the template file; a failure after tagging puts the old tag back.
  auto tags = store_.tags();
  auto old = tags.find(req_.name);
  const std::string previous = old == tags.end() ? "" : old->second;
  ABX_TRY(store_.tag(req_.name, manifest_digest));
  const fs::path file = fs::path(opt_.home) / "templates" / req_.name / "template.yaml";
  if (auto s = write_file_atomic(file, yaml); !s.ok()) {
    if (previous.empty()) {
      (void)store_.untag(req_.name);
    } else {
      (void)store_.tag(req_.name, previous);
    }
    return s.error();
  }
  return {};
}

Result<BuildResult> Build::run() {
  ABX_TRY(make_workspace());
  auto df_path = build::resolve_in_root(ctx_, req_.dockerfile);
  if (!df_path.ok()) return invalid_argument(req_.dockerfile + " not found in the build context");
  ABX_ASSIGN_OR_RETURN(auto df_text, read_small_file(*df_path, kMaxDockerfileBytes));
  ABX_ASSIGN_OR_RETURN(auto df, image::parse_dockerfile(df_text, {}, req_.dockerfile));
  ABX_ASSIGN_OR_RETURN(auto yaml, derive_template_yaml());
  // The Dockerfile and template.yaml were read above, so (as with Docker) excluding them in
  // .dockerignore only keeps them out of COPY and ADD.
  ABX_TRY(apply_dockerignore());
  total_ = df.instructions.size();
  df_ = &df;

  for (std::size_t i = 0; i < df.instructions.size(); ++i) {
    const auto& in = df.instructions[i];
    if (cancelled()) return Error(ErrorCode::kUnavailable, "the build was cancelled");
    Status s;
    switch (in.op) {
      case image::Op::kArg:
        s = arg_step(i, in);
        break;
      case image::Op::kFrom: {
        // A new stage: the one before is kept for FROM <stage> and COPY --from.
        if (first_from_seen_) stages_.push_back(std::move(st_));
        st_ = BuildState{};
        first_from_seen_ = true;
        bool announced = false;
        s = from(in, [&](bool cached) {
          announced = true;
          all_cached_ = all_cached_ && cached;
          step(i, in, cached);
        });
        if (s.ok() && !announced) step(i, in, all_cached_);
        break;
      }
      case image::Op::kRun:
        s = run_step(i, in);
        break;
      case image::Op::kCopy:
      case image::Op::kAdd:
        s = copy_step(i, in);
        break;
      case image::Op::kWorkdir:
        s = workdir_step(i, in);
        break;
      case image::Op::kEnv:
      case image::Op::kLabel:
      case image::Op::kUser:
      case image::Op::kCmd:
      case image::Op::kEntrypoint:
        s = config_step(i, in);
        break;
    }
    if (!s.ok()) return at(in, s.error());
    if (st_.layers.size() > runtime::kMaxLowerDirs) {
      return at(in, Error(ErrorCode::kResourceExhausted,
                          "more than " + std::to_string(runtime::kMaxLowerDirs) + " layers"));
    }
  }

  ABX_TRY(python_bytecode_step(yaml));
  // As Docker: a --build-arg no ARG took is reported, not an error.
  for (const auto& [k, v] : req_.build_args) {
    if (!used_build_args_.count(k))
      log_line("warning: --build-arg " + k + " was not used by any ARG");
  }
  ABX_ASSIGN_OR_RETURN(auto manifest_digest, write_image());
  ABX_ASSIGN_OR_RETURN(auto img, store_.add_image(manifest_digest, [this](std::string_view l) {
    log_line(std::string(l));
  }));
  ABX_TRY(publish(manifest_digest, yaml));
  if (opt_.reload_templates) ABX_TRY(opt_.reload_templates());
  BuildResult r;
  r.name = req_.name;
  r.image = std::move(img);
  r.steps = static_cast<int>(total_);
  r.cached = cached_;
  log_.info("built template " + req_.name + " (" + manifest_digest + ", " +
            std::to_string(r.cached) + "/" + std::to_string(r.steps) + " steps cached)");
  return r;
}

}  // namespace

TemplateBuilder::TemplateBuilder(TemplateBuildOptions options) : opt_(std::move(options)) {
  if (opt_.state_dir.empty()) opt_.state_dir = opt_.home + "/builds";
  std::error_code ec;
  fs::create_directories(opt_.state_dir, ec);
  // RUN sandboxes a previous abxd left behind (killed mid-build).
  (void)runtime::cleanup_stale(opt_.state_dir);
  fs::remove_all(opt_.home + "/build-work", ec);
}

Result<BuildResult> TemplateBuilder::build(const BuildRequest& req, const BuildProgress& progress) {
  if (!valid_template_name(req.name)) {
    return invalid_argument("template name '" + req.name +
                            "' must match [a-z0-9][a-z0-9._-]{0,63}");
  }
  if (!opt_.store) return internal_error("template builds need an image store");
  std::lock_guard lock(mu_);
  if (stopping_) return unavailable("abxd is shutting down");
  Build b(opt_, req, progress, log_, stopping_);
  return b.run();
}

bool TemplateBuilder::is_built(const std::string& name) const {
  if (!valid_template_name(name)) return false;
  auto text = read_small_file((fs::path(opt_.home) / "templates" / name / "template.yaml").string(),
                              1 << 20);
  return text.ok() && text->starts_with(kBuiltMarker);
}

Status TemplateBuilder::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  if (!is_built(name))
    return not_found("template '" + name + "' was not built by abx template build");
  std::error_code ec;
  fs::remove_all(fs::path(opt_.home) / "templates" / name, ec);
  if (ec) return internal_error("remove template " + name + ": " + ec.message());
  (void)opt_.store->untag(name);
  if (opt_.reload_templates) ABX_TRY(opt_.reload_templates());
  // Layers of the removed template that running sandboxes still stand on stay until those go.
  auto freed = opt_.store->gc(opt_.images_in_use ? opt_.images_in_use() : std::set<std::string>{});
  if (freed.ok())
    log_.info("removed template " + name + "; gc freed " + std::to_string(*freed) + " bytes");
  return {};
}

}  // namespace abx::platform
