// abx mcp: the platform's MCP tools (abx/mcp/platform_tools.h: create/list/kill sandboxes, shell,
// files, sandbox commands) as a stdio MCP server, for desktop agents that launch MCP servers
// as subprocesses. The tools are abxd's /mcp tools, but they act through libabx, so this works
// against any platform libabx reaches (abxd, or an E2B-compatible cluster) with the usual
// configuration (ABX_API_URL, ABX_API_KEY or the global flags).
//
// stdout carries protocol messages only; diagnostics go to stderr. Each tool call runs on its
// own thread, so a long shell command does not hold up the others. Exit: 0 at end of input, 5
// when stdin/stdout fail.
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "abx/mcp/platform_tools.h"
#include "abx/mcp/stdio.h"
#include "cli.h"

namespace abx::cli {

namespace {

namespace json = boost::json;
using mcp::CommandArgInfo;
using mcp::CommandInfo;
using mcp::FileEntry;
using mcp::SandboxSummary;

SandboxSummary summary_of(const client::SandboxInfo& i) {
  return {i.sandbox_id, i.template_id, i.state, i.started_at, i.end_at, i.metadata};
}

// The platform tools through libabx. Handles are cached per sandbox id: opening one (POST
// /sandboxes/{id}/connect) also resets the sandbox's timeout, which should happen once, not on
// every call.
class ClientBackend : public mcp::PlatformBackend {
 public:
  explicit ClientBackend(const Context& ctx) : ctx_(ctx), config_(ctx.config()) {}

  Result<SandboxSummary> create_sandbox(const mcp::SandboxSpec& spec) override {
    client::CreateOptions o;
    if (spec.timeout_seconds) o.timeout = std::chrono::seconds(*spec.timeout_seconds);
    o.envs = spec.envs;
    o.metadata = spec.metadata;
    auto sbx = client::Sandbox::create(spec.template_id, o, config_);
    if (!sbx.ok()) return sbx.error();
    SandboxSummary s = summary_of(sbx->cached_info());
    if (s.state.empty()) s.state = "running";
    s.metadata = spec.metadata;
    std::lock_guard lock(mu_);
    handles_.insert_or_assign(sbx->id(), *sbx);
    return s;
  }

  Result<std::vector<SandboxSummary>> list_sandboxes() override {
    auto l = client::Sandbox::list({}, config_);
    if (!l.ok()) return l.error();
    std::vector<SandboxSummary> out;
    for (const auto& i : *l) out.push_back(summary_of(i));
    return out;
  }

  Result<bool> kill_sandbox(const std::string& id) override {
    auto r = client::Sandbox::kill(id, config_);
    std::lock_guard lock(mu_);
    handles_.erase(id);
    return r;
  }

  Result<mcp::ShellResult> run_shell(const std::string& id, const mcp::ShellRequest& req) override {
    auto sbx = open(id);
    if (!sbx.ok()) return sbx.error();
    client::CommandOptions o;
    o.envs = req.envs;
    o.cwd = req.cwd;
    o.timeout = req.timeout;
    auto r = sbx->commands().run(req.command, o);
    if (!r.ok()) return r.error();
    return mcp::ShellResult{r->exit_code, std::move(r->stdout_data), std::move(r->stderr_data),
                            std::move(r->error)};
  }

  Result<boost::json::object> run_code(const std::string& id,
                                       const mcp::CodeRequest& req) override {
    auto sbx = open(id);
    if (!sbx.ok()) return sbx.error();
    client::RunCodeOptions o;
    o.context_id = req.context_id;
    o.language = req.language;
    o.envs = req.envs;
    o.timeout = req.timeout;
    auto ex = sbx->code().run(req.code, o);
    if (!ex.ok()) return ex.error();
    return client::to_json(*ex);
  }

  Result<std::string> read_file(const std::string& id, const std::string& path) override {
    auto sbx = open(id);
    if (!sbx.ok()) return sbx.error();
    return sbx->files().read(path);
  }

  Status write_file(const std::string& id, const std::string& path,
                    const std::string& data) override {
    auto sbx = open(id);
    if (!sbx.ok()) return sbx.error();
    auto r = sbx->files().write(path, data);
    if (!r.ok()) return r.error();
    return {};
  }

  Result<std::vector<FileEntry>> list_files(const std::string& id, const std::string& path,
                                            int depth) override {
    auto sbx = open(id);
    if (!sbx.ok()) return sbx.error();
    auto l = sbx->files().list(path, static_cast<std::uint32_t>(depth));
    if (!l.ok()) return l.error();
    std::vector<FileEntry> out;
    for (const auto& e : *l) out.push_back({e.name, e.path, e.type, e.size});
    return out;
  }

