// abxd --cluster with mutual TLS between nodes (docs/cluster.md, "TLS"): the node's internal
// endpoint and the tunnels of sandbox traffic to other nodes.
//
// Internal endpoint (--cluster-listen): a TLS listener that asks every client for a certificate
// and completes the handshake only with one the cluster CA signed; a client without one, or
// with one of another CA, is refused in the handshake, before a byte of a request is read. A
// verified connection is then piped, decrypted, to a second gateway of this node bound to a
// loopback port (the "internal gateway"): the same control API and sandbox proxy as the public
// listener, whose backend (StampingBackend) marks each control request as having come through
// the internal endpoint (kClusterTransportField with a random token of this process). The
// router accepts a node's call (the cluster secret) only with that mark, so with TLS on a node's
// call through the public listener is refused whatever secret it carries.
//
// Tunnels: sandbox traffic for a sandbox of another node is a byte stream the gateway relays
// into a socket (GatewayBackend::connect_sandbox). With TLS that socket is one end of a socket
// pair; the other end is piped through a TLS connection (this node's certificate, the other
// node's verified against the cluster CA and the host name of its URL) to the owner's internal
// endpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "abx/base/error.h"
#include "abx/base/fd.h"
#include "abx/cluster/tls.h"
#include "abx/http/client.h"
#include "abx/platform/gateway.h"

namespace abx::platform {

// Set by the internal gateway's backend on every control request (a client's own is replaced).
inline constexpr std::string_view kClusterTransportField = "Abx-Cluster-Transport";

// A GatewayBackend that forwards everything to `inner`, setting kClusterTransportField to
// `token` on every control request first (the internal gateway's backend).
class StampingBackend : public GatewayBackend {
 public:
  StampingBackend(GatewayBackend& inner, std::string token)
      : inner_(inner), token_(std::move(token)) {}
  http::Response handle_control(http::Request&& req) override;
  Admission admit(const Route& route, const boost::beast::http::request_header<>& header) override;
  Result<UniqueFd> connect_sandbox(const Route& route) override;
  Result<UniqueFd> sandbox_socket(const Route& route) override;
  std::optional<Route> signed_files_route(const boost::beast::http::request_header<>& h) override;
  Result<http::BodyPlan> control_body_plan(const http::Request& header,
                                           std::size_t default_max) override;
  bool serve_control(http::Request& req, const http::Responder& respond) override;

 private:
  GatewayBackend& inner_;
  std::string token_;
};

// The internal endpoint's listener and the tunnels, on two I/O threads of their own.
class ClusterTls {
 public:
  // Loads the node's certificate, key and the cluster CA (kInvalidArgument naming a file that
  // cannot be used) and, when `listen_host` is set, listens there (kUnavailable: cannot bind),
  // piping verified connections to upstream_host:upstream_port (the internal gateway).
  static Result<std::unique_ptr<ClusterTls>> start(const cluster::TlsFiles& files);
  ~ClusterTls();

  // Starts the internal endpoint. Returns the port it listens on.
  Result<std::uint16_t> listen(const std::string& host, std::uint16_t port,
                               const std::string& upstream_host, std::uint16_t upstream_port);

  // The client side of node-to-node calls (relays, fan-outs, moves).
  const http::TlsClient& client() const { return *client_; }
  std::shared_ptr<const http::TlsClient> client_ptr() const { return client_; }

  // A tunnel to host:port's internal endpoint (TLS verified as above): the local end of a
  // connected socket pair, non-blocking. kUnavailable / kDeadlineExceeded (cannot connect),
  // kUnauthenticated (the other node's certificate does not verify, or it refused ours).
  Result<UniqueFd> tunnel(const std::string& host, std::uint16_t port,
                          std::chrono::milliseconds timeout);

  // Stops accepting and closes every connection and tunnel; joins the threads. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit ClusterTls(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<const http::TlsClient> client_;
};

}  // namespace abx::platform
