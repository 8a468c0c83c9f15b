// What the sandbox manager's files (sandboxes.cc, sandbox_create.cc, sandbox_lifecycle.cc)
// share besides sandboxes.h.
#pragma once

#include <boost/json/object.hpp>
#include <string>

#include "abx/store/store.h"
#include "network.h"

namespace abx::platform {

// <home>/run/<id>/image: the manifest digest a sandbox runs on, so that an abxd that adopts it
// (and `abxd image gc`) know which image it still needs.
inline constexpr const char* kImageFile = "image";

// <home>/checkpoints/<id>/rw.img: the writable layer a filesystem-only pause keeps.
inline constexpr const char* kKeptLayer = "rw.img";

// What the store keeps of a sandbox's network (SandboxNetworkSpec::from_json reads it).
boost::json::object network_record(const SandboxNetworkSpec& net);

// A sandbox record's settings as JSON (a snapshot's sandbox.json part, a moved sandbox's
// record) and back; record_from_json throws (std::exception) on a missing or mistyped field.
boost::json::object record_json(const store::SandboxRecord& r);
store::SandboxRecord record_from_json(const boost::json::object& o);

// A moved sandbox's archive (migration.cc), read: its record, the home it came from, and how it
// was when it left: running (paused to disk for the move: resumed on arrival), or paused to disk
// with its memory or filesystem-only (it stays paused).
struct MoveRecord {
  store::SandboxRecord record;
  std::string home;
  bool paused = false;
  bool filesystem_only = false;  // implies paused
};
// Extracts the tar at `tar_path` (what SandboxManager::move_out writes) under `dest`, which has
// checkpoint/ and run/ (regular files only, sparse regions kept sparse), and parses its
// record.json. kInvalidArgument for anything else (fuzzed: move_archive_fuzz).
Result<MoveRecord> read_move_archive(const std::string& tar_path, const std::string& dest);

}  // namespace abx::platform
