// Template builds in abxd: a Dockerfile subset (abx/image/dockerfile.h) and a build context
// become an image in abxd's store, tagged NAME, and a template `NAME` served without a restart.
//
// Steps, in the Dockerfile's order:
//   FROM     `scratch` (no layers), `abx:NAME`, a template name (its image, through the
//            template_image hook), a store tag, else a reference pulled through the pull hook.
//   RUN      runs in a runtime sandbox of the image so far (its layers as overlay lower dirs,
//            the image's env and workdir, outbound networking under abxd's default rules when
//            the options name a SandboxNetwork (else loopback only), the abx bundle bound at
//            /opt/abx); stdout and stderr are streamed as log events; the sandbox's overlay
//            upper dir becomes the layer.
//   COPY/ADD a layer made from context files (build_context.h; sources may be globs); ADD
//            extracts local archives. COPY --from takes an earlier stage's files (its layers
//            flattened once into the workspace) with their owners.
// Each FROM starts a stage; the last one is the image. ARGs before the first FROM are seen by
// FROM lines, and in a stage once declared again (Docker's scoping).
//   WORKDIR  a layer with the directory when the image lacks it, and the config's WorkingDir.
//   ENV, USER, CMD, ENTRYPOINT, LABEL, ARG: the config only.
// Every layer step is cached by (the chain of layers so far, the instruction as expanded,
// the content digest of COPY/ADD sources, and for RUN the env/workdir it runs with); the cache
// is `<store root>/build-cache.json`, entries whose blob is gone are ignored. A build where
// every step hits the cache writes no new blob (config and manifest are deterministic).
//
// Failures ("Dockerfile:N: RUN exited with 1", a missing COPY source, …) leave no tag and no
// template; blobs that were written stay for the cache, temporary files never do. RUN runs as
// the USER in effect (this Dockerfile's or the base image's), resolved in the image's
// /etc/passwd and /etc/group as runc does, with HOME from passwd unless ENV sets it.
// The workspace (extracted context, staging trees) is <home>/build-work, emptied at start. A
// store gc while a build runs could drop the untagged intermediate layers its RUN sandboxes use
// as lower dirs: `abx template rm` waits for builds; `abxd image gc` is an operator's choice.
#pragma once

#include <atomic>
#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/log.h"
#include "abx/image/reference.h"
#include "abx/image/store.h"
#include "abx/runtime/sandbox.h"
#include "network.h"

namespace abx::platform {

// One progress event, as the API streams it (NDJSON): {"type":"step","step":N,"total":M,
// "instruction":"RUN …","cached":bool} or {"type":"log","line":"…"}.
using BuildProgress = std::function<void(const boost::json::object& event)>;

struct TemplateBuildOptions {
  std::string home;  // $ABX_HOME: templates/NAME/template.yaml goes under it
  image::Store* store = nullptr;
  std::string state_dir;                  // runtime state of RUN sandboxes (default <home>/builds)
  std::vector<runtime::BindMount> binds;  // the abx bundle under /opt/abx
  runtime::NetworkMode network = runtime::NetworkMode::kNone;
  // RUN steps get a link under abxd's default rules when set and enabled (as E2B's builds reach
  // the internet): apt-get, pip and curl work in a Dockerfile. Null: loopback only.
  SandboxNetwork* sandbox_network = nullptr;
  runtime::UserNamespace userns;  // RUN steps run as root of their own id range, like sandboxes
  std::uint64_t disk_bytes = 8ull << 30;         // each RUN step's writable layer
  runtime::CgroupLimits limits;                  // each RUN step's cgroup limits
  std::chrono::seconds run_timeout{3600};        // one RUN step
  std::uint64_t max_context_bytes = 8ull << 30;  // expanded context
  // FROM a registry reference: pull it into the store (registry.h). Unset: such a FROM fails.
  std::function<Result<image::Image>(const image::Reference&, const BuildProgress&)> pull;
  // FROM NAME where NAME is a template of the catalog: its image (pulled or imported on first
  // use). Unset, or not_found: NAME is looked up as a store tag, then as a reference.
  std::function<Result<image::Image>(const std::string& name)> template_image;
  // Called after template.yaml is written, so the catalog serves the new template.
  std::function<Status()> reload_templates;
  // Manifest digests of images running sandboxes stand on: gc after a removal keeps them.
  std::function<std::set<std::string>()> images_in_use;
};

struct BuildRequest {
  std::string name;         // the template id and the store tag
  std::string context_tar;  // host path of the uploaded context (tar, optionally compressed)
  // More context: each archive (host path, tar, optionally compressed) extracted into the
  // context's subdirectory `second` ("" is its root), after context_tar (which may be empty).
  std::vector<std::pair<std::string, std::string>> context_archives;
  // Files written into the context last (relative path -> contents), e.g. a generated
  // Dockerfile (the e2b SDK's Template builder, template_jobs.h).
  std::map<std::string, std::string> context_files;
  std::string dockerfile = "Dockerfile";  // path inside the context
  std::map<std::string, std::string> build_args;
  // Whether FROM may name this template or store tag (unset: any). The API passes the
  // requesting team's view: another team's built template is not found.
  std::function<bool(const std::string& name)> may_use;
  // Polled between steps and while a RUN runs (about once a second): true stops the build
  // (kUnavailable) and kills the RUN sandbox. E.g. the client went away.
  std::function<bool()> cancelled;
  // Steps from this Dockerfile line on are built again, not taken from the cache (their new
  // layers replace the cached ones); 0: the cache applies to every step (E2B's skipCache).
  int no_cache_from_line = 0;
};

struct BuildResult {
  std::string name;
  image::Image image;
  int steps = 0;
  int cached = 0;
};

class TemplateBuilder {
 public:
  explicit TemplateBuilder(TemplateBuildOptions options);

  // Builds; one build at a time per builder (others wait). Errors carry the Dockerfile line:
  // invalid_argument for a bad Dockerfile, context or missing source; failed_precondition for
  // a RUN that exited non-zero; not_found for an unknown FROM image.
  Result<BuildResult> build(const BuildRequest& req, const BuildProgress& progress);

  // Removes a built template: its template.yaml (only one this builder wrote), its tag, then
  // store gc. not_found if NAME was not built here.
  Status remove(const std::string& name);

  // True if NAME's template.yaml was written by a build (it carries the marker comment).
  bool is_built(const std::string& name) const;

  const TemplateBuildOptions& options() const { return opt_; }

  // Stops the running build and refuses new ones (abxd shutting down).
  void shutdown() { stopping_ = true; }
  bool stopping() const { return stopping_; }

 private:
  TemplateBuildOptions opt_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  Logger log_{"build"};
};

// The marker the first line of a built template.yaml carries.
inline constexpr std::string_view kBuiltMarker = "# built by abx template build";

// [a-z0-9][a-z0-9._-]{0,63}
bool valid_template_name(std::string_view name);

}  // namespace abx::platform
