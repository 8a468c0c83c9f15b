#!/usr/bin/env bash
# Sandbox creation benchmark (issue 3): abx Sandbox::spawn -> /bin/true exited, vs bwrap and
# unshare(1), p50/p95/p99 over N sequential and 32 parallel runs. Builds the release preset's
# sandbox_create target first. Needs root and Debian's bubblewrap (scripts/install-deps.sh).
# Usage: bench/sandbox_create.sh [--no-build] [--runs N] [--parallel P]
#   (other options given to bench/run.sh are for other benchmarks and are ignored here)
# Not a test: never run from .ci/run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

build=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --runs|--parallel) args+=("$1" "$2"); shift ;;
    *) ;;
  esac
  shift
done

mkdir -p bench/out
if [ "$build" = 1 ]; then
  echo "[bench] building sandbox_create (release preset); log: bench/out/sandbox_create-build.log" >&2
  cmake --preset release >bench/out/sandbox_create-build.log 2>&1
  cmake --build --preset release --target sandbox_create >>bench/out/sandbox_create-build.log 2>&1
fi
bin="$root/build/release/bench/sandbox_create/sandbox_create"
[ -x "$bin" ] || { echo "[bench] $bin not built" >&2; exit 1; }
"$bin" "${args[@]+"${args[@]}"}" | tee bench/out/sandbox_create.txt
# bench/run.sh's summary rows: abx's spawn -> /bin/true exited p50 beside bwrap's, per mode.
# shellcheck source=/dev/null
. "$here/lib/load.sh"
for mode in sequential parallel; do
  abx=$(awk -v m="$mode" '$1 == m && $2 == "abx" {print $5}' bench/out/sandbox_create.txt)
  bw=$(awk -v m="$mode" '$1 == m && $2 == "bwrap" && NF == 8 {print $5}' bench/out/sandbox_create.txt)
  [ -n "$abx" ] && bench_row sandbox_create "spawn -> /bin/true exited, $mode, p50" "$abx" \
    "$([ -n "$bw" ] && echo bwrap || echo -)" "${bw:--}" ms lower
done
true
