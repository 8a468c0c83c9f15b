// abx code <id> [CODE | -] [--context ID] [--language L] [--env K=V]… [--timeout 0] [--json]
//          [--save-images DIR]
// abx code <id> --contexts | --new-context [--cwd DIR] | --restart-context ID | --remove-context ID
//
// Stateful code in the sandbox's code interpreter (libabx's CodeInterpreter; the template needs
// one, e.g. `code-interpreter`). Output streams as it comes, the main result's text is printed
// last (like a REPL), an exception's traceback goes to stderr and exits 1.
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <tuple>

#include "abx/base/base64.h"
#include "cli.h"

namespace abx::cli {

namespace {

struct CodeOpts {
  std::string id, code, context, language, timeout = "0", cwd, save_images;
  std::string restart_context, remove_context;
  std::vector<std::string> envs;
  bool list_contexts = false, new_context = false;
};

boost::json::object context_json(const client::CodeContext& c) {
  return {{"id", c.id}, {"language", c.language}, {"cwd", c.cwd}};
}

int manage_contexts(Context& ctx, const CodeOpts& o, client::CodeInterpreter code) {
  if (o.list_contexts) {
    auto l = code.list_contexts();
    if (!l.ok()) return ctx.fail(l.error());
    if (ctx.flags.json) {
      boost::json::array a;
      for (const auto& c : *l) a.push_back(context_json(c));
      ctx.print_json(boost::json::object{{"contexts", std::move(a)}});
    } else {
      std::vector<std::vector<std::string>> rows;
      for (const auto& c : *l) rows.push_back({c.id, c.language, c.cwd});
      print_table({"ID", "LANGUAGE", "CWD"}, rows);
    }
    return kExitOk;
  }
  if (o.new_context) {
    auto c = code.create_context({.language = o.language, .cwd = o.cwd});
    if (!c.ok()) return ctx.fail(c.error());
    if (ctx.flags.json) {
      ctx.print_json(context_json(*c));
    } else {
      std::cout << c->id << "\n";
    }
    return kExitOk;
  }
  const bool restart = !o.restart_context.empty();
  const std::string& id = restart ? o.restart_context : o.remove_context;
  Status st = restart ? code.restart_context(id) : code.remove_context(id);
  if (!st.ok()) return ctx.fail(st.error());
  if (ctx.flags.json) {
    ctx.print_json(boost::json::object{{"id", id}, {restart ? "restarted" : "removed", true}});
  } else {
    std::cout << (restart ? "restarted context " : "removed context ") << id << "\n";
  }
  return kExitOk;
}

// A rich result that is not plain text: saved under --save-images, else described on stderr.
void show_images(const client::CodeResult& r, const CodeOpts& o, int& saved) {
  for (const auto& [mime, data, ext] :
       {std::tuple{"image/png", &r.png, "png"}, std::tuple{"image/jpeg", &r.jpeg, "jpg"}}) {
    if (data->empty()) continue;
    auto bytes = base64_decode(*data);  // libabx hands it over unwrapped
    std::size_t n = bytes.ok() ? bytes->size() : data->size();
    if (!o.save_images.empty() && bytes.ok()) {
      std::error_code ec;
      std::filesystem::create_directories(o.save_images, ec);
      auto path = std::filesystem::path(o.save_images) /
                  ("result-" + std::to_string(++saved) + "." + std::string(ext));
      std::ofstream f(path, std::ios::binary);
      f.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
      if (f.good()) {
        std::cerr << "[" << mime << " result saved to " << path.string() << "]\n";
        continue;
      }
      std::cerr << "abx: cannot write " << path.string() << "\n";
    }
    std::cerr << "[" << mime << " result, " << n << " bytes]\n";
  }
}

// `text` without ANSI escape sequences: CSI (ESC [ … final byte), OSC (ESC ] … BEL or ESC \)
// and the two-byte ones.
std::string strip_ansi(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '\x1b' || i + 1 >= text.size()) {
      out += text[i++];
      continue;
    }
    char kind = text[i + 1];
    i += 2;
    if (kind == '[') {
      while (i < text.size() && !(text[i] >= 0x40 && text[i] <= 0x7e)) ++i;
      ++i;  // the final byte
    } else if (kind == ']') {
      while (i < text.size() && text[i] != '\a' &&
             !(text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '\\'))
        ++i;
      i += i < text.size() && text[i] == '\a' ? 1 : 2;
    }
  }
  return out;
}