  Result<std::vector<CommandInfo>> list_commands(const std::string& id) override {
    auto sbx = open(id);
    if (!sbx.ok()) return sbx.error();
    auto l = sbx->list_commands();
    if (!l.ok()) return l.error();
    std::vector<CommandInfo> out;
    for (const auto& c : *l) {
      CommandInfo ci{c.name, c.description, std::string(client::command_source_name(c.source)), {}};
      for (const auto& a : c.args) {
        ci.args.push_back(CommandArgInfo{a.name, std::string(client::arg_type_name(a.type)),
                                         a.required, a.default_value, a.description});
      }
      out.push_back(std::move(ci));
    }
    return out;
  }

  Result<json::value> call_command(const std::string& id, const std::string& name,
                                   const json::object& arguments) override {
    auto sbx = open(id);
    if (!sbx.ok()) return sbx.error();
    // Where the command lives decides how it runs: a template's custom command is a shell
    // command (Sandbox::run), anything else is the command server's.
    auto l = sbx->list_commands();
    if (!l.ok()) return l.error();
    const client::CommandEntry* entry = nullptr;
    for (const auto& c : *l) {
      if (c.name == name) entry = &c;
    }
    if (entry == nullptr) {
      return not_found("sandbox '" + id + "' has no command '" + name.substr(0, 64) +
                       "' (see list_commands)");
    }
    if (entry->source == client::CommandSource::kYaml) {
      client::CommandOptions o;
      o.timeout = std::chrono::seconds(300);
      auto r = sbx->run(name, arguments, o);
      if (!r.ok()) return r.error();
      return json::value(json::object{
          {"exitCode", r->exit_code}, {"stdout", r->stdout_data}, {"stderr", r->stderr_data}});
    }
    return sbx->server().call(name, arguments);
  }

 private:
  Result<client::Sandbox> open(const std::string& id) {
    {
      std::lock_guard lock(mu_);
      if (auto it = handles_.find(id); it != handles_.end()) return it->second;
    }
    auto sbx = ctx_.open_sandbox(id);
    if (!sbx.ok()) return sbx.error();
    std::lock_guard lock(mu_);
    return handles_.insert_or_assign(id, *sbx).first->second;
  }

  const Context& ctx_;
  client::ConnectionConfig config_;
  std::mutex mu_;
  std::map<std::string, client::Sandbox> handles_;
};

// Runs each call on its own thread (the stdio transport accepts replies from any thread and
// waits for them at end of input); joins them all when it goes away.
class ThreadedTools : public mcp::ToolProvider {
 public:
  explicit ThreadedTools(mcp::ToolProvider& inner) : inner_(inner) {}
  ~ThreadedTools() override {
    std::lock_guard lock(mu_);
    for (auto& c : calls_) c.thread.join();
  }
  std::vector<mcp::Tool> list_tools() override { return inner_.list_tools(); }
  void call_tool(std::string_view name, const json::object& arguments,
                 mcp::ToolDone done) override {
    std::lock_guard lock(mu_);
    // Join the calls that have finished, so a long session does not pile up dead threads.
    std::erase_if(calls_, [](Call& c) {
      if (!c.finished->load()) return false;
      c.thread.join();
      return true;
    });
    auto finished = std::make_shared<std::atomic<bool>>(false);
    std::thread t([this, finished, n = std::string(name), args = arguments,
                   done = std::move(done)]() mutable {
      inner_.call_tool(n, args, std::move(done));
      finished->store(true);
    });
    calls_.push_back({std::move(t), std::move(finished)});
  }

 private:
  struct Call {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  mcp::ToolProvider& inner_;
  std::mutex mu_;
  std::vector<Call> calls_;
};

int serve(Context& ctx) {
  ClientBackend backend(ctx);
  mcp::PlatformTools tools(backend);
  ThreadedTools threaded(tools);
  mcp::Dispatcher dispatcher(mcp::platform_server_info("abx"));
  Status st = mcp::serve_stdio(dispatcher, threaded, 0, 1);
  if (!st.ok()) {
    std::cerr << "abx mcp: " << st.error().message() << "\n";
    return kExitUnavailable;
  }
  return kExitOk;
}

void fill_mcp(CLI::App* m, Context& ctx) {
  m->callback([&ctx] { ctx.exit_code = serve(ctx); });
}

}  // namespace

const TopCommand kMcpCommand{
    "mcp", nullptr,
    "Serve the platform as MCP tools over stdin/stdout (create/list/kill sandboxes, shell, "
    "files, sandbox commands), for agents that launch MCP servers as subprocesses",
    fill_mcp};

}  // namespace abx::cli
