// abx::image registry client: pulls images from and pushes them to OCI Distribution registries
// (Docker Hub, ghcr.io, quay.io, a local `docker-registry`) into and out of an image Store.
//
//   auto store = Store::open(home + "/images");
//   auto ref = parse_reference("ghcr.io/org/app:1.2");
//   auto img = pull(*store, *ref, {});            // manifest, config and layers, verified
//   push(*store, img->manifest_digest, *parse_reference("localhost:5000/app:1.2"), {});
//
// Pull: GET /v2/<repo>/manifests/<tag|digest> (OCI manifest/index, Docker v2 manifest/list,
// parsed by manifest.h); an index picks linux/amd64 (select_platform); the config is streamed
// into Store::blob_writer and the layers, parallel_layers at a time on connections of their own,
// into Store::layer_writer, which extracts each while it downloads (sha256 and size checked
// while streaming; nothing half-stored or half-extracted on failure, and the first failure
// abandons the other layers in flight); blobs already there are skipped; then Store::add_image
// and the reference's str() is tagged. Push: each blob the registry lacks (HEAD) is uploaded
// monolithically (POST + PUT ?digest=), then the manifest is PUT.
//
// Transport: HTTPS verified against the system CAs (+ RegistryOptions::ca_file), with SNI and
// host name checks. Plain HTTP only for loopback hosts (localhost, 127.0.0.0/8, [::1]) and hosts
// listed in insecure_registries, and only when they do not speak TLS (a certificate error is
// never downgraded). Every connect and read has a deadline; manifests are capped at
// max_manifest_bytes and a blob at the size its manifest gives.
//
// Auth: Docker's `auths` file format ({"auths":{"host[:port]":{"auth":"base64(user:pass)"}}}),
// `Bearer` token challenges (the token is fetched from the realm, with the basic credentials if
// any) and `Basic` challenges. Redirects (blob storage) are followed up to max_redirects, and
// Authorization is dropped when a redirect leaves the registry's host.
//
// Errors name the reference: kUnavailable (registry unreachable, TLS failure), kDeadlineExceeded,
// kUnauthenticated (credentials missing or rejected), kPermissionDenied (403), kNotFound (tag or
// blob unknown; no linux/amd64 image in an index — the message lists the platforms there),
// kInvalidArgument (digest or size mismatch; a malformed manifest, or one whose manifest or
// config media type is not an image's — manifest.h's messages), kUnsupportedMediaType (a layer
// type we cannot unpack, refused before any blob is fetched), kPayloadTooLarge (manifest over
// the limit). Push errors name the destination.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/image/reference.h"
#include "abx/image/store.h"

namespace abx::image {

struct RegistryOptions {
  // A Docker-style auth file. Empty: the first of $ABX_HOME/auth.json (~/.abx/auth.json),
  // $REGISTRY_AUTH_FILE and ~/.docker/config.json that has an entry for the registry. Missing
  // files mean no credentials (anonymous); a file that exists but is malformed is an error.
  // Credential helpers (credsStore/credHelpers) are not consulted.
  std::string auth_file;
  // Extra PEM CA certificates trusted besides the system's (a private registry, tests).
  std::string ca_file;
  // host[:port] entries that may be talked to over plain HTTP (loopback hosts always may).
  std::vector<std::string> insecure_registries;
  // One line per blob when it starts (with its size) and when it is done, and its bytes so far
  // every progress_interval while it downloads; may be empty. Called from one thread at a time.
  std::function<void(std::string_view line)> progress;
  std::chrono::milliseconds progress_interval{2'000};
  // Layers downloaded (and extracted as they arrive) at the same time.
  int parallel_layers = 3;

  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds read_timeout{60'000};  // each read and write, not a whole transfer
  std::size_t max_manifest_bytes = 4 << 20;
  int max_redirects = 5;
};

// Pulls `ref` (Transport::kRegistry) into `store`, tags ref.str() and returns the image.
Result<Image> pull(Store& store, const Reference& ref, const RegistryOptions& options = {});

// Pushes the image whose manifest blob is `manifest_digest` (with its config and layers, all in
// `store`) to `dest`: under dest.tag, or by digest when dest has only a digest (which must be
// `manifest_digest`).
Status push(Store& store, std::string_view manifest_digest, const Reference& dest,
            const RegistryOptions& options = {});
inline Status push(Store& store, const Image& image, const Reference& dest,
                   const RegistryOptions& options = {}) {
  return push(store, image.manifest_digest, dest, options);
}

}  // namespace abx::image
