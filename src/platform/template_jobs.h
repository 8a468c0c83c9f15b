// Templates as code: the e2b SDK's `Template` builder (Template.build / buildInBackground) on
// top of abxd's Dockerfile builder (template_build.h).
//
// The SDK's flow, and what each call becomes here:
//   POST /v3/templates {name, tags}          request(): a build record ("waiting"), the name
//                                            claimed for the team as POST /templates/build does
//   GET  /templates/{id}/files/{hash}        file_link(): {present} for a COPY's content hash;
//                                            when absent, a one-time upload URL on abxd itself
//   PUT  <that URL>                          accept_upload(): the tar of that COPY's sources,
//                                            kept under <home>/template-files/<id>/<hash>
//   POST /v2/templates/{id}/builds/{buildID} start(): the steps become a Dockerfile
//                                            (translate()), built on a thread of this object
//   GET  .../builds/{buildID}/status|logs    the record: status, log entries, the failure
//
// Build records are kept in memory and written through to the store (schema 11): status, tags,
// requested resources and the log (its first kMaxStoredLogLines lines, written in batches), so
// they survive an abxd restart. A build that was waiting or building when abxd stopped is loaded
// as `error` ("abxd restarted during the build"), never left `building`. A template's tags name
// its builds: "default" is the latest build.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "abx/base/error.h"
#include "abx/store/store.h"
#include "template_build.h"

namespace abx::platform {

struct BuildLogLine {
  std::int64_t ms = 0;  // unix milliseconds
  std::string level;    // debug | info | warn | error
  std::string message;
  std::string step;  // the SDK's step ("base", "1", …, "finalize"), may be empty
};

struct TemplateBuildRecord {
  std::string template_id;  // the template's name (abx has no separate id)
  std::string build_id;
  std::string team;
  std::string status = "waiting";  // waiting | building | ready | error
  std::vector<BuildLogLine> logs;
  std::string reason;       // status error: the message
  std::string reason_step;  // status error: the SDK's step it failed at
  std::vector<std::string> tags;
  std::int64_t created_ms = 0;
  double cpu_count = 0;           // POST /v3/templates cpuCount (0: not given)
  std::int64_t memory_mb = 0;     // POST /v3/templates memoryMB (0: not given)
  std::size_t stored_logs = 0;    // how many of `logs` are in the store
  std::int64_t stored_at_ms = 0;  // when logs were last written to the store
};

// Log lines of a build kept in the store (the rest stay in memory until a restart).
inline constexpr std::size_t kMaxStoredLogLines = 10'000;

// What translate() makes of a TemplateBuildStartV2 body.
struct TranslatedTemplate {
  std::string dockerfile;
  std::string from_template;  // fromTemplate's template name, "" for an image
  // COPY steps' content hashes, each extracted into the context's directory of the same name.
  std::vector<std::string> file_hashes;
  // Dockerfile line -> the SDK's step ("base" for FROM, "1".."N" for steps, "finalize").
  std::map<int, std::string> line_step;
  // Steps that install packages (pipInstall, aptInstall, npmInstall): a failure there says they
  // need a reachable package index.
  std::set<std::string> package_steps;
  // E2B's skipCache/force: the Dockerfile line from which every step is built again instead of
  // taken from the cache (1: the whole build, the template's skipCache(); a step's `force`, the
  // builder's skipCache() before a step, from that step's first line). 0: the cache applies.
  int no_cache_from_line = 0;
};

// The body of POST /v2/templates/{id}/builds/{buildID} as a Dockerfile. invalid_argument names
// the step for a bad one; fromImageRegistry (credentials) is unimplemented.
Result<TranslatedTemplate> translate_template(const boost::json::object& body);

class TemplateJobs {
 public:
  // `files_dir` holds the uploaded COPY tars (<files_dir>/<template>/<hash>). With a `store`,
  // the records of earlier runs are loaded (unfinished ones become `error`) and every change is
  // written through; without one (tests) they live in memory only.
  TemplateJobs(TemplateBuilder& builder, std::string files_dir, store::Store* store = nullptr);
  ~TemplateJobs();  // waits for running builds (TemplateBuilder::shutdown stops them first)
  TemplateJobs(const TemplateJobs&) = delete;
  TemplateJobs& operator=(const TemplateJobs&) = delete;

  // A new build of `name` for `team`: its record, status "waiting".
  TemplateBuildRecord request(const std::string& name, const std::string& team,
                              std::vector<std::string> tags, double cpu_count = 0,
                              std::int64_t memory_mb = 0);
  // A copy of the record; not_found unless it is `team`'s build of `template_id`.
  Result<TemplateBuildRecord> get(const std::string& template_id, const std::string& build_id,
                                  const std::string& team) const;
  // The builds of `template_id` (newest first).
  std::vector<TemplateBuildRecord> builds_of(const std::string& template_id,
                                             const std::string& team) const;
  // Points `tags` of `template_id` at `build_id` (already checked to be the team's and ready).
  void set_tags(const std::string& template_id, const std::string& build_id,
                const std::vector<std::string>& tags);
  // Removes `tags` from the builds of `template_id`; not_found naming a tag none carries.
  Status remove_tags(const std::string& template_id, const std::vector<std::string>& tags);
  // Forgets every build of a removed template.
  void forget(const std::string& template_id);

  // {present} for `hash` of `template_id`; when absent also a one-time token for the upload.
  bool has_file(const std::string& template_id, const std::string& hash) const;
  Result<std::string> upload_token(const std::string& template_id, const std::string& hash);
  // True if `token` is a live upload token for (template_id, hash).
  bool upload_allowed(const std::string& template_id, const std::string& hash,
                      const std::string& token) const;
  // Moves the uploaded tar at `path` into place (consuming the token).
  Status accept_upload(const std::string& template_id, const std::string& hash,
                       const std::string& token, const std::string& path);

  // Starts the build on a thread: `tt` from translate_template, `may_use` the team's view of
  // templates for FROM. failed_precondition if the build is not waiting or a file is missing.
  Status start(const std::string& template_id, const std::string& build_id, TranslatedTemplate tt,
               std::function<bool(const std::string&)> may_use);

 private:
  void run(std::string template_id, std::string build_id, BuildRequest req,
           std::map<int, std::string> line_step, std::set<std::string> package_steps);
  void log(const std::string& build_id, std::string level, std::string message,
           std::string step = {});
  // Loads the store's records (constructor); unfinished builds end as error.
  void load();
  // Writes `r` (and, with logs, its log lines not yet stored) to the store; mu_ held. A store
  // failure is logged, never fails the build.
  void persist(TemplateBuildRecord& r, bool logs);

  TemplateBuilder& builder_;
  std::string files_dir_;
  store::Store* store_ = nullptr;
  mutable std::mutex mu_;
  std::map<std::string, TemplateBuildRecord> builds_;  // by build id
  struct Upload {
    std::string template_id, hash;
    std::int64_t expires_ms = 0;
  };
  std::map<std::string, Upload> uploads_;       // by token
  std::map<std::string, std::thread> threads_;  // by build id; joined once it ended
};

}  // namespace abx::platform
