// Test images: root filesystems and layers (overlay format) for sandboxes built from Debian's
// busybox-static and musl-tools, so tests need no registry. Each helper writes into an existing
// empty directory and returns false (with *why set) when a tool it needs is missing, so a test
// can GTEST_SKIP with that reason.
#pragma once

#include <filesystem>
#include <string>

namespace abx::testing {

// /bin/busybox (static) with a symlink per applet in /bin (sh, ls, cat, dd, ...), /etc/passwd
// and /etc/group with root and user (1000), /home/user, /root, /tmp. No libc at all.
bool make_busybox_layer(const std::filesystem::path& dir, std::string* why);

// A musl system and nothing else: /lib/ld-musl-x86_64.so.1 (a copy of musl's libc.so, which is
// also its dynamic loader) and /bin/hello, a musl-dynamic program printing "hello from musl" (built
// with musl-gcc), /etc/passwd with root, /tmp.
bool make_musl_layer(const std::filesystem::path& dir, std::string* why);

}  // namespace abx::testing
