// A user's command module, built against the installed headers (abx::command_module).
#include <abx/registry/register.h>

#include <string>

ABX_REGISTER(std::string, greet, (std::string name, int times = 1), "Greet someone.") {
  std::string out;
  for (int i = 0; i < times; ++i) out += (i ? " " : "") + std::string("hello ") + name;
  return out;
}
