// spdlog and fmt are compiled into this one translation unit (header-only mode).
#define SPDLOG_HEADER_ONLY
#define FMT_HEADER_ONLY
#include "abx/base/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>
#include <mutex>

namespace abx {
namespace {

spdlog::level::level_enum to_spd(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

bool parse_level(std::string_view name, spdlog::level::level_enum& out) {
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& [n, l] : kNames) {
    if (n == name) {
      out = to_spd(l);
      return true;
    }
  }
  return false;
}

spdlog::logger& sink() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l =
        std::make_shared<spdlog::logger>("abx", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
    spdlog::level::level_enum lvl = spdlog::level::info;
    if (const char* env = std::getenv("ABX_LOG_LEVEL")) parse_level(env, lvl);
    l->set_level(lvl);
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return *logger;
}

}  // namespace

bool set_log_level(std::string_view name) {
  spdlog::level::level_enum lvl;
  if (!parse_level(name, lvl)) return false;
  sink().set_level(lvl);
  return true;
}

bool Logger::enabled(LogLevel level) const { return sink().should_log(to_spd(level)); }

void Logger::write(LogLevel level, std::string_view msg) const {
  auto& l = sink();
  if (!l.should_log(to_spd(level))) return;
  if (sandbox_id_.empty()) {
    l.log(to_spd(level), "[{}] {}", component_, msg);
  } else {
    l.log(to_spd(level), "[{}] [sandbox={}] {}", component_, sandbox_id_, msg);
  }
}

}  // namespace abx
