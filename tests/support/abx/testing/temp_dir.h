// A temporary directory for a test, removed with everything in it when the object goes.
#pragma once

#include <filesystem>
#include <string>

namespace abx::testing {

// The run this test process belongs to: $ABX_TEST_RUN_ID (scripts/test.sh sets it), else "".
// Fixtures put it into every path they create so a run's leftovers can be told from another's.
std::string run_id();

class TempDir {
 public:
  // mkdtemp(<temp dir>/<prefix>[-<run id>]-XXXXXX), the run id left out when <temp dir>'s path
  // already holds it; aborts the test binary if that fails (the disk is full or /tmp is
  // unwritable: no test could do anything useful). Mode 0700.
  explicit TempDir(const std::string& prefix = "abx-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string string() const { return path_.string(); }
  std::filesystem::path operator/(const std::string& rel) const { return path_ / rel; }

 private:
  std::filesystem::path path_;
};

}  // namespace abx::testing
