#include "watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include "abx/base/fd.h"
#include "abx/base/log.h"
#include "abx/base/os.h"
#include "abx/base/time.h"
#include "abx/runtime/sandbox.h"
#include "abx/store/store.h"

namespace abx::platform {
namespace fs = std::filesystem;
namespace {

// Whether the abxd named in <home>/abxd.lock is alive. Read, never locked: taking the lock even
// for a moment could make a starting abxd think another one serves the home.
bool abxd_alive(const std::string& home) {
  std::ifstream in(fs::path(home) / "abxd.lock");
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0) return false;
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

int run_watchdog(const WatchdogOptions& opt) {
  Logger log("watchdog");
  const std::string lock_path = (fs::path(opt.home) / "watchdog.lock").string();
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) {
    log.error("cannot open " + lock_path + ": " + std::strerror(errno));
    return 3;
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return 0;  // one is already watching
  const std::string state_dir = opt.home + "/sandboxes";
  std::set<std::string> done;  // destroyed (or found gone) by us: the store still says running
  log.info("watching " + opt.home);
  for (;;) {
    if (!fs::exists(fs::path(opt.home) / "abx.db")) {
      log.info("home is gone; exiting");
      return 0;
    }
    auto st = store::Store::open(fs::path(opt.home) / "abx.db");
    if (!st) {
      log.error("store: " + st.error().message());
      return 3;
    }
    auto expired = (*st)->expired(now_ms());
    // Every running or paused sandbox: the "nothing left to watch" test.
    auto live = (*st)->expired(std::numeric_limits<std::int64_t>::max());
    st->reset();  // no connection held while sleeping: abxd migrates and vacuums freely
    if (!expired || !live) {
      log.error("store: " + (!expired ? expired.error() : live.error()).message());
      return 3;
    }
    for (const auto& rec : *expired) {
      if (done.count(rec.id)) continue;
      // Paused sandboxes have no deadline (as in E2B), and one created with onTimeout "pause" is
      // left for abxd, whose reaper pauses it once it is back.
      if (rec.state == store::SandboxState::kPaused || rec.pause_on_timeout) continue;
      auto sb = runtime::Sandbox::adopt(state_dir, rec.id);
      if (!sb) {
        // already_exists: its owner (abxd) is alive and will reap it itself.
        if (sb.error().code() != ErrorCode::kAlreadyExists) done.insert(rec.id);
        continue;
      }
      Logger("watchdog", rec.id).info("deadline passed while abxd is down: killing the sandbox");
      if (Status s = sb->destroy(); !s) log.warn(rec.id + ": " + s.error().message());
      done.insert(rec.id);
    }
    bool left = false;
    // A sandbox paused to disk has no processes to watch: it waits for an abxd to resume it.
    for (const auto& rec : *live)
      if (!done.count(rec.id) && rec.checkpoint.empty()) left = true;
    if (!left && !abxd_alive(opt.home)) {
      log.info("abxd is gone and no sandbox is left; exiting");
      return 0;
    }
    std::this_thread::sleep_for(opt.period);
  }
}

Status spawn_watchdog(const std::string& exe, const std::string& home) {
  const std::string log_path = (fs::path(home) / "watchdog.log").string();
  // Everything the children need, before fork: after it only async-signal-safe calls.
  std::vector<std::string> args = {exe, "watchdog", "--home", home};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int logfd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (logfd < 0) return internal_error("open " + log_path + ": " + std::strerror(errno));
  UniqueFd owned(logfd);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return internal_error(std::string("open /dev/null: ") + std::strerror(errno));
  UniqueFd owned_null(devnull);
  pid_t child = ::fork();
  if (child < 0) return internal_error(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    // The middle process: a new session, then the watchdog as its child, then exit, so the
    // watchdog is reparented (to init or the nearest subreaper) and never abxd's zombie.
    ::setsid();
    pid_t grandchild = ::fork();
    if (grandchild != 0) _exit(grandchild < 0 ? 1 : 0);
    ::dup2(devnull, 0);
    ::dup2(logfd, 1);
    ::dup2(logfd, 2);
    // Nothing of abxd's (its listening socket above all) may outlive it in the watchdog.
    ::close_range(3, ~0u, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  os::retry_eintr([&] { return ::waitpid(child, &status, 0); });
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return internal_error("starting the watchdog failed");
  return {};
}

}  // namespace abx::platform
