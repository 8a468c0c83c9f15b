// `abxd [--image-store DIR] image …`: the image store offline (abxd need not run; the store's lock
// makes it safe while one does): import an image or a root filesystem tarball under a name, list,
// remove a name, collect garbage. scripts/build-images.sh uses `import` to install the `base`
// image.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace abx::platform {

struct ImageCommand {
  CLI::App* group = nullptr;
  CLI::App* import = nullptr;
  CLI::App* list = nullptr;
  CLI::App* rm = nullptr;
  CLI::App* gc = nullptr;
  CLI::App* push = nullptr;
  std::string name;
  std::string source;
  std::string dest;
  bool bare = false;             // push: without the /opt/abx runtime layer
  std::string bundle;            // abxd's --bundle
  std::string home;              // abxd's --home (gc keeps the images of its sandboxes)
  std::vector<std::string> env;  // import: K=V for a rootfs tarball's config
  std::string registry_auth;
  std::vector<std::string> insecure_registries;
};

void add_image_commands(CLI::App& app, ImageCommand& cmd);
// Runs the parsed subcommand; returns the process exit code (0 ok, 1 failed, 3 store unusable).
// `store`: abxd's --image-store, else $ABX_IMAGE_STORE, else <home>/images.
int run_image_command(const ImageCommand& cmd, const std::string& store);

}  // namespace abx::platform
