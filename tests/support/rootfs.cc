#include "abx/testing/rootfs.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace abx::testing {
namespace fs = std::filesystem;

namespace {

// Output of a shell command, and whether it exited 0.
bool run(const std::string& cmd, std::string* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  return ::pclose(p) == 0;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

void base_dirs(const fs::path& dir) {
  for (const char* d : {"tmp", "root", "etc"}) fs::create_directories(dir / d);
  fs::permissions(dir / "tmp", fs::perms::all | fs::perms::sticky_bit);
}

}  // namespace

bool make_busybox_layer(const fs::path& dir, std::string* why) {
  const fs::path busybox = "/bin/busybox";
  std::string list;
  if (!fs::exists(busybox) || !run(busybox.string() + " --list", &list)) {
    *why = "no /bin/busybox (Debian busybox-static; scripts/install-deps.sh)";
    return false;
  }
  fs::create_directories(dir / "bin");
  fs::copy_file(busybox, dir / "bin/busybox");
  std::istringstream in(list);
  for (std::string applet; std::getline(in, applet);) {
    if (applet.empty() || applet == "busybox") continue;
    std::error_code ec;
    fs::create_symlink("busybox", dir / "bin" / applet, ec);
  }
  base_dirs(dir);
  fs::create_directories(dir / "home/user");
  write(dir / "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n");
  write(dir / "etc/group", "root:x:0:\nuser:x:1000:\n");
  return true;
}

bool make_musl_layer(const fs::path& dir, std::string* why) {
  // Debian's musl package: the library (also the dynamic loader) and the loader's symlink.
  fs::path libc = "/lib/x86_64-linux-musl/libc.so";
  if (!fs::exists(libc)) libc = "/usr/lib/musl/lib/libc.so";  // upstream's layout
  std::string out;
  if (!fs::exists(libc) || !run("command -v musl-gcc", &out)) {
    *why = "no musl-gcc (Debian musl-tools; scripts/install-deps.sh)";
    return false;
  }
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "lib");
  fs::path src = dir / "hello.c";
  write(src, "#include <stdio.h>\nint main(void) { puts(\"hello from musl\"); return 0; }\n");
  out.clear();
  if (!run("musl-gcc -O1 -o '" + (dir / "bin/hello").string() + "' '" + src.string() + "' 2>&1",
           &out)) {
    *why = "musl-gcc failed: " + out;
    return false;
  }
  fs::remove(src);
  fs::copy_file(libc, dir / "lib/ld-musl-x86_64.so.1");
  base_dirs(dir);
  write(dir / "etc/passwd", "root:x:0:0:root:/root:/bin/hello\n");
  return true;
}

}  // namespace abx::testing
