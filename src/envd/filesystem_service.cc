// filesystem.Filesystem: the Connect methods over fs.h's operations and watchers. Watchers live
// in Envd::Impl: a WatchDir stream's until its client goes away, a CreateWatcher one until
// RemoveWatcher (or shutdown). Every filesystem call runs with the requesting user's credentials
// (creds.h): a unary method holds them until it returns its message (the response is written
// after), a watcher's thread holds them for its whole life.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <memory>
#include <string>

#include "abx/base/try.h"
#include "abx/token/token.h"
#include "connect.h"
#include "creds.h"
#include "envd_impl.h"
#include "proto_json.h"

namespace abx::envd {

namespace json = boost::json;
using Impl = Envd::Impl;
using Call = Impl::Call;

namespace {

Result<std::string> required_path(const json::object& msg, const char* name, const User& user) {
  ABX_ASSIGN_OR_RETURN(auto p, get_string(msg, name));
  if (!p) return invalid_argument(std::string("missing field '") + name + "'");
  return resolve_path(*p, user);
}

json::object fs_event_json(const FsEvent& e, const std::string& dir, bool include_entry) {
  json::object o{{"name", e.name}, {"type", fs_event_type_name(e.type)}};
  if (include_entry && e.type != FsEventType::kRemove && e.type != FsEventType::kRename) {
    auto info = entry_info(e.name.empty() ? dir : dir + "/" + e.name);
    if (info.ok()) o["entry"] = std::move(*info);
  }
  return o;
}

Result<json::object> stat_entry(Impl&, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto path, required_path(c.msg, "path", c.user));
  ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(c.user));
  ABX_ASSIGN_OR_RETURN(auto e, entry_info(path));
  return json::object{{"entry", std::move(e)}};
}

Result<json::object> list_entries(Impl&, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto path, required_path(c.msg, "path", c.user));
  ABX_ASSIGN_OR_RETURN(auto depth, get_u32(c.msg, "depth"));
  ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(c.user));
  ABX_ASSIGN_OR_RETURN(auto entries, list_dir(path, depth.value_or(1)));
  return json::object{{"entries", std::move(entries)}};
}

Result<json::object> make_dir(Impl&, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto path, required_path(c.msg, "path", c.user));
  ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(c.user));
  ABX_TRY(make_dirs(path, c.user, true));
  ABX_ASSIGN_OR_RETURN(auto e, entry_info(path));
  return json::object{{"entry", std::move(e)}};
}

Result<json::object> move_entry(Impl&, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto from, required_path(c.msg, "source", c.user));
  ABX_ASSIGN_OR_RETURN(auto to, required_path(c.msg, "destination", c.user));
  ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(c.user));
  ABX_TRY(move_path(from, to, c.user));
  ABX_ASSIGN_OR_RETURN(auto e, entry_info(to));
  return json::object{{"entry", std::move(e)}};
}

Result<json::object> remove_entry(Impl&, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto path, required_path(c.msg, "path", c.user));
  ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(c.user));
  ABX_TRY(remove_path(path));
  return json::object{};
}

void reap_stream_watchers(Impl& envd) {
  std::lock_guard lock(envd.watch_mu);
  std::erase_if(envd.stream_watchers, [](const auto& w) { return !w->running(); });
}

