// Moving a sandbox to another node of a cluster (sandboxes.h: move_out, move_in; docs/cluster.md
// "Drain"). What moves is a tar file: the sandbox's checkpoint (CRIU images and its writable
// layer, sparse: holes are not shipped; for a filesystem-only pause its kept writable layer
// alone), its run directory (sandbox.json, token, envd.json …) and its store record as JSON. A
// running sandbox is paused to disk for it and resumed on the other node; one paused to disk or
// filesystem-only goes as it is and stays paused there. The sending node verifies its
// checkpoint's seal before it ships it; the receiving node, which cannot check a seal made with
// another node's key, trusts the authenticated channel (the cluster secret) and seals it again
// with its own. (A filesystem-only pause's kept layer has no seal, on either node.)
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "abx/base/json.h"
#include "abx/base/scope_exit.h"
#include "abx/base/try.h"
#include "abx/runtime/checkpoint.h"
#include "abx/store/sandbox_id.h"
#include "abx/token/token.h"
#include "sandbox_config.h"
#include "sandboxes.h"
#include "sandboxes_internal.h"

namespace abx::platform {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr const char* kRecordEntry = "record.json";
constexpr std::size_t kMaxRecordBytes = 1 << 20;
constexpr std::size_t kMaxEntries = 4096;
constexpr std::size_t kChunk = 1 << 20;

struct WriteFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ReadFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

Error archive_error(const std::string& what, archive* a) {
  const char* m = archive_error_string(a);
  return internal_error(what + ": " + (m ? m : "unknown libarchive error"));
}

Status add_bytes(archive* w, const std::string& name, const std::string& bytes) {
  std::unique_ptr<archive_entry, EntryFree> e(archive_entry_new());
  archive_entry_set_pathname(e.get(), name.c_str());
  archive_entry_set_filetype(e.get(), AE_IFREG);
  archive_entry_set_perm(e.get(), 0600);
  archive_entry_set_size(e.get(), static_cast<la_int64_t>(bytes.size()));
  if (archive_write_header(w, e.get()) != ARCHIVE_OK) return archive_error("tar " + name, w);
  if (archive_write_data(w, bytes.data(), bytes.size()) != static_cast<la_ssize_t>(bytes.size()))
    return archive_error("tar " + name, w);
  return {};
}

// Every regular file of the flat directory `dir` as `prefix/<name>`. A sparse file (the 1 GiB
// writable layer with a few MiB written) becomes a pax sparse entry: its data regions only.
Status add_dir(archive* w, archive* disk, const fs::path& dir, const std::string& prefix) {
  std::error_code ec;
  std::vector<char> buf(kChunk);
  static const std::vector<char> zeros(kChunk, 0);
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    if (de.symlink_status().type() != fs::file_type::regular) continue;
    const std::string full = de.path().string();
    std::unique_ptr<archive_entry, EntryFree> e(archive_entry_new());
    archive_entry_copy_sourcepath(e.get(), full.c_str());
    if (archive_read_disk_entry_from_file(disk, e.get(), -1, nullptr) != ARCHIVE_OK)
      return archive_error("read " + full, disk);
    archive_entry_set_pathname(e.get(), (prefix + "/" + de.path().filename().string()).c_str());
    archive_entry_set_uid(e.get(), 0);
    archive_entry_set_gid(e.get(), 0);
    archive_entry_set_uname(e.get(), nullptr);
    archive_entry_set_gname(e.get(), nullptr);
    archive_entry_unset_atime(e.get());
    archive_entry_unset_ctime(e.get());
    archive_entry_unset_birthtime(e.get());
    const la_int64_t size = archive_entry_size(e.get());
    std::vector<std::pair<la_int64_t, la_int64_t>> regions;
    if (archive_entry_sparse_reset(e.get()) > 0) {
      la_int64_t off = 0, len = 0;
      while (archive_entry_sparse_next(e.get(), &off, &len) == ARCHIVE_OK)
        regions.emplace_back(off, len);
    } else {
      regions.emplace_back(0, size);
    }
    if (archive_write_header(w, e.get()) != ARCHIVE_OK) return archive_error("tar " + full, w);
    std::ifstream in(full, std::ios::binary);
    if (!in) return internal_error("open " + full);
    // The logical stream: data regions from the file, zeros for the holes between them (the pax
    // writer drops what falls in a hole of the entry's sparse map).
    la_int64_t pos = 0;
    auto zero_to = [&](la_int64_t end) -> Status {
      while (pos < end) {
        const auto n = static_cast<std::size_t>(std::min<la_int64_t>(end - pos, kChunk));
        if (archive_write_data(w, zeros.data(), n) < 0) return archive_error("tar " + full, w);
        pos += static_cast<la_int64_t>(n);
      }
      return {};
    };
    for (auto [off, len] : regions) {
      ABX_TRY(zero_to(off));
      in.seekg(off);
      while (len > 0) {
        const auto n = static_cast<std::size_t>(std::min<la_int64_t>(len, kChunk));
        in.read(buf.data(), static_cast<std::streamsize>(n));
        if (static_cast<std::size_t>(in.gcount()) != n) return internal_error("short read " + full);
        if (archive_write_data(w, buf.data(), n) < 0) return archive_error("tar " + full, w);
        pos += static_cast<la_int64_t>(n);
        len -= static_cast<la_int64_t>(n);
      }
    }
    ABX_TRY(zero_to(size));
  }
  if (ec) return internal_error("list " + dir.string() + ": " + ec.message());
  return {};
}

