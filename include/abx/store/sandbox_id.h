// abx::store::SandboxId — what a sandbox id is, decided in one place.
//
// abxd names each sandbox with 20 characters of [a-z0-9] drawn uniformly (about 103 bits), the
// shape of E2B's ids. Three questions are asked of a string that claims to be one:
//   - SandboxId::valid / parse: is it one abxd could have made? The store refuses anything else,
//     and only a valid id becomes a directory under <home>/run, a cgroup and a record.
//   - SandboxId::routable: may the router look it up? The same alphabet at 1..64 characters:
//     a Host name, E2b-Sandbox-Id header, /sandboxes/{id} or MCP argument of that shape that
//     names no sandbox is E2B's 404 "not found", not a 400 — only a name outside the alphabet
//     or past 64 characters is malformed.
//   - runtime::valid_sandbox_name (runtime/sandbox.h): may the runtime name a sandbox so? Its
//     names may also hold '-' (template builds name their build sandboxes), a superset.
// Every valid id is routable and a valid runtime name (sandbox_id_test checks both).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "abx/base/error.h"

namespace abx::store {

class SandboxId {
 public:
  static constexpr std::size_t kLength = 20;
  static constexpr std::size_t kMaxRoutable = 64;

  // A fresh random id (OpenSSL RAND_bytes); kInternal only if the generator fails.
  static Result<SandboxId> generate();
  // `text` as an id; kInvalidArgument (naming at most its first 64 bytes) unless valid().
  static Result<SandboxId> parse(std::string_view text);
  static bool valid(std::string_view text);
  static bool routable(std::string_view text);

  const std::string& str() const { return id_; }
  friend bool operator==(const SandboxId&, const SandboxId&) = default;

 private:
  explicit SandboxId(std::string id) : id_(std::move(id)) {}
  std::string id_;
};

}  // namespace abx::store
