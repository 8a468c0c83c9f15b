// What the MCP tests' fake tool providers share.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "abx/mcp/mcp.h"

namespace abx::mcp {

// Answers a call with `text` from another thread after `delay`: a tool that finishes after
// call_tool() has returned, as the real providers' long calls do.
inline void answer_from_thread(ToolDone done, std::string text,
                               std::chrono::milliseconds delay = {}) {
  std::thread([done = std::move(done), text = std::move(text), delay] {
    std::this_thread::sleep_for(delay);
    ToolResult r;
    r.text = text;
    done(r);
  }).detach();
}

}  // namespace abx::mcp
