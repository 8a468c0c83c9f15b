// abx::templates — sandbox templates: the template.yaml schema, the catalog abxd serves, and
// rendering of a template's custom commands into a safely quoted shell command.
//
// A template.yaml (see docs and the architecture doc) declares:
//   id: python                      # [a-z0-9][a-z0-9._-]{0,63}, required
//   description: "…"
//   image: python:3.12-slim         # an OCI image (see below); default abx:base
//   rootfs: ./rootfs                # or a directory as a one-layer image ("host": dev mode only)
//   env: {KEY: value}
//   start: "cmd args" | [argv…]     # a string runs under /bin/sh -c
//   server: {command: "…" | [argv…], port: 49982}
//   interpreter: {command: "…" | [argv…], port: 49999}   # a code interpreter (abx-interp)
//   resources: {cpu: 1.5, memory: 512Mi, pids: 256, disk: 1Gi}
//   network: default | none | host  # default: outbound under the sandbox's egress rules
//   timeout: 300 | 5m               # default sandbox lifetime; s, m, h suffixes
//   capabilities: [shell, files, code, ports]   # default shell, files, code
//   custom_commands:
//     greet:
//       description: "…"
//       command: "echo hello {name} {{literal braces}}"
//       args: [{name: name, type: string, required: true, description: "…"}]
//
// `image` is a registry reference (`host[:port]/repo:tag`, `…@sha256:…`, Docker Hub short names
// such as `debian:bookworm`), `oci-archive:PATH[:tag]`, `docker-archive:PATH`, `oci:DIR[:tag]`
// (relative paths are resolved against the file's folder), or `abx:NAME` — an image in abxd's
// own store (what `abx template build -t NAME` makes; `abx:base` is the default Debian image).
// abxd resolves it (pull or import, once) when a sandbox of the template is first created.
// `rootfs: host` binds the host's /usr, /etc, … read-only: an explicit development mode, never
// a default. `image` and `rootfs` are mutually exclusive.
//
// Parsing is strict, because the file is configuration that abxd trusts: unknown keys, duplicate
// keys, anchors and aliases (no billion laughs), tags, multiple documents, nesting deeper than
// 16 and files over 256 KiB are errors. Every error message starts with `file:line:col: `.
// Custom-command templates are checked when loaded: every {placeholder} is a declared argument
// and sits in plain shell context (not inside quotes, a comment, a here-document or after a
// backslash, right after $, or after (( / [[ where bash evaluates operands as arithmetic), so
// that a single-quoted value can never be re-interpreted by the shell's parser. What the
// author's command then does with its arguments (eval, sh -c, find -exec, …) is the author's
// responsibility: quoting protects the command line, not a program that executes its input.
//
// Error codes: kInvalidArgument (schema or YAML error, bad arguments to render),
// kPayloadTooLarge (file over the cap, rendered command over 128 KiB), kNotFound (file missing,
// unknown custom command), kPermissionDenied/kInternal (reading the file failed).
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abx/base/error.h"
#include "abx/registry/registry.h"
#include "abx/templates/capability.h"

namespace abx::templates {

inline constexpr std::size_t kMaxTemplateFileBytes = 256 * 1024;
inline constexpr int kMaxYamlDepth = 16;
inline constexpr std::uint16_t kDefaultServerPort = 49982;
// E2B's code-interpreter port (the @e2b/code-interpreter SDK's JUPYTER_PORT).
inline constexpr std::uint16_t kDefaultInterpreterPort = 49999;
inline constexpr std::int64_t kDefaultTimeoutSeconds = 300;
// A rendered command travels as one argv string of `sh -c`; Linux caps those at 128 KiB.
inline constexpr std::size_t kMaxRenderedCommandBytes = 128 * 1024 - 1;

// The image of a template that names neither `image` nor `rootfs`.
inline constexpr std::string_view kDefaultImage = "abx:base";

// kDefault: a link of its own with outbound access under the sandbox's rules (E2B's default);
// kNone: loopback only; kHost: the host's network namespace (abxd --allow-host-network only).
enum class NetworkMode { kDefault, kNone, kHost };

struct ServerSpec {
  std::vector<std::string> argv;  // a string command becomes {"/bin/sh", "-c", command}
  std::uint16_t port = kDefaultServerPort;
  // `python: <module>`: argv is the bundled abx-server with --python <module> (docs/python.md).
  std::string python_module;
};

struct Resources {
  double cpu = 1.0;                         // cores
  std::int64_t memory_bytes = 512LL << 20;  // 512Mi
  std::int64_t pids = 1024;
  std::int64_t disk_bytes = 1LL << 30;  // 1Gi
};

struct CustomCommand {
  std::string name;
  std::string description;
  std::string command;  // shell template with {placeholders}; {{ and }} are literal braces
  std::vector<registry::CommandArg> args;
};

struct Template {
  std::string id;
  std::string description;
  std::string image = std::string(kDefaultImage);  // see the header comment; empty with rootfs
  std::string rootfs;  // empty (image), "host" (development mode) or an absolute directory
  std::map<std::string, std::string> env;
  std::vector<std::string> start;  // empty: nothing; a string becomes {"/bin/sh", "-c", s}
  std::optional<ServerSpec> server;
  // The code interpreter (E2B's code-interpreter API: abx-interp over Jupyter kernels), run by
  // envd as the default user and kept running; its port answers /execute and /contexts.
  std::optional<ServerSpec> interpreter;
  // Other names the template answers to (built-ins only: `code-interpreter-v1`, the name the
  // @e2b/code-interpreter SDK asks for).
  std::vector<std::string> aliases;
  Resources resources;
  NetworkMode network = NetworkMode::kDefault;
  std::int64_t timeout_seconds = kDefaultTimeoutSeconds;
  std::vector<Capability> capabilities{kDefaultCapabilities.begin(), kDefaultCapabilities.end()};
  std::vector<CustomCommand> custom_commands;  // ordered by name
  std::string source;                          // the file it came from, or "builtin"

