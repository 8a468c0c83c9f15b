#include "abx/mcp/stdio.h"

#include <errno.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "abx/base/os.h"

namespace abx::mcp {

namespace json = boost::json;

namespace {

// Replies from any thread, one whole line at a time; counts the messages still unanswered so
// that end of input can wait for them.
struct Output {
  int fd;
  std::mutex mu;
  std::condition_variable idle;
  std::size_t pending = 0;
  bool broken = false;  // the peer stopped reading: later replies are dropped
  int broken_errno = 0;

  void write_line(std::string line) {
    line.push_back('\n');
    std::lock_guard lock(mu);
    std::size_t off = 0;
    while (!broken && off < line.size()) {
      ssize_t n =
          os::retry_eintr([&] { return ::write(fd, line.data() + off, line.size() - off); });
      if (n <= 0) {
        broken = true;
        broken_errno = n < 0 ? errno : EPIPE;
        break;
      }
      off += static_cast<std::size_t>(n);
    }
  }
  void begin() {
    std::lock_guard lock(mu);
    ++pending;
  }
  void end() {
    std::lock_guard lock(mu);
    if (--pending == 0) idle.notify_all();
  }
  void wait_idle() {
    std::unique_lock lock(mu);
    idle.wait(lock, [&] { return pending == 0; });
  }
};

}  // namespace

Status serve_stdio(const Dispatcher& dispatcher, ToolProvider& tools, int in_fd, int out_fd) {
  auto out = std::make_shared<Output>();
  out->fd = out_fd;
  SessionState session;
  const std::size_t max_line = dispatcher.limits().max_message_bytes;

  auto dispatch_line = [&](std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) return;  // blank lines
    out->begin();
    dispatcher.handle(line, session, tools, [out](std::optional<json::object> reply) {
      if (reply) out->write_line(json::serialize(*reply));
      out->end();
    });
  };

  std::string buf;
  bool skipping = false;  // inside a line over the limit: drop bytes until its newline
  char chunk[64 * 1024];
  int read_errno = 0;
  for (;;) {
    ssize_t n = os::retry_eintr([&] { return ::read(in_fd, chunk, sizeof chunk); });
    if (n < 0) read_errno = errno;
    if (n <= 0) break;
    std::string_view data(chunk, static_cast<std::size_t>(n));
    while (!data.empty()) {
      auto nl = data.find('\n');
      std::string_view piece = data.substr(0, nl);
      if (!skipping) {
        if (buf.size() + piece.size() > max_line) {
          skipping = true;
          buf.clear();
          buf.shrink_to_fit();
          out->write_line(json::serialize(error_response(
              invalid_request("message over the limit of " + std::to_string(max_line) + " bytes"),
              nullptr)));
        } else {
          buf.append(piece);
        }
      }
      if (nl == std::string_view::npos) break;
      if (!skipping) dispatch_line(buf);
      buf.clear();
      skipping = false;
      data.remove_prefix(nl + 1);
    }
  }
  if (!skipping) dispatch_line(buf);  // a last message without its newline
  out->wait_idle();
  if (read_errno != 0) {
    return Error(ErrorCode::kUnavailable,
                 std::string("reading MCP messages failed: ") + std::strerror(read_errno));
  }
  std::lock_guard lock(out->mu);
  if (out->broken) {
    return Error(ErrorCode::kUnavailable,
                 std::string("writing MCP replies failed: ") + std::strerror(out->broken_errno));
  }
  return {};
}

}  // namespace abx::mcp