Status watch_dir(Impl& envd, Call& c) {
  reap_stream_watchers(envd);
  ABX_ASSIGN_OR_RETURN(auto path, required_path(c.msg, "path", c.user));
  ABX_ASSIGN_OR_RETURN(auto recursive, get_bool(c.msg, "recursive"));
  ABX_ASSIGN_OR_RETURN(auto include_entry, get_bool(c.msg, "includeEntry", "include_entry"));
  // Accepted and checked for its type only: E2B's envd refuses to watch a network mount (whose
  // remote changes inotify cannot see) unless this is set; abx refuses no mount (docs/envd.md).
  if (auto m = get_bool(c.msg, "allowNetworkMounts", "allow_network_mounts"); !m.ok()) {
    return m.error();
  }
  // Validate before answering, so a bad path is an end-stream error with no start frame.
  {
    ABX_ASSIGN_OR_RETURN(auto as_user, FsCreds::act_as(c.user));
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return errno_error(errno, "watch " + path);
    if (!S_ISDIR(st.st_mode)) return invalid_argument("path is not a directory: " + path);
    if (::access(path.c_str(), R_OK | X_OK) != 0) return errno_error(errno, "watch " + path);
  }
  auto writer = c.respond.stream(connect_stream_header(c.req.version()));
  auto keepalive = envd.keepalive_of(c.req);
  bool entries = include_entry.value_or(false);
  auto sink = [writer, path, entries](const FsEvent& e) {
    json::object frame{{"filesystem", fs_event_json(e, path, entries)}};
    if (!writer->write(encode_envelope(0, json::serialize(frame)))) return false;
    while (!writer->ready() && !writer->closed())
      writer->wait_ready(std::chrono::milliseconds(200));
    return !writer->closed();
  };
  auto tick = [writer, keepalive, last = std::chrono::steady_clock::now()]() mutable {
    if (writer->closed()) return false;
    if (std::chrono::steady_clock::now() - last >= keepalive) {
      last = std::chrono::steady_clock::now();
      return writer->write(encode_envelope(0, R"({"keepalive":{}})"));
    }
    return true;
  };
  // The start frame tells the client that the watch is on: it goes once the watches exist (a
  // change made after it is seen), and before any event.
  auto w = Watcher::start(path, recursive.value_or(false), c.user, sink, tick,
                          std::chrono::milliseconds(500),
                          [&writer] { writer->write(encode_envelope(0, R"({"start":{}})")); });
  if (!w.ok()) {
    Error e = w.error();
    writer->write(encode_envelope(kFlagEndStream, end_stream_payload(&e)));
    writer->finish();
    return {};
  }
  // The stream ends when the client goes away (the end-stream frame is never reached then).
  std::lock_guard lock(envd.watch_mu);
  envd.stream_watchers.push_back(std::move(*w));
  return {};
}

Result<json::object> create_watcher(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto path, required_path(c.msg, "path", c.user));
  ABX_ASSIGN_OR_RETURN(auto recursive, get_bool(c.msg, "recursive"));
  ABX_ASSIGN_OR_RETURN(auto include_entry, get_bool(c.msg, "includeEntry", "include_entry"));
  if (auto m = get_bool(c.msg, "allowNetworkMounts", "allow_network_mounts"); !m.ok()) {
    return m.error();  // accepted as by WatchDir
  }
  auto pw = std::make_shared<PollWatcher>();
  bool entries = include_entry.value_or(false);
  std::weak_ptr<PollWatcher> weak = pw;
  auto sink = [weak, path, entries](const FsEvent& e) {
    auto p = weak.lock();
    if (!p) return false;
    std::lock_guard lock(p->mu);
    if (p->events.size() >= 10000) p->events.pop_front();  // bounded
    p->events.push_back(fs_event_json(e, path, entries));
    return true;
  };
  ABX_ASSIGN_OR_RETURN(pw->watcher, Watcher::start(
                                        path, recursive.value_or(false), c.user, sink,
                                        [] { return true; }, std::chrono::milliseconds(1000)));
  ABX_ASSIGN_OR_RETURN(auto id, token::random_hex(8));
  std::lock_guard lock(envd.watch_mu);
  envd.poll_watchers[id] = pw;
  return json::object{{"watcherId", id}};
}

Result<std::shared_ptr<PollWatcher>> find_watcher(Impl& envd, const json::object& msg) {
  ABX_ASSIGN_OR_RETURN(auto id, get_string(msg, "watcherId", "watcher_id"));
  if (!id) return invalid_argument("missing field 'watcherId'");
  std::lock_guard lock(envd.watch_mu);
  auto it = envd.poll_watchers.find(*id);
  if (it == envd.poll_watchers.end()) return not_found("watcher '" + *id + "' not found");
  return it->second;
}

Result<json::object> get_watcher_events(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto pw, find_watcher(envd, c.msg));
  json::array events;
  std::lock_guard lock(pw->mu);
  for (auto& e : pw->events) events.push_back(std::move(e));
  pw->events.clear();
  return json::object{{"events", std::move(events)}};
}

Result<json::object> remove_watcher(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto pw, find_watcher(envd, c.msg));
  {
    std::lock_guard lock(envd.watch_mu);
    std::erase_if(envd.poll_watchers, [&](const auto& kv) { return kv.second == pw; });
  }
  pw->watcher.reset();  // stops and joins
  return json::object{};
}

}  // namespace

void register_filesystem_service(Impl& envd) {
  envd.add_service("filesystem.Filesystem", {.unary = {{"Stat", stat_entry},
                                                       {"ListDir", list_entries},
                                                       {"MakeDir", make_dir},
                                                       {"Move", move_entry},
                                                       {"Remove", remove_entry},
                                                       {"CreateWatcher", create_watcher},
                                                       {"GetWatcherEvents", get_watcher_events},
                                                       {"RemoveWatcher", remove_watcher}},
                                             .streaming = {{"WatchDir", watch_dir}}});
}

}  // namespace abx::envd
