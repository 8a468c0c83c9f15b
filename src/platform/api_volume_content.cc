// E2B's volume content API, /volumecontent/{volumeID}/{dir|path|file} (the e2b SDK's Volume file
// methods: list, makeDir, getInfo/exists, updateMetadata, readFile, writeFile, remove), served
// by abxd on the volume's directory through runtime::ConfinedTree (no path leaves it, whatever
// symlinks the sandboxes that mount it planted). Its credential is the volume's token
// (Authorization: Bearer), checked before a body is read; docs/volumes.md.
#include <fcntl.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "abx/base/fd.h"
#include "abx/base/json.h"
#include "abx/base/os.h"
#include "abx/base/time.h"
#include "abx/base/try.h"
#include "abx/runtime/confined_tree.h"
#include "abx/token/token.h"
#include "api_routes.h"
#include "volumes.h"

namespace abx::platform::api {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using http::Response;

namespace {

struct ContentTarget {
  std::string volume_id;
  std::string kind;  // dir | path | file
  std::map<std::string, std::string> query;
};

Result<ContentTarget> parse_target(const http::Request& req) {
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url) return invalid_argument("malformed request target");
  const auto parts = split_path(url->path());
  if (parts.size() != 3 || parts[0] != "volumecontent")
    return not_found("no route for " + std::string(url->path()));
  ContentTarget t{parts[1], parts[2], {}};
  if (t.kind != "dir" && t.kind != "path" && t.kind != "file")
    return not_found("no route for " + std::string(url->path()));
  if (!valid_volume_id(t.volume_id)) return invalid_argument("Invalid volume ID");
  for (auto p : url->params()) {
    if (t.query.size() >= 16) return invalid_argument("too many query parameters");
    t.query[std::string(p.key)] = std::string(p.value);
  }
  return t;
}

Result<std::optional<std::uint32_t>> query_u32(const ContentTarget& t, const std::string& key,
                                               std::uint32_t max) {
  auto it = t.query.find(key);
  if (it == t.query.end() || it->second.empty()) return std::optional<std::uint32_t>();
  std::uint32_t v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || v > max)
    return invalid_argument(key + " must be an integer from 0 to " + std::to_string(max));
  return std::optional<std::uint32_t>(v);
}

Result<bool> query_bool(const ContentTarget& t, const std::string& key) {
  auto it = t.query.find(key);
  if (it == t.query.end() || it->second.empty() || it->second == "false") return false;
  if (it->second == "true") return true;
  return invalid_argument(key + " must be true or false");
}

Result<runtime::TreeMetadata> query_metadata(const ContentTarget& t) {
  runtime::TreeMetadata m;
  ABX_ASSIGN_OR_RETURN(m.uid, query_u32(t, "uid", kMaxVolumeUid));
  ABX_ASSIGN_OR_RETURN(m.gid, query_u32(t, "gid", kMaxVolumeUid));
  ABX_ASSIGN_OR_RETURN(m.mode, query_u32(t, "mode", 07777));
  return m;
}

json::object entry_json(const runtime::TreeEntry& e) {
  json::object o{{"name", e.name.empty() ? std::string("/") : e.name},
                 {"path", e.path},
                 {"type", std::string(runtime::tree_entry_type_name(e.type))},
                 {"size", e.size},
                 {"mode", e.mode},
                 {"uid", e.uid},
                 {"gid", e.gid},
                 {"atime", rfc3339_ms(e.atime_ms)},
                 {"mtime", rfc3339_ms(e.mtime_ms)},
                 {"ctime", rfc3339_ms(e.ctime_ms)}};
  if (e.type == runtime::TreeEntry::Type::kSymlink) o["target"] = e.target;
  return o;
}

const std::string& required_path(const ContentTarget& t) {
  static const std::string kRoot = "/";
  auto it = t.query.find("path");
  return it == t.query.end() ? kRoot : it->second;
}

// The volume the request names, if its token is the request's bearer token. One answer for an
// unknown volume and a wrong token: the token is the only credential here.
Result<store::VolumeRecord> authorize(store::Store& store, const http::Request& req,
                                      const ContentTarget& t) {
  std::string_view auth = req[bhttp::field::authorization];
  const bool bearer = auth.size() > 7 && boost::beast::iequals(auth.substr(0, 7), "bearer ");
  const std::string_view presented = bearer ? auth.substr(7) : std::string_view();
  auto v = store.volume_by_id(t.volume_id);
  if (!v.ok() && v.error().code() != ErrorCode::kNotFound) return v.error();
  if (presented.empty() || !v.ok() || !token::constant_time_equal(v->token, presented))
    return Error(ErrorCode::kUnauthenticated,
                 "invalid volume token: send the volume's token (GET /volumes/{volumeID}) as "
                 "Authorization: Bearer");
  return v;
}

Result<json::object> patch_body(const http::Request& req, runtime::TreeMetadata& m) {
  if (req.body().empty()) return json::object{};
  ABX_ASSIGN_OR_RETURN(json::object body, body_object(req));
  auto number = [&](const char* key, std::uint32_t max) -> Result<std::optional<std::uint32_t>> {
    const auto* v = body.if_contains(key);
    if (!v || v->is_null()) return std::optional<std::uint32_t>();
    if (v->is_int64() && v->as_int64() >= 0 && v->as_int64() <= max)
      return std::optional<std::uint32_t>(static_cast<std::uint32_t>(v->as_int64()));
    if (v->is_uint64() && v->as_uint64() <= max)
      return std::optional<std::uint32_t>(static_cast<std::uint32_t>(v->as_uint64()));
    return invalid_argument(std::string(key) + " must be an integer from 0 to " +
                            std::to_string(max));
  };
  ABX_ASSIGN_OR_RETURN(m.uid, number("uid", kMaxVolumeUid));
  ABX_ASSIGN_OR_RETURN(m.gid, number("gid", kMaxVolumeUid));
  ABX_ASSIGN_OR_RETURN(m.mode, number("mode", 07777));
  return body;
}

}  // namespace

