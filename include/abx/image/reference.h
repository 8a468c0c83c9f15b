// abx::image references: where an image comes from, as written in template.yaml (`image:`),
// `abx template build` (FROM) and `abx template push`.
//
//   busybox                          -> docker.io/library/busybox:latest (Docker's normalisation)
//   ghcr.io/org/app:1.2              -> registry ghcr.io, repository org/app, tag 1.2
//   localhost:5000/app@sha256:<hex>  -> by digest (a tag before the digest is kept for display)
//   oci-archive:/path/img.tar[:tag]  -> a tar of an OCI image layout
//   docker-archive:/path/img.tar     -> what `docker save` writes
//   docker-archive:/p.tar:app:1      -> one image of a multi-image archive, by its RepoTags
//   oci:/path/layout[:tag]           -> an OCI image layout directory
// As in skopeo, the path ends at its first ':' (the rest is the tag). A registry host is kept as
// written (Docker does not lower-case it either); "index.docker.io" is docker.io; "docker://"
// in front is accepted. Repository names must be lower case.
// Relative archive and layout paths are resolved by the caller (template.yaml: against the
// file's folder) before parse_reference sees them.
#pragma once

#include <string>
#include <string_view>

#include "abx/base/error.h"

namespace abx::image {

enum class Transport { kRegistry, kOciArchive, kDockerArchive, kOciLayout };

struct Reference {
  Transport transport = Transport::kRegistry;
  // kRegistry: the registry host[:port] ("docker.io" for Docker Hub; the API host for it is
  // registry-1.docker.io), repository ("library/busybox"), tag and/or digest.
  std::string registry;
  std::string repository;
  std::string tag;     // "latest" when neither tag nor digest was given
  std::string digest;  // "sha256:<64 hex>" or empty
  // Archives and layouts: the path, and for oci:/oci-archive: an optional tag (ref.name).
  std::string path;

  // The canonical form, e.g. "docker.io/library/busybox:latest", "oci-archive:/x.tar".
  std::string str() const;
  // The host to talk HTTP to: registry-1.docker.io for docker.io, else `registry`.
  std::string api_host() const;
};

// Parses a reference; invalid_argument naming the reference and what is wrong with it.
Result<Reference> parse_reference(std::string_view text);

// True for a "sha256:" + 64 lowercase hex digest.
bool valid_digest(std::string_view digest);

}  // namespace abx::image
