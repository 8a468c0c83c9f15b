#include "abx/testing/temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>

namespace abx::testing {

std::string run_id() {
  const char* v = std::getenv("ABX_TEST_RUN_ID");
  return v == nullptr ? std::string() : std::string(v);
}

TempDir::TempDir(const std::string& prefix) {
  const std::filesystem::path parent = std::filesystem::temp_directory_path();
  std::string name = prefix;
  // Once in the path is enough (scripts/test.sh's TMPDIR is named after the run): socket paths
  // below a TempDir must fit in sun_path's 108 bytes.
  if (std::string run = run_id(); !run.empty() && parent.string().find(run) == std::string::npos)
    name += "-" + run;
  std::string tmpl = (parent / (name + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("mkdtemp " + tmpl).c_str());
    std::abort();
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace abx::testing
