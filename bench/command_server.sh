#!/usr/bin/env bash
# Command-server benchmark (issue 2): abx-server vs a Python stdlib server, FastAPI + uvicorn
# and nginx on POST /commands/demo, with wrk. Builds abx-server (release preset) first.
# Usage: bench/command_server.sh [--no-build] [--no-werror] [options of bench/command_server.py]
#   --no-werror  build into build/bench-release (release preset, same flags, ABX_WERROR=OFF) and
#                measure that binary: for when the release preset fails on a warning only.
#   e.g. BENCH_DURATION=2 bench/command_server.sh --servers stdlib,nginx
# Not a test: never run from .ci/run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

build=1
werror=1
args=()
status=skipped
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --no-werror) werror=0 ;;
    *) args+=("$a") ;;
  esac
done

mkdir -p bench/out
if [ "$build" = 1 ]; then
  echo "[bench] building abx-server and the demo module (release preset); log: bench/out/build.log" >&2
  if [ "$werror" = 1 ]; then
    configure=(cmake --preset release)
    compile=(cmake --build --preset release --target abx-server abx_demo_commands)
  else
    configure=(cmake --preset release -B build/bench-release -DABX_WERROR=OFF)
    compile=(cmake --build build/bench-release --target abx-server abx_demo_commands)
  fi
  echo "[bench] ${configure[*]} && ${compile[*]}" >&2
  if "${configure[@]}" >bench/out/build.log 2>&1 && "${compile[@]}" >>bench/out/build.log 2>&1; then
    echo "[bench] build ok" >&2
    status=ok
  else
    # The peers are still measured; command_server.py prints "abx-server not built" if the
    # binary is missing (an older binary, if any, is measured and the build failure is shown).
    echo "[bench] WARNING: release build of abx-server failed; from bench/out/build.log:" >&2
    { grep -m 8 -E 'error|Error' bench/out/build.log || tail -n 15 bench/out/build.log; } |
      cut -c1-300 | sed 's/^/[bench]   /' >&2
    status=failed
  fi
fi

if [ "$werror" = 0 ]; then
  args=(--abx-server build/bench-release/src/server/abx-server
        --abx-module build/bench-release/examples/commands/libabx_demo_commands.so
        --abx-note "built with ABX_WERROR=OFF into build/bench-release (release flags otherwise)"
        "${args[@]}")
fi

# Debian's python: the FastAPI peer needs python3-fastapi / python3-uvicorn, not a pyenv python.
exec /usr/bin/python3 "$here/command_server.py" --abx-build "$status" "${args[@]}"