bool is_volume_content(const http::Request& req) {
  return req.target().starts_with("/volumecontent/");
}

Status check_volume_content_credential(store::Store& store, const http::Request& header) {
  ABX_ASSIGN_OR_RETURN(ContentTarget t, parse_target(header));
  ABX_TRY(authorize(store, header, t));
  return {};
}

Result<Response> volume_content(store::Store& store, const std::string& home,
                                const http::Request& req, const std::string& body_path) {
  ABX_ASSIGN_OR_RETURN(ContentTarget t, parse_target(req));
  ABX_ASSIGN_OR_RETURN(store::VolumeRecord v, authorize(store, req, t));
  // Its files are on its image: never written under the bare mount point.
  ABX_TRY(ensure_volume_mounted(home, v.id));
  // New entries belong to the sandboxes' `user` (1000:1000), as the volume's root does.
  ABX_ASSIGN_OR_RETURN(runtime::ConfinedTree tree,
                       runtime::ConfinedTree::open(volume_dir(home, v.id)));
  const std::string& path = required_path(t);
  const unsigned version = req.version();
  const auto method = req.method();
  if (t.kind == "dir" && method == bhttp::verb::get) {
    std::int64_t depth = 1;
    if (auto it = t.query.find("depth"); it != t.query.end() && !it->second.empty()) {
      auto [end, ec] =
          std::from_chars(it->second.data(), it->second.data() + it->second.size(), depth);
      if (ec != std::errc() || end != it->second.data() + it->second.size() || depth < 1 ||
          depth > 16)
        return invalid_argument("depth must be an integer from 1 to 16");
    }
    ABX_ASSIGN_OR_RETURN(auto entries,
                         tree.list(path, static_cast<int>(depth), kMaxVolumeListEntries));
    json::array out;
    for (const auto& e : entries) out.push_back(entry_json(e));
    return http::json_response(200, out, version);
  }
  if (t.kind == "dir" && method == bhttp::verb::post) {
    ABX_ASSIGN_OR_RETURN(auto meta, query_metadata(t));
    ABX_ASSIGN_OR_RETURN(bool parents, query_bool(t, "force"));
    ABX_ASSIGN_OR_RETURN(auto e, tree.make_dir(path, parents, meta));
    return http::json_response(201, entry_json(e), version);
  }
  if (t.kind == "path" && method == bhttp::verb::get) {
    ABX_ASSIGN_OR_RETURN(auto e, tree.stat(path));
    return http::json_response(200, entry_json(e), version);
  }
  if (t.kind == "path" && method == bhttp::verb::patch) {
    runtime::TreeMetadata meta;
    ABX_TRY(patch_body(req, meta));
    ABX_ASSIGN_OR_RETURN(auto e, tree.set_metadata(path, meta));
    return http::json_response(200, entry_json(e), version);
  }
  if (t.kind == "path" && method == bhttp::verb::delete_) {
    ABX_TRY(tree.remove(path, kMaxVolumeRemoveEntries));
    return http::empty_response(bhttp::status::no_content, version);
  }
  if (t.kind == "file" && method == bhttp::verb::get) {
    ABX_ASSIGN_OR_RETURN(std::string data, tree.read_file(path, kMaxVolumeReadBytes));
    Response res{bhttp::status::ok, version};
    res.set(bhttp::field::content_type, "application/octet-stream");
    res.body() = std::move(data);
    res.prepare_payload();
    return res;
  }
  if (t.kind == "file" && method == bhttp::verb::put) {
    // A write replaces an existing file and makes missing parents, as the SDK's writeFile says
    // (and as a sandbox's files.write does); `force` (overwrite) is accepted, nothing more to do.
    ABX_ASSIGN_OR_RETURN(auto meta, query_metadata(t));
    ABX_TRY(query_bool(t, "force"));
    const bool parents = true;
    int fd = -1;
    std::string tmp;
    if (!body_path.empty()) {
      fd = ::open(body_path.c_str(), O_RDONLY | O_CLOEXEC);
    } else {
      // A body that stayed in memory: through an unlinked temporary file, as a spooled one.
      tmp = home + "/uploads/volume-XXXXXX";
      std::error_code ec;
      std::filesystem::create_directories(home + "/uploads", ec);
      fd = ::mkstemp(tmp.data());
      if (fd >= 0) {
        ::unlink(tmp.c_str());
        if (os::write_all_errno(fd, req.body()) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) {
          ::close(fd);
          fd = -1;
        }
      }
    }
    if (fd < 0) return internal_error("cannot read the uploaded file");
    UniqueFd src(fd);
    ABX_ASSIGN_OR_RETURN(auto e,
                         tree.write_file(path, src.get(), kMaxVolumeWriteBytes, parents, meta));
    return http::json_response(201, entry_json(e), version);
  }
  return Error(
      ErrorCode::kMethodNotAllowed,
      std::string(req.method_string()) + " is not a method of /volumecontent/{id}/" + t.kind);
}

}  // namespace abx::platform::api
