// The MCP stdio transport: one session over newline-delimited JSON-RPC on a pair of file
// descriptors (a server launched as a subprocess reads stdin and writes stdout).
//
// Each line read is one message (the transport forbids embedded newlines; a trailing "\r" is
// dropped). Replies are written whole, one line each, under a lock, so tool calls that finish
// on other threads never interleave their output; they may arrive out of order, as JSON-RPC
// allows. A line over the size limit is skipped up to its newline and answered with -32600
// (nothing from it is kept in memory). At end of input the transport waits for calls in
// progress to answer, then returns. Nothing but protocol messages is written to `out_fd`; logs
// belong on stderr.
#pragma once

#include "abx/base/error.h"
#include "abx/mcp/mcp.h"

namespace abx::mcp {

// Serves until `in_fd` reaches end of input (or a read error). Errors: kUnavailable when
// reading fails or the peer stopped reading (`out_fd` closed), with errno in the message.
// `dispatcher`, `tools` must outlive the call; read(2)/write(2) are retried on EINTR. A pipe
// whose reader is gone raises SIGPIPE: a process serving stdio should ignore that signal.
Status serve_stdio(const Dispatcher& dispatcher, ToolProvider& tools, int in_fd, int out_fd);

}  // namespace abx::mcp
