// Files: envd's /files (bytes) and filesystem.Filesystem (metadata, directories, watching).
#include "abx/client/files.h"

#include <boost/json.hpp>
#include <condition_variable>
#include <thread>

#include "abx/base/ascii.h"
#include "abx/base/json.h"
#include "abx/base/try.h"
#include "abx/connect/connect.h"
#include "connect.h"
#include "state.h"

namespace abx::client {

namespace detail {

struct WatchStream {
  std::shared_ptr<http::Connection> conn;
  std::thread reader;
  ~WatchStream() { stop(); }
  void stop() {
    if (reader.joinable()) {
      conn->cancel();
      reader.join();
    }
  }
};

namespace {

std::string file_type(std::string_view t) {
  if (t == "FILE_TYPE_FILE" || t == "1") return "file";
  if (t == "FILE_TYPE_DIRECTORY" || t == "2") return "dir";
  if (t == "FILE_TYPE_SYMLINK" || t == "3") return "symlink";
  return "unknown";
}

std::string event_type(std::string_view t) {
  if (t.starts_with("EVENT_TYPE_")) t.remove_prefix(11);
  return ascii_lower(t);
}

std::string str(const json::object& o, std::string_view k) {
  if (auto* v = o.if_contains(k); v && v->is_string()) return std::string(v->as_string());
  return {};
}

EntryInfo entry_from_json(const json::value& v) {
  EntryInfo e;
  if (!v.is_object()) return e;
  const auto& o = v.as_object();
  e.name = str(o, "name");
  e.path = str(o, "path");
  if (auto* t = o.if_contains("type")) {
    e.type = t->is_string()
                 ? file_type(t->as_string())
                 : (t->is_number() ? file_type(std::to_string(t->to_number<int>())) : "unknown");
    // /files answers use plain names ("file", "dir").
    if (t->is_string() && (t->as_string() == "file" || t->as_string() == "dir"))
      e.type = t->as_string();
  }
  if (auto* s = o.if_contains("size")) {  // int64: a JSON string in proto3
    if (s->is_string()) e.size = std::strtoll(s->as_string().c_str(), nullptr, 10);
    if (s->is_number()) e.size = s->to_number<std::int64_t>();
  }
  if (auto* m = o.if_contains("mode"); m && m->is_number()) e.mode = m->to_number<std::uint32_t>();
  e.permissions = str(o, "permissions");
  e.owner = str(o, "owner");
  e.group = str(o, "group");
  e.modified_time = str(o, "modifiedTime");
  e.symlink_target = str(o, "symlinkTarget");
  return e;
}

EntryInfo entry_of(const json::value& response) {
  if (response.is_object()) {
    if (auto* e = response.as_object().if_contains("entry")) return entry_from_json(*e);
  }
  return {};
}

}  // namespace
}  // namespace detail

Result<std::string> Files::read(std::string_view path) {
  ABX_TRY(state_->check(Capability::kFiles));
  auto req = http::make_request(bhttp::verb::get, "/files?path=" + detail::url_encode(path));
  ABX_ASSIGN_OR_RETURN(auto res,
                       state_->plane_send(kEnvdPort, std::move(req), {.idempotent = true}));
  if (res.result_int() != 200)
    return detail::error_from_response(res, detail::Plane::kEnvd, "read " + std::string(path));
  return std::move(res.body());
}

Result<EntryInfo> Files::write(std::string_view path, std::string_view data) {
  ABX_TRY(state_->check(Capability::kFiles));
  auto req = http::make_request(bhttp::verb::post, "/files?path=" + detail::url_encode(path),
                                std::string(data), "application/octet-stream");
  // A whole-file replace is idempotent.
  ABX_ASSIGN_OR_RETURN(auto res,
                       state_->plane_send(kEnvdPort, std::move(req), {.idempotent = true}));
  if (res.result_int() != 200)
    return detail::error_from_response(res, detail::Plane::kEnvd, "write " + std::string(path));
  auto v = parse_json_strict(res.body());
  if (!v.ok() || !v->is_array() || v->as_array().empty())
    return internal_error("write " + std::string(path) +
                          ": envd did not describe the written file");
  return detail::entry_from_json(v->as_array().front());
}

Result<std::vector<EntryInfo>> Files::list(std::string_view path, std::uint32_t depth) {
  ABX_TRY(state_->check(Capability::kFiles));
  ABX_ASSIGN_OR_RETURN(auto v,
                       state_->connect_unary("/filesystem.Filesystem/ListDir",
                                             json::object{{"path", path}, {"depth", depth}}, true));
  std::vector<EntryInfo> out;
  if (auto* es = v.is_object() ? v.as_object().if_contains("entries") : nullptr;
      es && es->is_array()) {
    for (const auto& e : es->as_array()) out.push_back(detail::entry_from_json(e));
  }
  return out;
}

Result<EntryInfo> Files::stat(std::string_view path) {
  ABX_TRY(state_->check(Capability::kFiles));
  ABX_ASSIGN_OR_RETURN(auto v, state_->connect_unary("/filesystem.Filesystem/Stat",
                                                     json::object{{"path", path}}, true));
  return detail::entry_of(v);
}

Result<bool> Files::exists(std::string_view path) {
  auto s = stat(path);
  if (s.ok()) return true;
  if (s.error().code() == ErrorCode::kNotFound) return false;
  return s.error();
}

Result<bool> Files::make_dir(std::string_view path) {
  ABX_TRY(state_->check(Capability::kFiles));
  auto v =
      state_->connect_unary("/filesystem.Filesystem/MakeDir", json::object{{"path", path}}, false);
  if (v.ok()) return true;
  if (v.error().code() == ErrorCode::kAlreadyExists) return false;
  return v.error();
}

Status Files::remove(std::string_view path) {
  ABX_TRY(state_->check(Capability::kFiles));
  auto v =
      state_->connect_unary("/filesystem.Filesystem/Remove", json::object{{"path", path}}, false);
  if (!v.ok()) return v.error();
  return {};
}

Result<EntryInfo> Files::rename(std::string_view from, std::string_view to) {
  ABX_TRY(state_->check(Capability::kFiles));
  ABX_ASSIGN_OR_RETURN(
      auto v, state_->connect_unary("/filesystem.Filesystem/Move",
                                    json::object{{"source", from}, {"destination", to}}, false));
  return detail::entry_of(v);
}

WatchHandle::WatchHandle(std::shared_ptr<detail::WatchStream> s) : stream_(std::move(s)) {}
WatchHandle::WatchHandle(WatchHandle&&) noexcept = default;
WatchHandle& WatchHandle::operator=(WatchHandle&&) noexcept = default;
WatchHandle::~WatchHandle() = default;
void WatchHandle::stop() {
  if (stream_) stream_->stop();
}

Result<WatchHandle> Files::watch(std::string_view path,
                                 std::function<void(const FilesystemEvent&)> on_event,
                                 bool recursive) {
  ABX_TRY(state_->check(Capability::kFiles));
  ABX_ASSIGN_OR_RETURN(auto ep, state_->plane_endpoint(kEnvdPort));
  ABX_ASSIGN_OR_RETURN(auto conn, state_->transport->open_stream(ep));
  json::object body{{"path", path}, {"recursive", recursive}};
  auto req = http::make_request(bhttp::verb::post, "/filesystem.Filesystem/WatchDir",
                                connect::encode_envelope(0, json::serialize(body)),
                                "application/connect+json");
  req.set("Connect-Protocol-Version", "1");
  req.set("Keepalive-Ping-Interval", "30");
  state_->transport->prepare(ep, req);
  state_->add_plane_headers(req, kEnvdPort);

  struct Started {
    std::mutex mu;
    std::condition_variable cv;
    bool started = false;
    bool done = false;
    std::optional<Error> error;
  };
  auto started = std::make_shared<Started>();
  auto ws = std::make_shared<detail::WatchStream>();
  ws->conn = std::move(conn);
  auto* c = ws->conn.get();
  ws->reader = std::thread([c, r = std::move(req), started, cb = std::move(on_event)]() mutable {
    auto st = detail::read_connect_stream(
        *c, std::move(r),
        [&](const json::value& v) -> Status {
          if (!v.is_object()) return {};
          const auto& o = v.as_object();
          if (o.contains("start")) {
            std::lock_guard lk(started->mu);
            started->started = true;
            started->cv.notify_all();
          } else if (auto* f = o.if_contains("filesystem"); f && f->is_object()) {
            FilesystemEvent ev;
            ev.name = detail::str(f->as_object(), "name");
            ev.type = detail::event_type(detail::str(f->as_object(), "type"));
            if (cb) cb(ev);
          }
          return {};
        },
        std::chrono::seconds(75));
    std::lock_guard lk(started->mu);
    started->done = true;
    if (!st.ok()) started->error = st.error();
    started->cv.notify_all();
  });
  std::unique_lock lk(started->mu);
  started->cv.wait(lk, [&] { return started->started || started->done; });
  if (!started->started) {
    Error e = started->error ? *started->error : internal_error("watch did not start");
    lk.unlock();
    ws->stop();
    return e;
  }
  return WatchHandle(std::move(ws));
}

}  // namespace abx::client
