// process.Process: the Connect methods over ProcessManager (process.h). Decoding the request
// message is done here; starting, streaming and signalling are the manager's.
#include <signal.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "abx/base/try.h"
#include "connect.h"
#include "envd_impl.h"
#include "proto_json.h"

namespace abx::envd {

namespace json = boost::json;
using Impl = Envd::Impl;
using Call = Impl::Call;

namespace {

struct Selector {
  std::optional<std::uint32_t> pid;
  std::optional<std::string> tag;
};

Result<Selector> parse_selector(const json::object& msg) {
  ABX_ASSIGN_OR_RETURN(auto sel, get_object(msg, "process"));
  if (!sel) return invalid_argument("missing field 'process' (a pid or tag selector)");
  ABX_ASSIGN_OR_RETURN(auto pid, get_u32(**sel, "pid", {}, "process"));
  ABX_ASSIGN_OR_RETURN(auto tag, get_string(**sel, "tag", {}, "process"));
  if (!pid && !tag) return invalid_argument("process selector needs 'pid' or 'tag'");
  return Selector{pid, tag};
}

Result<std::shared_ptr<Process>> selected_process(Impl& envd, const json::object& msg) {
  ABX_ASSIGN_OR_RETURN(auto sel, parse_selector(msg));
  return envd.procs->find(sel.pid, sel.tag);
}

Result<std::optional<std::pair<std::uint16_t, std::uint16_t>>> parse_pty(const json::object& msg) {
  using R = std::optional<std::pair<std::uint16_t, std::uint16_t>>;
  ABX_ASSIGN_OR_RETURN(auto pty, get_object(msg, "pty"));
  if (!pty) return R();
  ABX_ASSIGN_OR_RETURN(auto size, get_object(**pty, "size", {}, "pty"));
  std::uint32_t cols = 80, rows = 24;
  if (size) {
    ABX_ASSIGN_OR_RETURN(auto c, get_u32(**size, "cols", {}, "pty.size"));
    ABX_ASSIGN_OR_RETURN(auto r, get_u32(**size, "rows", {}, "pty.size"));
    if (c) cols = *c;
    if (r) rows = *r;
  }
  if (cols > 65535 || rows > 65535) return invalid_argument("pty size out of range");
  return R(std::make_pair(static_cast<std::uint16_t>(cols), static_cast<std::uint16_t>(rows)));
}

Result<std::chrono::milliseconds> timeout_of(const http::Request& req) {
  auto it = req.find("Connect-Timeout-Ms");
  if (it == req.end()) return std::chrono::milliseconds(0);
  std::string v(it->value());
  if (v.empty() || v.size() > 10 || v.find_first_not_of("0123456789") != std::string::npos) {
    return invalid_argument("invalid Connect-Timeout-Ms '" + v + "'");
  }
  return std::chrono::milliseconds(std::stoll(v));
}

// StartRequest → StartSpec.
Result<StartSpec> parse_start(const Call& c) {
  ABX_ASSIGN_OR_RETURN(auto proc, get_object(c.msg, "process"));
  if (!proc) return invalid_argument("missing field 'process'");
  StartSpec spec;
  ABX_ASSIGN_OR_RETURN(auto cmd, get_string(**proc, "cmd", {}, "process"));
  if (!cmd || cmd->empty()) return invalid_argument("missing field 'process.cmd'");
  spec.config.cmd = *cmd;
  ABX_ASSIGN_OR_RETURN(spec.config.args, get_string_list(**proc, "args", {}, "process"));
  ABX_ASSIGN_OR_RETURN(spec.config.envs, get_string_map(**proc, "envs", {}, "process"));
  ABX_ASSIGN_OR_RETURN(spec.config.cwd, get_string(**proc, "cwd", {}, "process"));
  ABX_ASSIGN_OR_RETURN(spec.pty, parse_pty(c.msg));
  ABX_ASSIGN_OR_RETURN(spec.tag, get_string(c.msg, "tag"));
  ABX_ASSIGN_OR_RETURN(auto stdin_open, get_bool(c.msg, "stdin"));
  spec.stdin_open = stdin_open.value_or(true);
  ABX_ASSIGN_OR_RETURN(spec.timeout, timeout_of(c.req));
  spec.user = c.user;
  spec.default_cwd = c.default_workdir;
  return spec;
}

json::object process_config_json(const ProcessConfig& c) {
  json::object o{{"cmd", c.cmd}};
  json::array args;
  for (const auto& a : c.args) args.emplace_back(a);
  o["args"] = std::move(args);
  json::object envs;
  for (const auto& [k, v] : c.envs) envs[k] = v;
  o["envs"] = std::move(envs);
  if (c.cwd) o["cwd"] = *c.cwd;
  return o;
}

Status start(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto spec, parse_start(c));
  ABX_ASSIGN_OR_RETURN(auto p, envd.procs->start(spec));
  auto writer = c.respond.stream(connect_stream_header(c.req.version()));
  p->subscribe(Subscriber{writer, envd.keepalive_of(c.req)});
  p->run_pump();
  return {};
}

Status connect_stream(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto p, selected_process(envd, c.msg));
  auto writer = c.respond.stream(connect_stream_header(c.req.version()));
  if (!p->subscribe(Subscriber{writer, envd.keepalive_of(c.req)})) {
    Error e = not_found("process " + std::to_string(p->pid()) + " has ended");
    writer->write(encode_envelope(kFlagEndStream, end_stream_payload(&e)));
    writer->finish();
  }
  return {};
}