int run(Context& ctx, CodeOpts o) {
  const int modes = int(o.list_contexts) + int(o.new_context) + int(!o.restart_context.empty()) +
                    int(!o.remove_context.empty());
  if (modes > 1) {
    return ctx.usage(
        "--contexts, --new-context, --restart-context and --remove-context go one at a time");
  }
  if (modes == 1 && !o.code.empty()) return ctx.usage("context management takes no code");
  if (!o.cwd.empty() && !o.new_context) return ctx.usage("--cwd goes with --new-context");
  if (!o.context.empty() && !o.language.empty()) {
    return ctx.usage("give --context or --language, not both");
  }
  if (modes == 0 && (o.code == "-" || (o.code.empty() && !::isatty(STDIN_FILENO)))) {
    o.code.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else if (modes == 0 && o.code.empty()) {
    return ctx.usage("no code: abx code <id> CODE, or pipe it on stdin (or '-')");
  }
  auto t = parse_duration(o.timeout);
  if (!t.ok()) return ctx.fail(t.error());
  auto envs = parse_pairs(o.envs, "--env");
  if (!envs.ok()) return ctx.fail(envs.error());
  auto sbx = ctx.open_sandbox(o.id);
  if (!sbx.ok()) return ctx.fail(sbx.error());
  auto code = sbx->code();
  if (modes == 1) return manage_contexts(ctx, o, code);

  client::RunCodeOptions ro;
  ro.context_id = o.context;
  ro.language = o.language;
  ro.envs = *envs;
  ro.timeout = *t;
  int saved = 0;
  if (!ctx.flags.json) {  // --json collects everything into one document instead
    ro.on_stdout = [](std::string_view d) { write_all(STDOUT_FILENO, d); };
    ro.on_stderr = [](std::string_view d) { write_all(STDERR_FILENO, d); };
    ro.on_result = [&](const client::CodeResult& r) {
      if (r.is_main_result) return;  // printed last
      if (!r.png.empty() || !r.jpeg.empty()) {
        show_images(r, o, saved);
      } else if (!r.text.empty()) {
        write_all(STDOUT_FILENO, r.text + "\n");
      }
    };
  }
  auto ex = code.run(o.code, ro);
  if (!ex.ok()) return ctx.fail(ex.error());
  if (ctx.flags.json) {
    ctx.print_json(client::to_json(*ex));
  } else {
    for (const auto& r : ex->results) {
      if (!r.is_main_result) continue;
      if (!r.png.empty() || !r.jpeg.empty()) show_images(r, o, saved);
      if (!r.text.empty()) write_all(STDOUT_FILENO, r.text + "\n");
    }
    if (ex->error) {
      std::string tb = ex->error->traceback.empty() ? ex->error->name + ": " + ex->error->value
                                                    : ex->error->traceback;
      if (tb.empty() || tb.back() != '\n') tb += "\n";
      // IPython colours its tracebacks: the colours are for a terminal, not a file or a pipe.
      write_all(STDERR_FILENO, ::isatty(STDERR_FILENO) ? tb : strip_ansi(tb));
    }
  }
  return ex->error ? kExitError : kExitOk;
}

void fill_code(CLI::App* sub, Context& ctx) {
  auto o = std::make_shared<CodeOpts>();
  add_sandbox_arg(*sub, o->id);
  sub->add_option("code", o->code, "The code; '-' (or nothing, with stdin not a terminal): stdin");
  sub->add_option("--context", o->context, "Run in this context (default: the Python default one)");
  sub->add_option("--language", o->language, "Run in this language's default context (python)");
  sub->add_option("--env", o->envs, "Environment KEY=VALUE for this execution only (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--timeout", o->timeout,
                  "Interrupt the code after this long (0: never; the context stays usable)")
      ->capture_default_str();
  sub->add_option("--save-images", o->save_images,
                  "Write PNG/JPEG results to DIR/result-N.png instead of describing them");
  sub->add_flag("--contexts", o->list_contexts, "List the interpreter's contexts");
  sub->add_flag("--new-context", o->new_context,
                "Create a context (with --language, --cwd) and print its id");
  sub->add_option("--cwd", o->cwd, "Working directory of --new-context (default: the home)");
  sub->add_option("--restart-context", o->restart_context,
                  "Restart a context: a fresh kernel, its state gone");
  sub->add_option("--remove-context", o->remove_context, "Remove a context");
  sub->callback([&ctx, o] { ctx.exit_code = run(ctx, *o); });
}

}  // namespace

const TopCommand kCodeCommand{
    "code", nullptr,
    "Run code in a sandbox's code interpreter (template code-interpreter): state persists "
    "between calls of a context; output streams, the last expression's value is printed "
    "last; exits 1 when the code raised. --json: the Execution as one object",
    fill_code};

}  // namespace abx::cli
