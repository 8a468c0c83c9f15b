// abx::pyworker — Python command modules served by the C++ command server (docs/python.md).
//
// `abx-server --python tools.py` does not load libpython: the /opt/abx bundle's binaries carry
// their own glibc, and an image's libpython next to it would put two C libraries in one
// process. Instead a Worker runs the image's own `python3` on python/abx/server/run.py (the
// abx.server.worker module), which imports the module (its `@sandbox.register` functions fill
// abx.server.registry) and then answers calls over a socketpair, in frames of a 4-byte
// big-endian length and UTF-8 JSON:
//
//   worker -> server, once   {"commands":[schema...],"pid":N}
//                            | {"error":"<traceback>","type":"<class>","pid":N}
//   server -> worker         {"call":"<name>","kwargs":{...}}   (kwargs already coerced)
//   worker -> server         {"result":<value>} | {"error":"<message>","type":"<class>"}
//
// register_commands() puts each reported command into a C++ CommandRegistry, so validation,
// coercion, GET /commands, MCP and the HTTP error bodies are the C++ server's. One worker runs
// one call at a time (module state is shared by every call; the GIL would serialise them
// anyway); callers queue on its lock. A worker that dies is restarted by the call that found it
// dead, which fails with kUnavailable (503); a call past `call_timeout` kills it likewise.
#pragma once

#include <sys/types.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/registry/registry.h"

namespace abx::pyworker {

// Largest frame either side sends or accepts (the worker's MAX_FRAME).
inline constexpr std::size_t kMaxFrameBytes = 64u << 20;

// The folder that holds the `abx` package: <dir of this executable>/../python (the /opt/abx
// bundle's python/), else the source tree's python/ (a build tree). kNotFound when neither has
// abx/server/run.py; a Worker then runs `python3 -m abx.server.worker`, for an interpreter
// that has abx installed (pip install ./python).
Result<std::string> package_dir();

struct WorkerOptions {
  std::string module;  // path of the command module (.py)
  // The interpreter: $ABX_PYTHON when set, else `python3` from $PATH (the image's own).
  std::string python;
  std::string package_dir;                    // empty: package_dir(), else -m
  std::chrono::milliseconds call_timeout{0};  // 0: none; past it the worker is killed
};

class Worker {
 public:
  // Starts the worker and reads its first frame. Errors: kFailedPrecondition with the module's
  // traceback when it fails to import (or registers nothing); kNotFound when the interpreter
  // cannot be started; kInternal for a worker that breaks the protocol.
  static Result<std::unique_ptr<Worker>> start(WorkerOptions options);
  // start() in two halves, so that a caller does its own start-up while the interpreter starts
  // and imports (abx-server prepares its HTTP side meanwhile: issue 37, create -> first call):
  // spawn() starts the process and returns at once (kNotFound, kFailedPrecondition for a module
  // that is not a file); ready() then reads the first frame, with start()'s errors. Nothing but
  // ready() may be called before ready() succeeded.
  static Result<std::unique_ptr<Worker>> spawn(WorkerOptions options);
  // A worker someone else started — envd, just before this server (`abx-server --python-fd`,
  // issue 37) — whose protocol socket is `sock`; ready() as for spawn(), and the first frame
  // names the worker's pid. It is not this process's child: how it ended is not known (envd
  // reaps it), and after it dies the next call starts a worker of our own, as after any death.
  static Result<std::unique_ptr<Worker>> adopt(WorkerOptions options, UniqueFd sock);
  Status ready();
  ~Worker();  // closes the socket (the worker exits at end of input) and reaps it

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The module's commands as GET /commands lists them.
  const boost::json::array& commands() const { return commands_; }
  const std::string& module() const { return opt_.module; }

  // Runs one call (serialised with every other). The result, or: kInternal typed with the
  // Python exception's class (ValueError, …, TypeError for a result JSON cannot carry);
  // kUnavailable when the worker died or broke the protocol (it is restarted before the call
  // returns; the message says whether that worked); kDeadlineExceeded when the call ran past
  // call_timeout (the worker is killed and restarted), or waited that long for the worker (the
  // call is then not run: the server has answered 504 already).
  Result<boost::json::value> call(std::string_view name, const boost::json::object& kwargs);

  // The worker's process id (0 when none is running); for tests and logs.
  pid_t pid() const;

 private:
  explicit Worker(WorkerOptions options) : opt_(std::move(options)) {}
  // Starts a process and reads its hello; on success pid_/sock_ are set.
  Result<boost::json::array> spawn_locked();
  // spawn_locked()'s halves: the process (pid_/sock_ set), then its hello.
  Status launch_locked();
  Result<boost::json::array> hello_locked();
  // Kills (if still running) and reaps the process; how it ended, as a phrase after "it":
  // "exited with status 1", "was killed by signal 9 (Killed)".
  std::string reap_locked(bool kill_first);
  Error died_locked(std::string_view name, const std::string& what, bool kill_first);

  WorkerOptions opt_;
  boost::json::array commands_;
  mutable std::mutex mu_;
  pid_t pid_ = 0;
  bool adopted_ = false;  // pid_ is not our child (adopt())
  UniqueFd sock_;
};

// Registers every command the worker reported into `reg`, each running through the worker on
// the server's worker pool. Errors: kInvalidArgument naming the command when the registry
// refuses it (a name taken by a C++ command, a schema it rejects).
Status register_commands(const std::shared_ptr<Worker>& worker, registry::CommandRegistry& reg);

// Layer-1 discovery: the module's commands, without a server (runs the worker and stops it).
// Errors as Worker::start.
Result<boost::json::array> describe_module(const std::string& module);

}  // namespace abx::pyworker