Result<json::object> list(Impl& envd, Call&) {
  json::array out;
  for (const auto& p : envd.procs->list()) {
    json::object info{{"config", process_config_json(p->config())},
                      {"pid", static_cast<std::uint32_t>(p->pid())}};
    if (p->tag()) info["tag"] = *p->tag();
    out.push_back(std::move(info));
  }
  return json::object{{"processes", std::move(out)}};
}

Result<json::object> send_input(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto sel, parse_selector(c.msg));
  ABX_ASSIGN_OR_RETURN(auto input, get_object(c.msg, "input"));
  if (!input) return invalid_argument("missing field 'input'");
  ABX_ASSIGN_OR_RETURN(auto in, get_bytes(**input, "stdin", {}, "input"));
  ABX_ASSIGN_OR_RETURN(auto pty, get_bytes(**input, "pty", {}, "input"));
  ABX_ASSIGN_OR_RETURN(auto p, envd.procs->find(sel.pid, sel.tag));
  if (pty) {
    ABX_TRY(p->send_pty(*pty));
  } else if (in) {
    ABX_TRY(p->send_stdin(*in));
  } else {
    return invalid_argument("input needs 'stdin' or 'pty'");
  }
  return json::object{};
}

Result<json::object> send_signal(Impl& envd, Call& c) {
  static const std::map<std::string, int, std::less<>> kSignals{
      {"SIGNAL_UNSPECIFIED", 0}, {"SIGNAL_SIGTERM", 15}, {"SIGNAL_SIGKILL", 9}};
  ABX_ASSIGN_OR_RETURN(auto sel, parse_selector(c.msg));
  ABX_ASSIGN_OR_RETURN(auto sig, get_enum(c.msg, "signal", "", kSignals));
  if (!sig || (*sig != SIGTERM && *sig != SIGKILL)) {
    return invalid_argument("signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL");
  }
  ABX_ASSIGN_OR_RETURN(auto p, envd.procs->find(sel.pid, sel.tag));
  ABX_TRY(p->signal(*sig));
  return json::object{};
}

Result<json::object> close_stdin(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto p, selected_process(envd, c.msg));
  ABX_TRY(p->close_stdin());
  return json::object{};
}

Result<json::object> update(Impl& envd, Call& c) {
  ABX_ASSIGN_OR_RETURN(auto sel, parse_selector(c.msg));
  ABX_ASSIGN_OR_RETURN(auto pty, parse_pty(c.msg));
  ABX_ASSIGN_OR_RETURN(auto p, envd.procs->find(sel.pid, sel.tag));
  if (pty) ABX_TRY(p->resize(pty->first, pty->second));
  return json::object{};
}

}  // namespace

void register_process_service(Impl& envd) {
  envd.add_service("process.Process",
                   {.unary = {{"List", list},
                              {"SendInput", send_input},
                              {"SendSignal", send_signal},
                              {"CloseStdin", close_stdin},
                              {"Update", update}},
                    .streaming = {{"Start", start}, {"Connect", connect_stream}}});
}

}  // namespace abx::envd
