#include "abx/testing/server.h"

namespace abx::testing {

const char* abx_server_bin() {
#ifdef ABX_SERVER_BIN
  return ABX_SERVER_BIN;
#else
  return "";
#endif
}

const char* demo_module() {
#ifdef ABX_DEMO_MODULE
  return ABX_DEMO_MODULE;
#else
  return "";
#endif
}

::testing::AssertionResult CommandServerProcess::start(const std::string& token,
                                                       std::vector<std::string> extra_args,
                                                       const std::string& module) {
  std::vector<std::string> argv{abx_server_bin(), "--module", module, "--port", "0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  std::vector<std::string> env;
  if (!token.empty()) env.push_back("ABX_ACCESS_TOKEN=" + token);
  proc_ = std::make_unique<ChildProcess>(argv, env);
  if (!proc_->started()) return ::testing::AssertionFailure() << "cannot run " << argv[0];
  auto port = proc_->wait_listening();
  if (!port) return ::testing::AssertionFailure() << "abx-server did not start";
  port_ = *port;
  return ::testing::AssertionSuccess();
}

}  // namespace abx::testing
