// A second command module for the MCP e2e test: commands with ABX_HINTS, loaded next to the
// demo module, so tool annotations are checked through dlopen and the real abx-server.
#include <abx/registry/register.h>

#include <string>

ABX_REGISTER(std::string, lookup, (std::string key), "Look up a key; never changes anything.") {
  return "value of " + key;
}
ABX_HINTS(lookup, .read_only = true, .idempotent = true);

ABX_REGISTER(bool, wipe, (bool confirm = false), "Pretend to wipe everything.") { return confirm; }
ABX_HINTS(wipe, .read_only = false, .destructive = true, .idempotent = true);
