// Fuzz target: a hostile layer blob (tar, maybe gzip/zstd) through Store::add_image. Never a
// crash; whatever happens, nothing is written outside the store, tmp/ is left empty, and a
// refused layer leaves nothing under layers/. Runs as root in CI (owners, whiteouts).
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "abx/image/manifest.h"
#include "abx/image/store.h"

namespace {

namespace fs = std::filesystem;

// Created once, removed at exit (leaked on purpose: the atexit handler runs after statics die).
const fs::path& fuzz_root() {
  static const fs::path* root = [] {
    std::string tmpl = (fs::temp_directory_path() / "abx-layer-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    auto* p = new fs::path(tmpl);
    fs::create_directories(*p / "outside");
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(*root, ec);
    });
    return p;
  }();
  return *root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace abx::image;
  const fs::path& root = fuzz_root();
  auto store = Store::open((root / "store").string(),
                           {.max_entries = 2000, .max_bytes = 32 << 20, .max_ratio = 200});
  if (!store.ok()) std::abort();
  std::string_view blob(reinterpret_cast<const char*>(data), size);
  auto layer = store->put_blob(blob);
  auto config = store->put_blob("{}");
  if (!layer.ok() || !config.ok()) std::abort();
  Descriptor cfg{.media_type = std::string(kOciConfig), .digest = *config, .size = 2};
  Descriptor l{.media_type = std::string(kOciLayerGzip),
               .digest = *layer,
               .size = static_cast<std::int64_t>(size)};
  auto manifest = store->put_blob(oci_manifest_json(cfg, {l}));
  if (!manifest.ok()) std::abort();
  auto img = store->add_image(*manifest);
  if (!fs::is_empty(root / "store/tmp")) std::abort();
  if (!img.ok() && !fs::is_empty(root / "store/layers/sha256")) std::abort();
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename() != "store" && e.path().filename() != "outside") std::abort();
  }
  if (!fs::is_empty(root / "outside")) std::abort();
  if (!store->gc().ok()) std::abort();  // nothing is tagged: back to empty for the next input
  return 0;
}
