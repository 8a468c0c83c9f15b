// Calls a registered command of a running command server: abx::client in five lines.
#include <abx/client/sandbox.h>

#include <boost/json/serialize.hpp>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) return std::cerr << "usage: consumer SERVER_URL TOKEN\n", 2;
  abx::client::ConnectionConfig cfg;
  cfg.server_url = argv[1];
  abx::client::SandboxInfo info;
  info.sandbox_id = "local";
  info.envd_access_token = argv[2];
  auto sandbox = abx::client::Sandbox::attach(info, cfg);
  auto r = sandbox.server().call("greet", {{"name", "sdk"}, {"times", 2}});
  if (!r.ok()) return std::cerr << r.error().to_string() << "\n", 1;
  std::cout << boost::json::serialize(*r) << "\n";
}
