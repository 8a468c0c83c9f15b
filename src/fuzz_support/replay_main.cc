// Replays seed corpora through a fuzz target without libFuzzer: `target DIR|FILE...`.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
int run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot open %s\n", p.c_str());
    return 1;
  }
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(buf.data()), buf.size());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  size_t n = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) {
          failures += run_file(e.path());
          ++n;
        }
      }
    } else {
      failures += run_file(p);
      ++n;
    }
  }
  if (n == 0) {
    std::fprintf(stderr, "replay: no corpus inputs given\n");
    return 1;
  }
  std::printf("replay: %zu inputs, no crash\n", n);
  return failures == 0 ? 0 : 1;
}
