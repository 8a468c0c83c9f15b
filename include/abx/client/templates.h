// libabx template management on an abxd (abx extensions of the E2B API): build a template from
// a Dockerfile and a context directory, inspect its image, remove it, push it to a registry.
//
//   abx::client::BuildOptions o;
//   o.name = "hello";
//   auto t = abx::client::build_template("./ctx", o, [](const abx::client::BuildEvent& e) {
//     if (e.type == "step") std::cout << e.step << "/" << e.total << " " << e.instruction << "\n";
//   }, cfg);
//
// build_template tars the context directory (libarchive; regular files, directories and
// symlinks, with modes and mtimes) in memory, POSTs it to /templates/build and calls the
// callback for each NDJSON progress event as it arrives. Builds authenticate with the API key
// (ABX_API_KEY): AK/SK signing of a multi-megabyte upload is not supported.
// Errors: the platform's, by status (see sandbox.h), and for a failed build the build's own
// message ("Dockerfile:3: RUN exited with 1") with kFailedPrecondition, kInvalidArgument, ….
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "abx/base/error.h"
#include "abx/client/config.h"
#include "abx/client/export.h"

namespace abx::client {

struct ABX_EXPORT BuildOptions {
  std::string name;  // the template id, required
  // The Dockerfile: a path relative to the context, or any path on this machine (then it is
  // sent along inside the upload). Default: <context>/Dockerfile.
  std::string dockerfile;
  std::map<std::string, std::string> build_args;  // ARG values
  std::uint64_t max_context_bytes = 2ull << 30;   // refused locally above this
};

// One progress event: type "context" (bytes: the build context about to be sent; made here,
// before the upload), "step" (step, total, instruction, cached), "layer" (step, bytes: the layer a
// step added; none for a cached step), "log" (line), "done" (template) or "error" (message).
// `raw` is the event as sent.
struct ABX_EXPORT BuildEvent {
  std::string type;
  int step = 0;
  int total = 0;
  std::string instruction;
  bool cached = false;
  std::string line;        // log
  std::string message;     // error
  std::int64_t bytes = 0;  // context, layer
  boost::json::object raw;
};
using BuildCallback = std::function<void(const BuildEvent&)>;

// Returns the built template (the "done" event's "template" object).
ABX_EXPORT Result<boost::json::object> build_template(const std::string& context_dir,
                                                      const BuildOptions& options,
                                                      const BuildCallback& on_event,
                                                      const ConnectionConfig& config);

// GET /templates/{id}/image: manifest digest, layers (digest, size), size and config.
ABX_EXPORT Result<boost::json::object> template_image(std::string_view template_id,
                                                      const ConnectionConfig& config);
// DELETE /templates/{id}: built templates only. kNotFound, kFailedPrecondition (not built).
ABX_EXPORT Status delete_template(std::string_view template_id, const ConnectionConfig& config);
// POST /templates/{id}/push {"ref","bare"}: returns {"ref","digest"}. Unless `bare`, abxd adds
// abx's runtime layer (/opt/abx, abx-envd as the entrypoint) so any OCI runtime runs the image.
ABX_EXPORT Result<boost::json::object> push_template(std::string_view template_id,
                                                     std::string_view ref,
                                                     const ConnectionConfig& config,
                                                     bool bare = false);

// The tar the build uploads (exposed for tests): `context_dir` as a tar in memory, plus
// `extra_name` with `extra_data` when extra_name is not empty. kResourceExhausted over
// max_bytes, kNotFound/kInvalidArgument for a missing or unreadable context.
ABX_EXPORT Result<std::string> tar_context(const std::string& context_dir, std::uint64_t max_bytes,
                                           const std::string& extra_name = {},
                                           const std::string& extra_data = {});

}  // namespace abx::client
