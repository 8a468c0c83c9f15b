#include "abxd_images.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "abx/image/compose.h"
#include "abx/image/reference.h"
#include "abx/image/registry.h"
#include "abx/image/store.h"

namespace abx::platform {

void add_image_commands(CLI::App& app, ImageCommand& cmd) {
  cmd.group = app.add_subcommand("image", "Manage the image store offline (docs/templates.md)");
  cmd.group->require_subcommand(1);
  cmd.import = cmd.group->add_subcommand(
      "import",
      "Import SOURCE as NAME: a registry reference, oci-archive:PATH, "
      "docker-archive:PATH, oci:DIR, or rootfs-tar:PATH (a root filesystem tarball)");
  cmd.import->add_option("name", cmd.name, "Name the image is known by (template image abx:NAME)")
      ->required();
  cmd.import->add_option("source", cmd.source, "Where the image comes from")->required();
  cmd.import->add_option("--env", cmd.env, "K=V in the config of a rootfs-tar image; repeatable")
      ->take_all();
  cmd.import->add_option("--registry-auth", cmd.registry_auth, "docker-style auth.json for pulls");
  cmd.import
      ->add_option("--insecure-registry", cmd.insecure_registries,
                   "HOST[:PORT] reached over plain HTTP; repeatable")
      ->take_all();
  cmd.list = cmd.group->add_subcommand("list", "List named images: NAME DIGEST LAYERS SIZE");
  cmd.rm = cmd.group->add_subcommand("rm", "Remove a name (the data goes at the next gc)");
  cmd.rm->add_option("name", cmd.name, "Image name")->required();
  cmd.gc = cmd.group->add_subcommand("gc", "Remove blobs and layers no named image uses");
  cmd.push = cmd.group->add_subcommand(
      "push",
      "Push NAME to a registry REF with abx's runtime layer (/opt/abx, envd as "
      "entrypoint), so runc, crun or Kubernetes run it as an E2B sandbox");
  cmd.push->add_option("name", cmd.name, "Image name")->required();
  cmd.push->add_option("ref", cmd.dest, "Registry reference, e.g. 127.0.0.1:5000/abx/base:1")
      ->required();
  cmd.push->add_flag("--bare", cmd.bare, "Push the image as stored, without the runtime layer");
  cmd.push->add_option("--registry-auth", cmd.registry_auth, "docker-style auth.json");
  cmd.push
      ->add_option("--insecure-registry", cmd.insecure_registries,
                   "HOST[:PORT] reached over plain HTTP; repeatable")
      ->take_all();
}

namespace {

int fail(const Error& e) {
  std::cerr << "abxd image: " << e.message() << "\n";
  return 1;
}

Result<image::Image> import_source(image::Store& st, const ImageCommand& cmd) {
  auto progress = [](std::string_view line) { std::cerr << line << "\n"; };
  constexpr std::string_view kRootfsTar = "rootfs-tar:";
  if (cmd.source.rfind(kRootfsTar, 0) == 0) {
    std::string path = cmd.source.substr(kRootfsTar.size());
    std::cerr << "storing " << path << "\n";
    auto layer = image::add_tar_layer(st, path);
    if (!layer.ok()) return layer.error();
    image::ImageConfig config;
    config.env = cmd.env;
    return image::compose_image(st, {*layer}, config, progress);
  }
  auto ref = image::parse_reference(cmd.source);
  if (!ref.ok()) return ref.error();
  if (ref->transport != image::Transport::kRegistry) return st.import(*ref, progress);
  image::RegistryOptions ro;
  ro.auth_file = cmd.registry_auth;
  ro.insecure_registries = cmd.insecure_registries;
  ro.progress = progress;
  return image::pull(st, *ref, ro);
}

}  // namespace

int run_image_command(const ImageCommand& cmd, const std::string& store) {
  const std::string& root = store;
  auto st = image::Store::open(root);
  if (!st.ok()) {
    std::cerr << "abxd image: store " << root << ": " << st.error().message() << "\n";
    return 3;
  }
  if (cmd.import->parsed()) {
    auto img = import_source(*st, cmd);
    if (!img.ok()) return fail(img.error());
    if (Status s = st->tag(cmd.name, img->manifest_digest); !s) return fail(s.error());
    std::cout << cmd.name << " " << img->manifest_digest << "\n";
    return 0;
  }
  if (cmd.list->parsed()) {
    for (const auto& [name, digest] : st->tags()) {
      auto img = st->get(name);
      std::cout << name << " " << digest << " "
                << (img.ok() ? std::to_string(img->layers.size()) : "?") << " "
                << (img.ok() ? std::to_string(img->size) : "?") << "\n";
    }
    return 0;
  }
  if (cmd.rm->parsed()) {
    if (Status s = st->untag(cmd.name); !s) return fail(s.error());
    return 0;
  }
  if (cmd.push->parsed()) {
    auto ref = image::parse_reference(cmd.dest);
    if (!ref.ok()) return fail(ref.error());
    if (ref->transport != image::Transport::kRegistry) {
      return fail(invalid_argument("push needs a registry reference, not '" + cmd.dest + "'"));
    }
    auto img = st->get(cmd.name);
    if (!img.ok()) return fail(img.error());
    if (!cmd.bare) {
      img = image::with_runtime(*st, *img, cmd.bundle);
      if (!img.ok()) return fail(img.error());
    }
    image::RegistryOptions ro;
    ro.auth_file = cmd.registry_auth;
    ro.insecure_registries = cmd.insecure_registries;
    ro.progress = [](std::string_view line) { std::cerr << line << "\n"; };
    if (Status s = image::push(*st, *img, *ref, ro); !s) return fail(s.error());
    std::cout << ref->str() << " " << img->manifest_digest << "\n";
    return 0;
  }
  // Sandboxes of this home (running under an abxd, paused, or left for the next one) and its
  // snapshots keep their images.
  std::set<std::string> keep;
  for (const char* dir : {"/run", "/snapshots"}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(cmd.home + dir, ec)) {
      std::ifstream in(e.path() / "image");
      std::string digest;
      if (std::getline(in, digest) && !digest.empty()) keep.insert(digest);
    }
  }
  auto freed = st->gc(keep);
  if (!freed.ok()) return fail(freed.error());
  std::cout << "freed " << *freed << " bytes\n";
  return 0;
}

}  // namespace abx::platform