  bool has(Capability c) const;
  const CustomCommand* find_command(std::string_view name) const;

  // The template's part of GET /templates/{id}: templateID, description, aliases, names,
  // public, cpuCount (cores rounded up), cpu, memoryMB, diskSizeMB, pids, image, rootfs, network,
  // timeout, start, server {command, port} | null, interpreter {command, port} | null,
  // capabilities (array), customCommands (array
  // of {"name","description","command","args":[{"name","type","required","default",
  // "description"}]}) and metadata {"capabilities": "shell,files,code", "custom_commands":
  // "<customCommands as JSON text>"} — strings, because E2B clients type metadata as a string
  // map. The caller adds envdVersion, buildID, timestamps and counters.
  boost::json::object to_json() const;
};

// Parses one template.yaml. `file` is used in messages and to resolve a relative rootfs.
Result<Template> parse_template(std::string_view yaml_text, const std::filesystem::path& file);
// Reads (regular files only, at most kMaxTemplateFileBytes) and parses a template.yaml.
Result<Template> load_template_file(const std::filesystem::path& file);

// Checks a custom command's template against its arguments (see the header comment).
Status validate_custom_command(const CustomCommand& cmd);

// Renders a custom command for `/bin/sh -c`: coerces `args` (a JSON object) exactly like a
// registered command's kwargs (abx/registry/coerce.h: unknown, missing or mistyped arguments
// are kInvalidArgument naming them; defaults fill missing optional ones), then replaces each
// {name} with the value: strings POSIX-single-quoted ('…' with ' written as '\''), integers and
// floats in canonical shortest form, booleans as true/false, an absent optional argument as ''.
// Strings containing NUL are rejected (no shell argument can hold one).
Result<std::string> render_custom_command(const CustomCommand& cmd, const boost::json::value& args);

// POSIX shell single-quoting of an arbitrary string (no NUL).
std::string shell_quote(std::string_view s);

struct CatalogError {
  std::string file;
  std::string id_hint;  // the template id, if the file got that far, else its folder name
  std::string message;  // "file:line:col: …"
};

struct BuiltinOptions {
  std::string abx_server = "abx-server";  // command server runner, as seen inside the sandbox
  std::string demo_module;                // path of the demo command module (.so)
  std::string abx_interp = "abx-interp";  // code interpreter, as seen inside the sandbox
};

class TemplateCatalog {
 public:
  // Built-ins `base` (image abx:base, no command server), `demo` (abx:base, command server
  // `abx-server --module <demo_module> --port 49982`) and `code-interpreter` (image
  // abx:code-interpreter, `abx-interp --port 49999`, alias code-interpreter-v1), then every
  // `home/templates/**/template.yaml` in path order, adding to or overriding them. An invalid
  // file (or a second file declaring an id already loaded from home) is skipped and recorded in
  // errors(); loading never fails.
  static TemplateCatalog load(const std::filesystem::path& home, const BuiltinOptions& builtins);

  // By id, then by alias.
  const Template* get(std::string_view id) const;
  std::vector<const Template*> list() const;  // ordered by id
  const std::vector<CatalogError>& errors() const { return errors_; }

 private:
  std::map<std::string, Template, std::less<>> templates_;
  std::vector<CatalogError> errors_;
};

Template builtin_base();
Template builtin_demo(const BuiltinOptions& builtins);
Template builtin_code_interpreter(const BuiltinOptions& builtins);

}  // namespace abx::templates
