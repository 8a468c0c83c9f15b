// The sandboxes' DNS forwarder: one UDP+TCP server in abxd that every sandbox's port-53 traffic
// is redirected to (nftables), deciding per sandbox which names it may resolve.
//
// For each query the forwarder asks may_resolve(source address, name). Refused names get an
// immediate REFUSED and never reach the upstream resolver. Allowed ones are passed on with an id
// of our own choosing (random), from a fresh socket with a kernel-chosen random port, and a reply
// is taken only if it matches that id and the question, so nobody who cannot see the traffic
// can plant an answer; the client's id is restored and the upstream's reply relayed as it came.
// Before that reply leaves, on_answer sees its A records (after CNAMEs): the egress proxy binds
// a sandbox's connections to the addresses its resolver gave it, so the binding must exist
// before the sandbox can use the address.
//
// Everything a sandbox sends is hostile: malformed queries are dropped (UDP) or end the
// connection (TCP); in-flight upstream queries are capped in all and per source (over a cap:
// REFUSED); TCP connections are capped in all and per source and every read and write on them has a
// deadline; an upstream that does not answer within its timeout yields SERVFAIL.
//
// The forwarder runs on the caller's io_context, from any number of threads: each socket lives
// on its own strand and the shared counters are under a mutex. The hooks are called from those
// threads, concurrently, and must be thread-safe, quick and must not throw.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "abx/base/error.h"

namespace abx::platform {

struct DnsForwarderHooks {
  // Whether `src_ip` (host order IPv4 of the asking sandbox) may resolve `qname` (lower-case,
  // no trailing dot, RFC 1035 escapes for odd bytes). Called for every well-formed query;
  // unknown sources -> return false. Empty: nothing may be resolved.
  std::function<bool(std::uint32_t src_ip, const std::string& qname)> may_resolve;
  // Each forwarded answer's A records for the question name (after CNAMEs), with the answer's
  // min TTL. Called only for NOERROR answers with at least one A record, before the client gets
  // the answer.
  std::function<void(std::uint32_t src_ip, const std::string& qname,
                     const std::vector<std::uint32_t>& a, std::uint32_t ttl)>
      on_answer;
  // Audit: every well-formed query, with whether it was forwarded.
  std::function<void(std::uint32_t src_ip, const std::string& qname, std::uint16_t qtype,
                     bool forwarded)>
      on_query;
};

struct DnsForwarderLimits {
  std::chrono::milliseconds upstream_timeout{5'000};  // then SERVFAIL
  std::chrono::milliseconds tcp_timeout{10'000};      // each read and write on a client connection
  std::size_t max_in_flight = 256;                    // upstream queries in all; over: REFUSED
  std::size_t max_in_flight_per_source = 32;          // per source address; over: REFUSED
  std::size_t max_tcp_connections = 64;               // further connections are closed at once
  std::size_t max_tcp_connections_per_source = 8;     // per source address; the same
};

class DnsForwarder {
 public:
  // Listens on UDP and TCP at `listen`, an IPv4 address (port 0 picks one; both protocols on
  // the same port; the address need not be the host's yet: IP_FREEBIND) and forwards to
  // `upstream` (UDP queries over UDP, TCP queries over TCP to the same address and port).
  // unavailable when the sockets cannot be bound.
  static Result<std::unique_ptr<DnsForwarder>> start(boost::asio::io_context& io,
                                                     boost::asio::ip::tcp::endpoint listen,
                                                     boost::asio::ip::udp::endpoint upstream,
                                                     DnsForwarderHooks hooks,
                                                     DnsForwarderLimits limits = {});
  ~DnsForwarder();  // stop()
  DnsForwarder(const DnsForwarder&) = delete;
  DnsForwarder& operator=(const DnsForwarder&) = delete;

  std::uint16_t port() const;
  // Also listens on `ip` (host byte order), UDP and TCP at port(): abxd listens on each sandbox
  // link's gateway address, never on every address of the host. Idempotent; the bind error
  // (unavailable), or unavailable once stopped. Thread-safe.
  Status listen_on(std::uint32_t ip);
  // Stops listening on `ip` (connections and queries under way go on). Unknown: fine.
  void stop_listening(std::uint32_t ip);
  // Closes the listening sockets, client connections and upstream queries (their clients get
  // no answer). Does not wait: handlers already queued on the io_context finish there, holding
  // what they need. Idempotent; any thread.
  void stop();

  struct Impl;

 private:
  explicit DnsForwarder(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace abx::platform
