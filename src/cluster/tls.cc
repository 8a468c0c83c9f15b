#include "abx/cluster/tls.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "abx/base/try.h"

namespace abx::cluster {

Status check_key_file(const std::string& path, std::string_view flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    const std::string what = std::string(flag) + " " + path + ": " + std::strerror(e);
    return e == ENOENT ? not_found(what) : invalid_argument(what);
  }
  if (!S_ISREG(st.st_mode))
    return invalid_argument(std::string(flag) + " " + path + ": not a file");
  if (st.st_uid != ::geteuid())
    return invalid_argument(std::string(flag) + " " + path +
                            ": must be owned by abxd's user (uid " + std::to_string(::geteuid()) +
                            ")");
  if ((st.st_mode & 077) != 0)
    return invalid_argument(std::string(flag) + " " + path +
                            ": a private key must not be readable by group or others (chmod 0400)");
  return {};
}

Result<Endpoint> parse_host_port(std::string_view text, std::string_view flag) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return invalid_argument(std::string(flag) + " '" + std::string(text) + "': expected HOST:PORT");
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty() || host.find_first_of("/@?# ") != std::string_view::npos)
    return invalid_argument(std::string(flag) + " '" + std::string(text) + "': bad host");
  std::string_view p = text.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || port > 65535)
    return invalid_argument(std::string(flag) + " '" + std::string(text) + "': bad port");
  return Endpoint{std::string(host), static_cast<std::uint16_t>(port)};
}

namespace {

Status check_pair(const TlsFiles& f, std::string_view cert_flag, std::string_view key_flag) {
  if (!f.cert.empty() && f.key.empty())
    return invalid_argument(std::string(cert_flag) + " needs " + std::string(key_flag));
  if (f.cert.empty() && !f.key.empty())
    return invalid_argument(std::string(key_flag) + " needs " + std::string(cert_flag));
  if (!f.key.empty()) return check_key_file(f.key, key_flag);
  return {};
}

}  // namespace

Result<TlsPlan> check_tls_settings(const TlsSettings& s, const std::vector<Endpoint>& endpoints,
                                   std::string_view advertise_url,
                                   std::string_view listen_default) {
  TlsPlan plan;
  plan.etcd_tls = !endpoints.empty() && endpoints.front().tls;
  if (plan.etcd_tls && s.etcd.ca.empty())
    return invalid_argument(
        "https:// etcd endpoints need --etcd-ca (the CA of etcd's certificate)");
  if (!plan.etcd_tls && !s.etcd.empty())
    return invalid_argument("--etcd-ca, --etcd-cert and --etcd-key need https:// etcd endpoints");
  ABX_TRY(check_pair(s.etcd, "--etcd-cert", "--etcd-key"));

  plan.node_tls = !s.node.empty() || !s.listen.empty();
  if (plan.node_tls) {
    if (s.node.ca.empty() || s.node.cert.empty() || s.node.key.empty() || s.listen.empty())
      return invalid_argument(
          "mutual TLS between nodes needs all of --cluster-ca, --cluster-cert, --cluster-key and "
          "--cluster-listen");
    ABX_TRY(check_pair(s.node, "--cluster-cert", "--cluster-key"));
    ABX_ASSIGN_OR_RETURN(Endpoint l, parse_host_port(s.listen, "--cluster-listen"));
    plan.listen_host = l.host;
    plan.listen_port = l.port;
    plan.advertise_url =
        advertise_url.empty() ? "https://" + std::string(s.listen) : std::string(advertise_url);
    if (!plan.advertise_url.starts_with("https://"))
      return invalid_argument(
          "--advertise-url '" + plan.advertise_url +
          "': with --cluster-listen it names that endpoint (https://HOST:PORT)");
  } else {
    plan.advertise_url = advertise_url.empty() ? "http://" + std::string(listen_default)
                                               : std::string(advertise_url);
    if (!plan.advertise_url.starts_with("http://"))
      return invalid_argument("--advertise-url '" + plan.advertise_url +
                              "': https:// needs --cluster-listen and the --cluster-* files");
  }
  if (plan.advertise_url.ends_with(":0"))
    return invalid_argument("--advertise-url '" + plan.advertise_url +
                            "': a listener on port 0 needs an explicit --advertise-url");
  return plan;
}

}  // namespace abx::cluster
