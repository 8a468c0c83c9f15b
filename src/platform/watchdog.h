// The deadline watchdog: sandboxes die at their deadline even while abxd is down.
//
// abxd's reaper kills a sandbox when its deadline passes, but sandboxes outlive abxd (they are
// adopted by the next one), so an abxd that crashed and never came back would leave them running
// forever. `abxd watchdog` is a small detached process, one per home (an flock on
// <home>/watchdog.lock), that abxd starts at boot. Every second it asks the store for running
// sandboxes past their deadline (not paused ones, which have none, as in E2B, nor ones created
// with onTimeout "pause": the next abxd pauses those) and, for each one whose state directory
// nobody holds
// (its owner, abxd, is gone: a live abxd keeps every sandbox's directory locked), adopts and
// destroys it. While abxd runs it does nothing; the next abxd finds those sandboxes dead and
// marks them killed. It exits once abxd is gone and no sandbox is left running or paused, or when
// the home disappears. Its output goes to <home>/watchdog.log.
#pragma once

#include <chrono>
#include <string>

#include "abx/base/error.h"

namespace abx::platform {

struct WatchdogOptions {
  std::string home;
  std::chrono::milliseconds period{1000};
};

// Runs the loop until there is nothing left to watch; returns the exit code. Returns 0 at once if
// another watchdog holds the home.
int run_watchdog(const WatchdogOptions& options);

// Starts `exe watchdog --home <home>` detached (own session, reparented to init, every
// descriptor but the log closed), without waiting for it.
Status spawn_watchdog(const std::string& exe, const std::string& home);

}  // namespace abx::platform
