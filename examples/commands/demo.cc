// The demo command module: one command per feature of the registry.
//
//   abx-server --module libabx_demo_commands.so
//   curl -H "X-Access-Token: $T" -H 'Content-Type: application/json'
//        -d '{"x":42,"y":"world"}' localhost:49982/commands/demo   ->  {"result":"42: world"}
#include <abx/registry/register.h>

#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

ABX_REGISTER(std::string, demo, (int x, std::string y = "hello"), "Run a demo command.") {
  return std::to_string(x) + ": " + y;
}
// Quick and never blocks: run it on the I/O thread, without a hop to the worker pool. sleep_ms
// below stays on the pool, under the call deadline.
ABX_INLINE(demo);

ABX_REGISTER(std::int64_t, add, (std::int64_t a, std::int64_t b = 0), "Add two integers.") {
  return a + b;
}

ABX_REGISTER(double, scale, (double value, double factor = 2.5), "Multiply a number by a factor.") {
  return value * factor;
}

ABX_REGISTER(bool, is_even, (long n), "Whether n is even.") { return n % 2 == 0; }

ABX_REGISTER((std::map<std::string, std::int64_t>), word_lengths, (std::string text),
             "Length of each space-separated word.") {
  std::map<std::string, std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out[text.substr(start, end - start)] = static_cast<std::int64_t>(end - start);
    start = end + 1;
  }
  return out;
}

ABX_REGISTER(std::vector<std::string>, repeat,
             (std::string word, int times = 3, bool upper = false),
             "Repeat a word, optionally upper-cased.") {
  if (times < 0 || times > 1000) throw std::out_of_range("times must be between 0 and 1000");
  if (upper) {
    for (auto& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return std::vector<std::string>(static_cast<std::size_t>(times), word);
}

ABX_REGISTER(double, divide, (double a, double b), "Divide a by b; fails on division by zero.") {
  if (b == 0) throw std::domain_error("division by zero");
  return a / b;
}

ABX_REGISTER(std::string, sleep_ms, (int ms = 1000), "Sleep, then answer: a slow call.") {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return "slept " + std::to_string(ms) + " ms";
}

ABX_REGISTER(void, noop, (), "Do nothing; returns null.") {}
