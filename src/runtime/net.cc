// Network namespace step (child: bring lo up) and the host's way into a sandbox's netns.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>  // SO_ORIGINAL_DST
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "abx/runtime/netns.h"
#include "child.h"
#include "sys.h"

namespace abx::runtime {

bool net_child(const ChildPlan& p, ChildReport* r) {
  if (!p.own_netns) return true;
  // A fresh netns has only lo, and it is down. SIOCSIFFLAGS is all `ip link set lo up` does.
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail(r, "socket for lo");
  ifreq ifr = {};
  ::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0 || fail(r, "ioctl SIOCGIFFLAGS lo");
  if (ok) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    ok = ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0 || fail(r, "ioctl SIOCSIFFLAGS lo up");
  }
  ::close(s);
  return ok;
}

namespace {

// The one thread that visits other network namespaces. It remembers its own netns and returns
// to it after every request, so a request never runs in a previous request's namespace.
class NetnsWorker {
 public:
  NetnsWorker() : thread_([this] { run(); }) {}
  ~NetnsWorker() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Result<UniqueFd> socket_in(int netns_fd, int domain, int type) {
    Request req{netns_fd, domain, type};
    std::unique_lock lock(mu_);
    queue_.push_back(&req);
    cv_.notify_all();
    cv_.wait(lock, [&] { return req.done; });
    if (req.err_what) return sys_error(req.err_what, req.err);
    return UniqueFd(req.fd);
  }

 private:
  struct Request {
    int netns_fd, domain, type;
    int fd = -1;
    int err = 0;
    const char* err_what = nullptr;
    bool done = false;
  };

  void run() {
    int home = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      Request* req = queue_.front();
      queue_.pop_front();
      lock.unlock();
      serve(req, home);
      lock.lock();
      req->done = true;
      cv_.notify_all();
    }
    if (home >= 0) ::close(home);
  }

  static void serve(Request* req, int home) {
    if (home < 0) {
      req->err = EBADF, req->err_what = "open /proc/thread-self/ns/net";
      return;
    }
    if (::setns(req->netns_fd, CLONE_NEWNET) != 0) {
      req->err = errno, req->err_what = "setns CLONE_NEWNET";
      return;
    }
    req->fd = ::socket(req->domain, req->type | SOCK_CLOEXEC, 0);
    if (req->fd < 0) req->err = errno, req->err_what = "socket in sandbox netns";
    if (::setns(home, CLONE_NEWNET) != 0) {
      // Cannot get home: never serve another request from the wrong namespace.
      ::abort();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request*> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// The process's worker, started on first use and deliberately never destroyed: joining it from
// a static destructor would hang in a forked child that calls exit(). A forked child does not
// have its parent's thread (a request would wait for ever), so it forgets the parent's worker
// (leaked, its mutex maybe held by a thread that is not there) and starts its own.
std::atomic<NetnsWorker*> g_worker{nullptr};

NetnsWorker* process_worker() {
  static const int forget_in_child =
      ::pthread_atfork(nullptr, nullptr, [] { g_worker.store(nullptr); });
  (void)forget_in_child;
  NetnsWorker* w = g_worker.load(std::memory_order_acquire);
  if (w) return w;
  auto* made = new NetnsWorker;
  if (g_worker.compare_exchange_strong(w, made, std::memory_order_acq_rel)) return made;
  delete made;  // another thread was first
  return w;
}

}  // namespace

Result<UniqueFd> socket_in_netns(int netns_fd, int domain, int type) {
  return process_worker()->socket_in(netns_fd, domain, type);
}

Result<UniqueFd> connect_loopback(int netns_fd, std::uint16_t port,
                                  std::chrono::milliseconds timeout) {
  Result<UniqueFd> sock = netns_fd >= 0
                              ? socket_in_netns(netns_fd, AF_INET, SOCK_STREAM | SOCK_NONBLOCK)
                              : Result<UniqueFd>(UniqueFd(::socket(
                                    AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)));
  if (!sock) return sock.error();
  if (!sock->valid()) return sys_error("socket", errno);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string where = "connect 127.0.0.1:" + std::to_string(port);
  if (::connect(sock->get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
      errno != EINPROGRESS && errno != EINTR)
    return sys_error(where, errno);
  pollfd pfd{sock->get(), POLLOUT, 0};
  int n = retry_eintr([&] { return ::poll(&pfd, 1, static_cast<int>(timeout.count())); });
  if (n < 0) return sys_error("poll " + where, errno);
  if (n == 0) return Error(ErrorCode::kDeadlineExceeded, where + ": timed out");
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(sock->get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    return sys_error("getsockopt SO_ERROR", errno);
  if (err != 0) return sys_error(where, err);
  // Nothing listens on a port of the ephemeral range, and the kernel picked that very port as
  // the source: TCP's simultaneous open connects the socket to itself. That is not a server.
  sockaddr_in local = {};
  socklen_t local_len = sizeof local;
  if (::getsockname(sock->get(), reinterpret_cast<sockaddr*>(&local), &local_len) != 0)
    return sys_error("getsockname", errno);
  if (local.sin_port == addr.sin_port && local.sin_addr.s_addr == addr.sin_addr.s_addr)
    return sys_error(where + " (connected to itself: nothing listens)", ECONNREFUSED);
  return sock;
}

Result<std::pair<std::uint32_t, std::uint16_t>> original_destination(int fd) {
  sockaddr_in addr = {};
  socklen_t len = sizeof addr;
  if (::getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &addr, &len) != 0) {
    int err = errno;
    if (err == ENOENT) {
      return not_found("getsockopt SO_ORIGINAL_DST: the connection was not redirected");
    }
    return sys_error("getsockopt SO_ORIGINAL_DST", err);
  }
  if (addr.sin_family != AF_INET) {
    return internal_error("getsockopt SO_ORIGINAL_DST: not an IPv4 address");
  }
  return std::pair<std::uint32_t, std::uint16_t>(ntohl(addr.sin_addr.s_addr), ntohs(addr.sin_port));
}

}  // namespace abx::runtime
