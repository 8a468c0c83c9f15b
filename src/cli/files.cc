// abx files read|write|ls|rm|mkdir <id> <path> … (and cp: files_cp.cc)
#include <boost/json.hpp>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli.h"

namespace abx::cli {

namespace json = boost::json;

namespace {

struct FilesOpts {
  std::string id, path, local = "-";
  unsigned depth = 1;
};

json::object entry_json(const client::EntryInfo& e) {
  return {{"name", e.name},   {"path", e.path},   {"type", e.type},
          {"size", e.size},   {"mode", e.mode},   {"permissions", e.permissions},
          {"owner", e.owner}, {"group", e.group}, {"modifiedTime", e.modified_time}};
}

template <class F>
int with_files(Context& ctx, const FilesOpts& o, F&& f) {
  auto sbx = ctx.open_sandbox(o.id);
  if (!sbx.ok()) return ctx.fail(sbx.error());
  return f(sbx->files());
}

// abx files read
void add_files_read(CLI::App& files, Context& ctx) {
  auto o = std::make_shared<FilesOpts>();
  auto* r = add_sandbox_subcommand(files, "read", "Print a file's bytes on stdout", o->id);
  r->alias("cat");
  r->add_option("path", o->path, "Path in the sandbox")->required();
  r->callback([&ctx, o] {
    ctx.exit_code = with_files(ctx, *o, [&](client::Files f) {
      auto d = f.read(o->path);
      if (!d.ok()) return ctx.fail(d.error());
      if (ctx.flags.json)
        ctx.print_json(json::object{{"path", o->path}, {"content", *d}});
      else
        std::cout.write(d->data(), static_cast<std::streamsize>(d->size()));
      return kExitOk;
    });
  });
}

// abx files write
void add_files_write(CLI::App& files, Context& ctx) {
  auto o = std::make_shared<FilesOpts>();
  auto* w =
      add_sandbox_subcommand(files, "write", "Write a file from a local file or stdin", o->id);
  w->add_option("path", o->path, "Path in the sandbox")->required();
  w->add_option("source", o->local, "Local file, or - for stdin")->capture_default_str();
  w->callback([&ctx, o] {
    std::string data;
    if (o->local == "-") {
      data.assign(std::istreambuf_iterator<char>(std::cin), {});
    } else {
      std::ifstream in(o->local, std::ios::binary);
      if (!in) {
        ctx.exit_code = ctx.fail(not_found("cannot read " + o->local));
        return;
      }
      data.assign(std::istreambuf_iterator<char>(in), {});
    }
    ctx.exit_code = with_files(ctx, *o, [&](client::Files f) {
      if (!ctx.flags.json && data.size() > (8u << 20))
        std::cerr << "uploading " << (data.size() >> 20) << " MiB…\n";
      auto e = f.write(o->path, data);
      if (!e.ok()) return ctx.fail(e.error());
      if (ctx.flags.json)
        ctx.print_json(entry_json(*e));
      else
        std::cout << "wrote " << data.size() << " bytes to " << o->path << "\n";
      return kExitOk;
    });
  });
}

// abx files ls
void add_files_ls(CLI::App& files, Context& ctx) {
  auto o = std::make_shared<FilesOpts>();
  auto* ls = add_sandbox_subcommand(files, "ls", "List a directory", o->id);
  ls->add_option("path", o->path, "Directory")->required();
  ls->add_option("--depth", o->depth, "Levels to descend")->capture_default_str();
  ls->callback([&ctx, o] {
    ctx.exit_code = with_files(ctx, *o, [&](client::Files f) {
      auto l = f.list(o->path, o->depth);
      if (!l.ok()) return ctx.fail(l.error());
      if (ctx.flags.json) {
        json::array a;
        for (const auto& e : *l) a.push_back(entry_json(e));
        ctx.print_json(a);
        return kExitOk;
      }
      // NAME is the path below the listed directory (dir/file with --depth 2 and more); that
      // directory is the parent of the shortest path listed (an entry's parent directory, when
      // listed, has a shorter path).
      std::string dir;
      for (const auto& e : *l) {
        auto slash = e.path.rfind('/');
        if (slash != std::string::npos && (dir.empty() || slash < dir.size()))
          dir = e.path.substr(0, slash + 1);
      }
      std::vector<std::vector<std::string>> rows;
      for (const auto& e : *l) {
        std::string name = !dir.empty() && e.path.rfind(dir, 0) == 0 && e.path.size() > dir.size()
                               ? e.path.substr(dir.size())
                               : e.name;
        rows.push_back({e.permissions, std::to_string(e.size), e.modified_time, name});
      }
      print_table({"MODE", "SIZE", "MODIFIED", "NAME"}, rows);
      return kExitOk;
    });
  });
}

// abx files rm
void add_files_rm(CLI::App& files, Context& ctx) {
  auto o = std::make_shared<FilesOpts>();
  auto* rm = add_sandbox_subcommand(files, "rm", "Remove a file or directory (recursively)", o->id);
  rm->add_option("path", o->path, "Path")->required();
  rm->callback([&ctx, o] {
    ctx.exit_code = with_files(ctx, *o, [&](client::Files f) {
      auto st = f.remove(o->path);
      if (!st.ok()) return ctx.fail(st.error());
      if (ctx.flags.json) ctx.print_json(json::object{{"removed", o->path}});
      return kExitOk;
    });
  });
}

// abx files mkdir
void add_files_mkdir(CLI::App& files, Context& ctx) {
  auto o = std::make_shared<FilesOpts>();
  auto* mk = add_sandbox_subcommand(files, "mkdir", "Create a directory (and its parents)", o->id);
  mk->add_option("path", o->path, "Path")->required();
  mk->callback([&ctx, o] {
    ctx.exit_code = with_files(ctx, *o, [&](client::Files f) {
      auto made = f.make_dir(o->path);
      if (!made.ok()) return ctx.fail(made.error());
      if (ctx.flags.json)
        ctx.print_json(json::object{{"path", o->path}, {"created", *made}});
      else if (!*made)
        std::cout << o->path << " already exists\n";
      return kExitOk;
    });
  });
}

void fill_files(CLI::App* fs, Context& ctx) {
  fs->require_subcommand(1);
  add_files_read(*fs, ctx);
  add_files_write(*fs, ctx);
  add_files_ls(*fs, ctx);
  add_files_rm(*fs, ctx);
  add_files_mkdir(*fs, ctx);
  add_files_cp(*fs, ctx);
}

}  // namespace

const TopCommand kFilesCommand{"files", nullptr, "Read and write files in a sandbox", fill_files};

}  // namespace abx::cli
