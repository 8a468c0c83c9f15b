#include "abx/image/reference.h"

#include <gtest/gtest.h>

#include <vector>

namespace abx::image {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');

Reference reference_ok(std::string_view s) {
  auto r = parse_reference(s);
  EXPECT_TRUE(r.ok()) << s << ": " << (r.ok() ? "" : r.error().message());
  return r.ok() ? *r : Reference{};
}

TEST(ImageReference, DockerNormalisation) {
  auto r = reference_ok("busybox");
  EXPECT_EQ(r.transport, Transport::kRegistry);
  EXPECT_EQ(r.registry, "docker.io");
  EXPECT_EQ(r.repository, "library/busybox");
  EXPECT_EQ(r.tag, "latest");
  EXPECT_EQ(r.digest, "");
  EXPECT_EQ(r.str(), "docker.io/library/busybox:latest");
  EXPECT_EQ(r.api_host(), "registry-1.docker.io");

  EXPECT_EQ(reference_ok("user/app:1").str(), "docker.io/user/app:1");
  EXPECT_EQ(reference_ok("docker.io/busybox").str(), "docker.io/library/busybox:latest");
  EXPECT_EQ(reference_ok("index.docker.io/library/busybox:1.36").str(),
            "docker.io/library/busybox:1.36");
  EXPECT_EQ(reference_ok("docker://alpine:3").str(), "docker.io/library/alpine:3");
}

TEST(ImageReference, RegistriesPortsDigests) {
  auto r = reference_ok("ghcr.io/org/app:1.2");
  EXPECT_EQ(r.registry, "ghcr.io");
  EXPECT_EQ(r.repository, "org/app");
  EXPECT_EQ(r.tag, "1.2");
  EXPECT_EQ(r.api_host(), "ghcr.io");

  r = reference_ok("localhost:5000/app@" + kDigest);
  EXPECT_EQ(r.registry, "localhost:5000");
  EXPECT_EQ(r.repository, "app");
  EXPECT_EQ(r.tag, "");
  EXPECT_EQ(r.digest, kDigest);
  EXPECT_EQ(r.str(), "localhost:5000/app@" + kDigest);

  r = reference_ok("localhost/app:v1@" + kDigest);
  EXPECT_EQ(r.tag, "v1");
  EXPECT_EQ(r.str(), "localhost/app:v1@" + kDigest);

  r = reference_ok("127.0.0.1:5000/a/b/c");
  EXPECT_EQ(r.registry, "127.0.0.1:5000");
  EXPECT_EQ(r.repository, "a/b/c");
  EXPECT_EQ(reference_ok("[::1]:5000/x:y").registry, "[::1]:5000");
  // Kept as written (as Docker does): "UPPER/x" names registry UPPER, and lower-casing it
  // would turn it into a Docker Hub repository.
  EXPECT_EQ(reference_ok("UPPER/x").registry, "UPPER");
  EXPECT_EQ(reference_ok("a.b/x__y.z-w---v").repository, "x__y.z-w---v");
}

TEST(ImageReference, LocalTransports) {
  auto r = reference_ok("oci-archive:/path/img.tar:v1");
  EXPECT_EQ(r.transport, Transport::kOciArchive);
  EXPECT_EQ(r.path, "/path/img.tar");
  EXPECT_EQ(r.tag, "v1");
  EXPECT_EQ(r.str(), "oci-archive:/path/img.tar:v1");
  r = reference_ok("docker-archive:/x.tar");
  EXPECT_EQ(r.transport, Transport::kDockerArchive);
  EXPECT_EQ(r.path, "/x.tar");
  EXPECT_EQ(r.tag, "");
  EXPECT_EQ(r.str(), "docker-archive:/x.tar");
  EXPECT_EQ(reference_ok("docker-archive:/x.tar:app:1").tag, "app:1");
  r = reference_ok("oci:/layout");
  EXPECT_EQ(r.transport, Transport::kOciLayout);
  EXPECT_EQ(r.path, "/layout");
  EXPECT_EQ(r.str(), "oci:/layout");
}

TEST(ImageReference, Rejects) {
  for (const std::string& bad : std::vector<std::string>{"",
                                                         "UPPERx",
                                                         "docker.io/Library/x",
                                                         "a//b",
                                                         "-a",
                                                         "a-",
                                                         "a..b",
                                                         "a:",
                                                         "a:-tag",
                                                         "a:" + std::string(129, 't'),
                                                         "a@sha256:abc",
                                                         "a@md5:" + std::string(32, '0'),
                                                         "a@sha256:" + std::string(64, 'A'),
                                                         "host:port/x",
                                                         "bad_host.com/x",
                                                         ":tag",
                                                         "/x",
                                                         "x/",
                                                         "oci:",
                                                         "oci-archive::tag",
                                                         "oci:/p:bad tag",
                                                         "a\nb",
                                                         "r.io/" + std::string(260, 'a'),
                                                         std::string(5000, 'a')}) {
    auto r = parse_reference(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(r.error().message().rfind("invalid image reference \"", 0), 0u)
          << r.error().message();
    }
  }
  EXPECT_NE(parse_reference("Docker.io/Busybox").error().message().find("lowercase"),
            std::string::npos);
}

TEST(ImageReference, ValidDigest) {
  EXPECT_TRUE(valid_digest(kDigest));
  EXPECT_FALSE(valid_digest("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(valid_digest("sha256:" + std::string(64, 'g')));
  EXPECT_FALSE(valid_digest("sha512:" + std::string(64, 'a')));
}

}  // namespace
}  // namespace abx::image
