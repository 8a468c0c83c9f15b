// Fuzz target: a moved sandbox's archive (read_move_archive, what POST /abx/cluster/move-in
// extracts) never crashes, and whatever it accepts or refuses, it writes nothing but regular
// files directly under dest/checkpoint and dest/run.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "abx/store/sandbox_id.h"
#include "sandboxes_internal.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path base =
      fs::temp_directory_path() / ("move_archive_fuzz." + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(base, ec);
  fs::create_directories(base / "dest" / "checkpoint");
  fs::create_directories(base / "dest" / "run");
  const fs::path tar = base / "in.tar";
  {
    std::ofstream out(tar, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto r = abx::platform::read_move_archive(tar.string(), (base / "dest").string());
  if (r.ok() &&
      (!abx::store::SandboxId::valid(r->record.id) || r->home.empty() || r->home.front() != '/'))
    std::abort();
  for (const auto& e : fs::recursive_directory_iterator(base / "dest")) {
    const fs::path rel = fs::relative(e.path(), base / "dest");
    const std::string top = rel.begin()->string();
    if (top != "checkpoint" && top != "run") std::abort();
    const auto depth = std::distance(rel.begin(), rel.end());
    if (depth == 1 ? !e.is_directory() : (depth != 2 || e.is_symlink() || !e.is_regular_file()))
      std::abort();
  }
  fs::remove_all(base, ec);
  return 0;
}
