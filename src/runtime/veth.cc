// Sandbox links over rtnetlink (libmnl) and the egress ruleset through libnftables.
#include "abx/runtime/veth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <nftables/libnftables.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "abx/base/try.h"
#include "abx/runtime/netns.h"
#include "sys.h"

namespace abx::runtime {
namespace {

// One rtnetlink request on `fd`, answered by its ACK (or the kernel's errno); a dump
// (NLM_F_DUMP) hands each of its messages to `cb` and ends with the dump.
class NlRequest {
 public:
  NlRequest(std::uint16_t type, std::uint16_t flags) : buf_(MNL_SOCKET_BUFFER_SIZE) {
    nlh_ = mnl_nlmsg_put_header(buf_.data());
    nlh_->nlmsg_type = type;
    nlh_->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    nlh_->nlmsg_seq = ++seq_;
  }
  nlmsghdr* nlh() { return nlh_; }
  // The errno of the kernel's refusal after send() failed on it (0: none).
  int kernel_errno() const { return errno_; }

  Status send(int fd, std::string_view what, mnl_cb_t cb = nullptr, void* data = nullptr) {
    if (os::retry_eintr([&] { return ::send(fd, nlh_, nlh_->nlmsg_len, 0); }) < 0)
      return os::errno_error(what, errno);
    std::vector<char> reply(MNL_SOCKET_BUFFER_SIZE);
    for (;;) {
      ssize_t n = os::retry_eintr([&] { return ::recv(fd, reply.data(), reply.size(), 0); });
      if (n < 0) return os::errno_error(what, errno);
      int r = mnl_cb_run(reply.data(), static_cast<std::size_t>(n), nlh_->nlmsg_seq, 0, cb, data);
      if (r == MNL_CB_ERROR) return os::errno_error(what, errno_ = errno);
      if (r == MNL_CB_STOP) return {};
      // MNL_CB_OK without the ACK yet: read on.
    }
  }

 private:
  static inline std::atomic<std::uint32_t> seq_{0};  // sandboxes are made on several threads
  std::vector<char> buf_;
  nlmsghdr* nlh_;
  int errno_ = 0;
};

ifinfomsg* put_ifinfo(nlmsghdr* nlh, int index) {
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  ifi->ifi_index = index;
  return ifi;
}

Result<UniqueFd> route_socket(int netns_fd) {
  if (netns_fd >= 0) return socket_in_netns(netns_fd, AF_NETLINK, SOCK_RAW);
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return os::errno_error("socket NETLINK_ROUTE", errno);
  return UniqueFd(fd);
}

Result<int> ifindex_in(int netns_fd, const std::string& name) {
  ABX_ASSIGN_OR_RETURN(
      UniqueFd s,
      netns_fd >= 0 ? socket_in_netns(netns_fd, AF_INET, SOCK_DGRAM)
                    : Result<UniqueFd>(UniqueFd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0))));
  ifreq ifr = {};
  ::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(s.get(), SIOCGIFINDEX, &ifr) != 0)
    return os::errno_error("SIOCGIFINDEX " + name, errno);
  return ifr.ifr_ifindex;
}

// No IPv6 link-local address on this link (so nothing is reachable over IPv6 at all). Kernels
// without IPv6 refuse the attribute; that is the same outcome.
void no_ipv6(int fd, int index) {
  NlRequest req(RTM_NEWLINK, 0);
  put_ifinfo(req.nlh(), index);
  nlattr* spec = mnl_attr_nest_start(req.nlh(), IFLA_AF_SPEC);
  nlattr* inet6 = mnl_attr_nest_start(req.nlh(), AF_INET6);
  mnl_attr_put_u8(req.nlh(), IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE);
  mnl_attr_nest_end(req.nlh(), inet6);
  mnl_attr_nest_end(req.nlh(), spec);
  (void)req.send(fd, "RTM_NEWLINK addr_gen_mode");
}

