// The one logging facade: every line carries a component name and, where known, a sandbox id.
//
//   abx::Logger log("server");
//   log.info("listening on " + addr);
//
// Lines go to stderr as `2026-11-29T23:50:10.123 info [server] message` (with `[sandbox=id]`
// after the component when set). The level comes from set_log_level() or ABX_LOG_LEVEL
// (trace, debug, info, warn, error, off; default info). Backed by spdlog (header-only build, so
// in-sandbox binaries need no shared library besides glibc).
#pragma once

#include <string>
#include <string_view>

namespace abx {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Returns false for an unknown level name.
bool set_log_level(std::string_view name);

class Logger {
 public:
  explicit Logger(std::string component, std::string sandbox_id = {})
      : component_(std::move(component)), sandbox_id_(std::move(sandbox_id)) {}

  void trace(std::string_view msg) const { write(LogLevel::kTrace, msg); }
  void debug(std::string_view msg) const { write(LogLevel::kDebug, msg); }
  void info(std::string_view msg) const { write(LogLevel::kInfo, msg); }
  void warn(std::string_view msg) const { write(LogLevel::kWarn, msg); }
  void error(std::string_view msg) const { write(LogLevel::kError, msg); }
  bool enabled(LogLevel level) const;

 private:
  void write(LogLevel level, std::string_view msg) const;
  std::string component_;
  std::string sandbox_id_;
};

}  // namespace abx
