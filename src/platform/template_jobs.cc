#include "template_jobs.h"

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>

#include "abx/base/log.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/templates/template.h"
#include "abx/token/token.h"
#include "build_context.h"
#include "sandboxes.h"

namespace abx::platform {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr std::int64_t kUploadTokenMs = 3600 * 1000;  // an upload URL lives an hour
constexpr std::size_t kMaxSteps = 1000;
constexpr std::size_t kMaxLogLines = 100'000;  // per build; later lines are dropped
// Log lines reach the store in batches: at most this many lines or this long after the last.
constexpr std::size_t kStoreBatchLines = 500;
constexpr std::int64_t kStoreBatchMs = 1000;

// E2B's default base image: our own `base` image, no registry involved.
bool is_e2b_base(std::string_view image) {
  return image == "e2bdev/base" || image == "e2bdev/base:latest" ||
         image == "docker.io/e2bdev/base" || image == "docker.io/e2bdev/base:latest";
}

bool valid_hash(std::string_view h) {
  return !h.empty() && h.size() <= 128 && std::all_of(h.begin(), h.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

std::string json_str(std::string_view s) { return json::serialize(json::value(json::string(s))); }

std::string exec_form(std::initializer_list<std::string_view> argv) {
  std::string out = "[";
  for (auto a : argv) out += (out.size() > 1 ? ", " : "") + json_str(a);
  return out + "]";
}

// Dockerfile words: a value is double-quoted with \ and " escaped; line breaks cannot be said.
Result<std::string> quoted(std::string_view v, const std::string& what) {
  if (v.find_first_of("\r\n") != std::string_view::npos)
    return invalid_argument(what + " must not contain a line break");
  std::string out = "\"";
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

Result<std::vector<std::string>> string_args(const json::object& step, const std::string& where) {
  std::vector<std::string> out;
  const auto* a = step.if_contains("args");
  if (!a || a->is_null()) return out;
  if (!a->is_array()) return invalid_argument(where + ": args must be an array of strings");
  for (const auto& v : a->as_array()) {
    if (!v.is_string()) return invalid_argument(where + ": args must be an array of strings");
    out.emplace_back(v.as_string());
  }
  return out;
}

Result<bool> optional_bool(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return false;
  if (!v->is_bool()) return invalid_argument(std::string(key) + " must be a boolean");
  return v->as_bool();
}

Result<std::string> optional_string(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::string();
  if (!v->is_string()) return invalid_argument(std::string(key) + " must be a string");
  return std::string(v->as_string());
}

std::string basename_of(std::string_view p) {
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  auto slash = p.rfind('/');
  return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}

}  // namespace

Result<TranslatedTemplate> translate_template(const json::object& body) {
  TranslatedTemplate out;
  int line = 0;
  auto emit = [&](const std::string& text, const std::string& step) {
    out.dockerfile += text + "\n";
    out.line_step[++line] = step;
  };
  ABX_ASSIGN_OR_RETURN(auto from_image, optional_string(body, "fromImage"));
  ABX_ASSIGN_OR_RETURN(auto from_template, optional_string(body, "fromTemplate"));
  if (const auto* r = body.if_contains("fromImageRegistry"); r && !r->is_null()) {
    return Error(ErrorCode::kUnimplemented,
                 "fromImageRegistry: registry credentials are not supported by abxd's builder; "
                 "put them in abxd's --registry-auth file and use fromImage");
  }
  if (!from_image.empty() && !from_template.empty())
    return invalid_argument("give fromImage or fromTemplate, not both");
  std::string from;
  if (!from_template.empty()) {
    // A template by name; its tag (name:tag) picks nothing here: a template has one image.
    from = from_template.substr(0, from_template.find(':'));
    out.from_template = from;
    if (!valid_template_name(from))
      return invalid_argument("fromTemplate: no template '" + from_template + "'");
  } else if (from_image.empty() || is_e2b_base(from_image)) {
    from = "abx:base";
  } else {
    if (from_image.find_first_of(" \t\r\n\"") != std::string::npos)
      return invalid_argument("fromImage: '" + from_image + "' is not an image reference");
    from = from_image;
  }
  emit("FROM " + from, "base");
  ABX_ASSIGN_OR_RETURN(bool force_all, optional_bool(body, "force"));
  if (force_all) out.no_cache_from_line = 1;

  const auto* steps = body.if_contains("steps");
  if (steps && !steps->is_null() && !steps->is_array())
    return invalid_argument("steps must be an array");
  std::string user;  // the USER in effect for the steps (setUser); "" is the base's (root)
  if (steps && steps->is_array()) {
    if (steps->as_array().size() > kMaxSteps)
      return invalid_argument("more than " + std::to_string(kMaxSteps) + " steps");
    std::size_t n = 0;
    for (const auto& sv : steps->as_array()) {
      const std::string step = std::to_string(++n);
      const std::string where = "step " + step;
      if (!sv.is_object()) return invalid_argument(where + " must be an object");
      const auto& s = sv.as_object();
      ABX_ASSIGN_OR_RETURN(auto type, optional_string(s, "type"));
      ABX_ASSIGN_OR_RETURN(auto args, string_args(s, where));
      ABX_ASSIGN_OR_RETURN(bool force, optional_bool(s, "force"));
      if (force && out.no_cache_from_line == 0) out.no_cache_from_line = line + 1;
      if (type == "RUN") {
        if (args.empty() || args.size() > 2 || args[0].empty())
          return invalid_argument(where + ": RUN takes [command] or [command, user]");
        const bool as_other = args.size() == 2 && !args[1].empty() && args[1] != user;
        if (as_other) {
          ABX_ASSIGN_OR_RETURN(auto u, quoted(args[1], where + ": the user"));
          emit("USER " + u, step);
        }
        emit("RUN " + exec_form({"/bin/sh", "-c", args[0]}), step);
        if (args[0].find("pip install") != std::string::npos ||
            args[0].find("apt-get ") != std::string::npos ||
            args[0].find("npm install") != std::string::npos)
          out.package_steps.insert(step);
        if (as_other) emit("USER " + (user.empty() ? std::string("root") : user), step);
      } else if (type == "COPY") {
        if (args.size() < 2 || args[0].empty() || args[1].empty())
          return invalid_argument(where + ": COPY takes [src, dest, user, mode]");
        ABX_ASSIGN_OR_RETURN(auto hash, optional_string(s, "filesHash"));
        if (!valid_hash(hash))
          return invalid_argument(where + ": COPY needs the filesHash of its uploaded files");
        const std::string& src = args[0];
        const std::string& dest = args[1];
        std::string rel;
        if (!build::safe_relative(src, rel))
          return invalid_argument(where + ": COPY source " + src +
                                  " must be relative to the context");
        emit("COPY " + exec_form({rel.empty() ? hash : hash + "/" + rel, dest}), step);
        out.file_hashes.push_back(hash);
        // What the copy made: dest itself, or (a directory destination) src's name in it.
        const bool glob = src.find_first_of("*?[") != std::string::npos;
        const std::string made = dest.ends_with('/') && !glob ? dest + basename_of(src) : dest;
        if (args.size() > 2 && !args[2].empty()) {
          const std::string cmd =
              "chown -R " + templates::shell_quote(args[2]) + " " + templates::shell_quote(made);
          emit("RUN " + exec_form({"/bin/sh", "-c", cmd}), step);
        }
        if (args.size() > 3 && !args[3].empty()) {
          if (args[3].find_first_not_of("01234567") != std::string::npos || args[3].size() > 4)
            return invalid_argument(where + ": COPY mode " + args[3] + " is not octal");
          const std::string cmd = "chmod " + args[3] + " " + templates::shell_quote(made);
          emit("RUN " + exec_form({"/bin/sh", "-c", cmd}), step);
        }
      } else if (type == "ENV") {
        if (args.empty() || args.size() % 2 != 0)
          return invalid_argument(where + ": ENV takes [key, value, …] pairs");
        std::string text = "ENV";
        for (std::size_t i = 0; i < args.size(); i += 2) {
          if (args[i].empty() || args[i].find_first_of(" \t\r\n=\"") != std::string::npos)
            return invalid_argument(where + ": '" + args[i] + "' is not a variable name");
          ABX_ASSIGN_OR_RETURN(auto v, quoted(args[i + 1], where + ": the value of " + args[i]));
          text += " " + args[i] + "=" + v;
        }
        emit(text, step);
      } else if (type == "WORKDIR") {
        if (args.size() != 1 || args[0].empty() ||
            args[0].find_first_of("\r\n") != std::string::npos)
          return invalid_argument(where + ": WORKDIR takes one path");
        emit("WORKDIR " + args[0], step);
      } else if (type == "USER") {
        if (args.size() != 1 || args[0].empty() ||
            args[0].find_first_of(" \t\r\n\"") != std::string::npos)
          return invalid_argument(where + ": USER takes one user name");
        emit("USER " + args[0], step);
        user = args[0];
      } else {
        return invalid_argument(where + ": unknown step type '" + type +
                                "' (RUN, COPY, ENV, WORKDIR, USER)");
      }
    }
  }
  ABX_ASSIGN_OR_RETURN(auto start_cmd, optional_string(body, "startCmd"));
  ABX_ASSIGN_OR_RETURN(auto ready_cmd, optional_string(body, "readyCmd"));
  if (!start_cmd.empty()) emit("ENTRYPOINT " + exec_form({"/bin/sh", "-c", start_cmd}), "finalize");
  if (!ready_cmd.empty()) {
    ABX_ASSIGN_OR_RETURN(auto v, quoted(ready_cmd, "readyCmd"));
    emit("LABEL " + std::string(kReadyCmdLabel) + "=" + v, "finalize");
  }
  return out;
}

TemplateJobs::TemplateJobs(TemplateBuilder& builder, std::string files_dir, store::Store* store)
    : builder_(builder), files_dir_(std::move(files_dir)), store_(store) {
  std::error_code ec;
  fs::create_directories(files_dir_, ec);
  if (store_) load();
}

void TemplateJobs::load() {
  Logger lg("template-jobs");
  auto all = store_->list_template_builds();
  if (!all.ok()) {
    lg.warn("cannot read the template builds of the store: " + all.error().message());
    return;
  }
  std::lock_guard lock(mu_);
  for (auto& b : *all) {
    TemplateBuildRecord r;
    r.template_id = b.template_id;
    r.build_id = b.build_id;
    r.team = b.team_id;
    r.status = b.status;
    r.reason = b.reason;
    r.reason_step = b.reason_step;
    r.tags = std::move(b.tags);
    r.created_ms = b.created_at_ms;
    r.cpu_count = b.cpu_count;
    r.memory_mb = b.memory_mb;
    if (auto logs = store_->template_build_logs(b.build_id, kMaxStoredLogLines + 1); logs.ok()) {
      for (auto& l : *logs)
        r.logs.push_back(
            BuildLogLine{l.ts_ms, std::move(l.level), std::move(l.message), std::move(l.step)});
    } else {
      lg.warn("build " + b.build_id + ": cannot read its log: " + logs.error().message());
    }
    r.stored_logs = std::min(r.logs.size(), kMaxStoredLogLines);
    if (r.status == "waiting" || r.status == "building") {
      // Its thread died with the abxd that ran it: it will never finish.
      const std::string was = r.status;
      r.status = "error";
      r.reason = "abxd restarted while the build was " + was +
                 "; the build did not finish (start a new build)";
      if (r.reason_step.empty()) r.reason_step = r.logs.empty() ? "base" : r.logs.back().step;
      r.logs.push_back(BuildLogLine{now_ms(), "error", "Build failed: " + r.reason, r.reason_step});
      persist(r, true);
      lg.info("template " + r.template_id + ": build " + r.build_id + " was " + was +
              " when abxd stopped: now error");
    }
    builds_[r.build_id] = std::move(r);
  }
}

void TemplateJobs::persist(TemplateBuildRecord& r, bool logs) {
  if (!store_) return;
  store::TemplateBuildRecord b;
  b.build_id = r.build_id;
  b.template_id = r.template_id;
  b.team_id = r.team;
  b.status = r.status;
  b.reason = r.reason;
  b.reason_step = r.reason_step;
  b.tags = r.tags;
  b.created_at_ms = r.created_ms;
  b.cpu_count = r.cpu_count;
  b.memory_mb = r.memory_mb;
  if (Status st = store_->put_template_build(b); !st.ok()) {
    Logger("template-jobs")
        .warn("build " + r.build_id + ": cannot store it: " + st.error().message());
    return;
  }
  if (!logs) return;
  const std::size_t end = std::min(r.logs.size(), kMaxStoredLogLines);
  std::vector<store::TemplateBuildLogLine> lines;
  for (std::size_t i = r.stored_logs; i < end; ++i) {
    const auto& l = r.logs[i];
    lines.push_back({static_cast<std::int64_t>(i), l.ms, l.level, l.message, l.step});
  }
  // Past the stored lines, a finished build's last line (its outcome) is kept all the same.
  if ((r.status == "ready" || r.status == "error") && r.logs.size() > kMaxStoredLogLines) {
    const auto& l = r.logs.back();
    lines.push_back(
        {static_cast<std::int64_t>(kMaxStoredLogLines), l.ms, l.level, l.message, l.step});
  }
  if (lines.empty()) return;
  if (Status st = store_->append_template_build_logs(r.build_id, lines); !st.ok()) {
    Logger("template-jobs")
        .warn("build " + r.build_id + ": cannot store its log: " + st.error().message());
    return;
  }
  r.stored_logs = end;
  r.stored_at_ms = now_ms();
}

TemplateJobs::~TemplateJobs() {
  std::map<std::string, std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& [id, t] : threads) t.join();
}

TemplateBuildRecord TemplateJobs::request(const std::string& name, const std::string& team,
                                          std::vector<std::string> tags, double cpu_count,
                                          std::int64_t memory_mb) {
  TemplateBuildRecord r;
  r.template_id = name;
  auto id = token::random_hex(16);
  r.build_id = id.ok() ? *id : std::to_string(now_ms());
  // E2B's build ids are UUIDs.
  if (r.build_id.size() == 32) {
    for (std::size_t at : {8, 13, 18, 23}) r.build_id.insert(at, "-");
  }
  r.team = team;
  r.tags = std::move(tags);
  r.created_ms = now_ms();
  r.cpu_count = cpu_count;
  r.memory_mb = memory_mb;
  std::lock_guard lock(mu_);
  persist(r, false);
  builds_[r.build_id] = r;
  return r;
}

Result<TemplateBuildRecord> TemplateJobs::get(const std::string& template_id,
                                              const std::string& build_id,
                                              const std::string& team) const {
  std::lock_guard lock(mu_);
  auto it = builds_.find(build_id);
  if (it == builds_.end() || it->second.template_id != template_id || it->second.team != team)
    return not_found("build '" + build_id + "' of template '" + template_id + "' not found");
  return it->second;
}

std::vector<TemplateBuildRecord> TemplateJobs::builds_of(const std::string& template_id,
                                                         const std::string& team) const {
  std::vector<TemplateBuildRecord> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, r] : builds_)
    if (r.template_id == template_id && r.team == team) out.push_back(r);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.created_ms > b.created_ms; });
  return out;
}

