// abx-interp's HTTP service: E2B's code-interpreter API on top of Jupyter kernels (kernel.h),
// so the official `@e2b/code-interpreter` SDK drives it unmodified (docs/code-interpreter.md).
//
//   GET    /health                    "OK"
//   POST   /execute                   {code, context_id?, language?, env_vars?} -> NDJSON stream
//   GET    /contexts                  [{id, language, cwd}]
//   POST   /contexts                  {language?, cwd?} -> {id, language, cwd}
//   POST   /contexts/{id}/restart     fresh kernel, same context id
//   DELETE /contexts/{id}
//
// /execute answers 200 once the context's kernel is running (started on first use) and then
// streams one JSON object per line as the kernel produces output:
//   {"type":"number_of_executions","execution_count":N}
//   {"type":"stdout"|"stderr","text":"...","timestamp":"<ISO 8601>"}
//   {"type":"result","is_main_result":bool,"text":..,"html":..,"png":..,"json":..,"extra":{..}}
//   {"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":"..."}
//   {"type":"keepalive"}               while the code runs silently (a dead client shows here)
//   {"type":"end_of_execution"}        always last
// When the client goes away before the end (the SDK's timeoutMs aborts the request), the
// execution is interrupted (SIGINT, a KeyboardInterrupt in Python) and the context stays usable.
//
// Errors before the stream are plain text, as E2B's server sends them (the SDK puts the body of
// a 404 in its NotFoundError): 400 malformed body, both context_id and language, an unsupported
// language, a bad env var or cwd; 404 unknown context; 429 too many contexts; 503 a kernel that
// would not start (with its stderr tail).
//
// Authentication is abxd's proxy's (a sandbox port); the service listens on loopback inside
// the sandbox and runs as the sandbox's default user, so code runs as that user.
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "abx/base/error.h"
#include "abx/http/server.h"
#include "abx/interp/wire.h"

namespace abx::interp {

inline constexpr std::uint16_t kDefaultPort = 49999;  // E2B's JUPYTER_PORT

struct ServiceOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = kDefaultPort;
  int io_threads = 1;
  http::Limits limits;
  // How a Python kernel starts ("{connection_file}" is replaced).
  std::vector<std::string> python_argv{"python3", "-m", "ipykernel_launcher", "-f",
                                       "{connection_file}"};
  std::string default_cwd;  // "" = $HOME, else "/"
  std::string runtime_dir;  // kernels' private directories; "" = $TMPDIR or /tmp
  std::size_t max_contexts = 32;
  std::chrono::milliseconds kernel_start_timeout{60'000};
  std::chrono::milliseconds keepalive_interval{1'000};
  // Start the default Python context's kernel right away, in the background, instead of on its
  // first execution (about a second): a sandbox's first runCode then finds it warm. An execution
  // that comes while it starts waits for it, as it would for its own start.
  bool start_default_kernel = false;
};

// The E2B event for one iopub message of an execution, or nothing for messages the API does not
// carry (status, clear_output, comms, ...). `errored` keeps only the first error of an
// execution, as E2B does.
std::optional<boost::json::object> e2b_event(const Message& msg, bool& errored);

class Service {
 public:
  static Result<std::unique_ptr<Service>> start(ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  std::uint16_t port() const;
  // Stops serving (drain), then shuts every kernel down.
  void shutdown(std::chrono::milliseconds drain);
  void wait();

  struct Impl;

 private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace abx::interp