Status add_addr(int fd, int index, std::uint32_t ip, std::string_view what) {
  NlRequest req(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE);
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(req.nlh(), sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_INET;
  ifa->ifa_prefixlen = 30;
  ifa->ifa_index = static_cast<unsigned>(index);
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  std::uint32_t be = htonl(ip);
  mnl_attr_put_u32(req.nlh(), IFA_LOCAL, be);
  mnl_attr_put_u32(req.nlh(), IFA_ADDRESS, be);
  return req.send(fd, what);
}

Status link_up(int fd, int index, std::string_view what) {
  NlRequest req(RTM_NEWLINK, 0);
  ifinfomsg* ifi = put_ifinfo(req.nlh(), index);
  ifi->ifi_flags = IFF_UP;
  ifi->ifi_change = IFF_UP;
  return req.send(fd, what);
}

}  // namespace

VethInfo veth_for_slot(const VethConfig& c, std::uint32_t slot) {
  VethInfo v;
  v.host_if = c.name_prefix + std::to_string(slot);
  v.host_ip = c.subnet_base + slot * 4 + 1;
  v.sandbox_ip = v.host_ip + 1;
  return v;
}

namespace {

// Deletes the link `name` through the route socket `sock`; one already gone is fine.
Status delete_link(int sock, const std::string& name) {
  NlRequest del(RTM_DELLINK, 0);
  put_ifinfo(del.nlh(), 0);
  mnl_attr_put_strz(del.nlh(), IFLA_IFNAME, name.c_str());
  Status s = del.send(sock, "RTM_DELLINK " + name);
  if (!s && s.error().message().ends_with("ENODEV")) return {};
  return s;
}

// abx's host ends are "ab" + 8 hex digits (the daemon's home) + the slot number.
bool abx_link_name(const std::string& n) {
  if (n.size() < 11 || n.compare(0, 2, "ab") != 0) return false;
  for (std::size_t i = 2; i < n.size(); ++i) {
    const char ch = n[i];
    const bool hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
    if (!hex || (i >= 10 && !(ch >= '0' && ch <= '9'))) return false;
  }
  return true;
}

// The host's links holding IPv4 address `ip`: one RTM_GETADDR dump of IPv4 addresses only
// (getifaddrs dumps every link with all its attributes too: 2.4-2.9 ms with 300 sandbox links).
// Empty if the dump fails: the caller's check is best effort.
std::vector<std::string> links_with_address(std::uint32_t ip) {
  struct Match {
    std::uint32_t ip;
    std::vector<std::string> names;
  } match{ip, {}};
  auto sock = route_socket(-1);
  if (!sock) return {};
  NlRequest dump(RTM_GETADDR, NLM_F_DUMP);
  auto* req = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(dump.nlh(), sizeof(ifaddrmsg)));
  req->ifa_family = AF_INET;
  auto on_addr = [](const nlmsghdr* m, void* data) -> int {
    const auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(m));
    std::uint32_t local = 0;  // network order, from IFA_LOCAL
    mnl_attr_parse(
        m, sizeof(ifaddrmsg),
        [](const nlattr* a, void* out) -> int {
          if (mnl_attr_get_type(a) == IFA_LOCAL && mnl_attr_get_payload_len(a) == 4)
            std::memcpy(out, mnl_attr_get_payload(a), 4);
          return MNL_CB_OK;
        },
        &local);
    auto* want = static_cast<Match*>(data);
    char name[IF_NAMESIZE] = {};
    if (ifa->ifa_family == AF_INET && ntohl(local) == want->ip &&
        ::if_indextoname(ifa->ifa_index, name) != nullptr)
      want->names.emplace_back(name);
    return MNL_CB_OK;
  };
  if (!dump.send(sock->get(), "RTM_GETADDR", on_addr, &match)) return {};
  return std::move(match.names);
}

}  // namespace

