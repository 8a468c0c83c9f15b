#!/usr/bin/env bash
# The installed SDK, end to end: `cmake --install` of this build into a temporary prefix; a
# consumer program and a command module built against it with find_package(abx) (and the program
# again with pkg-config); the real abx-server serving the module; the program calling it.
# ctest passes ABX_BUILD_DIR (the build to install) and ABX_SERVER_BIN.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/abx-sdk-consumer.XXXXXX")"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$ABX_BUILD_DIR" --prefix "$work/prefix" --component sdk >/dev/null
test -f "$work/prefix/lib/cmake/abx/abxConfig.cmake"
test -f "$work/prefix/include/abx/client/sandbox.h"
# The private tree stays private: no http/platform/runtime headers in the prefix.
if [ -e "$work/prefix/include/abx/http" ] || [ -e "$work/prefix/include/abx/runtime" ]; then
  echo "sdk: private headers installed" >&2
  exit 1
fi

# Without ccache or the tree's flags: a user's own build.
env -u CMAKE_CXX_COMPILER_LAUNCHER cmake -S "$here" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }

# pkg-config: the same program with one compiler line.
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --exists abx
# shellcheck disable=SC2046
c++ -o "$work/consumer-pc" "$here/consumer.cc" \
  $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs abx) \
  -Wl,-rpath,"$work/prefix/lib"

token="sdk-consumer-token-0123456789abcdef"
ABX_ACCESS_TOKEN="$token" "$ABX_SERVER_BIN" --module "$work/build/libmy_commands.so" --port 0 \
  --log-level warn >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port="$(sed -n 's/.*listening on .*:\([0-9][0-9]*\).*/\1/p' "$work/server.out" 2>/dev/null | head -1 || true)"
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "sdk: abx-server did not start:" >&2
  cat "$work/server.err" >&2
  exit 1
fi

want='"hello sdk hello sdk"'
for bin in "$work/build/consumer" "$work/consumer-pc"; do
  got="$("$bin" "http://127.0.0.1:$port" "$token")"
  if [ "$got" != "$want" ]; then
    echo "sdk: $bin printed $got, want $want" >&2
    exit 1
  fi
done
# A wrong token is the server's 401, surfaced as the SDK's error (exit 1), not a crash.
if "$work/build/consumer" "http://127.0.0.1:$port" wrong-token 2>"$work/err"; then
  echo "sdk: a wrong token succeeded" >&2
  exit 1
fi
grep -qi "unauth\|token" "$work/err"
echo "sdk: installed package, find_package and pkg-config consumers, and a user module: ok"
