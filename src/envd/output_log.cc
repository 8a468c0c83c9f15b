#include "output_log.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <boost/json/array.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>

#include "abx/base/os.h"

namespace abx::envd {

namespace {
std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

OutputLog& OutputLog::instance() {
  static OutputLog log;
  return log;
}

OutputLog::OutputLog(std::size_t max_bytes, std::size_t max_lines)
    : max_bytes_(max_bytes), max_lines_(max_lines) {}

void OutputLog::add(std::string_view source, std::string_view stream, std::string_view level,
                    std::string_view line) {
  std::int64_t now = unix_ms();
  std::lock_guard lock(mu_);
  do {
    std::string_view piece = line.substr(0, kMaxLineBytes);
    line.remove_prefix(piece.size());
    lines_.push_back(LogLine{now, std::string(source), std::string(stream), std::string(level),
                             std::string(piece)});
    bytes_ += piece.size();
    while (!lines_.empty() && (bytes_ > max_bytes_ || lines_.size() > max_lines_)) {
      bytes_ -= lines_.front().line.size();
      lines_.pop_front();
      ++dropped_;
    }
  } while (!line.empty());
}

std::vector<LogLine> OutputLog::since(std::int64_t start_ms, std::size_t limit) const {
  std::lock_guard lock(mu_);
  std::vector<LogLine> out;
  for (const auto& l : lines_) {
    if (out.size() >= limit) break;
    if (l.timestamp_ms >= start_ms) out.push_back(l);
  }
  return out;
}

std::uint64_t OutputLog::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

boost::json::object OutputLog::to_json(std::int64_t start_ms, std::size_t limit) const {
  boost::json::array logs;
  for (const auto& l : since(start_ms, limit)) {
    logs.push_back(boost::json::object{{"timestampMs", l.timestamp_ms},
                                       {"source", l.source},
                                       {"stream", l.stream},
                                       {"level", l.level},
                                       {"line", l.line}});
  }
  return {{"logs", std::move(logs)}, {"dropped", dropped()}};
}

Result<boost::json::object> logs_query_json(const OutputLog& log,
                                            const std::map<std::string, std::string>& query) {
  auto number = [&](const char* key, std::int64_t dflt, std::int64_t max) -> Result<std::int64_t> {
    auto it = query.find(key);
    if (it == query.end() || it->second.empty()) return dflt;
    const std::string& v = it->second;
    if (v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument(std::string("'") + key + "' must be a non-negative integer");
    return std::min<std::int64_t>(std::stoll(v), max);
  };
  auto start = number("start", 0, INT64_MAX);
  if (!start.ok()) return start.error();
  auto limit = number("limit", 1000, 10'000);
  if (!limit.ok()) return limit.error();
  return log.to_json(*start, static_cast<std::size_t>(*limit));
}

struct OutputPump::State {
  OutputLog& log;
  std::string source;
  int fds[2];
  std::string partial[2];
  std::atomic<bool> finishing{false};
  std::thread thread;

  void emit(int i, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    log.add(source, i == 0 ? "stdout" : "stderr", i == 0 ? "info" : "warn", line);
  }

  void run() {
    using clock = std::chrono::steady_clock;
    constexpr auto kLinger = std::chrono::milliseconds(300);
    auto last_data = clock::now();
    char buf[8192];
    for (;;) {
      pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
      if (fds[0] < 0 && fds[1] < 0) break;
      int n = os::retry_eintr([&] { return ::poll(p, 2, 100); });
      if (n < 0) break;
      if (n == 0) {
        if (finishing.load() && clock::now() - last_data > kLinger) break;
        continue;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t r = os::retry_eintr([&] { return ::read(fds[i], buf, sizeof buf); });
        if (r < 0 && errno == EAGAIN) continue;
        if (r <= 0) {
          ::close(fds[i]);
          fds[i] = -1;
          continue;
        }
        last_data = clock::now();
        partial[i].append(buf, static_cast<std::size_t>(r));
        std::size_t start = 0;
        for (std::size_t nl; (nl = partial[i].find('\n', start)) != std::string::npos;) {
          emit(i, std::string_view(partial[i]).substr(start, nl - start));
          start = nl + 1;
        }
        partial[i].erase(0, start);
        if (partial[i].size() > OutputLog::kMaxLineBytes) {
          emit(i, partial[i]);
          partial[i].clear();
        }
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (!partial[i].empty()) emit(i, partial[i]);
      if (fds[i] >= 0) ::close(fds[i]);
    }
  }
};

OutputPump::OutputPump(OutputLog& log, std::string source, int stdout_fd, int stderr_fd)
    : state_(new State{log, std::move(source), {stdout_fd, stderr_fd}, {}, {}, {}}) {
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

OutputPump::~OutputPump() { finish(); }

void OutputPump::finish() {
  state_->finishing = true;
  if (state_->thread.joinable()) state_->thread.join();
}

}  // namespace abx::envd