Result<bool> is_host_address(std::uint32_t ip) {
  ABX_ASSIGN_OR_RETURN(UniqueFd sock, route_socket(-1));
  NlRequest get(RTM_GETROUTE, 0);
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(get.nlh(), sizeof(rtmsg)));
  rtm->rtm_family = AF_INET;
  rtm->rtm_dst_len = 32;
  mnl_attr_put_u32(get.nlh(), RTA_DST, htonl(ip));
  struct Found {
    bool answered = false;
    unsigned char type = RTN_UNSPEC;
  } found;
  auto on_route = [](const nlmsghdr* m, void* data) -> int {
    auto* f = static_cast<Found*>(data);
    if (m->nlmsg_type != RTM_NEWROUTE) return MNL_CB_OK;
    f->answered = true;
    f->type = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(m))->rtm_type;
    return MNL_CB_OK;
  };
  if (Status s = get.send(sock.get(), "RTM_GETROUTE", on_route, &found); !s) {
    // No route at all: a packet to it is delivered nowhere, the host included.
    const int e = get.kernel_errno();
    if (e == ENETUNREACH || e == EHOSTUNREACH) return false;
    return s.error();
  }
  if (!found.answered) return internal_error("RTM_GETROUTE: no route in the kernel's answer");
  return found.type == RTN_LOCAL || found.type == RTN_BROADCAST;
}

namespace {

// The host's links that must go before this slot's is made: its own name, and any abx link
// holding its host address.
std::vector<std::string> stale_links(const VethInfo& info) {
  std::vector<std::string> out{info.host_if};
  for (std::string& name : links_with_address(info.host_ip)) {
    if (name != info.host_if && abx_link_name(name)) out.push_back(std::move(name));
  }
  return out;
}

}  // namespace

Status setup_veth(const VethConfig& c, const VethInfo& info, int netns_fd) {
  (void)c;
  ABX_ASSIGN_OR_RETURN(UniqueFd host, route_socket(-1));
  // A host end that holds this slot's name or address belongs to a dead sandbox whose namespace
  // the kernel is still taking down (the slot is ours now): replace it. The slot numbering is
  // machine-wide, so that sandbox may have been another abxd's, its link named with that
  // daemon's prefix; left in place, its /30 would route this sandbox's replies into it.
  for (const std::string& name : stale_links(info)) (void)delete_link(host.get(), name);
  {
    NlRequest req(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
    put_ifinfo(req.nlh(), 0);
    mnl_attr_put_strz(req.nlh(), IFLA_IFNAME, info.host_if.c_str());
    nlattr* linkinfo = mnl_attr_nest_start(req.nlh(), IFLA_LINKINFO);
    mnl_attr_put_strz(req.nlh(), IFLA_INFO_KIND, "veth");
    nlattr* data = mnl_attr_nest_start(req.nlh(), IFLA_INFO_DATA);
    nlattr* peer = mnl_attr_nest_start(req.nlh(), VETH_INFO_PEER);
    put_ifinfo(req.nlh(), 0);
    mnl_attr_put_strz(req.nlh(), IFLA_IFNAME, "eth0");
    mnl_attr_put_u32(req.nlh(), IFLA_NET_NS_FD, static_cast<std::uint32_t>(netns_fd));
    mnl_attr_nest_end(req.nlh(), peer);
    mnl_attr_nest_end(req.nlh(), data);
    mnl_attr_nest_end(req.nlh(), linkinfo);
    ABX_TRY(req.send(host.get(), "RTM_NEWLINK veth " + info.host_if));
  }
  ABX_ASSIGN_OR_RETURN(int host_index, ifindex_in(-1, info.host_if));
  no_ipv6(host.get(), host_index);
  ABX_TRY(add_addr(host.get(), host_index, info.host_ip, "RTM_NEWADDR " + info.host_if));
  ABX_TRY(link_up(host.get(), host_index, "RTM_NEWLINK up " + info.host_if));

  ABX_ASSIGN_OR_RETURN(UniqueFd inner, route_socket(netns_fd));
  ABX_ASSIGN_OR_RETURN(int eth0, ifindex_in(netns_fd, "eth0"));
  no_ipv6(inner.get(), eth0);
  ABX_TRY(add_addr(inner.get(), eth0, info.sandbox_ip, "RTM_NEWADDR eth0"));
  ABX_TRY(link_up(inner.get(), eth0, "RTM_NEWLINK up eth0"));
  NlRequest route(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
  auto* rt = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(route.nlh(), sizeof(rtmsg)));
  rt->rtm_family = AF_INET;
  rt->rtm_dst_len = 0;
  rt->rtm_table = RT_TABLE_MAIN;
  rt->rtm_protocol = RTPROT_STATIC;
  rt->rtm_scope = RT_SCOPE_UNIVERSE;
  rt->rtm_type = RTN_UNICAST;
  mnl_attr_put_u32(route.nlh(), RTA_GATEWAY, htonl(info.host_ip));
  mnl_attr_put_u32(route.nlh(), RTA_OIF, static_cast<std::uint32_t>(eth0));
  return route.send(inner.get(), "RTM_NEWROUTE default via the host end");
}

Status remove_veth(const VethInfo& info) {
  ABX_ASSIGN_OR_RETURN(UniqueFd host, route_socket(-1));
  return delete_link(host.get(), info.host_if);
}

namespace {

// Marks libnftables' netfilter socket close-on-exec: the library opens it without the flag, and
// the context lives as long as abxd, so every helper abxd execs would inherit it.
void cloexec_netfilter_sockets() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = std::atoi(e.path().filename().c_str());
    int domain = 0, protocol = 0;
    socklen_t len = sizeof domain;
    if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_NETLINK)
      continue;
    len = sizeof protocol;
    if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 ||
        protocol != NETLINK_NETFILTER)
      continue;
    int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

}  // namespace

