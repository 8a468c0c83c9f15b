// The transparent egress proxy: where nftables sends a sandbox's outbound HTTP and TLS when its
// rules allow some domains.
//
// nftables `redirect`s the sandbox's TCP to ports 80 and 443 to this one listener in abxd. For
// each connection the proxy learns where it was going (SO_ORIGINAL_DST), reads its first bytes
// for the domain (the HTTP Host on port 80, the TLS SNI on 443; abx::egress::http_host and
// tls_server_name), asks `allow`, and then either connects to the original destination and
// relays both ways, or resets the connection. It never changes a byte of those flows.
//
// Transforms (E2B network.rules, hooks.transform): an allowed flow whose Host (80) or SNI (443)
// a rule matches is intercepted instead. On 443 the proxy first connects to the real server and
// verifies its certificate for that name (hooks.upstream_tls: a failure resets the sandbox's
// connection mid-handshake, so the sandbox sees a TLS failure, never a bypass), then completes
// the sandbox's handshake with a certificate for the name (hooks.server_tls). ALPN: the
// upstream is offered h2 only when the sandbox's ClientHello offered it (so that both legs speak
// the same version), and the sandbox gets h2 only when the upstream chose it; HTTP/2 flows are
// relayed stream by stream (egress_h2.h), the rest as HTTP/1.1. Then, per HTTP/1 request: the Host
// must be the flow's name (else 421), the rule's headers are set, the request and its response are
// relayed (bodies streamed, chunked or not), keep-alive kept. A 101 (WebSocket) turns the
// connection into a byte relay: headers go on the upgrade request only. `Expect: 100-continue` is
// not answered early (clients send the body after their wait).
//
// Never waiting forever on a sandbox: the first bytes are read under a deadline and a 16 KiB
// cap, after which the flow is decided without a domain; the same happens for bytes that are
// neither HTTP nor TLS. Other ports are decided at once without a domain (nothing to sniff, and
// server-speaks-first protocols would otherwise stall). A bounded number of flows run at once,
// in all and per source address (one sandbox cannot take every other sandbox's share); more are
// reset as they arrive. A relayed flow that goes quiet is reset after `idle_timeout`, one with a
// direction already closed (half-open) sooner.
//
// What it cannot see: only the first request's Host and the ClientHello's SNI are checked.
// A later request on a kept-alive HTTP connection, or the Host inside TLS, may name another
// site served from the same address (domain fronting). The destination address itself is
// unchanged, which is why the policy also binds an allowed domain to the addresses the
// sandbox's own resolver returned for it.
//
// Threads: the proxy runs on the caller's io_context, which may run on several threads; each
// flow keeps to its own strand. The hooks are called from those threads, concurrently, and must
// be thread-safe and must not block (they run on I/O threads).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abx/base/error.h"

namespace abx::platform {

// One redirected connection. Addresses in host byte order.
struct EgressFlow {
  std::uint32_t src_ip = 0;           // the sandbox's address as the proxy saw it
  std::uint32_t dst_ip = 0;           // where the sandbox meant to connect
  std::uint16_t dst_port = 0;         // 80: Host sniffed; 443: SNI sniffed; others: none
  std::optional<std::string> domain;  // the Host / SNI, when one was found and well-formed
};

// What a transform rule sets on one request (E2B network.rules).
struct EgressTransform {
  std::string rule;                                          // the matching key, for the audit
  std::vector<std::pair<std::string, std::string>> headers;  // set in order, replacing same names
  // Non-empty: the rule applies but cannot be carried out (a secret it names is gone): the
  // request is answered 502 with this reason and never forwarded. Never holds a value.
  std::string refused;
};

// One request a transform rule matched, for the audit: never the values.
struct EgressTransformEvent {
  std::string host;                       // the request's Host (== the flow's Host / SNI)
  std::string rule;                       // the key that matched; empty when refused
  std::vector<std::string> header_names;  // the headers set
  int upstream_status = 0;                // the upstream's final status; 0: none (refused, failed)
  std::string refused;                    // why the proxy refused the request, if it did
};

struct EgressProxyHooks {
  // Where the sandbox meant to connect; default (empty) uses runtime::original_destination on
  // the accepted socket. Tests inject.
  std::function<Result<std::pair<std::uint32_t, std::uint16_t>>(int fd)> original_destination;
  // The verdict for a flow; `domain` is the SNI/Host if one was found. Required.
  std::function<bool(const EgressFlow&)> allow;
  // Audit: each decided flow once, with its verdict and, when it ends, bytes each way
  // (out: sandbox to destination, the sniffed bytes included; in: destination to sandbox).
  // Denied flows are reported at once with 0, 0. Optional.
  std::function<void(const EgressFlow&, bool allowed, std::uint64_t bytes_out,
                     std::uint64_t bytes_in)>
      on_flow;
  // Where an allowed flow connects; default (empty) is dst_ip:dst_port. Tests inject (so that a
  // flow can be "for" port 443 while the test's server listens elsewhere).
  std::function<boost::asio::ip::tcp::endpoint(const EgressFlow&)> upstream;

