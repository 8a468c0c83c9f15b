// Envd::Impl, shared by envd.cc (routing, auth, /files, lifecycle) and one file per Connect
// service (process_service.cc, filesystem_service.cc), each of which adds its methods to the
// method tables with register_*_service().
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"
#include "abx/envd/envd.h"
#include "abx/http/server.h"
#include "fs.h"
#include "host_info.h"
#include "process.h"
#include "users.h"

namespace abx::envd {

// A CreateWatcher watcher: events wait here until GetWatcherEvents takes them.
struct PollWatcher {
  std::mutex mu;
  std::deque<boost::json::object> events;
  std::unique_ptr<Watcher> watcher;
};

struct Envd::Impl {
  EnvdOptions opt;  // opt.access_token is moved into `token` at start
  // The access token (null: no auth). Request threads read it while abx-envd's signal thread may
  // replace it (SIGHUP), so it is swapped whole under token_mu and read as a shared copy.
  mutable std::mutex token_mu;
  std::shared_ptr<const std::string> token;
  std::shared_ptr<const std::string> access_token() const {
    std::lock_guard lock(token_mu);
    return token;
  }
  Users users{"user", {}};
  std::unique_ptr<ProcessManager> procs;
  std::mutex watch_mu;  // guards poll_watchers, stream_watchers
  std::map<std::string, std::shared_ptr<PollWatcher>> poll_watchers;
  std::vector<std::unique_ptr<Watcher>> stream_watchers;
  std::unique_ptr<http::Server> server;
  CpuSampler cpu;  // GET /metrics' cpu_used_pct: usage since the previous call

  // One decoded Connect call: the request (body already parsed into `msg`) and its user.
  struct Call {
    http::Request req;
    http::Responder respond;
    User user;
    boost::json::object msg;
    std::string default_workdir;  // EnvdOptions::default_workdir
  };
  // A unary method returns its response message; a server-streaming one answers through
  // call.respond.stream() itself and returns an error only before it has started the stream.
  using Unary = std::function<Result<boost::json::object>(Call&)>;
  using Streaming = std::function<Status(Call&)>;
  std::map<std::string, Unary, std::less<>> unary;
  std::map<std::string, Streaming, std::less<>> streaming;

  // One Connect service's methods by their short names; add_service() registers each as
  // "<service>/<name>", so a service spells its name once.
  struct ServiceMethods {
    std::vector<std::pair<const char*, Result<boost::json::object> (*)(Impl&, Call&)>> unary;
    std::vector<std::pair<const char*, Status (*)(Impl&, Call&)>> streaming;
  };
  void add_service(std::string_view service, const ServiceMethods& methods) {
    std::string prefix = std::string(service) + "/";
    // Plain variables, not structured bindings: clang 14 (clang-tidy) cannot capture those.
    for (const auto& method : methods.unary) {
      auto fn = method.second;
      unary[prefix + method.first] = [this, fn](Call& c) { return fn(*this, c); };
    }
    for (const auto& method : methods.streaming) {
      auto fn = method.second;
      streaming[prefix + method.first] = [this, fn](Call& c) { return fn(*this, c); };
    }
  }

  void handle(http::Request&& req, http::Responder respond);
  Result<http::BodyPlan> body_policy(const http::Request& h);
  Status check_token(const http::Request& req) const;
  Status check_files_auth(const http::Request& req, const std::map<std::string, std::string>& q,
                          const char* op) const;
  Result<User> request_user(const http::Request& req,
                            const std::map<std::string, std::string>& q) const;
  void handle_files(http::Request&& req, http::Responder respond,
                    const std::map<std::string, std::string>& q);
  Status serve_files(const http::Request& req, const http::Responder& respond,
                     const std::map<std::string, std::string>& q);
  Result<boost::json::array> store_upload(const http::Request& req, http::BodyFile& body,
                                          const User& user, const std::string& qpath);
  void handle_rpc(http::Request&& req, http::Responder respond, std::string_view path);
  std::chrono::milliseconds keepalive_of(const http::Request& req) const;
};

// process.Process: Start, Connect, List, SendInput, SendSignal, CloseStdin, Update.
void register_process_service(Envd::Impl& envd);
// filesystem.Filesystem: Stat, ListDir, MakeDir, Move, Remove, WatchDir and the
// CreateWatcher / GetWatcherEvents / RemoveWatcher trio.
void register_filesystem_service(Envd::Impl& envd);

// The header of a server-streaming Connect response.
http::Response connect_stream_header(unsigned version);

}  // namespace abx::envd
