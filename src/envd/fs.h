// filesystem.Filesystem operations on the sandbox's own filesystem, and the inotify watcher
// behind WatchDir and the CreateWatcher/GetWatcherEvents/RemoveWatcher trio.
//
// envd is the sandbox's PID 1 inside its mount namespace, so "/" is the sandbox root: absolute
// paths need no further confinement here (the runtime's pivot_root provides it).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "users.h"

namespace abx::envd {

// A file's metadata (envd 0.6.2): key/value pairs kept as the file's `user.e2b.<key>` extended
// attributes (E2B's namespace). Keys and values are printable ASCII; the bounds below keep every
// set within what ext4 stores per inode (one block) and each request small.
using FileMetadata = std::vector<std::pair<std::string, std::string>>;
inline constexpr std::size_t kMaxMetadataEntries = 32;
inline constexpr std::size_t kMaxMetadataKeyBytes = 128;
inline constexpr std::size_t kMaxMetadataValueBytes = 1024;
inline constexpr std::size_t kMaxMetadataTotalBytes = 3072;  // keys and values together

// Sets each pair as the extended attribute `user.e2b.<key>` of the open file. Errors:
// failed_precondition when the filesystem has no user extended attributes, invalid_argument when
// it has no room for them, else the errno's.
Status set_file_metadata(int fd, const FileMetadata& metadata);

// EntryInfo of `path` (lstat: a symlink is reported as FILE_TYPE_SYMLINK with symlinkTarget).
// Its `user.e2b.*` extended attributes with printable-ASCII names and values, keyed without the
// prefix, are its `metadata` map (absent when there are none); other `user.*` ones are not shown.
Result<boost::json::object> entry_info(const std::string& path);

// ListDir: entries below `dir` down to `depth` levels (0 counts as 1); symlinked directories are
// listed, not descended into. Errors: not_found, invalid_argument (not a directory).
Result<boost::json::array> list_dir(const std::string& dir, std::uint32_t depth);

// mkdir -p owned by `owner` (when envd can chown). Errors: already_exists when `path` is already
// a directory; invalid_argument when it or a parent is a file.
Status make_dirs(const std::string& path, const User& owner, bool fail_if_exists);
// The directories of an upload's target, as E2B's envd makes them (EnsureDirs): mkdir -p as the
// user (the caller acts as `owner`, creds.h); where the user may not create a missing directory
// (e.g. /0 below "/"), envd as root makes it, mode 0755, owned by `owner`. Root's help goes only
// to a path the user can search all the way down without a symlink; otherwise the user's
// permission_denied stands.
Status make_upload_dirs(const std::string& dir, const User& owner);
Status move_path(const std::string& from, const std::string& to, const User& owner);
// Removes a file or a whole tree; a missing path is not an error (as os.RemoveAll).
Status remove_path(const std::string& path);
// chown to the user when envd runs as root; a no-op otherwise.
void chown_to(int fd, const User& user);

enum class FsEventType { kCreate = 1, kWrite = 2, kRemove = 3, kRename = 4, kChmod = 5 };
std::string_view fs_event_type_name(FsEventType t);

struct FsEvent {
  std::string name;  // relative to the watched directory
  FsEventType type;
};

// An inotify watch on a directory (optionally recursive, adding watches for new
// subdirectories), run on its own thread. `sink` gets each event; `tick` runs at least every
// `tick_interval` (for keepalives) — either returning false stops the watcher.
class Watcher {
 public:
  using Sink = std::function<bool(const FsEvent&)>;
  using Tick = std::function<bool()>;
  // The watch and its thread act as `user` (creds.h): it sees only what the user may read, and
  // the thread keeps the user's credentials for its life (it adds watches for new directories).
  // `watching`, if set, runs once the watches exist and before the thread reads an event: what
  // it does (a stream's start frame) comes before every event, and after it no change is missed.
  static Result<std::unique_ptr<Watcher>> start(const std::string& dir, bool recursive,
                                                const User& user, Sink sink, Tick tick,
                                                std::chrono::milliseconds tick_interval,
                                                const std::function<void()>& watching = {});
  ~Watcher();  // stops and joins
  void stop();
  bool running() const { return !done_.load(); }
  const std::string& dir() const { return dir_; }

 private:
  Watcher() = default;
  void run();
  void add_tree(const std::string& path, const std::string& rel);
  std::string dir_;
  User user_;
  bool recursive_ = false;
  UniqueFd inotify_;
  UniqueFd wake_;  // eventfd
  Sink sink_;
  Tick tick_;
  std::chrono::milliseconds tick_interval_{1000};
  std::atomic<bool> done_{false};
  std::map<int, std::string> paths_;  // watch descriptor → path relative to dir_ ("" = dir_)
  std::thread thread_;
};

}  // namespace abx::envd
