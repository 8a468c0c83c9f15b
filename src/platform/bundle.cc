#include "bundle.h"

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <vector>

#include "abx/base/try.h"
#include "abx/image/digest.h"

namespace abx::platform {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPartialPrefix = ".partial-";

// What names this bundle's content without reading 150 MB: each entry's relative path, type,
// permissions, and a file's size and modification time (ns), in path order.
Result<std::string> version_of(const fs::path& bundle) {
  std::vector<std::string> lines;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(bundle, ec), end; !ec && it != end; it.increment(ec)) {
    const auto& e = *it;
    std::error_code op;
    const fs::file_status st = e.symlink_status(op);
    std::string line = e.path().lexically_relative(bundle).string() + " " +
                       std::to_string(static_cast<int>(st.type())) + " " +
                       std::to_string(static_cast<unsigned>(st.permissions()));
    if (!op && fs::is_regular_file(st)) {
      line += " " + std::to_string(e.file_size(op));
      line += " " + std::to_string(e.last_write_time(op).time_since_epoch().count());
    }
    if (op)
      return Error(ErrorCode::kFailedPrecondition,
                   "bundle: cannot stat " + e.path().string() + ": " + op.message());
    lines.push_back(std::move(line));
  }
  if (ec)
    return Error(ErrorCode::kFailedPrecondition,
                 "bundle " + bundle.string() + ": cannot list it: " + ec.message());
  std::sort(lines.begin(), lines.end());
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  // "sha256:" + 64 hex; 24 hex digits name a version well enough.
  return image::sha256_digest(all).substr(7, 24);
}

// `from`'s tree at `to` (which must not exist): directories made, symlinks copied, files hard
// linked (copied, with their permissions, where linking is impossible: another filesystem).
Status link_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return Error(ErrorCode::kInternal, "mkdir " + to.string() + ": " + ec.message());
  for (fs::recursive_directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path src = it->path();
    const fs::path dst = to / src.lexically_relative(from);
    std::error_code op;
    if (it->is_symlink(op)) {
      fs::copy_symlink(src, dst, op);
    } else if (it->is_directory(op)) {
      fs::create_directory(dst, src, op);
    } else {
      fs::create_hard_link(src, dst, op);
      if (op) {
        op.clear();
        fs::copy_file(src, dst, op);
      }
    }
    if (op)
      return Error(ErrorCode::kInternal, "bundle: cannot pin " + src.string() + " at " +
                                             dst.string() + ": " + op.message());
  }
  if (ec)
    return Error(ErrorCode::kInternal,
                 "bundle: cannot list " + from.string() + ": " + ec.message());
  return {};
}

}  // namespace

bool is_bundle(const std::string& dir) {
  std::error_code ec;
  return !dir.empty() && fs::exists(fs::path(dir) / "bin/abx-envd", ec);
}

Result<std::string> pin_bundle(const std::string& home, const std::string& bundle) {
  ABX_ASSIGN_OR_RETURN(const std::string version, version_of(bundle));
  const fs::path dir = fs::path(home) / "bundles";
  const fs::path pinned = dir / version;
  std::error_code ec;
  if (fs::is_directory(pinned, ec)) return pinned.string();
  const fs::path partial = dir / (std::string(kPartialPrefix) + version);
  fs::remove_all(partial, ec);
  if (Status s = link_tree(bundle, partial); !s) {
    fs::remove_all(partial, ec);
    return s.error();
  }
  fs::rename(partial, pinned, ec);
  if (ec) {
    fs::remove_all(partial, ec);
    return Error(ErrorCode::kInternal, "bundle: cannot rename into " + pinned.string());
  }
  return pinned.string();
}

int prune_bundles(const std::string& home, const std::set<std::string>& keep) {
  const fs::path dir = fs::path(home) / "bundles";
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string path = it->path().string();
    if (keep.count(path)) continue;
    const bool partial = it->path().filename().string().rfind(kPartialPrefix, 0) == 0;
    std::error_code op;
    fs::remove_all(it->path(), op);
    if (!op && !partial) ++removed;
  }
  return removed;
}

}  // namespace abx::platform