namespace {
// Runs `script` on the process's one libnftables context; its output on success.
Result<std::string> nft_run(const std::string& script, bool handles = false) {
  // One context for the whole process, made on first use (abxd's start, when few descriptors are
  // open) and never freed. libnftables (1.0.6) opens its netfilter socket in nft_ctx_new and waits
  // on it with select(2): a socket numbered FD_SETSIZE (1024) or above aborts the process in
  // glibc's fortified FD_SET. A context per call got such a number once abxd held ~1000
  // descriptors (~330 live sandboxes; bench/density.sh). A context is not thread-safe: the lock.
  static std::mutex mu;
  static nft_ctx* ctx = nullptr;
  std::lock_guard lock(mu);
  if (!ctx) {
    // The socket takes the lowest free number; refuse rather than abort later.
    UniqueFd probe(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (probe.get() >= FD_SETSIZE)
      return Error(ErrorCode::kResourceExhausted,
                   "nftables: descriptor " + std::to_string(probe.get()) +
                       " is the lowest free one; libnftables cannot wait on descriptors of " +
                       std::to_string(FD_SETSIZE) + " or above (select)");
    probe = UniqueFd();
    ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!ctx) return Error(ErrorCode::kInternal, "nft_ctx_new failed");
    nft_ctx_buffer_output(ctx);
    nft_ctx_buffer_error(ctx);
    cloexec_netfilter_sockets();
  }
  const unsigned flags = nft_ctx_output_get_flags(ctx);
  if (handles) nft_ctx_output_set_flags(ctx, flags | NFT_CTX_OUTPUT_HANDLE);
  int rc = nft_run_cmd_from_buffer(ctx, script.c_str());
  if (handles) nft_ctx_output_set_flags(ctx, flags);
  // Reading a buffer rewinds it: both are read after every command, so a warning of one never
  // shows up in the error of the next.
  std::string err = nft_ctx_get_error_buffer(ctx);
  std::string out = nft_ctx_get_output_buffer(ctx);
  if (rc != 0)
    return Error(ErrorCode::kInternal,
                 "nftables: " + (err.empty() ? std::string("the ruleset was refused") : err));
  return out;
}
}  // namespace

Status nft_apply(const std::string& script) {
  auto out = nft_run(script);
  if (!out) return out.error();
  return {};
}

Result<std::string> nft_query(const std::string& command, bool handles) {
  return nft_run(command, handles);
}

Status write_sysctl(const std::string& key, const std::string& value) {
  std::string path = "/proc/sys/" + key;
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return os::errno_error("open " + path, errno);
  UniqueFd f(fd);
  if (os::retry_eintr([&] { return ::write(fd, value.data(), value.size()); }) < 0)
    return os::errno_error("write " + path, errno);
  return {};
}

}  // namespace abx::runtime
