// HTTP/2 on an intercepted HTTPS flow (E2B network.rules; egress_proxy.h): when the sandbox and
// the upstream both negotiated h2 by ALPN, the proxy relays the flow as two nghttp2 sessions, a
// server toward the sandbox and a client toward the upstream, stream for stream.
//
// Per stream: its request header block must name the connection's TLS name in `:authority`
// (and `host`, if sent), else the proxy answers 421 itself and nothing is forwarded; CONNECT
// (RFC 8441 WebSocket included: the proxy never advertises SETTINGS_ENABLE_CONNECT_PROTOCOL)
// is 405; then the rule in force for that stream (asked per stream, as HTTP/1 asks per request)
// sets its headers, replacing same-named ones (abx::egress::apply_h2_headers; sent
// never-indexed, out of HPACK's dynamic table), and the request goes upstream on a stream of
// its own. Bodies and trailers are streamed both ways under HTTP/2 flow control end to end: a
// receiving side's window is opened only once the bytes were handed to the other session, so
// buffered data per flow is bounded by the windows (256 KiB a stream, 1 MiB the connection,
// each way). 1xx responses are passed on. RST_STREAM goes to the paired stream with its code;
// a GOAWAY from either side is answered by a GOAWAY to the other (streams the upstream did not
// take are reset REFUSED_STREAM, which clients retry).
//
// Limits: 100 concurrent streams from the sandbox (SETTINGS_MAX_CONCURRENT_STREAMS; nghttp2
// refuses more); a header block (each request's, response's or trailers') of at most 64 KiB
// (RFC 9113 §6.5.2 size: name, value and 32 bytes per field) and 256 fields: a request over it
// is answered 431, a response over it is a 502 (or, once a response has started, a reset
// stream); no server push.
//
// Each stream is reported once to `event` (the audit), like an HTTP/1 request: its host, the
// rule and header names, the upstream's final status, or why it was refused or reset. Never a
// header's value, here or in the log.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "abx/base/log.h"
#include "egress_proxy.h"

namespace abx::platform {

struct H2BridgeHooks {
  std::string name;  // the TLS name both connections were opened for (lower case)
  // The rule in force now (called per stream; may throw: the stream is reset).
  std::function<std::optional<EgressTransform>()> transform;
  std::function<void(const EgressTransformEvent&)> event;  // each stream once
  std::function<void()> touch;                             // activity, for the idle limit
  std::uint64_t* bytes_out = nullptr;                      // bytes written to the upstream
  std::uint64_t* bytes_in = nullptr;                       // bytes written to the sandbox
  const Logger* log = nullptr;
};

using H2TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>;

// Relays HTTP/2 between `down` (the sandbox's connection, handshake done, h2 selected) and `up`
// (the upstream's, h2 selected) until the sandbox's connection ends, either connection fails, or
// both sides are done after a GOAWAY. Returns once every operation it started has completed;
// the caller then closes both (it never shuts down TLS itself). On the streams' strand.
boost::asio::awaitable<void> serve_h2(H2TlsStream& down, H2TlsStream& up, H2BridgeHooks hooks);

}  // namespace abx::platform