Status write_move_tar(const std::string& tar_path, const std::string& record,
                      const fs::path& checkpoint, const fs::path& run) {
  std::unique_ptr<archive, WriteFree> w(archive_write_new());
  std::unique_ptr<archive, ReadFree> disk(archive_read_disk_new());
  archive_write_set_format_pax(w.get());
  if (archive_write_open_filename(w.get(), tar_path.c_str()) != ARCHIVE_OK)
    return archive_error("create " + tar_path, w.get());
  ABX_TRY(add_bytes(w.get(), kRecordEntry, record));
  ABX_TRY(add_dir(w.get(), disk.get(), checkpoint, "checkpoint"));
  ABX_TRY(add_dir(w.get(), disk.get(), run, "run"));
  if (archive_write_close(w.get()) != ARCHIVE_OK)
    return archive_error("close " + tar_path, w.get());
  return {};
}

// An entry name move_out writes: record.json, checkpoint/<name> or run/<name>, <name> a plain
// file name.
bool valid_entry(std::string_view name) {
  if (name == kRecordEntry) return true;
  std::string_view rest;
  if (name.starts_with("checkpoint/")) {
    rest = name.substr(11);
  } else if (name.starts_with("run/")) {
    rest = name.substr(4);
  } else {
    return false;
  }
  if (rest.empty() || rest.size() > 255 || rest == "." || rest == "..") return false;
  return std::all_of(rest.begin(), rest.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// Extracts a move tar under `dest` (which has checkpoint/ and run/): regular files only, sparse
// regions kept sparse. Returns record.json's text.
Result<std::string> extract_move_tar(const std::string& tar_path, const fs::path& dest) {
  std::unique_ptr<archive, ReadFree> in(archive_read_new());
  archive_read_support_format_tar(in.get());
  if (archive_read_open_filename(in.get(), tar_path.c_str(), 64 * 1024) != ARCHIVE_OK)
    return invalid_argument(std::string("move archive: ") + archive_error_string(in.get()));
  std::unique_ptr<archive, WriteFree> out(archive_write_disk_new());
  // Names were checked (valid_entry) before they are put under `dest`, an absolute path.
  archive_write_disk_set_options(out.get(),
                                 ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  std::string record;
  bool have_record = false;
  std::size_t entries = 0;
  archive_entry* e = nullptr;
  for (;;) {
    int rc = archive_read_next_header(in.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK)
      return invalid_argument(std::string("move archive: ") + archive_error_string(in.get()));
    if (++entries > kMaxEntries) return invalid_argument("move archive: too many entries");
    const std::string name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    if (!valid_entry(name) || archive_entry_filetype(e) != AE_IFREG ||
        archive_entry_hardlink(e) != nullptr)
      return invalid_argument("move archive: unexpected entry '" + name + "'");
    if (name == kRecordEntry) {
      if (archive_entry_size(e) < 0 ||
          static_cast<std::size_t>(archive_entry_size(e)) > kMaxRecordBytes)
        return invalid_argument("move archive: record.json too large");
      record.resize(static_cast<std::size_t>(archive_entry_size(e)));
      if (archive_read_data(in.get(), record.data(), record.size()) !=
          static_cast<la_ssize_t>(record.size()))
        return invalid_argument("move archive: short record.json");
      have_record = true;
      continue;
    }
    archive_entry_set_pathname(e, (dest / name).c_str());
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_perm(e, archive_entry_perm(e) & 0600);
    if (archive_write_header(out.get(), e) != ARCHIVE_OK)
      return archive_error("extract " + name, out.get());
    const void* buf = nullptr;
    std::size_t size = 0;
    la_int64_t offset = 0;
    while ((rc = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
      if (archive_write_data_block(out.get(), buf, size, offset) != ARCHIVE_OK)
        return archive_error("write " + name, out.get());
    }
    if (rc != ARCHIVE_EOF)
      return invalid_argument("move archive: " + name + ": " + archive_error_string(in.get()));
    if (archive_write_finish_entry(out.get()) != ARCHIVE_OK)
      return archive_error("finish " + name, out.get());
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) return archive_error("extract", out.get());
  if (!have_record) return invalid_argument("move archive: no record.json");
  return record;
}

}  // namespace

Result<MoveRecord> read_move_archive(const std::string& tar_path, const std::string& dest) {
  ABX_ASSIGN_OR_RETURN(const std::string text, extract_move_tar(tar_path, dest));
  ABX_ASSIGN_OR_RETURN(json::value v, parse_json_strict(text));
  if (!v.is_object()) return invalid_argument("move archive: record.json is not an object");
  MoveRecord m;
  store::SandboxRecord& rec = m.record;
  try {
    const json::object& o = v.get_object();
    rec = record_from_json(o);
    rec.id = std::string(o.at("sandboxID").as_string());
    rec.client_id = std::string(o.at("clientID").as_string());
    rec.created_at_ms = o.at("createdAt").to_number<std::int64_t>();
    rec.end_at_ms = o.at("endAt").to_number<std::int64_t>();
    rec.access_token_digest = std::string(o.at("tokenDigest").as_string());
    rec.domain = std::string(o.at("domain").as_string());
    m.home = std::string(o.at("home").as_string());
    // Absent (a node from before paused sandboxes moved): a running sandbox.
    if (const auto* p = o.if_contains("paused")) m.paused = p->as_bool();
    if (const auto* f = o.if_contains("filesystemOnly")) m.filesystem_only = f->as_bool();
  } catch (const std::exception& e) {
    return invalid_argument(std::string("move archive: record.json: ") + e.what());
  }
  if (m.filesystem_only && !m.paused)
    return invalid_argument("move archive: record.json: filesystemOnly without paused");
  if (auto parsed = store::SandboxId::parse(rec.id); !parsed.ok()) return parsed.error();
  if (m.home.empty() || m.home.front() != '/')
    return invalid_argument("move archive: record.json: home must be an absolute path");
  return m;
}

Status SandboxManager::move_out(const std::string& id, const std::string& tar_path,
                                const std::function<Status(const std::string&)>& ship,
                                bool* was_paused) {
  auto sb = find(id);
  if (!sb) return not_found("sandbox '" + id + "' not found");
  std::lock_guard lock(sb->mu);
  // Moved already, or killed while this waited for its lock (kill takes it out of live_ first).
  if (sb->moved || find(id) != sb) return not_found("sandbox '" + id + "' not found");
  // Decided under its lock: a pause or resume that came first is what moves.
  const bool paused = sb->paused;
  if (was_paused) *was_paused = paused;
  const std::string dir = sb->record.checkpoint;
  std::error_code ec;
  if (paused) {
    if (dir.empty())
      return Error(ErrorCode::kFailedPrecondition,
                   "sandbox '" + id +
                       "' is paused in RAM (abxd --pause memory, or a template CRIU cannot take): "
                       "only sandboxes paused to disk or without their memory move; it stays "
                       "paused here");
    if (!sb->record.filesystem_only) {
      // As a resume would: a seal a failed restore left pending is completed, then checked.
      Status sealed =
          runtime::seal_pending(dir) ? runtime::complete_seal(dir, checkpoint_key_) : Status{};
      if (sealed) sealed = runtime::verify_checkpoint(dir, checkpoint_key_);
      if (!sealed)
        return Error(sealed.error().code(),
                     sealed.error().message() + " (it stays paused here, its checkpoint kept)");
    }
  } else if (!pause_to_disk_ || !can_checkpoint(*sb)) {
    return Error(ErrorCode::kFailedPrecondition,
                 "sandbox '" + id +
                     "' cannot be checkpointed (pause to disk is off, or its template's rootfs or "
                     "network is the host's)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!paused) ABX_TRY(pause_to_disk(*sb));
  // From here on a failure leaves it as it was here (a running one is resumed): nothing is lost.
  auto back = [&](const Error& e) -> Status {
    fs::remove(tar_path, ec);
    if (paused) {
      sb->note("warn", "moving it to another node failed, it stays paused here: " + e.message());
      return Error(e.code(), e.message() + " (it stays paused here)");
    }
    Status r = resume_from_disk(*sb);
    if (r) {
      sb->paused = false;
      sb->record.state = store::SandboxState::kRunning;
      sb->note("warn", "moving it to another node failed, it runs on here: " + e.message());
    }
    return Error(e.code(),
                 e.message() + (r ? std::string(" (it runs on here)")
                                  : "; resuming it here failed too: " + r.error().message()));
  };
  if (!paused) {
    if (Status v = runtime::verify_checkpoint(sb->record.checkpoint, checkpoint_key_); !v)
      return back(v.error());
  }
  json::object rec = record_json(sb->record);
  rec["sandboxID"] = id;
  rec["clientID"] = sb->record.client_id;
  rec["createdAt"] = sb->record.created_at_ms;
  rec["endAt"] = sb->record.end_at_ms;
  rec["tokenDigest"] = sb->record.access_token_digest;
  rec["domain"] = sb->record.domain;
  rec["home"] = opt_.home;
  rec["paused"] = paused;
  rec["filesystemOnly"] = paused && sb->record.filesystem_only;
  if (Status w = write_move_tar(tar_path, json::serialize(rec), sb->record.checkpoint,
                                fs::path(opt_.home) / "run" / id);
      !w)
    return back(w.error());
  if (Status s = ship(tar_path); !s) return back(s.error());
  // The other node has it now: this node forgets it, with no event of its end.
  sb->moved = true;
  {
    std::lock_guard l(mu_);
    live_.erase(id);
  }
  fs::remove(tar_path, ec);
  fs::remove_all(sb->record.checkpoint, ec);
  fs::remove_all(fs::path(opt_.home) / "run" / id, ec);
  if (Status d = store_->delete_sandbox(id); !d)
    log_.warn("sandbox " + id + " moved, but its record here stays: " + d.error().message());
  log_.info("sandbox " + id + (paused ? " (paused)" : "") + " moved to another node in " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - t0)
                               .count()) +
            " ms");
  return {};
}

Result<std::string> SandboxManager::move_in(const std::string& tar_path) {
  ABX_ASSIGN_OR_RETURN(const std::string tag, token::random_hex(6));
  const fs::path in = fs::path(opt_.home) / "checkpoints" / (".incoming-" + tag);
  std::error_code ec;
  ScopeExit cleanup{[&] { fs::remove_all(in, ec); }};
  fs::create_directories(in / "checkpoint", ec);
  fs::create_directories(in / "run", ec);
  if (ec) return internal_error("create " + in.string() + ": " + ec.message());
  ABX_TRY(runtime::make_private(in.string()));
  ABX_ASSIGN_OR_RETURN(MoveRecord moved, read_move_archive(tar_path, in.string()));
  const bool paused = moved.paused, filesystem_only = moved.filesystem_only;
  store::SandboxRecord rec = std::move(moved.record);
  const std::string src_home = std::move(moved.home);
  const std::string& id = rec.id;
  if (find(id) || store_->get_sandbox(id).ok())
    return Error(ErrorCode::kAlreadyExists, "sandbox '" + id + "' is on this node already");
  if (!catalog()->get(rec.template_id))
    return Error(ErrorCode::kFailedPrecondition,
                 "template '" + rec.template_id + "' is not on this node");
  // A checkpoint with memory is restored with CRIU (now, or at its resume); a filesystem-only
  // pause boots again on its layer and needs none.
  if (!filesystem_only && !pause_to_disk_)
    return Error(ErrorCode::kFailedPrecondition,
                 "this node cannot restore a checkpoint (pause to disk is off: --pause memory, or "
                 "CRIU does not work here)");
  const fs::path cdir = checkpoint_dir(id), rdir = fs::path(opt_.home) / "run" / id;
  if (fs::exists(cdir, ec) || fs::exists(rdir, ec))
    return Error(ErrorCode::kAlreadyExists, "sandbox '" + id + "' has files on this node");
  bool committed = false, inserted = false;
  ScopeExit undo{[&] {
    if (committed) return;
    {
      std::lock_guard l(mu_);
      live_.erase(id);
    }
    fs::remove_all(cdir, ec);
    fs::remove_all(rdir, ec);
    if (inserted) (void)store_->delete_sandbox(id);
  }};
  fs::create_directories(rdir.parent_path(), ec);
  if (!ec) fs::rename(in / "run", rdir, ec);
  if (!ec) fs::rename(in / "checkpoint", cdir, ec);
  if (ec) return internal_error("move its files in place: " + ec.message());
  // Its run files' paths are this node's (as a fork's are its own run directory's).
  ABX_ASSIGN_OR_RETURN(runtime::SandboxConfig config, load_sandbox_config(rdir.string()));
  const std::string from = src_home + "/";
  for (auto& b : config.binds) {
    if (b.source.starts_with(from)) b.source = opt_.home + "/" + b.source.substr(from.size());
    if (!fs::exists(b.source, ec))
      return Error(ErrorCode::kFailedPrecondition,
                   "this node lacks " + b.source + " (mounted at " + b.target + ")");
  }
  ABX_TRY(save_sandbox_config(rdir.string(), config));
  if (opt_.network && opt_.network->enabled() && fs::exists(rdir / "resolv.conf", ec))
    ABX_TRY(write_run_file((rdir / "resolv.conf").string(), opt_.network->resolv_conf()));
  ABX_TRY(runtime::make_private(cdir.string()));
  if (filesystem_only) {
    // Its kept writable layer alone, unsealed as on the node it came from.
    if (!fs::exists(cdir / kKeptLayer, ec))
      return invalid_argument("move archive: a filesystem-only pause without its " +
                              std::string(kKeptLayer));
  } else {
    // Sealed with this node's key (the sender verified its own seal before shipping).
    fs::remove(cdir / runtime::kSealFile, ec);
    ABX_TRY(runtime::seal_checkpoint(cdir.string(), checkpoint_key_));
  }
  rec.state = store::SandboxState::kPaused;
  rec.checkpoint = cdir.string();
  rec.filesystem_only = filesystem_only;
  rec.init_pid = 0;
  rec.init_start_time = 0;
  ABX_TRY(store_->insert_sandbox(rec));
  inserted = true;
  if (!adopt(rec, opt_.home + "/sandboxes", *catalog()))
    return internal_error("sandbox '" + id + "' could not be taken over (see abxd's log)");
  // A running one runs on here; a paused one stays paused until a resume (through any node).
  if (!paused) {
    auto resumed = resume(id, {});
    if (!resumed.ok()) return resumed.error();
  }
  if (auto sb = find(id))
    sb->note("info", paused ? std::string("moved here from another node, paused") +
                                  (filesystem_only ? " (filesystem-only)" : "")
                            : std::string("moved here from another node"));
  committed = true;
  return id;
}

}  // namespace abx::platform
