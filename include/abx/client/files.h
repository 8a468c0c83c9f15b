// Files in a sandbox: envd's /files REST (bytes) and filesystem.Filesystem Connect service.
//
// Every call first checks the sandbox's `files` capability (kFailedPrecondition naming it).
// Errors otherwise follow envd: kNotFound (no such path), kAlreadyExists, kInvalidArgument
// (e.g. not a directory), kUnauthenticated, kInsufficientStorage (507), kUnavailable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/client/export.h"

namespace abx::client {

namespace detail {
struct SandboxState;
struct WatchStream;
}  // namespace detail

struct ABX_EXPORT EntryInfo {
  std::string name;
  std::string path;
  std::string type;  // "file" | "dir" | "symlink" | "unknown"
  std::int64_t size = 0;
  std::uint32_t mode = 0;   // permission bits
  std::string permissions;  // "-rw-r--r--"
  std::string owner;
  std::string group;
  std::string modified_time;  // RFC 3339
  std::string symlink_target;
};

struct ABX_EXPORT FilesystemEvent {
  std::string name;  // path relative to the watched directory
  std::string type;  // "create" | "write" | "remove" | "rename" | "chmod"
};

class ABX_EXPORT WatchHandle {
 public:
  explicit WatchHandle(std::shared_ptr<detail::WatchStream> stream);
  WatchHandle(WatchHandle&&) noexcept;
  WatchHandle& operator=(WatchHandle&&) noexcept;
  ~WatchHandle();  // stops watching
  void stop();

 private:
  std::shared_ptr<detail::WatchStream> stream_;
};

class ABX_EXPORT Files {
 public:
  explicit Files(std::shared_ptr<detail::SandboxState> state) : state_(std::move(state)) {}

  Result<std::string> read(std::string_view path);
  // Creates parent directories; replaces an existing file.
  Result<EntryInfo> write(std::string_view path, std::string_view data);
  Result<std::vector<EntryInfo>> list(std::string_view path, std::uint32_t depth = 1);
  Result<EntryInfo> stat(std::string_view path);
  Result<bool> exists(std::string_view path);
  // False when it already exists.
  Result<bool> make_dir(std::string_view path);
  Status remove(std::string_view path);
  Result<EntryInfo> rename(std::string_view from, std::string_view to);
  // Calls `on_event` from a background thread for each change under `path` until the handle
  // is stopped or destroyed.
  Result<WatchHandle> watch(std::string_view path,
                            std::function<void(const FilesystemEvent&)> on_event,
                            bool recursive = false);

 private:
  std::shared_ptr<detail::SandboxState> state_;
};

}  // namespace abx::client