void TemplateJobs::set_tags(const std::string& template_id, const std::string& build_id,
                            const std::vector<std::string>& tags) {
  std::lock_guard lock(mu_);
  for (auto& [id, r] : builds_) {
    if (r.template_id != template_id) continue;
    bool changed = false;
    for (const auto& t : tags) {
      auto at = std::find(r.tags.begin(), r.tags.end(), t);
      if (id == build_id && at == r.tags.end()) {
        r.tags.push_back(t);
        changed = true;
      }
      if (id != build_id && at != r.tags.end()) {
        r.tags.erase(at);
        changed = true;
      }
    }
    if (changed) persist(r, false);
  }
}

Status TemplateJobs::remove_tags(const std::string& template_id,
                                 const std::vector<std::string>& tags) {
  std::lock_guard lock(mu_);
  for (const auto& t : tags) {
    bool found = false;
    for (auto& [id, r] : builds_) {
      if (r.template_id != template_id) continue;
      auto at = std::find(r.tags.begin(), r.tags.end(), t);
      if (at != r.tags.end()) {
        r.tags.erase(at);
        persist(r, false);
        found = true;
      }
    }
    if (!found) return not_found("tag '" + t + "' of template '" + template_id + "' not found");
  }
  return {};
}

void TemplateJobs::forget(const std::string& template_id) {
  std::lock_guard lock(mu_);
  std::erase_if(builds_, [&](const auto& kv) {
    return kv.second.template_id == template_id && kv.second.status != "building" &&
           kv.second.status != "waiting";
  });
  if (store_) {
    if (auto n = store_->delete_template_builds(template_id, {"ready", "error"}); !n.ok())
      Logger("template-jobs")
          .warn("template " + template_id +
                ": cannot remove its builds from the store: " + n.error().message());
  }
  std::error_code ec;
  fs::remove_all(fs::path(files_dir_) / template_id, ec);
}

