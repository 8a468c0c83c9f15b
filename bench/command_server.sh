#!/usr/bin/env bash
# Command-server benchmark (issue 2): abx-server vs a Python stdlib server, FastAPI + uvicorn
# and nginx on POST /commands/demo, with wrk. Builds abx-server (release preset) first.
# Usage: bench/command_server.sh [--no-build] [options of bench/command_server.py]
#   e.g. BENCH_DURATION=2 bench/command_server.sh --servers stdlib,nginx
# Not a test: never run from .ci/run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

build=1
args=()
status=skipped
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    *) args+=("$a") ;;
  esac
done

mkdir -p bench/out
if [ "$build" = 1 ]; then
  echo "[bench] building abx-server and the demo module (release preset); log: bench/out/build.log" >&2
  if cmake --preset release >bench/out/build.log 2>&1 &&
     cmake --build --preset release --target abx-server abx_demo_commands >>bench/out/build.log 2>&1; then
    echo "[bench] build ok" >&2
    status=ok
  else
    # The peers are still measured; command_server.py prints "abx-server not built" if the
    # binary is missing (an older binary, if any, is measured and the build failure is shown).
    echo "[bench] WARNING: release build of abx-server failed; last lines of bench/out/build.log:" >&2
    tail -n 15 bench/out/build.log | sed 's/^/[bench]   /' >&2
    status=failed
  fi
fi

# Debian's python: the FastAPI peer needs python3-fastapi / python3-uvicorn, not a pyenv python.
exec /usr/bin/python3 "$here/command_server.py" --abx-build "$status" "${args[@]}"
