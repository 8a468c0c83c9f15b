// Fuzz target: `-a NAME=VALUE` conversion and custom-command placeholder substitution.
// Input: lines; each is one -a item for a command with one argument of each type. The same
// bytes are then substituted as a string value into a custom command, which must come out as
// exactly the template with the value single-quoted (or be refused).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "abx/templates/template.h"
#include "cli.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  abx::client::CommandEntry e;
  e.name = "f";
  using abx::client::ArgType;
  e.args = {{"s", ArgType::kString, false, nullptr, ""},
            {"i", ArgType::kInteger, true, nullptr, ""},
            {"f", ArgType::kFloat, false, nullptr, ""},
            {"b", ArgType::kBoolean, false, nullptr, ""}};
  std::vector<std::string> items;
  std::size_t start = 0;
  for (std::size_t nl; (nl = in.find('\n', start)) != std::string::npos; start = nl + 1)
    items.push_back(in.substr(start, nl - start));
  items.push_back(in.substr(start));
  auto r = abx::cli::parse_command_args(e, items);
  if (r.ok() && !r->contains("i")) std::abort();  // a required argument slipped through

  abx::templates::CustomCommand c;
  c.name = "c";
  c.command = "printf %s {s}";
  c.args.emplace_back("s", "string", true);
  auto rendered = abx::templates::render_custom_command(c, boost::json::object{{"s", in}});
  if (rendered.ok() && *rendered != "printf %s " + abx::templates::shell_quote(in)) std::abort();
  return 0;
}
