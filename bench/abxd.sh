#!/usr/bin/env bash
# abxd benchmark (issue 4): create->ready through the API, proxy overhead on a command call,
# commands.run round trip, and N live sandboxes. Needs root. Not a test.
# Usage: bench/abxd.sh [--no-build] [--creates N] [--live N] [--duration S]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/lib/load.sh"  # ABX_IMAGE_STORE
cd "$(dirname "$here")"
build=1
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    *) args+=("$a") ;;
  esac
done
if [ "$build" = 1 ]; then
  mkdir -p bench/out
  echo "[bench] building abxd and friends (release preset); log: bench/out/abxd-build.log" >&2
  { cmake --preset release && cmake --build --preset release --target abxd abx-envd abx-server \
      abx_demo_commands; } >bench/out/abxd-build.log 2>&1 ||
    { tail -20 bench/out/abxd-build.log >&2; exit 1; }
fi
exec /usr/bin/python3 "$here/abxd.py" "${args[@]}"
