#include "abx/image/manifest.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace abx::image {
namespace {

std::string corpus(const std::string& name) {
  std::ifstream f(std::string(ABX_IMAGE_SOURCE_DIR) + "/corpus_manifest/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ImageManifest, OciAndDocker) {
  auto m = parse_manifest(corpus("oci_manifest.json"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->media_type, kOciManifest);
  ASSERT_EQ(m->layers.size(), 2u);
  EXPECT_EQ(m->layers[0].size, 2814446);
  EXPECT_EQ(*layer_compression(m->layers[0].media_type), LayerCompression::kGzip);
  EXPECT_EQ(*layer_compression(m->layers[1].media_type), LayerCompression::kZstd);

  auto d = parse_manifest(corpus("docker_manifest.json"));
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->media_type, kDockerManifest);
  EXPECT_EQ(*layer_compression(d->layers[0].media_type), LayerCompression::kGzip);
  EXPECT_EQ(*manifest_kind(corpus("docker_manifest.json")), ManifestKind::kManifest);
}

TEST(ImageManifest, IndexIsRejectedByParseManifestAndSelectable) {
  auto m = parse_manifest(corpus("oci_index.json"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("image index"), std::string::npos);
  auto idx = parse_index(corpus("oci_index.json"));
  ASSERT_TRUE(idx.ok()) << idx.error().message();
  EXPECT_EQ(select_platform(*idx)->digest, idx->manifests[0].digest);
  EXPECT_EQ(select_platform(*idx, "linux", "arm64")->digest, idx->manifests[1].digest);
  auto none = select_platform(*idx, "linux", "s390x");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(none.error().message().find("linux/arm64/v8"), std::string::npos);

  auto list = parse_index(corpus("docker_list.json"));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->media_type, kDockerManifestList);
  EXPECT_FALSE(select_platform(*list, "linux", "arm", "v6").ok());
  EXPECT_TRUE(select_platform(*list, "linux", "arm", "v7").ok());
  // No mediaType (OCI layouts' index.json): inferred from "manifests".
  EXPECT_EQ(*manifest_kind(corpus("layout_index.json")), ManifestKind::kIndex);
}

TEST(ImageManifest, ClearErrors) {
  auto foreign = parse_manifest(corpus("foreign_layer.json"));
  ASSERT_TRUE(foreign.ok());
  auto c = layer_compression(foreign->layers[0].media_type);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("rootfs.foreign.diff.tar.gzip"), std::string::npos);
  auto u = layer_compression("application/vnd.example.thing");
  EXPECT_NE(u.error().message().find("application/vnd.example.thing"), std::string::npos);
  EXPECT_NE(parse_manifest(corpus("schema1.json")).error().message().find("schema 1"),
            std::string::npos);
  EXPECT_FALSE(parse_manifest(corpus("bad_digest.json")).ok());
  EXPECT_FALSE(parse_manifest(corpus("dup_key.json")).ok());
  EXPECT_FALSE(parse_manifest(std::string(kMaxManifestBytes + 1, ' ')).ok());
  std::string deep(100, '[');
  EXPECT_FALSE(parse_manifest(deep + std::string(100, ']')).ok());
}

TEST(ImageManifest, ImageConfig) {
  auto c = parse_image_config(corpus("config.json"));
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->env.size(), 2u);
  EXPECT_EQ(c->entrypoint, std::vector<std::string>{"/docker-entrypoint.sh"});
  EXPECT_EQ(c->cmd.size(), 3u);
  EXPECT_EQ(c->working_dir, "/srv");
  EXPECT_EQ(c->user, "app");
  EXPECT_EQ(c->labels.at("maintainer"), "someone");
  EXPECT_TRUE(parse_image_config("{}").ok());
  EXPECT_FALSE(parse_image_config(R"({"config":{"Env":"x"}})").ok());
}

}  // namespace
}  // namespace abx::image