bool TemplateJobs::has_file(const std::string& template_id, const std::string& hash) const {
  if (!valid_template_name(template_id) || !valid_hash(hash)) return false;
  std::error_code ec;
  return fs::is_regular_file(fs::path(files_dir_) / template_id / hash, ec);
}

Result<std::string> TemplateJobs::upload_token(const std::string& template_id,
                                               const std::string& hash) {
  if (!valid_hash(hash)) return invalid_argument("'" + hash + "' is not a files hash");
  ABX_ASSIGN_OR_RETURN(auto tok, token::random_hex(32));
  const std::int64_t now = now_ms();
  std::lock_guard lock(mu_);
  std::erase_if(uploads_, [now](const auto& kv) { return kv.second.expires_ms < now; });
  uploads_[tok] = Upload{template_id, hash, now + kUploadTokenMs};
  return tok;
}

bool TemplateJobs::upload_allowed(const std::string& template_id, const std::string& hash,
                                  const std::string& token) const {
  std::lock_guard lock(mu_);
  auto it = uploads_.find(token);
  return it != uploads_.end() && it->second.template_id == template_id && it->second.hash == hash &&
         it->second.expires_ms >= now_ms();
}

Status TemplateJobs::accept_upload(const std::string& template_id, const std::string& hash,
                                   const std::string& token, const std::string& path) {
  {
    std::lock_guard lock(mu_);
    auto it = uploads_.find(token);
    if (it == uploads_.end() || it->second.template_id != template_id || it->second.hash != hash ||
        it->second.expires_ms < now_ms())
      return Error(ErrorCode::kUnauthenticated, "invalid or expired upload URL");
    uploads_.erase(it);
  }
  const fs::path dir = fs::path(files_dir_) / template_id;
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::rename(path, dir / hash, ec);
  if (ec) {
    // Another filesystem: copy, then drop the spooled file.
    fs::copy_file(path, dir / (hash + ".part"), fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(dir / (hash + ".part"), dir / hash, ec);
    std::error_code ignored;
    fs::remove(path, ignored);
    if (ec) return internal_error("store the uploaded files: " + ec.message());
  }
  return {};
}

void TemplateJobs::log(const std::string& build_id, std::string level, std::string message,
                       std::string step) {
  std::lock_guard lock(mu_);
  auto it = builds_.find(build_id);
  if (it == builds_.end()) return;
  auto& r = it->second;
  if (r.logs.size() >= kMaxLogLines) return;
  r.logs.push_back(BuildLogLine{now_ms(), std::move(level), std::move(message), std::move(step)});
  // In batches: each write to the store is an fsync.
  if (r.stored_logs < kMaxStoredLogLines && (r.logs.size() - r.stored_logs >= kStoreBatchLines ||
                                             r.logs.back().ms - r.stored_at_ms >= kStoreBatchMs))
    persist(r, true);
}

Status TemplateJobs::start(const std::string& template_id, const std::string& build_id,
                           TranslatedTemplate tt, std::function<bool(const std::string&)> may_use) {
  BuildRequest req;
  req.name = template_id;
  req.context_files["Dockerfile"] = tt.dockerfile;
  req.no_cache_from_line = tt.no_cache_from_line;
  for (const auto& h : tt.file_hashes) {
    if (!has_file(template_id, h))
      return invalid_argument("the files of hash " + h + " were not uploaded (GET /templates/" +
                              template_id + "/files/" + h + " first)");
    req.context_archives.emplace_back((fs::path(files_dir_) / template_id / h).string(), h);
  }
  req.may_use = std::move(may_use);
  std::lock_guard lock(mu_);
  auto it = builds_.find(build_id);
  if (it == builds_.end()) return not_found("build '" + build_id + "' not found");
  // The request's cpuCount and memoryMB: the template's resources (its sandboxes' defaults).
  if (it->second.cpu_count > 0 || it->second.memory_mb > 0) {
    std::string yaml = "id: " + template_id + "\nresources:\n";
    if (it->second.cpu_count > 0)
      yaml += "  cpu: " + std::to_string(static_cast<std::int64_t>(it->second.cpu_count)) + "\n";
    if (it->second.memory_mb > 0)
      yaml += "  memory: " + std::to_string(it->second.memory_mb) + "Mi\n";
    req.context_files["template.yaml"] = yaml;
  }
  if (it->second.status != "waiting")
    return Error(ErrorCode::kFailedPrecondition,
                 "build '" + build_id + "' was already started (" + it->second.status + ")");
  it->second.status = "building";
  persist(it->second, true);
  // Threads of builds that ended: their status was set under mu_, their last act.
  for (auto t = threads_.begin(); t != threads_.end();) {
    auto b = builds_.find(t->first);
    if (b == builds_.end() || b->second.status == "ready" || b->second.status == "error") {
      t->second.join();
      t = threads_.erase(t);
    } else {
      ++t;
    }
  }
  threads_[build_id] = std::thread(&TemplateJobs::run, this, template_id, build_id, std::move(req),
                                   std::move(tt.line_step), std::move(tt.package_steps));
  return {};
}

void TemplateJobs::run(std::string template_id, std::string build_id, BuildRequest req,
                       std::map<int, std::string> line_step, std::set<std::string> package_steps) {
  std::string step;  // the SDK's step being built
  auto progress = [&](const json::object& ev) {
    const auto* type = ev.if_contains("type");
    if (!type || !type->is_string()) return;
    if (type->as_string() == "step") {
      const auto* n = ev.if_contains("step");
      const auto* total = ev.if_contains("total");
      const auto* instr = ev.if_contains("instruction");
      const auto* cached = ev.if_contains("cached");
      if (n && (n->is_int64() || n->is_uint64())) {
        auto at = line_step.find(static_cast<int>(n->to_number<std::int64_t>()));
        if (at != line_step.end()) step = at->second;
      }
      std::string msg = "[builder " + (n ? json::serialize(*n) : "?") + "/" +
                        (total ? json::serialize(*total) : "?") + "] " +
                        (instr && instr->is_string() ? std::string(instr->as_string()) : "");
      if (cached && cached->is_bool() && cached->as_bool()) msg = "CACHED " + msg;
      log(build_id, "info", std::move(msg), step);
    } else if (type->as_string() == "log") {
      const auto* line = ev.if_contains("line");
      if (line && line->is_string()) log(build_id, "info", std::string(line->as_string()), step);
    } else if (type->as_string() == "layer") {
      log(build_id, "debug", "layer " + json::serialize(ev), step);
    }
  };
  log(build_id, "info", "Building template " + template_id + " (build " + build_id + ")", "base");
  auto result = builder_.build(req, progress);
  if (!result.ok() && builder_.stopping()) {
    // abxd stops (SIGTERM): the build is cut short, never left `building`.
    result = Error(ErrorCode::kUnavailable, "abxd was stopped during the build (" +
                                                result.error().message() +
                                                "); the build did not finish (start a new build)");
  }
  if (result.ok()) {
    log(build_id, "info",
        "Template " + template_id + " is ready: " + result->image.manifest_digest + " (" +
            std::to_string(result->cached) + "/" + std::to_string(result->steps) + " steps cached)",
        "finalize");
  } else if (package_steps.count(step)) {
    // pipInstall, aptInstall, npmInstall: a registry or mirror the build could not reach.
    result = Error(result.error().code(),
                   result.error().message() +
                       " (a package install: it needs a package index or mirror reachable from "
                       "abxd's builds; abxd's sandboxes resolve names through --dns-upstream)");
    log(build_id, "error", "Build failed: " + result.error().message(), step);
  } else {
    log(build_id, "error", "Build failed: " + result.error().message(), step);
  }
  std::lock_guard lock(mu_);
  auto it = builds_.find(build_id);
  if (it == builds_.end()) return;
  if (result.ok()) {
    it->second.status = "ready";
    // A ready build takes its tags from older builds of the template.
    for (auto& [id, r] : builds_) {
      if (id == build_id || r.template_id != template_id) continue;
      if (std::erase_if(r.tags, [&](const std::string& t) {
            return std::find(it->second.tags.begin(), it->second.tags.end(), t) !=
                   it->second.tags.end();
          }) > 0)
        persist(r, false);
    }
  } else {
    it->second.status = "error";
    it->second.reason = result.error().message();
    it->second.reason_step = step;
  }
  persist(it->second, true);
}

}  // namespace abx::platform