  // Transforms (E2B network.rules). Optional. For an allowed flow with a Host (port 80) or SNI
  // (port 443), the rule that applies to `host` now, if any. A flow whose first answer is a rule
  // is intercepted: every request on it is parsed, must name that same host in its Host header
  // (else 421 and the connection closes; on HTTP/2 each stream's :authority, else that stream
  // is answered 421), and gets the headers of the rule in force at that request or stream (an
  // update applies to the next one). Other flows stay a byte relay.
  std::function<std::optional<EgressTransform>(const EgressFlow&, std::string_view host)> transform;
  // Each intercepted request once (its response's status, or why it was refused). Optional.
  std::function<void(const EgressFlow&, const EgressTransformEvent&)> on_transform;
  // HTTPS interception: a server context presenting a certificate for `name`, and the client
  // context the proxy verifies upstream servers with (peer verification and the name are set
  // per connection). Both needed, else port 443 is never intercepted. The proxy keeps the
  // upstream sessions itself (start() sets `upstream_tls`'s client session callback), keyed by
  // name and address, and resumes them: a flow per request does not pay a full handshake each.
  // ALPN: the context's select callback may pick h2 only for a connection whose SSL holds a
  // non-null pointer at egress_alpn_h2_slot() (the proxy sets it when the upstream chose h2),
  // else http/1.1 (CertAuthority::server_context does this).
  std::function<Result<std::shared_ptr<boost::asio::ssl::context>>(const std::string& name)>
      server_tls;
  std::shared_ptr<boost::asio::ssl::context> upstream_tls;
};

struct EgressProxyOptions {
  // First bytes of a port 80/443 flow: decided without a domain after this long.
  std::chrono::milliseconds sniff_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  // A relayed flow with no bytes either way for this long is reset.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // The same once one direction has ended (a half-close passed on): what is left is a reply
  // still coming, or nothing.
  std::chrono::milliseconds half_closed_idle_timeout{std::chrono::seconds(60)};
  // Flows at once (sniffing, connecting or relaying), in all and per source address (a
  // sandbox); more are reset as they arrive.
  std::size_t max_flows = 1024;
  std::size_t max_flows_per_source = 128;
};

// The OpenSSL ex_data index (SSL_get_ex_data) that tells a server_tls context's ALPN callback
// that h2 may be selected on this connection (non-null: yes).
int egress_alpn_h2_slot();

class EgressProxy {
 public:
  // Listens on `listen`, an IPv4 address (port 0: any free port; the address need not be the
  // host's yet: IP_FREEBIND). invalid_argument without hooks.allow; the bind or listen error
  // (unavailable) otherwise.
  static Result<std::unique_ptr<EgressProxy>> start(boost::asio::io_context& io,
                                                    boost::asio::ip::tcp::endpoint listen,
                                                    EgressProxyHooks hooks,
                                                    EgressProxyOptions options = {});
  ~EgressProxy();  // stop()
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  std::uint16_t port() const;
  // Also listens on `ip` (host byte order), at port(): abxd listens on each sandbox link's
  // gateway address, never on every address of the host. Idempotent; the bind error
  // (unavailable), or unavailable once stopped. Thread-safe.
  Status listen_on(std::uint32_t ip);
  // Stops listening on `ip` (flows accepted there go on). Unknown addresses are fine.
  void stop_listening(std::uint32_t ip);
  // Stops accepting and resets every flow (each allowed one is still reported to on_flow).
  // Thread-safe; returns without waiting for the flows' handlers to run.
  void stop();

  // Flows now open (for metrics and tests), in all and from one source (host byte order).
  std::size_t active_flows() const;
  std::size_t active_flows_from(std::uint32_t src_ip) const;

  struct Impl;

 private:
  explicit EgressProxy(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with the flows, which may outlive this object
};

}  // namespace abx::platform
