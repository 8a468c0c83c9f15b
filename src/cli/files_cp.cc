// abx files cp SOURCE DEST — files and directories, between here and a sandbox, either way.
//
// One of SOURCE and DEST is `ID:PATH` (in the sandbox), the other a local path. Directories are
// copied recursively like `cp -r` / `docker cp`: when DEST is an existing directory the copy
// lands inside it under SOURCE's name, otherwise DEST becomes the copy. The transfer is envd's
// files API, one request per file (POST/GET /files), plus ListDir (one per directory) and
// MakeDir; nothing has to be installed in the sandbox. Permission bits travel with every file
// and directory: locally with chmod(2); in the sandbox envd's upload creates files 0644, so the
// modes are then set with one `chmod MODE PATH…` process per distinct mode (argv, no shell) —
// when the template lacks the `shell` capability the copy still succeeds and says the modes
// were not kept. Symbolic links are recreated on download and skipped (with a warning) on
// upload; other special files are skipped.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>

#include "abx/base/try.h"
#include "cli.h"

namespace abx::cli {

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct CpOpts {
  std::string source, dest;
};

struct Tally {
  std::size_t files = 0, dirs = 0, links = 0, skipped = 0;
  std::uint64_t bytes = 0;
  bool modes_kept = true;
};

// "ID:PATH" → {id, path}; anything else (no colon, or a path before the colon such as
// ./a:b) is local.
std::optional<std::pair<std::string, std::string>> remote_of(const std::string& s) {
  auto colon = s.find(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string id = s.substr(0, colon);
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return std::nullopt;
  }
  return std::make_pair(id, s.substr(colon + 1));
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string base_name(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string octal(std::uint32_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%o", mode & 07777);
  return buf;
}

Result<std::string> read_local(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return not_found("cannot read " + p.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Local → sandbox.
class Upload {
 public:
  Upload(client::Sandbox& sbx, Tally& t) : sbx_(sbx), files_(sbx.files()), t_(t) {}

  Status copy(const fs::path& src, const std::string& dst) {
    std::error_code ec;
    auto st = fs::symlink_status(src, ec);
    if (ec || !fs::exists(st)) return not_found("no such file or directory: " + src.string());
    if (fs::is_directory(st)) {
      ABX_TRY(make_dir(dst, st.permissions()));
      for (const auto& e : fs::directory_iterator(src, ec)) {
        ABX_TRY(copy(e.path(), join(dst, e.path().filename().string())));
      }
      if (ec) return Error(ErrorCode::kPermissionDenied, "cannot list " + src.string());
      return {};
    }
    if (fs::is_symlink(st)) {
      std::cerr << "abx: skipping symbolic link " << src.string() << "\n";
      ++t_.skipped;
      return {};
    }
    if (!fs::is_regular_file(st)) {
      std::cerr << "abx: skipping special file " << src.string() << "\n";
      ++t_.skipped;
      return {};
    }
    ABX_ASSIGN_OR_RETURN(auto data, read_local(src));
    auto w = files_.write(dst, data);
    if (!w.ok()) return w.error().with_context(dst);
    ++t_.files;
    t_.bytes += data.size();
    modes_[static_cast<std::uint32_t>(st.permissions()) & 07777].push_back(dst);
    return {};
  }

  // One chmod per mode, a few hundred paths at a time.
  void apply_modes() {
    if (modes_.empty()) return;
    if (!sbx_.check_capability(client::Capability::kShell).ok()) {
      t_.modes_kept = false;
      return;
    }
    for (const auto& [mode, paths] : modes_) {
      for (std::size_t i = 0; i < paths.size(); i += 256) {
        std::vector<std::string> argv{"chmod", octal(mode)};
        for (std::size_t j = i; j < paths.size() && j < i + 256; ++j) argv.push_back(paths[j]);
        auto r = sbx_.commands().run_argv(argv, {.timeout = std::chrono::seconds(60)});
        if (!r.ok() || r->exit_code != 0) t_.modes_kept = false;
      }
    }
  }

 private:
  Status make_dir(const std::string& dst, fs::perms perms) {
    auto made = files_.make_dir(dst);
    if (!made.ok()) return made.error().with_context(dst);
    if (!*made) {  // it existed: it must be a directory
      auto st = files_.stat(dst);
      if (st.ok() && st->type != "dir") {
        return Error(ErrorCode::kAlreadyExists, dst + " exists and is not a directory");
      }
    }
    ++t_.dirs;
    modes_[static_cast<std::uint32_t>(perms) & 07777].push_back(dst);
    return {};
  }

  client::Sandbox& sbx_;
  client::Files files_;
  Tally& t_;
  std::map<std::uint32_t, std::vector<std::string>> modes_;
};

// Sandbox → local.
class Download {
 public:
  Download(client::Files files, Tally& t) : files_(std::move(files)), t_(t) {}

  Status copy(const client::EntryInfo& e, const fs::path& dst) {
    std::error_code ec;
    if (e.type == "dir") {
      fs::create_directories(dst, ec);
      if (ec || !fs::is_directory(dst)) {
        return Error(ErrorCode::kAlreadyExists,
                     "cannot create directory " + dst.string() + (ec ? ": " + ec.message() : ""));
      }
      ++t_.dirs;
      ABX_ASSIGN_OR_RETURN(auto entries, files_.list(e.path, 1));
      for (const auto& child : entries) ABX_TRY(copy(child, dst / child.name));
      // After the children: a read-only directory must not stop its own filling.
      fs::permissions(dst, static_cast<fs::perms>(e.mode & 07777), ec);
      return {};
    }
    if (e.type == "symlink") {
      fs::remove(dst, ec);
      fs::create_symlink(e.symlink_target, dst, ec);
      if (ec) return Error(ErrorCode::kInternal, "symlink " + dst.string() + ": " + ec.message());
      ++t_.links;
      return {};
    }
    if (e.type != "file") {
      std::cerr << "abx: skipping special file " << e.path << "\n";
      ++t_.skipped;
      return {};
    }
    auto data = files_.read(e.path);
    if (!data.ok()) return data.error().with_context(e.path);
    {
      std::ofstream out(dst, std::ios::binary | std::ios::trunc);
      if (!out) return Error(ErrorCode::kPermissionDenied, "cannot write " + dst.string());
      out.write(data->data(), static_cast<std::streamsize>(data->size()));
      if (!out) return Error(ErrorCode::kInternal, "cannot write " + dst.string());
    }
    fs::permissions(dst, static_cast<fs::perms>(e.mode & 07777), ec);
    ++t_.files;
    t_.bytes += data->size();
    return {};
  }

 private:
  client::Files files_;
  Tally& t_;
};

int cp(Context& ctx, const CpOpts& o) {
  auto rs = remote_of(o.source), rd = remote_of(o.dest);
  if (rs.has_value() == rd.has_value()) {
    return ctx.usage(
        "abx files cp copies between here and a sandbox: exactly one of SOURCE and DEST must "
        "be ID:PATH (e.g. abx files cp ./dir ID:/work, abx files cp ID:/work ./dir)");
  }
  const std::string& id = rs ? rs->first : rd->first;
  auto sbx = ctx.open_sandbox(id);
  if (!sbx.ok()) return ctx.fail(sbx.error());
  Tally t;
  std::string target;
  if (rd) {
    fs::path src = o.source;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(src, ec))) {
      return ctx.fail(not_found("no such file or directory: " + o.source));
    }
    std::string dst = rd->second.empty() ? "." : rd->second;
    // Into an existing directory, under the source's name (cp -r).
    auto st = sbx->files().stat(dst);
    if (st.ok() && st->type == "dir") {
      dst = join(dst, base_name(fs::absolute(src).lexically_normal().string()));
    } else if (!st.ok() && st.error().code() != ErrorCode::kNotFound) {
      return ctx.fail(st.error());
    }
    Upload up(*sbx, t);
    if (auto s = up.copy(src, dst); !s.ok()) return ctx.fail(s.error());
    up.apply_modes();
    target = id + ":" + dst;
  } else {
    auto st = sbx->files().stat(rs->second);
    if (!st.ok()) {
      return ctx.fail(st.error().with_context(id + ":" + rs->second));
    }
    fs::path dst = o.dest;
    std::error_code ec;
    if (fs::is_directory(dst, ec)) dst /= base_name(st->path.empty() ? rs->second : st->path);
    Download down(sbx->files(), t);
    if (auto s = down.copy(*st, dst); !s.ok()) return ctx.fail(s.error());
    target = dst.string();
  }
  if (!t.modes_kept) {
    std::cerr << "abx: permission bits were not kept (the template lacks `shell` or chmod "
                 "failed); files are 0644\n";
  }
  if (ctx.flags.json) {
    ctx.print_json(json::object{{"destination", target},
                                {"files", t.files},
                                {"directories", t.dirs},
                                {"symlinks", t.links},
                                {"skipped", t.skipped},
                                {"bytes", t.bytes},
                                {"modesKept", t.modes_kept}});
  } else {
    std::cout << "copied " << t.files << (t.files == 1 ? " file" : " files") << " (" << t.bytes
              << " bytes)";
    if (t.dirs) std::cout << ", " << t.dirs << (t.dirs == 1 ? " directory" : " directories");
    if (t.links) std::cout << ", " << t.links << " symlinks";
    std::cout << " to " << target << "\n";
  }
  return kExitOk;
}

}  // namespace

void add_files_cp(CLI::App& files, Context& ctx) {
  auto o = std::make_shared<CpOpts>();
  auto* c = files.add_subcommand(
      "cp",
      "Copy files or directories (recursively, with their modes) between here and a sandbox: "
      "abx files cp ./dir ID:/path, abx files cp ID:/path ./dir");
  c->add_option("source", o->source, "Local path or ID:PATH")->required();
  c->add_option("dest", o->dest, "Local path or ID:PATH")->required();
  c->callback([&ctx, o] { ctx.exit_code = cp(ctx, *o); });
}

}  // namespace abx::cli
